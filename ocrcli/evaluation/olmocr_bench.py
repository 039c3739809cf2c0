"""Score a system's Markdown outputs on olmOCR-Bench (or any bench in its layout).

Folder layout (the official one)::

    BENCH/*.jsonl                               rules; each file is one category
    BENCH/pdfs/<rel>.pdf                        the documents (sub-folders allowed)
    BENCH/<system>/<rel>_pg<P>_repeat<k>.md     a system's output for page P, try k

Scoring follows the official scorer (olmocr 0.4.27): a rule passes on a page
when it passes on more than half of the repeats; a category's score is its
pass rate; the overall score is the unweighted mean of the category scores;
every PDF without a baseline rule gets one on page 1, and those form their own
"baseline" category. Deliberate differences: a rule that fails to run is
reported as an error instead of voiding the whole system, unknown rule types
and fields are skipped and counted instead of fatal, output files are matched
to pages by parsing their names exactly, and math rules that only rendering
could decide are skipped (and counted) when no KaTeX renderer is available.

:func:`score_bench` is the entry point for ``ocrcli eval``;
:func:`bench_conversion_jobs` lists the pages to convert and where to write them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ocrcli.evaluation.bench_rules import (
    BaselineRule,
    BenchFormatError,
    Rule,
    Verdict,
    load_rules,
)
from ocrcli.evaluation.bootstrap import bootstrap_mean_of_means
from ocrcli.evaluation.math_render import EquationRenderer, KatexRenderer, RendererUnavailable

BASELINE_CATEGORY = "baseline"
CONFIDENCE_LEVEL = 0.95
_OUTPUT_NAME = re.compile(r"^(?P<stem>.+)_pg(?P<page>\d+)_repeat(?P<repeat>\d+)\.md$")


class MissingOutputsError(FileNotFoundError):
    """Some rule's page has no output file (pass ``force=True`` to score it as failed)."""

    def __init__(self, missing: list[str]) -> None:
        shown = "\n  ".join(missing[:20])
        more = f"\n  ... and {len(missing) - 20} more" if len(missing) > 20 else ""
        super().__init__(f"{len(missing)} page(s) have no output:\n  {shown}{more}")
        self.missing = missing


# --- the bench ---------------------------------------------------------------


@dataclass
class Bench:
    """The rules of a bench folder, grouped into categories."""

    root: Path
    pdfs: list[str]  # paths relative to pdfs/, with "/" separators
    rules: list[Rule]
    category_of: dict[str, str]  # rule id -> category
    categories: list[str]  # in display order
    unsupported: dict[str, int] = field(default_factory=dict)

    def pages(self) -> list[tuple[str, int]]:
        """Every (pdf, page) some rule needs, sorted."""
        return sorted({(r.pdf, r.page) for r in self.rules})


def _pdf_stem(pdf: str) -> str:
    return pdf[: -len(".pdf")] if pdf.lower().endswith(".pdf") else pdf


def load_bench(bench_dir: Path, skip_baseline: bool = False) -> Bench:
    """Read ``bench_dir/*.jsonl`` and ``bench_dir/pdfs/`` and add the automatic baseline rules."""
    bench_dir = Path(bench_dir)
    pdf_root = bench_dir / "pdfs"
    if not pdf_root.is_dir():
        raise FileNotFoundError(f"{pdf_root} does not exist")
    pdfs = sorted(p.relative_to(pdf_root).as_posix() for p in pdf_root.rglob("*.pdf"))
    jsonl_files = sorted(bench_dir.glob("*.jsonl"))
    if not jsonl_files:
        raise FileNotFoundError(f"no .jsonl rule files in {bench_dir}")

    rules: list[Rule] = []
    category_of: dict[str, str] = {}
    categories: list[str] = []
    unsupported: dict[str, int] = defaultdict(int)
    for path in jsonl_files:
        # Category names are the file stems; a file called baseline.jsonl keeps
        # its suffix so as not to merge with the automatic baseline category.
        name = path.name if path.stem == BASELINE_CATEGORY else path.stem
        loaded = load_rules(path.read_text(encoding="utf-8").splitlines(), str(path))
        for kind, count in loaded.unsupported.items():
            unsupported[kind] += count
        categories.append(name)
        for rule in loaded.rules:
            if rule.id in category_of:
                raise BenchFormatError(f"{path}: duplicate rule id {rule.id!r}")
            category_of[rule.id] = name
            rules.append(rule)

    has_baseline = {r.pdf for r in rules if r.type == "baseline"}
    auto = [
        BaselineRule(id=f"{pdf}_baseline", pdf=pdf, page=1, type="baseline")
        for pdf in pdfs
        if pdf not in has_baseline
    ]
    for rule in auto:
        if rule.id in category_of:
            raise BenchFormatError(f"rule id {rule.id!r} clashes with an automatic baseline rule")
        category_of[rule.id] = BASELINE_CATEGORY
    rules.extend(auto)
    if auto:
        categories.append(BASELINE_CATEGORY)

    if skip_baseline:
        rules = [r for r in rules if r.type != "baseline"]
    used = {category_of[r.id] for r in rules}
    categories = sorted(c for c in categories if c in used)
    return Bench(bench_dir, pdfs, rules, category_of, categories, dict(unsupported))


