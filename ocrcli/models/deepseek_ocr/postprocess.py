"""DeepSeek-OCR output -> clean Markdown, and the grounding boxes it carries.

Grounded output interleaves `<|ref|>LABEL<|/ref|><|det|>[[x1, y1, x2, y2], ...]<|/det|>` with
each block's content; coordinates are 0..999 of the page. The official script parses the
boxes with `eval`; here they are matched by a strict grammar (lists of four integers) and
anything else is treated as no box. Text is never evaluated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GROUNDING_BLOCK = re.compile(r"<\|ref\|>(.*?)<\|/ref\|><\|det\|>(.*?)<\|/det\|>", re.DOTALL)
_BOX = r"\[\s*\d{1,4}\s*,\s*\d{1,4}\s*,\s*\d{1,4}\s*,\s*\d{1,4}\s*\]"
BOX_LIST = re.compile(rf"\s*\[\s*{_BOX}(?:\s*,\s*{_BOX})*\s*\]\s*")
INT = re.compile(r"\d+")
STRAY_TAGS = re.compile(r"<\|/?(?:ref|det)\|>|<\|grounding\|>")
EXTRA_NEWLINES = re.compile(r"\n{3,4}")
COORD_MAX = 999


@dataclass(frozen=True)
class GroundedBlock:
    label: str
    boxes: tuple[tuple[int, int, int, int], ...]  # 0..999 page coordinates; () if malformed
    start: int  # the tag pair's span in the raw text
    end: int


def parse_boxes(text: str) -> tuple[tuple[int, int, int, int], ...]:
    """'[[x1, y1, x2, y2], ...]' -> boxes clamped to 0..999; () unless the whole text fits."""
    if not BOX_LIST.fullmatch(text):
        return ()
    values = [min(int(v), COORD_MAX) for v in INT.findall(text)]
    return tuple(tuple(values[i : i + 4]) for i in range(0, len(values), 4))  # type: ignore[misc]


def parse_grounding(text: str) -> list[GroundedBlock]:
    return [
        GroundedBlock(m.group(1).strip(), parse_boxes(m.group(2)), m.start(), m.end())
        for m in GROUNDING_BLOCK.finditer(text)
    ]


def box_to_pixels(
    box: tuple[int, int, int, int], width: int, height: int
) -> tuple[int, int, int, int]:
    x1, y1, x2, y2 = box
    return (
        int(x1 / COORD_MAX * width),
        int(y1 / COORD_MAX * height),
        int(x2 / COORD_MAX * width),
        int(y2 / COORD_MAX * height),
    )


def clean_markdown(text: str, figure_format: str = "<!-- figure {box} -->") -> str:
    """The official clean-up: image blocks become a figure marker (the official script saves a
    crop and links it; we have no page pixels here, so `figure_format` gets the box), other
    tag pairs are removed with their content kept, stray tags (a truncated output) go too,
    `\\coloneqq` -> `:=`, `\\eqqcolon` -> `=:`, and 3-4 newlines collapse to 2."""
    out, last = [], 0
    for block in parse_grounding(text):
        out.append(text[last : block.start])
        if block.label == "image":
            box = list(block.boxes[0]) if block.boxes else []
            out.append(figure_format.format(box=box) + "\n")
        last = block.end
    out.append(text[last:])
    cleaned = STRAY_TAGS.sub("", "".join(out))
    cleaned = cleaned.replace("\\coloneqq", ":=").replace("\\eqqcolon", "=:")
    return EXTRA_NEWLINES.sub("\n\n", cleaned).strip()
