"""Continuous batching: a request queue feeding up to `batch_size` cache slots.

A finished slot is refilled at once; waiting requests are prefilled together. Requests from
many pages interleave, and results are yielded as each request ends, so the caller can
assemble a page when its last request is done.

Two faults end or reshape work without losing any. A request the caller says has expired
(its page ran past --page-timeout) is evicted with status `timeout`. Out of memory on the
device halves the rows per forward pass and runs the failed pass again on halves: each row's
step depends only on its own cache up to its length (rollback is by length, so a pass cut
short left nothing that counts), so the retry gives exactly the tokens the full pass would.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from ocrcli import faults
from ocrcli.engine.decode import StepOutput, decode_step
from ocrcli.engine.guard import banned_tokens, is_looping
from ocrcli.engine.policy import DraftPolicy
from ocrcli.models.base import DecodeRequest, DecoderModel, GuardConfig

# fetch(n, block) -> up to n requests; [] when none is ready (block=False); None when exhausted
RequestSource = Callable[[int, bool], "list[DecodeRequest] | None"]
# expired(request key) -> True when the request must stop now (its page ran out of time)
ExpiryCheck = Callable[[object], bool]
OOM_MESSAGE = "out of memory on the device, even decoding one request at a time"


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
    status: str  # ok | truncated | degenerate | timeout | failed
    stats: RequestStats
    error: str | None = None  # why, for failed


@dataclass
class _Slot:
    request: DecodeRequest
    tokens: list[int]
    stats: RequestStats
    status: str | None = None
    error: str | None = None


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
        self.rows_per_pass = batch_size  # halved on each out-of-memory error
        self.oom_retries = 0  # passes run again on halves, for the summary
        self.steps = 0  # decode passes so far (fault injection counts them)

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

    def run(self, source: RequestSource, expired: ExpiryCheck | None = None) -> Iterator[DecodeResult]:
        eos = self.model.eos_id
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
            if expired is not None:
                for slot in active.values():
                    if slot.status is None and expired(slot.request.key):
                        slot.status = "timeout"
                yield from self._reap(active, free)
            if not active:
                if exhausted:
                    return
                continue
            slot_ids = sorted(active)
            for part, out in self._passes(slot_ids, last_token, last_hidden, lengths, active):
                if out is None:  # not even one row fits on the device
                    for s in part:
                        active[s].status, active[s].error = "failed", OOM_MESSAGE
                    continue
                slots = torch.tensor(part)
                share = 1.0 / len(part)
                for i, s in enumerate(part):
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

    def _passes(self, slot_ids: list[int], last_token, last_hidden, lengths, active
                ) -> Iterator[tuple[list[int], StepOutput | None]]:
        """One decode step for `slot_ids`, in passes of at most `rows_per_pass` rows. A pass
        that runs out of memory is run again on halves (None: not even one row fits)."""
        todo = [slot_ids[i:i + self.rows_per_pass] for i in range(0, len(slot_ids), self.rows_per_pass)]
        while todo:
            part = todo.pop(0)
            slots = torch.tensor(part)
            self.steps += 1
            try:
                faults.check_oom(self.steps, len(part))
                faults.step_delay()
                out = decode_step(self.model, slots, last_token[slots], last_hidden[slots],
                                  lengths[slots], [active[s].tokens for s in part], self.policy,
                                  self.guard, self.proposer)
            except torch.OutOfMemoryError:
                _release_device_memory()
                if len(part) == 1:
                    yield part, None
                    continue
                half = (len(part) + 1) // 2
                self.rows_per_pass = min(self.rows_per_pass, half)
                self.oom_retries += 1
                todo[:0] = [part[:half], part[half:]]
                continue
            yield part, out

    def _prefill(self, ids: list[int], group: list[DecodeRequest], active) -> Iterator[tuple]:
        """Prefill in passes of at most `rows_per_pass` rows, halving on out-of-memory; a
        request that does not fit even alone ends as failed."""
        todo = [(ids[i:i + self.rows_per_pass], group[i:i + self.rows_per_pass])
                for i in range(0, len(ids), self.rows_per_pass)]
        while todo:
            part_ids, part = todo.pop(0)
            t0 = time.perf_counter()
            try:
                faults.check_oom(None, len(part))
                hidden, logits, plen = self.model.prefill(torch.tensor(part_ids), part)
            except torch.OutOfMemoryError:
                _release_device_memory()
                if len(part) == 1:
                    slot = _Slot(part[0], [], RequestStats(), status="failed", error=OOM_MESSAGE)
                    active[part_ids[0]] = slot
                    continue
                half = (len(part) + 1) // 2
                self.rows_per_pass = min(self.rows_per_pass, half)
                self.oom_retries += 1
                todo[:0] = [(part_ids[:half], part[:half]), (part_ids[half:], part[half:])]
                continue
            yield part_ids, part, hidden, logits, plen, (time.perf_counter() - t0) / len(part)

    def _admit(self, requests, free, active, last_token, lengths, last_hidden):
        by_len: dict[int, list[DecodeRequest]] = {}
        for r in requests:
            by_len.setdefault(len(r.prompt_ids), []).append(r)
        for same_length in by_len.values():
            slot_ids = [free.pop() for _ in same_length]
            for ids, group, hidden, logits, plen, dt in self._prefill(slot_ids, same_length, active):
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
            yield DecodeResult(slot.request.key, slot.tokens, slot.status, slot.stats, slot.error)


def _release_device_memory() -> None:
    """After an out-of-memory error: give the allocator's cached blocks back before retrying."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
