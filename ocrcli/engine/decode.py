"""One decode step over a batch of slots: draft, verify in one forward pass, accept.

The greedy step is this same step with no drafts (T = 1). Verification is exact: draft j is
accepted while it equals the main model's argmax at the position before it; the first
mismatch is replaced by that argmax (or, when every draft matched, the argmax after the last
draft is the bonus token). Rollback is by length: the step advances each row's length by
accepted + 1, and stale cache entries are masked and overwritten later.

Drafts come from the MTP head (`draft.draft_tokens`) and, per row, from the page's text layer
(`text_draft.TextDrafts`, looked up on the host); a step where every row has a text run
skips the head. Either way they are verified alike.

Performance contract: the step's state lives on the model's device (`DecodeState`), every
tensor it makes is made there, and the host reads the device once per step (`StepOutput`'s
one packed read of the committed tokens). Only the confidence gate's early exit on an exact
engine reads more (see `draft.draft_tokens`).

The step also returns each committed token's log-probability under the verifying model (the
argmax's log-softmax, which costs one reduction beside the argmax): the page's confidence.

Shapes: S cache slots, B rows this step, K' drafted positions (0..max_depth), T = K' + 1, d, V.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ocrcli.engine.draft import draft_tokens
from ocrcli.engine.guard import ban_repeats
from ocrcli.engine.policy import DraftPolicy
from ocrcli.engine.text_draft import TextDrafts
from ocrcli.models.base import GuardConfig

LOGPROB_SCALE = 1_000_000  # micro-nats: log-probabilities packed as integers

Rows = slice | torch.Tensor  # the cache slots of a step: a contiguous run, or slot ids [B]


@dataclass
class DecodeState:
    """Per-slot decoding state, all on the model's device."""

    last_token: torch.Tensor  # [S] the token at `lengths`, not yet in the cache
    last_hidden: torch.Tensor  # [S,d] main hidden at lengths-1 (the one that chose last_token)
    lengths: torch.Tensor  # [S] positions already in the cache
    history: torch.Tensor  # [S,H] generated tokens (the guard's history); [S,0] without a guard
    history_len: torch.Tensor  # [S]

    @classmethod
    def empty(cls, slots: int, hidden: int, history: int, device, dtype) -> DecodeState:
        zeros = torch.zeros(slots, dtype=torch.long, device=device)
        return cls(zeros.clone(), torch.zeros(slots, hidden, dtype=dtype, device=device),
                   zeros.clone(), torch.zeros(slots, history, dtype=torch.long, device=device),
                   zeros.clone())


@dataclass
class StepOutput:
    committed: list[list[int]]  # per row: accepted drafts, then the corrected/bonus token
    accepted: list[int]  # per row: drafts accepted (0..K')
    drafted: list[int]  # per row: drafts verified
    logprobs: list[list[float]]  # per row: log-probability of each committed token
    draft_s: float
    verify_s: float
    text_rows: list[bool] | None = None  # per row: its drafts came from the text layer


