"""What a model is, for the resume fingerprint, learnt without loading it (and without torch).

A rerun over finished pages needs only the fingerprint to skip them all. Importing torch and
building a model would take most of such a rerun's time; hashing the weights file does not.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"


@dataclass(frozen=True)
class ModelIdentity:
    model_id: str
    weights_hash: str


def weights_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def quick_identity(name: str) -> ModelIdentity | None:
    """The identity `load_model(name)` would report, where it is cheap to know: the built-in
    model. None for the rest, which are then loaded to find out."""
    if name != "builtin":
        return None
    weights = BUILTIN_DIR / "model.safetensors"
    try:
        return ModelIdentity("builtin", weights_hash(weights))
    except OSError:
        return None  # the loader will say what is wrong
