"""Model folders for tests: the hostile ones and the looping built-in model (in
ocrcli/testing/model_folders.py, which scripts/stress.py shares), and the tiny DeepSeek-OCR /
Jina-OCR-v1 checkpoints of scripts/make_tiny_checkpoint.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ocrcli.testing.model_folders import (  # noqa: F401
    corrupt_weights,
    looping_model,
    pickle_only,
    remote_code,
)


def tiny_checkpoint_writer():
    """`write_tiny_checkpoint` from scripts/make_tiny_checkpoint.py (scripts/ is no package)."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "make_tiny_checkpoint.py"
    spec = importlib.util.spec_from_file_location("make_tiny_checkpoint", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_tiny_checkpoint
