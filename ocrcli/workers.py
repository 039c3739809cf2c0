"""`ocrcli convert --workers N`: one converter process per device, one run.

The parent splits nothing itself: every worker collects the same inputs and keeps every N-th
page (`plan.worker_share`), loads its own model on its own device (a GPU each when there
are enough of them, else an equal share of the CPU threads) and writes its pages as a plain
run would. Pages are decoded batch-invariantly, so a page's files do not depend on which
worker made them or what it was batched with: N workers give the same bytes as one.

The parent forwards progress from a queue, relays signals once (workers sit in their own
process groups), and when every worker has ended it rewrites each document's manifest and
Markdown from the page files on disk (two workers may both have finished a document with
half of its pages) and merges the workers' summaries into `summary.json`.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from collections import Counter
from dataclasses import replace

import torch

from ocrcli.convert import Converter
from ocrcli.errors import ExitCode, InternalError, OcrCliError, UsageError, one_line
from ocrcli.inputs import display_path, path_text
from ocrcli.output import OutputTree
from ocrcli.plan import plan_run
from ocrcli.progress import DocumentPlan, PageEvent, Reporter
from ocrcli.settings import ConvertSettings, decode_threads
from ocrcli.summary import INTERRUPTED_MESSAGE, flagged_message, run_exit_code, run_summary

# A worker's exit that outranks the others' decides the run's code (ocrcli's ExitCode order:
# an interrupt, then a bug, then a problem with the whole run, then failed pages).
SEVERITY = [ExitCode.interrupted, ExitCode.internal_error, ExitCode.model_error,
            ExitCode.output_error, ExitCode.usage, ExitCode.pages_failed, ExitCode.pages_flagged,
            ExitCode.ok]


class ForwardingReporter(Reporter):
    """A worker's reporter: page progress and problems go to the parent's queue. Document
    lines and notices are the parent's to print (it sees whole documents and inputs)."""

    def __init__(self, events, worker: int):
        super().__init__("plain", quiet=True)
        self.events, self.worker = events, worker

    def start(self, documents: int, pages: int, plan: list[DocumentPlan] | None = None) -> None:
        self.events.put(("start", self.worker, (pages, plan)))

    def notice(self, message: str) -> None:
        pass

    def problem(self, message: str) -> None:
        self.events.put(("problem", self.worker, message))

    def page(self, tokens: int, verify_steps: int, event: PageEvent | None = None) -> None:
        self.events.put(("page", self.worker, (tokens, verify_steps, event)))

    def document(self, source: str, pages: dict[str, str], error: str | None) -> None:
        pass

    def finish(self, summary: dict) -> None:
        pass


def worker_devices(device: str, workers: int) -> list[str]:
    """Each worker's device: a GPU each when `device` allows CUDA and there are enough,
    otherwise the CPU (each worker then takes its share of the cores: `decode_threads`)."""
    if device in ("auto", "cuda") and torch.cuda.is_available() and torch.cuda.device_count() >= workers:
        return [f"cuda:{k}" for k in range(workers)]
    if device not in ("auto", "cpu"):
        raise UsageError(f"--workers {workers} with --device {device}: use --device auto (one "
                         "GPU per worker when there are enough) or --device cpu")
    return ["cpu"] * workers


def _worker_main(settings: ConvertSettings, events) -> None:
    os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the parent only; it relays it once
    k = settings.worker[0]
    try:
        code, summary = Converter(settings, ForwardingReporter(events, k)).run()
        events.put(("done", k, (int(code), summary)))
    except OcrCliError as exc:
        events.put(("error", k, (int(exc.exit_code), str(exc))))
    except KeyboardInterrupt:  # a second signal: the worker stopped at once
        events.put(("error", k, (int(ExitCode.interrupted), "interrupted")))
    except Exception as exc:  # a bug: the parent reports it once the others are done
        name, message = type(exc).__name__, one_line(exc)
        events.put(("bug", k, (name, message, traceback.format_exc())))
        events.put(("error", k, (int(ExitCode.internal_error), f"internal error: {name}: {message}")))
    except BaseException as exc:  # noqa: BLE001 - anything else still ends as one line
        events.put(("error", k, (int(ExitCode.pages_failed), f"{type(exc).__name__}: {one_line(exc)}")))


