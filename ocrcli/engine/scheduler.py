"""Continuous batching: a request queue feeding up to `batch_size` cache slots.

A finished slot is refilled at once; waiting requests are prefilled together. Requests from
many pages interleave, and results are yielded as each request ends, so the caller can
assemble a page when its last request is done.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from ocrcli.engine.decode import decode_step
from ocrcli.engine.draft import DraftPolicy
from ocrcli.engine.guard import banned_tokens, is_looping
from ocrcli.models.base import DecodeRequest, DecoderModel, GuardConfig

# fetch(n, block) -> up to n requests; [] when none is ready (block=False); None when exhausted
RequestSource = Callable[[int, bool], "list[DecodeRequest] | None"]


@dataclass
class RequestStats:
    tokens: int = 0  # generated tokens, EOS included when emitted
    verify_steps: int = 0
    accepted_hist: Counter = field(default_factory=Counter)  # accepted drafts per step -> count
    drafted: int = 0
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0

    @property
    def mean_accepted(self) -> float:
        """Tokens committed per verify step (accepted drafts + 1), as papers report tau."""
        return self.tokens / self.verify_steps if self.verify_steps else 0.0


@dataclass
class DecodeResult:
    key: object
    tokens: list[int]  # generated tokens, without EOS
    status: str  # ok | truncated | degenerate
    stats: RequestStats


@dataclass
class _Slot:
    request: DecodeRequest
    tokens: list[int]
    stats: RequestStats
    status: str | None = None


def list_source(requests: list[DecodeRequest]) -> RequestSource:
    pending = list(reversed(requests))

    def fetch(n: int, block: bool) -> list[DecodeRequest] | None:
        if not pending:
            return None
        return [pending.pop() for _ in range(min(n, len(pending)))]

    return fetch


class Engine:
    """Drives one `DecoderModel` over a stream of requests, losslessly."""

    def __init__(self, model: DecoderModel, batch_size: int, max_new_tokens: int,
                 policy: DraftPolicy, guard: GuardConfig | None = None, max_prompt: int = 64,
                 proposer=None):
        self.model = model
        self.batch_size = batch_size
        self.policy = DraftPolicy(min(policy.max_depth, model.max_draft_depth), policy.min_prob,
                                  policy.min_path_prob) if proposer is None else policy
        self.guard = guard or GuardConfig()
        self.proposer = proposer
        self.max_len = max_prompt + max_new_tokens + self.policy.max_depth + 2
        model.setup_cache(batch_size, self.max_len)

    def _commit(self, slot: _Slot, tokens: list[int], eos: int) -> int:
        """Append tokens one at a time under the stop rules; return how many were taken."""
        for n, tok in enumerate(tokens, start=1):
            slot.stats.tokens += 1
            if tok == eos:
                slot.status = "ok"
                return n
            slot.tokens.append(tok)
            if is_looping(slot.tokens, self.guard):
                slot.status = "degenerate"
                return n
            if len(slot.tokens) >= slot.request.max_new_tokens:
                slot.status = "truncated"
                return n
        return len(tokens)

    def run(self, source: RequestSource) -> Iterator[DecodeResult]:
        model, eos = self.model, self.model.eos_id
        free = list(range(self.batch_size))[::-1]
        active: dict[int, _Slot] = {}
        last_token = torch.zeros(self.batch_size, dtype=torch.long)
        lengths = torch.zeros(self.batch_size, dtype=torch.long)
        last_hidden: torch.Tensor | None = None
        exhausted = False
        while True:
            if free and not exhausted:
                got = source(len(free), not active)
                if got is None:
                    exhausted = True
                elif got:
                    last_hidden = self._admit(got, free, active, last_token, lengths, last_hidden)
                    yield from self._reap(active, free)
            if not active:
                if exhausted:
                    return
                continue
            slot_ids = sorted(active)
            slots = torch.tensor(slot_ids)
            out = decode_step(model, slots, last_token[slots], last_hidden[slots], lengths[slots],
                              [active[s].tokens for s in slot_ids], self.policy, self.guard,
                              self.proposer)
            share = 1.0 / len(slot_ids)
            for i, s in enumerate(slot_ids):
                st = active[s].stats
                st.verify_steps += 1
                st.accepted_hist[out.accepted[i]] += 1
                st.drafted += out.drafted[i]
                st.draft_s += out.draft_s * share
                st.verify_s += out.verify_s * share
                self._commit(active[s], out.committed[i], eos)
                lengths[s] += out.accepted[i] + 1
            last_token[slots] = out.next_token
            last_hidden[slots] = out.next_hidden
            yield from self._reap(active, free)

    def _admit(self, requests, free, active, last_token, lengths, last_hidden):
        by_len: dict[int, list[DecodeRequest]] = {}
        for r in requests:
            by_len.setdefault(len(r.prompt_ids), []).append(r)
        for group in by_len.values():
            ids = [free.pop() for _ in group]
            slots = torch.tensor(ids)
            t0 = time.perf_counter()
            hidden, logits, plen = self.model.prefill(slots, group)
            dt = (time.perf_counter() - t0) / len(group)
            if last_hidden is None:
                last_hidden = hidden.new_zeros(self.batch_size, hidden.shape[-1])
            for i, (s, r) in enumerate(zip(ids, group)):
                slot = _Slot(r, [], RequestStats(prefill_s=dt))
                active[s] = slot
                if self.proposer is not None and hasattr(self.proposer, "bind"):
                    self.proposer.bind(s, r.key, int(plen[i]))
                row = logits[i]
                banned = banned_tokens([], self.guard)
                if banned:
                    row = row.clone()
                    row[list(banned)] = float("-inf")
                first = int(row.argmax())
                self._commit(slot, [first], self.model.eos_id)
                last_token[s] = first
                lengths[s] = int(plen[i])
                last_hidden[s] = hidden[i]
        return last_hidden

    def _reap(self, active, free) -> Iterator[DecodeResult]:
        for s in [s for s, slot in active.items() if slot.status is not None]:
            slot = active.pop(s)
            free.append(s)
            yield DecodeResult(slot.request.key, slot.tokens, slot.status, slot.stats)
