import inspect
import itertools
import sys

import pytest

from ocrcli.evaluation.math_render import (
    Glyph,
    KatexRenderer,
    RenderedEquation,
    RendererUnavailable,
    equations_equivalent,
    find_katex_assets,
    mathml_core,
)

_ids = itertools.count()


def eq(*glyphs, mathml=None):
    # A unique MathML by default, so that only the glyph layouts can match.
    mathml = f"<semantics><mn>{next(_ids)}</mn></semantics>" if mathml is None else mathml
    return RenderedEquation(mathml=mathml, glyphs=tuple(Glyph(*g) for g in glyphs))


def shifted(rendered, dx, dy):
    return RenderedEquation(
        f"<semantics><mn>{next(_ids)}</mn></semantics>",
        tuple(Glyph(g.text, g.x + dx, g.y + dy, g.width, g.height) for g in rendered.glyphs),
    )


def test_mathml_core_drops_annotation_and_blanks():
    mathml = (
        '<math xmlns="m"><semantics><mrow><mi>a</mi> <mtext>&nbsp;</mtext></mrow>'
        '<annotation encoding="application/x-tex">a\\ </annotation></semantics></math>'
    )
    assert mathml_core(mathml) == "<mrow><mi>a</mi><mtext></mtext></mrow>"


def test_mathml_containment_decides_first():
    ref_mathml = "<semantics><mi>x</mi><annotation>x</annotation></semantics>"
    cand_mathml = "<semantics><mrow><mi>x</mi><mo>+</mo></mrow></semantics>"
    ref = eq(("x", 0, 0, 10, 10), mathml=ref_mathml)
    cand = eq(("y", 0, 0, 10, 10), mathml=cand_mathml)
    assert equations_equivalent(ref, cand)  # MathML contained, glyphs irrelevant
    assert not equations_equivalent(cand, ref)  # not contained, and no 'y' glyph in ref


# A fraction a/b: 'a' above 'b'.
FRACTION = eq(("a", 0, 0, 10, 10), ("b", 0, 20, 10, 10))


def test_same_layout_anywhere_matches():
    assert equations_equivalent(FRACTION, shifted(FRACTION, 300, 40))


def test_different_arrangement_does_not_match():
    side_by_side = eq(("a", 0, 0, 10, 10), ("b", 12, 0, 10, 10))
    assert not equations_equivalent(FRACTION, side_by_side)
    missing_glyph = eq(("a", 0, 0, 10, 10), ("c", 0, 20, 10, 10))
    assert not equations_equivalent(FRACTION, missing_glyph)


def test_candidate_may_contain_more():
    bigger = eq(
        ("a", 0, 0, 10, 10), ("b", 0, 20, 10, 10), ("+", 15, 10, 10, 10), ("c", 30, 10, 8, 8)
    )
    assert equations_equivalent(FRACTION, bigger)


def test_neighbours_are_the_nearest_aligned_glyphs():
    row = eq(("a", 0, 0, 10, 10), ("b", 12, 0, 10, 10))
    # 'c' further right does not hide that 'b' is a's right-hand neighbour.
    longer_row = eq(("a", 0, 0, 10, 10), ("b", 12, 0, 10, 10), ("c", 24, 0, 10, 10))
    assert equations_equivalent(row, longer_row)
    swapped = eq(("a", 0, 0, 10, 10), ("c", 12, 0, 10, 10), ("b", 24, 0, 10, 10))
    assert not equations_equivalent(row, swapped)


def test_multi_character_spans_are_split_into_glyphs():
    ref = eq(("ab", 0, 0, 20, 10))
    assert equations_equivalent(ref, eq(("a", 50, 0, 10, 10), ("b", 60, 0, 10, 10)))
    assert not equations_equivalent(ref, eq(("b", 50, 0, 10, 10), ("a", 60, 0, 10, 10)))


def test_search_backtracks_over_identical_glyphs():
    ref = eq(("a", 0, 0, 10, 10), ("b", 12, 0, 10, 10))
    # The first 'a' has nothing to its right; only the second one fits.
    cand = eq(("a", 0, 100, 10, 10), ("a", 0, 0, 10, 10), ("b", 12, 0, 10, 10))
    assert equations_equivalent(ref, cand)


def test_zero_width_spaces_are_ignored():
    ref = eq(("x", 0, 0, 10, 10), ("\u200b", 5, 50, 1, 1))
    assert equations_equivalent(ref, eq(("x", 0, 0, 10, 10)))


def test_long_equations_do_not_recurse():
    row = eq(*[(chr(97 + i % 26), 12.0 * i, 0, 10, 10) for i in range(300)])
    limit = sys.getrecursionlimit()
    # Leave ~60 frames of headroom: a recursive search would need ~300.
    sys.setrecursionlimit(len(inspect.stack(0)) + 60)
    try:
        assert equations_equivalent(row, shifted(row, 5, 5))
    finally:
        sys.setrecursionlimit(limit)


def test_find_katex_assets(tmp_path, monkeypatch):
    monkeypatch.delenv("OCRCLI_KATEX_DIR", raising=False)
    assert find_katex_assets(tmp_path) != tmp_path  # no assets there yet
    (tmp_path / "katex.min.js").write_text("")
    (tmp_path / "katex.min.css").write_text("")
    assert find_katex_assets(tmp_path) == tmp_path
    monkeypatch.setenv("OCRCLI_KATEX_DIR", str(tmp_path))
    assert find_katex_assets() == tmp_path


def test_real_katex_rendering_when_available():
    try:
        renderer = KatexRenderer()
    except RendererUnavailable as exc:
        pytest.skip(f"KaTeX rendering not available here: {exc}")
    with renderer:
        ref = renderer.render("a^{2}+b^{2}=c^{2}")
        assert ref is not None and ref.glyphs
        assert equations_equivalent(ref, renderer.render("a^2 + b^2 = c^2"))
        assert not equations_equivalent(renderer.render("b^{3}"), ref)
        assert renderer.render(r"\frac{1}{") is None
