"""One page from its image to its record: the steps `convert` and the workers of an external
engine (`distributed/page_decoder.py`) share, so the two paths cannot drift apart.

A rendered page becomes requests (`start_page`: the model adapter's `page_requests`), or at
once a record when there is nothing to decode: it failed to render or to be prepared, or it is
blank. Its requests decode in any order among other pages' requests, and once the last one has
ended the page's record is built: the worst request status is the page's (one failed request
fails the page), and the adapter assembles the texts into the page's Markdown.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ocrcli.errors import one_line
from ocrcli.inputs import path_text
from ocrcli.output import OutputTree, PageRecord
from ocrcli.quality import quality_flags
from ocrcli.render import PageImage
from ocrcli.verdict import MAX_STOPPED_SHARE, PageEvidence, doubt, request_reason, stopped_share

if TYPE_CHECKING:  # torch loads only when a page is to be decoded
    from ocrcli.models.base import DecodeRequest, LoadedModel

# A page takes the worst status of its requests; timeout and failed pages are not done, so a
# rerun converts them again.
STATUS_RANK = {"ok": 0, "truncated": 1, "degenerate": 2, "timeout": 3, "failed": 4}
CONVERTED = ("ok", "truncated", "degenerate")


def failed_record(image: PageImage, status: str, error: str, model_id: str, fp: str) -> PageRecord:
    """A page that could not be rendered, read or decoded: its status and reason, no text."""
    w, h = image.image.size if image.image is not None else (0, 0)
    return PageRecord(source=path_text(image.ref.path), page=image.ref.page, status=status,
                      error=error, width=w, height=h, model=model_id, fingerprint=fp)


def start_page(image: PageImage, key: object, loaded: LoadedModel, max_new_tokens: int, fp: str,
               page_timeout: float | None = None) -> PageAssembly | PageRecord:
    """A rendered page's decode requests, keyed `(key, index)`, to decode; or the page's record
    when there is nothing to decode: it could not be rendered or read (status failed or
    timeout, and why), or it is blank. A page that fails never stops the others."""
    if image.error:
        status = "timeout" if image.timed_out else "failed"
        return failed_record(image, status, image.error, loaded.model_id, fp)
    if image.prepare_error:  # the render worker could not prepare it
        return failed_record(image, "failed", one_line(image.prepare_error), loaded.model_id, fp)
    try:
        requests = image.prepared if image.prepared is not None else \
            loaded.adapter.page_requests(image.image, max_new_tokens)
    except Exception as exc:  # a page the model cannot read must not stop the run
        return failed_record(image, "failed", one_line(f"cannot prepare page: {exc}"),
                             loaded.model_id, fp)
    for j, r in enumerate(requests):
        r.key = (key, j)
    # What rendering took counts against the page's time.
    deadline = None if page_timeout is None else \
        time.perf_counter() + page_timeout - image.render_seconds
    page = PageAssembly.start(image, requests, deadline, key)
    return page if requests else page.record(loaded, fp)


def write_record(tree: OutputTree, rel: str, record: PageRecord, formats: Collection[str]) -> None:
    """A page's files: its JSON, and its text in the other `formats`. A page not converted has
    its JSON (the reason) and no Markdown."""
    tree.write_page(rel, record, set(formats) if record.status in CONVERTED else set())


@dataclass
class PageAssembly:
    """One page's requests while they decode; a record once every request has ended.

    A request the model read with too little confidence (`DecodeRequest.reread_below`) is read
    again from its `alternates`: `add` returns those requests, appended to the page's, and the
    page keeps, of each region's readings, the likeliest one that ended ok."""

    image: PageImage
    requests: list[DecodeRequest]
    texts: list[str | None]
    statuses: list[str]
    deadline: float | None = None  # perf_counter time by which decoding must end
    errors: list[str] = field(default_factory=list)  # why requests failed (out of memory)
    tokens: int = 0
    verify_steps: int = 0
    hist: Counter = field(default_factory=Counter)
    drafted_by: Counter = field(default_factory=Counter)  # per drafter: drafts verified
    accepted_by: Counter = field(default_factory=Counter)  # per drafter: drafts accepted
    # per request: the sum of its tokens' log-probabilities, and their number
    logprobs: list[tuple[float, int]] = field(default_factory=list)
    alternate_of: dict[int, int] = field(default_factory=dict)  # reread request -> the one it rereads
    key: object = None  # the page's part of its requests' keys, `(key, index)`
    out_of_positions: int = 0  # truncated requests that the model's positions ended before their cap

    @classmethod
    def start(cls, image: PageImage, requests: list[DecodeRequest],
              deadline: float | None = None, key: object = None) -> PageAssembly:
        n = len(requests)
        return cls(image, list(requests), [None] * n, ["ok"] * n, deadline,
                   logprobs=[(0.0, 0)] * n, key=key)

    def add(self, index: int, text: str, status: str, stats=None,
            error: str | None = None) -> list[DecodeRequest]:
        """Request `index` ended with `status`; `stats` (DecodeStats) is None when it never ran.
        Returns the requests that read its region again, now the page's too (often none)."""
        self.texts[index] = text
        self.statuses[index] = status
        if error:
            self.errors.append(error)
        if stats is None:
            return []
        self._count(index, status, stats)
        return self._rereads(index)

    def _count(self, index: int, status: str, stats) -> None:
        if index not in self.alternate_of:  # a reread's stop is not the page's
            if status == "truncated" and stats.tokens < self.requests[index].max_new_tokens:
                self.out_of_positions += 1
        self.tokens += stats.tokens
        self.verify_steps += stats.verify_steps
        self.hist.update(stats.accepted_hist)
        self.drafted_by.update(stats.drafted_by)
        self.accepted_by.update(stats.accepted_by)
        self.logprobs[index] = (stats.logprob_sum, stats.logprob_tokens)

    def _rereads(self, index: int) -> list[DecodeRequest]:
        """The alternates of request `index`, as requests of this page, when its reading ended
        ok with a mean log-probability under the request's `reread_below`."""
        request = self.requests[index]
        mean = _mean(*self.logprobs[index])
        if not request.alternates or self.statuses[index] != "ok" or mean is None \
                or mean >= request.reread_below:
            return []
        more = []
        for visual in request.alternates:
            j = len(self.requests)
            more.append(replace(request, key=(self.key, j), visual=visual, alternates=()))
            self.requests.append(more[-1])
            self.texts.append(None)
            self.statuses.append("ok")
            self.logprobs.append((0.0, 0))
            self.alternate_of[j] = index
        return more

    def _chosen(self) -> list[int]:
        """Per region (request not a reread), the request whose reading the page keeps: the
        likeliest of those that ended ok, the first reading where none did better."""
        best = list(range(len(self.requests)))
        for j, i in self.alternate_of.items():
            mean, kept = _mean(*self.logprobs[j]), _mean(*self.logprobs[best[i]])
            if self.statuses[j] == "ok" and mean is not None and kept is not None and mean > kept:
                best[i] = j
        return [best[i] for i in range(len(self.requests)) if i not in self.alternate_of]

    @property
    def finished(self) -> bool:
        return all(t is not None for t in self.texts)

    @property
    def read_once(self) -> bool:
        """Every region has its first reading (rereads may be to come)."""
        return all(t is not None for j, t in enumerate(self.texts) if j not in self.alternate_of)

    @property
    def status(self) -> str:
        """The worst status of the page's regions' first readings (a reread that did not end
        ok is not kept, and costs the page nothing)."""
        firsts = self._first_statuses()
        return max(firsts, key=STATUS_RANK.__getitem__) if firsts else "ok"

    def _first_statuses(self) -> list[str]:
        return [s for j, s in enumerate(self.statuses) if j not in self.alternate_of]

    def expired(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def record(self, loaded: LoadedModel, fp: str, page_timeout: float | None = None) -> PageRecord:
        """The page's record: its text, or (status timeout/failed) the reason it has none."""
        status = self.status
        if status == "timeout":
            return failed_record(self.image, status, f"decoding took longer than --page-timeout "
                                 f"{page_timeout:g}s; stopped", loaded.model_id, fp)
        if status not in CONVERTED:
            error = self.errors[0] if self.errors else "decoding failed"
            return failed_record(self.image, status, error, loaded.model_id, fp)
        chosen = self._chosen()
        text = loaded.adapter.assemble([self.requests[j] for j in chosen],
                                       [self.texts[j] or "" for j in chosen])
        quality = quality_flags(text)
        status, reason, note = self.verdict(text, quality, loaded.model.spec.min_mean_logprob)
        w, h = self.image.image.size
        return PageRecord(
            source=path_text(self.image.ref.path), page=self.image.ref.page, status=status, text=text,
            error=reason, note=note, width=w, height=h, dpi=round(self.image.dpi, 2), model=loaded.model_id,
            fingerprint=fp, tokens=self.tokens, requests=len(chosen), rereads=len(self.alternate_of),
            verify_steps=self.verify_steps,
            mean_accepted=round(self.tokens / self.verify_steps, 3) if self.verify_steps else 0.0,
            accepted_histogram={str(k): v for k, v in sorted(self.hist.items())},
            quality=quality, mean_logprob=self.mean_logprob,
            drafters={k: {"drafted": self.drafted_by[k], "accepted": self.accepted_by[k]}
                      for k in sorted(self.drafted_by)})

    @property
    def mean_logprob(self) -> float | None:
        """Per decoded token of the readings the page keeps."""
        kept = [self.logprobs[j] for j in self._chosen()]
        mean = _mean(sum(s for s, _ in kept), sum(n for _, n in kept))
        return None if mean is None else round(mean, 4)

    def verdict(self, text: str, quality: dict[str, float], min_mean_logprob: float
                ) -> tuple[str, str | None, str | None]:
        """The converted page's status, why it is not ok, and a note on requests the engine
        stopped where too few stopped to flag the page. The engine's own stops (truncated,
        looping) come first, unless they are a small share (verdict.MAX_STOPPED_SHARE); then
        what the output and the page say (verdict.doubt)."""
        status, note = self.status, None
        if status != "ok":
            cap = max((r.max_new_tokens for r in self.requests), default=0)
            firsts = self._first_statuses()
            reason = request_reason(firsts, cap, self.out_of_positions)
            if stopped_share(firsts) > MAX_STOPPED_SHARE:
                return status, reason, None
            note = reason
        evidence = PageEvidence(text, self.image.ink, self.image.text_layer_chars,
                                self.mean_logprob, quality.get("repetition", 1.0), min_mean_logprob)
        reason = doubt(evidence)
        return ("degenerate", reason, note) if reason else ("ok", None, note)


def _mean(total: float, count: int) -> float | None:
    return total / count if count else None
