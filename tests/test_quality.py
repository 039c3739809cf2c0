import pytest

from ocrcli.quality import (
    REWARD_FUNCTIONS,
    formula_is_wellformed,
    formula_score,
    markdown_score,
    quality_flags,
    repetition_score,
    table_score,
)

CLEAN_PAGE = """# Results

We find $E = mc^2$ and
$$\\int_0^1 x\\,dx = \\frac{1}{2}$$

| Name | Value |
|------|-------|
| a    | 1     |

1. first
2. second

```python
price = "$5"
```
"""


def test_clean_page_scores_one_on_every_structure_check():
    structure = [name for name in REWARD_FUNCTIONS if name != "readable_text"]
    for page in (CLEAN_PAGE, ""):
        flags = quality_flags(page)
        assert {name: flags[name] for name in structure} == dict.fromkeys(structure, 1.0)
    # readable_text judges content: the clean page reads as text, an empty one has none
    assert quality_flags(CLEAN_PAGE)["readable_text"] > 0.7
    assert quality_flags("")["readable_text"] == 0.0


@pytest.mark.parametrize(
    ("latex", "ok"),
    [
        (r"\frac{a}{b}", True),
        (r"\{x\}", True),  # escaped braces are literal
        (r"\frac{a}{b", False),
        (r"a}", False),
        (r"\left( x \right)", True),
        (r"\left( x", False),
        (r"\begin{pmatrix} 1 \end{pmatrix}", True),
        (r"\begin{aligned} x \end{align}", False),
        (r"\begin{a b} x \end{a b}", False),
        ("  ", False),
    ],
)
def test_formula_wellformedness(latex, ok):
    assert formula_is_wellformed(latex) is ok


def test_formula_score_partial_credit():
    # Two formulas, one broken: 1 of 2.
    assert formula_score(r"$\frac{a}{b}$ and $\frac{a}{b$") == pytest.approx(0.5)
    # An unclosed display formula counts as a broken unit.
    assert formula_score(r"$x$ then $$ y") == pytest.approx(0.5)
    assert formula_score(r"stray \) closer and \(x\)") == pytest.approx(0.5)
    # Prices are not formulas; inline math does not cross paragraphs.
    assert formula_score("It costs $5 today.") == 1.0
    assert formula_score("$a\n\nb$") < 1.0


def test_table_score():
    no_header = "| a | b |\n| 1 | 2 |"
    assert table_score(no_header) == pytest.approx(2 / 3)
    ragged = "| a | b |\n|---|---|\n| 1 |\n| 2 | 3 |"
    assert table_score(ragged) == pytest.approx((1 + 2 / 3 + 1) / 3)
    empty = "| a | b |\n|---|---|\n|   |   |"
    assert table_score(empty) == pytest.approx(2 / 3)
    html_ok = "<table><tr><th>a</th><th>b</th></tr><tr><td colspan='2'>x</td></tr></table>"
    assert table_score(html_ok) == 1.0
    truncated = "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td>"
    assert table_score(truncated) == pytest.approx((1 + 0.5 + 1 + 0) / 4)
    assert table_score(html_ok + "\n\n" + no_header) == pytest.approx((1 + 2 / 3) / 2)


def test_markdown_score():
    assert markdown_score("# A\n## B\n### C\n# D") == 1.0
    assert markdown_score("# A\n### C") == pytest.approx(0.5)
    assert markdown_score("####### too deep") == 0.0
    assert markdown_score("1. a\n2. b\n4. c") == pytest.approx(0.5)
    assert markdown_score("1. a\n   more\n2. b\n\n   - sub\n3. c") == 1.0
    assert markdown_score("```\ncode\n```\n\n```\nopen") == pytest.approx(0.5)
    # Headings inside code blocks are not headings.
    assert markdown_score("# A\n```\n#### not a heading\n```") == 1.0


def test_repetition_score():
    assert repetition_score("The quick brown fox jumps over the lazy dog.") == 1.0
    looped = "Intro words here. " + "and then the model said " * 20
    assert repetition_score(looped) < 0.3
    char_loop = "Some text " + "-" * 200
    assert repetition_score(char_loop) < 0.2
    # A modest table of zeros is not a loop.
    assert repetition_score("| 0 | 0 | 0 | 0 |\n| 0 | 0 | 0 | 0 |") == 1.0


def test_flags_are_in_unit_interval_for_messy_input():
    messy = "$$\\frac{ | a |\n| --- \n<table><td>" + "x " * 100 + "\n```"
    flags = quality_flags(messy)
    assert set(flags) == set(REWARD_FUNCTIONS)
    assert all(0.0 <= v <= 1.0 for v in flags.values())
    assert min(flags.values()) < 1.0
