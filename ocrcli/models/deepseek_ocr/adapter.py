"""Page <-> request adapter for DeepSeek-OCR and Jina-OCR-v1: one request per page.

Prompts (DeepSeek-OCR: the HF repo's `conversation.py` "plain" template and
`modeling_deepseekocr.py`; Jina-OCR-v1: the template of SGLang PR #40112 and the ports):
- DeepSeek-OCR, "plain" template: BOS 0, then the stripped prompt with the <image> slots
  spliced in: `<image>\\n<|grounding|>Convert the document to markdown.`
- Jina-OCR-v1, chat template built by hand (the checkpoint's jinja template is
  double-escaped): `<|User|>:\\n<image>\\n{instruction}\\n<|Assistant|>:\\n`, no BOS.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from PIL import Image

from ...text_layer import TextLayer, text_layer_of
from ..base import DecodeRequest, GuardConfig
from .config import DEEPSEEK_OCR, JINA_OCR_V1, DeepseekOcrConfig
from .postprocess import clean_markdown
from .preprocess import (
    MAX_TILES,
    MODES,
    ImageMode,
    PageVisual,
    compressed_side,
    placeholder_count,
    preprocess_page,
)
from .tokenizer import OcrTokenizer

IMAGE_MARKER = "<image>"
DEEPSEEK_DOCUMENT_INSTRUCTION = "<|grounding|>Convert the document to markdown."
JINA_DEFAULT_INSTRUCTION = (
    "Transcribe the provided document image into a clean Markdown format, "
    "preserving the natural reading order."
)
TABLE_CELL_TOKENS = frozenset({128821, 128822})  # <td>, </td>: tables repeat them legitimately


def default_instruction(arch: str) -> str:
    return DEEPSEEK_DOCUMENT_INSTRUCTION if arch == DEEPSEEK_OCR else JINA_DEFAULT_INSTRUCTION


def default_guard(arch: str) -> GuardConfig:
    """Repetition guard defaults (DeepSeek-OCR-vllm's `process/ngram_norepeat.py` and
    `run_dpsk_ocr_pdf.py`; Jina-OCR-v1's Transformers and vLLM recipes).

    DeepSeek-OCR: the official vLLM script's windowed ban (n=20, window 50, <td>/</td>
    whitelisted). Jina-OCR-v1: its Transformers path's ban (n=35, window 1024, same
    whitelist), plus loop detection from its vLLM recipe (pattern 35, 10 repeats).
    """
    if arch == JINA_OCR_V1:
        return GuardConfig(
            ngram=35, window=1024, whitelist=TABLE_CELL_TOKENS, loop_period_max=35, loop_repeats=10
        )
    return GuardConfig(ngram=20, window=50, whitelist=TABLE_CELL_TOKENS)


def prompt_template(arch: str, instruction: str) -> tuple[str, bool]:
    """-> (prompt text containing one <image> marker, whether BOS is prepended)."""
    if arch == JINA_OCR_V1:
        return f"<|User|>:\n{IMAGE_MARKER}\n{instruction}\n<|Assistant|>:\n", False
    return f"{IMAGE_MARKER}\n{instruction}".strip(), True


def build_prompt_ids(
    tokenizer: OcrTokenizer,
    prompt: str,
    num_image_slots: int,
    add_bos: bool,
    image_token_id: int = 128815,
    bos_id: int = 0,
) -> list[int]:
    """Tokenize the text on each side of the one <image> marker and splice the slots in."""
    before, marker, after = prompt.partition(IMAGE_MARKER)
    if not marker or IMAGE_MARKER in after:
        # Several images: only the last is read by Jina, and DeepSeek expects one.
        raise ValueError(f"the prompt must contain exactly one {IMAGE_MARKER}: {prompt!r}")
    ids = [bos_id] if add_bos else []
    ids += tokenizer.encode(before) + [image_token_id] * num_image_slots + tokenizer.encode(after)
    return ids


@dataclass
class DeepseekOcrPageAdapter:
    """PageAdapter: a page image -> one DecodeRequest; decoded text -> the page's Markdown."""

    tokenizer: OcrTokenizer
    config: DeepseekOcrConfig
    mode: ImageMode = field(default_factory=lambda: MODES["gundam"])
    instruction: str = ""  # empty: the model's default
    max_tiles: int = MAX_TILES  # the HF reference's 9; the official vLLM scripts use 6 (memory)
    figure_format: str = "<!-- figure {box} -->"

    def __post_init__(self) -> None:
        if not self.instruction:
            self.instruction = default_instruction(self.config.arch)

    @property
    def max_prompt_tokens(self) -> int:
        """An upper bound on a page's prompt length, for sizing the static caches: the global
        view with its newlines and separator, `max_tiles` tiles with theirs, and the text.

        Any page over TILE_THRESHOLD may be tiled in a crop mode, so the bound assumes the most
        tiles; a grid of across*down <= max_tiles tiles fills (down*t) * (across*t + 1) slots,
        at most max_tiles * (t*t + t)."""
        mode = self.mode.scaled(self.config.image_size_scale)
        patch = self.config.sam.patch_size
        q = compressed_side(mode.base_size if mode.crop else mode.image_size, patch)
        count = q * (q + 1) + 1
        if mode.crop:
            t = compressed_side(mode.image_size, patch)
            count += self.max_tiles * (t * t + t)
        return count + 64

    def preprocess(self, image: Image.Image) -> PageVisual:
        return preprocess_page(
            image, self.mode, scale=self.config.image_size_scale, max_tiles=self.max_tiles
        )

    def prompt_ids(self, visual: PageVisual) -> list[int]:
        prompt, add_bos = prompt_template(self.config.arch, self.instruction)
        slots = placeholder_count(visual, self.config.sam.patch_size)
        return build_prompt_ids(
            self.tokenizer, prompt, slots, add_bos, self.config.image_token_id, self.config.bos_id
        )

    def page_requests(self, image: Image.Image, max_new_tokens: int,
                      text_layer: TextLayer | None = None) -> list[DecodeRequest]:
        visual = self.preprocess(image)
        layer = text_layer if text_layer is not None else text_layer_of(image)
        return [DecodeRequest(None, self.prompt_ids(visual), visual, max_new_tokens,
                              draft_text=self.draft_text(layer, max_new_tokens))]

    def draft_text(self, layer: TextLayer | None, max_new_tokens: int) -> list[int] | None:
        """The page's text layer in reading order, as the model's tokens: encoded whole, so
        its tokens split words as the model's own output does. Kept to a few times the
        token cap: drafts past what the request may write are never verified."""
        if layer is None or self.tokenizer is None:
            return None
        return self.tokenizer.encode(layer.page_text())[: 4 * max_new_tokens]

    def assemble(self, requests: list[DecodeRequest], texts: list[str]) -> str:
        return "\n\n".join(clean_markdown(t, self.figure_format) for t in texts)
