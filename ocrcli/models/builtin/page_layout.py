"""Page layout analysis for the built-in model: which way is up, where the columns, tables,
pictures and running headers and footers are, and in which order the text is read.

The line reader reads one line at a time, so a page must first become lines in reading order.
`layout.segment_lines` finds the lines of a single column; this module finds the regions those
lines live in. All of it works on the page's ink mask, classically:

- orientation: text lines leave empty rows between them; across the lines every row holds
  ink. Rows and columns of page strips are compared to tell horizontal text from text turned
  by 90 degrees; then upright from upside-down by the ink above and below each line's x-height
  band (ascenders and capitals outweigh descenders in Latin script about three to one);
- rulings: long thin horizontal or vertical runs of ink are rules (table grids, frames,
  separators), kept out of the text and used as table column boundaries;
- reversed text: light letters on a dark flat fill (a banner, a table's dark heading row)
  are holes in one big blob of ink; such a fill is made paper and its letters ink, so that
  they are read as any other line and the blob is not taken for a picture;
- pictures: connected ink blobs far larger than any character are pictures; they and
  whatever lies inside their box (a chart's labels) are never read;
- regions: a recursive cut on whitespace (XY-cut). A region's rows are split at every empty
  row band into slices; consecutive slices that share a tall empty column band (a gutter)
  form a group, which is either text columns (each wide: read column after column) or a
  table (narrow cells in rows: read cell by cell); everything else is running text;
- page furniture: a lone short line at the very top or bottom of a full page, set apart from
  the body by a wide gap, is a running header or footer (or a page number).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
from PIL import Image

from ocrcli.models.builtin.layout import (
    SHADE,
    LineBox,
    PageInk,
    despeckle,
    ink_mask,
    lines_in,
    near_ink,
    runs_1d,
)

LAYOUT_DPI = 144  # the resolution the rules below are drawn for: a finer page is reduced first
COLUMN_MIN_WIDTH = 10.0  # line heights: a text column holds at least this much (about 25 characters)
GUTTER_MIN_WIDTH = 1.2  # line heights: a narrower run of empty columns is a space between words
FURNITURE_ZONE = 0.1  # share of the page height at its top and bottom where headers/footers sit
FURNITURE_MAX_SPAN = 0.6  # share of the body's width: a wider line of body size is body text
FURNITURE_SPREAD_GAP = 3.0  # line heights: a space this wide splits a header's or footer's parts
FURNITURE_SPARSE_GAP = 2.5  # line heights: on a sparse page, small print this far apart is apart
FURNITURE_SPARSE_BODY_GAP = 4.0  # line heights: the same for a short line of body size
RUNNING_HEAD_MIN_SPAN = 0.8  # share of the body's width a running head at its leading spans
PAGE_NUMBER_MAX_WIDTH = 3.0  # line heights: about four digits, or "- 7 -"
DUST = 0.4  # line heights: a slice this small both ways is what is left of a rule or a speck
FILL_LEVEL_TOLERANCE = 4  # grey levels: most of a fill's pixels lie this close to its level
FILL_NOISE = 24  # grey levels: JPEG's ringing moves a fill's pixels by up to this
REVERSED_CONTRAST = 80  # grey levels: letters this much lighter than their fill are reversed text
LETTER_MIN_HEIGHT = 6  # pixels: at the layout's 144 dpi, a capital of 4-point print
RULE_MIN_RUN_ACROSS = 40  # pixels of ink in a row: no rule is shorter, no body letter longer
RULE_MIN_RUN_DOWN = 30  # pixels of ink in a column: the same, down


# --- runs and connected components -------------------------------------------------------


def _row_runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Horizontal runs of True in a 2-D mask: their rows, first columns and ends (exclusive),
    ordered by row, then by column."""
    h, w = mask.shape
    padded = np.zeros((h, w + 2), dtype=np.int8)
    padded[:, 1:-1] = mask
    d = np.diff(padded, axis=1)
    flat = np.flatnonzero(d)
    rows, cols = np.divmod(flat, w + 1)
    rising = d.ravel()[flat] == 1  # runs alternate: each start is followed by its end
    return rows[rising], cols[rising], cols[~rising]


def _mask_of_runs(shape: tuple[int, int], rows: np.ndarray, starts: np.ndarray,
                  ends: np.ndarray) -> np.ndarray:
    h, w = shape
    out = np.zeros((h, w), dtype=bool)
    if rows.size == 0:
        return out
    # Only the rows that hold a run are filled: most masks made here are sparse.
    used, local = np.unique(rows, return_inverse=True)
    marks = np.zeros((used.size, w + 1), dtype=np.int16)
    np.add.at(marks, (local, starts), 1)
    np.add.at(marks, (local, ends), -1)
    out[used] = np.cumsum(marks, axis=1)[:, :w] > 0
    return out


def long_runs(mask: np.ndarray, min_len: int, axis: int = 1) -> np.ndarray:
    """Pixels of `mask` in runs of at least `min_len` along `axis` (1: rows, 0: columns)."""
    out = np.zeros_like(mask)
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        return out
    # Work on the box that holds ink: masks of rules are small.
    box = (slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1))
    m = mask[box] if axis == 1 else np.ascontiguousarray(mask[box].T)
    r, starts, ends = _row_runs(m)
    keep = ends - starts >= min_len
    found = _mask_of_runs(m.shape, r[keep], starts[keep], ends[keep])
    out[box] = found if axis == 1 else found.T
    return out


def short_runs(mask: np.ndarray, max_len: int, axis: int = 1) -> np.ndarray:
    """Pixels of `mask` in runs of at most `max_len` along `axis`."""
    return mask & ~long_runs(mask, max_len + 1, axis)


@dataclass
class Components:
    """8-connected components of a mask: one row of `boxes` per component (top, left, bottom,
    right, all inclusive), its pixel count in `area`, and each horizontal run's component."""

    boxes: np.ndarray  # int [n, 4]
    area: np.ndarray  # int [n]
    run_rows: np.ndarray
    run_starts: np.ndarray
    run_ends: np.ndarray
    run_label: np.ndarray

    def mask(self, shape: tuple[int, int], labels: np.ndarray) -> np.ndarray:
        """Pixels of the components whose labels are given."""
        keep = np.isin(self.run_label, labels)
        return _mask_of_runs(shape, self.run_rows[keep], self.run_starts[keep], self.run_ends[keep])

    @cached_property
    def _runs_by_label(self) -> tuple[np.ndarray, np.ndarray]:
        """The runs ordered by component, and where each component's begin in that order:
        `pixels` of many components then costs one sort, not a pass over all runs each."""
        order = np.argsort(self.run_label, kind="stable")
        return order, np.searchsorted(self.run_label[order], np.arange(self.area.size + 1))

    def pixels(self, label: int) -> tuple[np.ndarray, np.ndarray]:
        """Row and column indices of one component's pixels."""
        order, first = self._runs_by_label
        keep = order[first[label] : first[label + 1]]
        starts, ends = self.run_starts[keep], self.run_ends[keep]
        lengths = ends - starts
        rows = np.repeat(self.run_rows[keep], lengths)
        offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return rows, np.repeat(starts, lengths) + offsets

    def touching(self, mask: np.ndarray) -> np.ndarray:
        """Labels of the components that share a pixel with `mask`."""
        counts = np.zeros((mask.shape[0], mask.shape[1] + 1), dtype=np.int32)
        np.cumsum(mask, axis=1, out=counts[:, 1:])
        hit = counts[self.run_rows, self.run_ends] > counts[self.run_rows, self.run_starts]
        return np.unique(self.run_label[hit])


