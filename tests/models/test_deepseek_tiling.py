"""When DeepSeek-OCR's crop modes tile a page: a side over 640 pixels, whatever the tile size.

The official code (DeepSeek-OCR-vllm process/image_process.py, tokenize_with_images, and
deepseek_ocr.py, get_num_image_tokens; the HF reference's `infer`) tiles when either side
exceeds a fixed 640, so gundam-m (tile 1024) tiles pages of 641..1024 pixels as well.
"""

from __future__ import annotations

import pytest
from PIL import Image

from ocrcli.models.deepseek_ocr.adapter import DeepseekOcrPageAdapter
from ocrcli.models.deepseek_ocr.config import DEEPSEEK_OCR, full_config
from ocrcli.models.deepseek_ocr.preprocess import (
    MAX_TILES,
    MODES,
    TILE_THRESHOLD,
    needs_tiles,
    placeholder_count,
    preprocess_page,
)
from ocrcli.models.deepseek_ocr.vision import compressed_side


def _page(width: int, height: int) -> Image.Image:
    return Image.new("RGB", (width, height), (255, 255, 255))


def test_gundam_m_tiles_a_1000_pixel_page_as_the_official_code_counts():
    visual = preprocess_page(_page(1000, 1000), MODES["gundam-m"])
    assert visual.tiles is not None
    # Square page, max 9 tiles: (2,2) and (3,3) tie; 1000^2 <= 0.5 * 1024^2 * 9, so (2,2).
    assert visual.tiles_across_down == (2, 2)
    assert visual.tiles.shape == (4, 3, 1024, 1024)
    assert visual.global_view.shape == (3, 1280, 1280)
    # By hand: the global view is 1280 // 16 = 80 patches, 20 after two stride-2 convs
    # (= ceil(80 / 4), the official num_queries_base): 20 * (20 + 1) + 1 = 421 with its
    # newlines and separator. A 1024 tile gives 16 a side: (2 * 16) * (2 * 16 + 1) = 1056.
    q, t = compressed_side(1280, 16), compressed_side(1024, 16)
    assert (q, t) == (20, 16)
    assert q * (q + 1) + 1 + (2 * t) * (2 * t + 1) == 1477
    assert placeholder_count(visual) == 1477


@pytest.mark.parametrize("mode", ["gundam", "gundam-m"])
def test_a_side_just_over_640_tiles_in_every_crop_mode(mode):
    visual = preprocess_page(_page(641, 500), MODES[mode])
    assert visual.tiles is not None and visual.num_tiles >= 2
    assert visual.tiles.shape[-1] == MODES[mode].image_size
    assert visual.global_view.shape[-1] == MODES[mode].base_size


@pytest.mark.parametrize("mode", ["gundam", "gundam-m"])
@pytest.mark.parametrize("size", [(640, 640), (640, 300), (200, 640)])
def test_pages_within_640_get_no_tiles(mode, size):
    visual = preprocess_page(_page(*size), MODES[mode])
    assert visual.tiles is None and visual.tiles_across_down == (1, 1)
    q = compressed_side(MODES[mode].base_size, 16)
    assert placeholder_count(visual) == q * (q + 1) + 1


def test_the_threshold_scales_with_tiny_models():
    assert TILE_THRESHOLD == 640
    assert needs_tiles(81, 50, scale=0.125) and not needs_tiles(80, 80, scale=0.125)
    # gundam-m at 1/8: tiles of 128, threshold 80, so a 100x60 page is tiled.
    visual = preprocess_page(_page(100, 60), MODES["gundam-m"], scale=0.125)
    assert visual.tiles is not None and visual.tiles.shape[-1] == 128
    small = preprocess_page(_page(80, 80), MODES["gundam-m"], scale=0.125)
    assert small.tiles is None


def test_adapter_passes_max_tiles_and_bounds_the_prompt():
    config = full_config(DEEPSEEK_OCR)
    default = DeepseekOcrPageAdapter(None, config, mode=MODES["gundam-m"])
    six = DeepseekOcrPageAdapter(None, config, mode=MODES["gundam-m"], max_tiles=6)
    assert default.max_tiles == MAX_TILES == 9
    pages = [_page(9 * 80, 80), _page(80, 9 * 80), _page(1000, 1000), _page(641, 500)]
    for adapter, most in ((default, 9), (six, 6)):
        visuals = [adapter.preprocess(page) for page in pages]
        # Aspect 9:1 (either way) takes the longest grid the cap allows.
        assert visuals[0].tiles_across_down == (most, 1)
        assert visuals[1].tiles_across_down == (1, most)
        # The cache bound holds for every page, the most tiles included.
        for visual in visuals:
            assert placeholder_count(visual) + 64 <= adapter.max_prompt_tokens