class _Relay:
    """Signals to the parent go to the workers, once each; the parent keeps collecting."""

    def __init__(self, procs: list) -> None:
        self.procs, self.count, self._old = procs, 0, {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.count += 1
        for p in self.procs:
            if p.pid is not None and p.is_alive():
                try:
                    os.kill(p.pid, signum)
                except ProcessLookupError:
                    pass

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def run_workers(settings: ConvertSettings, workers: int, reporter: Reporter) -> tuple[ExitCode, dict]:
    if settings.shard is not None:
        raise UsageError("--workers splits the run itself; give either --workers or --shard")
    docs = plan_run(settings, reporter).documents  # the workers leave the notices to this process
    devices = worker_devices(settings.device, workers)
    threads = settings.threads or decode_threads(settings.render_workers, workers)
    ctx = mp.get_context("spawn")  # no forked copies of torch's thread pools
    events = ctx.Queue()
    procs = [ctx.Process(target=_worker_main, daemon=False, name=f"ocrcli-worker-{k}",
                         args=(replace(settings, worker=(k, workers), device=devices[k - 1],
                                       threads=threads),
                               events))
             for k in range(1, workers + 1)]
    t0 = time.perf_counter()
    reporter.start(len(docs), 0)
    results: dict[int, tuple[int, dict | None, str | None]] = {}
    bugs: dict[int, tuple[str, str, str]] = {}  # worker -> (type name, message, traceback)
    todo = 0
    with _Relay(procs) as relay:
        for p in procs:
            p.start()
        while len(results) < workers:
            try:
                kind, k, data = events.get(timeout=0.5)
            except queue.Empty:
                for i, p in enumerate(procs, 1):  # a worker killed without a word
                    if i not in results and not p.is_alive() and p.exitcode is not None:
                        time.sleep(0.2)  # its last events may still be in the pipe
                        if events.empty():
                            results[i] = (int(ExitCode.pages_failed), None,
                                          f"worker {i} died (exit status {p.exitcode})")
                continue
            if kind == "start":
                todo += data[0]
                reporter.add_pages(*data)
            elif kind == "page":
                reporter.page(*data)
            elif kind == "problem":
                reporter.problem(data)
            elif kind == "done":
                results[k] = (data[0], data[1], None)
            elif kind == "error":
                results[k] = (data[0], None, data[1])
            elif kind == "bug":
                bugs[k] = data
        for p in procs:
            p.join()
        interrupted = relay.count > 0
    code, summary = _finish(settings, docs, results, time.perf_counter() - t0, interrupted, reporter)
    if bugs:  # after the summary, so the pages the other workers finished are counted
        raise InternalError(*bugs[min(bugs)])
    return code, summary


def _finish(settings: ConvertSettings, docs, results, elapsed: float, interrupted: bool,
            reporter: Reporter) -> tuple[ExitCode, dict]:
    summaries = [s for _, s, _ in results.values() if s is not None]
    errors = sorted((k, msg) for k, (_, _, msg) in results.items() if msg)
    for k, msg in errors:
        reporter.problem(f"worker {k}: {msg}")
    tree = OutputTree(settings.out, settings.faults)
    fp = summaries[0]["fingerprint"] if summaries else None
    if fp is not None:  # the documents as a whole, now that every worker's pages are in
        for doc in docs:
            if doc.error:
                reporter.document(display_path(doc.path), {}, doc.error)
                continue
            manifest = tree.write_document(doc.rel, path_text(doc.path), doc.page_count, fp)
            reporter.document(display_path(doc.path),
                              {str(p): manifest["pages"][str(p)] for p in doc.pages}, None)
    pages, faults = Counter(), Counter()
    for s in summaries:
        pages.update(s["pages"])
        faults.update(s.get("faults", {}))
    tokens = sum(s["tokens"] for s in summaries)
    steps = sum(s["verify_steps"] for s in summaries)
    failures = sorted((f for s in summaries for f in s["failures"]),
                      key=lambda f: (f["source"], f["page"] or 0))
    codes = {ExitCode(code) for code, _, _ in results.values()}
    if interrupted or any(s["interrupted"] for s in summaries):
        codes.add(ExitCode.interrupted)
    flagged = sorted((f for s in summaries for f in s.get("flagged", [])),
                     key=lambda f: (f["source"], f["page"]))
    code = next(c for c in SEVERITY if c in codes or c is ExitCode.ok)
    if code in (ExitCode.ok, ExitCode.pages_flagged):  # the merged pages decide (convert's policy)
        code = run_exit_code(False, failures, flagged, settings.accept)
    if code is ExitCode.pages_flagged:
        reporter.problem(flagged_message(flagged, settings.accept))
    model = summaries[0]["model"] if summaries else settings.model
    summary = run_summary(model, fp, docs, dict(sorted(pages.items())), failures,
                          code is ExitCode.interrupted, elapsed, tokens, steps, flagged) | {
        "workers": len(results),
        "worker_errors": [{"worker": k, "error": msg} for k, msg in errors],
        "faults": dict(sorted(faults.items())),
        "exit_code": int(code),
    }
    if settings.faults.armed:
        summary["injected_faults"] = settings.faults.armed
    if code is ExitCode.interrupted:
        reporter.problem(INTERRUPTED_MESSAGE)
    tree.write_json(settings.out / "summary.json", summary)
    reporter.finish(summary)
    return code, summary
