"""The protocol the engine drives, and the page <-> request adapter.

The engine knows nothing of any one model. A model turns a page into one or more
`DecodeRequest`s (one per page for a full-page model, one per text line for the built-in
line reader), decodes them through `DecoderModel`, and assembles the page's Markdown from
the decoded texts with `PageAdapter.assemble`.

Shapes: B batch rows, T new positions per row, d model dim, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: render workers unpickle requests without torch
    import torch
    from PIL import Image

    from ocrcli.text_layer import TextLayer


@dataclass
class DecodeRequest:
    """One sequence to decode: a prompt and the model-specific visual input it reads."""

    key: Any  # opaque to the engine: (page key, region index) for the converter
    prompt_ids: list[int]
    visual: Any  # what the model's prefill encodes (a pixel tensor for the models we ship)
    max_new_tokens: int
    meta: Any = None  # the adapter's own bookkeeping (e.g. the line's place on the page)
    # The region's text as the PDF's text layer has it, in the model's own tokens (no special
    # tokens): a source of drafts (engine/text_draft.py). None: the page has no text layer.
    # Verification keeps the output greedy's, so a wrong text only costs speed.
    draft_text: list[int] | None = None
    # Other views of the same region (visual inputs like `visual`), read only when this
    # request's reading has a mean log-probability per token under `reread_below`; the page
    # keeps the likeliest of the readings (pages.PageAssembly). Each reading is the model's
    # own greedy one, so the choice is the same with or without speculative decoding.
    alternates: tuple[Any, ...] = ()
    reread_below: float = float("-inf")


@dataclass
class GuardConfig:
    """Repetition guard: a windowed no-repeat n-gram ban, plus loop detection.

    Its values are the model's own (token ids it may repeat, what counts as a loop for its
    output), so a model declares them here, beside `ModelSpec`, and the engine enforces them
    (engine/guard.py): the engine reads the models' contract, and no model imports the engine.
    """

    ngram: int = 0  # 0 disables the ban
    window: int = 0  # how many recent tokens the ban looks at (0: all)
    whitelist: frozenset[int] = frozenset()  # token ids a banned n-gram may end with
    loop_period_max: int = 0  # 0 disables loop detection
    loop_repeats: int = 0  # a period repeated this many times ends the request as degenerate
    loop_min_span: int = 0  # ...and covering at least this many tokens (dot leaders are not loops)


@dataclass(frozen=True)
class ModelSpec:
    """What the engine needs to know of a model: where it runs and what it can hold. The
    engine makes every step tensor on `device` and never sizes a cache past `max_positions`."""

    device: torch.device
    dtype: torch.dtype
    eos_id: int
    vocab_size: int
    hidden_size: int  # d of the hidden states the engine carries between steps
    max_draft_depth: int  # 0 when the model has no draft head
    max_positions: int  # cache positions the model can address (prompt + generated + drafts)
    prompt_bound: int  # the most prompt tokens one request can hold
    default_max_new_tokens: int  # the token cap per request when the user gives none
    # A page whose mean log-probability per decoded token is under this was guessed, not read
    # (verdict.doubt). The scale is the model's own; the built-in model's is measured
    # (scripts/bench_verdicts.py), the default is a loose bound for models where it is not.
    min_mean_logprob: float = -1.5


@runtime_checkable
class DecoderModel(Protocol):
    """What the engine calls. Slots index the model's own static caches; a decode step's
    `rows` are a contiguous run of slots (a slice) or slot ids [B] on the model's device, and
    `span` is how many cache positions its attention reads (None: all)."""

    eos_id: int
    vocab_size: int
    max_draft_depth: int  # 0 when the model has no draft head

    @property
    def spec(self) -> ModelSpec: ...

    def choose_kernels(self, exact: bool) -> None:
        """Batch-invariant kernels (exact: a row's bits never depend on the batch) or the
        device's fastest ones, for every call from now on."""

    def setup_cache(self, slots: int, max_len: int) -> None:
        """Allocate static caches for `slots` sequences of up to `max_len` positions."""

    def prefill(
        self, slots: torch.Tensor, requests: list[DecodeRequest]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encode and fill the caches of `slots` [B] with the requests' prompts.

        Returns hidden [B,d] and logits [B,V] at each last prompt position (hidden after the
        final norm) and lengths [B], the number of cache positions each prompt filled.
        """

    def forward(
        self, rows, tokens: torch.Tensor, positions: torch.Tensor, span: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens, positions [B,T] -> hidden [B,T,d], logits [B,T,V]; writes the KV cache."""

    def draft(
        self, rows, hidden: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
        span: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One MTP step: hidden [B,d] from position p-1, tokens and positions [B] at p ->
        logits [B,V] for position p+1 and the head's hidden [B,d]."""

    def draft_commit(
        self, rows, hidden: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
        span: int | None = None,
    ) -> None:
        """Refill the head's own cache over verified positions: tokens, positions [B,T] paired
        with the main model's hidden [B,T,d] from each position minus one. A head without a
        cache of its own does nothing."""


class Tokenizer(Protocol):
    def decode(self, ids: list[int]) -> str: ...


class PageAdapter(Protocol):
    """Turns a page image into requests, and decoded texts back into the page's Markdown."""

    # An adapter may set `prepares_in_worker = True` when `page_requests` pickles: the
    # converter then runs it in the render workers, beside rendering.

    def page_requests(self, image: Image.Image, max_new_tokens: int,
                      text_layer: TextLayer | None = None) -> list[DecodeRequest]:
        """Requests for one page; their keys are set by the caller. `text_layer` (by default
        the one the image carries, text_layer.text_layer_of) gives each its `draft_text`."""

    def assemble(self, requests: list[DecodeRequest], texts: list[str]) -> str: ...


@dataclass
class LoadedModel:
    """Everything the converter needs from a model, as the registry returns it."""

    model_id: str
    weights_hash: str  # part of the resume fingerprint; the built-in's also covers its reader code
    model: DecoderModel
    tokenizer: Tokenizer
    adapter: PageAdapter
    guard: GuardConfig = field(default_factory=GuardConfig)
    prompt: str = ""  # the instruction, where the model takes one