def components(mask: np.ndarray) -> Components:
    """Connected components by runs: runs on adjacent rows that touch (diagonals included) are
    joined, by repeated hooking of roots and pointer jumping, all in numpy."""
    h, w = mask.shape
    rows, starts, ends = _row_runs(mask)
    n = rows.size
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Components(np.zeros((0, 4), dtype=np.int64), empty, empty, empty, empty, empty)
    stride = w + 2
    base = rows.astype(np.int64) * stride
    start_key, end_key = base + starts, base + ends
    above = base - stride
    # Runs of the row above that touch run b: end (exclusive) >= b's start, start <= b's end.
    lo = np.searchsorted(end_key, above + starts, side="left")
    hi = np.searchsorted(start_key, above + ends, side="right")
    counts = np.maximum(hi - lo, 0)
    b = np.repeat(np.arange(n), counts)
    offsets = np.arange(b.size) - np.repeat(np.cumsum(counts) - counts, counts)
    a = np.repeat(lo, counts) + offsets
    parent = np.arange(n)
    while a.size:
        pa, pb = parent[a], parent[b]
        differ = pa != pb
        if not differ.any():
            break
        low = np.minimum(pa, pb)[differ]
        np.minimum.at(parent, pa[differ], low)
        np.minimum.at(parent, pb[differ], low)
        while True:
            nxt = parent[parent]
            if np.array_equal(nxt, parent):
                break
            parent = nxt
    _, label = np.unique(parent, return_inverse=True)
    k = int(label.max()) + 1
    boxes = np.empty((k, 4), dtype=np.int64)
    boxes[:, 0], boxes[:, 1] = h, w
    boxes[:, 2], boxes[:, 3] = -1, -1
    np.minimum.at(boxes[:, 0], label, rows)
    np.minimum.at(boxes[:, 1], label, starts)
    np.maximum.at(boxes[:, 2], label, rows)
    np.maximum.at(boxes[:, 3], label, ends - 1)
    area = np.bincount(label, weights=ends - starts, minlength=k).astype(np.int64)
    return Components(boxes, area, rows, starts, ends, label)


# --- text scale and orientation -----------------------------------------------------------


def _ink_width(used: np.ndarray) -> int:
    """How wide a run of columns' ink is, first inked column to last (0 without ink)."""
    inked = np.flatnonzero(used)
    return int(inked[-1] - inked[0] + 1) if inked.size else 0


