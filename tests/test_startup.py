"""Start-up: what `ocrcli --help` and a lone image's conversion load (not how long they take;
scripts/bench_startup.py measures that)."""

from __future__ import annotations

import subprocess
import sys

import orjson
from PIL import Image

from tests.conftest import REPO, run_cli

HEAVY = ("torch", "transformers", "numpy", "pypdfium2", "PIL", "safetensors")


def imported(args: list[str]) -> set[str]:
    """Top-level packages a subprocess imported, from `python -X importtime`."""
    r = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip().split(".")[0]
            for line in r.stderr.splitlines() if line.startswith("import time:")}


def test_help_loads_neither_torch_nor_the_document_libraries():
    assert not imported(["-m", "ocrcli.cli", "--help"]) & set(HEAVY)
    assert not imported(["-m", "ocrcli.cli", "convert", "--help"]) & set(HEAVY)


def test_page_preparation_in_a_render_worker_needs_no_torch():
    """A render worker unpickles the built-in model's page preparation: numpy and Pillow,
    not the model (torch would add seconds to every worker's start)."""
    probe = ("import pickle, sys\nfrom functools import partial\n"
             "from ocrcli.models.builtin import LinePageAdapter\n"
             "import ocrcli.render\n"
             "pickle.loads(pickle.dumps(partial(LinePageAdapter(384).page_requests, "
             "max_new_tokens=8)))\nprint('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert r.stdout.split() == ["False"], r.stdout + r.stderr


def test_marking_a_constant_result_is_what_torch_does():
    """layers.assume_constant_result stands in for torch.compiler.assume_constant_result
    (which imports torch._dynamo): both must leave the same mark on the function."""
    import torch

    from ocrcli.models.layers import assume_constant_result

    def ours():
        return True

    def torchs():
        return True

    assert assume_constant_result(ours) is ours
    assert torch.compiler.assume_constant_result(torchs) is torchs
    assert vars(ours) == vars(torchs) != {}


def test_a_blank_64_pixel_png_converts(tmp_path):
    src, out = tmp_path / "blank.png", tmp_path / "out"
    Image.new("RGB", (64, 64), "white").save(src)
    r = run_cli("convert", str(src), "-o", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    assert (out / "blank.png.md").read_text() == "<!-- page 1 -->\n"
    assert (out / "blank.png" / "page-0001.md").exists()
    record = orjson.loads((out / "blank.png" / "page-0001.json").read_bytes())
    assert (record["status"], record["text"], record["width"]) == ("ok", "", 64)
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["pages"]["ok"] == 1 and summary["exit_code"] == 0
