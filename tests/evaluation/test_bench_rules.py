import pytest

from ocrcli.evaluation.bench_rules import (
    BaselineRule,
    BenchFormatError,
    MathRule,
    OrderRule,
    PresenceRule,
    TableRule,
    Verdict,
    extract_equations,
    load_rules,
)
from ocrcli.evaluation.math_render import Glyph, RenderedEquation

BASE = {"pdf": "doc.pdf", "page": 1}


def verdict(rule, content, renderer=None):
    return rule.check(content, renderer).verdict


def present(text, **kw):
    return PresenceRule(**BASE, id="p", type="present", text=text, **kw)


def test_present_exact_and_normalised():
    assert verdict(present("Hello world"), "say **Hello**\n  world!") is Verdict.PASS
    assert verdict(present("Hello world"), "Hello there") is Verdict.FAIL


def test_present_threshold_boundary():
    rule = present("abcdefghij", max_diffs=1)  # threshold 0.9
    assert verdict(rule, "xx abcdefghiX yy") is Verdict.PASS  # Indel 2 of 20 -> 0.90
    assert verdict(rule, "xx abcdefghXY yy") is Verdict.FAIL  # 0.80
    assert verdict(present("abcdefghij"), "abcdefghiX") is Verdict.FAIL


def test_present_case_and_position_limits():
    assert verdict(present("HEADER"), "header text") is Verdict.FAIL
    assert verdict(present("HEADER", case_sensitive=False), "header text") is Verdict.PASS
    body = "Title line " + "filler " * 50 + "Page 7"
    assert verdict(present("Title", first_n=20), body) is Verdict.PASS
    assert verdict(present("Page 7", first_n=20), body) is Verdict.FAIL
    assert verdict(present("Page 7", last_n=10), body) is Verdict.PASS
    assert verdict(present("Page 7", first_n=5, last_n=6), body) is Verdict.PASS


def test_absent():
    rule = PresenceRule(**BASE, id="a", type="absent", text="Downloaded from")
    assert verdict(rule, "body text") is Verdict.PASS
    assert verdict(rule, "Downloaded from x.org") is Verdict.FAIL


def test_presence_rejects_empty_text():
    with pytest.raises(BenchFormatError):
        present("** **")


def order(before, after, max_diffs=0):
    return OrderRule(**BASE, id="o", type="order", before=before, after=after, max_diffs=max_diffs)


def test_order():
    assert verdict(order("first", "second"), "first then second") is Verdict.PASS
    assert verdict(order("first", "second"), "second then first") is Verdict.FAIL
    assert verdict(order("first", "second"), "first only") is Verdict.FAIL
    # Any 'before' occurrence ahead of any 'after' occurrence will do.
    assert verdict(order("alpha", "beta"), "alpha beta alpha") is Verdict.PASS
    assert verdict(order("alpha", "beta"), "beta alpha beta") is Verdict.PASS
    # Both starting at the same place is not "before".
    assert verdict(order("chapter", "chapter one"), "chapter one") is Verdict.FAIL
    # Fuzzy: one edit allowed.
    assert verdict(order("chapter one", "chapter two", 1), "chapter on, chapter tw") is (
        Verdict.PASS
    )
    assert verdict(order("chapter one", "chapter two"), "chapter on, chapter tw") is Verdict.FAIL


def test_order_rejects_too_large_max_diffs():
    with pytest.raises(BenchFormatError):
        order("abcd", "efghij", max_diffs=3)


TABLE_MD = """| Item | 2023 | 2024 |
|------|------|------|
| Revenue | 10 | 12 |
| Cost | 4 | 5 |
"""


def table(cell, **kw):
    return TableRule(**BASE, id="t", type="table", cell=cell, **kw)


def test_table_neighbours():
    assert verdict(table("12", up="2024", left="10", down="5"), TABLE_MD) is Verdict.PASS
    assert verdict(table("12", left="4"), TABLE_MD) is Verdict.FAIL
    assert verdict(table("99"), TABLE_MD) is Verdict.FAIL
    assert verdict(table("12"), "no tables here") is Verdict.FAIL


def test_table_relation_off_the_edge_is_not_checked():
    # "Item" is in the top row, so an 'up' relation cannot be checked and is
    # ignored, as the official scorer does.
    assert verdict(table("Item", up="anything"), TABLE_MD) is Verdict.PASS


def test_table_headings():
    assert verdict(table("5", top_heading="2024", left_heading="Cost"), TABLE_MD) is Verdict.PASS
    assert verdict(table("5", top_heading="2023"), TABLE_MD) is Verdict.FAIL
    assert verdict(table("5", left_heading="Revenue"), TABLE_MD) is Verdict.FAIL


def test_table_heading_fallback_only_when_no_heading_is_similar():
    html = (
        "<table><tr><td>zzz</td></tr><tr><td>Total</td></tr><tr><td>42</td></tr></table>"
    )
    # No declared headings in a <td>-only table: any non-empty cell above may serve.
    assert verdict(table("42", top_heading="Total"), html) is Verdict.PASS
    with_th = (
        "<table><tr><th>Totals</th></tr><tr><td>Total</td></tr><tr><td>42</td></tr></table>"
    )
    # The <th> is similar but below threshold, so the exact cell above is not consulted.
    assert verdict(table("42", top_heading="Total", max_diffs=0), with_th) is Verdict.FAIL


