"""Exit codes and messages of errors, through the real entry point in a subprocess: a usage
error is one `ocrcli: error:` line and exit 2, on a terminal too; a bug in ocrcli is one
`ocrcli: internal error:` line and exit 15 (the traceback with --debug), wherever it happens
(the command, model loading, a --workers process); a model folder that cannot be loaded is
exit 3."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES, run_cli

HINT = "(run again with --debug for the traceback, and please report it)"
CHEAP = ("--max-new-tokens", "4", "--accept", "truncated,degenerate", "--render-workers", "0",
         "-q")
USAGE_ERRORS = {
    "unknown option": (["convert", "--bogus"], "No such option: --bogus"),
    "no arguments": (["convert"], "Missing option '-o' / '--out'"),
    "bad value": (["convert", "x.pdf", "-o", "out", "--dpi", "5"], "Invalid value for '--dpi'"),
    "unknown command": (["nosuch"], "No such command 'nosuch'"),
}


@pytest.mark.parametrize("args, expected", USAGE_ERRORS.values(), ids=USAGE_ERRORS.keys())
def test_usage_errors_are_one_line_and_exit_2(tmp_path, args, expected):
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"ocrcli: error: {expected}") and "--help'" in line, line


def _on_a_terminal(args: list[str], cwd: Path) -> tuple[int, str]:
    """The CLI with stdin, stdout and stderr on a pseudo-terminal (where rich would draw its
    boxed panels): its exit code and everything it wrote."""
    leader, follower = pty.openpty()
    env = dict(os.environ, COLUMNS="100", TERM="xterm-256color")
    proc = subprocess.Popen([sys.executable, "-m", "ocrcli.cli", *args], cwd=cwd, env=env,
                            stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the process is done with it
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("args, expected", [USAGE_ERRORS["unknown option"],
                                            USAGE_ERRORS["no arguments"]],
                         ids=["unknown option", "no arguments"])
def test_usage_errors_are_one_line_on_a_terminal_too(tmp_path, args, expected):
    code, text = _on_a_terminal(args, tmp_path)
    assert code == 2, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"ocrcli: error: {expected}"), text
    assert "\u256d" not in text and "Usage:" not in text  # no panel, no usage block


def _with_a_bug(tmp_path: Path, patch: str) -> dict[str, str]:
    """An environment whose Python processes (the CLI's and its workers') run `patch` at
    start-up, through a sitecustomize module: a bug put into ocrcli from outside."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(patch)
    return {"PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}


BUG_IN_CONVERT = """
import ocrcli.convert as _convert

_run = _convert.Converter.run


def _buggy(self):
    if self.s.worker in (None, (2, 2)):  # the one process, or worker 2 of 2
        raise ZeroDivisionError("injected bug")
    return _run(self)


_convert.Converter.run = _buggy
"""


def test_a_bug_is_one_line_and_exit_15_and_debug_shows_the_traceback(tmp_path):
    env = _with_a_bug(tmp_path, BUG_IN_CONVERT)
    args = ["convert", str(SAMPLES / "memo.jpg"), "-o", str(tmp_path / "out"), *CHEAP]
    r = run_cli(*args, env=env)
    assert r.returncode == 15, r.stderr
    assert r.stderr.splitlines() == [f"ocrcli: internal error: ZeroDivisionError: injected bug {HINT}"]
    for where in (["--debug", *args], [*args, "--debug"]):  # before or after the command
        r = run_cli(*where, env=env)
        assert r.returncode == 15, r.stderr
        assert r.stderr.startswith("Traceback (most recent call last):")
        assert 'raise ZeroDivisionError("injected bug")' in r.stderr
        assert r.stderr.splitlines()[-1] == ("ocrcli: internal error: ZeroDivisionError: injected "
                                             "bug (please report it, with the traceback above)")


@pytest.mark.slow  # starts two converter processes
def test_a_bug_in_a_worker_process_is_exit_15_after_the_other_workers_finish(tmp_path):
    env = _with_a_bug(tmp_path, BUG_IN_CONVERT)
    out = tmp_path / "out"
    args = ["convert", str(SAMPLES / "report.pdf"), "-o", str(out), "--workers", "2", *CHEAP]
    r = run_cli(*args, env=env)
    assert r.returncode == 15, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1] == f"ocrcli: internal error: ZeroDivisionError: injected bug {HINT}"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_code"] == 15 and summary["pages"]["converted"] >= 1  # worker 1's
    r = run_cli(*args, "--debug", env=env)
    assert r.returncode == 15 and 'raise ZeroDivisionError("injected bug")' in r.stderr


def test_a_bug_while_loading_the_model_is_an_internal_error_not_a_model_error(tmp_path):
    env = _with_a_bug(tmp_path, "import ocrcli.models.builtin as _b\n\n\n"
                                "def _load(*args, **kwargs):\n"
                                "    raise TypeError(\"injected bug in a loader\")\n\n\n"
                                "_b.load = _load\n")
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", str(tmp_path / "out"), *CHEAP,
                env=env)
    assert r.returncode == 15, r.stderr
    assert r.stderr.splitlines() == [
        f"ocrcli: internal error: TypeError: injected bug in a loader {HINT}"]


def _builtin_folder_with_config(folder: Path, config: str) -> Path:
    from ocrcli.models.builtin import BUILTIN_DIR

    folder.mkdir()
    for name in ("tokenizer.json", "model.safetensors"):
        (folder / name).symlink_to(BUILTIN_DIR / name)
    (folder / "config.json").write_text(config)
    return folder


@pytest.mark.parametrize("config, reason", [
    ('{"architecture": "ocrcli-builtin", "dim": ', "config.json: Expecting value"),
    ('{"architecture": "ocrcli-builtin", "dim": "wide"}', "dim is 'wide', not a whole number"),
])
def test_a_model_folder_that_cannot_be_loaded_is_exit_3(tmp_path, config, reason):
    model = _builtin_folder_with_config(tmp_path / "model", config)
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", str(tmp_path / "out"), *CHEAP,
                "--model", str(model))
    assert r.returncode == 3, r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith("ocrcli: error: ") and reason in line, line