def _strips(length: int, n: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, length, n + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def line_height(ink: np.ndarray) -> float:
    """The page's usual text line height in pixels: the median height of the ink bands that
    vertical strips of the page show (strips, so that columns whose lines do not align still
    show their own lines). Runs of ink longer than any body letter's stroke are left out
    first: the frame of a box (a form's field, a table's grid) inks every row it spans and
    would count as one line as tall as the box."""
    ink = ink & ~long_runs(ink, RULE_MIN_RUN_ACROSS, axis=1) & ~long_runs(ink, RULE_MIN_RUN_DOWN, axis=0)
    heights: list[int] = []
    for x0, x1 in _strips(ink.shape[1], 4):
        heights += [e - s for s, e in runs_1d(ink[:, x0:x1].any(axis=1)) if e - s >= 4]
    return float(np.median(heights)) if heights else 20.0


def _nearest_gaps(q: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each query box (top, left, bottom, right), the gap to the nearest candidate box
    beside it (left or right, overlapping it by half a height) and above or below it
    (overlapping by half a width); inf where there is none."""
    qt, ql, qb, qr = (v[:, None] for v in q.T)
    ct, cl, cb, cr = c.T
    qh, qw, ch, cw = qb - qt + 1, qr - ql + 1, cb - ct + 1, cr - cl + 1
    rows_overlap = np.minimum(qb, cb) - np.maximum(qt, ct) + 1 >= 0.5 * np.minimum(qh, ch)
    cols_overlap = np.minimum(qr, cr) - np.maximum(ql, cl) + 1 >= 0.5 * np.minimum(qw, cw)
    side = np.where(cl > qr, cl - qr, np.where(cr < ql, ql - cr, -1))
    updown = np.where(ct > qb, ct - qb, np.where(cb < qt, qt - cb, -1))
    inf = np.float64(np.inf)
    beside = np.where(rows_overlap & (side > 0), side, inf).min(axis=1)
    stacked = np.where(cols_overlap & (updown > 0), updown, inf).min(axis=1)
    return beside, stacked


def letters(comps: Components) -> np.ndarray:
    """Labels of the components sized like letters: within a factor of the median size (no
    specks, no pictures, no rules)."""
    boxes = comps.boxes
    size = np.maximum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]) + 1
    if size.size == 0:
        return np.zeros(0, dtype=np.int64)
    med = float(np.median(size))
    return np.flatnonzero((size >= 0.4 * med) & (size <= 2.5 * med) & (comps.area >= 4))


def neighbour_votes(boxes: np.ndarray, sample: int = 600) -> tuple[int, int]:
    """Letters (their boxes) whose nearest neighbour sits beside them, and letters whose
    nearest neighbour sits above or below them. Along a text line letters are a stroke apart;
    the next line is further away, so horizontal text votes "beside", text turned by 90
    degrees "stacked"."""
    if len(boxes) < 20:
        return 0, 0
    queries = boxes[:: max(1, len(boxes) // sample)]
    beside_votes = stacked_votes = 0
    for i in range(0, len(queries), 150):  # in chunks: a chunk compares 150 letters with all
        beside, stacked = _nearest_gaps(queries[i : i + 150], boxes)
        beside_votes += int((beside < stacked).sum())
        stacked_votes += int((stacked < beside).sum())
    return beside_votes, stacked_votes


def upside_down_evidence(ink: np.ndarray, lh: float) -> tuple[float, float]:
    """Ink above and below the x-height bands of the page's text lines (summed). A line's band
    is found per vertical strip; its x-height part is the rows holding at least half the
    band's densest row. Upright Latin text has more ink above (ascenders, capitals, dots)."""
    above = below = 0.0
    for x0, x1 in _strips(ink.shape[1], 4):
        counts = ink[:, x0:x1].sum(axis=1).astype(np.float64)
        for s, e in runs_1d(counts > 0):
            if not 0.5 * lh <= e - s <= 2.0 * lh:
                continue
            band = counts[s:e]
            core = np.flatnonzero(band >= 0.5 * band.max())
            above += float(band[: core[0]].sum())
            below += float(band[core[-1] + 1 :].sum())
    return above, below


def orientation(ink: np.ndarray, comps: Components | None = None) -> int:
    """Quarter turns (counterclockwise, as `np.rot90` counts them) that make the page upright:
    0, 1, 2 or 3. Pages with too little text to tell stay as they are."""
    if ink.sum() < 500:
        return 0
    comps = components(ink) if comps is None else comps
    found = letters(comps)
    beside, stacked = neighbour_votes(comps.boxes[found])
    turns = 1 if stacked > 2 * beside and stacked >= 20 else 0
    # Letters alone: a photograph's blotches have no x-height band to weigh ink around.
    text = comps.mask(ink.shape, found)
    upright = np.rot90(text, turns) if turns else text
    above, below = upside_down_evidence(upright, line_height(upright))
    if below > 1.3 * above and below - above > 0.005 * float(upright.sum()):
        turns += 2
    return turns % 4


# --- rules and pictures -------------------------------------------------------------------


def rulings(ink: np.ndarray, lh: float) -> tuple[np.ndarray, np.ndarray]:
    """Pixels of horizontal and vertical rules: runs far longer than any letter's stroke
    (5 line heights across, 3 down) and thin (a filled box or a photo is not a rule)."""
    thin = max(4, int(round(0.35 * lh)))
    horizontal = long_runs(ink, max(RULE_MIN_RUN_ACROSS, int(5 * lh)), axis=1)
    horizontal = short_runs(horizontal, thin, axis=0)
    vertical = long_runs(ink, max(RULE_MIN_RUN_DOWN, int(3 * lh)), axis=0)
    vertical = short_runs(vertical, thin, axis=1)
    return horizontal, vertical


def flat_fills(gray: np.ndarray, ink: np.ndarray, lh: float, comps: Components, paper: float
               ) -> np.ndarray:
    """Pixels of flat grey fills: shaded table rows or cells (a heat map's many shades), a
    coloured box behind text. A fill is a dense blob at least a line tall and two wide, most
    of whose pixels are grey (not black) and level with their right and lower neighbours; a
    photograph's grain makes few of its pixels level. Such a fill is background: text on it
    is darker than the fill and stays; read as ink, the fill would make the text one picture.
    A fill of one grey takes all its blob's pixels but the letters on it and their edges (its
    own edge beside the paper included): JPEG's ringing and a slanted edge are not level, and
    left as ink they would be a strip for the reader to read. Of a fill of many greys (a heat
    map) only the level pixels are. Flat pieces of a fill's grey whose tops and bottoms are
    the fill's (a band cut by slanted gaps) are fill too."""
    out = np.zeros_like(ink)
    if comps.area.size == 0:
        return out
    hgt = comps.boxes[:, 2] - comps.boxes[:, 0] + 1
    wid = comps.boxes[:, 3] - comps.boxes[:, 1] + 1
    candidates = np.flatnonzero((comps.area >= 0.6 * hgt * wid) & (hgt >= lh) & (wid >= 2 * lh))
    if candidates.size == 0:
        return out
    by_paper = near_ink(gray >= paper - SHADE, 1)
    bands: dict[int, float] = {}  # label -> grey level of each fill of one grey
    for label in candidates:
        rows, cols = comps.pixels(int(label))
        grey = gray[rows, cols]
        flat = (grey >= 60) & _level(gray, rows, cols)
        if flat.mean() < 0.6:
            continue
        level = float(np.median(grey[flat]))
        if (np.abs(grey[flat] - level) <= FILL_NOISE).mean() >= 0.9:
            dark = grey < level - FILL_NOISE
            flat |= ~dark & (_away_from(comps.boxes[label], rows, cols, dark) | by_paper[rows, cols])
            bands[int(label)] = level
        out[rows[flat], cols[flat]] = True
    return out | comps.mask(out.shape, np.array(_band_pieces(gray, comps, bands), dtype=int))


def _away_from(box: np.ndarray, rows: np.ndarray, cols: np.ndarray, marks: np.ndarray
               ) -> np.ndarray:
    """Which of a blob's pixels (`rows`, `cols`, inside `box`) lie more than 2 pixels from
    its `marks` (of a fill, the letters on it: their anti-aliased edges are near them)."""
    top, left, bottom, right = (int(v) for v in box)
    local = np.zeros((bottom - top + 1, right - left + 1), dtype=bool)
    local[rows[marks] - top, cols[marks] - left] = True
    return ~near_ink(local, 2)[rows - top, cols - left]


def _band_pieces(gray: np.ndarray, comps: Components, bands: dict[int, float]) -> list[int]:
    """Blobs other than the fills (`bands`: label -> grey level) whose top and bottom rows
    are a fill's (within a pixel), most of whose pixels are of the fill's grey and almost
    none darker (nothing is written on them; the rest is their anti-aliased edge): the pieces
    of a band that slanted gaps cut apart. A letter in that grey would have to start and end
    on the band's exact rows."""
    pieces = []
    for band, level in bands.items():
        top, bottom = comps.boxes[band, 0], comps.boxes[band, 2]
        near = np.flatnonzero((np.abs(comps.boxes[:, 0] - top) <= 1)
                              & (np.abs(comps.boxes[:, 2] - bottom) <= 1))
        for label in near[~np.isin(near, list(bands))]:
            rows, cols = comps.pixels(int(label))
            grey = gray[rows, cols]
            if ((np.abs(grey - level) <= FILL_LEVEL_TOLERANCE).mean() >= 0.6
                    and (grey < level - FILL_NOISE).mean() <= 0.02):
                pieces.append(int(label))
    return pieces


def _level(gray: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Whether each pixel is level with its right and lower neighbours (within 2 grey
    levels): most of a flat fill's pixels are, few of a photograph's, whose grain varies."""
    h, w = gray.shape
    level = gray[rows, cols]
    right = gray[rows, np.minimum(cols + 1, w - 1)]
    below = gray[np.minimum(rows + 1, h - 1), cols]
    return (np.abs(level - right) <= 2) & (np.abs(level - below) <= 2)




def _reversed_letters(gray: np.ndarray, comps: Components, label: int) -> np.ndarray | None:
    """Within a dense blob's box, the holes the blob surrounds (its letters, with the fill's
    islands inside them) where they are reversed text: at least three holes of a letter's
    height, most of them beside another as letters in a line are, and much lighter than
    the fill. None otherwise: a dark bar, a logo (its emblems stand one above the other), a
    photograph. The page's line height is no measure here: on a dark slide it is the fill's.
    A hole open to the box's edge is a letter where it is shaped like one (a descender
    through a dark heading row's edge), and the paper outside the fill where it is not."""
    top, left, bottom, right = (int(v) for v in comps.boxes[label])
    rows, cols = comps.pixels(label)
    box = gray[top : bottom + 1, left : right + 1]
    fill = np.zeros(box.shape, dtype=bool)
    fill[rows - top, cols - left] = True
    holes = components(~fill)
    t, lf, b, r = holes.boxes.T
    height, width = b - t + 1, r - lf + 1
    inner = (t > 0) & (lf > 0) & (b < box.shape[0] - 1) & (r < box.shape[1] - 1)
    letters = (height >= LETTER_MIN_HEIGHT) & (height <= 0.9 * box.shape[0])
    closed = letters & inner
    if closed.sum() < 3 or _beside_another(holes.boxes[closed]) < 2 / 3:
        return None  # a bold glyph's blob has open holes between its strokes, not closed ones
    mask = holes.mask(box.shape, np.flatnonzero(inner | (letters & (width <= 2 * height))))
    level = float(np.median(box[fill]))
    if np.percentile(box[mask], 90) < level + REVERSED_CONTRAST:
        return None
    return mask


def _beside_another(boxes: np.ndarray) -> float:
    """The share of boxes (top, left, bottom, right) with another beside them: overlapping
    by half the shorter one's height, less than the taller one's height apart."""
    t, lf, b, r = boxes.T.astype(float)
    height = b - t + 1
    overlap = np.minimum(b[:, None], b[None, :]) - np.maximum(t[:, None], t[None, :]) + 1
    apart = np.maximum(lf[:, None], lf[None, :]) - np.minimum(r[:, None], r[None, :])
    beside = ((overlap >= 0.5 * np.minimum(height, height[:, None]))
              & (apart <= np.maximum(height, height[:, None])))
    np.fill_diagonal(beside, False)
    return float(beside.any(axis=1).mean())


def reverse_light_text(gray: np.ndarray, comps: Components, paper: float) -> np.ndarray | None:
    """`gray` with every dark flat fill that holds light letters (reversed text) made paper
    and its letters dark, the levels between mapped in proportion (anti-aliased edges stay
    smooth), and the fill's outer edge, part paper, all paper; None when the page has none.
    The blob is dense, big enough to hold letters, and flat (a photograph's dark patch is
    not)."""
    hgt = comps.boxes[:, 2] - comps.boxes[:, 0] + 1
    wid = comps.boxes[:, 3] - comps.boxes[:, 1] + 1
    candidates = np.flatnonzero((comps.area >= 0.5 * hgt * wid) & (hgt > LETTER_MIN_HEIGHT + 2)
                                & (wid >= 3 * LETTER_MIN_HEIGHT))
    out = None
    for label in candidates:
        rows, cols = comps.pixels(int(label))
        if _level(gray, rows, cols).mean() < 0.6:
            continue
        letters = _reversed_letters(gray, comps, int(label))
        if letters is None:
            continue
        out = gray.copy() if out is None else out
        top, left, bottom, right = (int(v) for v in comps.boxes[label])
        y0, x0 = max(0, top - 2), max(0, left - 2)
        y1, x1 = min(gray.shape[0], bottom + 3), min(gray.shape[1], right + 3)
        region = out[y0:y1, x0:x1]  # the box and its edge, 2 pixels wide
        fill = np.zeros(region.shape, dtype=bool)
        fill[rows - y0, cols - x0] = True
        text = np.zeros(region.shape, dtype=bool)
        text[top - y0 : bottom + 1 - y0, left - x0 : right + 1 - x0] = letters
        level = float(np.median(region[fill]))
        light = float(np.percentile(region[text], 90))
        share = np.clip((region - level) / max(1.0, light - level), 0.0, 1.0)
        region[fill | text] = (paper * (1.0 - share))[fill | text]
        region[near_ink(~fill & ~text, 2) & ~text] = paper  # the fill's edge: fill and paper
    return out


def _merge_boxes(boxes: list[list[int]], reach: int) -> list[list[int]]:
    """Boxes (top, left, bottom, right) joined while any two overlap or lie within `reach`."""
    boxes = [list(b) for b in boxes]
    merged = True
    while merged:
        merged = False
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                a, b = boxes[i], boxes[j]
                if (a[0] - reach <= b[2] and b[0] - reach <= a[2]
                        and a[1] - reach <= b[3] and b[1] - reach <= a[3]):
                    boxes[i] = [min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])]
                    del boxes[j]
                    merged = True
                    break
            if merged:
                break
    return boxes