@dataclass(frozen=True)
class ConversionJob:
    """One page to convert for a bench, and where its Markdown must be written."""

    pdf_path: Path
    page: int  # 1-based
    output_path: Path


def _check_system_name(system: str) -> None:
    if not system or system == "pdfs" or "/" in system or "\\" in system or system.startswith("."):
        raise ValueError(f"invalid system name {system!r} (a plain folder name other than 'pdfs')")


def output_path(bench_dir: Path, system: str, pdf: str, page: int, repeat: int = 1) -> Path:
    """Where the official layout expects ``system``'s output for ``pdf`` (relative to pdfs/)."""
    _check_system_name(system)
    return Path(bench_dir) / system / f"{_pdf_stem(pdf)}_pg{page}_repeat{repeat}.md"


def bench_conversion_jobs(bench_dir: Path, system: str, repeat: int = 1) -> list[ConversionJob]:
    """The (pdf, page, output file) triples to produce before scoring ``system``.

    Covers every page some rule tests, including page 1 of every PDF for the
    automatic baseline rule. Output files follow the official layout, so the
    official scorer can read the same folder.
    """
    bench = load_bench(Path(bench_dir))
    return [
        ConversionJob(
            pdf_path=bench.root / "pdfs" / pdf,
            page=page,
            output_path=output_path(bench.root, system, pdf, page, repeat),
        )
        for pdf, page in bench.pages()
    ]


# --- results -----------------------------------------------------------------

RuleStatus = Literal["pass", "fail", "skipped", "missing"]


@dataclass(frozen=True)
class RuleResult:
    """How one rule fared: ``score`` is the share of repeats that passed."""

    id: str
    category: str
    type: str
    pdf: str
    page: int
    status: RuleStatus
    score: float
    repeats: int
    reason: str = ""


@dataclass(frozen=True)
class CategoryScore:
    name: str
    passed: int
    total: int  # rules scored (skipped math rules excluded)
    skipped_math: int
    ci_low: float | None
    ci_high: float | None

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass(frozen=True)
class TypeScore:
    """Mean per-repeat pass share for one rule type (the official per-type breakdown)."""

    type: str
    mean: float
    count: int


@dataclass
class BenchScore:
    """A system's olmOCR-Bench result."""

    system: str
    bench_dir: str
    categories: list[CategoryScore]
    overall: float
    ci_low: float | None
    ci_high: float | None
    confidence: float
    bootstrap: int
    seed: int
    by_type: list[TypeScore]
    math_total: int
    math_skipped: int
    math_renderer: str  # "katex", "none", or "unavailable: <reason>"
    results: list[RuleResult]
    errors: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unsupported: dict[str, int] = field(default_factory=dict)

    @property
    def ci_half_width(self) -> float | None:
        if self.ci_low is None or self.ci_high is None:
            return None
        return (self.ci_high - self.ci_low) / 2

    def category(self, name: str) -> CategoryScore:
        return next(c for c in self.categories if c.name == name)

    def to_json(self, include_results: bool = False) -> dict[str, Any]:
        """A JSON-serialisable summary; failed rules are listed with their reasons."""
        data: dict[str, Any] = {
            "system": self.system,
            "bench_dir": self.bench_dir,
            "overall": self.overall,
            "ci": [self.ci_low, self.ci_high],
            "ci_half_width": self.ci_half_width,
            "confidence": self.confidence,
            "bootstrap": self.bootstrap,
            "seed": self.seed,
            "categories": {
                c.name: {
                    "pass_rate": c.pass_rate,
                    "passed": c.passed,
                    "total": c.total,
                    "skipped_math": c.skipped_math,
                    "ci": [c.ci_low, c.ci_high],
                }
                for c in self.categories
            },
            "by_type": {t.type: {"mean": t.mean, "count": t.count} for t in self.by_type},
            "math": {
                "total": self.math_total,
                "skipped": self.math_skipped,
                "renderer": self.math_renderer,
            },
            "failed": [
                {"id": r.id, "status": r.status, "reason": r.reason}
                for r in self.results
                if r.status in ("fail", "missing")
            ],
            "skipped": [r.id for r in self.results if r.status == "skipped"],
            "errors": list(self.errors),
            "missing": list(self.missing),
            "unsupported_rule_types": dict(self.unsupported),
        }
        if include_results:
            data["results"] = [asdict(r) for r in self.results]
        return data


