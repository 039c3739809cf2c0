"""DeepSeek-V2 decoder (plain MHA, dense layer 0, MoE layers) and Jina's FastMTP head.

Built from the shared `ocrcli.models.layers` classes (RMSNorm, SwiGLU, Attention with RoPE
and the static per-slot KVCache), so the engine's code paths are the built-in model's.

Shapes: B rows, T positions, N = B*T tokens, d model dim, E routed experts, k experts/token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import (
    Attention,
    KVCache,
    Linear,
    RMSNorm,
    SwiGLU,
    batch_invariant,
    rowwise_matmul,
)
from .config import DecoderConfig, MtpConfig
from .vision import init_normal


class ExpertRouter(nn.Module):
    """`mlp.gate`: softmax over all experts in float32, greedy top-k, no renormalisation."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.top_k = cfg.experts_per_token
        self.scale = cfg.routed_scaling_factor
        self.weight = nn.Parameter(torch.empty(cfg.n_routed_experts, cfg.hidden_size))
        init_normal(self.weight)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N,d] -> weights [N,k] float32, expert ids [N,k]."""
        # Routing in bf16 flips near-tied experts; the reference computes it in float32.
        # On CPU inference the logits go through the row-independent product: a verify pass
        # routes K+1 tokens at once, and a 1-ulp change could pick another expert.
        xf, wf = x.float(), self.weight.float()
        logits = rowwise_matmul(xf, wf.t()) if batch_invariant(x) else F.linear(xf, wf)
        probs = logits.softmax(dim=-1)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        return weights * self.scale, experts


class MoE(nn.Module):
    """Routed experts plus always-on shared experts (merged into one wider SwiGLU)."""

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape  # [B,T,d]
        tokens = x.reshape(-1, shape[-1])  # [N,d]
        weights, experts = self.gate(tokens)  # [N,k]
        n, k = experts.shape
        # Group the N*k (token, expert) pairs by expert: one matmul per expert that was hit,
        # whatever N is. A verify pass routes B*(K+1) tokens; gathering weights per token
        # (gpt-fast's Mixtral) would copy 6 expert matrices per token instead.
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
        # Each expert is built of layers.Linear and layers.rowwise_silu, so on CPU inference a token's output
        # does not depend on how many tokens share its expert. Weight and sum the k outputs
        # of each token in float32, in rank order, by elementwise adds (no reduction kernel
        # whose blocking could depend on N): deterministic and independent of the batch.
        pair_out = torch.empty(n * k, shape[-1], dtype=torch.float32, device=x.device)
        pair_out[order] = grouped_out.float() * weights.reshape(-1)[order, None]
        pair_out = pair_out.reshape(n, k, -1)
        routed = pair_out[:, 0].clone()
        for rank in range(1, k):
            routed += pair_out[:, rank]
        routed = routed.to(x.dtype)
        return routed.reshape(shape) + self.shared_experts(x)


class DecoderLayer(nn.Module):
    """Pre-norm block: x += attn(input_layernorm(x)); x += mlp(post_attention_layernorm(x))."""

    def __init__(self, cfg: DecoderConfig, dense: bool):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg.hidden_size, cfg.heads, rope_theta=cfg.rope_theta)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size) if dense else MoE(cfg)

    def forward(
        self,
        x: torch.Tensor,  # [B,T,d]
        positions: torch.Tensor,  # [B,T]
        cache: KVCache | None = None,
        slots: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = x + self.self_attn(
            self.input_layernorm(x), positions, mask=mask, cache=cache, slots=slots
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

    def forward(
        self,
        embeds: torch.Tensor,  # [B,T,d] token embeddings at positions p (zeroed at p=0)
        hidden: torch.Tensor,  # [B,T,d] hidden state paired with p: the one from p-1
        positions: torch.Tensor,  # [B,T]
        cache: KVCache | None = None,
        slots: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        e, h = self.enorm(embeds), self.hnorm(hidden)
        pair = [e, h] if self.concat_order == "embed_hidden" else [h, e]
        x = self.eh_proj(torch.cat(pair, dim=-1))
        return self.mtp_block(x, positions, cache=cache, slots=slots, mask=mask)  # [B,T,d]


class MtpModule(nn.Module):
    def __init__(self, cfg: DecoderConfig, mtp: MtpConfig):
        super().__init__()
        self.heads = nn.ModuleList(MtpHead(cfg, mtp) for _ in range(mtp.num_heads))