def _text_rows_outside(comps: Components, near: np.ndarray, top: int, bottom: int, lh: float
                       ) -> np.ndarray:
    """Those of the small things `near` a picture, above its top or below its bottom, that
    form a line of text: many of them side by side, most a letter's gap apart. The line just
    above a chart or just under it is the page's text; a chart's axis numbers stand further
    apart."""
    boxes = comps.boxes[near]
    middle = (boxes[:, 0] + boxes[:, 2]) / 2
    outside = near[(middle < top) | (middle > bottom)]
    rows: list[list[int]] = []  # indices into comps, row by row from the top
    row_bottom = -1
    for i in sorted(outside, key=lambda i: comps.boxes[i, 0]):
        top_i, bottom_i = comps.boxes[i, 0], comps.boxes[i, 2]
        if rows and top_i <= row_bottom:
            rows[-1].append(i)
            row_bottom = max(row_bottom, bottom_i)
        else:
            rows.append([i])
            row_bottom = bottom_i
    text: list[int] = []
    for members in rows:
        row = comps.boxes[sorted(members, key=lambda i: comps.boxes[i, 1])]
        gaps = row[1:, 1] - row[:-1, 3]
        if len(members) >= 8 and np.median(gaps) <= 0.5 * lh:
            text += members
    return np.asarray(text, dtype=int)