@torch.no_grad()
def decode_step(
    model,
    state: DecodeState,
    rows: Rows,  # this step's slots
    span: int | None,  # cache positions attention reads (a length bucket); None: all
    policy: DraftPolicy,
    guard: GuardConfig,
    guard_allowed: torch.Tensor | None,  # [V+1] bool, the guard's whitelist (guard.whitelist_mask)
    proposer=None,
    early_exit: bool = False,
    text: TextDrafts | None = None,  # this step's runs from the text layer (engine/text_draft.py)
) -> StepOutput:
    t0 = time.perf_counter()
    last_token, last_hidden, lengths = state.last_token[rows], state.last_hidden[rows], state.lengths[rows]
    if policy.max_depth > 0 and (text is None or not text.every_row):
        drafts, depth = draft_tokens(model, rows, last_hidden, last_token, lengths, policy, proposer,
                                     span, early_exit)
    else:
        drafts = last_token.new_zeros(last_token.shape[0], 0)
        depth = torch.zeros_like(last_token)
    if text is not None:
        drafts, depth = text.merge(drafts, depth)
    t1 = time.perf_counter()
    k = drafts.shape[1]
    steps = torch.arange(k + 1, device=last_token.device)  # [T]
    tokens = torch.cat([last_token[:, None], drafts], dim=1)  # [B,T]
    positions = lengths[:, None] + steps  # [B,T]
    hidden, logits = model.forward(rows, tokens, positions, span=span)  # [B,T,d], [B,T,V]
    if guard.ngram > 0:
        logits = ban_repeats(logits, state.history[rows], state.history_len[rows], drafts, guard,
                             guard_allowed)
    target = logits.argmax(dim=-1)  # [B,T]
    top_logprob = logits.amax(dim=-1) - logits.logsumexp(dim=-1)  # [B,T] log p(target)
    match = (drafts == target[:, :k]) & (steps[None, :k] < depth[:, None])  # [B,K']
    accepted = match.long().cumprod(dim=1).sum(dim=1)  # [B]
    next_token = target.gather(1, accepted[:, None])[:, 0]  # [B]
    next_hidden = hidden.gather(1, accepted[:, None, None].expand(-1, 1, hidden.shape[-1]))[:, 0]
    if policy.max_depth > 0:
        # The head's own cache (if any) is refilled from the main model's hidden states,
        # also on steps where gating drafted nothing, so the head's cache has no holes.
        prev_hidden = torch.cat([last_hidden[:, None], hidden[:, :-1]], dim=1)
        model.draft_commit(rows, prev_hidden, tokens, positions, span=span)
    _advance(state, rows, drafts, accepted, next_token, next_hidden, guard.ngram > 0)
    # Log-probabilities travel as integer micro-nats, so that the step still reads the host once.
    micro_nats = (top_logprob.float() * LOGPROB_SCALE).round().long()  # [B,T]
    packed = torch.cat([accepted[:, None], depth[:, None], next_token[:, None], drafts, micro_nats],
                       dim=1)
    t2 = time.perf_counter()
    values = packed.tolist()  # the step's one device->host read
    committed = [row[3:3 + row[0]] + [row[2]] for row in values]
    logprobs = [[v / LOGPROB_SCALE for v in row[3 + k:4 + k + row[0]]] for row in values]
    return StepOutput(committed, [row[0] for row in values], [row[1] for row in values], logprobs,
                      t1 - t0, t2 - t1, None if text is None else text.rows)


def _advance(state: DecodeState, rows: Rows, drafts, accepted, next_token, next_hidden,
             keep_history: bool) -> None:
    """Move each row past its committed tokens, on the device: lengths, last token and
    hidden, and the guard's history (drafts [B,K'], accepted, next_token [B], next_hidden [B,d])."""
    state.lengths[rows] += accepted + 1
    state.last_token[rows] = next_token
    state.last_hidden[rows] = next_hidden
    if not keep_history:
        return
    k = drafts.shape[1]
    steps = torch.arange(k + 1, device=drafts.device)  # [T]
    # Row b commits drafts[b, :accepted] then next_token; later columns are written too and
    # lie past history_len. The buffer is 2T columns longer than any request; a free slot
    # stepped along by a fast engine stays inside it (the clamp, which no live row reaches).
    written = torch.cat([drafts, next_token[:, None]], dim=1)  # [B,T]
    written = torch.where(steps[None] == accepted[:, None], next_token[:, None], written)
    history, history_len = state.history[rows], state.history_len[rows]
    history.scatter_(1, history_len[:, None] + steps[None], written)
    if not isinstance(rows, slice):  # slot ids gathered a copy; a run of slots is a view
        state.history[rows] = history
    state.history_len[rows] = (history_len + accepted + 1).clamp(max=history.shape[1] - k - 1)
