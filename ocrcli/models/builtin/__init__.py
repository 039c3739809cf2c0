"""The built-in model: a small line reader trained by `scripts/train_builtin.py`, shipped in
this folder as `model.safetensors`, `config.json` and `tokenizer.json`."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

from ocrcli.errors import ModelLoadError, one_line
from ocrcli.models.base import DecodeRequest, GuardConfig, LoadedModel
from ocrcli.models.builtin.layout import (
    REREAD_BELOW,
    LineBox,
    assemble_markdown,
    line_tensor_array,
    split_wide,
    taller_crops,
)
from ocrcli.models.builtin.page_layout import (
    LAYOUT_DPI,
    PageLayout,
    analyse_page,
    fine_page,
    scale_box,
)
from ocrcli.models.builtin.tokenizer import BOS_ID, CharTokenizer
from ocrcli.models.identity import BUILTIN_DIR, builtin_fingerprint
from ocrcli.models.identity import BUILTIN_MAX_NEW_TOKENS as MAX_LINE_TOKENS
from ocrcli.text_layer import TextLayer, rendered_dpi, text_layer_of

if TYPE_CHECKING:  # torch loads with the model (`load`), not where pages are only prepared
    import torch

    from ocrcli.models.builtin.model import BuiltinConfig


@dataclass
class LinePlace:
    index: int  # position of this line among the page's boxes
    boxes: list[LineBox]  # every box of the page, rules included


@dataclass
class LinePageAdapter:
    """One request per line piece (a whole line unless it is wider than `piece_width`); the
    page's Markdown is assembled from the line texts, pieces joined by `join_pieces`."""

    piece_width: int = 0
    tokenizer: CharTokenizer | None = None  # for the pieces' draft text (None: no drafts)
    reread_below: float = REREAD_BELOW  # a piece read less surely is read again (layout.taller_crops)
    prepares_in_worker = True  # stateless numpy/PIL work: the render workers can do it

    def page_requests(self, image: Image.Image, max_new_tokens: int,
                      text_layer: TextLayer | None = None) -> list[DecodeRequest]:
        layout, gray, read = lay_out(image)
        boxes = layout.boxes
        cap = min(max_new_tokens, MAX_LINE_TOKENS)
        layer = text_layer if text_layer is not None else text_layer_of(image)
        if layout.turns:  # the layer's boxes are those of the page as it came, not turned
            layer = None
        return [DecodeRequest(None, [BOS_ID], line_tensor_array(gray, piece), cap,
                              meta=LinePlace(i, boxes), draft_text=self.draft_text(layer, piece),
                              alternates=tuple(line_tensor_array(gray, b)
                                               for b in taller_crops(piece, gray.height)),
                              reread_below=self.reread_below)
                for i, box in enumerate(read) if box.readable
                for piece in split_wide(gray, box, self.piece_width)]

    def draft_text(self, layer: TextLayer | None, piece: LineBox) -> list[int] | None:
        """The text layer's characters inside the piece's box, as the reader's tokens. A
        character the reader has no token for is written as its compatibility form where the
        reader has those (the ligature U+FB01 as "fi")."""
        if layer is None or self.tokenizer is None:
            return None
        text = layer.text_in((piece.x0, piece.y0, piece.x1, piece.y1))
        return self.tokenizer.encode("".join(_readable(c, self.tokenizer.chars) for c in text))

    def assemble(self, requests: list[DecodeRequest], texts: list[str]) -> str:
        if not requests:
            return ""
        boxes = requests[0].meta.boxes
        by_index: dict[int, list[str]] = {}
        for r, t in zip(requests, texts):  # requests keep page order: pieces left to right
            by_index.setdefault(r.meta.index, []).append(t)
        lines = [join_pieces([p for p in by_index.get(i, []) if p]) for i in range(len(boxes))]
        # The reader writes two spaces for the wide gaps of justified text (code in training
        # has them); only a shaded line, code, keeps its spacing.
        return assemble_markdown(boxes, [t if b.shaded else " ".join(t.split())
                                         for b, t in zip(boxes, lines)])


def join_pieces(texts: list[str]) -> str:
    """A line's piece texts, left to right, joined with a space, except where a run of one
    symbol (`*****`, dot leaders) goes on across the cut: the layout cut it between two of
    its glyphs, not at a word space."""
    out = texts[0] if texts else ""
    for text in texts[1:]:
        run = out[-2:]
        goes_on = len(run) == 2 and run[0] == run[1] and not run[0].isalnum() \
            and not run[0].isspace() and text.startswith(run)
        out += text if goes_on else " " + text
    return out


