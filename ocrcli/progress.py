"""Progress for people and for logs.

On a terminal: rich bars for documents and pages with pages/s, tokens/s, mean accepted
tokens per verify step and ETA. Off a terminal (cron, CI): one plain line per document.
`--log json`: one JSON object per document. Problems always go to stderr, one line each.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table


@dataclass
class Counters:
    pages_done: int = 0
    tokens: int = 0
    verify_steps: int = 0
    started: float = field(default_factory=time.perf_counter)

    @property
    def elapsed(self) -> float:
        return max(1e-9, time.perf_counter() - self.started)

    @property
    def pages_per_s(self) -> float:
        return self.pages_done / self.elapsed

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.elapsed

    @property
    def mean_accepted(self) -> float:
        return self.tokens / self.verify_steps if self.verify_steps else 0.0


class Reporter:
    """Plain reporter: one line per document to stdout, problems to stderr."""

    def __init__(self, mode: str = "plain", quiet: bool = False, lines_to_stderr: bool = False):
        self.mode = mode
        self.quiet = quiet
        self.lines_to_stderr = lines_to_stderr  # stdout is reserved (e.g. `--summary -`)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self.counters = Counters()
        self._progress: Progress | None = None
        self._docs_task = self._pages_task = None

    def start(self, documents: int, pages: int) -> None:
        self.counters = Counters()
        if self.mode == "rich" and not self.quiet:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"), TimeRemainingColumn(), console=self.err,
                transient=False)
            self._progress.start()
            self._docs_task = self._progress.add_task("documents", total=documents, stats="")
            self._pages_task = self._progress.add_task("pages", total=pages, stats="")

    def add_pages(self, pages: int) -> None:
        """More pages to do, learnt after `start` (a `--workers` run hears of them per worker)."""
        if self._progress is not None:
            total = self._progress.tasks[self._pages_task].total or 0
            self._progress.update(self._pages_task, total=total + pages)

    def notice(self, message: str) -> None:
        if not self.quiet:
            self.err.print(f"ocrcli: {message}", markup=False)

    def problem(self, message: str) -> None:
        """Always shown, one line, no traceback."""
        self.err.print(f"ocrcli: {message}", markup=False)

    def page(self, tokens: int, verify_steps: int) -> None:
        c = self.counters
        c.pages_done += 1
        c.tokens += tokens
        c.verify_steps += verify_steps
        if self._progress is not None:
            stats = (f"{c.pages_per_s:.2f} pages/s  {c.tokens_per_s:.0f} tok/s  "
                     f"{c.mean_accepted:.2f} tok/verify")
            self._progress.update(self._pages_task, advance=1, stats=stats)

    def document(self, source: str, pages: dict[str, str], error: str | None) -> None:
        out = sys.stderr if self.lines_to_stderr else sys.stdout
        counts: dict[str, int] = {}
        for status in pages.values():
            counts[status] = counts.get(status, 0) + 1
        if self._progress is not None:
            self._progress.update(self._docs_task, advance=1)
        elif self.quiet:
            return
        elif self.mode == "json":
            out.buffer.write(orjson.dumps({"document": source, "pages": counts,
                                                  "error": error}) + b"\n")
            out.flush()
        else:
            summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no pages"
            print(f"{source}: {summary}" + (f" ({error})" if error else ""), file=out, flush=True)

    def finish(self, summary: dict) -> None:
        if self._progress is not None:
            self._progress.stop()
        if self.quiet or self.mode == "json":
            return
        table = Table(title="ocrcli summary", show_header=False) if self.mode == "rich" else None
        rows = [
            ("documents", summary["documents"]),
            ("pages converted", summary["pages"]["converted"]),
            ("pages skipped (already done)", summary["pages"]["skipped"]),
            ("pages failed", summary["pages"]["failed"]),
            ("pages/s", f"{summary['pages_per_s']:.2f}"),
            ("tokens/s", f"{summary['tokens_per_s']:.0f}"),
            ("mean tokens per verify step", f"{summary['mean_accepted']:.2f}"),
            ("seconds", f"{summary['seconds']:.1f}"),
        ]
        if table is not None:
            for k, v in rows:
                table.add_row(k, str(v))
            self.err.print(table)
        else:
            self.err.print("  ".join(f"{k}: {v}" for k, v in rows), markup=False)
