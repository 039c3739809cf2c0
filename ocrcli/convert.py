"""Wires inputs -> render -> engine -> output, with progress, resume and signals.

Data flows one way. Pages are rendered ahead in worker processes; each rendered page becomes
one or more decode requests (model adapter); the engine interleaves requests of many pages in
its continuous batch; a page is assembled and written the moment its last request ends.

    plan the run         plan.plan_run: OUT writable, the documents, notices
    know the model       its id, token cap and fingerprint (loading it only when needed)
    plan the pages       ledger.RunLedger.plan: what resume leaves to do
    feed the engine      PageFeed: rendered pages -> requests, as the engine has room
    sink the pages       PageSink: page files, then the ledger (counts, failures, documents)
    end                  summary.json and the exit code
"""

from __future__ import annotations

import signal
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from ocrcli.errors import ExitCode, ModelLoadError, one_line
from ocrcli.fingerprint import fingerprint, loaded_fingerprint
from ocrcli.inputs import PageRef
from ocrcli.ledger import PageOutcome, RunLedger
from ocrcli.model_setup import load_for_run, make_engine, max_new_tokens
from ocrcli.models.identity import quick_identity
from ocrcli.output import OutputTree, PageRecord
from ocrcli.pages import PageAssembly, start_page, write_record
from ocrcli.plan import RunPlan, plan_run
from ocrcli.progress import Reporter
from ocrcli.render import PageImage, Renderer, RenderSettings, RenderStream
from ocrcli.settings import ConvertSettings, decode_threads, render_processes
from ocrcli.summary import INTERRUPTED_MESSAGE, summary_name

if TYPE_CHECKING:  # torch loads only when a page is to be decoded
    from ocrcli.engine.scheduler import Engine, RequestStats
    from ocrcli.models.base import DecodeRequest, LoadedModel


class _Interrupt:
    """First SIGINT/SIGTERM: stop admitting work and finish what is in flight. Second: stop now.
    Installed for the whole run, so that SIGTERM, like SIGINT, always ends in exit code 130."""

    def __init__(self) -> None:
        self.requested = False
        self._old: dict[int, object] = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


@dataclass
class RunModel:
    """What the run knows of its model. `loaded` is None while the model's identity alone was
    enough (a rerun over finished pages, an empty shard)."""

    model_id: str
    max_new: int  # the token cap per request
    fingerprint: str | None  # None: an empty shard of a model not known without loading it
    loaded: LoadedModel | None = None


@dataclass(frozen=True)
class FaultCounts:
    """Faults the run recovered from, for the summary's `faults` block."""

    oom_retries: int = 0  # decode passes run again on halves after running out of memory
    render_workers_replaced: int = 0  # render workers that crashed or hung and were replaced


@dataclass
class PageSink:
    """Where a page goes once it has its record: its files under OUT, then the ledger, which
    counts it, records its failure or flag, reports it and finishes its document."""

    tree: OutputTree
    ledger: RunLedger
    formats: frozenset[str]
    # (document, page) -> when its rendering began, for the progress log's page time
    began: dict[tuple[int, int], float] = field(default_factory=dict)

    def rendered(self, image: PageImage) -> None:
        self.began[(image.ref.doc_index, image.ref.page)] = time.perf_counter() - image.render_seconds

    def write(self, ref: PageRef, record: PageRecord) -> None:
        write_record(self.tree, self.ledger.docs[ref.doc_index].rel, record, self.formats)
        began = self.began.pop((ref.doc_index, ref.page), None)
        seconds = None if began is None else time.perf_counter() - began
        self.ledger.page_written(PageOutcome.of(ref.doc_index, record, seconds))


