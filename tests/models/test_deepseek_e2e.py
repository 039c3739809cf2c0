"""`ocrcli convert --model <tiny DeepSeek-OCR / Jina-OCR-v1 folder>`: the real entry point in
subprocesses, on real sample files, through the renderer, the engine and the output tree.

The pages are a subset of samples/: memo.jpg (an image) and report.pdf page 1 (a PDF page),
two pages per run, to keep 24 runs (2 archs x 6 image modes x 2 draft depths) in about a
minute on two cores. The checkpoints are written by scripts/make_tiny_checkpoint.py with
`draftable=True`, so Jina's MTP head proposes tokens the main model often accepts and the
multi-token accept / reject / rollback paths run; DeepSeek-OCR has no head, so for it depth
3 is greedy as well and the comparison checks that runs are deterministic.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ocrcli.errors import ExitCode, ModelLoadError, OcrCliError
from ocrcli.models.deepseek_ocr import DEEPSEEK_OCR, JINA_OCR_V1
from ocrcli.models.deepseek_ocr.preprocess import MODES
from ocrcli.testing.model_folders import tiny_checkpoint_writer
from tests.conftest import REPO, SAMPLES, run_cli

INPUTS = [str(SAMPLES / "memo.jpg"), str(SAMPLES / "report.pdf"), "--pages", "1"]
MAX_NEW = "48"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    write = tiny_checkpoint_writer()
    base = tmp_path_factory.mktemp("tiny-e2e")
    return {
        DEEPSEEK_OCR: write(base / "deepseek", DEEPSEEK_OCR, seed=3, index=False, draftable=True),
        JINA_OCR_V1: write(base / "jina", JINA_OCR_V1, seed=4, shards=2, draftable=True),
    }


def _start(*args: str) -> subprocess.Popen:
    """The entry point as tests/conftest.run_cli runs it, started without waiting, so that
    the two depths of a case run side by side (one thread each)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "ocrcli.cli", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _outputs(out: Path) -> dict[str, bytes]:
    """Every Markdown file of the run, and each page JSON's output fields."""
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.md"))}
    for p in sorted(out.rglob("page-*.json")):
        page = json.loads(p.read_text())
        files[str(p.relative_to(out))] = json.dumps(
            {k: page[k] for k in ("text", "status", "tokens", "error")}).encode()
    return files


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("arch", [DEEPSEEK_OCR, JINA_OCR_V1])
def test_convert_in_every_mode_is_identical_with_and_without_drafts(checkpoints, tmp_path,
                                                                    arch, mode):
    runs = {}
    for depth in (0, 3):
        out = tmp_path / f"depth{depth}"
        runs[depth] = out, _start("convert", *INPUTS, "-o", str(out), "--model",
                                  str(checkpoints[arch]), "--device", "cpu", "--mode", mode,
                                  "--draft-depth", str(depth), "--max-new-tokens", MAX_NEW,
                                      "--accept", "truncated,degenerate",
                                  "--render-workers", "0", "--log", "plain", "--summary", "-")
    summaries = {}
    for depth, (out, proc) in runs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        summaries[depth] = json.loads(stdout)
        assert summaries[depth]["pages"]["converted"] == 2, stderr
        pages = sorted(out.rglob("page-*.json"))  # one per input, however the tree names them
        assert len(pages) == 2, [str(p) for p in pages]
        for path in pages:
            page = json.loads(path.read_text())
            assert page["status"] in ("ok", "truncated", "degenerate") and page["page"] == 1
            assert page["text"] and path.with_suffix(".md").exists()
    greedy, speculative = (_outputs(runs[d][0]) for d in (0, 3))
    assert len(greedy) == 6  # 2 pages: page .md, page .json, document .md
    assert greedy == speculative
    assert summaries[0]["fingerprint"] == summaries[3]["fingerprint"]
    if arch == JINA_OCR_V1:  # the accept path ran: tokens per verify step well above 1
        assert summaries[3]["mean_accepted"] > 1.5, summaries[3]
    else:
        assert summaries[3]["mean_accepted"] <= 1.05  # no head: greedy at any depth


# ------------------------------------------------------------------------ usage and loading


def test_model_load_error_is_the_clis_exit_3():
    assert issubclass(ModelLoadError, OcrCliError)
    assert ModelLoadError.exit_code == ExitCode.model_error


@pytest.mark.parametrize("model", ["builtin", "checkpoint"])
def test_bad_or_misplaced_mode_is_a_usage_error(checkpoints, tmp_path, model):
    folder = str(checkpoints[DEEPSEEK_OCR]) if model == "checkpoint" else model
    mode = "huge" if model == "checkpoint" else "gundam"  # builtin: no modes at all
    out = tmp_path / "out"
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", str(out), "--model", folder,
                "--mode", mode)
    assert r.returncode == ExitCode.usage, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--mode" in lines[0], r.stderr
    assert not list(out.rglob("page-*"))


def _broken(src: Path, dst: Path, problem: str) -> Path:
    shutil.copytree(src, dst)
    weights = dst / "model.safetensors"
    if problem == "no tokenizer":
        (dst / "tokenizer.json").unlink()
    elif problem == "missing tensor":
        state = load_file(weights)
        del state["model.layers.1.mlp.gate.weight"]
        save_file(state, weights)
    else:  # wrong shape
        state = load_file(weights)
        state["model.norm.weight"] = torch.ones(33)
        save_file(state, weights)
    return dst


@pytest.mark.parametrize("problem, named", [
    ("missing tensor", "model.layers.1.mlp.gate.weight"),
    ("wrong shape", "model.norm.weight"),
    ("no tokenizer", "tokenizer.json"),
])
def test_broken_model_folder_fails_before_any_page(checkpoints, tmp_path, problem, named):
    folder = _broken(checkpoints[DEEPSEEK_OCR], tmp_path / "model", problem)
    out = tmp_path / "out"
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", str(out), "--model", str(folder),
                "--device", "cpu")
    assert r.returncode == ExitCode.model_error, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not list(out.rglob("page-*"))
