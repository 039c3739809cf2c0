"""olmOCR-Bench unit tests ("rules" here, to keep them apart from pytest tests).

Each JSONL line of a bench is one rule about one page: some text is present
or absent, one text comes before another, a table cell has given neighbours,
an equation is there, or the page passes baseline sanity checks. A rule's
``check`` looks at one Markdown output and says pass, fail or (for math without
a renderer) undecided. The matching rules and thresholds reproduce the
official scorer (olmocr 0.4.27) so that pass rates agree test by test.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PureWindowsPath
from typing import Any, ClassVar

from fuzzysearch import find_near_matches
from rapidfuzz import fuzz

from ocrcli.evaluation.math_render import EquationRenderer, equations_equivalent
from ocrcli.evaluation.normalize import normalize_bench_text
from ocrcli.evaluation.repetition import trailing_repeat_counts
from ocrcli.evaluation.tables import TableGrid, parse_html_tables, parse_markdown_tables


class BenchFormatError(ValueError):
    """A rule in a bench JSONL file is malformed (the official scorer refuses it too)."""


class Verdict(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    UNDECIDED = "undecided"  # a math rule that only rendering could settle


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    reason: str = ""


_PASS = Outcome(Verdict.PASS)


def _fail(reason: str) -> Outcome:
    return Outcome(Verdict.FAIL, reason)


@dataclass(kw_only=True)
class Rule:
    """Fields shared by all rule types; ``page`` is 1-based."""

    pdf: str
    page: int
    id: str
    type: str
    max_diffs: int = 0
    checked: str | None = None
    url: str | None = None

    TYPES: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        if not self.pdf:
            raise BenchFormatError("rule has an empty 'pdf'")
        if not _inside_pdfs(self.pdf):
            raise BenchFormatError(f"'pdf' {self.pdf!r} must be a path inside pdfs/ (not "
                                   "absolute, no '..'): outputs are named after it")
        if not self.id:
            raise BenchFormatError("rule has an empty 'id'")
        if not isinstance(self.max_diffs, int) or self.max_diffs < 0:
            raise BenchFormatError(f"{self.id}: max_diffs must be an integer >= 0")
        if self.type not in self.TYPES:
            raise BenchFormatError(f"{self.id}: type {self.type!r} is not one of {self.TYPES}")

    def check(self, content: str, renderer: EquationRenderer | None = None) -> Outcome:
        raise NotImplementedError


def _inside_pdfs(pdf: str) -> bool:
    """Whether a rule's `pdf` names a file under the bench's pdfs/ folder. The scorer joins
    it to that folder and names output files after it, so an absolute path or a '..' would
    read and write outside the bench's folders (path traversal from a downloaded bench)."""
    if not isinstance(pdf, str):
        return False
    # Windows rules see both separators and every anchor ('/x', 'C:x', UNC paths).
    path = PureWindowsPath(pdf)
    return not (path.anchor or ".." in path.parts)


def _threshold(expected: str, max_diffs: int) -> float:
    # max_diffs is an allowance of differing characters relative to the length.
    return 1.0 - max_diffs / (len(expected) if expected else 1)


@dataclass(kw_only=True)
class PresenceRule(Rule):
    """``present``: ``text`` occurs (fuzzily) in the output; ``absent``: it does not.

    The best partial-ratio alignment of the text against the output must reach
    ``1 - max_diffs/len(text)``. ``first_n``/``last_n`` restrict the search to
    the start/end of the normalised output (for headers and footers).
    """

    text: str
    case_sensitive: bool = True
    first_n: int | None = None
    last_n: int | None = None

    TYPES: ClassVar[tuple[str, ...]] = ("present", "absent")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.text = normalize_bench_text(self.text)
        if not self.text.strip():
            raise BenchFormatError(f"{self.id}: 'text' is empty after normalisation")

    def check(self, content: str, renderer: EquationRenderer | None = None) -> Outcome:
        query = self.text
        content = normalize_bench_text(content)
        if not self.case_sensitive:
            query, content = query.lower(), content.lower()
        # Zero or None both mean "no restriction".
        if self.first_n and self.last_n:
            content = content[: self.first_n] + content[-self.last_n :]
        elif self.first_n:
            content = content[: self.first_n]
        elif self.last_n:
            content = content[-self.last_n :]
        threshold = _threshold(query, self.max_diffs)
        score = fuzz.partial_ratio(query, content) / 100.0
        found = score >= threshold
        if found == (self.type == "present"):
            return _PASS
        verb = "missing" if self.type == "present" else "found"
        return _fail(f"{verb}: {query[:40]!r} (best {score:.3f}, threshold {threshold:.3f})")


