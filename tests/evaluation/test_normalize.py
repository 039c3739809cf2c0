import pytest

from ocrcli.evaluation.normalize import (
    normalize_bench_text,
    normalize_omnidoc_text,
    simple_latex_to_text,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a  b\n\tc", "a b c"),
        ("x<br>y<br/>z", "x y z"),
        ("x<br />y", "x<br />y"),  # only <br> and <br/> are line breaks to the bench
        ("**bold** and __strong__", "bold and strong"),
        ("*it* and _it_", "it and it"),
        ("<b>b</b><i>i</i>", "bi"),
        ("\u201cq\u201d \u2018s\u2019 \u201equote\u201c", "\"q\" 's' \"quote\""),
        ("1\u20132 \u2014 3\u22124 5\u20116 7\u20128", "1-2 - 3-4 5-6 7-8"),
        ("\uff3f \u00b5m", "_ \u03bcm"),
        ("e\u0301", "\u00e9"),  # NFC
    ],
)
def test_bench_normalisation(raw, expected):
    assert normalize_bench_text(raw) == expected


def test_bench_normalisation_collapses_whitespace_before_emphasis():
    # Because whitespace is collapsed first, emphasis spanning a line break is
    # still removed (the official order of steps).
    assert normalize_bench_text("**two\nlines**") == "two lines"
    # Bold is removed before italics, so "***x***" keeps one asterisk pair out.
    assert normalize_bench_text("***x***") == "x"


def test_omnidoc_strips_everything_but_word_and_cjk_characters():
    assert normalize_omnidoc_text("Hello, world! 3.5 kg/m\u00b2\n\t\u4e2d\u6587\u3002") == (
        "Helloworld35kgm\u00b2\u4e2d\u6587"
    )
    assert normalize_omnidoc_text("a\\nb\\tc/nd/te") == "abcde"


def test_omnidoc_converts_inline_latex_only_when_it_has_latex_syntax():
    assert normalize_omnidoc_text(r"angle $\alpha^{2}$ and $\mathrm{kg}$") == (
        "angle\u03b12andkg"
    )
    # No backslash, ^ or _: the formula is left as is (then $ is stripped).
    assert normalize_omnidoc_text("costs $5$") == "costs5"
    # Subscript underscores are word characters and survive, as upstream.
    assert normalize_omnidoc_text(r"\(\Omega_1\)") == "\u03a9_1"


def test_custom_latex_converter_is_used():
    seen = []

    def convert(latex: str) -> str:
        seen.append(latex)
        return "Z"

    assert normalize_omnidoc_text(r"x $\beta$ y", latex_to_text=convert) == "xZy"
    assert seen == [r"\beta"]


def test_simple_latex_to_text_maps_letters_and_drops_other_macros():
    assert simple_latex_to_text(r"\frac{\pi}{2} \varepsilon \epsilon \Gamma") == (
        "{\u03c0}{2} \u03b5\u03f5\u0393"
    )
