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
from dataclasses import dataclass, field
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
    page = PageAssembly.start(image, requests, deadline)
    return page if requests else page.record(loaded, fp)


def write_record(tree: OutputTree, rel: str, record: PageRecord, formats: Collection[str]) -> None:
    """A page's files: its JSON, and its text in the other `formats`. A page not converted has
    its JSON (the reason) and no Markdown."""
    tree.write_page(rel, record, set(formats) if record.status in CONVERTED else set())


@dataclass
class PageAssembly:
    """One page's requests while they decode; a record once every request has ended."""

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
    logprob_sum: float = 0.0
    logprob_tokens: int = 0
    out_of_positions: int = 0  # truncated requests that the model's positions ended before their cap

    @classmethod
    def start(cls, image: PageImage, requests: list[DecodeRequest],
              deadline: float | None = None) -> PageAssembly:
        return cls(image, requests, [None] * len(requests), ["ok"] * len(requests), deadline)

    def add(self, index: int, text: str, status: str, stats=None, error: str | None = None) -> None:
        """Request `index` ended with `status`; `stats` (DecodeStats) is None when it never ran."""
        self.texts[index] = text
        self.statuses[index] = status
        if error:
            self.errors.append(error)
        if stats is not None:
            if status == "truncated" and stats.tokens < self.requests[index].max_new_tokens:
                self.out_of_positions += 1
            self.tokens += stats.tokens
            self.verify_steps += stats.verify_steps
            self.hist.update(stats.accepted_hist)
            self.drafted_by.update(stats.drafted_by)
            self.accepted_by.update(stats.accepted_by)
            self.logprob_sum += stats.logprob_sum
            self.logprob_tokens += stats.logprob_tokens

    @property
    def finished(self) -> bool:
        return all(t is not None for t in self.texts)

    @property
    def status(self) -> str:
        return max(self.statuses, key=STATUS_RANK.__getitem__) if self.statuses else "ok"

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
        text = loaded.adapter.assemble(self.requests, [t or "" for t in self.texts])
        quality = quality_flags(text)
        status, reason, note = self.verdict(text, quality, loaded.model.spec.min_mean_logprob)
        w, h = self.image.image.size
        return PageRecord(
            source=path_text(self.image.ref.path), page=self.image.ref.page, status=status, text=text,
            error=reason, note=note, width=w, height=h, dpi=round(self.image.dpi, 2), model=loaded.model_id,
            fingerprint=fp, tokens=self.tokens, requests=len(self.requests),
            verify_steps=self.verify_steps,
            mean_accepted=round(self.tokens / self.verify_steps, 3) if self.verify_steps else 0.0,
            accepted_histogram={str(k): v for k, v in sorted(self.hist.items())},
            quality=quality, mean_logprob=self.mean_logprob,
            drafters={k: {"drafted": self.drafted_by[k], "accepted": self.accepted_by[k]}
                      for k in sorted(self.drafted_by)})

    @property
    def mean_logprob(self) -> float | None:
        return round(self.logprob_sum / self.logprob_tokens, 4) if self.logprob_tokens else None

    def verdict(self, text: str, quality: dict[str, float], min_mean_logprob: float
                ) -> tuple[str, str | None, str | None]:
        """The converted page's status, why it is not ok, and a note on requests the engine
        stopped where too few stopped to flag the page. The engine's own stops (truncated,
        looping) come first, unless they are a small share (verdict.MAX_STOPPED_SHARE); then
        what the output and the page say (verdict.doubt)."""
        status, note = self.status, None
        if status != "ok":
            cap = max((r.max_new_tokens for r in self.requests), default=0)
            reason = request_reason(self.statuses, cap, self.out_of_positions)
            if stopped_share(self.statuses) > MAX_STOPPED_SHARE:
                return status, reason, None
            note = reason
        evidence = PageEvidence(text, self.image.ink, self.image.text_layer_chars,
                                self.mean_logprob, quality.get("repetition", 1.0), min_mean_logprob)
        reason = doubt(evidence)
        return ("degenerate", reason, note) if reason else ("ok", None, note)