@dataclass(kw_only=True)
class OrderRule(Rule):
    """``order``: some fuzzy occurrence of ``before`` starts before one of ``after``."""

    before: str
    after: str

    TYPES: ClassVar[tuple[str, ...]] = ("order",)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.before = normalize_bench_text(self.before)
        self.after = normalize_bench_text(self.after)
        if not self.before.strip() or not self.after.strip():
            raise BenchFormatError(f"{self.id}: 'before'/'after' is empty after normalisation")
        if self.max_diffs > len(self.before) // 2 or self.max_diffs > len(self.after) // 2:
            raise BenchFormatError(f"{self.id}: max_diffs exceeds half of 'before'/'after'")

    def check(self, content: str, renderer: EquationRenderer | None = None) -> Outcome:
        content = normalize_bench_text(content)
        # fuzzysearch reports one best match per cluster of overlapping matches;
        # the official scorer compares those clusters' starts.
        before = find_near_matches(self.before, content, max_l_dist=self.max_diffs)
        after = find_near_matches(self.after, content, max_l_dist=self.max_diffs)
        if not before:
            return _fail(f"'before' not found: {self.before[:40]!r}")
        if not after:
            return _fail(f"'after' not found: {self.after[:40]!r}")
        if min(m.start for m in before) < max(m.start for m in after):
            return _PASS
        return _fail(f"{self.before[:40]!r} does not come before {self.after[:40]!r}")


@dataclass(kw_only=True)
class TableRule(Rule):
    """``table``: a cell matching ``cell`` whose neighbours and headings match too.

    Each given relation must reach ``max(0.5, 1 - max_diffs/len(expected))``
    similarity. As in the official scorer, a neighbour relation is not checked
    when the cell sits on the table edge in that direction.
    """

    cell: str
    up: str = ""
    down: str = ""
    left: str = ""
    right: str = ""
    top_heading: str = ""
    left_heading: str = ""
    ignore_markdown_tables: bool = False

    TYPES: ClassVar[tuple[str, ...]] = ("table",)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("cell", "up", "down", "left", "right", "top_heading", "left_heading"):
            setattr(self, name, normalize_bench_text(getattr(self, name)))

    def _similar(self, expected: str, actual: str) -> float:
        return fuzz.ratio(expected, normalize_bench_text(actual)) / 100.0

    def _ok(self, expected: str, similarity: float) -> bool:
        return similarity >= max(0.5, _threshold(expected, self.max_diffs))

    def _heading_ok(self, expected: str, primary: list[str], fallback: list[str]) -> bool:
        """Heading check: the declared headings first, any earlier cell as a last resort.

        The fallback cells are consulted only when no declared heading shares a
        single character with the expectation (similarity 0), mirroring the
        official scorer's search order.
        """
        best = max((self._similar(expected, h) for h in primary), default=0.0)
        if self._ok(expected, best):
            return True
        if best > 0:
            return False
        return any(self._ok(expected, self._similar(expected, h)) for h in fallback)

    def _cell_fits(self, grid: TableGrid, r: int, c: int) -> bool:
        cells = grid.cells
        neighbours = (
            (self.up, r > 0, lambda: cells[r - 1][c]),
            (self.down, r < grid.n_rows - 1, lambda: cells[r + 1][c]),
            (self.left, c > 0, lambda: cells[r][c - 1]),
            (self.right, c < grid.n_cols - 1, lambda: cells[r][c + 1]),
        )
        for expected, inside, value in neighbours:
            if expected and inside and not self._ok(expected, self._similar(expected, value())):
                return False
        if self.top_heading:
            above = [i for i in range(r) if cells[i][c].strip()]
            declared = list(grid.col_headers.get(c, []))
            declared += [cells[i][c] for i in above if i in grid.header_rows]
            if not self._heading_ok(self.top_heading, declared, [cells[i][c] for i in above]):
                return False
        if self.left_heading:
            before = [j for j in range(c) if cells[r][j].strip()]
            declared = list(grid.row_headers.get(r, []))
            declared += [cells[r][j] for j in before if j in grid.header_cols]
            if not self._heading_ok(self.left_heading, declared, [cells[r][j] for j in before]):
                return False
        return True

    def check(self, content: str, renderer: EquationRenderer | None = None) -> Outcome:
        grids = [] if self.ignore_markdown_tables else parse_markdown_tables(content)
        grids += parse_html_tables(content)
        if not grids:
            return _fail("no table in the output")
        threshold = max(0.5, _threshold(self.cell, self.max_diffs))
        matched_any = False
        for grid in grids:
            for r in range(grid.n_rows):
                for c in range(grid.n_cols):
                    if self._similar(self.cell, grid.cells[r][c]) < threshold:
                        continue
                    matched_any = True
                    if self._cell_fits(grid, r, c):
                        return _PASS
        if matched_any:
            return _fail(f"cell {self.cell[:40]!r} found but its neighbours/headings differ")
        return _fail(f"no cell matches {self.cell[:40]!r}")


