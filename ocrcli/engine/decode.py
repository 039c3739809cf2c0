"""One decode step over a batch of slots: draft, verify in one forward pass, accept.

The greedy step is this same step with no drafts (T = 1). Verification is exact: draft j is
accepted while it equals the main model's argmax at the position before it; the first
mismatch is replaced by that argmax (or, when every draft matched, the argmax after the last
draft is the bonus token). Rollback is by length: the caller advances each row's length by
accepted + 1 and stale cache entries are masked and overwritten later.

Shapes: B rows, K' drafted positions this step (0..max_depth), T = K' + 1, d, V.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ocrcli.engine.draft import draft_tokens
from ocrcli.engine.guard import banned_tokens
from ocrcli.engine.policy import DraftPolicy
from ocrcli.models.base import GuardConfig


@dataclass
class StepOutput:
    committed: list[list[int]]  # per row: accepted drafts, then the corrected/bonus token
    accepted: list[int]  # per row: drafts accepted (0..K')
    drafted: list[int]  # per row: drafts verified
    next_token: torch.Tensor  # [B] last committed token (its KV is not written yet)
    next_hidden: torch.Tensor  # [B,d] main hidden at the position before next_token
    draft_s: float
    verify_s: float


def apply_guard(logits: torch.Tensor, histories: list[list[int]], drafts: torch.Tensor,
                guard: GuardConfig) -> torch.Tensor:
    """Mask banned tokens at each verify position, given history plus the earlier drafts."""
    if guard.ngram <= 0:
        return logits
    logits = logits.clone()
    drafts_l = drafts.tolist()
    for b, hist in enumerate(histories):
        for j in range(logits.shape[1]):
            banned = banned_tokens(hist + drafts_l[b][:j], guard)
            if banned:
                logits[b, j, list(banned)] = float("-inf")
    return logits


@torch.no_grad()
def decode_step(
    model,
    slots: torch.Tensor,  # [B] cache slots
    last_token: torch.Tensor,  # [B] token at `lengths`, not yet in the cache
    last_hidden: torch.Tensor,  # [B,d] main hidden at lengths-1 (the one that chose last_token)
    lengths: torch.Tensor,  # [B] positions already in the cache
    histories: list[list[int]],  # per row: generated tokens so far (for the guard)
    policy: DraftPolicy,
    guard: GuardConfig,
    proposer=None,
) -> StepOutput:
    t0 = time.perf_counter()
    if policy.max_depth > 0:
        drafts, depth = draft_tokens(model, slots, last_hidden, last_token, lengths, policy, proposer)
    else:
        drafts = last_token.new_zeros(last_token.shape[0], 0)
        depth = torch.zeros_like(last_token)
    t1 = time.perf_counter()
    k = drafts.shape[1]
    tokens = torch.cat([last_token[:, None], drafts], dim=1)  # [B,T]
    positions = lengths[:, None] + torch.arange(k + 1, device=tokens.device)  # [B,T]
    hidden, logits = model.forward(slots, tokens, positions)  # [B,T,d], [B,T,V]
    logits = apply_guard(logits, histories, drafts, guard)
    target = logits.argmax(dim=-1)  # [B,T]
    within = torch.arange(k, device=tokens.device)[None, :] < depth[:, None]
    match = (drafts == target[:, :k]) & within  # [B,K']
    accepted = match.long().cumprod(dim=1).sum(dim=1)  # [B]
    rows = torch.arange(tokens.shape[0], device=tokens.device)
    next_token = target[rows, accepted]
    next_hidden = hidden[rows, accepted]
    if policy.max_depth > 0:
        # The head's own cache (if any) is refilled from the main model's hidden states,
        # also on steps where gating drafted nothing, so the head's cache has no holes.
        prev_hidden = torch.cat([last_hidden[:, None], hidden[:, :-1]], dim=1)
        model.draft_commit(slots, prev_hidden, tokens, positions)
    t2 = time.perf_counter()
    acc = accepted.tolist()
    drafts_l = drafts.tolist()
    nxt = next_token.tolist()
    committed = [drafts_l[b][: acc[b]] + [nxt[b]] for b in range(len(acc))]
    return StepOutput(committed, acc, depth.tolist(), next_token, next_hidden, t1 - t0, t2 - t1)
