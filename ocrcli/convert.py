"""Wires inputs -> render -> engine -> output, with progress, resume and signals.

Data flows one way. Pages are rendered ahead in worker processes; each rendered page becomes
one or more decode requests (model adapter); the engine interleaves requests of many pages in
its continuous batch; a page is assembled and written the moment its last request ends.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from ocrcli import __version__
from ocrcli.engine.policy import GATED_DEFAULT, DraftPolicy, default_policy
from ocrcli.errors import ExitCode, ModelLoadError, UsageError, one_line
from ocrcli.faults import Faults, faults_text
from ocrcli.inputs import (
    Document,
    PageRef,
    collect,
    display_path,
    document_names,
    empty_shard_notice,
    path_text,
)
from ocrcli.models.identity import ModelIdentity, quick_identity
from ocrcli.output import OutputTree, PageRecord, check_writable
from ocrcli.pages import CONVERTED, PageAssembly, failed_record
from ocrcli.progress import DocumentPlan, PageEvent, Reporter
from ocrcli.render import Renderer, RenderSettings

if TYPE_CHECKING:  # torch loads only when a page is to be decoded
    from ocrcli.engine.scheduler import Engine
    from ocrcli.models.base import DecodeRequest, LoadedModel



@dataclass
class ConvertSettings:
    inputs: list[str]
    out: Path
    formats: frozenset[str] = frozenset({"md", "json"})
    pages: set[int] | None = None
    dpi: int = 144
    max_pixels: int = 12_000_000
    model: str = "builtin"
    device: str = "auto"
    batch_size: int = 16
    draft_depth: int | None = None  # None: the model's gated default; 0: plain greedy
    min_prob: float = GATED_DEFAULT.min_prob
    min_path_prob: float = GATED_DEFAULT.min_path_prob
    max_new_tokens: int | None = None  # None: the model's own default
    prompt: str | None = None
    resume: bool = True
    render_workers: int = 1
    password: str | None = None
    shard: tuple[int, int] | None = None
    log: str = "plain"
    quiet: bool = False
    page_timeout: float | None = None  # seconds for one page: rendering, then decoding
    worker: tuple[int, int] | None = None  # (k, n): worker k of `--workers n` (see workers.py)
    threads: int | None = None  # torch threads; None: `decode_threads`
    mode: str | None = None  # image mode of a full-page model (--mode); None: its default
    cuda_graphs: bool = True  # on CUDA, compile each decode step whole and replay it as a graph
    accept: frozenset[str] = frozenset()  # flagged statuses that still exit 0 (--accept)
    retry: frozenset[str] = frozenset()  # done statuses a resumed run converts again (--retry)
    # Injected faults (tests only): read from the environment once, as the run's settings are
    # made, and armed only with OCRCLI_ENABLE_FAULTS=1 (faults.py).
    faults: Faults = field(default_factory=Faults.from_env)


def render_processes(s: ConvertSettings, todo: list[PageRef]) -> int:
    """Render worker processes for these pages: `--render-workers`, except that a lone image
    page without `--page-timeout` renders in this process. Starting a worker (a fresh
    interpreter that imports the renderer and the model's page preparation) takes longer than
    such a page, and the image was already opened here and checked against the pixel limit;
    a PDF always renders in a worker, where PDFium's crashes and memory stay contained. The
    decode threads still count `--render-workers`, so decoding is the same either way."""
    if len(todo) == 1 and todo[0].kind == "image" and s.page_timeout is None:
        return 0
    return s.render_workers


def decode_threads(render_workers: int, share: int = 1) -> int:
    """Torch threads for decoding: the cores the render workers leave, of this process's
    share of the machine. OpenMP threads spin while they wait, so a thread on a core that a
    renderer also needs slows both (scripts/bench_pipeline.py on 2 cores, built-in model:
    4.40 pages/s with 1 thread beside 1 render worker, 3.55 with 2). OMP_NUM_THREADS, when
    set, wins."""
    if os.environ.get("OMP_NUM_THREADS"):
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    return max(1, (os.cpu_count() or 1) // share - render_workers)


def fingerprint(identity: ModelIdentity, image_mode: str | None, s: ConvertSettings,
                max_new: int) -> str:
    """What can change a page's output. Draft settings cannot, so they are left out."""
    key = {"model": identity.model_id, "weights": identity.weights_hash, "prompt": s.prompt or "",
           "dpi": s.dpi, "max_pixels": s.max_pixels, "max_new_tokens": max_new}
    if image_mode is not None:  # full-page models only, so the built-in's fingerprints stay
        key["mode"] = image_mode
    return hashlib.sha256(orjson.dumps(key, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def loaded_fingerprint(loaded: LoadedModel, s: ConvertSettings, max_new: int) -> str:
    image_mode = getattr(getattr(loaded.adapter, "mode", None), "name", None)
    return fingerprint(ModelIdentity(loaded.model_id, loaded.weights_hash), image_mode, s, max_new)


def max_new_tokens(s: ConvertSettings, model_default: int) -> int:
    """The token cap per request: the option, else the model's default (`ModelSpec`). The
    engine lowers it further for a request whose prompt leaves fewer cache positions."""
    return s.max_new_tokens or model_default


def draft_policy(head_depth: int, s: ConvertSettings) -> DraftPolicy:
    """Gated drafting up to the head's depth by default; a fixed depth when one is given."""
    if s.draft_depth is None:
        return default_policy(head_depth, s.batch_size, s.min_prob, s.min_path_prob)
    return DraftPolicy(s.draft_depth)


def make_engine(loaded: LoadedModel, s: ConvertSettings, max_new: int,
                policy: DraftPolicy | None = None, proposer=None, exact: bool | None = None) -> Engine:
    """The engine for a loaded model under these settings (benchmarks may give their own
    draft policy, proposer and kernel choice)."""
    from ocrcli.engine.capture import CaptureSettings
    from ocrcli.engine.scheduler import Engine

    # The caches are sized from the model's spec: its prompt bound (a full-page model's prompt
    # holds hundreds of <image> slots) and its positions.
    policy = policy or draft_policy(loaded.model.spec.max_draft_depth, s)
    on_cuda = loaded.model.spec.device.type == "cuda"
    capture = CaptureSettings() if s.cuda_graphs and on_cuda and not exact else None
    return Engine(loaded.model, s.batch_size, max_new, policy, loaded.guard, proposer=proposer,
                  exact=exact, capture=capture, faults=s.faults)


def summary_name(shard: tuple[int, int] | None) -> str:
    """Shards that share OUT keep their own summaries instead of overwriting one."""
    return "summary.json" if shard is None else f"summary-shard-{shard[0]}-of-{shard[1]}.json"


def page_counts(counts: Counter, skipped: int) -> dict[str, int]:
    """The summary's `pages` block from per-status page counts."""
    # failed counts every page not converted; timeout is the part that ran out of time
    return {"converted": sum(counts[c] for c in CONVERTED), "skipped": skipped,
            "failed": counts["failed"] + counts["timeout"], "timeout": counts["timeout"],
            "ok": counts["ok"], "truncated": counts["truncated"], "degenerate": counts["degenerate"]}


def flagged_entry(source: str, page: int, status: str, reason: str | None) -> dict:
    """A converted page that is not ok, as `summary.json`'s `flagged` lists it."""
    return {"source": source, "page": page, "status": status, "reason": reason}


def run_exit_code(interrupted: bool, failures: list[dict], flagged: list[dict],
                  accept: Collection[str]) -> ExitCode:
    """The policy a script relies on: an interrupt, else failed pages or documents (1), else
    converted pages flagged degenerate or truncated that --accept does not accept (5), else 0."""
    if interrupted:
        return ExitCode.interrupted
    if failures:
        return ExitCode.pages_failed
    if any(f["status"] not in accept for f in flagged):
        return ExitCode.pages_flagged
    return ExitCode.ok


def flagged_message(flagged: list[dict], accept: Collection[str]) -> str | None:
    """The closing line of a run whose exit code its flagged pages decided."""
    counts = Counter(f["status"] for f in flagged if f["status"] not in accept)
    if not counts:
        return None
    parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return (f"{sum(counts.values())} pages flagged ({parts}; reasons in summary.json): exit code "
            f"{int(ExitCode.pages_flagged)}; --accept {','.join(sorted(counts))} exits 0 on them, "
            f"--retry {','.join(sorted(counts))} converts them again")


def run_summary(model: str, fp: str | None, docs: list[Document], pages: dict[str, int],
                failures: list[dict], interrupted: bool, elapsed: float, tokens: int,
                verify_steps: int, flagged: list[dict] | None = None) -> dict:
    """A run's `summary.json`, the same keys for `convert`, `--workers` and `ray-convert`."""
    return {
        "ocrcli_version": __version__,
        "model": model,
        "fingerprint": fp,
        "documents": len(docs),
        "documents_failed": sum(1 for d in docs if d.error),
        "pages": pages,
        "failures": failures,
        "flagged": flagged or [],
        "interrupted": interrupted,
        "seconds": round(elapsed, 3),
        "pages_per_s": round(pages["converted"] / elapsed, 4) if elapsed > 0 else 0.0,
        "tokens_per_s": round(tokens / elapsed, 2) if elapsed > 0 else 0.0,
        "mean_accepted": round(tokens / verify_steps, 3) if verify_steps else 0.0,
        "tokens": tokens,
        "verify_steps": verify_steps,
    }


def worker_share(docs: list[Document], worker: tuple[int, int]) -> list[Document]:
    """Worker k of n takes every n-th page of the run, counted across documents in input
    order, so one long PDF is split as evenly as many short ones. A document that cannot be
    opened goes to one worker only, so its failure is recorded once."""
    k, n = worker
    share, ordinal = [], 0
    for i, doc in enumerate(docs):
        if doc.error:
            if i % n == k - 1:
                share.append(doc)
            continue
        mine = []
        for p in doc.pages:
            if ordinal % n == k - 1:
                mine.append(p)
            ordinal += 1
        if mine:
            share.append(replace(doc, pages=mine))
    return share


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


class Converter:
    def __init__(self, settings: ConvertSettings, reporter: Reporter):
        self.s = settings
        self.report = reporter
        self.tree = OutputTree(settings.out, settings.faults)
        self._began: dict[tuple[int, int], float] = {}  # (document, page): when rendering began
        self.flagged: list[dict] = []  # converted pages that are not ok (flagged_entry)

    def run(self) -> tuple[ExitCode, dict]:
        with _Interrupt() as interrupt:
            return self._run(interrupt)

    def _load(self) -> LoadedModel:
        import torch

        from ocrcli.models.registry import load_model, resolve_device

        torch.set_num_threads(self.s.threads or decode_threads(self.s.render_workers))
        # The loaders raise ModelLoadError for what a model folder can get wrong (a missing
        # tensor, a bad config, no network); what the machine can get wrong is wrapped here.
        # Anything else is a bug in ocrcli: it is reported as one (exit 15), not as exit 3.
        device_errors = (torch.OutOfMemoryError, getattr(torch, "AcceleratorError", OSError))
        try:
            loaded = load_model(self.s.model, resolve_device(self.s.device), self.s.mode,
                                self.s.prompt)
        except device_errors as exc:
            raise ModelLoadError(f"cannot load --model {self.s.model} onto the device: "
                                 f"{type(exc).__name__}: {one_line(exc)}") from None
        except OSError as exc:  # its files cannot be read (permissions, I/O errors)
            raise ModelLoadError(f"cannot load --model {self.s.model}: {one_line(exc)}") from None
        return loaded

    def _run(self, interrupt: _Interrupt) -> tuple[ExitCode, dict]:
        s = self.s
        check_writable(s.out)
        docs, notices = collect(s.inputs, s.pages, s.shard, s.password, s.faults)
        if s.worker is not None:
            docs = worker_share(docs, s.worker)
        else:
            if s.faults.armed:  # never silent: these make pages fail on purpose
                self.report.notice(f"injected faults are armed ({faults_text(s.faults)})")
            for n in notices:  # with --workers, the parent tells them once
                self.report.notice(n)
            if not docs:
                return self._empty_shard()
        # A rerun over finished pages needs only the fingerprint; where it is known without
        # loading the model (and importing torch), a run with nothing to do ends in a blink.
        identity = quick_identity(s.model) if s.resume and s.mode is None else None
        loaded = None if identity is not None else self._load()
        max_new = max_new_tokens(s, identity.default_max_new_tokens if identity is not None
                                 else loaded.model.spec.default_max_new_tokens)
        fp = fingerprint(identity, None, s, max_new) if identity is not None \
            else loaded_fingerprint(loaded, s, max_new)
        self.fp, self.max_new = fp, max_new
        self.model_id = identity.model_id if identity is not None else loaded.model_id

        failures: list[dict] = []
        todo: list[PageRef] = []
        remaining: dict[int, int] = {}
        skipped = 0
        for i, doc in enumerate(docs):
            if doc.error:
                failures.append({"source": path_text(doc.path), "page": None, "error": doc.error})
                self.report.problem(f"{display_path(doc.path)}: {doc.error}")
                continue
            for p in doc.pages:
                if s.resume and self.tree.is_done(doc.rel, p, fp, s.formats, s.retry):
                    skipped += 1
                else:
                    todo.append(PageRef(i, doc.path, doc.kind, p))
                    remaining[i] = remaining.get(i, 0) + 1
        self.report.start(len(docs), len(todo),
                          [DocumentPlan(display_path(docs[i].path), n) for i, n in remaining.items()])
        for i, doc in enumerate(docs):  # nothing to do: documents are complete already
            if i not in remaining:
                self._finish_document(doc)
        if not todo:  # a rerun over finished pages: with a quick identity, no model was loaded
            return self._end(docs, Counter(), skipped, failures, 0.0, False, {})
        if loaded is None:  # the quick identity is what loading reports (tests/test_convert.py)
            loaded = self._load()
        self.loaded = loaded

        import torch

        try:
            engine = make_engine(loaded, s, max_new)
        except torch.OutOfMemoryError as exc:
            raise ModelLoadError(f"not enough device memory for --batch-size {s.batch_size} "
                                 f"({one_line(exc)}); try a smaller batch") from None
        # Adapters whose preparation pickles run it in the render workers, beside rendering.
        prepare = partial(loaded.adapter.page_requests, max_new_tokens=max_new) \
            if getattr(loaded.adapter, "prepares_in_worker", False) else None
        renderer = Renderer(RenderSettings(s.dpi, s.max_pixels, s.password, s.page_timeout, s.faults),
                            render_processes(s, todo), prefetch=max(2, 2 * s.render_workers),
                            prepare=prepare)
        counts = Counter()
        t0 = time.perf_counter()
        self.report.timing_from(t0)  # pages/s as the summary counts it: from here
        interrupted = False
        try:
            stream = renderer.stream(todo)
            pages: dict[int, PageAssembly] = {}
            queued: list[DecodeRequest] = []
            next_id = 0

            def take_page(block: bool) -> bool:
                nonlocal next_id
                img = stream.poll(block)
                if img is None:
                    return False
                pid, next_id = next_id, next_id + 1
                self._began[(img.ref.doc_index, img.ref.page)] = time.perf_counter() - img.render_seconds
                if img.error:
                    status = "timeout" if img.timed_out else "failed"
                    self._write_failed(docs, img.ref, failed_record(img, status, img.error,
                                                                    self.model_id, fp),
                                       failures, counts)
                    self._page_written(docs, img.ref, remaining)
                    return True
                try:
                    if img.prepare_error:
                        raise ValueError(img.prepare_error)
                    reqs = img.prepared if img.prepared is not None else \
                        loaded.adapter.page_requests(img.image, max_new)
                except Exception as exc:  # a page the model cannot read must not stop the run
                    message = str(exc) if img.prepare_error else f"cannot prepare page: {exc}"
                    self._write_failed(docs, img.ref, failed_record(img, "failed", one_line(message),
                                                                    self.model_id, fp),
                                       failures, counts)
                    self._page_written(docs, img.ref, remaining)
                    return True
                for j, r in enumerate(reqs):
                    r.key = (pid, j)
                # What rendering took counts against the page's time.
                deadline = None if s.page_timeout is None else \
                    time.perf_counter() + s.page_timeout - img.render_seconds
                state = PageAssembly.start(img, reqs, deadline)
                if not reqs:  # a blank page
                    self._write_page(docs, state, failures, counts)
                    self._page_written(docs, img.ref, remaining)
                else:
                    pages[pid] = state
                    queued.extend(reqs)
                return True

            def expired(key) -> bool:
                return pages[key[0]].expired()

            def finish(pid: int, j: int, tokens: list[int], status: str, stats, error) -> None:
                state = pages[pid]
                state.add(j, loaded.tokenizer.decode(tokens) if tokens else "", status, stats, error)
                if state.finished:
                    self._write_page(docs, pages.pop(pid), failures, counts)
                    self._page_written(docs, state.image.ref, remaining)

            def fetch(n: int, block: bool):
                # Checked per page: blank pages need no decoding, so a long run of them
                # never returns to the engine.
                while len(queued) < n and not stream.done and not interrupt.requested:
                    if not take_page(block and not queued):
                        break
                if interrupt.requested:
                    stream.stop()
                    return None
                if s.page_timeout is not None:  # requests of a page out of time never start
                    for r in [r for r in queued if expired(r.key)]:
                        queued.remove(r)
                        finish(*r.key, [], "timeout", None, None)
                if not queued:
                    return None if stream.done else []
                batch, queued[:] = queued[:n], queued[n:]
                return batch

            if not interrupt.requested:  # a signal while the model loaded: no new work
                for result in engine.run(fetch, expired if s.page_timeout is not None else None):
                    finish(*result.key, result.tokens, result.status, result.stats, result.error)
            interrupted = interrupt.requested
        except KeyboardInterrupt:
            interrupted = True
        finally:
            renderer.close()
        for i in list(remaining):  # documents cut short by an interrupt
            self._finish_document(docs[i])
        faults = {"oom_retries": engine.oom_retries, "render_workers_replaced": renderer.replaced}
        if engine.capture_error:
            self.report.notice(f"CUDA graph capture was turned off ({engine.capture_error}); "
                               "decoding ran eagerly")
        return self._end(docs, counts, skipped, failures, time.perf_counter() - t0, interrupted,
                         faults)

    def _empty_shard(self) -> tuple[ExitCode, dict]:
        """No documents: a usage error, unless the inputs have documents and `--shard K/N`
        gave this shard none of them. That shard is done, not wrong (its share may be empty
        by chance, as with fewer documents than shards), so it exits 0 with a zero-page
        summary, which is what a scheduler waiting for every shard's summary needs."""
        s = self.s
        total = len(document_names(s.inputs)) if s.shard is not None else 0
        if not total:
            raise UsageError("no PDF or image documents found in the inputs")
        self.report.notice(empty_shard_notice(s.shard, total))
        # No model is loaded for no pages: the fingerprint is recorded where it is cheap.
        identity = quick_identity(s.model) if s.mode is None else None
        self.model_id = identity.model_id if identity is not None else s.model
        self.fp = None if identity is None else \
            fingerprint(identity, None, s, max_new_tokens(s, identity.default_max_new_tokens))
        self.report.start(0, 0, [])
        return self._end([], Counter(), 0, [], 0.0, False, {})

    def _end(self, docs, counts, skipped, failures, elapsed, interrupted, faults) -> tuple[ExitCode, dict]:
        s = self.s
        summary = run_summary(self.model_id, self.fp, docs, page_counts(counts, skipped), failures,
                              interrupted, elapsed, counts["tokens"], counts["verify_steps"],
                              self.flagged)
        summary["faults"] = {"oom_retries": 0, "render_workers_replaced": 0} | faults
        if s.faults.armed:  # a run with injected faults says so where its results are
            summary["injected_faults"] = s.faults.armed
        code = run_exit_code(interrupted, failures, self.flagged, s.accept)
        summary["exit_code"] = int(code)
        if code is ExitCode.pages_flagged and s.worker is None:
            self.report.problem(flagged_message(self.flagged, s.accept))
        if interrupted:
            self.report.problem("interrupted: finished pages were kept; run the same command "
                                "again to convert the rest")
        if s.worker is None:  # a --workers parent merges its workers' summaries
            self.tree.write_json(s.out / summary_name(s.shard), summary)
        self.report.finish(summary)
        return code, summary

    def _write_page(self, docs: list[Document], state: PageAssembly, failures, counts: Counter) -> None:
        record = state.record(self.loaded, self.fp, self.s.page_timeout)
        if record.status not in CONVERTED:
            self._write_failed(docs, state.image.ref, record, failures, counts)
            return
        doc = docs[state.image.ref.doc_index]
        self.tree.write_page(doc.rel, record, set(self.s.formats))
        if record.status != "ok":
            self.flagged.append(flagged_entry(record.source, record.page, record.status, record.error))
            self.report.problem(f"{display_path(doc.path)} page {record.page}: {record.status}: "
                                f"{record.error}")
        counts[record.status] += 1
        counts["tokens"] += state.tokens
        counts["verify_steps"] += state.verify_steps
        self.report.page(state.tokens, state.verify_steps,
                         self._page_event(docs, state.image.ref, record))

    def _write_failed(self, docs: list[Document], ref: PageRef, record: PageRecord, failures,
                      counts: Counter) -> None:
        """A page with no text: its record holds the status and reason; the run counts it."""
        doc = docs[ref.doc_index]
        self.tree.write_page(doc.rel, record, set())
        failures.append({"source": record.source, "page": ref.page, "status": record.status,
                         "error": record.error})
        self.report.problem(f"{display_path(doc.path)} page {ref.page}: {record.error}")
        counts[record.status] += 1
        self.report.page(0, 0, self._page_event(docs, ref, record))

    def _page_event(self, docs: list[Document], ref: PageRef, record: PageRecord) -> PageEvent:
        """What the progress log says of a written page."""
        doc = docs[ref.doc_index]
        began = self._began.pop((ref.doc_index, ref.page), None)
        return PageEvent(display_path(doc.path), ref.page, record.status, record.error,
                         None if began is None else time.perf_counter() - began,
                         path_text(self.tree.page_stem(doc.rel, ref.page).with_suffix(".json")))

    def _page_written(self, docs, ref: PageRef, remaining: dict[int, int]) -> None:
        remaining[ref.doc_index] -= 1
        if remaining[ref.doc_index] == 0:
            del remaining[ref.doc_index]
            self._finish_document(docs[ref.doc_index])

    def _finish_document(self, doc: Document) -> None:
        if doc.error:
            self.tree.write_document(doc.rel, path_text(doc.path), 0, self.fp, doc.error)
            self.report.document(display_path(doc.path), {}, doc.error)
            return
        manifest = self.tree.write_document(doc.rel, path_text(doc.path), doc.page_count, self.fp)
        selected = {str(p): manifest["pages"][str(p)] for p in doc.pages}
        self.report.document(display_path(doc.path), selected, None)