# --- scoring -----------------------------------------------------------------


def _index_outputs(system_dir: Path) -> dict[tuple[str, int], list[Path]]:
    """Map (pdf stem relative to pdfs/, page) to the system's output files for it."""
    outputs: dict[tuple[str, int], list[Path]] = defaultdict(list)
    for path in sorted(system_dir.rglob("*.md")):
        match = _OUTPUT_NAME.match(path.relative_to(system_dir).as_posix())
        if match:
            outputs[(match.group("stem"), int(match.group("page")))].append(path)
    return outputs


@contextmanager
def _renderer_for(
    bench: Bench, renderer: EquationRenderer | Literal["auto"] | None
) -> Iterator[tuple[EquationRenderer | None, str]]:
    """The renderer to use and a label for reports; opens (and closes) KaTeX for "auto"."""
    if renderer != "auto":
        yield renderer, ("none" if renderer is None else type(renderer).__name__)
        return
    if not any(r.type == "math" for r in bench.rules):
        yield None, "not needed"
        return
    try:
        katex = KatexRenderer()
    except RendererUnavailable as exc:
        yield None, f"unavailable: {exc}"
        return
    try:
        yield katex, "katex"
    finally:
        katex.close()


def _judge(
    rule: Rule,
    files: list[Path],
    renderer: EquationRenderer | None,
    read: dict[Path, str | Exception],
    errors: list[str],
) -> tuple[RuleStatus, float, str]:
    passes = undecided = 0
    reasons: list[str] = []
    for path in files:
        if path not in read:
            try:
                read[path] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                read[path] = exc
        content = read[path]
        if isinstance(content, Exception):
            errors.append(f"{rule.id}: cannot read {path}: {content}")
            reasons.append(str(content))
            continue
        try:
            outcome = rule.check(content, renderer)
        except Exception as exc:  # a malformed output must not stop the whole run
            errors.append(f"{rule.id} on {path.name}: {type(exc).__name__}: {exc}")
            reasons.append(f"error: {exc}")
            continue
        if outcome.verdict is Verdict.PASS:
            passes += 1
        elif outcome.verdict is Verdict.UNDECIDED:
            undecided += 1
            reasons.append(outcome.reason)
        else:
            reasons.append(outcome.reason)
    score = passes / len(files)
    # Unless passes already form a majority, an undecided repeat leaves the
    # rule's result unknown.
    if undecided and not score > 0.5:
        return "skipped", score, reasons[0]
    return ("pass" if score > 0.5 else "fail"), score, (reasons[0] if reasons else "")


def _judge_rules(
    bench: Bench, outputs: dict[tuple[str, int], list[Path]],
    renderer: EquationRenderer | Literal["auto"] | None,
) -> tuple[list[RuleResult], list[str], str]:
    """Every rule's result, the errors met on the way, and the math renderer's label."""
    results: list[RuleResult] = []
    errors: list[str] = []
    read: dict[Path, str | Exception] = {}
    with _renderer_for(bench, renderer) as (active, renderer_label):
        for rule in bench.rules:
            files = outputs.get((_pdf_stem(rule.pdf), rule.page), [])
            category = bench.category_of[rule.id]
            if not files:
                status: RuleStatus = "missing"
                score, reason = 0.0, "no output file for this page"
            else:
                status, score, reason = _judge(rule, files, active, read, errors)
            results.append(
                RuleResult(
                    rule.id, category, rule.type, rule.pdf, rule.page, status, score,
                    len(files), reason,
                )
            )
    return results, errors, renderer_label


def _category_scores(
    bench: Bench, results: list[RuleResult], outcomes: dict[str, list[float]], bootstrap: int,
    rng: np.random.Generator,
) -> list[CategoryScore]:
    """Each category's pass count with its bootstrap interval, in the bench's order."""
    categories = []
    for name in bench.categories:
        values = outcomes[name]
        ci = bootstrap_mean_of_means([values], bootstrap, rng, CONFIDENCE_LEVEL)
        categories.append(
            CategoryScore(
                name=name,
                passed=int(sum(values)),
                total=len(values),
                skipped_math=sum(
                    1 for r in results if r.category == name and r.status == "skipped"
                ),
                ci_low=ci[0] if ci else None,
                ci_high=ci[1] if ci else None,
            )
        )
    return categories


