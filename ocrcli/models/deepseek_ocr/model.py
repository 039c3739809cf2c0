"""The module tree of DeepseekOCRForCausalLM, named as the checkpoint names its tensors.

    model.sam_model.*        SAM-ViT-B, neck, net_2, net_3
    model.vision_model.*     CLIP-L fed SAM features
    model.projector.layers   Linear 2C -> d
    model.image_newline, model.view_seperator (sic)
    model.embed_tokens, model.layers.N.*, model.norm
    lm_head                  untied
    mtp_module.heads.0.*     Jina-OCR-v1 only

Pure functions of their inputs and of the caches passed in; the static caches and the
protocol the engine drives live in `runtime.py`.
"""

from __future__ import annotations

import torch
from torch import nn

from ..layers import (
    KVCache,
    Linear,
    RMSNorm,
    batch_invariant,
    gemm_rows_are_independent,
    pad_rows,
    rope_cos_sin,
    rowwise_matmul,
    step_mask,
)
from .config import DeepseekOcrConfig
from .decoder import DecoderLayer, MtpModule
from .vision import (
    ClipVisionModel,
    MlpProjector,
    SamEncoder,
    deep_encoder_features,
    init_normal,
    layout_visual_tokens,
)


class VocabLinear(Linear):
    """The LM head: layers.Linear computed in fixed-width column blocks of the vocabulary.

    Row independence is probed once per product shape (layers.gemm_rows_are_independent),
    and the probe's cost grows with the width: 4 s for a 32 x 129,280 head on one core, a
    minute or more at full size. Blocks of `BLOCK` columns (and one narrower last block)
    need only two cheap probes; each block is a separate row-independent product, so a
    row's logits still do not depend on the other rows. The rows are padded once for all
    blocks (a product per block, not a padded copy per block: the head runs on every draft
    step)."""

    BLOCK = 4096

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not batch_invariant(x, self.exact) or self.out_features <= self.BLOCK:
            return super().forward(x)
        blocks = self.weight.t().split(self.BLOCK, dim=1)  # views, one op (not one per block)
        if not all(gemm_rows_are_independent(b.shape[0], b.shape[1], x.dtype) for b in blocks[-2:]):
            y = torch.cat([rowwise_matmul(x, b) for b in blocks], dim=-1)
        else:
            rows = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
            padded = pad_rows(rows)
            y = torch.cat([padded @ b for b in blocks], dim=-1)
            y = y if padded is rows else y[: rows.shape[0]]
            y = y if x.dim() == 2 else y.view(*x.shape[:-1], -1)
        return y if self.bias is None else y + self.bias


class DeepseekOcrModel(nn.Module):
    def __init__(self, cfg: DeepseekOcrConfig):
        super().__init__()
        d = cfg.decoder
        self.sam_model = SamEncoder(cfg.sam)
        self.vision_model = ClipVisionModel(cfg.clip)
        self.projector = MlpProjector(cfg.projector_input_dim, d.hidden_size)
        self.image_newline = nn.Parameter(torch.empty(d.hidden_size))
        self.view_seperator = nn.Parameter(torch.empty(d.hidden_size))  # (sic)
        init_normal(self.image_newline)
        init_normal(self.view_seperator)
        self.embed_tokens = nn.Embedding(d.vocab_size, d.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(d, dense=i < d.first_k_dense_replace) for i in range(d.layers)
        )
        self.norm = RMSNorm(d.hidden_size, d.rms_norm_eps)

    def encode_views(self, pixels: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """Square views [N,3,S,S] -> projected visual tokens [N,L,d] and their (h,w) grid."""
        fused, grid = deep_encoder_features(self.sam_model, self.vision_model, pixels)
        return self.projector(fused), grid

    def layout(
        self,
        global_tokens: torch.Tensor,  # [L,d]
        global_grid: tuple[int, int],
        tile_tokens: torch.Tensor | None,  # [n,l,d]
        tile_grid: tuple[int, int],
        tiles_across_down: tuple[int, int],
    ) -> torch.Tensor:
        return layout_visual_tokens(
            global_tokens, global_grid, self.image_newline, self.view_seperator,
            tile_tokens, tile_grid, tiles_across_down,
        )

    def run_layers(
        self,
        x: torch.Tensor,  # [B,T,d] input embeddings
        positions: torch.Tensor,  # [B,T]
        caches: list[KVCache] | None = None,
        slots: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,  # [B,1,T,T] without caches; the step's with them
        span: int | None = None,  # cache positions attention reads (None: all)
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,  # the step's, if the caller has it
    ) -> torch.Tensor:
        """-> hidden [B,T,d] before the final norm. With caches, the rotary tables and the
        cache mask are computed once for every layer. The layers run on [N,d] rows: a
        reshape around every product would cost two ops each."""
        if caches is not None:
            attn = self.layers[0].self_attn
            if rope is None:
                rope = rope_cos_sin(positions, attn.head_dim, attn.rope_theta, x.dtype)
            if mask is None:
                mask = step_mask(positions, min(caches[0].max_len, span or caches[0].max_len),
                                 x.dtype)
        if positions.shape != x.shape[:2]:  # broadcast positions: the rows need their own
            positions = positions.expand(x.shape[:2])
        rows = x.reshape(-1, x.shape[-1])  # [N,d]
        for i, layer in enumerate(self.layers):
            cache = caches[i] if caches is not None else None
            rows = layer(rows, positions, cache=cache, slots=slots, mask=mask, span=span, rope=rope)
        return rows.view(x.shape)


class DeepseekOcrForCausalLM(nn.Module):
    def __init__(self, cfg: DeepseekOcrConfig):
        super().__init__()
        self.config = cfg
        self.model = DeepseekOcrModel(cfg)
        # Row-independent on CPU inference: a row's logits do not depend on the other rows, so
        # a verify pass over K+1 positions gives bitwise the greedy step's logits.
        self.lm_head = VocabLinear(cfg.decoder.hidden_size, cfg.decoder.vocab_size, bias=False)
        self.mtp_module = MtpModule(cfg.decoder, cfg.mtp) if cfg.mtp is not None else None

    def logits(self, normed_hidden: torch.Tensor) -> torch.Tensor:
        """Matmul in the weights' dtype, logits returned in float32 (as the reference does).
        The drafter uses it too: exact drafts make acceptance counts, which page JSON records,
        independent of the batch (docs/design.md, section 7)."""
        return self.lm_head(normed_hidden).float()

    def embed_for_draft(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Token embeddings for the MTP head [B,T,d], zeroed at position 0 if configured."""
        embeds = self.model.embed_tokens(tokens)
        return self.zero_position0(embeds, positions)

    def zero_position0(self, embeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.config.mtp is not None and self.config.mtp.zero_embed_at_position0:
            embeds = embeds.masked_fill((positions == 0)[..., None], 0.0)
        return embeds