def lay_out(image: Image.Image) -> tuple[PageLayout, Image.Image, list[LineBox]]:
    """The page's layout (upright, rules and pictures painted out, lines in reading order),
    the upright page to cut lines from, and the layout's line boxes on that page. A page
    rendered finer than the layout needs is laid out on a reduced copy and its lines are cut
    from the page itself: more detail for the reader, the same layout."""
    dpi = rendered_dpi(image) or LAYOUT_DPI
    if dpi <= LAYOUT_DPI * 1.2:
        layout = analyse_page(image)
        return layout, layout.image, layout.boxes
    gray = image.convert("L")  # once: the layout, the fine page and the line crops read grey
    coarse = gray.resize((max(1, round(image.width * LAYOUT_DPI / dpi)),
                          max(1, round(image.height * LAYOUT_DPI / dpi))), Image.BOX)
    layout = analyse_page(coarse)
    fine = fine_page(gray, coarse, layout)
    fx, fy = fine.width / layout.image.width, fine.height / layout.image.height
    return layout, fine, [scale_box(b, fx, fy, fine.size) for b in layout.boxes]


def _readable(char: str, known: str) -> str:
    """`char`, or its compatibility form where only that is in the reader's alphabet."""
    if char in known:
        return char
    form = unicodedata.normalize("NFKC", char)
    return form if all(c in known for c in form) else char


def _read_config(path: Path) -> BuiltinConfig:
    """The model's config.json, checked before a model is built from it: a file that is not
    this model's config is the folder's problem (ModelLoadError), while an error raised from
    building a model out of a valid config is ocrcli's own."""
    from ocrcli.models.builtin.model import BuiltinConfig

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # not JSON, or not UTF-8
        raise ModelLoadError(f"{path} is not JSON ({one_line(exc)})") from None
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} is not a JSON object")
    for name, f in BuiltinConfig.__dataclass_fields__.items():
        value = data.get(name, f.default)
        if not (value is None and f.default is None) and (
                type(value) is not int or value < 0):
            raise ModelLoadError(f"{path}: {name} is {value!r}, not a whole number")
    return BuiltinConfig.from_dict(data)


def load(folder: Path = BUILTIN_DIR, device: str = "cpu", dtype: torch.dtype | None = None,
         model_id: str = "builtin") -> LoadedModel:
    """The model in `folder` on `device`, in `dtype` (None: float32)."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from ocrcli.models.builtin.model import BuiltinOCR

    dtype = torch.float32 if dtype is None else dtype
    weights = folder / "model.safetensors"
    for need in (folder / "config.json", folder / "tokenizer.json", weights):
        if not need.exists():
            raise ModelLoadError(f"model folder {folder} has no {need.name}")
    cfg = _read_config(folder / "config.json")
    try:
        tokenizer = CharTokenizer.load(folder / "tokenizer.json")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # not JSON, or not ours
        raise ModelLoadError(f"{folder / 'tokenizer.json'} is not the built-in model's tokenizer "
                             f"({type(exc).__name__}: {one_line(exc)})") from None
    model = BuiltinOCR(cfg)
    try:
        state = load_file(str(weights))
    except SafetensorError as exc:  # junk, a truncated download, or not safetensors at all
        raise ModelLoadError(f"{weights} is not a readable safetensors file ({one_line(exc)})") from None
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a shape mismatch
        detail = next((ln.strip() for ln in str(exc).splitlines() if "size mismatch" in ln), str(exc))
        raise ModelLoadError(f"{weights}: {detail}") from None
    if missing or unexpected:
        problem = f"missing tensor {missing[0]}" if missing else f"unexpected tensor {unexpected[0]}"
        raise ModelLoadError(f"{weights}: {problem}")
    model = model.to(device=device, dtype=dtype).eval()
    return LoadedModel(
        model_id=model_id,
        weights_hash=builtin_fingerprint(folder),
        model=model,
        tokenizer=tokenizer,
        adapter=LinePageAdapter(cfg.piece_width, tokenizer),
        guard=GuardConfig(ngram=0, loop_period_max=8, loop_repeats=12, loop_min_span=32),
    )