def score_bench(
    bench_dir: Path,
    system: str,
    bootstrap: int = 1000,
    seed: int = 0,
    *,
    renderer: EquationRenderer | Literal["auto"] | None = "auto",
    force: bool = False,
    skip_baseline: bool = False,
) -> BenchScore:
    """Score ``bench_dir/system`` against the bench's rules.

    ``renderer="auto"`` starts KaTeX in headless Chromium when the bench has
    math rules and that is possible; ``None`` decides math by exact match only.
    Without ``force``, a tested page with no output raises
    :class:`MissingOutputsError`; with it, such rules fail. ``bootstrap`` is the
    number of resamples for the confidence intervals (0 for none).
    """
    bench_dir = Path(bench_dir)
    _check_system_name(system)
    system_dir = bench_dir / system
    if not system_dir.is_dir():
        raise FileNotFoundError(f"no output folder {system_dir}")
    bench = load_bench(bench_dir, skip_baseline=skip_baseline)
    outputs = _index_outputs(system_dir)

    missing = sorted(
        {
            f"{pdf} page {page} (expected {output_path(bench_dir, system, pdf, page)})"
            for pdf, page in bench.pages()
            if not outputs.get((_pdf_stem(pdf), page))
        }
    )
    if missing and not force:
        raise MissingOutputsError(missing)

    results, errors, renderer_label = _judge_rules(bench, outputs, renderer)
    rng = np.random.default_rng(seed)
    scored = [r for r in results if r.status != "skipped"]
    outcomes: dict[str, list[float]] = {c: [] for c in bench.categories}
    for r in scored:
        outcomes[r.category].append(1.0 if r.status == "pass" else 0.0)
    categories = _category_scores(bench, results, outcomes, bootstrap, rng)
    rated = [c for c in categories if c.total]
    overall = sum(c.pass_rate for c in rated) / len(rated) if rated else 0.0
    overall_ci = bootstrap_mean_of_means(
        [outcomes[c.name] for c in rated], bootstrap, rng, CONFIDENCE_LEVEL
    )

    by_type: dict[str, list[float]] = defaultdict(list)
    for r in scored:
        by_type[r.type].append(r.score)
    math_rules = [r for r in results if r.type == "math"]
    return BenchScore(
        system=system,
        bench_dir=str(bench_dir),
        categories=categories,
        overall=overall,
        ci_low=overall_ci[0] if overall_ci else None,
        ci_high=overall_ci[1] if overall_ci else None,
        confidence=CONFIDENCE_LEVEL,
        bootstrap=bootstrap,
        seed=seed,
        by_type=[TypeScore(t, sum(v) / len(v), len(v)) for t, v in sorted(by_type.items())],
        math_total=len(math_rules),
        math_skipped=sum(1 for r in math_rules if r.status == "skipped"),
        math_renderer=renderer_label,
        results=results,
        errors=errors,
        missing=missing,
        unsupported=bench.unsupported,
    )


# --- report ------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def format_bench_table(score: BenchScore) -> str:
    """The per-category table (plus overall, per-type and caveat lines) as plain text."""
    width = max([len("category"), len("overall"), *(len(c.name) for c in score.categories)])
    level = f"{100 * score.confidence:.0f}% CI"
    lines = [
        f"olmOCR-Bench: system {score.system!r} in {score.bench_dir}",
        f"{'category':<{width}}  {'passed':>6}  {'total':>5}  {'score':>6}  {level}",
    ]
    for c in score.categories:
        ci = f"[{_pct(c.ci_low)}, {_pct(c.ci_high)}]" if c.ci_low is not None else "-"
        skipped = f"  ({c.skipped_math} math skipped)" if c.skipped_math else ""
        counts = f"{c.passed:>6}  {c.total:>5}  {_pct(c.pass_rate):>5}%"
        lines.append(f"{c.name:<{width}}  {counts}  {ci}{skipped}")
    half = score.ci_half_width
    overall_ci = "-"
    if half is not None:
        overall_ci = f"[{_pct(score.ci_low)}, {_pct(score.ci_high)}] (±{_pct(half)})"
    passed = sum(c.passed for c in score.categories)
    total = sum(c.total for c in score.categories)
    lines.append(
        f"{'overall':<{width}}  {passed:>6}  {total:>5}  {_pct(score.overall):>5}%  {overall_ci}"
    )
    lines.append("(overall = unweighted mean of the category scores)")
    lines.append(
        "by type: "
        + ", ".join(f"{t.type} {_pct(t.mean)}% ({t.count})" for t in score.by_type)
    )
    lines.append(
        f"math: {score.math_total} rules, {score.math_skipped} skipped "
        f"(renderer: {score.math_renderer})"
    )
    if score.math_skipped:
        lines.append(
            "  skipped math rules had no exact match and need KaTeX rendering to decide; "
            "their categories' scores leave them out"
        )
    if score.unsupported:
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(score.unsupported.items()))
        lines.append(f"unsupported rule types not scored: {kinds}")
    if score.missing:
        lines.append(f"pages without output (scored as failed): {len(score.missing)}")
    if score.errors:
        lines.append(
            f"errors: {len(score.errors)} (the official scorer would fail the whole system)"
        )
        lines.extend(f"  {e}" for e in score.errors[:10])
    return "\n".join(lines)
