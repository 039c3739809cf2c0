"""Page quality checks: dense verifiable checks on one page's Markdown.

Each check reads one page of Markdown and returns partial credit in [0, 1],
1.0 meaning nothing wrong was found (including "nothing to check"). They need
no ground truth, so they serve both as the per-page quality flags in the
converter's output (`pages.PageAssembly.record`) and as reward functions for RL
fine-tuning, in the spirit of the verifiable rewards of Jina-OCR-v1:

* :func:`formula_score`: math delimiters pair up and every formula is
  well formed (balanced braces, ``\\left``/``\\right`` and ``\\begin``/``\\end``).
* :func:`table_score`: every table has a header, rectangular rows and content
  (and, for HTML, a closing tag).
* :func:`markdown_score`: heading levels do not skip, ordered lists count on,
  code fences are closed.
* :func:`repetition_score`: the output does not loop.

:func:`quality_flags` bundles all five (``readable_text`` is :func:`ocrcli.verdict.readable_score`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ocrcli.evaluation.html_tree import Element, parse_html
from ocrcli.evaluation.repetition import (
    looped_token_fraction,
    tokenize_for_repetition,
    trailing_repeat_counts,
)
from ocrcli.verdict import readable_score

# --- code masking ------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_INLINE_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)


@dataclass(frozen=True)
class _Fences:
    blocks: int  # fenced code blocks opened
    unclosed: int  # of which never closed (0 or 1: an open fence swallows the rest)


def _scan_fences(lines: list[str]) -> tuple[list[bool], _Fences]:
    """Which lines belong to fenced code blocks (fences included), and fence counts."""
    in_code = [False] * len(lines)
    opener: str | None = None
    blocks = 0
    for i, line in enumerate(lines):
        match = _FENCE.match(line)
        if opener is None:
            if match:
                opener = match.group(1)
                blocks += 1
                in_code[i] = True
            continue
        in_code[i] = True
        # A closing fence uses the opener's character, at least as many times,
        # and carries no info string.
        if match and match.group(1)[0] == opener[0] and len(match.group(1)) >= len(opener):
            if not line.strip().strip(opener[0]):
                opener = None
    return in_code, _Fences(blocks, 1 if opener is not None else 0)


def _prose_lines(markdown: str) -> list[str]:
    """The lines of ``markdown`` with code blocks blanked and inline code spans removed.

    Line numbering is preserved so that blank-line paragraph boundaries stay put.
    """
    lines = markdown.split("\n")
    in_code, _ = _scan_fences(lines)
    text = "\n".join("" if code else line for line, code in zip(lines, in_code, strict=True))
    text = _INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return text.split("\n")


# --- formulas ----------------------------------------------------------------


@dataclass(frozen=True)
class _MathScan:
    segments: list[str]  # contents of properly delimited formulas
    unpaired: int  # delimiters without a partner


def _can_open_dollar(text: str, i: int) -> bool:
    # Pandoc's rule: an opening $ is followed by a non-space character.
    return i + 1 < len(text) and not text[i + 1].isspace()


def _scan_math(text: str) -> _MathScan:
    """Find delimited formulas; report delimiters that never pair.

    A ``$`` that does not close before the paragraph ends is an unpaired
    delimiter, except when it is followed by a digit (a price such as "$5").
    """
    segments: list[str] = []
    unpaired = 0
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt in "([":
                closer = "\\)" if nxt == "(" else "\\]"
                end = text.find(closer, i + 2)
                if end < 0:
                    unpaired += 1
                    i += 2
                    continue
                segments.append(text[i + 2 : end])
                i = end + 2
                continue
            if nxt in ")]":
                unpaired += 1  # a closer with no opener
            i += 2  # any other escape (\$, \\, \alpha...) is skipped whole
            continue
        if ch == "$":
            if text.startswith("$$", i):
                end = text.find("$$", i + 2)
                if end < 0:
                    unpaired += 1
                    i += 2
                    continue
                segments.append(text[i + 2 : end])
                i = end + 2
                continue
            if _can_open_dollar(text, i):
                end = _find_inline_close(text, i + 1)
                if end is not None:
                    segments.append(text[i + 1 : end])
                    i = end + 1
                    continue
                if not text[i + 1].isdigit():
                    unpaired += 1
        i += 1
    return _MathScan(segments, unpaired)


def _find_inline_close(text: str, start: int) -> int | None:
    """Index of the ``$`` closing an inline formula opened before ``start``, if any."""
    j = start
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "\n" and text.startswith("\n\n", j):
            return None  # formulas do not cross paragraphs
        if ch == "$":
            # Pandoc's rule: no space before the closing $, no digit right after it.
            after_ok = j + 1 >= len(text) or not text[j + 1].isdigit()
            if not text[j - 1].isspace() and after_ok and not text.startswith("$$", j):
                return j
            if text.startswith("$$", j):
                return None
        j += 1
    return None


_ENV = re.compile(r"\\(begin|end)\s*\{([^{}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z]+\*?")
_LEFT_RIGHT = re.compile(r"\\(left|right)(?![A-Za-z])")


def _braces_balanced(latex: str) -> bool:
    depth = 0
    i = 0
    while i < len(latex):
        ch = latex[i]
        if ch == "\\":
            i += 2  # \{ and \} are literal braces
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                return False
        i += 1
    return depth == 0


def formula_is_wellformed(latex: str) -> bool:
    """Whether one formula's LaTeX is structurally sound.

    Checks balanced braces, ``\\left``/``\\right`` pairs, and ``\\begin``/``\\end``
    environments that nest properly with valid names. It does not check that
    macros exist; that needs a renderer.
    """
    if not latex.strip() or not _braces_balanced(latex):
        return False
    depth = 0
    for match in _LEFT_RIGHT.finditer(latex):
        depth += 1 if match.group(1) == "left" else -1
        if depth < 0:
            return False
    if depth:
        return False
    stack: list[str] = []
    for kind, name in _ENV.findall(latex):
        name = name.strip()
        if not _ENV_NAME.fullmatch(name):
            return False
        if kind == "begin":
            stack.append(name)
        elif not stack or stack.pop() != name:
            return False
    return not stack


def formula_score(markdown: str) -> float:
    """Share of math units that are sound: each formula counts once (1 if well
    formed) and each unpaired delimiter counts once (0). No math gives 1.0."""
    scan = _scan_math("\n".join(_prose_lines(markdown)))
    total = len(scan.segments) + scan.unpaired
    if total == 0:
        return 1.0
    return sum(formula_is_wellformed(s) for s in scan.segments) / total


# --- tables ------------------------------------------------------------------

_SEPARATOR_CELL = re.compile(r"\s*:?-+:?\s*")


def _pipe_cells(line: str) -> list[str]:
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return re.split(r"(?<!\\)\|", body)


def _is_separator_row(line: str) -> bool:
    cells = _pipe_cells(line)
    return bool(cells) and all(_SEPARATOR_CELL.fullmatch(c) for c in cells)


def _markdown_table_blocks(lines: list[str]) -> list[list[str]]:
    """Runs of two or more consecutive lines containing a pipe."""
    blocks: list[list[str]] = []
    block: list[str] = []
    for line in [*lines, ""]:
        if "|" in line and not line.lstrip().startswith("<"):
            block.append(line)
            continue
        if len(block) >= 2:
            blocks.append(block)
        block = []
    return blocks


def _markdown_table_score(block: list[str]) -> float:
    has_header = _is_separator_row(block[1]) and not _is_separator_row(block[0])
    rows = [_pipe_cells(line) for line in block if not _is_separator_row(line)]
    if not rows:
        return 0.0
    width = len(rows[0])
    rectangular = sum(len(r) == width for r in rows) / len(rows)
    data_rows = rows[1:] if has_header else rows
    has_content = any(c.strip() for r in data_rows for c in r)
    return (has_header + rectangular + has_content) / 3


def _own_rows(table: Element) -> list[Element]:
    """The table's rows, not those of tables nested inside it."""
    rows: list[Element] = []
    stack = list(reversed(list(table.elements())))
    while stack:
        node = stack.pop()
        if node.tag == "tr":
            rows.append(node)
        elif node.tag != "table":
            stack.extend(reversed(list(node.elements())))
    return rows


