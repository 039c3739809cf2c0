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

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from ocrcli.engine.capture import CapturedSteps, CaptureSettings, capture_failures
from ocrcli.engine.decode import DecodeState, Rows, StepOutput, decode_step
from ocrcli.engine.guard import is_looping, whitelist_mask
from ocrcli.engine.policy import TEXT_DEFAULT, Drafter, DraftPolicy, TextDraftPolicy
from ocrcli.engine.text_draft import TextDrafts, text_proposer, upload_runs
from ocrcli.errors import one_line
from ocrcli.faults import NO_FAULTS, Faults
from ocrcli.models.base import DecodeRequest, DecoderModel, GuardConfig, ModelSpec

# fetch(n, block) -> up to n requests; [] when none is ready (block=False); None when exhausted
RequestSource = Callable[[int, bool], "list[DecodeRequest] | None"]
# expired(request key) -> True when the request must stop now (its page ran out of time)
ExpiryCheck = Callable[[object], bool]
OOM_MESSAGE = "out of memory on the device, even decoding one request at a time"
SPAN_BUCKET = 256  # a fast engine's attention reads 256 * 2^i cache positions


@dataclass
class RequestStats:
    tokens: int = 0  # generated tokens, EOS included when emitted
    verify_steps: int = 0
    accepted_hist: Counter = field(default_factory=Counter)  # accepted drafts per step -> count
    drafted: int = 0
    # per drafter ("head", "text-layer"): drafts verified, and drafts accepted
    drafted_by: Counter = field(default_factory=Counter)
    accepted_by: Counter = field(default_factory=Counter)
    logprob_sum: float = 0.0  # log-probabilities of the decoded tokens (the prefill's first has none)
    logprob_tokens: int = 0
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
    budget: int  # tokens it may generate (Engine.budget)
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
    """Drives one `DecoderModel` over a stream of requests, losslessly.

    An exact engine (the CPU's: batch-invariant kernels) steps only the active slots and lets
    attention read the whole static cache, so a row's bits never depend on its neighbours or
    on the step's length. A fast engine (a GPU's) steps every slot, dead ones included, and
    attention reads up to a length bucket: fixed shapes that CUDA graphs can replay.
    """

    def __init__(self, model: DecoderModel, batch_size: int, max_new_tokens: int,
                 policy: DraftPolicy, guard: GuardConfig | None = None, max_prompt: int | None = None,
                 proposer=None, exact: bool | None = None, span_bucket: int = SPAN_BUCKET,
                 capture: CaptureSettings | None = None, faults: Faults = NO_FAULTS,
                 drafter: Drafter | str = Drafter.HEAD, text_policy: TextDraftPolicy = TEXT_DEFAULT):
        self.model = model
        self.faults = faults  # injected out-of-memory and slow steps (tests only)
        self.spec: ModelSpec = model.spec
        self.batch_size = batch_size
        self.drafter = Drafter(drafter)
        if self.drafter in (Drafter.NONE, Drafter.TEXT_LAYER):  # the head stays idle
            policy = DraftPolicy(0)
        self.policy = DraftPolicy(min(policy.max_depth, self.spec.max_draft_depth), policy.min_prob,
                                  policy.min_path_prob) if proposer is None else policy
        # Drafts from the requests' text layers (None: this engine drafts from no text).
        self.text = text_proposer(self.drafter, text_policy, batch_size, self.spec.eos_id,
                                  self.spec.vocab_size, has_head=self.policy.max_depth > 0)
        # The most drafts one step may verify: the cache and the guard's history hold them.
        self.max_depth = max(self.policy.max_depth, text_policy.max_depth if self.text else 0)
        self.guard = guard or GuardConfig()
        self.proposer = proposer
        self.exact = self.spec.device.type == "cpu" if exact is None else exact
        if self.exact and self.spec.device.type != "cpu":
            raise ValueError("exact (batch-invariant) kernels exist for the CPU only")
        model.choose_kernels(self.exact)
        self.span_bucket = span_bucket
        prompt_bound = self.spec.prompt_bound if max_prompt is None else max_prompt
        self.max_len = cache_positions(self.spec, prompt_bound, max_new_tokens, self.max_depth)
        model.setup_cache(batch_size, self.max_len)
        # The step functions, compiled whole where asked (a fast engine's, on a GPU by default).
        self.stepper = model if capture is None else CapturedSteps(model, capture)
        self.capture_error: str | None = None  # why capture was given up, if it was
        self.guard_allowed = whitelist_mask(self.guard, self.spec.vocab_size, self.spec.device)
        history = max_new_tokens + 2 * self.max_depth + 4 if self.guard.ngram > 0 else 0
        self.state = DecodeState.empty(batch_size, self.spec.hidden_size, history, self.spec.device,
                                       self.spec.dtype)
        self.host_lengths = [0] * batch_size  # state.lengths as the host knows it
        self.rows_per_pass = batch_size  # halved on each out-of-memory error
        self.oom_retries = 0  # passes run again on halves, for the summary
        self.steps = 0  # decode passes so far (fault injection counts them)
        self.step_counter = None  # an OpCounter to run every decode step under (bench --count-ops)

    def budget(self, request: DecodeRequest) -> int:
        """Tokens the request may generate: its cap, or fewer where the cache ends first (a
        step writes K+1 positions past the row's length). Only the head's depth counts: text
        runs are cut to the room a step has (`_text_drafts`), so they never shorten a request."""
        return min(request.max_new_tokens, self.max_len - len(request.prompt_ids) - self.policy.max_depth)

    def _commit(self, slot: _Slot, tokens: list[int], eos: int,
                logprobs: list[float] | None = None) -> int:
        """Append tokens one at a time under the stop rules; return how many were taken."""
        for n, tok in enumerate(tokens, start=1):
            slot.stats.tokens += 1
            if logprobs is not None:
                slot.stats.logprob_sum += logprobs[n - 1]
                slot.stats.logprob_tokens += 1
            if tok == eos:
                slot.status = "ok"
                return n
            slot.tokens.append(tok)
            if is_looping(slot.tokens, self.guard):
                slot.status = "degenerate"
                return n
            if len(slot.tokens) >= slot.budget:
                slot.status = "truncated"
                return n
        return len(tokens)

    def run(self, source: RequestSource, expired: ExpiryCheck | None = None) -> Iterator[DecodeResult]:
        self.model.choose_kernels(self.exact)  # another engine may share the model
        free = list(range(self.batch_size))[::-1]
        active: dict[int, _Slot] = {}
        exhausted = False
        while True:
            if free and not exhausted:
                got = source(len(free), not active)
                if got is None:
                    exhausted = True
                elif got:
                    self._admit(got, free, active)
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
            with self.step_counter or contextlib.nullcontext():
                self._step(active)
            yield from self._reap(active, free)

    def _step(self, active: dict[int, _Slot]) -> None:
        """One decode step for every active slot, its results committed under the stop rules."""
        if self.exact:
            slot_ids = sorted(active)
        else:
            slot_ids = list(range(self.batch_size))
            self._rewind_free(active)
        for part, out in self._passes(slot_ids, active):
            if out is None:  # not even one row fits on the device
                for s in part:
                    if s in active:
                        active[s].status, active[s].error = "failed", OOM_MESSAGE
                continue
            share = 1.0 / len(part)
            for i, s in enumerate(part):
                self.host_lengths[s] += out.accepted[i] + 1
                if s not in active:  # a free slot stepped along with the batch
                    continue
                st = active[s].stats
                st.verify_steps += 1
                st.accepted_hist[out.accepted[i]] += 1
                st.drafted += out.drafted[i]
                if out.drafted[i]:
                    by = "text-layer" if out.text_rows and out.text_rows[i] else "head"
                    st.drafted_by[by] += out.drafted[i]
                    st.accepted_by[by] += out.accepted[i]
                st.draft_s += out.draft_s * share
                st.verify_s += out.verify_s * share
                self._commit(active[s], out.committed[i], self.spec.eos_id, out.logprobs[i])

    def _rows(self, part: list[int]) -> Rows:
        """A step's slots: a slice where they are a contiguous run (cache views, no gather)."""
        if part == list(range(part[0], part[0] + len(part))):
            return slice(part[0], part[0] + len(part))
        return torch.tensor(part, device=self.spec.device)

    def _span(self, part: list[int], active: dict[int, _Slot], depth: int | None = None) -> int | None:
        """Cache positions this step's attention reads: all of them on an exact engine; on a
        fast one, the smallest of span_bucket * 2^i that holds the step's last position (few
        shapes, so a captured step compiles a few times; free slots are kept inside the first
        bucket by `_rewind_free`). `depth`: the step's drafts, when text runs go deeper than
        the head."""
        if self.exact:
            return None
        need = max([self.host_lengths[s] for s in part if s in active], default=0)
        need += (self.policy.max_depth if depth is None else depth) + 1
        span = self.span_bucket
        while span < need:
            span *= 2
        return min(self.max_len, span)

    def _rewind_free(self, active: dict[int, _Slot]) -> None:
        """A fast engine steps free slots along with the batch. Send those that have walked
        half a bucket back to position 0, so they stay inside the cache and the first bucket."""
        stale = [s for s in range(self.batch_size)
                 if s not in active and self.host_lengths[s] >= self.span_bucket // 2]
        if not stale:
            return
        index = torch.tensor(stale, device=self.spec.device)
        self.state.lengths[index] = 0
        self.state.history_len[index] = 0
        for s in stale:
            self.host_lengths[s] = 0

    def _passes(self, slot_ids: list[int], active: dict[int, _Slot]
                ) -> Iterator[tuple[list[int], StepOutput | None]]:
        """One decode step for `slot_ids`, in passes that halve on out-of-memory (None: not
        even one row fits)."""

        def decode_pass(part: list[int]) -> StepOutput:
            self.steps += 1
            self.faults.check_oom(self.steps, len(part))
            self.faults.delay_step()
            return self._decode(part, active)

        return self._halving_passes(slot_ids, decode_pass)

    def _halving_passes(self, rows: list, run_pass: Callable[[list], object]
                        ) -> Iterator[tuple[list, object | None]]:
        """`run_pass` over `rows` in passes of at most `rows_per_pass` rows. A pass that runs
        out of device memory is run again on halves, and `rows_per_pass` stays halved for the
        passes after it; a lone row that does not fit yields None."""
        todo = [rows[i:i + self.rows_per_pass] for i in range(0, len(rows), self.rows_per_pass)]
        while todo:
            part = todo.pop(0)
            try:
                out = run_pass(part)
            except torch.OutOfMemoryError:
                _release_device_memory()
                if len(part) > 1:
                    half = (len(part) + 1) // 2
                    self.rows_per_pass = min(self.rows_per_pass, half)
                    self.oom_retries += 1
                    todo[:0] = [part[:half], part[half:]]
                    continue
                out = None
            yield part, out

    def _decode(self, part: list[int], active: dict[int, _Slot]) -> StepOutput:
        """One decode_step; a step that cannot be compiled for capture runs eagerly from then
        on (tracing fails before the step changes anything), and `capture_error` says why."""
        text = self._text_drafts(part, active) if self.text is not None else None
        depth = None if text is None else max(self.policy.max_depth, text.tokens.shape[1])
        step = (self.state, self._rows(part), self._span(part, active, depth), self.policy,
                self.guard, self.guard_allowed, self.proposer)
        try:
            return decode_step(self.stepper, *step, early_exit=self.exact, text=text)
        except capture_failures() as exc:
            if self.stepper is self.model:
                raise
            self.stepper, self.capture_error = self.model, one_line(exc)
            return decode_step(self.model, *step, early_exit=self.exact, text=text)

    def _text_drafts(self, part: list[int], active: dict[int, _Slot]) -> TextDrafts | None:
        """This pass's runs from the text layer, from the tokens each row has committed (on
        the host already). Every row of a pass writes as many positions as its deepest row,
        so runs are cut to what the cache holds past the pass's longest row."""
        room = self.max_len - 1 - max(self.host_lengths[s] for s in part)
        generated = [active[s].tokens if s in active else None for s in part]
        runs = self.text.propose(part, generated, room)
        return upload_runs(runs, self.spec.device, bucket=not self.exact, room=room)

    def _prefill(self, ids: list[int], group: list[DecodeRequest], active) -> Iterator[tuple]:
        """Prefill in passes of at most `rows_per_pass` rows, halving on out-of-memory; a
        request that does not fit even alone ends as failed."""

        def prefill_pass(pairs: list[tuple[int, DecodeRequest]]) -> tuple:
            t0 = time.perf_counter()
            self.faults.check_oom(None, len(pairs))
            hidden, logits, plen = self.model.prefill(torch.tensor([s for s, _ in pairs]),
                                                      [r for _, r in pairs])
            return hidden, logits, plen, (time.perf_counter() - t0) / len(pairs)

        for pairs, out in self._halving_passes(list(zip(ids, group)), prefill_pass):
            part_ids, part = [s for s, _ in pairs], [r for _, r in pairs]
            if out is None:
                active[part_ids[0]] = _Slot(part[0], [], RequestStats(), 0, status="failed",
                                            error=OOM_MESSAGE)
                continue
            yield part_ids, part, *out

    def _admit(self, requests: list[DecodeRequest], free: list[int], active: dict[int, _Slot]) -> None:
        """Prefill new requests into free slots and commit each one's first token."""
        by_len: dict[int, list[DecodeRequest]] = {}
        for r in requests:
            if self.budget(r) < 1:
                slot = _Slot(r, [], RequestStats(), 0, status="failed", error=_too_long(r, self.max_len))
                active[free.pop()] = slot
                continue
            by_len.setdefault(len(r.prompt_ids), []).append(r)
        for same_length in by_len.values():
            slot_ids = [free.pop() for _ in same_length]
            for ids, group, hidden, logits, plen, dt in self._prefill(slot_ids, same_length, active):
                first = logits.argmax(dim=-1)  # [B]; the guard bans nothing on an empty history
                self._start_rows(ids, first, hidden, plen)
                firsts, lengths = torch.stack([first, plen.to(first)]).tolist()
                for i, (s, r) in enumerate(zip(ids, group)):
                    slot = _Slot(r, [], RequestStats(prefill_s=dt), self.budget(r))
                    active[s] = slot
                    self.host_lengths[s] = lengths[i]
                    if self.proposer is not None and hasattr(self.proposer, "bind"):
                        self.proposer.bind(s, r.key, lengths[i], self.batch_size, self.spec.device)
                    if self.text is not None:
                        self.text.bind(s, r.draft_text)
                    self._commit(slot, [firsts[i]], self.spec.eos_id)

    def _start_rows(self, ids: list[int], first: torch.Tensor, hidden: torch.Tensor,
                    plen: torch.Tensor) -> None:
        """Device state of freshly prefilled slots: first token, hidden, length, history."""
        index = torch.tensor(ids, device=self.spec.device)
        st = self.state
        st.last_token[index] = first
        st.last_hidden[index] = hidden.to(st.last_hidden.dtype)
        st.lengths[index] = plen.to(st.lengths)
        if st.history.shape[1]:
            st.history[index, 0] = first
            st.history_len[index] = 1

    def _reap(self, active, free) -> Iterator[DecodeResult]:
        for s in [s for s, slot in active.items() if slot.status is not None]:
            slot = active.pop(s)
            free.append(s)
            yield DecodeResult(slot.request.key, slot.tokens, slot.status, slot.stats, slot.error)


def cache_positions(spec: ModelSpec, prompt_bound: int, max_new_tokens: int, depth: int) -> int:
    """Cache length for prompts up to `prompt_bound` and `max_new_tokens`, never past the
    model's positions."""
    return min(spec.max_positions, prompt_bound + max_new_tokens + depth + 2)


def _too_long(request: DecodeRequest, max_len: int) -> str:
    return (f"the prompt holds {len(request.prompt_ids)} tokens, and the model's {max_len} cache "
            "positions leave no room to generate")


def _release_device_memory() -> None:
    """After an out-of-memory error: give the allocator's cached blocks back before retrying."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
