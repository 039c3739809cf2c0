import json
from pathlib import Path

import pytest

from ocrcli.evaluation.bench_rules import BenchFormatError
from ocrcli.evaluation.math_render import Glyph, RenderedEquation
from ocrcli.evaluation.olmocr_bench import (
    MissingOutputsError,
    bench_conversion_jobs,
    format_bench_table,
    load_bench,
    output_path,
    score_bench,
)


def _write_jsonl(path: Path, rules: list[dict]) -> None:
    path.write_text("\n".join(json.dumps(r) for r in rules) + "\n\n")


def _bench(tmp_path: Path) -> Path:
    """Two categories, two PDFs (one in a sub-folder, two pages), outputs for 'sys'."""
    (tmp_path / "pdfs" / "sub").mkdir(parents=True)
    (tmp_path / "pdfs" / "a.pdf").write_bytes(b"%PDF-1.4")
    (tmp_path / "pdfs" / "sub" / "b_pg3.pdf").write_bytes(b"%PDF-1.4")
    _write_jsonl(
        tmp_path / "text.jsonl",
        [
            {"pdf": "a.pdf", "page": 1, "id": "t1", "type": "present", "text": "Hello"},
            {"pdf": "a.pdf", "page": 1, "id": "t2", "type": "absent", "text": "Footer"},
            {"pdf": "sub/b_pg3.pdf", "page": 2, "id": "t3", "type": "present", "text": "Second"},
            {"pdf": "a.pdf", "page": 1, "id": "t4", "type": "format", "text": "x"},
        ],
    )
    _write_jsonl(
        tmp_path / "maths.jsonl",
        [
            {"pdf": "a.pdf", "page": 1, "id": "m1", "type": "math", "math": "x^{2}"},
            {"pdf": "a.pdf", "page": 1, "id": "m2", "type": "math", "math": "y"},
        ],
    )
    system = tmp_path / "sys"
    (system / "sub").mkdir(parents=True)
    (system / "a_pg1_repeat1.md").write_text("Hello there\n\n\\[ x^2 \\]")
    (system / "sub" / "b_pg3_pg1_repeat1.md").write_text("First page")
    (system / "sub" / "b_pg3_pg2_repeat1.md").write_text("Second page")
    return tmp_path


def test_load_bench_adds_automatic_baseline_rules(tmp_path):
    bench = load_bench(_bench(tmp_path))
    assert bench.pdfs == ["a.pdf", "sub/b_pg3.pdf"]
    assert bench.categories == ["baseline", "maths", "text"]
    baseline = [r for r in bench.rules if bench.category_of[r.id] == "baseline"]
    assert [(r.pdf, r.page) for r in baseline] == [("a.pdf", 1), ("sub/b_pg3.pdf", 1)]
    assert bench.unsupported == {"format": 1}
    assert bench.pages() == [("a.pdf", 1), ("sub/b_pg3.pdf", 1), ("sub/b_pg3.pdf", 2)]
    assert "baseline" not in load_bench(tmp_path, skip_baseline=True).categories


def test_duplicate_ids_are_rejected(tmp_path):
    _bench(tmp_path)
    _write_jsonl(
        tmp_path / "extra.jsonl",
        [{"pdf": "a.pdf", "page": 1, "id": "t1", "type": "present", "text": "again"}],
    )
    with pytest.raises(BenchFormatError, match="duplicate"):
        load_bench(tmp_path)


def test_conversion_jobs_use_the_official_layout(tmp_path):
    jobs = bench_conversion_jobs(_bench(tmp_path), "mine")
    assert [(j.pdf_path.relative_to(tmp_path).as_posix(), j.page) for j in jobs] == [
        ("pdfs/a.pdf", 1),
        ("pdfs/sub/b_pg3.pdf", 1),
        ("pdfs/sub/b_pg3.pdf", 2),
    ]
    assert [j.output_path.relative_to(tmp_path).as_posix() for j in jobs] == [
        "mine/a_pg1_repeat1.md",
        "mine/sub/b_pg3_pg1_repeat1.md",
        "mine/sub/b_pg3_pg2_repeat1.md",
    ]
    with pytest.raises(ValueError):
        output_path(tmp_path, "pdfs", "a.pdf", 1)


def test_score_without_renderer_skips_undecidable_math(tmp_path):
    score = score_bench(_bench(tmp_path), "sys", bootstrap=200, renderer=None)
    by_name = {c.name: c for c in score.categories}
    assert (by_name["text"].passed, by_name["text"].total) == (3, 3)
    assert (by_name["baseline"].passed, by_name["baseline"].total) == (2, 2)
    # Neither math rule matches the page's one equation exactly, and only
    # rendering could tell whether it draws the same: both are skipped.
    assert (by_name["maths"].passed, by_name["maths"].total) == (0, 0)
    assert by_name["maths"].skipped_math == 2
    assert score.math_skipped == 2 and score.math_total == 2
    # Categories with no scored rule are left out of the mean.
    assert score.overall == pytest.approx(1.0)
    assert score.unsupported == {"format": 1}
    table = format_bench_table(score)
    assert "2 skipped" in table and "unsupported rule types" in table


class RowRenderer:
    """Lays LaTeX characters out in a row, ignoring braces and spaces."""

    def render(self, latex):
        canon = latex.replace("{", "").replace("}", "").replace(" ", "")
        glyphs = tuple(Glyph(ch, 10.0 * i, 0.0, 10.0, 10.0) for i, ch in enumerate(canon))
        return RenderedEquation(f"<semantics><mn>{latex}</mn></semantics>", glyphs)


