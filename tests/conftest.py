from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
SAMPLES = REPO / "samples"


def shared_data(sub: str) -> Path:
    path = SHARED_DATA / sub
    if not path.exists():
        pytest.skip(f"{path} is missing: the shared data folder is laid beside the checkout "
                    "on the project's machines only")
    return path


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """The real `ocrcli` entry point in a subprocess."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.run([sys.executable, "-m", "ocrcli.cli", *args], capture_output=True,
                          text=True, cwd=cwd or REPO, timeout=timeout, env=env)
