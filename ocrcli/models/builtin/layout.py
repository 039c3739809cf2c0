"""The built-in model's layout step: a page becomes text lines, and lines become Markdown.

Lines are found classically, by the horizontal projection of ink, and cut at the middle of
the gaps between them: the recogniser is trained on crops made by this same function, so it
always sees the geometry it learned. Block structure (headings by line height, code by its
shaded background, list items by their markers, tables by their bars and header rule,
paragraphs by larger gaps) is read from the geometry, not guessed by the recogniser.

Pages are first turned upright and cut into regions (columns, tables, pictures, running
headers and footers) by `page_layout`; lines are then found region by region (`lines_in`),
and the Markdown is assembled block by block in reading order.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace

import numpy as np
from PIL import Image

LINE_HEIGHT = 32  # the recogniser's input height in pixels
MAX_LINE_WIDTH = 1600  # wider crops are squeezed: 200 visual tokens at most
PIECE_WIDTH = 384  # lines wider than this (about 45 characters) are read in pieces
SHADE = 8  # grey levels: paper this much darker than the page's is shaded (a code block)


@dataclass
class LineBox:
    x0: int
    y0: int
    x1: int
    y1: int
    ink_top: int  # first and last rows with ink, for the height of the text itself
    ink_bottom: int
    shaded: bool  # background darker than the page: a code block
    rule: bool  # a thin horizontal rule, not text
    # What the page layout step made of the box: "text", "cell" (of a table), "figure" (a
    # picture, never read), "header" or "footer" (running page furniture, never read).
    kind: str = "text"
    block: int = 0  # the layout block (text region, table, figure) it belongs to, in reading order
    cell: tuple[int, int] | None = None  # (row, column) of a table cell
    span: int = 1  # how many columns the cell covers, from its own (a heading over several)

    @property
    def ink_height(self) -> int:
        return self.ink_bottom - self.ink_top + 1

    @property
    def readable(self) -> bool:
        """Whether the recogniser reads the box: text lines and table cells, not rules,
        pictures or page furniture."""
        return not self.rule and self.kind in ("text", "cell")


def _background(gray: np.ndarray) -> float:
    return float(np.percentile(gray, 75))


def ink_mask(gray: np.ndarray) -> np.ndarray:
    """Dark pixels relative to the page's own paper level."""
    bg = _background(gray)
    return gray < bg - max(40.0, 0.3 * bg)


def despeckle(ink: np.ndarray) -> np.ndarray:
    """Ink pixels with at least one ink neighbour (8-connected). Strokes survive; the lone
    specks of scanner noise on a shaded code block would otherwise make empty margins count
    as ink and stretch a line's box to the block's edge."""
    padded = np.pad(ink, 1)
    h, w = ink.shape
    neighbours = sum(padded[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w].astype(np.uint8)
                     for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx)
    return ink & (neighbours > 0)


def near_ink(ink: np.ndarray, reach: int = 2) -> np.ndarray:
    """Ink pixels and those within `reach` pixels of one (a square neighbourhood): the
    anti-aliased edges of strokes, which are neither ink nor paper."""
    h, w = ink.shape
    padded = np.pad(ink, reach)
    rows = np.zeros((h + 2 * reach, w), dtype=bool)
    for dx in range(2 * reach + 1):
        rows |= padded[:, dx : dx + w]
    out = np.zeros((h, w), dtype=bool)
    for dy in range(2 * reach + 1):
        out |= rows[dy : dy + h]
    return out


