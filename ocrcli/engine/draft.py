"""Drafting: the MTP head run recursively under a `DraftPolicy` (engine/policy.py), and an
oracle drafter for measuring engine overhead."""

from __future__ import annotations

import random

import torch

from ocrcli.engine.policy import DraftPolicy


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
