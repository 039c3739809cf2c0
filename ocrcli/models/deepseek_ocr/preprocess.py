"""Page image -> the pixel views DeepSeek-OCR reads, and how many <image> slots they fill.

Official behaviour (DeepSeek-OCR-vllm's `process/image_process.py`,
`DeepseekOCRProcessor.tokenize_with_images`, and the HF repo's `modeling_deepseekocr.py`,
`infer` and `dynamic_preprocess`): RGB after the EXIF transpose; x/255 then
Normalize(0.5, 0.5). Crop modes always make a global view padded (grey 127, aspect kept,
bicubic, centred) to the base size; a page with a side over 640 pixels (TILE_THRESHOLD,
whatever the mode's tile size) is also cut into 2..max_tiles tiles (9 by default) of the
tile size on the grid whose aspect ratio is closest to the page's. Non-crop modes stretch
small sizes (<= 640) and pad larger ones.

A scaled-down model (tiny tests) scales every size by `scale` (sam.image_size / 1024),
the two 640-pixel thresholds included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image, ImageOps

from .vision import compressed_side

PAD_GREY = (127, 127, 127)  # int(0.5 * 255) per channel, as the official code computes it
STRETCH_MAX = 640  # non-crop modes up to this size stretch; larger ones pad
# Crop modes tile a page only when a side exceeds this, in every crop mode: the threshold is
# a fixed 640, not the mode's tile size (DeepSeek-OCR-vllm: process/image_process.py,
# DeepseekOCRProcessor.tokenize_with_images; deepseek_ocr.py,
# DeepseekOCRProcessingInfo.get_num_image_tokens; the HF reference: modeling_deepseekocr.py,
# the model's `infer`). In gundam-m (tile 1024) a page of 641..1024 pixels therefore gets
# 1024-pixel tiles, upscaled.
TILE_THRESHOLD = 640
# Largest tile count by default: the HF reference calls dynamic_preprocess with its default
# max_num=9 (modeling_deepseekocr.py); the vLLM scripts pass MAX_CROPS = 6 from config.py
# (its comment: "max:9", 6 for small GPUs). Callers choose with `max_tiles`.
MAX_TILES = 9
MIN_TILES = 2


@dataclass(frozen=True)
class ImageMode:
    name: str
    base_size: int  # the global view's side
    image_size: int  # the tile side (crop modes) or the only view's side
    crop: bool

    def scaled(self, scale: float) -> ImageMode:
        if scale == 1.0:
            return self
        return ImageMode(
            self.name, round(self.base_size * scale), round(self.image_size * scale), self.crop
        )


MODES = {
    "tiny": ImageMode("tiny", 512, 512, False),
    "small": ImageMode("small", 640, 640, False),
    "base": ImageMode("base", 1024, 1024, False),
    "large": ImageMode("large", 1280, 1280, False),
    "gundam": ImageMode("gundam", 1024, 640, True),  # the default of both models
    # In the paper and third-party ports only, not in the official code: unconfirmed.
    "gundam-m": ImageMode("gundam-m", 1280, 1024, True),
}


@dataclass
class PageVisual:
    """What prefill encodes for one page (float32 pixels in [-1, 1])."""

    global_view: torch.Tensor  # [3,S,S]
    tiles: torch.Tensor | None  # [n,3,s,s] row-major, or None without tiling
    tiles_across_down: tuple[int, int]  # (1,1) without tiling

    @property
    def num_tiles(self) -> int:
        return 0 if self.tiles is None else self.tiles.shape[0]


def to_rgb(image: Image.Image) -> Image.Image:
    """Apply the EXIF orientation, then convert to RGB (the HF reference path does both)."""
    return ImageOps.exif_transpose(image).convert("RGB")


def to_tensor(image: Image.Image) -> torch.Tensor:
    """RGB image -> [3,H,W] float32: x/255, then (x - 0.5) / 0.5."""
    array = np.asarray(image, dtype=np.float32) / 255.0
    return torch.from_numpy((array - 0.5) / 0.5).permute(2, 0, 1).contiguous()


def candidate_grids(min_tiles: int = MIN_TILES, max_tiles: int = MAX_TILES) -> list[tuple[int, int]]:
    """All (across, down) grids with min <= across*down <= max, ordered by tile count.

    Built as a set and stably sorted by the product, as the reference does, so that grids
    with equal products come in the same (CPython set) order and ties resolve identically.
    """
    grids = {
        (i, j)
        for n in range(min_tiles, max_tiles + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if min_tiles <= i * j <= max_tiles
    }
    return sorted(grids, key=lambda g: g[0] * g[1])


def choose_grid(
    width: int,
    height: int,
    tile_size: int,
    min_tiles: int = MIN_TILES,
    max_tiles: int = MAX_TILES,
) -> tuple[int, int]:
    """The (across, down) grid whose ratio is closest to width/height. On a tie, the later
    (larger) grid wins if the page has more than half the pixels that grid's tiles hold."""
    aspect = width / height
    best, best_diff = (1, 1), float("inf")
    for across, down in candidate_grids(min_tiles, max_tiles):
        diff = abs(aspect - across / down)
        if diff < best_diff:
            best, best_diff = (across, down), diff
        elif diff == best_diff and width * height > 0.5 * tile_size * tile_size * across * down:
            best = (across, down)
    return best


def cut_tiles(image: Image.Image, grid: tuple[int, int], tile_size: int) -> list[Image.Image]:
    """Resize to the grid (aspect distorted, PIL's default resampling), cut row-major."""
    across, down = grid
    resized = image.resize((across * tile_size, down * tile_size))
    return [
        resized.crop((c * tile_size, r * tile_size, (c + 1) * tile_size, (r + 1) * tile_size))
        for r in range(down)
        for c in range(across)
    ]


def needs_tiles(width: int, height: int, scale: float = 1.0) -> bool:
    """Whether a crop mode tiles a page of this size: a side over TILE_THRESHOLD (scaled)."""
    threshold = round(TILE_THRESHOLD * scale)
    return width > threshold or height > threshold


def preprocess_page(
    image: Image.Image, mode: ImageMode, scale: float = 1.0, max_tiles: int = MAX_TILES
) -> PageVisual:
    mode = mode.scaled(scale)
    image = to_rgb(image)
    if not mode.crop:
        side = mode.image_size
        if side <= round(STRETCH_MAX * scale):
            view = image.resize((side, side))
        else:
            view = ImageOps.pad(image, (side, side), color=PAD_GREY)
        return PageVisual(to_tensor(view), None, (1, 1))

    global_view = ImageOps.pad(image, (mode.base_size, mode.base_size), color=PAD_GREY)
    tiles = None
    grid = (1, 1)
    width, height = image.size
    if needs_tiles(width, height, scale):
        grid = choose_grid(width, height, mode.image_size, max_tiles=max_tiles)
        tiles = torch.stack([to_tensor(t) for t in cut_tiles(image, grid, mode.image_size)])
    return PageVisual(to_tensor(global_view), tiles, grid)


def placeholder_count(visual: PageVisual, patch_size: int = 16) -> int:
    """<image> slots for a page: q*(q+1) + 1 for the global view with its newlines and the
    separator, plus (down*t) * (across*t + 1) for the tiles with theirs."""
    q = compressed_side(visual.global_view.shape[-1], patch_size)
    count = q * (q + 1) + 1
    if visual.tiles is not None:
        t = compressed_side(visual.tiles.shape[-1], patch_size)
        across, down = visual.tiles_across_down
        count += (down * t) * (across * t + 1)
    return count