@dataclass
class PageInk:
    """A page's pixels as the line finder needs them: grey levels, the ink mask (which the page
    layout step may have cleared of rules and figures), and the paper level, so that a part of
    the page is judged (shaded or not) against the whole page, not against itself."""

    gray: np.ndarray  # float32 grey levels
    ink: np.ndarray  # bool
    paper_mask: np.ndarray  # bool: pixels away from any ink
    page_paper: float
    line_height: float = 0.0  # the page's usual line height where known (0: not known)

    @classmethod
    def of(cls, gray: np.ndarray, ink: np.ndarray, line_height: float = 0.0) -> PageInk:
        # Paper levels are medians of pixels away from ink: a median is not moved by scanner
        # noise, where the page's 75th percentile rises by most of the noise's spread and made
        # every line of a noisy page look shaded, and stroke edges would pull a line's level down.
        paper_mask = ~near_ink(ink)
        page_paper = float(np.median(gray[paper_mask])) if paper_mask.any() else 255.0
        return cls(gray, ink, paper_mask, page_paper, line_height)


def segment_lines(image: Image.Image) -> list[LineBox]:
    """Text lines of a page, top to bottom, cut at the middle of inter-line gaps."""
    gray = np.asarray(image.convert("L"), dtype=np.float32)
    h, w = gray.shape
    return lines_in(PageInk.of(gray, despeckle(ink_mask(gray))), (0, 0, w, h))


