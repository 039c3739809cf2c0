"""The comparison script's reading of the official scorer's printed report."""

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compare_olmocr_scorer.py"

# The shape of olmocr 0.4.27's report (abridged).
OFFICIAL_STDOUT = """
Candidate: olmocr_pipeline
  [FAIL] Test earnings_table00 on earnings page 1 average pass ratio: 0.000 (0/1 repeats passed).
  [FAIL] Test headers_footers/x_pg1.pdf_baseline on headers_footers/x_pg1 page 1 average pass
  Average Score: 94.3% (95% CI: [90.0%, 97.6%]) over 120 tests.

============================================================
Final Summary with 95% Confidence Intervals:
olmocr_pipeline      : Average Score: 94.3% \u00b1 3.8% (average of per-JSONL scores)
    absent  : 95.8% average pass rate over 24 tests
    math    : 91.7% average pass rate over 12 tests

    Results by JSONL file:
        baseline                      : 95.0% (19/20 tests)
        blanks.jsonl                  : 100.0% (1/1 tests)
        dataset.jsonl                 : 87.9% (87/99 tests)
"""


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("compare_olmocr_scorer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the script loads.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_parse_official_output(script):
    table = script.parse_official_output(OFFICIAL_STDOUT)
    assert table.categories == {
        "baseline": script.Row(19, 20),
        "blanks": script.Row(1, 1),
        "dataset": script.Row(87, 99),
    }
    assert table.by_type == {"absent": ("95.8", 24), "math": ("91.7", 12)}
    assert table.overall == "94.3"
    assert table.not_all_passed == {"earnings_table00", "headers_footers/x_pg1.pdf_baseline"}


def test_compare_flags_any_difference(script, capsys):
    official = script.parse_official_output(OFFICIAL_STDOUT)
    same = script.Table(
        dict(official.categories), dict(official.by_type), "94.3", set(official.not_all_passed)
    )
    assert script.compare(same, official)
    off_by_one = script.Table(
        {**official.categories, "dataset": script.Row(86, 99)},
        dict(official.by_type), "94.3", set(official.not_all_passed),
    )
    assert not script.compare(off_by_one, official)
    assert "IDENTICAL: NO" in capsys.readouterr().out