@dataclass
class PageFeed:
    """The engine's request source: rendered pages in, their decode requests out, as many as
    the engine has room for. A page with nothing to decode goes to the sink at once; a decoded
    one when its last request ends (`finish`)."""

    stream: RenderStream
    loaded: LoadedModel
    max_new: int
    fingerprint: str
    page_timeout: float | None
    sink: PageSink
    interrupt: _Interrupt
    decoding: dict[int, PageAssembly] = field(default_factory=dict)  # page id -> its requests
    queued: list[DecodeRequest] = field(default_factory=list)  # not yet given to the engine
    next_id: int = 0

    def fetch(self, n: int, block: bool) -> list[DecodeRequest] | None:
        """Up to `n` requests; [] when none is ready; None when there will be no more."""
        # Checked per page: blank pages need no decoding, so a long run of them never
        # returns to the engine.
        while len(self.queued) < n and not self.stream.done and not self.interrupt.requested:
            if not self._take_page(block and not self.queued):
                break
        if self.interrupt.requested:
            self.stream.stop()
            return None
        if self.page_timeout is not None:  # requests of a page out of time never start
            for r in [r for r in self.queued if self.expired(r.key)]:
                self.queued.remove(r)
                self.finish(r.key, [], "timeout")
        if not self.queued:  # a page still decoding may yet reread a region
            return None if self.stream.done and not self.decoding else []
        batch, self.queued[:] = self.queued[:n], self.queued[n:]
        return batch

    def _take_page(self, block: bool) -> bool:
        image = self.stream.poll(block)
        if image is None:
            return False
        self.sink.rendered(image)
        page_id, self.next_id = self.next_id, self.next_id + 1
        page = start_page(image, page_id, self.loaded, self.max_new, self.fingerprint,
                          self.page_timeout)
        if isinstance(page, PageRecord):
            self.sink.write(image.ref, page)
        else:
            self.decoding[page_id] = page
            self.queued.extend(page.requests)
        return True

    def expired(self, key: tuple[int, int]) -> bool:
        return self.decoding[key[0]].expired()

    def write_read(self) -> int:
        """After decoding ended (an interrupt): the pages whose lines were all read once,
        though rereads were still to come, written as read so far. Returns their number."""
        ready = [page_id for page_id, page in self.decoding.items() if page.read_once]
        for page_id in ready:
            page = self.decoding.pop(page_id)
            self.sink.write(page.image.ref, page.record(self.loaded, self.fingerprint,
                                                        self.page_timeout))
        return len(ready)

    def finish(self, key: tuple[int, int], tokens: list[int], status: str,
               stats: RequestStats | None = None, error: str | None = None) -> None:
        """Request `key` ended; the page is written once it was its last. Rereads of an
        unsure region go first in the queue, so that their page is written soon."""
        page_id, index = key
        page = self.decoding[page_id]
        rereads = page.add(index, self.loaded.tokenizer.decode(tokens) if tokens else "",
                           status, stats, error)
        self.queued[:0] = rereads
        if page.finished:
            del self.decoding[page_id]
            self.sink.write(page.image.ref, page.record(self.loaded, self.fingerprint,
                                                        self.page_timeout))


