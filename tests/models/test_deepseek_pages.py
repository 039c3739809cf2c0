"""Page preprocessing, prompts, post-processing and guard defaults (no model weights)."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import pytest
import torch
from PIL import Image

from ocrcli.models.deepseek_ocr.adapter import (
    DeepseekOcrPageAdapter,
    build_prompt_ids,
    default_guard,
    prompt_template,
)
from ocrcli.models.deepseek_ocr.config import DEEPSEEK_OCR, JINA_OCR_V1, full_config
from ocrcli.models.deepseek_ocr.postprocess import (
    box_to_pixels,
    clean_markdown,
    parse_boxes,
    parse_grounding,
)
from ocrcli.models.deepseek_ocr.preprocess import (
    MODES,
    PageVisual,
    candidate_grids,
    choose_grid,
    placeholder_count,
    preprocess_page,
    to_rgb,
)
from ocrcli.models.deepseek_ocr.tokenizer import SPECIAL_TOKENS, OcrTokenizer

ROOT = Path(__file__).resolve().parents[2]
GREY = (127 / 255 - 0.5) / 0.5


def _visual(base: int, tile: int | None = None, grid: tuple[int, int] = (1, 1)) -> PageVisual:
    tiles = None
    if tile is not None:
        tiles = torch.zeros(grid[0] * grid[1], 3, tile, tile)
    return PageVisual(torch.zeros(3, base, base), tiles, grid)


@pytest.mark.parametrize(
    "visual, expected",
    [
        (_visual(512), 73),  # Tiny
        (_visual(640), 111),  # Small
        (_visual(1024), 273),  # Base
        (_visual(1280), 421),  # Large
        (_visual(1024, 640, (2, 3)), 903),  # Gundam, 2 wide x 3 high
        (_visual(1024, 640, (3, 3)), 1203),  # Gundam, 3 x 3
    ],
)
def test_placeholder_counts_match_the_fact_sheet(visual, expected):
    assert placeholder_count(visual) == expected


def test_candidate_grids():
    grids = candidate_grids()
    products = [a * d for a, d in grids]
    assert products == sorted(products) and min(products) == 2 and max(products) == 9
    # (across, down) pairs per tile count 2..9: 2, 2, 3, 2, 4, 2, 4, 3
    assert len(grids) == len(set(grids)) == 22
    assert len(candidate_grids(max_tiles=6)) == 13


@pytest.mark.parametrize(
    "size, expected",
    [
        ((1280, 1920), (2, 3)),  # portrait 2:3
        ((1920, 640), (3, 1)),  # wide 3:1
        ((1000, 1000), (2, 2)),  # square: the smaller grid, the page is small
        ((2000, 2000), (3, 3)),  # square tie: the larger grid wins (area > 0.5 * 640^2 * 9)
        ((1240, 1754), (2, 3)),  # A4 at 150 dpi
    ],
)
def test_choose_grid(size, expected):
    assert choose_grid(*size, tile_size=640) == expected


def test_gundam_tiles_and_global_view():
    page = Image.new("RGB", (1300, 1950), (255, 255, 255))
    visual = preprocess_page(page, MODES["gundam"])
    assert visual.tiles_across_down == (2, 3)
    assert visual.tiles.shape == (6, 3, 640, 640)
    assert visual.global_view.shape == (3, 1024, 1024)
    # Aspect kept and centred: grey margins left and right, white page in the middle.
    assert torch.allclose(visual.global_view[:, :, :5], torch.full((3, 1024, 5), GREY))
    assert torch.allclose(visual.global_view[:, 500, 500], torch.ones(3))
    assert torch.allclose(visual.tiles, torch.ones_like(visual.tiles))
    assert placeholder_count(visual) == 903


def test_small_page_gets_no_tiles():
    visual = preprocess_page(Image.new("RGB", (640, 500), (0, 0, 0)), MODES["gundam"])
    assert visual.tiles is None and visual.tiles_across_down == (1, 1)
    assert visual.global_view.shape == (3, 1024, 1024)
    assert visual.global_view.min() == -1.0  # black is -1 after Normalize(0.5, 0.5)


def test_non_crop_modes_stretch_small_and_pad_large():
    page = Image.new("RGB", (300, 100), (255, 255, 255))
    small = preprocess_page(page, MODES["small"])
    assert small.global_view.shape == (3, 640, 640)
    assert torch.allclose(small.global_view, torch.ones_like(small.global_view))  # stretched
    base = preprocess_page(page, MODES["base"])
    assert base.global_view.shape == (3, 1024, 1024)
    assert torch.allclose(base.global_view[:, 0, 0], torch.full((3,), GREY))  # padded


def test_scaled_modes_for_tiny_models():
    page = Image.new("RGB", (200, 300), (255, 255, 255))
    visual = preprocess_page(page, MODES["gundam"], scale=0.125)
    assert visual.global_view.shape == (3, 128, 128)
    assert visual.tiles.shape[-1] == 80 and visual.tiles_across_down == (2, 3)


def test_exif_orientation_and_rgb():
    image = Image.new("L", (40, 20), 200)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", exif=exif)
    loaded = Image.open(io.BytesIO(buffer.getvalue()))
    assert loaded.size == (40, 20)
    rgb = to_rgb(loaded)
    assert rgb.size == (20, 40) and rgb.mode == "RGB"


# ------------------------------------------------------------------------------- prompts


@pytest.fixture(scope="module")
def tokenizer() -> OcrTokenizer:
    spec = importlib.util.spec_from_file_location(
        "make_tiny_checkpoint", ROOT / "scripts" / "make_tiny_checkpoint.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return OcrTokenizer(module.build_tokenizer(129280))


def test_tokenizer_special_ids(tokenizer):
    for token, token_id in SPECIAL_TOKENS.items():
        assert tokenizer.token_to_id(token) == token_id
    text = "<|ref|>title<|/ref|><|det|>[[1, 2, 3, 4]]<|/det|>\n# Héllo <td>x</td>"
    ids = tokenizer.encode(text)
    assert ids[0] == 128816 and 128821 in ids
    assert tokenizer.decode([0] + ids + [1, 2]) == text  # BOS/EOS/pad dropped, tags kept


def test_deepseek_prompt(tokenizer):
    adapter = DeepseekOcrPageAdapter(tokenizer, full_config(DEEPSEEK_OCR))
    page = Image.new("RGB", (1240, 1754), (255, 255, 255))
    (request,) = adapter.page_requests(page, max_new_tokens=100)
    ids = request.prompt_ids
    assert ids[0] == 0  # BOS
    assert ids[1:904] == [128815] * 903 and ids[904] != 128815  # image first, 2x3 tiles
    assert tokenizer.decode(ids[904:]) == "\n<|grounding|>Convert the document to markdown."
    assert 128820 in ids  # <|grounding|> is one token
    assert request.max_new_tokens == 100


def test_jina_prompt(tokenizer):
    adapter = DeepseekOcrPageAdapter(tokenizer, full_config(JINA_OCR_V1))
    (request,) = adapter.page_requests(Image.new("RGB", (500, 500), (255, 255, 255)), 10)
    ids = request.prompt_ids
    assert 0 not in ids  # no BOS
    assert ids[0] == 128825 and ids.count(128815) == 273
    text = tokenizer.decode([i for i in ids if i != 128815])
    assert text == (
        "<|User|>:\n\nTranscribe the provided document image into a clean Markdown format, "
        "preserving the natural reading order.\n<|Assistant|>:\n"
    )


def test_prompt_needs_exactly_one_image(tokenizer):
    with pytest.raises(ValueError):
        build_prompt_ids(tokenizer, "no image here", 3, True)
    with pytest.raises(ValueError):
        build_prompt_ids(tokenizer, "<image><image>", 3, True)
    assert prompt_template(DEEPSEEK_OCR, "Free OCR.") == ("<image>\nFree OCR.", True)


# ------------------------------------------------------------------------ post-processing


RAW = (
    "<|ref|>title<|/ref|><|det|>[[10, 20, 990, 60]]<|/det|>\n# A Title\n\n\n\n"
    "<|ref|>image<|/ref|><|det|>[[100, 200, 500, 600]]<|/det|>\n"
    "<|ref|>text<|/ref|><|det|>[[1,2,3,4], [5, 6, 7, 8]]<|/det|>\nLet $f \\coloneqq g$ and "
    "$h \\eqqcolon k$.\n\n\nEnd"
)


def test_parse_grounding():
    blocks = parse_grounding(RAW)
    assert [b.label for b in blocks] == ["title", "image", "text"]
    assert blocks[0].boxes == ((10, 20, 990, 60),)
    assert blocks[2].boxes == ((1, 2, 3, 4), (5, 6, 7, 8))
    assert box_to_pixels((0, 0, 999, 999), 1000, 2000) == (0, 0, 1000, 2000)


@pytest.mark.parametrize(
    "det",
    [
        "__import__('os').system('echo pwned')",
        "[[1, 2, 3]]",
        "[[1, 2, 3, 4]] + [[5, 6, 7, 8]]",
        "[1, 2, 3, 4]",
        "[[1.5, 2, 3, 4]]",
        "",
    ],
)
def test_boxes_are_parsed_strictly(det):
    assert parse_boxes(det) == ()


def test_boxes_are_clamped():
    assert parse_boxes(" [[0, 0, 1200, 999]] ") == ((0, 0, 999, 999),)


def test_clean_markdown():
    cleaned = clean_markdown(RAW)
    assert cleaned == (
        "# A Title\n\n<!-- figure [100, 200, 500, 600] -->\n\nLet $f := g$ and $h =: k$.\n\nEnd"
    )
    assert "<|" not in clean_markdown("truncated <|ref|>title<|/ref|><|det|>[[1, 2")


def test_guard_defaults():
    deepseek, jina = default_guard(DEEPSEEK_OCR), default_guard(JINA_OCR_V1)
    assert (deepseek.ngram, deepseek.window) == (20, 50)
    assert (jina.ngram, jina.window) == (35, 1024)
    assert deepseek.whitelist == jina.whitelist == frozenset({128821, 128822})
    assert (jina.loop_period_max, jina.loop_repeats) == (35, 10)