def test_score_with_renderer(tmp_path):
    score = score_bench(_bench(tmp_path), "sys", bootstrap=200, renderer=RowRenderer())
    maths = score.category("maths")
    assert (maths.passed, maths.total, maths.skipped_math) == (1, 2, 0)
    assert score.overall == pytest.approx((1 + 1 + 0.5) / 3)
    assert score.ci_low <= score.overall <= score.ci_high
    data = score.to_json()
    json.dumps(data)  # serialisable
    assert data["categories"]["maths"] == {
        "pass_rate": 0.5, "passed": 1, "total": 2, "skipped_math": 0,
        "ci": data["categories"]["maths"]["ci"],
    }
    assert [f["id"] for f in data["failed"]] == ["m2"]
    assert "results" in score.to_json(include_results=True)


def test_majority_of_repeats_decides(tmp_path):
    bench = _bench(tmp_path)
    system = bench / "sys"
    (system / "a_pg1_repeat2.md").write_text("Hello again")
    (system / "a_pg1_repeat3.md").write_text("Goodbye, Footer")
    score = score_bench(bench, "sys", bootstrap=0, renderer=None)
    results = {r.id: r for r in score.results}
    assert results["t1"].status == "pass" and results["t1"].score == pytest.approx(2 / 3)
    assert results["t2"].status == "pass" and results["t2"].repeats == 3
    (system / "a_pg1_repeat4.md").write_text("Footer only")
    score = score_bench(bench, "sys", bootstrap=0, renderer=None)
    # 2 of 4 repeats is not a majority.
    assert {r.id: r.status for r in score.results}["t1"] == "fail"
    assert score.ci_low is None


def test_missing_outputs(tmp_path):
    bench = _bench(tmp_path)
    (bench / "sys" / "sub" / "b_pg3_pg2_repeat1.md").unlink()
    with pytest.raises(MissingOutputsError, match="b_pg3.pdf page 2"):
        score_bench(bench, "sys", renderer=None)
    score = score_bench(bench, "sys", bootstrap=0, renderer=None, force=True)
    assert {r.id: r.status for r in score.results}["t3"] == "missing"
    assert score.category("text").passed == 2
    with pytest.raises(FileNotFoundError):
        score_bench(bench, "nosuch", renderer=None)


def test_rule_errors_are_reported_not_fatal(tmp_path):
    bench = _bench(tmp_path)
    _write_jsonl(
        bench / "tables.jsonl",
        [{"pdf": "a.pdf", "page": 1, "id": "tb", "type": "table", "cell": "1"}],
    )
    (bench / "sys" / "a_pg1_repeat1.md").write_text(
        'Hello <table><tr><td rowspan="x">1</td></tr></table>'
    )
    score = score_bench(bench, "sys", bootstrap=0, renderer=None)
    assert score.category("tables").passed == 0
    assert any(e.startswith("tb ") for e in score.errors)
    assert "errors: 1" in format_bench_table(score)


# Per-category results of the official scorer (olmocr 0.4.27, with KaTeX in
# headless Chromium) on the sample bench and olmOCR's own outputs.
OFFICIAL_SAMPLE = {"baseline": (19, 20), "blanks": (1, 1), "dataset": (87, 99)}
OFFICIAL_FAILED = {
    "earnings_table00", "lincoln_letter_minediff_00", "olmo2-pg4_table08",
    "discoverworld_crazy_table4_02", "olmo2-discoverworld_crazy_table4_t02",
    "mattsnotes_minediff_03", "building_notes_02", "mathfuncscol_01", "mathfuncs_06",
    "test_graphical_text_00", "test_graphical_text_01",
    "ff3d6e051903fe5ca9bc172ece14964c5632_01a",
    "headers_footers/ffaac214730d2b8c2ec842e3618ccb9c4259_pg1.pdf_baseline",
}


def test_sample_bench_matches_official_scores(olmocr_sample):
    score = score_bench(olmocr_sample, "olmocr_pipeline", bootstrap=100, renderer=None)
    counts = {c.name: (c.passed, c.total) for c in score.categories}
    assert counts["baseline"] == OFFICIAL_SAMPLE["baseline"]
    assert counts["blanks"] == OFFICIAL_SAMPLE["blanks"]
    # Every math rule of the sample needs rendering (none matches exactly), so
    # without a renderer all 12 are skipped and the rest must agree exactly.
    assert score.math_skipped == 12
    assert counts["dataset"] == (87 - 11, 99 - 12)
    failed = {r.id for r in score.results if r.status == "fail"}
    assert failed == OFFICIAL_FAILED - {"mathfuncs_06"}


def test_sample_bench_with_katex_is_identical_to_official(olmocr_sample):
    from ocrcli.evaluation.math_render import KatexRenderer, RendererUnavailable

    try:
        renderer = KatexRenderer()
    except RendererUnavailable as exc:
        pytest.skip(f"KaTeX rendering not available here: {exc}")
    with renderer:
        score = score_bench(olmocr_sample, "olmocr_pipeline", bootstrap=100, renderer=renderer)
    assert {c.name: (c.passed, c.total) for c in score.categories} == OFFICIAL_SAMPLE
    assert {r.id for r in score.results if r.status == "fail"} == OFFICIAL_FAILED
    assert round(100 * score.overall, 1) == 94.3


def test_sample_conversion_jobs_match_the_reference_outputs(olmocr_sample):
    jobs = bench_conversion_jobs(olmocr_sample, "olmocr_pipeline")
    expected = set((olmocr_sample / "olmocr_pipeline").rglob("*.md"))
    assert len(jobs) == 23
    assert {j.output_path for j in jobs} == expected
    assert all(j.pdf_path.is_file() for j in jobs)
