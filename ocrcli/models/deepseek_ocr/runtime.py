"""DeepSeek-OCR / Jina-OCR-v1 behind the engine's `DecoderModel` protocol.

Owns the static caches: one KVCache per decoder layer, plus the MTP head's own one-layer
cache over text positions (Jina). Cache rows are slots; the engine keeps each slot's length,
and rollback is by length alone (stale entries are masked by position and overwritten).

Draft invariant (Jina-OCR-v1's FastMTP head): the head's cache entry at position p comes from the token
at p and the *target* hidden at p-1. prefill primes it over the prompt; draft() writes
provisional entries from the head's own hidden; draft_commit() rewrites the verified ones.

Shapes: B rows, T positions, d model dim, V vocabulary.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from .. import layers
from ..base import DecodeRequest, ModelSpec
from ..layers import KVCache
from .decoder import DecoderLayer
from .model import DeepseekOcrForCausalLM
from .preprocess import PageVisual

# The official inference scripts' max_length; the engine lowers it where the cache ends first.
DEFAULT_MAX_NEW_TOKENS = 8192


class DeepseekOcrDecoder:
    """Implements ocrcli.models.base.DecoderModel."""

    def __init__(self, net: DeepseekOcrForCausalLM, prompt_bound: int = 0, vision_batch: int = 8):
        self.net = net.eval()
        self.config = net.config
        self.eos_id = self.config.eos_id
        self.vocab_size = self.config.decoder.vocab_size
        has_head = net.mtp_module is not None
        self.max_draft_depth = self.config.mtp.speculative_steps if has_head else 0
        # The adapter's bound on a page's prompt tokens (0: unknown; the engine is then told).
        self.prompt_bound = prompt_bound
        self.vision_batch = vision_batch  # views per vision pass; SAM's global bias is ~HW^2
        self.caches: list[KVCache] = []
        self.draft_cache: KVCache | None = None
        self.rope: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin [max_len, D]

    @property
    def spec(self) -> ModelSpec:
        d = self.config.decoder
        return ModelSpec(device=self.device, dtype=self.dtype, eos_id=self.eos_id,
                         vocab_size=self.vocab_size, hidden_size=d.hidden_size,
                         max_draft_depth=self.max_draft_depth,
                         max_positions=d.max_position_embeddings, prompt_bound=self.prompt_bound,
                         default_max_new_tokens=DEFAULT_MAX_NEW_TOKENS)

    @property
    def device(self) -> torch.device:
        return self.net.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.net.lm_head.weight.dtype

    @property
    def max_len(self) -> int:
        return self.caches[0].max_len if self.caches else 0

    def choose_kernels(self, exact: bool) -> None:
        layers.choose_kernels(self.net, exact)

    def setup_cache(self, slots: int, max_len: int) -> None:
        d = self.config.decoder
        if max_len > d.max_position_embeddings:
            raise ValueError(
                f"max_len {max_len} > max_position_embeddings {d.max_position_embeddings}"
            )

        def make() -> KVCache:
            return KVCache(slots, d.heads, max_len, d.head_dim, self.dtype, self.device)

        self.caches = [make() for _ in range(d.layers)]
        # Before any step (a compiled one cannot allocate): fused projections, expert stacks.
        for module in self.net.modules():
            if isinstance(module, DecoderLayer):
                module.fuse()
        self.draft_cache = make() if self.net.mtp_module is not None else None
        self.rope = layers.rope_table(max_len, d.head_dim, d.rope_theta, self.dtype, self.device)

    def _step_tables(self, positions: torch.Tensor, span: int | None):
        """The rotary tables and the additive attention mask of positions [B,T], computed
        once for all the layers of a call (main model or head)."""
        span = min(self.max_len, span or self.max_len)
        return (layers.rope_lookup(self.rope, positions),
                layers.step_mask(positions, span, self.dtype))

    # ------------------------------------------------------------------------------ vision

    @torch.inference_mode()
    def encode(self, visuals: list[PageVisual]) -> list[torch.Tensor]:
        """Each page's visual tokens [N_i,d], in <image>-slot order.

        On the CPU every page is encoded on its own: SAM's and CLIP's convolutions and
        products round differently with the batch size, and which pages share a prefill
        depends on when slots free up (the draft depth) and on rendering order, so batching
        across pages would make a page's text depend on its neighbours. Elsewhere views of
        equal size are batched together across pages (all global views, all tiles)."""
        if self.device.type == "cpu" and len(visuals) > 1:
            return [self._encode_batch([v])[0] for v in visuals]
        return self._encode_batch(visuals)

    def _encode_batch(self, visuals: list[PageVisual]) -> list[torch.Tensor]:
        model = self.net.model
        views: dict[int, list[tuple[int, str, torch.Tensor]]] = defaultdict(list)
        for i, v in enumerate(visuals):
            views[v.global_view.shape[-1]].append((i, "global", v.global_view[None]))
            if v.tiles is not None:
                views[v.tiles.shape[-1]].append((i, "tiles", v.tiles))
        encoded: dict[tuple[int, str], tuple[torch.Tensor, tuple[int, int]]] = {}
        for group in views.values():
            pixels = torch.cat([t for _, _, t in group]).to(self.device, self.dtype)
            outputs, grid = [], (0, 0)
            for chunk in pixels.split(self.vision_batch):
                tokens, grid = model.encode_views(chunk)  # [n,L,d]
                outputs.append(tokens)
            tokens = torch.cat(outputs)
            start = 0
            for owner, kind, t in group:
                encoded[(owner, kind)] = tokens[start : start + t.shape[0]], grid
                start += t.shape[0]
        result = []
        for i, v in enumerate(visuals):
            global_tokens, global_grid = encoded[(i, "global")]
            tile_tokens, tile_grid = encoded.get((i, "tiles"), (None, (1, 1)))
            result.append(
                model.layout(
                    global_tokens[0], global_grid, tile_tokens, tile_grid, v.tiles_across_down
                )
            )
        return result

    # ----------------------------------------------------------------------------- decoder

    def _tap(self, pre_norm: torch.Tensor, post_norm: torch.Tensor) -> torch.Tensor:
        """The hidden state handed to the engine, i.e. what the draft head reads."""
        mtp = self.config.mtp
        return pre_norm if mtp is not None and mtp.target_tap == "pre_norm" else post_norm

    def _check_positions(self, positions: torch.Tensor) -> None:
        """Prefill only: a decode step's positions are the engine's to keep inside the cache
        (reading them here would cost a host sync per step)."""
        if not self.caches:
            raise RuntimeError("setup_cache() must be called first")
        if int(positions.max()) >= self.max_len:
            raise ValueError(f"position {int(positions.max())} is past the cache ({self.max_len})")

    @torch.inference_mode()
    def prompt_embeddings(
        self, requests: list[DecodeRequest]
    ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """Right-padded prompt embeddings [B,T,d] with each page's visual tokens at its <image>
        slots, the padded ids [B,T], and the prompt lengths."""
        cfg = self.config
        lengths = [len(r.prompt_ids) for r in requests]
        ids = torch.full((len(requests), max(lengths)), cfg.pad_id, dtype=torch.long)
        for b, r in enumerate(requests):
            ids[b, : lengths[b]] = torch.tensor(r.prompt_ids, dtype=torch.long)
        ids = ids.to(self.device)
        embeds = self.net.model.embed_tokens(ids)
        visual_tokens = self.encode([r.visual for r in requests])
        for b, tokens in enumerate(visual_tokens):
            slots = (ids[b] == cfg.image_token_id).nonzero().squeeze(1)
            if slots.numel() != tokens.shape[0]:
                raise ValueError(
                    f"request {b}: {slots.numel()} <image> slots in the prompt, but the page "
                    f"gives {tokens.shape[0]} visual tokens"
                )
            embeds[b, slots] = tokens.to(embeds.dtype)
        return embeds, ids, lengths

    @torch.inference_mode()
    def prefill(
        self, slots: torch.Tensor, requests: list[DecodeRequest]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        slots = slots.to(self.device)
        embeds, _, lengths = self.prompt_embeddings(requests)
        b, t, _ = embeds.shape
        positions = torch.arange(t, device=self.device).expand(b, t)
        self._check_positions(positions)
        model = self.net.model
        pre = model.run_layers(embeds, positions, self.caches, slots)  # [B,T,d]
        post = model.norm(pre)
        tap = self._tap(pre, post)
        rows = torch.arange(b, device=self.device)
        last = torch.tensor(lengths, device=self.device) - 1
        logits = self.net.logits(post[rows, last])  # [B,V]
        if self.draft_cache is not None:
            # Prime the head over the prompt: input embeddings (visual tokens at the image
            # slots, position 0 zeroed) paired with the target hidden of the previous position.
            previous = torch.cat([torch.zeros_like(tap[:, :1]), tap[:, :-1]], dim=1)
            head = self.net.mtp_module.heads[0]
            head(self.net.zero_position0(embeds, positions), previous, positions,
                 cache=self.draft_cache, slots=slots)
        return tap[rows, last], logits, torch.tensor(lengths, device=self.device)

    @torch.no_grad()  # not inference_mode: torch.compile's AOT tracing rejects its tensors
    def forward(
        self, rows, tokens: torch.Tensor, positions: torch.Tensor, span: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens, positions [B,T] on the device -> hidden [B,T,d], logits [B,T,V] float32."""
        model = self.net.model
        rope, mask = self._step_tables(positions, span)
        pre = model.run_layers(model.embed_tokens(tokens), positions, self.caches, rows,
                               mask=mask, span=span, rope=rope)
        post = model.norm(pre)
        return self._tap(pre, post), self.net.logits(post)

    @torch.no_grad()
    def draft(
        self,
        rows,  # the step's slots: a slice, or ids [B]
        hidden: torch.Tensor,  # [B,d] from position p-1 (target, or the head's previous step)
        tokens: torch.Tensor,  # [B] at position p
        positions: torch.Tensor,  # [B] p
        span: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # logits [B,V] for p+1, the head's hidden [B,d]
        if self.draft_cache is None:
            raise RuntimeError("this model has no draft head (max_draft_depth is 0)")
        embeds = self.net.embed_for_draft(tokens, positions)  # [B,d]
        positions = positions[:, None]  # [B,1]
        rope, mask = self._step_tables(positions, span)
        x = self.net.mtp_module.heads[0](embeds, hidden, positions, cache=self.draft_cache,
                                         slots=rows, mask=mask, span=span, rope=rope)  # [B,d]
        # The shared final norm; its output feeds the LM head and is the next step's hidden.
        out = self.net.model.norm(x)
        return self.net.logits(out), out

    @torch.no_grad()
    def draft_commit(
        self,
        rows,  # the step's slots: a slice, or ids [B]
        hidden: torch.Tensor,  # [B,T,d] target hidden from each position minus one
        tokens: torch.Tensor,  # [B,T] verified tokens
        positions: torch.Tensor,  # [B,T]
        span: int | None = None,
    ) -> None:
        if self.draft_cache is None:
            return
        embeds = self.net.embed_for_draft(tokens, positions)
        rope, mask = self._step_tables(positions, span)
        self.net.mtp_module.heads[0](embeds, hidden, positions, cache=self.draft_cache,
                                     slots=rows, mask=mask, span=span, rope=rope)