def _span(cell: Element, name: str) -> int:
    try:
        return max(1, int(cell.attrs.get(name, "1")))
    except ValueError:
        return 1


def _html_table_score(table: Element, closed: bool) -> float:
    rows = _own_rows(table)
    if not rows:
        return 0.0
    # Occupied width of each row, with row spans carried down.
    carried: dict[int, int] = {}  # row index -> columns taken by spans from above
    widths: list[int] = []
    cells: list[Element] = []
    for r, row in enumerate(rows):
        row_cells = [c for c in row.elements() if c.tag in ("td", "th")]
        cells.extend(row_cells)
        width = carried.get(r, 0)
        for cell in row_cells:
            colspan, rowspan = _span(cell, "colspan"), _span(cell, "rowspan")
            width += colspan
            for k in range(1, rowspan):
                carried[r + k] = carried.get(r + k, 0) + colspan
        widths.append(width)
    full = max(widths)
    rectangular = sum(w == full for w in widths) / len(widths) if full else 0.0
    has_header = table.find("thead") is not None or any(c.tag == "th" for c in cells)
    has_content = any(c.text().strip() for c in cells)
    return (has_header + rectangular + has_content + closed) / 4


_TABLE_OPEN = re.compile(r"<table\b", re.IGNORECASE)
_TABLE_CLOSE = re.compile(r"</table\s*>", re.IGNORECASE)


