"""The converter's resume fast path: a rerun over finished pages loads no model."""

from __future__ import annotations

import shutil
import subprocess
import sys

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
