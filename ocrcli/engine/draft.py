"""Draft policies: how many tokens the MTP head proposes per row and step.

- `DraftPolicy(max_depth=0)`: no drafting; the step is plain greedy decoding.
- fixed depth K: draft K tokens with the recursive head.
- confidence-gated depth (our reading of P-MTP's dynamic drafting): a row stops drafting at
  the first step whose top probability is under `min_prob`, or whose running product of top
  probabilities is under `min_path_prob`. `max_depth` bounds it.

Gating never changes output, only how many drafts are verified.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DraftPolicy:
    max_depth: int = 0
    min_prob: float = 0.0  # 0 disables gating on a step's own confidence
    min_path_prob: float = 0.0  # 0 disables gating on the running product

    @property
    def gated(self) -> bool:
        return self.min_prob > 0 or self.min_path_prob > 0


# Chosen with scripts/bench_decode.py on samples/ (see the README's performance section).
GATED_DEFAULT = DraftPolicy(max_depth=6, min_prob=0.3, min_path_prob=0.2)


def default_policy(head_depth: int, batch_size: int, min_prob: float = GATED_DEFAULT.min_prob,
                   min_path_prob: float = GATED_DEFAULT.min_path_prob) -> DraftPolicy:
    """Gated drafting as deep as the head goes, when no depth is given. Once CPU verify
    passes were one padded GEMM instead of a product per row (models/layers.py), deep
    drafting won at batch 8 too (README, performance); `batch_size` stays in the signature
    for devices where a wide verify costs more."""
    del batch_size
    return DraftPolicy(head_depth, min_prob, min_path_prob)


def draft_tokens(model, slots, hidden, tokens, positions, policy: DraftPolicy, proposer=None):
    """Run the head recursively. hidden [B,d] (main model, position p-1), tokens, positions
    [B] at p. Returns drafts [B,K'] and depth [B] (drafts per row that count), K' <= max_depth."""
    b = tokens.shape[0]
    drafts: list[torch.Tensor] = []
    depth = torch.zeros(b, dtype=torch.long, device=tokens.device)
    alive = torch.ones(b, dtype=torch.bool, device=tokens.device)
    path = torch.ones(b, device=tokens.device)
    h, t = hidden, tokens
    for k in range(policy.max_depth):
        if proposer is not None:
            d = proposer(slots, positions + k)
            p = torch.ones(b, device=tokens.device)
        else:
            logits, h = model.draft(slots, h, t, positions + k)
            p, d = torch.softmax(logits.float(), dim=-1).max(dim=-1)
        path = path * p
        if policy.gated:
            alive = alive & (p >= policy.min_prob) & (path >= policy.min_path_prob)
        if not alive.any():
            break
        drafts.append(d)
        depth += alive.long()
        t = d
    if not drafts:
        return tokens.new_zeros(b, 0), depth
    return torch.stack(drafts, dim=1), depth


class OracleProposer:
    """A drafter that proposes the model's own greedy token with probability `p`.

    It measures the engine's overhead with no trained head: `reference[key]` holds each
    request's greedy output, and a wrong proposal is any other token.
    """

    def __init__(self, reference: dict, p: float, vocab_size: int, seed: int = 0):
        self.reference, self.p, self.vocab = reference, p, vocab_size
        self.rng = random.Random(seed)
        self.slot_keys: dict[int, object] = {}
        self.slot_start: dict[int, int] = {}

    def bind(self, slot: int, key, prompt_len: int) -> None:
        self.slot_keys[slot], self.slot_start[slot] = key, prompt_len

    def __call__(self, slots: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        out = []
        for s, pos in zip(slots.tolist(), positions.tolist()):
            ref = self.reference.get(self.slot_keys.get(s), [])
            # the token at position pos+1 is generated token index pos+1-prompt_len
            i = pos + 1 - self.slot_start.get(s, 0)
            good = ref[i] if 0 <= i < len(ref) and 0 <= ref[i] < self.vocab else 0
            out.append(good if self.rng.random() < self.p else (good + 1) % self.vocab)
        return torch.tensor(out, device=positions.device)
