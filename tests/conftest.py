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


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 900,
            stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real `ocrcli` entry point in a subprocess (`stdin`: text piped in; `env`:
    variables set on top of this process's)."""
    env = dict(os.environ) | (env or {})
    env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.run([sys.executable, "-m", "ocrcli.cli", *args], capture_output=True,
                          text=True, cwd=cwd or REPO, timeout=timeout, env=env,
                          input=stdin)
