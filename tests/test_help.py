"""`--help` as a user reads it: examples, the output layout and every exit code; values named
by metavar, never by Python type; decoding's tuning knobs in a panel of their own."""

from __future__ import annotations

import re

import pytest

from ocrcli.errors import ExitCode
from tests.conftest import run_cli

COMMANDS = ([], ["convert"], ["ray-convert"], ["eval"], ["status"], ["models"])
PYTHON_TYPE = re.compile(r"<(str|int|float|bool|list\[[^>]*\]|Path|int range|float range)>")


def help_text(*command: str) -> str:
    r = run_cli(*command, "--help", env={"COLUMNS": "120", "TERM": "dumb"})
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "ocrcli")
def test_help_names_values_not_python_types(command):
    text = help_text(*command)
    assert not PYTHON_TYPE.search(text), PYTHON_TYPE.search(text).group(0)


def test_convert_help_has_examples_layout_and_every_exit_code():
    text = help_text("convert")
    assert "Examples" in text and "ocrcli convert scans/ -o out/" in text
    assert "OUT/summary.json" in text and "OUT/NAME/page-0001.md" in text
    exit_section = text[text.index("Exit codes"):]
    for code in ExitCode:
        assert re.search(rf"^\s*{int(code)}\s+\S", exit_section, re.M), f"exit code {int(code)}"
    assert "--out" in text and " DIR " in text and " FILE " in text


def test_draft_tuning_sits_in_the_advanced_panel_below_the_rest():
    text = help_text("convert")
    advanced = text.index("Decoding (advanced")
    for option in ("--draft-depth", "--drafter", "--draft-min-prob", "--draft-min-path-prob",
                   "--cuda-graphs"):
        assert text.index(option) > advanced, option
    for option in ("--out", "--pages", "--model", "--accept", "--retry", "--log"):
        assert text.index(option) < advanced, option


@pytest.mark.parametrize("command", ["convert", "ray-convert"])
def test_help_sits_in_the_first_panel_when_every_option_has_one(command):
    text = help_text(command)
    assert "─ Options " not in text  # no default panel holding --help alone
    assert text.index("─ Output and exit code ") < text.index("--help") < text.index("─ Input ")


def test_help_stays_with_the_options_that_have_no_panel():
    text = help_text("status")
    assert text.index("─ Options ") < text.index("--help") < text.index("─ Input ")