# Delimited equations, in the order the official scorer extracts (and removes) them.
_MATH_DELIMITERS = (
    re.compile(r"\\\((.+?)\\\)", re.DOTALL),
    re.compile(r"\\\[(.+?)\\\]", re.DOTALL),
)
_DOLLAR_DELIMITERS = (
    re.compile(r"\$\$(.+?)\$\$", re.DOTALL),
    re.compile(r"\$(.+?)\$", re.DOTALL),
)


def extract_equations(content: str, include_dollars: bool = True) -> list[str]:
    """LaTeX inside ``\\(..\\)``, ``\\[..\\]``, ``$$..$$`` and ``$..$``, stripped.

    Each kind is removed from the text once extracted, so ``$$x$$`` is not also
    read as two ``$`` spans.
    """
    patterns = _MATH_DELIMITERS + (_DOLLAR_DELIMITERS if include_dollars else ())
    equations: list[str] = []
    for pattern in patterns:
        equations.extend(m.strip() for m in pattern.findall(content))
        content = pattern.sub("", content)
    return equations


@dataclass(kw_only=True)
class MathRule(Rule):
    """``math``: an equation of the output equals ``math`` or renders the same."""

    math: str
    ignore_dollar_delimited: bool = False

    TYPES: ClassVar[tuple[str, ...]] = ("math",)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.math.strip():
            raise BenchFormatError(f"{self.id}: 'math' is empty")

    def check(self, content: str, renderer: EquationRenderer | None = None) -> Outcome:
        equations = extract_equations(content, include_dollars=not self.ignore_dollar_delimited)
        if self.math in equations:
            return _PASS
        if not equations:
            return _fail("no delimited equation in the output")
        if renderer is None:
            return Outcome(Verdict.UNDECIDED, "no exact match and no KaTeX renderer")
        reference = renderer.render(self.math)
        if reference is None:
            raise BenchFormatError(f"{self.id}: the reference equation does not render in KaTeX")
        # Most similar first: the likely match is usually found after one render.
        for latex in sorted(equations, key=lambda e: -fuzz.ratio(e, self.math)):
            candidate = renderer.render(latex)
            if candidate is not None and equations_equivalent(reference, candidate):
                return _PASS
        return _fail(f"no equation renders like {self.math[:40]!r}")


