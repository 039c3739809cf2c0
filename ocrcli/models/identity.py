"""What a model is, for the resume fingerprint, learnt without loading it (and without torch).

A rerun over finished pages needs only the fingerprint to skip them all. Importing torch and
building a model would take most of such a rerun's time; hashing a few files does not.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"
BUILTIN_MAX_NEW_TOKENS = 160  # the built-in's token cap per line: its longest lines hold 120 characters
# The dpi a PDF page is rendered at when --dpi is not given. The built-in model lays a page out
# as at 144 dpi and cuts its line crops from the page as rendered: at 288 dpi small print
# reaches the reader with twice the detail (scripts/eval_render_dpi.py). The full-page models
# resize a page to their own input size, for which 144 dpi (DeepSeek-OCR's PDF script's) is ample.
BUILTIN_RENDER_DPI = 288
FULL_PAGE_RENDER_DPI = 144


@dataclass(frozen=True)
class ModelIdentity:
    model_id: str
    weights_hash: str
    default_max_new_tokens: int = 0  # the model's token cap per request (0: learnt by loading it)


_FINGERPRINTS: dict[tuple, str] = {}  # builtin_fingerprint's, by the files' identity and stat


def builtin_fingerprint(folder: Path, code_dir: Path = BUILTIN_DIR) -> str:
    """The built-in reader's identity: its weights, config and tokenizer, and the code that
    turns a page into line crops and line texts back into Markdown (every module in
    `models/builtin/`). A change to the layout step changes the pages it writes as surely as
    new weights do, so a resumed run must not keep pages that the old code wrote."""
    paths = [folder / "model.safetensors", folder / "config.json", folder / "tokenizer.json",
             *sorted(code_dir.glob("*.py"))]
    # A run asks twice (quick_identity, then the loader): the files are hashed once per
    # process unless one of them changed in between.
    key = tuple((str(p), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                for p, st in ((p, p.stat()) for p in paths))
    if key in _FINGERPRINTS:
        return _FINGERPRINTS[key]
    h = hashlib.sha256()
    for path in paths:
        h.update(path.name.encode() + b"\0")
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    _FINGERPRINTS[key] = h.hexdigest()[:16]
    return _FINGERPRINTS[key]


def is_builtin_folder(folder: Path) -> bool:
    """Whether `folder` holds a built-in model (a trained export, or the shipped one)."""
    try:
        return json.loads((folder / "config.json").read_text()).get("architecture") == "ocrcli-builtin"
    except (OSError, ValueError):
        return False


def is_builtin_model(name: str) -> bool:
    """Whether `--model name` is a built-in model: its name, or a folder holding one."""
    path = Path(name).expanduser()
    return name == "builtin" or (path.is_dir() and is_builtin_folder(path))


def default_render_dpi(model: str) -> int:
    """The dpi a PDF page is rendered at for `--model model` when `--dpi` is not given."""
    return BUILTIN_RENDER_DPI if is_builtin_model(model) else FULL_PAGE_RENDER_DPI


def quick_identity(name: str) -> ModelIdentity | None:
    """The identity `load_model(name)` would report, where it is cheap to know: the built-in
    model. None for the rest, which are then loaded to find out."""
    if name != "builtin":
        return None
    try:
        return ModelIdentity("builtin", builtin_fingerprint(BUILTIN_DIR), BUILTIN_MAX_NEW_TOKENS)
    except OSError:
        return None  # the loader will say what is wrong
