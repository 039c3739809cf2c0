"""The built-in line reader: a conv stem and encoder over one text line, a decoder that
cross-attends to it, and a recursive FastMTP draft head. Plain PyTorch, one file.

Why this shape: a 2-core CPU trains a line reader of this kind to about 1 % line CER in under
an hour, while a page decoder with 2-D positions is out of reach of that budget
(docs/design.md); the decoder reuses the shared `Attention`, `KVCache`,
`RMSNorm` and `SwiGLU` classes that DeepSeek-OCR's decoder is built from, so the engine's
cache, verify and rollback paths run through the same modules in every CI run.

Shapes: B rows, W line width in pixels (a multiple of 8), N = W/8 visual tokens,
T text positions, d model dim, V vocabulary, H heads, D head dim.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

from ocrcli.models import layers
from ocrcli.models.base import DecodeRequest, ModelSpec
from ocrcli.models.identity import BUILTIN_MAX_NEW_TOKENS
from ocrcli.models.layers import (
    MIN_GEMM_ROWS,
    Attention,
    CrossAttention,
    KVCache,
    Linear,
    RMSNorm,
    SwiGLU,
    attention,
    batch_invariant,
    linear,
    rms_norm,
    rowwise_matmul,
    rowwise_silu,
    select_slots,
    sinusoid_table,
)

PROMPT_BOUND = 64  # a line request's prompt is its BOS; the cache keeps room for more
MAX_LINE_TOKENS = BUILTIN_MAX_NEW_TOKENS
# Its pages read at a mean log-probability per token of -0.12 at worst (samples/, held-out
# synthetic pages) and its guesses at turned or shapeless pages at -0.29 and below
# (scripts/bench_verdicts.py): the bound lies between.
MIN_MEAN_LOGPROB = -0.2

@dataclass
class BuiltinConfig:
    vocab_size: int = 215
    dim: int = 192
    heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    mlp_hidden: int = 512
    max_visual: int = 200  # MAX_LINE_WIDTH / 8
    max_text: int = 256
    mtp_depth: int = 6  # the head is trained for this many recursive steps
    # Width of the head block's SwiGLU. None = mlp_hidden (FastMTP's full layer, the first
    # heads); 0 = no MLP, cross-attention only: a draft step then costs about a third less
    # (docs/design.md, section 13), and at batch 1 draft steps are most of a speculative run.
    mtp_mlp_hidden: int | None = None
    # TIGER-style routing: the head attends to only this many visual tokens, chosen per step
    # by a gate over its own text state. 0 = every token (the unrouted head, the default).
    mtp_route_k: int = 0
    # Lines wider than this many pixels (at the 32-pixel reading height) are read in pieces
    # cut at word gaps (layout.split_wide). 0 = whole lines, as the first weights were trained.
    piece_width: int = 0
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = 0

    @classmethod
    def from_dict(cls, data: dict) -> BuiltinConfig:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def to_dict(self) -> dict:
        return {"architecture": "ocrcli-builtin", **asdict(self)}


class ConvStem(nn.Module):
    """[B,1,32,W] -> [B,N,d]: four conv+BN+ReLU, strides 2/2/2/1, rows folded into channels."""

    def __init__(self, dim: int):
        super().__init__()
        chans, strides, layers, cin = (32, 64, 128, 128), (2, 2, 2, 1), [], 1
        for c, s in zip(chans, strides):
            layers += [nn.Conv2d(cin, c, 3, s, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
            cin = c
        self.convs = nn.Sequential(*layers)
        self.proj = Linear(128 * 4, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.convs(x)  # [B,128,4,N]
        b, c, h, n = f.shape
        return self.proj(f.permute(0, 3, 1, 2).reshape(b, n, c * h))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: BuiltinConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim)
        self.attn = Attention(cfg.dim, cfg.heads)
        self.mlp_norm = RMSNorm(cfg.dim)
        self.mlp = SwiGLU(cfg.dim, cfg.mlp_hidden)

    def forward(self, x, positions, mask):
        x = x + self.attn(self.attn_norm(x), positions, mask=mask)
        return x + self.mlp(self.mlp_norm(x))


class DecoderLayer(nn.Module):
    """Causal self-attention (cached at decode time), cross-attention to the line, SwiGLU."""

    def __init__(self, cfg: BuiltinConfig):
        super().__init__()
        self.self_norm = RMSNorm(cfg.dim)
        self.self_attn = Attention(cfg.dim, cfg.heads)
        self.cross_norm = RMSNorm(cfg.dim)
        self.cross_attn = CrossAttention(cfg.dim, cfg.heads)
        self.mlp_norm = RMSNorm(cfg.dim)
        self.mlp = SwiGLU(cfg.dim, cfg.mlp_hidden)

    def forward(self, x, positions, mem_k, mem_v, mem_mask, mask=None, cache=None, slots=None, span=None):
        x = x + self.self_attn(self.self_norm(x), positions, mask=mask, cache=cache, slots=slots,
                               span=span)
        x = x + self.cross_attn(self.cross_norm(x), mem_k, mem_v, mem_mask)
        return x + self.mlp(self.mlp_norm(x))


class VisualRouter(nn.Module):
    """Text-conditioned top-k routing over visual tokens (our reading of TIGER; the paper's
    gating function is not public).

    The gate projects the drafter's text state to a query in the attention's key space and
    scores every visual token against the keys the head's cross-attention already holds
    (summed over heads), so a model needs no extra per-request state to use it: any head that
    cross-attends over visual positions with cached keys can. The top k valid tokens are kept.

    Selection is hard at inference (`forward_gathered`: only k keys and values are read). In
    training (`forward_masked`) the forward pass is the same hard selection, written as a 0/1
    mask over all N tokens, and the backward pass is straight-through: the mask is
    `hard + soft - soft.detach()` with `soft` the gate's softmax over valid tokens, so the gate
    learns which tokens the head's loss wants included.
    """

    def __init__(self, dim: int, heads: int, k: int):
        super().__init__()
        self.k = k
        self.heads = heads
        self.head_dim = dim // heads
        self.query = Linear(dim, dim, bias=False)

    def scores(self, x: torch.Tensor, mem_k: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """x [B,T,d], mem_k [B,H,N,D], valid [B,N] -> gate scores [B,T,N], -inf where invalid."""
        b, t, _ = x.shape
        q = self.query(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        s = (q @ mem_k.transpose(-1, -2)).sum(1) / math.sqrt(self.head_dim)
        return s.masked_fill(~valid[:, None, :], float("-inf"))

    def select(self, scores: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """-> indices [B,T,k'] of the top k' = min(k, N) tokens, and which of them are valid.
        A line with fewer than k valid tokens fills the rest with invalid ones (score -inf),
        which stay masked out of attention."""
        k = min(self.k, scores.shape[-1])
        idx = scores.topk(k, dim=-1).indices
        b, t, _ = idx.shape
        return idx, valid[:, None, :].expand(b, t, -1).gather(2, idx)

    def forward_gathered(self, q, mem_k, mem_v, scores, valid):
        """Inference: attention over the k selected tokens only. q [B,H,T,D] -> [B,H,T,D]."""
        idx, sel_valid = self.select(scores, valid)
        b, h, t, d = q.shape
        k = idx.shape[-1]
        n = mem_k.shape[2]
        gather = idx[:, None, :, :, None].expand(b, h, t, k, d)
        keys = mem_k[:, :, None].expand(b, h, t, n, d).gather(3, gather)  # [B,H,T,k,D]
        vals = mem_v[:, :, None].expand(b, h, t, n, d).gather(3, gather)
        att = (q[:, :, :, None] @ keys.transpose(-1, -2)) / math.sqrt(d)  # [B,H,T,1,k]
        att = att.masked_fill(~sel_valid[:, None, :, None, :], float("-inf"))
        return (att.softmax(-1) @ vals)[:, :, :, 0]

    def forward_masked(self, q, mem_k, mem_v, scores, valid):
        """Training: the same hard selection as a mask over all N tokens, straight-through."""
        idx, _ = self.select(scores, valid)
        hard = torch.zeros_like(scores).scatter_(-1, idx, 1.0) * valid[:, None, :]
        soft = scores.softmax(-1)  # -inf (invalid) -> 0
        gate = (hard + soft - soft.detach())[:, None]  # [B,1,T,N]: forward == hard
        att = (q @ mem_k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # [B,H,T,N]
        att = att.masked_fill(~valid[:, None, None, :], float("-inf")).softmax(-1) * gate
        # renormalising over the kept tokens == a softmax over the selected set only
        return (att / att.sum(-1, keepdim=True).clamp(min=1e-20)) @ mem_v


class MTPHead(nn.Module):
    """FastMTP draft block, shared across recursive steps.

    g = eh_proj([enorm(emb(t_p)); hnorm(h_{p-1})]); one cross-attention block over the line;
    logits = lm_head(norm(g)). It has no self-attention over text, so it needs no KV cache.
    With `cfg.mtp_route_k > 0` the cross-attention reads only the top-k visual tokens that a
    `VisualRouter` picks from the block's input state at every step (see its docstring).
    """

    exact: bool | None = None  # layers.choose_kernels

    def __init__(self, cfg: BuiltinConfig):
        super().__init__()
        self.enorm = RMSNorm(cfg.dim)
        self.hnorm = RMSNorm(cfg.dim)
        self.eh_proj = Linear(2 * cfg.dim, cfg.dim, bias=False)
        self.block = DecoderLayerNoSelf(cfg)
        self.norm = RMSNorm(cfg.dim)
        # Only a routed head has a router, so the unrouted state dict (the shipped weights)
        # is unchanged and loads strictly.
        self.router = VisualRouter(cfg.dim, cfg.heads, cfg.mtp_route_k) if cfg.mtp_route_k > 0 else None

    def forward(self, emb, hidden, mem_k, mem_v, mem_mask):
        """emb, hidden [B,T,d] -> the head's state and its normed output [B,T,d].

        Written with the layers' functions (`linear`, `rms_norm`, `attention`) on the
        sub-modules' weights rather than by calling the sub-modules: the same operations, so
        the same bits (tests/models/test_builtin_model.py), but a draft step over a few rows
        is mostly Python, the head runs up to six times per verify, and module dispatch was
        about a quarter of a step (docs/design.md, section 13)."""
        blk, attn, mlp = self.block, self.block.cross_attn, self.block.mlp
        x = torch.cat([rms_norm(emb, self.enorm.weight, self.enorm.eps),
                       rms_norm(hidden, self.hnorm.weight, self.hnorm.eps)], dim=-1)
        exact = self.exact
        g = linear(x, self.eh_proj.weight, exact=exact)
        b, t, _ = g.shape
        y = rms_norm(g, blk.cross_norm.weight, blk.cross_norm.eps)
        q = linear(y, attn.q_proj.weight, exact=exact).view(b, t, attn.heads, attn.head_dim).transpose(1, 2)
        if self.router is None:
            out = attention(q, mem_k, mem_v, mem_mask, exact)  # [B,H,T,D]
        else:
            out = self._routed_attention(y, q, mem_k, mem_v, mem_mask)
        g = g + linear(out.transpose(1, 2).reshape(b, t, -1), attn.o_proj.weight, exact=exact)
        if mlp is not None:
            y = rms_norm(g, blk.mlp_norm.weight, blk.mlp_norm.eps)
            up = (rowwise_silu(linear(y, mlp.gate_proj.weight, exact=exact), exact)
                  * linear(y, mlp.up_proj.weight, exact=exact))
            g = g + linear(up, mlp.down_proj.weight, exact=exact)
        return g, rms_norm(g, self.norm.weight, self.norm.eps)

    def _routed_attention(self, y, q, mem_k, mem_v, mem_mask):
        """The cross-attention limited to the routed tokens. y [B,T,d] (the block's normed
        input, which the gate reads), q [B,H,T,D] -> [B,H,T,D]."""
        valid = mem_mask.reshape(mem_mask.shape[0], -1).expand(y.shape[0], -1)  # [B,1,1,N] -> [B,N]
        scores = self.router.scores(y, mem_k, valid)
        # Gathering is cheaper at inference; training needs every token for the
        # straight-through gradient.
        routed = self.router.forward_masked if torch.is_grad_enabled() else self.router.forward_gathered
        return routed(q, mem_k, mem_v, scores, valid)

    def init_router_from_attention(self) -> None:
        """Start the gate as the sum over heads of the head's own attention logits, so a
        routed head trained from an unrouted one first keeps the tokens it attended to most."""
        if self.router is not None:
            with torch.no_grad():
                self.router.query.weight.copy_(self.block.cross_attn.q_proj.weight)


class DecoderLayerNoSelf(nn.Module):
    """The head's block: cross-attention to the line, then a SwiGLU unless its width is 0.
    It holds the weights; `MTPHead.forward` computes with them."""

    def __init__(self, cfg: BuiltinConfig):
        super().__init__()
        self.cross_norm = RMSNorm(cfg.dim)
        self.cross_attn = CrossAttention(cfg.dim, cfg.heads)
        width = cfg.mlp_hidden if cfg.mtp_mlp_hidden is None else cfg.mtp_mlp_hidden
        # No modules at all without an MLP, so such a state dict loads strictly.
        self.mlp_norm = RMSNorm(cfg.dim) if width else None
        self.mlp = SwiGLU(cfg.dim, width) if width else None


class BuiltinOCR(nn.Module):
    """The model, its training forward, and the engine protocol (`DecoderModel`)."""

    exact: bool | None = None  # layers.choose_kernels

    def __init__(self, cfg: BuiltinConfig):
        super().__init__()
        self.cfg = cfg
        self.stem = ConvStem(cfg.dim)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.encoder_norm = RMSNorm(cfg.dim)
        self.ctc_head = Linear(cfg.dim, cfg.vocab_size)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        nn.init.normal_(self.embed.weight, std=1.0)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.norm = RMSNorm(cfg.dim)
        self.mtp = MTPHead(cfg)
        size = max(cfg.max_visual, cfg.max_text) + 16
        self.register_buffer("pos_table", sinusoid_table(size, cfg.dim), persistent=False)
        self.emb_scale = math.sqrt(cfg.dim) * 0.1
        self.caches: list[KVCache] = []
        self.eos_id = cfg.eos_id
        self.vocab_size = cfg.vocab_size
        self.max_draft_depth = cfg.mtp_depth

    # -- shared pieces -------------------------------------------------------------------
    def encode(self, images: torch.Tensor, widths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """images [B,1,32,W], widths [B] -> memory [B,N,d], valid [B,N] (True = real token)."""
        x = self.stem(images)
        n = x.shape[1]
        valid = torch.arange(n, device=x.device)[None, :] < (widths[:, None] // 8)
        x = x + self.pos_table[:n].to(x.dtype)
        positions = torch.arange(n, device=x.device)[None].expand(x.shape[0], n)
        mask = valid[:, None, None, :]
        for layer in self.encoder:
            x = layer(x, positions, mask)
        return self.encoder_norm(x), valid

    def embed_tokens(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens) * self.emb_scale + self.pos_table[positions].to(self.embed.weight.dtype)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if batch_invariant(hidden, self.exact):
            return rowwise_matmul(hidden, self.embed.weight.t())
        return hidden @ self.embed.weight.t()

    # -- training ------------------------------------------------------------------------
    def forward_train(self, images, widths, tokens):
        """Teacher-forced pass. tokens [B,T] -> logits [B,T,V], hidden [B,T,d] (after the
        final norm), memory [B,N,d], valid [B,N], ctc_logits [B,N,V]."""
        memory, valid = self.encode(images, widths)
        b, t = tokens.shape
        positions = torch.arange(t, device=tokens.device)[None].expand(b, t)
        x = self.embed_tokens(tokens, positions)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()[None, None]
        mem_mask = valid[:, None, None, :]
        for layer in self.layers:
            k, v = layer.cross_attn.memory_kv(memory)
            x = layer(x, positions, k, v, mem_mask, mask=causal)
        hidden = self.norm(x)
        return self.logits(hidden), hidden, memory, valid, self.ctc_head(memory)

    def mtp_train(self, hidden, tokens, memory, valid, depth: int) -> list[torch.Tensor]:
        """Teacher-forced recursive drafting. Step k at position i reads tokens[i+k] and the
        previous step's hidden, and predicts the main model's token for position i+k+1.
        Returns per-step logits [B,T,V]; rows past the sequence end read padding."""
        b, t = tokens.shape
        k_mem, v_mem = self.mtp.block.cross_attn.memory_kv(memory)
        mem_mask = valid[:, None, None, :]
        out, g = [], hidden
        for k in range(1, depth + 1):
            shifted = torch.full_like(tokens, self.cfg.pad_id)
            shifted[:, : t - k] = tokens[:, k:]
            positions = (torch.arange(t, device=tokens.device) + k).clamp(max=self.pos_table.shape[0] - 1)
            emb = self.embed_tokens(shifted, positions[None].expand(b, t))
            g, normed = self.mtp(emb, g, k_mem, v_mem, mem_mask)
            out.append(self.logits(normed))
        return out

    # -- the engine protocol -------------------------------------------------------------
    @property
    def spec(self) -> ModelSpec:
        p = self.embed.weight
        return ModelSpec(device=p.device, dtype=p.dtype, eos_id=self.eos_id, vocab_size=self.vocab_size,
                         hidden_size=self.cfg.dim, max_draft_depth=self.max_draft_depth,
                         max_positions=self.pos_table.shape[0], prompt_bound=PROMPT_BOUND,
                         default_max_new_tokens=MAX_LINE_TOKENS, min_mean_logprob=MIN_MEAN_LOGPROB)

    def choose_kernels(self, exact: bool) -> None:
        layers.choose_kernels(self, exact)

    def setup_cache(self, slots: int, max_len: int) -> None:
        p = self.embed.weight
        c = self.cfg
        head_dim = c.dim // c.heads
        self.caches = [KVCache(slots, c.heads, max_len, head_dim, p.dtype, p.device)
                       for _ in self.layers]
        n_mem = len(self.layers) + 1  # every decoder layer, and the head
        shape = (n_mem, slots, c.heads, c.max_visual, head_dim)
        self.mem_k = torch.zeros(shape, dtype=p.dtype, device=p.device)
        self.mem_v = torch.zeros(shape, dtype=p.dtype, device=p.device)
        self.mem_valid = torch.zeros(slots, c.max_visual, dtype=torch.bool, device=p.device)

    def _mem(self, index: int, slots: torch.Tensor):
        return (select_slots(self.mem_k[index], slots), select_slots(self.mem_v[index], slots),
                select_slots(self.mem_valid, slots)[:, None, None, :])

    @torch.no_grad()
    def prefill(self, slots: torch.Tensor, requests: list[DecodeRequest]):
        p = self.embed.weight
        # One line at a time: conv kernels pick algorithms by batch and width, so encoding
        # lines together would make a line's features depend on its neighbours.
        modules = [layer.cross_attn for layer in self.layers] + [self.mtp.block.cross_attn]
        self.mem_valid[slots] = False
        for slot, r in zip(slots.tolist(), requests):
            image = torch.as_tensor(r.visual, dtype=p.dtype, device=p.device)[None, None]
            memory, valid = self.encode(image, torch.tensor([image.shape[-1]], device=p.device))
            n = memory.shape[1]
            for i, attn in enumerate(modules):
                k, v = attn.memory_kv(memory)
                self.mem_k[i, slot, :, :n] = k[0]
                self.mem_v[i, slot, :, :n] = v[0]
            self.mem_valid[slot, :n] = valid[0]
        length = len(requests[0].prompt_ids)
        if any(len(r.prompt_ids) != length for r in requests):
            raise ValueError("one prefill call takes prompts of one length")
        tokens = torch.tensor([r.prompt_ids for r in requests], device=p.device)
        positions = torch.arange(length, device=p.device)[None].expand_as(tokens)
        hidden, logits = self.forward(slots, tokens, positions)
        lengths = torch.full((len(requests),), length, device=p.device)
        return hidden[:, -1], logits[:, -1], lengths

    @torch.no_grad()
    def forward(self, slots, tokens, positions, span=None):
        x = self.embed_tokens(tokens, positions)
        for i, layer in enumerate(self.layers):
            k, v, mask = self._mem(i, slots)
            x = layer(x, positions, k, v, mask, cache=self.caches[i], slots=slots, span=span)
        hidden = self.norm(x)
        return hidden, self.logits(hidden)

    @torch.no_grad()
    def draft(self, slots, hidden, tokens, positions, span=None):
        """hidden [B,d], tokens, positions [B] -> logits [B,V], the head's hidden [B,d].

        Below MIN_GEMM_ROWS rows each row is repeated as that many query positions: the
        head's products then need no padding of their own, which cost a fifth to a quarter
        of batch-1 drafting (docs/design.md, section 7). Row results are the same bits either way
        (`layers.rowwise_matmul`), so drafts, and the acceptance counts in page files, do not
        depend on the batch."""
        k, v, mask = self._mem(len(self.layers), slots)
        positions = positions.clamp(max=self.pos_table.shape[0] - 1)
        emb = self.embed_tokens(tokens[:, None], positions[:, None])  # [B,1,d]
        b = tokens.shape[0]
        reps = -(-MIN_GEMM_ROWS // b) if b < MIN_GEMM_ROWS else 1
        g, normed = self.mtp(emb.expand(b, reps, -1), hidden[:, None].expand(b, reps, -1),
                             k, v, mask)
        return self.logits(normed)[:, 0], g[:, 0]

    def draft_commit(self, slots, hidden, tokens, positions, span=None) -> None:
        """The head reads only the line, never earlier text: nothing to refill."""
