"""Progress for people and for logs.

On a terminal (`--log rich`): bars for documents and pages with the current document and page,
elapsed time, pages/s, tokens/s, mean accepted tokens per verify step and an ETA from the
pages left; an end table with every page status. Off a terminal (`--log plain`): timestamped
lines, one per document, and a heartbeat line whenever no progress line was written for
`heartbeat_s` seconds, so a watchdog never sees a silent log during a long document.
`--log json`: every line on stderr is one JSON event (start, page, document, progress,
notice, error, summary). Problems always go to stderr, one line each, `--quiet` or not: a page
that is not ok is one line (in json, its page event, with its status and reason), and an error
that ends the run is an `error` event with its `exit_code` (`error_event`).

pages/s is `summary.json`'s definition everywhere: pages converted (ok, truncated,
degenerate) per second since decoding began (`timing_from`); the end of a run shows the
summary's own figure.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TextIO

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

CONVERTED_STATUSES = ("ok", "truncated", "degenerate")  # pages.CONVERTED, without its imports
HEARTBEAT_ENV = "OCRCLI_HEARTBEAT_S"
DEFAULT_HEARTBEAT_S = 30.0  # under the few minutes CI watchdogs allow a silent job


def default_heartbeat_s() -> float:
    """Seconds of silence before a heartbeat line: $OCRCLI_HEARTBEAT_S, else 30."""
    try:
        return max(0.05, float(os.environ.get(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S)))
    except ValueError:
        return DEFAULT_HEARTBEAT_S


def timestamp() -> str:
    """Local time with its UTC offset, to the second: 2025-06-01T18:47:25+02:00."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def event_line(event: str, **fields) -> str:
    """One JSON event as a line of text: {"event": ..., "time": ..., fields...}."""
    return orjson.dumps({"event": event, "time": timestamp()} | fields, default=str).decode()


def error_event(message: str, exit_code: int, **fields) -> str:
    """The JSON event of an error that ends the run (`--log json`): the message of its
    `ocrcli: ` line and the exit code the run ends with."""
    return event_line("error", message=message, exit_code=exit_code, **fields)


def page_problem(event: PageEvent) -> str:
    """The one line that reports a page that is not ok: its reason, after its status where
    the page was converted but flagged (truncated, degenerate)."""
    status = f"{event.status}: " if event.status in CONVERTED_STATUSES else ""
    return f"{event.source} page {event.page}: {status}{event.reason or event.status}"


def format_eta(seconds: float | None) -> str:
    return "unknown" if seconds is None else str(timedelta(seconds=round(seconds)))


@dataclass(frozen=True)
class DocumentPlan:
    """A document and the number of its pages this run converts."""

    source: str  # display path, as in document lines
    pages: int


@dataclass(frozen=True)
class PageEvent:
    """One page written: its status, the one-line reason when not ok, and how long it took
    from the start of its rendering to its files on disk."""

    source: str
    page: int
    status: str  # ok | truncated | degenerate | failed | timeout
    reason: str | None = None
    seconds: float | None = None
    output: str | None = None  # the page's JSON record


@dataclass
class Counters:
    pages_done: int = 0  # pages finished, any status
    converted: int = 0  # ok, truncated, degenerate: what summary.json's pages_per_s counts
    pages_total: int = 0
    tokens: int = 0
    verify_steps: int = 0
    clock: Callable[[], float] = time.perf_counter
    started: float = 0.0

    def __post_init__(self) -> None:
        self.started = self.started or self.clock()

    @property
    def elapsed(self) -> float:
        return max(1e-9, self.clock() - self.started)

    @property
    def pages_per_s(self) -> float:
        return self.converted / self.elapsed

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.elapsed

    @property
    def mean_accepted(self) -> float:
        return self.tokens / self.verify_steps if self.verify_steps else 0.0

    @property
    def eta_s(self) -> float | None:
        """Pages left over pages/s; unknown until a page has been converted."""
        rate = self.pages_per_s
        return max(0, self.pages_total - self.pages_done) / rate if rate > 0 else None


