"""A PDF page's text layer, placed in the rendered image's pixels: a source of drafts.

Born-digital PDFs carry the text they show. The renderer reads it with each character's box
(render.read_text_layer), adapters cut out the text of each request's region (`text_in`, or
`page_text` for a whole page), and the engine proposes it as drafts (engine/text_draft.py).
Verification keeps the output the model's own, so a layer that is invisible, garbled, out of
order or simply wrong costs speed, never text.

The layer travels with the page image itself (`attach` / `text_layer_of`, in its `info`), so a
model adapter's `page_requests(image, ...)` finds it wherever pages are prepared: in the
render workers, in the engine's process, or on a distributed worker.

No torch here: render workers import this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

INFO_KEY = "ocrcli.text_layer"  # where `attach` puts the layer in a PIL image's `info`
# Where the renderer notes the dpi it rendered a PDF page at (without a small page's zoom).
DPI_KEY = "ocrcli.render_dpi"
SPACE_GAP = 0.1  # a gap wider than this share of the line's height separates words


@dataclass
class TextLayer:
    """The characters of a page's text layer and their boxes in image pixels."""

    chars: str  # N characters in the PDF's content order, whitespace included
    boxes: np.ndarray  # [N,4] float32 x0, y0, x1, y1 in image pixels; NaN where a char has none

    def __post_init__(self) -> None:
        self.boxes = np.asarray(self.boxes, dtype=np.float32).reshape(-1, 4)
        if len(self.chars) != self.boxes.shape[0]:
            raise ValueError(f"{len(self.chars)} characters but {self.boxes.shape[0]} boxes")

    def __len__(self) -> int:
        return len(self.chars)

    def page_text(self) -> str:
        """The whole layer in content order (PDFs mostly store text in reading order), each
        run of whitespace, line breaks included, as one space: a page model writes wrapped
        lines of a paragraph as one line."""
        return " ".join(self.chars.split())

    def text_in(self, box: tuple[float, float, float, float]) -> str:
        """The text whose characters have their box centre inside `box` (x0, y0, x1, y1,
        pixels, edges included), in reading order: rows top to bottom, each left to right,
        words separated by one space where the gap between boxes says so (the layer's own
        spaces are not trusted: many PDFs position words without them)."""
        x0, y0, x1, y1 = box
        b = self.boxes
        cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2  # [N]; NaN compares False
        inside = (cx >= x0) & (cx <= x1) & (cy >= y0) & (cy <= y1)
        index = [i for i in np.flatnonzero(inside) if not self.chars[i].isspace()]
        if not index:
            return ""
        return " ".join(self._row_text(row) for row in self._rows(index))

    def _rows(self, index: list[int]) -> list[list[int]]:
        """Characters grouped into rows by their vertical centres, top to bottom."""
        b = self.boxes
        height = float(np.median(b[index, 3] - b[index, 1])) or 1.0
        rows: list[list[int]] = []
        centre = 0.0
        for i in sorted(index, key=lambda i: b[i, 1] + b[i, 3]):
            cy = float(b[i, 1] + b[i, 3]) / 2
            if rows and abs(cy - centre) <= height / 2:
                rows[-1].append(i)
                centre += (cy - centre) / len(rows[-1])  # the row's running mean
            else:
                rows.append([i])
                centre = cy
        return rows

    def _row_text(self, row: list[int]) -> str:
        b = self.boxes
        row = sorted(row, key=lambda i: b[i, 0] + b[i, 2])
        height = float(np.median(b[row, 3] - b[row, 1])) or 1.0
        out = [self.chars[row[0]]]
        for prev, i in zip(row, row[1:]):
            if b[i, 0] - b[prev, 2] > SPACE_GAP * height:
                out.append(" ")
            out.append(self.chars[i])
        return "".join(out)


def attach(image: Image.Image, layer: TextLayer | None) -> None:
    """Carry `layer` with `image` (it pickles with the image, to and from render workers)."""
    if layer is not None:
        image.info[INFO_KEY] = layer


def rendered_dpi(image: Image.Image) -> float | None:
    """The dpi a PDF page was rendered at (None: an image file, whose dpi tag may not hold)."""
    dpi = image.info.get(DPI_KEY)
    return float(dpi) if isinstance(dpi, (int, float)) and dpi > 0 else None


def text_layer_of(image: Image.Image | None) -> TextLayer | None:
    """The text layer carried by `image`, if it has one (a rendered PDF page with text)."""
    if image is None:
        return None
    layer = image.info.get(INFO_KEY)
    return layer if isinstance(layer, TextLayer) else None
