"""DeepSeek-V2 decoder (plain MHA, dense layer 0, MoE layers) and Jina's FastMTP head.

Built from the shared `ocrcli.models.layers` classes (RMSNorm, SwiGLU, Attention with RoPE
and the static per-slot KVCache), so the engine's code paths are the built-in model's.

Shapes: B rows, T positions, N = B*T tokens, d model dim, E routed experts, k experts/token,
P = N*k (token, expert) pairs, I an expert's hidden width.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import (
    MIN_GEMM_ROWS,
    Attention,
    KVCache,
    Linear,
    RMSNorm,
    SwiGLU,
    assume_constant_result,
    batch_invariant,
    rowwise_matmul,
    rowwise_silu,
)
from .config import DecoderConfig, MtpConfig
from .vision import init_normal


class ExpertRouter(nn.Module):
    """`mlp.gate`: softmax over all experts in float32, greedy top-k, no renormalisation."""

    exact: bool | None = None  # layers.choose_kernels

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.top_k = cfg.experts_per_token
        self.scale = cfg.routed_scaling_factor
        self.weight = nn.Parameter(torch.empty(cfg.n_routed_experts, cfg.hidden_size))
        init_normal(self.weight)

    def forward(self, x: torch.Tensor, w_t: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N,d] -> weights [N,k] float32, expert ids [N,k]. w_t: the weight in float32,
        transposed [d,E], if the caller keeps it (MoE.stack_experts), else made here."""
        # Routing in bf16 flips near-tied experts; the reference computes it in float32.
        # On CPU inference the logits go through the row-independent product: a verify pass
        # routes K+1 tokens at once, and a 1-ulp change could pick another expert.
        xf = x.float()
        w_t = self.weight.float().t() if w_t is None else w_t
        logits = rowwise_matmul(xf, w_t) if batch_invariant(x, self.exact) else xf @ w_t
        probs = logits.softmax(dim=-1)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        return (weights if self.scale == 1.0 else weights * self.scale), experts  # x * 1 is x


