import json

import pytest

from ocrcli.evaluation.teds import teds, teds_markdown

# TEDS-S (structure_only=True) of the same 20 pairs, computed with PubTabNet's
# reference src/metric.py (github.com/ibm-aur-nlp/PubTabNet, commit 8ffde90)
# under lxml 6.1.3, apted 1.0.3 and distance 0.1.3.
EXPECTED_TEDS_S = {
    "PMC2094709_004_00.png": 1.0,
    "PMC2871264_002_00.png": 1.0,
    "PMC2915972_003_00.png": 0.971830985915493,
    "PMC3160368_005_00.png": 1.0,
    "PMC3568059_003_00.png": 0.9652173913043478,
    "PMC3707453_006_00.png": 0.9010989010989011,
    "PMC3765162_003_01.png": 1.0,
    "PMC3872294_001_00.png": 1.0,
    "PMC4196076_004_00.png": 1.0,
    "PMC4219599_004_00.png": 0.8186046511627907,
    "PMC4297392_007_00.png": 0.8070175438596492,
    "PMC4311460_007_00.png": 0.9,
    "PMC4357206_002_00.png": 1.0,
    "PMC4445578_009_01.png": 0.7,
    "PMC4969833_016_01.png": 1.0,
    "PMC5303243_003_00.png": 0.6582278481012658,
    "PMC5451934_004_00.png": 1.0,
    "PMC5755158_010_01.png": 1.0,
    "PMC5849724_006_00.png": 1.0,
    "PMC6022086_007_00.png": 1.0,
}


def _load(folder):
    pred = json.loads((folder / "sample_pred.json").read_text())
    true = json.loads((folder / "sample_gt.json").read_text())
    expected = json.loads((folder / "expected_teds.json").read_text())
    return pred, true, expected


def test_teds_reproduces_pubtabnet_reference(pubtabnet_teds):
    pred, true, expected = _load(pubtabnet_teds)
    assert len(expected) == 20
    diffs = {k: abs(teds(pred[k], true[k]["html"]) - v) for k, v in expected.items()}
    assert max(diffs.values()) <= 1e-9, diffs


def test_teds_s_reproduces_pubtabnet_reference(pubtabnet_teds):
    pred, true, _ = _load(pubtabnet_teds)
    for key, value in EXPECTED_TEDS_S.items():
        assert teds(pred[key], true[key]["html"], structure_only=True) == pytest.approx(
            value, abs=1e-9
        ), key


SIMPLE = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"


def test_identical_tables_score_one():
    assert teds(SIMPLE, SIMPLE) == 1.0
    assert teds(SIMPLE, f"<html><body>{SIMPLE}</body></html>") == 1.0


def test_content_edit_costs_normalised_levenshtein():
    changed = SIMPLE.replace("<td>d</td>", "<td>x</td>")
    # One cell fully renamed (cost 1) over 6 elements below <table>.
    assert teds(changed, SIMPLE) == pytest.approx(1 - 1 / 6)
    assert teds(changed, SIMPLE, structure_only=True) == 1.0


def test_structure_edit_and_spans():
    merged = "<table><tr><td colspan=\"2\">a</td></tr><tr><td>c</td><td>d</td></tr></table>"
    score = teds(merged, SIMPLE, structure_only=True)
    # Delete one cell and rename the other's colspan: 2 edits over 6 nodes.
    assert score == pytest.approx(1 - 2 / 6)


def test_inline_tags_count_as_nodes_and_tokens():
    bold = SIMPLE.replace("<td>a</td>", "<td><b>a</b></td>")
    # 7 elements below <table> now; the cell's tokens go from [a] to [<b>, a, </b>].
    assert teds(bold, SIMPLE) == pytest.approx(1 - (2 / 3) / 7)
    assert teds(bold, SIMPLE, ignore_nodes=["b"]) == 1.0


def test_th_is_not_a_cell():
    # As in the reference, only <td> content is compared; <th> text is ignored.
    a = "<table><tr><th>x</th></tr></table>"
    b = "<table><tr><th>completely different</th></tr></table>"
    assert teds(a, b) == 1.0


def test_missing_tables_score_zero():
    assert teds("", SIMPLE) == 0.0
    assert teds("<p>no table</p>", SIMPLE) == 0.0


def test_markdown_prediction():
    markdown = "| a | b |\n|---|---|\n| c | d |"
    assert teds_markdown(markdown, SIMPLE) == 1.0
    assert teds_markdown("no table", SIMPLE) == 0.0