def _line_bands(ink: np.ndarray, width: int, line_height: float = 0.0) -> list[list[int]]:
    """Rows of a region grouped into text bands: [first, last] row of each, top to bottom.
    `line_height`: the page's usual line height, for a region too small to show its own."""
    h = ink.shape[0]
    # A row counts when it holds a little ink; isolated specks of noise do not make lines.
    rows = ink.sum(axis=1) >= max(2, width // 800)
    bands: list[list[int]] = []
    y = 0
    while y < h:
        if rows[y]:
            start = y
            while y < h and rows[y]:
                y += 1
            bands.append([start, y - 1])
        y += 1
    # Merge bands split by a one-pixel gap (dotted letters, accents over capitals).
    merged: list[list[int]] = []
    for b in bands:
        if merged and b[0] - merged[-1][1] <= 2 and (b[1] - b[0] < 4 or merged[-1][1] - merged[-1][0] < 4):
            if not _is_rule(ink, merged[-1]) and not _is_rule(ink, b):
                merged[-1][1] = b[1]
                continue
        merged.append(b)
    bands = _split_touching(ink, _attach_marks(ink, merged), line_height)
    return [b for b in bands if b[1] - b[0] >= 2 or _is_rule(ink, b)]


def lines_in(page: PageInk, region: tuple[int, int, int, int]) -> list[LineBox]:
    """Text lines inside `region` (x0, y0, x1, y1; ends exclusive) of a page, top to bottom, in
    page coordinates. Lines are cut at the middle of the gaps between them and never reach
    outside the region: the region's neighbours (another column, a table cell) stay out."""
    rx0, ry0, rx1, ry1 = region
    gray = page.gray[ry0:ry1, rx0:rx1]
    ink = page.ink[ry0:ry1, rx0:rx1]
    paper_mask = page.paper_mask[ry0:ry1, rx0:rx1]
    h, w = gray.shape
    bands = _line_bands(ink, w, page.line_height)
    boxes = []
    for i, (top, bottom) in enumerate(bands):
        cut_top = 0 if i == 0 else (bands[i - 1][1] + top + 1) // 2
        cut_bottom = h - 1 if i == len(bands) - 1 else (bottom + bands[i + 1][0]) // 2
        height = bottom - top + 1
        cut_top = max(cut_top, top - height // 2)
        cut_bottom = min(cut_bottom, bottom + height // 2)
        cols = np.nonzero(ink[top : bottom + 1].any(axis=0))[0]
        if cols.size == 0:
            continue
        pad = max(2, height // 4)
        x0, x1 = max(0, int(cols[0]) - pad), min(w - 1, int(cols[-1]) + pad)
        region_px = gray[cut_top : cut_bottom + 1, x0 : x1 + 1]
        paper = region_px[paper_mask[cut_top : cut_bottom + 1, x0 : x1 + 1]]
        shaded = paper.size > 0 and float(np.median(paper)) < page.page_paper - SHADE
        boxes.append(LineBox(rx0 + x0, ry0 + cut_top, rx0 + x1, ry0 + cut_bottom, ry0 + top,
                             ry0 + bottom, shaded, _is_rule(ink, [top, bottom])))
    return boxes


def _split_touching(ink: np.ndarray, bands: list[list[int]], line_height: float = 0.0
                    ) -> list[list[int]]:
    """Split a band that holds lines whose ink touches (a descender resting on the ring of an
    `Å` below it; a tightly set old book, every line touching the next): at least 1.4 usual
    line heights, with a row in its middle part that holds almost no ink; the parts again,
    until each is a line. A tall heading's middle rows are its x-height, dense with ink, so it
    stays whole. Read as one line, touching lines came out as a garbled heading. The usual
    height is the region's median band or the page's, the smaller."""
    heights = [b[1] - b[0] + 1 for b in bands if not _is_rule(ink, b)]
    line = float(np.median(heights)) if len(heights) >= 3 else line_height
    if line_height > 0:  # a region of nothing but touching lines has no usual band to show
        line = min(line, line_height)
    if line <= 0:
        return bands
    return [part for band in bands for part in _split_band(ink, band, line)]


def _split_band(ink: np.ndarray, band: list[int], line: float) -> list[list[int]]:
    top, bottom = band
    height = bottom - top + 1
    counts = ink[top : bottom + 1].sum(axis=1)
    core = np.flatnonzero(counts > 0.05 * counts.max())  # without a touching stroke's rows
    if core.size == 0 or core[-1] - core[0] + 1 < 1.4 * line:
        return [band]
    lo, hi = int(0.3 * height), int(0.7 * height)
    cut = lo + int(np.argmin(counts[lo : hi + 1]))
    if counts[cut] > 0.05 * counts.max():
        return [band]
    return _split_band(ink, [top, top + cut - 1], line) + _split_band(ink, [top + cut + 1, bottom], line)


def _attach_marks(ink: np.ndarray, bands: list[list[int]]) -> list[list[int]]:
    """Join a thin band that is not a rule to its nearer neighbour when it sits closer than
    half a line: underscores under a line with no descenders, accents over capitals. Read
    alone, such a band is garbage; with its line, it is the line's own ink."""
    heights = [b[1] - b[0] + 1 for b in bands]
    if len(bands) < 2:
        return bands
    line = float(np.median(heights))
    out = [list(b) for b in bands]
    i = 0
    while i < len(out):
        b = out[i]
        if b[1] - b[0] + 1 < 0.4 * line and not _is_rule(ink, b):
            up = b[0] - out[i - 1][1] - 1 if i > 0 else None
            down = out[i + 1][0] - b[1] - 1 if i + 1 < len(out) else None
            near = [(g, j) for g, j in ((up, i - 1), (down, i + 1))
                    if g is not None and g < 0.5 * line and not _is_rule(ink, out[j])]
            if near:
                j = min(near)[1]
                out[j] = [min(out[j][0], b[0]), max(out[j][1], b[1])]
                del out[i]
                continue
        i += 1
    return out


def _is_rule(ink: np.ndarray, band: list[int]) -> bool:
    top, bottom = band
    if bottom - top > 3:
        return False
    rows = ink[top : bottom + 1]
    return bool(rows.any(axis=0).mean() > 0.15 and rows.sum(axis=1).max() > 0.5 * rows.any(axis=0).sum())


def split_wide(image: Image.Image, box: LineBox, max_width: int) -> list[LineBox]:
    """A line cut at word gaps into pieces at most `max_width` pixels wide at the reader's
    height, where gaps allow (`max_width` 0: never cut). Left to right; joined with a space.

    A small reader's attention slips on long lines (repeated or skipped chunks), and its cost
    per token grows with the line: pieces keep every read short. The cut is the widest gap
    in the middle half of the piece, so it lands between words, not between letters.
    """
    if max_width <= 0 or box.rule:
        return [box]
    crop = np.asarray(image.crop((box.x0, box.y0, box.x1 + 1, box.y1 + 1)).convert("L"),
                      dtype=np.float32)
    return _split_crop(crop, box, box.x0, max_width)


def _split_crop(crop: np.ndarray, box: LineBox, x_origin: int, max_width: int) -> list[LineBox]:
    """`split_wide` on `box`, a part of the line whose crop (origin `x_origin`) is `crop`."""
    if (box.x1 - box.x0 + 1) * LINE_HEIGHT / (box.y1 - box.y0 + 1) <= max_width:
        return [box]
    part = crop[:, box.x0 - x_origin : box.x1 - x_origin + 1]
    ink = ink_mask(part)  # paper level from this part's whole height
    empty = ~ink[box.ink_top - box.y0 : box.ink_bottom - box.y0 + 1].any(axis=0)
    starts, ends = np.array(runs_1d(empty), dtype=np.int64).reshape(-1, 2).T  # empty columns
    w = empty.size
    mids = (starts + ends - 1) / 2
    usable = (ends - starts >= max(2, box.ink_height // 4)) & (mids >= 0.25 * w) & (mids <= 0.75 * w)
    if not usable.any():
        return [box]
    # Widest gap first; among equals, the one nearest the middle.
    order = np.lexsort((np.abs(mids - w / 2), -(ends - starts)))
    best = next(i for i in order if usable[i])
    cut = box.x0 + int(mids[best])
    left, right = replace(box, x1=cut), replace(box, x0=cut + 1)
    return (_split_crop(crop, left, x_origin, max_width)
            + _split_crop(crop, right, x_origin, max_width))


# Columns at the reading height: a blank run between words wider than this is narrowed to
# it. Word gaps in the crops of synthetic training prose: median 7, 95th percentile 15.
WIDE_GAP = 15


def runs_1d(flags: np.ndarray) -> list[tuple[int, int]]:
    """Runs of True in a 1-D array as (start, end exclusive)."""
    d = np.diff(np.concatenate(([0], flags.astype(np.int8), [0])))
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


def narrow_wide_gaps(arr: np.ndarray, widest: int = WIDE_GAP) -> np.ndarray:
    """`arr` [32, W] (ink = 1) with each blank run of columns between inked ones cut to
    `widest`: justified text's wide word spaces look like ordinary ones (the reader drops or
    repeats words across a gap much wider than it saw most), padded back to W % 8 == 0."""
    blank = arr.max(axis=0) < 0.25
    inked = np.flatnonzero(~blank)
    if inked.size < 2:
        return arr
    keep = np.ones(arr.shape[1], dtype=bool)
    for a, b in runs_1d(blank[inked[0] : inked[-1]]):
        if b - a > widest:
            keep[inked[0] + a + widest : inked[0] + b] = False
    if keep.all():
        return arr
    kept = arr[:, keep]
    out = np.zeros((arr.shape[0], (kept.shape[1] + 7) // 8 * 8), dtype=arr.dtype)
    out[:, : kept.shape[1]] = kept
    return out


# A piece the reader read with a mean log-probability per token under REREAD_BELOW is read
# again from crops with more paper above and below it, these shares of its height on each
# side, and the likeliest reading is kept. Its own crop is cut close to the lines next to it;
# on a page set tighter or looser than the training pages, another margin is often read
# with more confidence, and right.
REREAD_BELOW = -0.05
REREAD_MARGINS = (1 / 8, 1 / 4)


def taller_crops(box: LineBox, page_height: int) -> list[LineBox]:
    """`box` with each of REREAD_MARGINS of its height added above and below it, inside the
    page."""
    h = box.y1 - box.y0 + 1
    return [replace(box, y0=max(0, box.y0 - round(m * h)), y1=min(page_height - 1, box.y1 + round(m * h)))
            for m in REREAD_MARGINS]


def line_tensor_array(image: Image.Image, box: LineBox) -> np.ndarray:
    """A crop normalised for the recogniser: float32 [32, W], ink = 1, paper = 0, W % 8 == 0.
    Wide gaps between words are narrowed (`narrow_wide_gaps`), except in a shaded line
    (code), whose spacing the reader writes."""
    crop = np.asarray(image.crop((box.x0, box.y0, box.x1 + 1, box.y1 + 1)).convert("L"),
                      dtype=np.float32)
    paper = np.percentile(crop, 80)
    ink = np.percentile(crop, 1)
    arr = np.clip((paper - crop) / max(paper - ink, 24.0), 0.0, 1.0)
    h, w = arr.shape
    new_w = int(round(w * LINE_HEIGHT / h))
    new_w = max(8, min(MAX_LINE_WIDTH, (new_w + 7) // 8 * 8))
    resized = Image.fromarray((arr * 255).astype(np.uint8)).resize((new_w, LINE_HEIGHT),
                                                                   Image.BILINEAR)
    out = np.asarray(resized, dtype=np.float32) / 255.0
    return out if box.shaded else narrow_wide_gaps(out)


_NUMBERED = re.compile(r"^(\d{1,3})[.)]\s+")
_BULLET = re.compile("^[\u2022\u25cf\u25aa\u2013*\\-]\\s+")


def assemble_markdown(boxes: list[LineBox], texts: list[str]) -> str:
    """Markdown of a page from its line boxes and the texts read from them (rules, pictures
    and page furniture read ''), block after block in the boxes' (reading) order: a table's
    cells become a Markdown table, a picture an image placeholder; running headers and
    footers are left out of the page's text."""
    text_heights = [b.ink_height for b, t in zip(boxes, texts)
                    if b.kind == "text" and not b.rule and not b.shaded and t]
    body = float(np.median(text_heights)) if text_heights else 1.0
    out = []
    i = 0
    while i < len(boxes):
        j = i
        while j < len(boxes) and boxes[j].block == boxes[i].block:
            j += 1
        kinds = {b.kind for b in boxes[i:j]}
        if "cell" in kinds:
            md = table_markdown(boxes[i:j], texts[i:j])
        elif kinds <= {"header", "footer"}:
            md = ""
        else:
            md = _text_markdown(boxes[i:j], texts[i:j], body)
            if out and _goes_on(out[-1], md):  # a paragraph carried on in the next column
                out[-1] = join_paragraph([out[-1], md])
                md = ""
        if md:
            out.append(md)
        i = j
    return "\n\n".join(out)


_SENTENCE_GOES_ON = re.compile(r"[a-z\u00df-\u00ff,;-]$")  # no full stop: the text is cut off
_NOT_PROSE = ("#", "|", "```", "- ", "![")


def _goes_on(before: str, after: str) -> bool:
    """Whether a block's first paragraph carries on the previous block's last one: that one
    is prose cut off mid-sentence, and this one starts in lower case."""
    last = before.rsplit("\n\n", 1)[-1]
    return (bool(_SENTENCE_GOES_ON.search(last)) and after[:1].islower()
            and not last.startswith(_NOT_PROSE) and not _NUMBERED.match(last))


def table_markdown(boxes: list[LineBox], texts: list[str]) -> str:
    """A table from the lines read in a table's cells: a cell's lines joined with a space,
    columns empty in every row left out. Markdown with the first row as the header, or HTML
    where a heading spans columns, which Markdown cannot say. A "|" read in a cell is a
    rule's remnant, not text, and would split the cell."""
    cells: dict[tuple[int, int], list[str]] = {}
    spans: dict[tuple[int, int], int] = {}
    for b, t in zip(boxes, texts):
        t = " ".join(t.replace("|", " ").split())
        if b.cell is not None and t:
            cells.setdefault(b.cell, []).append(t)
            spans[b.cell] = max(spans.get(b.cell, 1), b.span)
    if not cells:
        return ""
    rows = sorted({r for r, _ in cells})
    cols = sorted({c for _, c in cells})
    text = {key: " ".join(lines) for key, lines in cells.items()}
    if any(n > 1 for n in spans.values()):
        return _table_html(rows, cols, text, spans)
    lines = ["| " + " | ".join(text.get((r, c), "") for c in cols) + " |" for r in rows]
    return "\n".join([lines[0], "|" + " --- |" * len(cols)] + lines[1:])


def _table_html(rows: list[int], cols: list[int], text: dict[tuple[int, int], str],
                spans: dict[tuple[int, int], int]) -> str:
    """An HTML table: rows up to the last one with a spanning heading are heading rows, and
    a spanning cell covers the kept columns in its span."""
    heading_rows = max(r for (r, _), n in spans.items() if n > 1)
    out = ["<table>"]
    for r in rows:
        tag = "th" if r <= heading_rows else "td"
        cells, covered = [], set()
        for c in cols:
            if c in covered:
                continue
            span = [k for k in cols if c <= k < c + spans.get((r, c), 1)]
            covered.update(span)
            attr = f' colspan="{len(span)}"' if len(span) > 1 else ""
            cells.append(f"<{tag}{attr}>{html.escape(text.get((r, c), ''), quote=False)}</{tag}>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join(out + ["</table>"])


_BROKEN_WORD = re.compile(r"[a-z\u00df-\u00ff]-$")  # a lower-case letter, then the line's hyphen


def join_paragraph(lines: list[str]) -> str:
    """A paragraph's lines as one line of Markdown: joined with a space, except that a word
    hyphenated at a line's end and carried on in lower case on the next line is made whole
    again ("irretrie-" "vably" -> "irretrievably"); a hyphen before a capital or a digit stays.
    A compound broken at its own hyphen loses it too ("well-" "known" -> "wellknown"): without
    a dictionary the two cannot be told apart, and breaks made by hyphenation are the commoner."""
    out = lines[0] if lines else ""
    for line in lines[1:]:
        if _BROKEN_WORD.search(out) and line[:1].islower():
            out = out[:-1] + line
        else:
            out += " " + line
    return out


HEADING_RATIO = 1.22  # a line's ink this many times the body's height is a heading
LARGE_PRINT_LINES = 3  # so many heading-sized lines in a row, set as a paragraph, are one


def _large_print(boxes: list[LineBox], texts: list[str], body: float, gap: float) -> set[int]:
    """Indices of lines that are a paragraph in large print (a lead, an abstract), not a
    run of headings: at least three heading-sized lines in a row, of about one size (ink
    heights vary with ascenders and descenders), each at about the block's usual line gap,
    scaled to the print, from the next. Written as headings, every line of it was one."""
    out: set[int] = set()
    run: list[int] = []

    def close() -> None:
        if len(run) >= LARGE_PRINT_LINES:
            out.update(run)
        run.clear()

    for i, (box, text) in enumerate(zip(boxes, texts)):
        if box.kind == "figure" or box.rule or box.shaded or not text.strip():
            close()
            continue
        if box.ink_height / body <= HEADING_RATIO:
            close()
            continue
        if run:
            last = boxes[run[-1]]
            usual = float(np.median([boxes[j].ink_height for j in run]))
            size = max(box.ink_height, usual) / min(box.ink_height, usual)
            if size > 1.4 or box.ink_top - last.ink_bottom > gap * 1.6 * box.ink_height / body + 2:
                close()
        run.append(i)
    close()
    return out


def _heading_goes_on(kinds: list[str], prev: LineBox | None, box: LineBox, text: str) -> bool:
    """A heading's second line ("... tobacco industry:" / "hope or hype?"): it follows a
    heading line of about its size, closer than its own height, and goes on in lower case.
    A line that starts with a capital is taken as a heading of its own."""
    if not kinds or kinds[-1] != "heading" or prev is None or not text[:1].islower():
        return False
    size = max(box.ink_height, prev.ink_height) / max(1, min(box.ink_height, prev.ink_height))
    return size < 1.4 and box.ink_top - prev.ink_bottom < box.ink_height


def _text_markdown(boxes: list[LineBox], texts: list[str], body: float) -> str:
    """Markdown of one text block: headings by line height, lists by markers, code by shading,
    tables typed with "|", paragraphs by wider gaps; pictures as image placeholders."""
    left = min((b.x0 for b, t in zip(boxes, texts) if t and not b.rule), default=0)
    lines = [b for b in boxes if b.kind != "figure"]
    gaps = [lines[i + 1].ink_top - lines[i].ink_bottom for i in range(len(lines) - 1)]
    gap = float(np.median(gaps)) if gaps else 0.0
    blocks: list[list[str]] = []
    kinds: list[str] = []

    def start(kind: str) -> None:
        blocks.append([])
        kinds.append(kind)

    large = _large_print(boxes, texts, body, gap)
    prev: LineBox | None = None
    for i, (box, text) in enumerate(zip(boxes, texts)):
        text = text.strip()
        if box.kind == "figure":
            start("figure")
            blocks[-1].append("![figure]()")
            prev = None
            continue
        if box.rule:  # a table's header rule; the separator row is written with the header
            prev = box
            continue
        if not text:
            continue
        big_gap = prev is not None and box.ink_top - prev.ink_bottom > gap * 1.6 + 2
        ratio = box.ink_height / body
        if box.shaded:
            if not kinds or kinds[-1] != "code" or big_gap:
                start("code")
            blocks[-1].append(text)
        elif text.startswith("|") and text.endswith("|") and text.count("|") >= 2:
            # The header's rule adds space below it: a wide gap after a lone header row
            # does not end the table.
            header_only = kinds and kinds[-1] == "table" and len(blocks[-1]) == 1
            if not kinds or kinds[-1] != "table" or (big_gap and not header_only):
                start("table")
            blocks[-1].append(text)
        elif ratio > HEADING_RATIO and len(text) < 120 and i not in large:
            if _heading_goes_on(kinds, prev, box, text):
                blocks[-1][-1] = join_paragraph([blocks[-1][-1], text])
                prev = box
                continue
            level = 1 if ratio > 1.75 else 2 if ratio > 1.45 else 3
            start("heading")
            blocks[-1].append("#" * level + " " + text)
        elif _BULLET.match(text) or _NUMBERED.match(text):
            if not kinds or kinds[-1] != "list" or big_gap:
                start("list")
            m = _NUMBERED.match(text)
            blocks[-1].append(f"{m.group(1)}. {text[m.end():]}" if m else "- " + _BULLET.sub("", text))
        elif kinds and kinds[-1] == "list" and not big_gap and box.x0 > left + body * 0.5:
            blocks[-1][-1] = join_paragraph([blocks[-1][-1], text])  # a wrapped list item
        else:
            if not kinds or kinds[-1] != "text" or big_gap or (i in large) != (i - 1 in large):
                start("text")  # large print begins or ends: another paragraph
            blocks[-1].append(text)
        prev = box
    out = []
    for kind, lines in zip(kinds, blocks):
        if kind == "code":
            out.append("```\n" + "\n".join(lines) + "\n```")
        elif kind == "text":
            out.append(join_paragraph(lines))
        elif kind == "table":
            # Columns as most rows have them: one misread cell in the header does not
            # change the separator.
            counts = [row.count("|") - 1 for row in lines]
            cols = max(set(counts), key=lambda c: (counts.count(c), -counts.index(c)))
            out.append("\n".join([lines[0], "|" + " --- |" * max(1, cols)] + lines[1:]))
        else:
            out.append("\n".join(lines))
    return "\n\n".join(out)