@dataclass
class _DocState:
    planned: int = 0
    done: int = 0
    first_start: float | None = None  # clock time the earliest of its pages began


class Reporter:
    """Progress and problems of one run, in the form `mode` asks for (rich, plain, json)."""

    def __init__(self, mode: str = "plain", quiet: bool = False, lines_to_stderr: bool = False,
                 heartbeat_s: float | None = None, clock: Callable[[], float] = time.perf_counter,
                 timer: bool = True, out: TextIO | None = None, err: TextIO | None = None):
        self.mode = mode
        self.quiet = quiet
        self.lines_to_stderr = lines_to_stderr  # stdout is reserved (e.g. `--summary -`)
        self.heartbeat_s = default_heartbeat_s() if heartbeat_s is None else heartbeat_s
        self.clock = clock
        self.timer = timer  # tests drive `tick` themselves with a fake clock
        self._out, self._err = out, err  # None: sys.stdout/sys.stderr at the time of writing
        self.err = Console(file=err, stderr=err is None, highlight=False, soft_wrap=True)
        self.counters = Counters(clock=clock)
        self._docs: dict[str, _DocState] = {}
        self._current: str | None = None  # the document whose page finished last
        self._lock = threading.RLock()  # the heartbeat thread writes too
        # When the last progress line was written: the start, a document or a heartbeat line
        # (in json, any event). Problem lines do not count, so a run that flags many pages
        # still tells where it is and its ETA every heartbeat_s.
        self._last_progress = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._old_showwarning = None
        self._progress: Progress | None = None
        self._docs_task = self._pages_task = None

    # -- streams ------------------------------------------------------------------------------

    @property
    def _lines(self) -> TextIO:
        """Where document and heartbeat lines go (json events: always stderr)."""
        if self.mode == "json" or self.lines_to_stderr:
            return self._err or sys.stderr
        return self._out or sys.stdout

    def _write(self, text: str, stream: TextIO, progress: bool = False) -> None:
        with self._lock:
            if self.mode == "plain":
                text = f"{timestamp()} {text}"
            stream.write(text + "\n")
            stream.flush()
            if progress or self.mode == "json":
                self._last_progress = self.clock()

    def _event(self, event: str, **fields) -> None:
        """One JSON line on stderr: {"event": ..., "time": ..., fields...}."""
        self._write(event_line(event, **fields), self._err or sys.stderr)

    def _say(self, message: str) -> None:
        """A notice or problem as a line of its own, in the mode's form."""
        if self.mode == "rich":
            with self._lock:
                self.err.print(f"ocrcli: {message}", markup=False)
        else:
            self._write(f"ocrcli: {message}", self._err or sys.stderr)

    # -- the run ------------------------------------------------------------------------------

    def start(self, documents: int, pages: int, plan: list[DocumentPlan] | None = None) -> None:
        with self._lock:
            self.counters = Counters(pages_total=pages, clock=self.clock)
            self._docs, self._current = {}, None
            self._plan(plan or [])
            self._last_progress = self.clock()
        if self.quiet:
            return
        if self.mode == "rich":
            self._start_bars(documents, pages)
            return
        if self.mode == "json":
            self._event("start", documents=documents, pages=pages)
        else:
            todo = f"{_count(pages, 'page')} of " if pages else ""
            self._write(f"converting {todo}{_count(documents, 'document')}", self._lines,
                        progress=True)
        self._capture_warnings()
        if self.timer and self.heartbeat_s > 0:
            self._stop.clear()
            self._thread = threading.Thread(target=self._beat, name="ocrcli-heartbeat", daemon=True)
            self._thread.start()

    def _plan(self, plan: list[DocumentPlan]) -> None:
        for p in plan:
            self._docs.setdefault(p.source, _DocState()).planned += p.pages
        if self._current is None and plan:
            self._current = plan[0].source

    def timing_from(self, t0: float) -> None:
        """Count pages/s from `t0` (a `clock` time), as the summary does: from the start of
        decoding, not of model loading."""
        with self._lock:
            self.counters.started = t0

    def add_pages(self, pages: int, plan: list[DocumentPlan] | None = None) -> None:
        """More pages to do, learnt after `start` (a `--workers` run hears of them per worker)."""
        with self._lock:
            self.counters.pages_total += pages
            self._plan(plan or [])
        if self._progress is not None:
            self._progress.update(self._pages_task, total=self.counters.pages_total)

    def notice(self, message: str) -> None:
        if self.quiet:
            return
        if self.mode == "json":
            self._event("notice", message=message)
        else:
            self._say(message)

    def problem(self, message: str) -> None:
        """Always shown, one line, no traceback."""
        if self.mode == "json":
            self._event("error", message=message)
        else:
            self._say(message)

    def page(self, tokens: int, verify_steps: int, event: PageEvent | None = None) -> None:
        """A page was written. Without `event` (callers that know no more) it counts as
        converted. A page that is not ok is reported here, once: in json by its page event
        (status and reason), otherwise by a problem line; shown even with `--quiet`."""
        status = event.status if event is not None else "ok"
        with self._lock:
            c = self.counters
            c.pages_done += 1
            c.converted += status in CONVERTED_STATUSES
            c.tokens += tokens
            c.verify_steps += verify_steps
            if event is not None:
                self._page_seen(event)
        if self.mode == "json":
            if event is not None and (status != "ok" or not self.quiet):
                self._event("page", source=event.source, page=event.page, status=event.status,
                            reason=event.reason, seconds=_round(event.seconds),
                            output=event.output, tokens=tokens)
        elif event is not None and status != "ok":
            self._say(page_problem(event))
        if self.quiet:
            return
        if self._progress is not None:
            self._update_bars()
        self.tick()  # a heartbeat when the last progress line is heartbeat_s old

    def _page_seen(self, event: PageEvent) -> None:
        doc = self._docs.setdefault(event.source, _DocState())
        doc.done += 1
        begun = self.clock() - (event.seconds or 0.0)
        doc.first_start = begun if doc.first_start is None else min(doc.first_start, begun)
        self._current = event.source

    def document(self, source: str, pages: dict[str, str], error: str | None) -> None:
        counts = Counter(pages.values())
        with self._lock:
            doc = self._docs.get(source)
            # cut short by an interrupt: its pages are not all done, so the bar must not move
            complete = doc is None or error is not None or doc.done >= doc.planned
            seconds = None if doc is None or doc.first_start is None else \
                self.clock() - doc.first_start
            if complete and source == self._current:
                self._current = next((s for s, d in self._docs.items() if d.done < d.planned), None)
        if self._progress is not None:
            if complete:
                self._progress.update(self._docs_task, advance=1)
            self._update_bars()
        elif self.quiet:
            return
        elif self.mode == "json":
            self._event("document", source=source, pages=dict(sorted(counts.items())),
                        error=error, complete=complete, seconds=_round(seconds))
        else:
            summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no pages"
            self._write(f"{source}: {summary}" + (f" ({error})" if error else ""), self._lines,
                        progress=True)

    def finish(self, summary: dict) -> None:
        self._stop_heartbeat()
        if self._progress is not None:
            # the bar's last figure is the summary's, so the two never disagree
            self._update_bars(pages_per_s=summary.get("pages_per_s"))
            self._progress.stop()  # the bars stay as they were (an interrupt moves nothing)
        if self.quiet:
            return
        if self.mode == "json":
            self._event("summary", **summary)
            return
        rows = summary_rows(summary)
        if self.mode == "rich":
            table = Table(title="ocrcli summary", show_header=False)
            for k, v in rows:
                table.add_row(k, v)
            self.err.print(table)
        else:
            self._write("  ".join(f"{k}: {v}" for k, v in rows), self._err or sys.stderr)

    # -- heartbeat ----------------------------------------------------------------------------

    def heartbeat_text(self) -> str:
        """`page k/N of DOC, X pages/s, ETA h:mm:ss` for the document being worked on."""
        c = self.counters
        doc = self._docs.get(self._current) if self._current is not None else None
        where = f"page {doc.done}/{doc.planned} of {self._current}" if doc is not None else \
            f"page {c.pages_done}/{c.pages_total}"
        text = f"{where}, {c.pages_per_s:.2f} pages/s, ETA {format_eta(c.eta_s)}"
        if doc is not None and len(self._docs) > 1:
            text += f", {c.pages_done}/{c.pages_total} pages in all"
        return text

    def tick(self) -> None:
        """A heartbeat when no progress line was written for `heartbeat_s`; the timer calls
        it, and so does every finished page."""
        with self._lock:
            if self.quiet or self.mode == "rich":
                return
            if self.clock() - self._last_progress < self.heartbeat_s:
                return
            if self.mode == "json":
                c = self.counters
                doc = self._docs.get(self._current) if self._current is not None else None
                self._event("progress", source=self._current,
                            page=doc.done if doc else None, pages=doc.planned if doc else None,
                            pages_done=c.pages_done, pages_total=c.pages_total,
                            pages_per_s=round(c.pages_per_s, 4), eta_s=_round(c.eta_s))
            else:
                self._write(self.heartbeat_text(), self._lines, progress=True)

    def _beat(self) -> None:
        # Sleeps until the next line is due, so a gap never exceeds heartbeat_s by more than
        # the time the interpreter takes to wake this thread.
        while not self._stop.is_set():
            with self._lock:
                due = self._last_progress + self.heartbeat_s - self.clock()
            if due > 0:
                self._stop.wait(due)
                continue
            self.tick()

    def _stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._old_showwarning is not None:
            warnings.showwarning = self._old_showwarning
            self._old_showwarning = None

    def _capture_warnings(self) -> None:
        """Python warnings become notices, so json logs stay JSON and plain lines stay
        timestamped."""
        self._old_showwarning = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            self.notice(f"{category.__name__}: {message}")

        warnings.showwarning = show

    # -- rich ---------------------------------------------------------------------------------

    def _start_bars(self, documents: int, pages: int) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TextColumn("{task.fields[eta]}"),
            console=self.err, transient=False)
        self._progress.start()
        self._docs_task = self._progress.add_task("documents", total=documents, info="", eta="")
        self._pages_task = self._progress.add_task("pages", total=pages, info="", eta="")
        self._update_bars()

    def _update_bars(self, pages_per_s: float | None = None) -> None:
        with self._lock:
            c = self.counters
            rate = c.pages_per_s if pages_per_s is None else pages_per_s
            doc = self._docs.get(self._current) if self._current is not None else None
            now = f"{self._current} page {doc.done}/{doc.planned}" if doc is not None else ""
            stats = f"{rate:.2f} pages/s  {c.tokens_per_s:.0f} tok/s  {c.mean_accepted:.2f} tok/verify"
            eta = f"ETA {format_eta(c.eta_s)}" if c.pages_done < c.pages_total else ""
            done = c.pages_done
        self._progress.update(self._docs_task, info=now, eta=eta)
        self._progress.update(self._pages_task, completed=done, info=stats, eta=eta)


def summary_rows(summary: dict) -> list[tuple[str, str]]:
    """The end table: every page status and failed documents, from summary.json's fields."""
    pages = summary.get("pages", {})
    rows = [
        ("documents", summary.get("documents", 0)),
        ("documents failed", summary.get("documents_failed", 0)),
        ("pages ok", pages.get("ok", 0)),
        ("pages truncated", pages.get("truncated", 0)),
        ("pages degenerate", pages.get("degenerate", 0)),
        ("pages failed (timed out included)", pages.get("failed", 0)),
        ("pages timed out", pages.get("timeout", 0)),
        ("pages skipped (already done)", pages.get("skipped", 0)),
        ("pages/s", f"{summary.get('pages_per_s', 0.0):.2f}"),
        ("tokens/s", f"{summary.get('tokens_per_s', 0.0):.0f}"),
        ("mean tokens per verify step", f"{summary.get('mean_accepted', 0.0):.2f}"),
        ("seconds", f"{summary.get('seconds', 0.0):.1f}"),
    ]
    if summary.get("interrupted"):
        rows.append(("interrupted", "yes: run the same command again to convert the rest"))
    return [(k, str(v)) for k, v in rows]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)
