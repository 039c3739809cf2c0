"""What a run takes from its model without being told: the resume fast path (a rerun over
finished pages loads no model) and the dpi its PDF pages are rendered at."""

from __future__ import annotations

import shutil
import subprocess
import sys

import orjson

from ocrcli.fingerprint import fingerprint, loaded_fingerprint
from ocrcli.models.identity import BUILTIN_DIR, builtin_fingerprint, quick_identity
from ocrcli.models.registry import load_model
from ocrcli.settings import ConvertSettings
from tests.conftest import REPO, SAMPLES, run_cli


def test_quick_identity_is_what_loading_reports(tmp_path):
    loaded = load_model("builtin", "cpu")
    identity = quick_identity("builtin")
    assert (identity.model_id, identity.weights_hash) == (loaded.model_id, loaded.weights_hash)
    s = ConvertSettings(inputs=[], out=tmp_path)
    assert fingerprint(identity, None, s, 160) == loaded_fingerprint(loaded, s, 160)
    assert quick_identity("deepseek-ai/DeepSeek-OCR") is None  # those are loaded to know


def test_builtin_fingerprint_covers_config_tokenizer_and_reader_code(tmp_path):
    """Pages written by an older layout step or config must not survive a resume."""
    model, code = tmp_path / "model", tmp_path / "code"
    shutil.copytree(BUILTIN_DIR, model, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    code.mkdir()
    for source in BUILTIN_DIR.glob("*.py"):
        shutil.copy(source, code)
    seen = {builtin_fingerprint(model, code)}
    assert seen == {builtin_fingerprint(BUILTIN_DIR)}
    for changed in (code / "layout.py", model / "config.json", model / "tokenizer.json"):
        changed.write_bytes(changed.read_bytes() + b" ")
        seen.add(builtin_fingerprint(model, code))
    assert len(seen) == 4


def test_rerun_of_a_finished_run_imports_no_torch(tmp_path):
    out = tmp_path / "out"
    args = ["convert", str(SAMPLES / "memo.jpg"), "-o", str(out), "--max-new-tokens", "8",
        "--accept", "truncated,degenerate",
            "--render-workers", "0", "--quiet"]
    assert run_cli(*args).returncode == 0
    probe = ("import sys\nfrom ocrcli.cli import app\n"
             f"try:\n    app({args!r})\nexcept SystemExit as e:\n    code = e.code\n"
             "print(code, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert r.stdout.split() == ["0", "False"], r.stdout + r.stderr
    # Something left to do still loads the model and converts it.
    (out / "memo.jpg" / "page-0001.json").unlink()
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert r.stdout.split() == ["0", "True"], r.stdout + r.stderr
    assert (out / "memo.jpg" / "page-0001.json").exists()


def test_the_render_dpi_is_the_models_own_unless_given(tmp_path):
    """The built-in reader cuts its lines from a page rendered at 288 dpi; full-page models
    resize a page to their own input, for which 144 dpi is ample; `--dpi` wins over both."""
    export = tmp_path / "export"
    shutil.copytree(BUILTIN_DIR, export, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    assert ConvertSettings(inputs=[], out=tmp_path).dpi == 288
    assert ConvertSettings(inputs=[], out=tmp_path, model=str(export)).dpi == 288
    assert ConvertSettings(inputs=[], out=tmp_path, model="deepseek-ai/DeepSeek-OCR").dpi == 144
    assert ConvertSettings(inputs=[], out=tmp_path, dpi=200).dpi == 200
    for args, dpi in (((), 288), (("--dpi", "144"), 144)):
        out = tmp_path / f"out{dpi}"
        done = run_cli("convert", str(SAMPLES / "report.pdf"), "--pages", "1", "-o", str(out), *args)
        assert done.returncode == 0, done.stderr
        page = orjson.loads((out / "report.pdf" / "page-0001.json").read_bytes())
        assert (page["dpi"], page["width"]) == (dpi, 1224 * dpi // 144)