# Characters a page of the (Latin-script) bench should never produce: CJK
# ideographs, kana and common emoji blocks.
_DISALLOWED = re.compile(
    "[\u4e00-\u9fff\u3040-\u309f\u30a0-\u30ff"
    "\U0001f600-\U0001f64f\U0001f300-\U0001f5ff\U0001f680-\U0001f6ff\U0001f1e0-\U0001f1ff]"
)
_IMAGE_TAG = re.compile(r"!\[.*?\]\(.*?\)")


def _alnum_count(text: str) -> int:
    return sum(1 for ch in text if ch.isalnum())


@dataclass(kw_only=True)
class BaselineRule(Rule):
    """``baseline``: the page output is sane.

    With ``max_length`` it is a blank-page check (at most that many alphanumeric
    characters). Otherwise the output must contain an alphanumeric character,
    must not end in a character n-gram (n <= 5) repeated more than
    ``max_repeats`` times, and (optionally) must not contain CJK or emoji.
    """

    max_length: int | None = None
    max_length_skips_image_alt_tags: bool = False
    max_repeats: int = 30
    check_disallowed_characters: bool = True

    TYPES: ClassVar[tuple[str, ...]] = ("baseline",)

    def check(self, content: str, renderer: EquationRenderer | None = None) -> Outcome:
        if self.max_length is not None:
            counted = content
            if self.max_length_skips_image_alt_tags:
                counted = _IMAGE_TAG.sub("", counted)
            n = _alnum_count(counted)
            if n > self.max_length:
                return _fail(f"{n} alphanumeric characters on a page expected to be blank")
            return _PASS
        if _alnum_count(content) == 0:
            return _fail("no alphanumeric characters")
        for size, count in enumerate(trailing_repeat_counts(content, max_ngram=5), start=1):
            if count > self.max_repeats:
                return _fail(f"output ends with a {size}-gram repeated {count} times")
        if self.check_disallowed_characters:
            bad = _DISALLOWED.findall(content)
            if bad:
                return _fail(f"disallowed characters {''.join(bad[:10])!r}")
        return _PASS


RULE_CLASSES: dict[str, type[Rule]] = {
    t: cls
    for cls in (PresenceRule, OrderRule, TableRule, MathRule, BaselineRule)
    for t in cls.TYPES
}


@dataclass
class LoadedRules:
    rules: list[Rule] = field(default_factory=list)
    # Rule types this scorer does not implement (e.g. "format" at olmOCR HEAD), with counts.
    unsupported: dict[str, int] = field(default_factory=dict)


def load_rules(
    lines: list[str], source: str, on_unknown_field: Callable[[str], None] | None = None
) -> LoadedRules:
    """Parse JSONL rule lines; blank lines are skipped.

    Unknown rule types are counted rather than fatal, so that a newer bench can
    still be scored on the types we know. Unknown fields are ignored (reported
    through ``on_unknown_field`` if given).
    """
    loaded = LoadedRules()
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            data: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchFormatError(f"{where}: invalid JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise BenchFormatError(f"{where}: a rule must be a JSON object")
        cls = RULE_CLASSES.get(data.get("type", ""))
        if cls is None:
            kind = str(data.get("type"))
            loaded.unsupported[kind] = loaded.unsupported.get(kind, 0) + 1
            continue
        known = set(cls.__dataclass_fields__)
        extra = set(data) - known
        if extra and on_unknown_field is not None:
            on_unknown_field(f"{where}: ignoring fields {sorted(extra)}")
        try:
            loaded.rules.append(cls(**{k: v for k, v in data.items() if k in known}))
        except BenchFormatError as exc:
            raise BenchFormatError(f"{where}: {exc}") from exc
        except TypeError as exc:  # a required field is missing
            raise BenchFormatError(f"{where}: {exc}") from exc
    return loaded
