"""The resume fingerprint: what can change a page's output, hashed. A page file written under
the run's fingerprint is done; one written under another is converted again."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import orjson

from ocrcli.models.identity import ModelIdentity
from ocrcli.settings import ConvertSettings

if TYPE_CHECKING:  # torch loads only when a page is to be decoded
    from ocrcli.models.base import LoadedModel


def fingerprint(identity: ModelIdentity, image_mode: str | None, s: ConvertSettings,
                max_new: int) -> str:
    """What can change a page's output. Draft settings cannot, so they are left out."""
    key = {"model": identity.model_id, "weights": identity.weights_hash, "prompt": s.prompt or "",
           "dpi": s.dpi, "max_pixels": s.max_pixels, "max_new_tokens": max_new}
    if not s.rereads:  # only when off, so that fingerprints of runs with rereads stay
        key["rereads"] = False
    if image_mode is not None:  # full-page models only, so the built-in's fingerprints stay
        key["mode"] = image_mode
    return hashlib.sha256(orjson.dumps(key, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def loaded_fingerprint(loaded: LoadedModel, s: ConvertSettings, max_new: int) -> str:
    image_mode = getattr(getattr(loaded.adapter, "mode", None), "name", None)
    return fingerprint(ModelIdentity(loaded.model_id, loaded.weights_hash), image_mode, s, max_new)