class Converter:
    def __init__(self, settings: ConvertSettings, reporter: Reporter):
        self.s = settings
        self.report = reporter
        self.tree = OutputTree(settings.out, settings.faults)

    def run(self) -> tuple[ExitCode, dict]:
        with _Interrupt() as interrupt:
            return self._run(interrupt)

    def _run(self, interrupt: _Interrupt) -> tuple[ExitCode, dict]:
        s = self.s
        plan = plan_run(s, self.report)
        model = self._identify(plan)
        ledger = RunLedger(self.tree, plan.documents, model.fingerprint, model.model_id,
                           self.report, s.accept)
        todo = [ref for work in ledger.plan(s.resume, s.formats, s.retry) for ref in work.refs()]
        if not todo:  # a rerun over finished pages: with a quick identity, no model was loaded
            return self._end(ledger)
        loaded = model.loaded or self._load()  # the quick identity is what loading reports
        engine = self._engine(loaded, model.max_new)
        renderer = self._renderer(loaded, model.max_new, todo)
        sink = PageSink(self.tree, ledger, s.formats)
        t0 = time.perf_counter()
        self.report.timing_from(t0)  # pages/s as the summary counts it: from here
        interrupted = False
        try:
            feed = PageFeed(renderer.stream(todo), loaded, model.max_new, model.fingerprint,
                            s.page_timeout, sink, interrupt)
            if not interrupt.requested:  # a signal while the model loaded: no new work
                expired = feed.expired if s.page_timeout is not None else None
                for result in engine.run(feed.fetch, expired):
                    feed.finish(result.key, result.tokens, result.status, result.stats, result.error)
                unfinished = feed.write_read()
                if unfinished and not interrupt.requested:  # rereads the engine never got
                    raise RuntimeError(f"decoding ended before the rereads of {unfinished} "
                                       "pages (written as read once)")
            interrupted = interrupt.requested
        except KeyboardInterrupt:
            interrupted = True
        finally:
            renderer.close()
        ledger.finish_remaining()  # documents cut short by an interrupt
        if engine.capture_error:
            self.report.notice(f"CUDA graph capture was turned off ({engine.capture_error}); "
                               "decoding ran eagerly")
        return self._end(ledger, time.perf_counter() - t0, interrupted,
                         FaultCounts(engine.oom_retries, renderer.replaced))

    def _identify(self, plan: RunPlan) -> RunModel:
        """The model's id, token cap and fingerprint. A rerun over finished pages needs only
        the fingerprint; where it is known without loading the model (and importing torch), a
        run with nothing to do ends in a blink. An empty shard loads no model at all."""
        s = self.s
        cheap = s.mode is None and (s.resume or plan.empty_shard)
        identity = quick_identity(s.model) if cheap else None
        if identity is not None:
            max_new = max_new_tokens(s, identity.default_max_new_tokens)
            return RunModel(identity.model_id, max_new, fingerprint(identity, None, s, max_new))
        if plan.empty_shard:
            return RunModel(s.model, 0, None)
        loaded = self._load()
        max_new = max_new_tokens(s, loaded.model.spec.default_max_new_tokens)
        return RunModel(loaded.model_id, max_new, loaded_fingerprint(loaded, s, max_new), loaded)

    def _load(self) -> LoadedModel:
        import torch

        torch.set_num_threads(self.s.threads or decode_threads(self.s.render_workers))
        return load_for_run(self.s, self.s.device)

    def _engine(self, loaded: LoadedModel, max_new: int) -> Engine:
        import torch

        try:
            return make_engine(loaded, self.s, max_new)
        except torch.OutOfMemoryError as exc:
            raise ModelLoadError(f"not enough device memory for --batch-size {self.s.batch_size} "
                                 f"({one_line(exc)}); try a smaller batch") from None

    def _renderer(self, loaded: LoadedModel, max_new: int, todo: list[PageRef]) -> Renderer:
        s = self.s
        # Adapters whose preparation pickles run it in the render workers, beside rendering.
        prepare = partial(loaded.adapter.page_requests, max_new_tokens=max_new) \
            if getattr(loaded.adapter, "prepares_in_worker", False) else None
        return Renderer(RenderSettings(s.dpi, s.max_pixels, s.password, s.page_timeout, s.faults),
                        render_processes(s, todo), prefetch=max(2, 2 * s.render_workers),
                        prepare=prepare)

    def _end(self, ledger: RunLedger, elapsed: float = 0.0, interrupted: bool = False,
             faults: FaultCounts | None = None) -> tuple[ExitCode, dict]:
        s = self.s
        extra: dict = {"faults": asdict(faults or FaultCounts())}
        if s.faults.armed:  # a run with injected faults says so where its results are
            extra["injected_faults"] = s.faults.armed
        summary = ledger.summary(elapsed, interrupted, extra)
        if s.worker is None and (closing := ledger.closing_problem(interrupted)) is not None:
            self.report.problem(closing)  # a --workers parent says it once, for the whole run
        if interrupted:
            self.report.problem(INTERRUPTED_MESSAGE)
        if s.worker is None:  # a --workers parent merges its workers' summaries
            self.tree.write_json(s.out / summary_name(s.shard), summary)
        self.report.finish(summary)
        return ledger.exit_code(interrupted), summary
