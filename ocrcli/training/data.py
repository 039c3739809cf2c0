"""Line samples for the built-in model, cut from synthetic pages by the model's own layout step.

Crops come from `segment_lines`, the function that reads real pages, so training and inference
see the same geometry: a page typeset at twice its size is segmented on a copy reduced to its
size and its crops are cut from the full pixels, as the converter reads a finer render. Pages
whose segmentation does not match the typeset lines one to one are skipped rather than guessed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from ocrcli.models.builtin.layout import PIECE_WIDTH, LineBox, line_tensor_array, segment_lines, split_wide
from ocrcli.models.builtin.page_layout import scale_box
from ocrcli.models.builtin.tokenizer import BOS_ID, DEFAULT_CHARS, EOS_ID, PAD_ID, CharTokenizer
from ocrcli.training.synth import SynthPage, TypesetLine, make_page
from ocrcli.training.text import TextSources

MAX_CHARS = 120


@dataclass
class LineSample:
    image: np.ndarray  # [32, W] float32, ink = 1
    text: str


def piece_texts(line: TypesetLine, pieces: list[LineBox]) -> list[str] | None:
    """The texts of a line's pieces: each cut must fall on one of the line's typeset spaces
    (dropped) or joints inside a run of one symbol (kept whole), and no piece may start or
    end with a space (the reader cannot see it)."""
    cuts = []  # (end of the left piece, start of the right one)
    for left in pieces[:-1]:
        cut = left.x1 + 0.5
        hit = [(i, i + 1) for i, x0, x1 in line.spaces if x0 - 1 <= cut <= x1 + 1]
        hit = hit or [(i, i) for i, x0, x1 in line.joints if x0 <= cut < x1]
        if len(hit) != 1:
            return None
        cuts.append(hit[0])
    ends = [end for end, _ in cuts] + [len(line.text)]
    starts = [0] + [start for _, start in cuts]
    texts = [line.text[a:b] for a, b in zip(starts, ends)]
    if any(not t or t != t.strip(" ") for t in texts):
        return None
    return texts


def coarse_copy(page: SynthPage) -> Image.Image:
    """The page at its own size: reduced, where it was typeset larger."""
    if page.scale == 1:
        return page.image
    w, h = page.image.size
    return page.image.resize((w // page.scale, h // page.scale), Image.BOX)


def page_lines(page: SynthPage, piece_width: int = PIECE_WIDTH) -> list[LineSample] | None:
    """Crops of a page (line pieces, as the reader gets them) paired with their texts, or
    None when segmentation disagrees. A line whose cuts miss its spaces is left out."""
    boxes = [b for b in segment_lines(coarse_copy(page)) if not b.rule]
    if page.scale > 1:
        boxes = [scale_box(b, page.scale, page.scale, page.image.size) for b in boxes]
    if len(boxes) != len(page.lines):
        return None
    out = []
    for box, line in zip(boxes, page.lines):
        # A crop must hold the line it is paired with: its typeset box centre lies inside.
        cy = (line.box[1] + line.box[3]) / 2
        if not box.y0 <= cy <= box.y1 or len(line.text) > MAX_CHARS:
            return None
        pieces = split_wide(page.image, box, piece_width)
        texts = [line.text] if len(pieces) == 1 else piece_texts(line, pieces)
        for piece, text in zip(pieces, texts or []):
            out.append(LineSample(line_tensor_array(page.image, piece), text))
    return out


def collate(samples: list[LineSample], tok: CharTokenizer) -> dict[str, torch.Tensor]:
    """images [B,1,32,W], widths [B], tokens [B,T] = BOS+text, targets [B,T] = text+EOS,
    ctc_targets [B,L] (PAD-filled), ctc_lengths [B]."""
    width = max(s.image.shape[1] for s in samples)
    images = torch.zeros(len(samples), 1, 32, width)
    ids = [tok.encode(s.text) for s in samples]
    t = max(len(i) for i in ids) + 1
    tokens = torch.full((len(samples), t), PAD_ID)
    targets = torch.full((len(samples), t), -100)
    ctc = torch.full((len(samples), t), PAD_ID)
    for b, (s, seq) in enumerate(zip(samples, ids)):
        images[b, 0, :, : s.image.shape[1]] = torch.from_numpy(s.image)
        tokens[b, : len(seq) + 1] = torch.tensor([BOS_ID] + seq)
        targets[b, : len(seq) + 1] = torch.tensor(seq + [EOS_ID])
        ctc[b, : len(seq)] = torch.tensor(seq)
    return {
        "images": images,
        "widths": torch.tensor([s.image.shape[1] for s in samples]),
        "tokens": tokens,
        "targets": targets,
        "ctc_targets": ctc,
        "ctc_lengths": torch.tensor([len(i) for i in ids]),
    }


class LineBatches(torch.utils.data.IterableDataset):
    """Endless width-bucketed batches of line crops, deterministic by (seed, start)."""

    def __init__(self, seed: int, start: int, batch_size: int, split: str = "train",
                 heldout_fonts: bool = False, sizes: tuple[int, int] = (16, 32), pool: int = 16,
                 piece_width: int = PIECE_WIDTH, scan: float = 0.0, rows: float = 0.0,
                 light: float = 0.0, geometric: float = 0.0, spaces: float = 0.0,
                 fine: float = 0.0, hand: float = 0.0):
        self.seed, self.start, self.batch_size = seed, start, batch_size
        self.scan = scan  # share of pages with heavier scanner damage (`synth.scan_degrade`)
        self.rows = rows  # chance of a symbol row before each block (`synth.make_page`)
        self.light = light  # share of pages whose sans face is a light weight
        self.geometric = geometric  # share of pages set in geometric (Futura-like) sans faces
        self.spaces = spaces  # share of pages with justified or tight word spaces
        self.fine = fine  # share of pages typeset at twice their size (read as 288 dpi renders)
        self.hand = hand  # share of pages set in handwriting faces, in pen ink, on ruled paper
        self.piece_width = piece_width
        self.split, self.heldout_fonts, self.sizes, self.pool = split, heldout_fonts, sizes, pool

    def samples(self) -> Iterator[LineSample]:
        sources = TextSources.load(self.split)
        page = self.start
        while True:
            lines = page_lines(make_page(self.seed * 10_000_000 + page, sources,
                                         self.heldout_fonts, self.sizes, scan=self.scan,
                                         rows=self.rows, light=self.light,
                                         geometric=self.geometric, spaces=self.spaces,
                                         fine=self.fine, hand=self.hand),
                               self.piece_width)
            page += 1
            if lines:
                yield from lines

    def __iter__(self):
        tok = CharTokenizer(DEFAULT_CHARS)
        rng = random.Random(self.seed + self.start)
        it = self.samples()
        while True:
            buf = [next(it) for _ in range(self.batch_size * self.pool)]
            rng.shuffle(buf)  # pages come in order; mix lines of many pages before bucketing
            buf.sort(key=lambda s: s.image.shape[1])
            batches = [buf[i : i + self.batch_size] for i in range(0, len(buf), self.batch_size)]
            rng.shuffle(batches)
            for b in batches:
                yield collate(b, tok)


def validation_lines(n: int, seed: int, split: str = "test", heldout_fonts: bool = False,
                     sizes: tuple[int, int] = (16, 32), piece_width: int = PIECE_WIDTH
                     ) -> list[LineSample]:
    """A fixed set of held-out lines: text split 'test', pages seeded apart from training."""
    sources = TextSources.load(split)
    out: list[LineSample] = []
    page = 0
    while len(out) < n:
        lines = page_lines(make_page(900_000_000 + seed * 1000 + page, sources, heldout_fonts, sizes),
                           piece_width)
        page += 1
        if lines:
            out.extend(lines)
    return out[:n]