def picture_mask(ink: np.ndarray, rules: np.ndarray, lh: float, whole: Components
                 ) -> tuple[np.ndarray, list[list[int]]]:
    """Pixels of pictures and the pictures' boxes (top, left, bottom, right). A picture is a
    blob of non-rule ink at least 3 line heights tall and wide (no letter is), or a dense
    blob of at least 2, together with the rules it touches (a chart's axes); its box takes in
    the small things in and just around it (a chart's labels), unless that would swallow
    much of the page's text (a scan's dark border is not a frame around the text)."""
    has_rules = bool(rules.any())
    comps = components(ink & ~rules) if has_rules else whole  # `whole`: components of `ink`
    if comps.area.size == 0:
        return np.zeros_like(ink), []
    hgt = comps.boxes[:, 2] - comps.boxes[:, 0] + 1
    wid = comps.boxes[:, 3] - comps.boxes[:, 1] + 1
    dense = comps.area >= 0.5 * hgt * wid
    big = ((hgt >= 3 * lh) & (wid >= 3 * lh)) | (dense & (hgt >= 2 * lh) & (wid >= 2 * lh))
    if not big.any():
        return np.zeros_like(ink), []
    cores = comps.mask(ink.shape, np.flatnonzero(big))
    boxes = comps.boxes[big].tolist()
    if has_rules:
        boxes += whole.boxes[whole.touching(cores)].tolist()
    small = ~big & (hgt <= 2 * lh)
    t_, l_, b_, r_ = comps.boxes.T
    mask = cores.copy()
    kept: list[list[int]] = []
    near = 0.75 * lh
    for top, left, bottom, right in _merge_boxes(boxes, int(lh // 2)):
        inside = (small & (b_ >= top - near) & (t_ <= bottom + near)
                  & (r_ >= left - near) & (l_ <= right + near))
        if inside.sum() > max(60, 0.3 * small.sum()):
            continue  # only the blob itself is left out, not what it surrounds
        inside[_text_rows_outside(comps, np.flatnonzero(inside), top, bottom, lh)] = False
        for i in np.flatnonzero(inside):
            t, lf, b, r = comps.boxes[i]
            top, left, bottom, right = min(top, t), min(left, lf), max(bottom, b), max(right, r)
        mask[top : bottom + 1, left : right + 1] = True
        kept.append([int(top), int(left), int(bottom), int(right)])
    return mask, kept


def _drop_cap_line(comps: Components, i: int, lh: float) -> tuple[int, int, int] | None:
    """For a component that is a drop cap (a letter two to five lines tall at the start of a
    paragraph, the paragraph's first lines beside it), the first line's letter top, baseline
    and left end; None for anything else."""
    top, left, bottom, right = comps.boxes[i]
    hgt, wid = bottom - top + 1, right - left + 1
    if not (2.2 * lh <= hgt <= 5 * lh and 0.8 * lh <= wid <= 4 * lh
            and comps.area[i] <= 0.6 * hgt * wid):
        return None
    t_, l_, b_, r_ = comps.boxes.T
    letter = (b_ - t_ < 1.5 * lh) & (r_ - l_ < 2 * lh)
    beside = letter & (t_ >= top - 0.5 * lh) & (b_ <= bottom + 0.5 * lh)
    right_of = beside & (l_ > right) & (l_ <= right + 1.5 * lh)
    left_of = beside & (r_ < left) & (r_ >= left - 1.5 * lh)
    rows = np.unique((t_[right_of] - top) // max(1, int(0.8 * lh)))
    first = letter & (l_ > right) & (l_ <= right + 20 * lh) & (np.abs(t_ - top) <= 0.5 * lh)
    if left_of.any() or rows.size < 2 or _run_of_words(comps.boxes[first], lh) < 8 * lh:
        return None
    # One big glyph has strokes far thicker than the text's (a word set on a slant has not).
    own = comps.run_label == i
    text_runs = np.isin(comps.run_label, np.flatnonzero(letter))
    stroke = np.median(comps.run_ends[own] - comps.run_starts[own])
    if stroke < 2 * np.median(comps.run_ends[text_runs] - comps.run_starts[text_runs]):
        return None
    return int(t_[first].min()), int(np.median(b_[first])), int(l_[first].min())


def _run_of_words(boxes: np.ndarray, lh: float) -> int:
    """How far a line's letters reach from its first one without a gap wider than a word
    space: a paragraph's line is long; a table row stops at its first gutter."""
    if boxes.size == 0:
        return 0
    boxes = boxes[np.argsort(boxes[:, 1])]
    reach = boxes[0, 3]
    for left, right in boxes[1:, [1, 3]]:
        if left - reach > lh:
            break
        reach = max(reach, right)
    return int(reach - boxes[0, 1])


def set_drop_caps(gray: np.ndarray, ink: np.ndarray, comps: Components, lh: float,
                  paper: float) -> bool:
    """Moves each drop cap into its paragraph's first line, at the line's letter height just
    before its first letter, so that the line reader reads "Over" where the page has a big
    "O" beside "ver". Changes `gray` and `ink` in place; True if any was moved."""
    hgt = comps.boxes[:, 2] - comps.boxes[:, 0] + 1
    moved = False
    for i in np.flatnonzero(hgt >= 2.2 * lh):
        line = _drop_cap_line(comps, int(i), lh)
        if line is None:
            continue
        letter_top, baseline, first_left = line
        top, left, bottom, right = (int(v) for v in comps.boxes[i])
        new_h = max(4, baseline - letter_top + 1)
        new_w = max(2, round((right - left + 1) * new_h / (bottom - top + 1)))
        x1 = first_left - max(1, round(0.1 * lh))
        x0, y0 = x1 - new_w, baseline - new_h + 1
        if x0 < 0 or y0 < 0:
            continue
        rows, cols = comps.pixels(int(i))
        shape = np.zeros((bottom - top + 1, right - left + 1), dtype=bool)
        shape[rows - top, cols - left] = True
        crop = np.where(shape, gray[top : bottom + 1, left : right + 1], np.float32(paper))
        # Its whole box, with its anti-aliased edge (lighter than the ink threshold): nothing
        # else stands there, as the line beside it starts right of it.
        box = (slice(max(0, top - 2), bottom + 3), slice(max(0, left - 2), right + 2))
        gray[box], ink[box] = paper, False
        small = np.asarray(Image.fromarray(crop.astype(np.uint8)).resize((new_w, new_h),
                                                                        Image.BILINEAR))
        gray[y0 : baseline + 1, x0:x1] = np.minimum(gray[y0 : baseline + 1, x0:x1], small)
        ink[y0 : baseline + 1, x0:x1] |= small < (paper + float(small.min())) / 2
        moved = True
    return moved


# --- regions ------------------------------------------------------------------------------


@dataclass
class Block:
    """A region of the page in reading order: running text, a table, a picture, or a running
    header or footer. Coordinates are pixels, ends exclusive."""

    kind: str  # text | table | figure | header | footer
    x0: int
    y0: int
    x1: int
    y1: int
    rows: list[tuple[int, int]] = field(default_factory=list)  # a table's row spans (y0, y1)
    cols: list[tuple[int, int]] = field(default_factory=list)  # a table's column spans (x0, x1)
    head: int = 0  # a table's first rows that are spanning headings, not cut by its columns


@dataclass
class _Slice:
    y0: int
    y1: int  # exclusive
    used: np.ndarray  # bool per column of the region: ink in this slice
    gaps: list[tuple[int, int, bool]]  # interior empty column runs (x0, x1, holds a rule)


@dataclass
class _Group:
    slices: list[_Slice]
    gutters: list[tuple[int, int, bool]]  # region-relative x spans, exclusive ends


class _Cutter:
    """The recursive whitespace cut of one page."""

    def __init__(self, solid: np.ndarray, vrules: np.ndarray, lh: float, shaded: np.ndarray):
        self.solid = solid  # ink that blocks a cut: text, and pictures as filled boxes
        self.vrules = vrules
        self.lh = lh
        self.shaded = shaded  # per row and column: paper darker than the page (code blocks)

    def slices(self, x0: int, y0: int, x1: int, y1: int) -> list[_Slice]:
        """The region's rows split at every empty row band, each with its gaps: empty column
        runs between inked ones, as wide as a gutter, or holding a vertical rule."""
        region = self.solid[y0:y1, x0:x1]
        out = []
        for s, e in runs_1d(region.any(axis=1)):
            used = region[s:e].any(axis=0)
            ruled = self.vrules[y0 + s : y0 + e, x0:x1].any(axis=0)
            gaps = []
            inked = np.flatnonzero(used)
            for a, b in runs_1d(~used):
                if a <= inked[0] or b > inked[-1]:
                    continue  # a margin, not a gap between two things
                has_rule = bool(ruled[a:b].any())
                if b - a >= GUTTER_MIN_WIDTH * self.lh or has_rule:
                    gaps.append((a, b, has_rule))
            out.append(_Slice(y0 + s, y0 + e, used, gaps))
        return out

    def _intersect(self, gutters: list[tuple[int, int, bool]], gaps: list[tuple[int, int, bool]]
                   ) -> list[tuple[int, int, bool]]:
        out = []
        for a0, a1, ra in gutters:
            for b0, b1, rb in gaps:
                lo, hi = max(a0, b0), min(a1, b1)
                ruled = ra and rb
                if hi - lo >= (1 if ruled else GUTTER_MIN_WIDTH * self.lh):
                    out.append((lo, hi, ruled))
        return out

    def groups(self, slices: list[_Slice]) -> list[_Group]:
        """Consecutive slices sharing a gutter, greedily; a slice without one is a group alone.
        A group of one short slice is no group: one line with a wide space in it."""
        groups: list[_Group] = []
        for sl in slices:
            last = groups[-1] if groups else None
            common = self._intersect(last.gutters, sl.gaps) if last and last.gutters else []
            if common:
                last.slices.append(sl)
                last.gutters = common
            else:
                groups.append(_Group([sl], list(sl.gaps)))
        for g in groups:
            if len(g.slices) < 2 and g.slices[0].y1 - g.slices[0].y0 < 2.5 * self.lh:
                g.gutters = []
        return self._absorb(groups)

    def _absorb(self, groups: list[_Group]) -> list[_Group]:
        """A slice without gutters joins a neighbouring group, near it, when its ink stays clear
        of the group's gutters (the end of a column that runs longer than its neighbour, a
        table cell's second line); neighbouring groups whose gutters line up are one group."""
        while True:
            merge = self._next_merge(groups)
            if merge is None:
                return groups
            i, j = merge
            keep, gone = groups[j], groups[i]  # `keep` has gutters (`_next_merge`)
            if gone.gutters:  # two groups whose gutters line up: the gutters they share
                keep.gutters = self._intersect(keep.gutters, gone.gutters)
            else:  # a lone line: the gutters narrowed to what it leaves empty
                keep.gutters = self._clear_part(gone.slices[0], keep)
            keep.slices = sorted(keep.slices + gone.slices, key=lambda s: s.y0)
            groups.remove(gone)

    def _next_merge(self, groups: list[_Group]) -> tuple[int, int] | None:
        """(i, j): group i joins its neighbour j, which has gutters; None when none does."""
        for i, g in enumerate(groups):
            for j in (i - 1, i + 1):
                if not 0 <= j < len(groups) or not groups[j].gutters:
                    continue
                other = groups[j]
                gap = (other.slices[0].y0 - g.slices[-1].y1 if j > i
                       else g.slices[0].y0 - other.slices[-1].y1)
                if gap > 2 * self.lh:
                    continue
                if g.gutters and j > i and self._intersect(g.gutters, other.gutters):
                    return i, j
                if not g.gutters and len(g.slices) == 1 and self._clear_part(g.slices[0], other):
                    return i, j
        return None

    def _clear_part(self, sl: _Slice, group: _Group) -> list[tuple[int, int, bool]]:
        """The group's gutters narrowed to the columns the slice leaves empty, margins
        included; [] unless every gutter keeps one part wide enough. A gutter found over a
        few lines of text columns is as wide as their shortest line leaves it (short headings
        over a grid of cards), and the next line of the left column may end inside it. A
        table's gutters are not narrowed: a line reaching into one spans its columns."""
        if not _clear_of(sl, group) and min(_column_widths(group)) < COLUMN_MIN_WIDTH * self.lh:
            return []
        empty = [(a, b, True) for a, b in runs_1d(~sl.used)]
        narrowed = []
        for gutter in group.gutters:
            parts = self._intersect([gutter], empty)
            if len(parts) != 1:
                return []
            narrowed.append((*parts[0][:2], gutter[2]))
        return narrowed

    def cut(self, x0: int, y0: int, x1: int, y1: int, depth: int = 0) -> list[Block]:
        """Blocks of the region in reading order."""
        slices = self.slices(x0, y0, x1, y1)
        if not slices:
            return []
        groups = self.groups(slices) if depth < 6 else [_Group(slices, [])]
        blocks: list[Block] = []
        text: list[_Slice] = []
        lone: list[_Slice] = []  # the text groups' own slices, where a group is one slice
        bounds = _spans([(g.slices[0].y0, g.slices[-1].y1) for g in groups], y0, y1)
        for g, (top, bottom) in zip(groups, bounds):
            kind = self._kind(g, x0, x1) if g.gutters else "text"
            if kind == "text":
                text.append(_Slice(top, bottom, g.slices[0].used, []))
                lone.append(g.slices[0] if len(g.slices) == 1 else None)
                continue
            head = self._spanning_head(lone, g) if kind == "table" else []
            if head:
                top = text[-len(head)].y0
                text, lone = text[: -len(head)], lone[: -len(head)]
            if text:
                blocks.append(Block("text", x0, text[0].y0, x1, text[-1].y1))
                text, lone = [], []
            parts = _spans(_parts(g.gutters, x1 - x0), 0, x1 - x0)
            if kind == "columns":
                bands = self._bands(g)
                spans = _spans([(band[0].y0, band[-1].y1) for band in bands], top, bottom)
                for band_top, band_bottom in spans:
                    for a, b in parts:
                        blocks += self.cut(x0 + a, band_top, x0 + b, band_bottom, depth + 1)
            else:
                rows = [(sl.y0, sl.y1) for sl in head] + _table_rows(g)
                blocks.append(Block("table", x0, top, x1, bottom, _spans(rows, top, bottom),
                                    [(x0 + a, x0 + b) for a, b in parts], head=len(head)))
        if text:
            blocks.append(Block("text", x0, text[0].y0, x1, text[-1].y1))
        return blocks

    def _spanning_head(self, lone: list[_Slice | None], table: _Group) -> list[_Slice]:
        """The lines just above a table that are its headings: up to three single lines, each
        close to the next, that either span its columns ("Year ended" over three columns of
        dates; ink over the table's columns, none over its first, the row labels') or have a
        space at every one of its gutters (the column names, above a spanning heading). The
        whitespace cut leaves them out of the table: their gaps do not line up with the
        columns', or a spanning line parts them from it."""
        parts = _parts(table.gutters, table.slices[0].used.size)
        if len(parts) < 3:
            return []
        stub_end, last_end = parts[0][1], parts[-1][1] + int(self.lh)
        head: list[_Slice] = []
        below = table.slices[0].y0
        for sl in reversed(lone[-3:]):
            if sl is None or below - sl.y1 > 1.5 * self.lh or sl.y1 - sl.y0 > 1.5 * self.lh:
                break
            inked = np.flatnonzero(sl.used)
            spanning = inked[0] >= stub_end and inked[-1] < last_end
            aligned = all(any(_overlap(g[:2], gap[:2]) for gap in sl.gaps) for g in table.gutters)
            if not (spanning or aligned):
                break
            head.insert(0, sl)
            below = sl.y0
        return head

    def _bands(self, g: _Group) -> list[list[_Slice]]:
        """A column group cut at its widest empty bands across all its columns (at least 1.5
        line heights, and every column holding something above and below each): a grid of
        boxes (cards) is read row after row, as a whitespace cut takes the widest gap first.
        Flowing columns rarely break at the same height by that much. A band of one line is
        no row of cards but the headings over them: it stays with what follows it."""
        gaps = [b.y0 - a.y1 for a, b in zip(g.slices, g.slices[1:])]
        if not gaps:
            return [g.slices]
        wide = max(1.5 * self.lh, 0.9 * max(gaps))
        bands = [[g.slices[0]]]
        for gap, sl in zip(gaps, g.slices[1:]):
            if gap >= wide and len(bands[-1]) > 1:
                bands.append([sl])
            else:
                bands[-1].append(sl)
        if len(bands) > 1 and all(_fills_every_part(band, g.gutters) for band in bands):
            return bands
        return [g.slices]

    def _kind(self, g: _Group, x0: int, x1: int) -> str:
        """columns, table, or text (a shaded code block keeps its aligned comments as they are)."""
        top, bottom = g.slices[0].y0, g.slices[-1].y1
        if self.shaded[top:bottom, x0:x1].mean() > 0.5:
            return "text"
        rows = [s for s in g.slices if s.y1 - s.y0 >= 0.5 * self.lh]  # not accents or underscores
        typed = self._typed_rows(rows, x0, x1)
        if typed >= 2 or typed >= 0.6 * len(rows):
            # Rows typed with "|" between cells: the reader reads them as they are. Two such
            # rows in a group mean its gutter runs between their cells, not between columns.
            return "text"
        if min(_column_widths(g)) >= COLUMN_MIN_WIDTH * self.lh:
            # A line or two with a wide space at the same place (code and its aligned
            # comments) are read line by line; columns run down the page.
            return "columns" if bottom - top >= 4 * self.lh else "text"
        heights = [s.y1 - s.y0 for s in g.slices]
        if len(g.slices) >= 2 and float(np.median(heights)) <= 3 * self.lh:
            return "table"
        return "columns"


    def _pipe_row(self, sl: _Slice, x0: int, x1: int) -> bool:
        """Whether a slice begins and ends with a thin stroke as tall as the slice: a row of a
        table typed as text, "| a | b |". An italic bar slants, so the stroke may be as wide
        as 0.4 line heights."""
        ends = self._thin_ends(sl)
        if ends is None:
            return False
        region = self.solid[sl.y0 : sl.y1, x0:x1]
        return all(region[:, a:b].any(axis=1).mean() >= 0.8 for a, b in ends)

    def _thin_ends(self, sl: _Slice) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """The slice's first and last runs of ink where both are thin strokes and there is
        something between them; None otherwise."""
        runs = runs_1d(sl.used)
        if len(runs) < 3 or any(b - a > max(2, 0.4 * self.lh) for a, b in (runs[0], runs[-1])):
            return None
        return runs[0], runs[-1]

    def _typed_rows(self, rows: list[_Slice], x0: int, x1: int) -> int:
        """How many rows are typed with "|": rows whose end strokes are bars as tall as the
        row, and rows whose thin end strokes stand where those bars do (a header row whose
        bars, in its bold face, stop at the baseline above the row's descenders)."""
        typed = [self._pipe_row(sl, x0, x1) for sl in rows]
        bars = [end for sl, t in zip(rows, typed) if t for end in self._thin_ends(sl)]
        aligned = 0
        for sl, t in zip(rows, typed):
            ends = None if t else self._thin_ends(sl)
            if ends and all(any(_overlap(end, bar) for bar in bars) for end in ends):
                aligned += 1
        return sum(typed) + aligned


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two spans (start, end exclusive) share a pixel."""
    return min(a[1], b[1]) > max(a[0], b[0])


def _fills_every_part(slices: list[_Slice], gutters: list[tuple[int, int, bool]]) -> bool:
    used = np.zeros_like(slices[0].used)
    for sl in slices:
        used |= sl.used
    return all(used[a:b].any() for a, b in _parts(gutters, used.size))


def _clear_of(sl: _Slice, group: _Group) -> bool:
    return not any(sl.used[a:b].any() for a, b, _ in group.gutters)


def _column_widths(g: _Group) -> list[int]:
    """The width of the ink between each pair of the group's gutters (and the edges)."""
    used = np.zeros_like(g.slices[0].used)
    for sl in g.slices:
        used |= sl.used
    return [_ink_width(used[a:b]) for a, b in _parts(g.gutters, used.size)]


def _parts(gutters: list[tuple[int, int, bool]], width: int) -> list[tuple[int, int]]:
    """The spans between gutters, each gutter split at its middle."""
    cuts = [(a + b) // 2 for a, b, _ in sorted(gutters)]
    edges = [0] + cuts + [width]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def _spans(items: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """Consecutive items widened to tile [lo, hi): each boundary at the middle of the gap."""
    out = []
    for i, (a, b) in enumerate(items):
        start = lo if i == 0 else (items[i - 1][1] + a) // 2
        end = hi if i == len(items) - 1 else (b + items[i + 1][0]) // 2
        out.append((start, end))
    return out


def _table_rows(g: _Group) -> list[tuple[int, int]]:
    """A table's rows from its slices: a slice with nothing in the first column continues
    the row above (a cell's second line)."""
    first_col = _parts(g.gutters, g.slices[0].used.size)[0]
    rows: list[list[int]] = []
    for s in g.slices:
        if rows and not s.used[first_col[0] : first_col[1]].any():
            rows[-1][1] = s.y1
        else:
            rows.append([s.y0, s.y1])
    return [(a, b) for a, b in rows]


# --- the page -----------------------------------------------------------------------------


@dataclass
class PageLayout:
    """A page made ready for the line reader: the upright page (rules and pictures painted as
    paper, so that no crop shows them), the quarter turns that made it upright, its blocks and
    its line boxes in reading order."""

    image: Image.Image  # "L"
    turns: int  # counterclockwise quarter turns applied to the input page
    blocks: list[Block]
    boxes: list[LineBox]




def furniture(slices: list[_Slice], height: int, lh: float) -> tuple[int, int]:
    """How many of the page's first and last slices (up to two each) are running headers and
    footers: one line in the page's top (bottom) tenth, on a page with a body, set apart from
    what follows (precedes) it by a wide gap: wider than any gap inside the body for a short
    line of body size (a paragraph's last line after a paragraph gap is no footer), or than the
    body's line gaps for a line of smaller print (page numbers, running titles). Two: a
    running title and a page number, one above the other.

    A line whose parts stand at the page's ends with a wide space between them (a journal's
    name left, its issue right) counts as short: a paragraph's line has no such space. At the
    top of the page such a line across the text's measure, over a line without such spaces,
    is a running head even at the body's leading (a book's page number, title and chapter). On a
    sparse page (a cover, a title page) the body's own gaps are wide, so "set apart" asks for
    no more than 2.5 line heights for small print and 4 for body size. Below the page's middle,
    a lone line of a few characters set apart by such a gap is the page number, even above
    the bottom tenth: the body may end mid-page."""
    if len(slices) < 6:
        return 0, 0
    gaps = [b.y0 - a.y1 for a, b in zip(slices, slices[1:])]
    inner = gaps[2:-2] or gaps
    apart = max(1.5 * lh, min(2.0 * float(np.median(gaps)), FURNITURE_SPARSE_GAP * lh))
    beyond_body = max(apart, min(1.3 * max(inner), FURNITURE_SPARSE_BODY_GAP * lh))

    body_span = max(_ink_width(sl.used) for sl in slices)

    def spread(sl: _Slice) -> bool:
        return any(b - a >= FURNITURE_SPREAD_GAP * lh for a, b, _ in sl.gaps)

    def at_ends(sl: _Slice) -> bool:
        # Two or three parts far apart (a journal's name left, its page right) are no
        # paragraph's line, so a line's gap sets them apart; a table's row has more parts.
        return sl.y1 - sl.y0 <= 1.25 * lh and spread(sl) and len(sl.gaps) <= 2

    def lone(sl: _Slice, gap: int) -> bool:
        # A line of body size must also be short: a paragraph's one long last line after a
        # wide gap (below a code block, a table) is body text, and leaving it out loses it.
        height = sl.y1 - sl.y0
        short = spread(sl) or _ink_width(sl.used) <= FURNITURE_MAX_SPAN * body_span
        return (height <= 1.25 * lh and short and gap >= beyond_body) or (
            height <= 0.85 * lh and gap >= apart) or (at_ends(sl) and gap >= apart)

    def page_number(sl: _Slice, gap: int) -> bool:
        # Where the body ends mid-page, its page number follows it, well above the page's foot.
        return (sl.y0 >= height / 2 and _ink_width(sl.used) <= PAGE_NUMBER_MAX_WIDTH * lh
                and sl.y1 - sl.y0 <= 1.25 * lh and gap >= beyond_body)

    def running_head(sl: _Slice, below: _Slice) -> bool:
        # A book's running head (page number, title and chapter at the margins) may keep the
        # body's own leading: it spans the text's measure, and its wide spaces over prose that
        # has none set it apart. Under a table's first row lies another row with the same
        # spaces, or the row is narrower than the text.
        return (at_ends(sl) and not spread(below)
                and _ink_width(sl.used) >= RUNNING_HEAD_MIN_SPAN * body_span)

    top = 0
    while top < 2 and slices[top].y1 <= FURNITURE_ZONE * height and (
            lone(slices[top], gaps[top]) or (top == 0 and running_head(slices[0], slices[1]))):
        top += 1
    first, second = slices[0], slices[1]
    if (top == 0 and second.y1 <= FURNITURE_ZONE * height and at_ends(second) and gaps[1] >= apart
            and first.y1 - first.y0 <= 1.25 * lh and gaps[0] <= lh
            and _ink_width(first.used) <= 0.9 * body_span):
        top = 2  # a line just above a running header (a download stamp) goes with it
    end = len(slices)  # dust under the last line (a rule's remains, a speck) is never read
    while end > top + 1 and _dust(slices[end - 1], lh):
        end -= 1
    bottom = 0
    while bottom < 2:
        i = end - 1 - bottom
        if i <= top:
            break
        at_foot = slices[i].y0 >= (1 - FURNITURE_ZONE) * height and lone(slices[i], gaps[i - 1])
        if not (at_foot or (bottom == 0 and page_number(slices[i], gaps[i - 1]))):
            break
        bottom += 1
    return top, bottom + len(slices) - end


def _dust(sl: _Slice, lh: float) -> bool:
    return sl.y1 - sl.y0 < DUST * lh and _ink_width(sl.used) < DUST * lh


def page_blocks(cutter: _Cutter, width: int, height: int) -> list[Block]:
    """The page's blocks in reading order: header, body regions, footer."""
    slices = cutter.slices(0, 0, width, height)
    if not slices:
        return []
    header, footer = furniture(slices, height, cutter.lh)
    top = (slices[header - 1].y1 + slices[header].y0) // 2 if header else 0
    bottom = (slices[-footer - 1].y1 + slices[-footer].y0) // 2 if footer else height
    blocks = [Block("header", 0, 0, width, top)] if header else []
    blocks += cutter.cut(0, top, width, bottom)
    if footer:
        blocks.append(Block("footer", 0, bottom, width, height))
    return blocks


def _block_boxes(page: PageInk, blocks: list[Block], pictures: list[list[int]]) -> list[LineBox]:
    """Line boxes of every block, in reading order: a table's by row, then column; a
    picture's placeholder among the lines of the text block it sits in, by its top."""
    out: list[LineBox] = []
    for bi, blk in enumerate(blocks):
        if blk.kind == "table":
            for r, (ya, yb) in enumerate(blk.rows):
                if r < blk.head:
                    out += _heading_cells(page, blk, r, bi)
                    continue
                for c, (xa, xb) in enumerate(blk.cols):
                    out += [replace(b, kind="cell", block=bi, cell=(r, c))
                            for b in lines_in(page, (xa, ya, xb, yb))]
            continue
        kind = blk.kind if blk.kind in ("header", "footer") else "text"
        lines = [replace(b, kind=kind, block=bi)
                 for b in lines_in(page, (blk.x0, blk.y0, blk.x1, blk.y1))]
        if kind == "text":
            for top, left, bottom, right in pictures:
                cy, cx = (top + bottom) // 2, (left + right) // 2
                if blk.y0 <= cy < blk.y1 and blk.x0 <= cx < blk.x1:
                    lines.append(LineBox(left, top, right, bottom, top, bottom, False, False,
                                         kind="figure", block=bi))
            lines.sort(key=lambda b: b.ink_top)
        out += lines
    return out


def _heading_cells(page: PageInk, blk: Block, row: int, bi: int) -> list[LineBox]:
    """A spanning heading row's boxes: its line cut at wide spaces into phrases, each the
    cell of the column under its middle (a heading over two columns is not cut in two). A
    row with nothing over the first column (the row labels) heads the columns: each phrase
    spans the columns nearer to it than to any other ("Year ended", centred over three
    columns of dates, heads all three)."""
    ya, yb = blk.rows[row]
    cells = []
    for line in lines_in(page, (blk.x0, ya, blk.x1, yb)):
        used = page.ink[line.ink_top : line.ink_bottom + 1, line.x0 : line.x1 + 1].any(axis=0)
        pad = max(2, line.ink_height // 4)
        for a, b in _phrases(used, GUTTER_MIN_WIDTH * page.line_height):
            mid = line.x0 + (a + b) // 2
            col = next((c for c, (xa, xb) in enumerate(blk.cols) if xa <= mid < xb), len(blk.cols) - 1)
            cells.append(replace(line, x0=max(line.x0, line.x0 + a - pad),
                                 x1=min(line.x1, line.x0 + b - 1 + pad),
                                 kind="cell", block=bi, cell=(row, col)))
    if cells and min(c.x0 for c in cells) >= blk.cols[0][1]:
        cells = _spread_over_columns(cells, blk.cols[1:], first=1)
    return cells


def _spread_over_columns(cells: list[LineBox], cols: list[tuple[int, int]], first: int
                         ) -> list[LineBox]:
    """Heading cells, each given the columns (numbered from `first`) nearer to it than to
    any other heading: its first one, and how many."""
    def distance(cell: LineBox, col: tuple[int, int]) -> int:
        return max(0, col[0] - cell.x1, cell.x0 - col[1])

    owner = [min(range(len(cells)), key=lambda k: (distance(cells[k], col), k)) for col in cols]
    out = []
    for k, cell in enumerate(cells):
        mine = [first + c for c, o in enumerate(owner) if o == k]
        if mine:
            cell = replace(cell, cell=(cell.cell[0], mine[0]), span=len(mine))
        out.append(cell)
    return out


def _phrases(used: np.ndarray, min_gap: float) -> list[tuple[int, int]]:
    """Runs of inked columns, joined across spaces narrower than `min_gap`."""
    out: list[list[int]] = []
    for a, b in runs_1d(used):
        if out and a - out[-1][1] < min_gap:
            out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _paper_level(gray: np.ndarray, ink: np.ndarray) -> float:
    """The paper's grey level, to paint with: the median of what is not ink (every other
    pixel, which is as good and a quarter of the work)."""
    sample = (slice(None, None, 2), slice(None, None, 2))
    return float(np.median(gray[sample][~ink[sample]])) if not ink[sample].all() else 255.0


def analyse_page(image: Image.Image) -> PageLayout:
    """The page's layout: turned upright, cleared of rules and pictures, cut into blocks,
    and its lines found block by block."""
    gray = np.asarray(image.convert("L"), dtype=np.float32)
    ink = despeckle(ink_mask(gray))
    comps = components(ink)
    paper = _paper_level(gray, ink)
    # Reversed text first: until then a dark slide is one blob, which way up it is unknown.
    reversed_text = reverse_light_text(gray, comps, paper)
    if reversed_text is not None:
        gray = reversed_text
        ink = despeckle(ink_mask(gray))
        comps = components(ink)
    turns = orientation(ink, comps)
    if turns:
        gray = np.ascontiguousarray(np.rot90(gray, turns))
        ink = np.ascontiguousarray(np.rot90(ink, turns))
        comps = components(ink)
    lh = line_height(ink)
    fills = flat_fills(gray, ink, lh, comps, paper)
    if fills.any():  # painted as paper: the text on them is what is left of their ink
        gray = np.where(fills, np.float32(paper), gray)
        ink = despeckle(ink & ~fills)
        comps = components(ink)
    if set_drop_caps(gray, ink, comps, lh, paper):
        comps = components(ink)
    hrules, vrules = rulings(ink, lh)
    pictures, picture_boxes = picture_mask(ink, hrules | vrules, lh, comps)
    text_ink = ink & ~hrules & ~vrules & ~pictures
    painted = (near_ink(hrules | vrules, 1) & ~text_ink) | pictures
    clean = np.where(painted, np.float32(paper), gray)
    solid = text_ink.copy()
    for top, left, bottom, right in picture_boxes:
        solid[top : bottom + 1, left : right + 1] = True
    cutter = _Cutter(solid, vrules, lh, clean < paper - SHADE)
    h, w = gray.shape
    blocks = page_blocks(cutter, w, h)
    boxes = _block_boxes(PageInk.of(clean, text_ink, lh), blocks, picture_boxes)
    upright = Image.fromarray(np.clip(clean, 0, 255).astype(np.uint8))
    return PageLayout(upright, turns, blocks, boxes)


def fine_page(image: Image.Image, coarse: Image.Image, layout: PageLayout) -> Image.Image:
    """`image`, which `coarse` is a reduced copy of, turned upright as the layout of `coarse`
    turned it, with what the layout changed (rules and pictures painted as paper, drop caps
    moved) taken from the layout's image, enlarged. Only the window that holds the changes is
    enlarged: most pages change little or nothing, and the fine page has 4 times the pixels."""
    fine, small = (np.asarray(im if im.mode == "L" else im.convert("L")) for im in (image, coarse))
    if layout.turns:
        fine, small = np.rot90(fine, layout.turns), np.rot90(small, layout.turns)
    changed = np.asarray(layout.image) != small
    out = np.array(fine)  # contiguous and writable
    if not changed.any():
        return Image.fromarray(out)
    (h, w), (fh, fw) = small.shape, fine.shape
    fy, fx = fh / h, fw / w
    rows, cols = np.flatnonzero(changed.any(axis=1)), np.flatnonzero(changed.any(axis=0))
    # The changed pixels and one more each side: all that bilinear enlargement reads of them.
    top, bottom = max(0, int((rows[0] - 1) * fy)), min(fh, int(np.ceil((rows[-1] + 2) * fy)))
    left, right = max(0, int((cols[0] - 1) * fx)), min(fw, int(np.ceil((cols[-1] + 2) * fx)))
    size, box = (right - left, bottom - top), (left / fx, top / fy, right / fx, bottom / fy)
    mask = Image.fromarray((changed * 255).astype(np.uint8)).resize(size, Image.BILINEAR, box=box)
    clean = layout.image.resize(size, Image.BILINEAR, box=box)
    np.copyto(out[top:bottom, left:right], np.asarray(clean), where=np.asarray(mask) > 0)
    return Image.fromarray(out)


def scale_box(box: LineBox, fx: float, fy: float, size: tuple[int, int]) -> LineBox:
    """`box` on a page `fx` (`fy`) times as wide (tall), `size` pixels, rounded outwards."""
    w, h = size

    def lo(v: int, f: float) -> int:
        return int(v * f)

    def hi(v: int, f: float, n: int) -> int:
        return min(n - 1, int(np.ceil((v + 1) * f)) - 1)

    return replace(box, x0=lo(box.x0, fx), x1=hi(box.x1, fx, w), y0=lo(box.y0, fy),
                   y1=hi(box.y1, fy, h), ink_top=lo(box.ink_top, fy),
                   ink_bottom=hi(box.ink_bottom, fy, h))
