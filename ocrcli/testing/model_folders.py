"""Model folders for the tests and scripts/stress.py: hostile ones that must be refused
without running anything inside them, a real built-in model whose weights make it loop, and
the tiny DeepSeek-OCR / Jina-OCR-v1 checkpoints of scripts/make_tiny_checkpoint.py."""

from __future__ import annotations

import importlib.util
import json
import pickle
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ocrcli.models.builtin import BUILTIN_DIR


class _WritesMarker:
    """Unpickling this creates `marker`: proof that a pickle was loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "a pickle was loaded"))


def pickle_only(folder: Path, marker: Path) -> Path:
    """A folder whose only weights are a pickle that would write `marker` when loaded."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["DeepseekOCRForCausalLM"],
                                                    "model_type": "deepseek_vl_v2"}))
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {}}}))
    for name in ("pytorch_model.bin", "model.pt", "model.ckpt"):
        (folder / name).write_bytes(pickle.dumps(_WritesMarker(marker)))
    return folder


def remote_code(folder: Path, marker: Path) -> Path:
    """A folder asking for trust_remote_code, with Python that writes `marker` on import."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["EvilForCausalLM"], "model_type": "evil", "trust_remote_code": True,
        "auto_map": {"AutoModel": "modeling_evil.EvilForCausalLM",
                     "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}}))
    code = f"from pathlib import Path\nPath({str(marker)!r}).write_text('remote code ran')\n"
    for name in ("modeling_evil.py", "configuration_evil.py", "__init__.py"):
        (folder / name).write_text(code)
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {}}}))
    save_file({"x": torch.zeros(2)}, str(folder / "model.safetensors"))
    return folder


def _builtin_copy(folder: Path) -> Path:
    shutil.copytree(BUILTIN_DIR, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return folder


def corrupt_weights(folder: Path) -> Path:
    """The built-in model's folder with its safetensors file overwritten by junk."""
    _builtin_copy(folder)
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{junk}" * 100)
    return folder


def looping_model(folder: Path) -> Path:
    """The built-in model with its final norm zeroed: every logit is 0, so greedy decoding
    repeats token 0 forever on every page. Real weights, real code; only the guard ends it."""
    _builtin_copy(folder)
    weights = folder / "model.safetensors"
    state = load_file(str(weights))
    state["norm.weight"] = torch.zeros_like(state["norm.weight"])
    save_file(state, str(weights))
    return folder


def tiny_checkpoint_writer():
    """`write_tiny_checkpoint` from scripts/make_tiny_checkpoint.py (scripts/ is no package)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "make_tiny_checkpoint.py"
    spec = importlib.util.spec_from_file_location("make_tiny_checkpoint", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_tiny_checkpoint
