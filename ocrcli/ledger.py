"""A run's bookkeeping, page by page: what is left to do, and what each written page did.

The ledger hears which page ended how (`page_written`), wherever its files were written: by
`convert` in this process, or by the workers of `ray-convert`. From that it keeps the counts,
failures and flagged pages, reports progress, finishes each document the moment its last page
lands (manifest and combined Markdown) and builds `summary.json`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ocrcli.errors import ExitCode
from ocrcli.inputs import Document, PageRef, display_path, path_text
from ocrcli.output import OutputTree, PageRecord
from ocrcli.pages import CONVERTED
from ocrcli.progress import DocumentPlan, PageEvent, Reporter
from ocrcli.summary import flagged_entry, flagged_message, page_counts, run_exit_code, run_summary


@dataclass(frozen=True)
class DocumentWork:
    """The pages of one document that the run still has to convert."""

    index: int  # position in the run's document list
    document: Document
    pages: list[int]

    def refs(self) -> list[PageRef]:
        return [PageRef(self.index, self.document.path, self.document.kind, p) for p in self.pages]


@dataclass(frozen=True)
class PageOutcome:
    """What the ledger hears of one written page."""

    doc_index: int
    page: int
    status: str  # ok | truncated | degenerate | failed | timeout
    error: str | None = None
    tokens: int = 0
    verify_steps: int = 0
    seconds: float | None = None  # from rendering to written, where it is known

    @classmethod
    def of(cls, doc_index: int, record: PageRecord, seconds: float | None = None) -> PageOutcome:
        return cls(doc_index, record.page, record.status, record.error, record.tokens,
                   record.verify_steps, seconds)


class RunLedger:
    def __init__(self, tree: OutputTree, docs: list[Document], fingerprint: str | None,
                 model_id: str, reporter: Reporter, accept: frozenset[str] = frozenset()):
        self.tree = tree
        self.docs = docs
        self.fingerprint = fingerprint
        self.model_id = model_id
        self.report = reporter
        self.remaining: dict[int, int] = {}  # document index -> pages not yet written
        self.failures: list[dict] = []
        self.flagged: list[dict] = []  # converted pages that are not ok
        self.accept = accept  # flagged statuses that still exit 0 (--accept)
        self.counts: Counter = Counter()
        self.skipped = 0

    def plan(self, resume: bool, formats: frozenset[str] = frozenset({"md", "json"}),
             retry: frozenset[str] = frozenset()) -> list[DocumentWork]:
        """What is left to do; records unreadable documents and finishes complete ones."""
        work: list[DocumentWork] = []
        for i, doc in enumerate(self.docs):
            if doc.error:
                self.failures.append({"source": path_text(doc.path), "page": None,
                                      "error": doc.error})
                self.report.problem(f"{display_path(doc.path)}: {doc.error}")
                continue
            todo = [p for p in doc.pages
                    if not (resume and self.tree.is_done(doc.rel, p, self.fingerprint, formats, retry))]
            self.skipped += len(doc.pages) - len(todo)
            if todo:
                work.append(DocumentWork(i, doc, todo))
                self.remaining[i] = len(todo)
        self.report.start(len(self.docs), sum(len(w.pages) for w in work),
                          [DocumentPlan(display_path(w.document.path), len(w.pages)) for w in work])
        for i, doc in enumerate(self.docs):  # nothing to do: documents complete already
            if i not in self.remaining:
                self._finish_document(doc)
        return work

    def page_written(self, outcome: PageOutcome) -> None:
        doc = self.docs[outcome.doc_index]
        self.counts[outcome.status] += 1
        self.counts["tokens"] += outcome.tokens
        self.counts["verify_steps"] += outcome.verify_steps
        if outcome.status not in CONVERTED:
            self.failures.append({"source": path_text(doc.path), "page": outcome.page,
                                  "status": outcome.status, "error": outcome.error})
        elif outcome.status != "ok":
            self.flagged.append(flagged_entry(path_text(doc.path), outcome.page, outcome.status,
                                              outcome.error))
        output = self.tree.page_stem(doc.rel, outcome.page).with_suffix(".json")
        # A page that is not ok is told once, by the reporter's page event or line, with its
        # reason (progress.page_problem); no problem line of its own beside it.
        self.report.page(outcome.tokens, outcome.verify_steps, PageEvent(
            display_path(doc.path), outcome.page, outcome.status, outcome.error, outcome.seconds,
            path_text(output)))
        self.remaining[outcome.doc_index] -= 1
        if self.remaining[outcome.doc_index] == 0:
            del self.remaining[outcome.doc_index]
            self._finish_document(doc)

    def finish_remaining(self) -> None:
        """After an interrupt: manifests for documents cut short, listing their missing pages."""
        for i in list(self.remaining):
            self._finish_document(self.docs[i])
        self.remaining.clear()

    def _finish_document(self, doc: Document) -> None:
        source = path_text(doc.path)
        if doc.error:
            self.tree.write_document(doc.rel, source, 0, self.fingerprint, doc.error)
            self.report.document(display_path(doc.path), {}, doc.error)
            return
        manifest = self.tree.write_document(doc.rel, source, doc.page_count, self.fingerprint)
        self.report.document(display_path(doc.path),
                             {str(p): manifest["pages"][str(p)] for p in doc.pages}, None)

    def exit_code(self, interrupted: bool) -> ExitCode:
        return run_exit_code(interrupted, self.failures, self.flagged, self.accept)

    def closing_problem(self, interrupted: bool) -> str | None:
        """The line that explains an exit code decided by flagged pages."""
        if self.exit_code(interrupted) is ExitCode.pages_flagged:
            return flagged_message(self.flagged, self.accept)
        return None

    def summary(self, elapsed: float, interrupted: bool, extra: dict | None = None) -> dict:
        """`summary.json`: the run's counts, then `extra` (what only one path knows), then the
        exit code."""
        c = self.counts
        return run_summary(self.model_id, self.fingerprint, self.docs, page_counts(c, self.skipped),
                           self.failures, interrupted, elapsed, c["tokens"], c["verify_steps"],
                           self.flagged) | (extra or {}) | {
            "exit_code": int(self.exit_code(interrupted))}
