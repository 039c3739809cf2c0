"""scripts/gpu_check.py at tiny sizes on the CPU: the GPU check's code paths cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_gpu_check_runs_on_the_cpu_and_reports_every_section():
    done = subprocess.run([sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--tiny",
                           "--decode-tokens", "12"], capture_output=True, text=True, cwd=REPO,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    for arch, tiny in report["a_tiny_checkpoints"].items():
        assert tiny["exit_codes"] == [0, 0] and not tiny["tracebacks"], arch
        assert tiny["markdown_identical"], arch  # lossless: the CPU in float32
        assert tiny["spec_equals_greedy_tokens"] == 1.0 and tiny["top1_agreement_vs_cpu_float32"] == 1.0
    rows = report["b_decode"]
    assert {r["arch"] for r in rows} == {"deepseek-ocr", "jina-ocr-v1"}
    assert any(r["captured"] for r in rows) and not any(r.get("capture_error") for r in rows)
    assert all(r.get("identical_to_greedy", True) for r in rows)
    assert all(r["decode_tokens_per_s"] > 0 and r["roofline_fraction"] > 0 for r in rows)
    assert report["c_convert"]["exit"] in (0, 1) and not report["c_convert"]["traceback"]