def _padded_pair_products(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [P,k], w [P,n,k] -> [P,n]: row p is w[p] @ x[p], each pair's row padded with zero rows
    to MIN_GEMM_ROWS, the GEMM shape `rowwise_matmul` gives a token of the grouped path."""
    rows = F.pad(x[:, None], (0, 0, 0, MIN_GEMM_ROWS - 1))  # [P,4,k]
    return torch.bmm(rows, w.transpose(1, 2))[:, 0]


@assume_constant_result
def pair_products_match_rowwise(k: int, n: int, dtype: torch.dtype) -> bool:
    """Probe once per shape, like `layers.gemm_rows_are_independent`: is the batched padded
    product of a pair bitwise `rowwise_matmul` of its token alone, whatever P and position, for
    the weight layouts the gather path passes (halves of a gathered [P,2n,k], contiguous)?
    A hardware fact, so torch.compile takes it as a constant."""
    return _probe_pair_products(k, n, dtype)


@functools.cache
def _probe_pair_products(k: int, n: int, dtype: torch.dtype) -> bool:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(9, k, generator=gen).to(dtype)
    w = torch.randn(9, 2 * n, k, generator=gen).to(dtype)
    for half in (w[:, :n], w[:, n:], w[:, n:].contiguous()):
        for p in (1, 2, 3, 5, 9):
            got = _padded_pair_products(x[:p], half[:p])
            for j in {0, p // 2, p - 1}:
                if not torch.equal(got[j], rowwise_matmul(x[j : j + 1], half[j].t())[0]):
                    return False
    return True


def pair_products(x: torch.Tensor, w: torch.Tensor, exact: bool | None = None) -> torch.Tensor:
    """x [P,k], w [P,n,k] (nn.Linear layout per pair) -> [P,n], row p = w[p] @ x[p].

    On CPU inference row p is bitwise `rowwise_matmul(x[p], w[p].t())`, the product the
    grouped path computes for that token: so it depends on neither P nor the neighbours, and
    the gather and grouped paths agree to the bit (the token-count threshold then changes no
    result). One padded bmm where the probe confirms it, one product per pair elsewhere."""
    if not batch_invariant(x, exact):
        return torch.bmm(x[:, None], w.transpose(1, 2))[:, 0]
    if x.shape[0] == 0 or pair_products_match_rowwise(x.shape[1], w.shape[1], x.dtype):
        return _padded_pair_products(x, w)
    return torch.cat([rowwise_matmul(x[p : p + 1], w[p].t()) for p in range(x.shape[0])])


def _sum_ranks(pair_out: torch.Tensor) -> torch.Tensor:
    """Weighted pair outputs [N,k,d] float32 -> [N,d], summed in rank order by elementwise
    adds (no reduction kernel whose blocking could depend on N): deterministic and
    independent of the batch, as the exact kernels need."""
    ranks = pair_out.unbind(1)  # k views, one op
    if len(ranks) == 1:
        return ranks[0]
    routed = ranks[0] + ranks[1]
    for rank in ranks[2:]:
        routed += rank
    return routed


def _unstack_after_load(module: MoE, _incompatible_keys) -> None:
    # load_state_dict(assign=True) replaces the per-expert parameters: the stacks are stale.
    module.unstack_experts()


class MoE(nn.Module):
    """Routed experts plus always-on shared experts (merged into one wider SwiGLU).

    Two ways to run the routed experts, chosen by the token count N alone (a Python int):
    - grouped (prefill, N > gather_max_tokens): pairs sorted by expert, one product per expert
      hit; reads each expert's weights once, but needs the counts on the host (a sync) and
      loops over experts in Python;
    - gather (decode, N <= gather_max_tokens): each (token, expert) pair gets its expert's
      weights gathered from [E,...] stacks and applied by batched products (gpt-fast's Mixtral
      `ConditionalFeedForward`): no host sync, no data-dependent shape, a fixed op count, so a
      step can be captured by CUDA graphs or torch.compile(fullgraph=True). It copies P = N*k
      expert matrices per layer, so it pays only for few tokens.
    The per-expert SwiGLUs stay for loading and for the state dict; `stack_experts` builds the
    stacks and turns those parameters into views of them, so only one copy of the weights
    exists and the state dict's names and values are unchanged.
    """

    exact: bool | None = None  # layers.choose_kernels
    # A decode step has N = B*(K+1) <= 32*4 = 128 tokens; a page's prefill hundreds.
    gather_max_tokens = 128

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.gate = ExpertRouter(cfg)
        self.experts = nn.ModuleList(
            SwiGLU(cfg.hidden_size, cfg.moe_intermediate_size)
            for _ in range(cfg.n_routed_experts)
        )
        self.shared_experts = SwiGLU(
            cfg.hidden_size, cfg.moe_intermediate_size * cfg.n_shared_experts
        )
        self.unstack_experts()
        self.register_load_state_dict_post_hook(_unstack_after_load)

    def stack_experts(self) -> None:
        """Build w13 [E,2I,d] (gate rows, then up rows) and w2 [E,d,I] once, and make every
        expert's gate/up/down weight a view of them. Call it after loading or moving the module
        (the runtime may; otherwise the first decode-sized call does), and before a CUDA-graph
        capture or torch.compile: it allocates and replaces parameters."""
        if self._stacked:
            return
        # Plain tensors even under inference_mode: views of inference tensors could no longer
        # be updated in place (load_state_dict copies into parameters).
        with torch.inference_mode(False), torch.no_grad():
            w13 = torch.stack([torch.cat([e.gate_proj.weight, e.up_proj.weight]) for e in self.experts])
            w2 = torch.stack([e.down_proj.weight for e in self.experts])
            inter = w2.shape[-1]
            for i, expert in enumerate(self.experts):
                for linear, view in (
                    (expert.gate_proj, w13[i, :inter]),
                    (expert.up_proj, w13[i, inter:]),
                    (expert.down_proj, w2[i]),
                ):
                    linear.weight = nn.Parameter(view, requires_grad=linear.weight.requires_grad)
            # The router's weight as its product takes it (float32, transposed): no copy or
            # transpose per layer and step.
            gate_t = self.gate.weight.float().t()
        self._w13, self._w2, self._gate_t = w13, w2, gate_t
        self._stacked = True

    def unstack_experts(self) -> None:
        """Forget the stacks (the parameters keep their values); the next decode-sized call, or
        `stack_experts`, builds them again from the parameters as they are then."""
        self._stacked = False  # a Python flag: checking it costs no op and no sync
        self._w13: torch.Tensor | None = None  # [E,2I,d]
        self._w2: torch.Tensor | None = None  # [E,d,I]
        self._gate_t: torch.Tensor | None = None  # [d,E] float32

    def _apply(self, fn, recurse=True):
        # .to() / .half() / .cuda() convert each parameter on its own, which breaks the views
        # (the stacks are no parameters and would not follow): rebuild them lazily afterwards.
        self.unstack_experts()
        return super()._apply(fn, recurse)

    def __getstate__(self):
        # Pickling or deepcopy would copy the stacks apart from the parameters.
        state = super().__getstate__()
        state.update(_stacked=False, _w13=None, _w2=None, _gate_t=None)
        return state

    def fuse(self) -> None:
        """Inference layouts: the expert stacks, and the shared experts' fused weights."""
        self.stack_experts()
        self.shared_experts.fuse()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B,T,d] or [N,d] -> shaped like x."""
        shape = x.shape
        tokens = x.reshape(-1, shape[-1]) if x.dim() != 2 else x  # [N,d]
        # Training takes the grouped path: the stacks carry no gradient to the parameters.
        training = torch.is_grad_enabled() and self.experts[0].gate_proj.weight.requires_grad
        gate_t = None if torch.is_grad_enabled() else self._gate_t  # no gradient through it
        weights, experts = self.gate(tokens, gate_t)  # [N,k]
        n, k = experts.shape
        if n <= self.gather_max_tokens and not training:
            pair_out = self._gathered(tokens, experts)  # [N*k,d], token-major
            if not batch_invariant(tokens, self.exact):  # weight and sum in one product
                routed = torch.bmm(weights[:, None], pair_out.float().view(n, k, -1))[:, 0]
            else:
                routed = _sum_ranks((pair_out.float() * weights.reshape(-1, 1)).view(n, k, -1))
        else:
            routed = _sum_ranks(self._grouped(tokens, weights, experts).view(n, k, -1))
        out = routed.to(x.dtype) + self.shared_experts(tokens)  # [N,d]
        return out if x.dim() == 2 else out.view(shape)

    def _gathered(self, tokens: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """tokens [N,d], experts [N,k] -> [N*k,d]: pair (n, r) is expert experts[n,r] on token
        n, with the same math as SwiGLU.forward."""
        self.stack_experts()
        n, k = experts.shape
        inter = self._w2.shape[-1]
        ids = experts.reshape(-1)  # [P], P = N*k
        w13 = self._w13[ids]  # [P,2I,d]: a gather on the device, no sync
        w2 = self._w2[ids]  # [P,d,I]
        d = tokens.shape[-1]
        if batch_invariant(tokens, self.exact):  # gate and up apart: bitwise the grouped path's products
            exact = self.exact
            x = tokens[:, None].expand(n, k, d).reshape(n * k, -1)  # [P,d]
            h = (rowwise_silu(pair_products(x, w13[:, :inter], exact), exact)
                 * pair_products(x, w13[:, inter:], exact))
        else:  # one product per token for its k experts' gate and up rows: no copy of x
            gate_up = torch.bmm(tokens[:, None], w13.view(n, k * 2 * inter, d).transpose(1, 2))
            gate_up = gate_up.view(n * k, 2 * inter)  # [P,2I]
            h = rowwise_silu(gate_up[:, :inter], False) * gate_up[:, inter:]  # [P,I]
        return pair_products(h, w2, self.exact)  # [P,d]

    def _grouped(
        self, tokens: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor
    ) -> torch.Tensor:
        """tokens [N,d], weights and experts [N,k] -> weighted pair outputs [N*k,d] float32."""
        n, k = experts.shape
        # Group the N*k (token, expert) pairs by expert: one matmul per expert that was hit,
        # whatever N is, so each expert's weights are read once (a prefill's many tokens).
        pair_expert = experts.reshape(-1)  # [N*k]
        order = torch.argsort(pair_expert, stable=True)
        counts = torch.bincount(pair_expert, minlength=len(self.experts)).tolist()
        grouped_in = tokens[order // k]  # [N*k,d], expert-major
        grouped_out = torch.empty_like(grouped_in)
        start = 0
        for expert_id, count in enumerate(counts):
            if count:
                stop = start + count
                grouped_out[start:stop] = self.experts[expert_id](grouped_in[start:stop])
                start = stop
        # Each expert is built of layers.Linear and layers.rowwise_silu, so on CPU inference a
        # token's output does not depend on how many tokens share its expert.
        pair_out = torch.empty(n * k, tokens.shape[-1], dtype=torch.float32, device=tokens.device)
        pair_out[order] = grouped_out.float() * weights.reshape(-1)[order, None]
        return pair_out


class DecoderLayer(nn.Module):
    """Pre-norm block: x += attn(input_layernorm(x)); x += mlp(post_attention_layernorm(x))."""

    def __init__(self, cfg: DecoderConfig, dense: bool):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg.hidden_size, cfg.heads, rope_theta=cfg.rope_theta)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size) if dense else MoE(cfg)

    def fuse(self) -> None:
        """Build the inference layouts (layers.Fusable, MoE.stack_experts): after loading and
        moving the weights, before a step is captured or compiled."""
        self.self_attn.fuse()
        self.mlp.fuse()

    def forward(
        self,
        x: torch.Tensor,  # [B,T,d], or [N,d] (no reshape around each product), N = B*T
        positions: torch.Tensor,  # [B,T]
        cache: KVCache | None = None,
        slots=None,  # a slice of cache slots, or slot ids [B]
        mask: torch.Tensor | None = None,
        span: int | None = None,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        x = x + self.self_attn(
            self.input_layernorm(x), positions, mask=mask, cache=cache, slots=slots, span=span,
            rope=rope,
        )
        return x + self.mlp(self.post_attention_layernorm(x))


class MtpHead(nn.Module):
    """`mtp_module.heads.0`: one FastMTP step before the shared final norm and LM head.

    x = mtp_block(eh_proj(concat[enorm(embedding), hnorm(previous hidden)])), with the
    block's own KV cache over text positions. The caller applies model.norm and lm_head, and
    feeds the normed output back as the next step's hidden (recursive drafting).
    """

    def __init__(self, cfg: DecoderConfig, mtp: MtpConfig):
        super().__init__()
        self.concat_order = mtp.concat_order
        self.enorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.eh_proj = Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.mtp_block = DecoderLayer(cfg, dense=True)  # mtp_moe=false

    def fuse(self) -> None:
        self.mtp_block.fuse()  # DecoderLayer.fuse

    def forward(
        self,
        embeds: torch.Tensor,  # [B,T,d] or [N,d]: token embeddings at positions p (zeroed at p=0)
        hidden: torch.Tensor,  # shaped alike: the hidden state paired with p, the one from p-1
        positions: torch.Tensor,  # [B,T]
        cache: KVCache | None = None,
        slots=None,  # a slice of cache slots, or slot ids [B]
        mask: torch.Tensor | None = None,
        span: int | None = None,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """-> shaped like embeds. The block runs on [N,d] rows (no reshape per product)."""
        e, h = self.enorm(embeds), self.hnorm(hidden)
        pair = [e, h] if self.concat_order == "embed_hidden" else [h, e]
        x = torch.cat(pair, dim=-1)
        x = x.view(-1, x.shape[-1]) if x.dim() == 3 else x  # [N,2d]
        x = self.mtp_block(self.eh_proj(x), positions, cache=cache, slots=slots, mask=mask,
                           span=span, rope=rope)
        return x if embeds.dim() == 2 else x.view(embeds.shape)


class MtpModule(nn.Module):
    def __init__(self, cfg: DecoderConfig, mtp: MtpConfig):
        super().__init__()
        self.heads = nn.ModuleList(MtpHead(cfg, mtp) for _ in range(mtp.num_heads))
