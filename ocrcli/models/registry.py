"""Model names -> loaders: the built-in model, known hub ids, and local folders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ocrcli.errors import ModelLoadError, UsageError
from ocrcli.models import builtin
from ocrcli.models.base import LoadedModel
from ocrcli.models.device import check_device
from ocrcli.models.identity import is_builtin_model

__all__ = ["KNOWN_MODELS", "ModelLoadError", "load_model", "resolve_device"]


@dataclass(frozen=True)
class KnownModel:
    name: str
    description: str
    hub: bool  # weights come from the Hugging Face hub


KNOWN_MODELS = (
    KnownModel("builtin", "small line reader with an MTP draft head, shipped in the package "
               "(CPU, offline)", hub=False),
    KnownModel("deepseek-ai/DeepSeek-OCR", "DeepSeek-OCR 3B MoE (GPU), no draft head", hub=True),
    KnownModel("jinaai/jina-ocr-v1", "Jina-OCR-v1 3B MoE with a FastMTP head (GPU; CC BY-NC 4.0)",
               hub=True),
)


def resolve_device(device: str) -> str:
    if check_device(device) == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"--device {device}: no CUDA device is available here; use --device cpu")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ModelLoadError("--device mps: no Apple GPU is available here; use --device cpu")
    return device


def load_model(
    name: str, device: str = "cpu", mode: str | None = None, prompt: str | None = None
) -> LoadedModel:
    """Load by name (`builtin`, a hub id) or from a local folder.

    `mode` is DeepSeek-OCR's image mode (`--mode`; None: the model's default, Gundam);
    `prompt` replaces its instruction (`--prompt`). The built-in line reader has no image
    modes, so a mode given for it is a usage error rather than silently ignored.
    """
    if mode is not None:  # DeepSeek-OCR's package loads only where it is needed
        from ocrcli.models.deepseek_ocr.preprocess import MODES

        if mode not in MODES:
            raise UsageError(f"--mode {mode}: use one of {', '.join(MODES)}")
    path = Path(name).expanduser()
    builtin_folder = is_builtin_model(name)
    if builtin_folder and mode is not None:
        raise UsageError(f"--mode {mode}: the built-in model reads text lines and has no image "
                         "modes; --mode applies to DeepSeek-OCR and Jina-OCR-v1")
    if name == "builtin":
        return builtin.load(builtin.BUILTIN_DIR, device)
    if path.is_dir():
        if builtin_folder:
            return builtin.load(path, device, model_id=str(path))
        return _load_deepseek(str(path), device, mode, prompt)
    if path.exists():
        raise ModelLoadError(f"--model {name}: a model is a folder (config.json, safetensors, "
                             "tokenizer.json), not a file")
    if "/" in name and not name.startswith((".", "/")):
        return _load_deepseek(name, device, mode, prompt)
    raise ModelLoadError(f"--model {name}: no such folder, and not a known model name "
                         "(see `ocrcli models`)")


def _load_deepseek(name: str, device: str, mode: str | None, prompt: str | None) -> LoadedModel:
    try:
        from ocrcli.models import deepseek_ocr
    except ImportError as exc:  # pragma: no cover - the package ships it
        raise ModelLoadError(f"DeepSeek-OCR support is unavailable: {exc}") from None
    if not hasattr(deepseek_ocr, "load"):
        raise ModelLoadError("DeepSeek-OCR / Jina-OCR-v1 loading is not implemented in this "
                             "version; use --model builtin")
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    return deepseek_ocr.load(name, device, dtype, mode=mode or "gundam", instruction=prompt)