def test_table_fuzzy_cell_and_markdown_switch():
    html = (
        "<table><tr><th>Name</th><th>Value</th></tr>"
        "<tr><td>Widget</td><td>3.50</td></tr></table>"
    )
    assert verdict(table("Widgets", max_diffs=1, left="", top_heading="Name"), html) is (
        Verdict.PASS
    )
    rule = table("12", ignore_markdown_tables=True)
    assert verdict(rule, TABLE_MD) is Verdict.FAIL


def test_extract_equations_order_and_removal():
    content = r"Inline \(a\) and \[b\] and $$c$$ and $d$ and $$ e $$"
    assert extract_equations(content) == ["a", "b", "c", "e", "d"]
    assert extract_equations(content, include_dollars=False) == ["a", "b"]


class FakeRenderer:
    """Renders by canonicalising LaTeX (no spaces or braces) and laying the
    characters out in a row; '\\bad' does not render."""

    def __init__(self):
        self.calls = []

    def render(self, latex):
        self.calls.append(latex)
        if r"\bad" in latex:
            return None
        canon = latex.replace(" ", "").replace("{", "").replace("}", "")
        mathml = f"<math><semantics><mrow>{canon}</mrow><annotation/></semantics></math>"
        glyphs = tuple(Glyph(ch, 10.0 * i, 0.0, 10.0, 10.0) for i, ch in enumerate(canon))
        return RenderedEquation(mathml=mathml, glyphs=glyphs)


def math(latex, **kw):
    return MathRule(**BASE, id="m", type="math", math=latex, **kw)


def test_math_exact_match_needs_no_renderer():
    assert verdict(math("a^{2}"), r"text \[ a^{2} \] more") is Verdict.PASS
    assert verdict(math("a^{2}"), "no equations at all") is Verdict.FAIL


def test_math_without_renderer_is_undecided():
    assert verdict(math("a^{2}"), r"\[ a^2 \]") is Verdict.UNDECIDED


def test_math_with_renderer():
    renderer = FakeRenderer()
    assert verdict(math("a^{2}+b"), r"$x$ and \[ a^2 + b \]", renderer) is Verdict.PASS
    # The most similar candidate is tried first.
    assert renderer.calls[:2] == ["a^{2}+b", "a^2 + b"]
    assert verdict(math("a^{2}"), r"\[ b^2 \]", FakeRenderer()) is Verdict.FAIL
    assert verdict(math("a^{2}"), r"\[ \bad a^2 \]", FakeRenderer()) is Verdict.FAIL
    with pytest.raises(BenchFormatError):
        math(r"\bad").check(r"\[ x \]", FakeRenderer())


def test_math_ignoring_dollars():
    rule = math("a", ignore_dollar_delimited=True)
    assert verdict(rule, "$a$") is Verdict.FAIL
    assert verdict(rule, r"\(a\)") is Verdict.PASS


def baseline(**kw):
    return BaselineRule(**BASE, id="b", type="baseline", **kw)


def test_baseline_blank_page_check():
    assert verdict(baseline(max_length=10), "p. 3") is Verdict.PASS
    assert verdict(baseline(max_length=3), "Some words") is Verdict.FAIL
    image = "![a long alternative text](img.png) 1"
    assert verdict(baseline(max_length=3), image) is Verdict.FAIL
    assert verdict(baseline(max_length=3, max_length_skips_image_alt_tags=True), image) is (
        Verdict.PASS
    )


def test_baseline_quality_checks():
    assert verdict(baseline(), "Normal text.") is Verdict.PASS
    assert verdict(baseline(), "  ... ") is Verdict.FAIL
    assert verdict(baseline(), "ok " + "la" * 31) is Verdict.FAIL
    assert verdict(baseline(), "ok " + "la" * 30) is Verdict.PASS
    assert verdict(baseline(), "text \u4e2d") is Verdict.FAIL
    assert verdict(baseline(), "text \U0001F600") is Verdict.FAIL
    assert verdict(baseline(check_disallowed_characters=False), "text \u4e2d") is Verdict.PASS


def test_load_rules():
    lines = [
        '{"pdf": "a.pdf", "page": 1, "id": "1", "type": "present", "text": "x", "extra": 1}',
        "",
        '{"pdf": "a.pdf", "page": 1, "id": "2", "type": "format", "text": "x"}',
        '{"pdf": "a.pdf", "page": 1, "id": "3", "type": "baseline"}',
    ]
    notes = []
    loaded = load_rules(lines, "f.jsonl", notes.append)
    assert [r.id for r in loaded.rules] == ["1", "3"]
    assert loaded.unsupported == {"format": 1}
    assert notes and "f.jsonl:1" in notes[0]


@pytest.mark.parametrize(
    "line",
    [
        "{not json",
        '{"pdf": "a.pdf", "page": 1, "id": "1", "type": "present"}',  # no text
        '{"pdf": "", "page": 1, "id": "1", "type": "baseline"}',
        '{"pdf": "a.pdf", "page": 1, "id": "1", "type": "baseline", "max_diffs": -1}',
    ],
)
def test_load_rules_rejects_malformed_lines(line):
    with pytest.raises(BenchFormatError, match="f.jsonl:1"):
        load_rules([line], "f.jsonl")
