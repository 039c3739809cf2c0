from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# One math thread in the test process (and the CLI runs it starts), unless OMP_NUM_THREADS is
# set: the models under test are small, and where other jobs share the cores, OpenMP threads
# spin-wait for each other and a test runs ten times slower (ocrcli.testing.harness does the
# same for the runs it judges). Set here, before any test module imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
# Real documents for measuring (the olmOCR-Bench sample, hard real-world PDFs, PubTabNet's
# TEDS pairs) are not shipped: OCRCLI_REAL_DATA names their folder; tests that need them skip.
REAL_DATA = Path(os.environ.get("OCRCLI_REAL_DATA", REPO.parent / "shared" / "data"))
SAMPLES = REPO / "samples"


def real_data(sub: str) -> Path:
    path = REAL_DATA / sub
    if not path.exists():
        pytest.skip(f"{path} is missing: set OCRCLI_REAL_DATA to a folder holding "
                    "olmocr-bench-sample/, gnarly-pdfs/ and pubtabnet-teds/")
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