def table_score(markdown: str) -> float:
    """Mean per-table structure score; no table gives 1.0.

    A Markdown table earns thirds for a header separator on its second line,
    rows as wide as the first, and a non-empty data cell. An HTML table earns
    quarters for a header (``<th>``/``<thead>``), equal row widths (spans
    counted), a non-empty cell, and being closed by ``</table>``.
    """
    lines = _prose_lines(markdown)
    scores = [_markdown_table_score(b) for b in _markdown_table_blocks(lines)]
    prose = "\n".join(lines)
    root = parse_html(prose, implicit_table_closes=True)
    tables = root.find_all("table")
    # Nested tables are judged as part of their parent only.
    nested = {id(inner) for t in tables for inner in t.find_all("table")}
    top_level = [t for t in tables if id(t) not in nested]
    # Tables left open (truncated output) are the last ones opened.
    n_unclosed = max(0, len(_TABLE_OPEN.findall(prose)) - len(_TABLE_CLOSE.findall(prose)))
    for k, table in enumerate(top_level):
        closed = k < len(top_level) - n_unclosed
        scores.append(_html_table_score(table, closed))
    return sum(scores) / len(scores) if scores else 1.0


# --- Markdown structure ------------------------------------------------------

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+|$)")
_TOO_DEEP_HEADING = re.compile(r"^ {0,3}#{7,}[ \t]")
_ORDERED_ITEM = re.compile(r"^( *)(\d{1,9})([.)])[ \t]+\S")
_BULLET_ITEM = re.compile(r"^( *)[-*+][ \t]+\S")


def _heading_score(lines: list[str]) -> float | None:
    ok = total = 0
    previous: int | None = None
    for line in lines:
        if _TOO_DEEP_HEADING.match(line):
            total += 1  # "#######" is not a heading level
            continue
        match = _HEADING.match(line)
        if not match:
            continue
        level = len(match.group(1))
        total += 1
        # A page may start at any level (it can be mid-document); after that a
        # heading may go at most one level deeper than the previous one.
        ok += previous is None or level <= previous + 1
        previous = level
    return ok / total if total else None


def _list_score(lines: list[str]) -> float | None:
    """Share of consecutive ordered-list items that count on by one."""
    ok = total = 0
    # Open lists by indentation: indent -> (delimiter, last number).
    open_lists: dict[int, tuple[str, int]] = {}
    blank_run = 0
    for line in lines:
        if not line.strip():
            blank_run += 1
            continue
        indent = len(line) - len(line.lstrip(" "))
        match = _ORDERED_ITEM.match(line)
        if match:
            indent, number, delim = len(match.group(1)), int(match.group(2)), match.group(3)
            for deeper in [k for k in open_lists if k > indent]:
                del open_lists[deeper]
            previous = open_lists.get(indent)
            if previous is not None and previous[0] == delim:
                total += 1
                ok += number == previous[1] + 1
            open_lists[indent] = (delim, number)
        elif _BULLET_ITEM.match(line):
            for deeper in [k for k in open_lists if k > indent]:
                del open_lists[deeper]
            open_lists.pop(indent, None)
        elif indent == 0 and (blank_run or not open_lists):
            open_lists.clear()  # a new paragraph at the margin ends every list
        blank_run = 0
    return ok / total if total else None


def markdown_score(markdown: str) -> float:
    """Mean of the applicable structure checks; nothing to check gives 1.0.

    * headings: share of headings no more than one level deeper than the one
      before (and no ``#######``);
    * ordered lists: share of items numbered one more than the previous item;
    * code fences: share of fenced blocks that are closed.
    """
    lines = markdown.split("\n")
    _, fences = _scan_fences(lines)
    prose = _prose_lines(markdown)
    parts = [_heading_score(prose), _list_score(prose)]
    if fences.blocks:
        parts.append(1 - fences.unclosed / fences.blocks)
    applicable = [p for p in parts if p is not None]
    return sum(applicable) / len(applicable) if applicable else 1.0


# --- repetition --------------------------------------------------------------

# The official baseline check fails a page whose last n-gram repeats more than
# this many times.
_MAX_TRAILING_REPEATS = 30


def repetition_score(markdown: str) -> float:
    """1 minus the share of the output that is a repetition loop.

    Word-level loops anywhere (see
    :func:`~ocrcli.evaluation.repetition.looped_token_fraction`) and
    character-level loops at the end (a 1- to 5-character string repeated more
    than 30 times, as in the bench's baseline check) both count; the larger
    share is taken.
    """
    words = looped_token_fraction(tokenize_for_repetition(markdown))
    collapsed = re.sub(r"\s+", " ", markdown)
    tail = 0.0
    if collapsed:
        for n, count in enumerate(trailing_repeat_counts(collapsed, max_ngram=5), start=1):
            if count > _MAX_TRAILING_REPEATS:
                tail = max(tail, (count - _MAX_TRAILING_REPEATS) * n / len(collapsed))
    return 1.0 - max(words, tail)


# --- bundle ------------------------------------------------------------------

REWARD_FUNCTIONS: dict[str, Callable[[str], float]] = {
    "formula_wellformed": formula_score,
    "table_structure": table_score,
    "markdown_structure": markdown_score,
    "repetition": repetition_score,
    "readable_text": readable_score,
}


def quality_flags(markdown: str) -> dict[str, float]:
    """All dense checks for one page, keyed by name (see :data:`REWARD_FUNCTIONS`)."""
    return {name: fn(markdown) for name, fn in REWARD_FUNCTIONS.items()}
