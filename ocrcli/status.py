"""`ocrcli status`: how complete an output folder is, page by page.

Every page a run selects ends in one of three places:

- done: its JSON records ok, truncated or degenerate (a rerun with the same settings skips it);
- failed: its JSON records a failure, or its document cannot be opened at all;
- missing: no JSON yet, or (with a fingerprint to check against) one written under other
  settings, which a rerun would redo. Those are counted apart as `stale`.

The inputs are the authority on what a run should have produced: `status OUT INPUT...` finds
the documents as `convert` does (same names, same `--pages` and `--shard` selection), so pages
that no worker ever started count as missing. Without inputs, the manifests under OUT stand in
for them. A manifest is written when a document finishes, so a document cut short shows up as
page files without a manifest (`unfinished`), and a document no worker reached cannot be seen
at all: that mode says so in its notices.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ocrcli.errors import ExitCode, UsageError
from ocrcli.inputs import collect, document_names, empty_shard_notice, in_shard
from ocrcli.output import DONE_STATUSES, OutputTree, read_json

INCOMPLETE_STATES = ("failed", "missing", "stale")


@dataclass
class DocumentStatus:
    rel: str  # the document's folder under OUT
    source: str  # the input path, as the run (or the manifest) names it
    pages: dict[int, str] = field(default_factory=dict)  # selected page -> done status or INCOMPLETE_STATES
    errors: dict[int, str] = field(default_factory=dict)  # failed page -> its reason
    error: str | None = None  # the document itself cannot be opened
    unfinished: bool = False  # page files without a manifest: its page count is unknown

    @property
    def complete(self) -> bool:
        return (self.error is None and not self.unfinished
                and not any(s in INCOMPLETE_STATES for s in self.pages.values()))


@dataclass
class RunStatus:
    out: Path
    documents: list[DocumentStatus]
    fingerprints: Counter  # settings fingerprint -> done pages written under it
    from_inputs: bool  # False: the documents come from OUT's manifests
    notices: list[str] = field(default_factory=list)

    def page_counts(self) -> Counter:
        counts = Counter(s for d in self.documents for s in d.pages.values())
        counts["done"] = sum(counts[s] for s in DONE_STATUSES)
        counts["total"] = sum(len(d.pages) for d in self.documents)
        return counts

    @property
    def complete(self) -> bool:
        return all(d.complete for d in self.documents)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.ok if self.complete else ExitCode.pages_failed

    def to_json(self) -> dict:
        c = self.page_counts()
        return {
            "out": str(self.out),
            "from": "inputs" if self.from_inputs else "manifests",
            "complete": self.complete,
            "documents": len(self.documents),
            "documents_failed": sum(1 for d in self.documents if d.error),
            "documents_unfinished": sum(1 for d in self.documents if d.unfinished),
            "pages": {k: c[k] for k in ("total", "done", *DONE_STATUSES, *INCOMPLETE_STATES)},
            "fingerprints": dict(self.fingerprints),
            "incomplete": [_document_json(d) for d in self.documents if not d.complete],
            "notices": self.notices,
        }


def _document_json(d: DocumentStatus) -> dict:
    return {"rel": d.rel, "source": d.source, "error": d.error, "unfinished": d.unfinished,
            **{state: [p for p, s in d.pages.items() if s == state] for state in INCOMPLETE_STATES},
            "errors": {str(p): e for p, e in d.errors.items()}}


def _check_pages(tree: OutputTree, doc: DocumentStatus, selected: list[int], fingerprint: str | None,
                 seen: Counter) -> None:
    """Fill `doc.pages` from the page JSONs; count done pages per fingerprint into `seen`."""
    for page in selected:
        record = read_json(tree.page_stem(doc.rel, page).with_suffix(".json"))
        if record is None:
            doc.pages[page] = "missing"
            continue
        status, fp = record.get("status"), record.get("fingerprint")
        if status in DONE_STATUSES:
            if fingerprint is not None and fp != fingerprint:
                doc.pages[page] = "stale"
            else:
                doc.pages[page] = status
                seen[fp] += 1
        else:  # 'failed', and whatever failure statuses later versions add
            doc.pages[page] = "failed"
            doc.errors[page] = record.get("error") or str(status)


def status_from_inputs(out: Path, inputs: list[str], pages: set[int] | None = None,
                       shard: tuple[int, int] | None = None, password: str | None = None,
                       fingerprint: str | None = None) -> RunStatus:
    """Completeness of OUT against the documents `convert INPUT...` would process."""
    docs, notices = collect(inputs, pages, shard, password)
    if not docs:
        total = len(document_names(inputs)) if shard is not None else 0
        if not total:
            raise UsageError("no PDF or image documents found in the inputs")
        # As `convert --shard` says it: an empty shard is complete, not a mistake.
        notices.append(empty_shard_notice(shard, total))
    tree, seen, result = OutputTree(out), Counter(), []
    for doc in docs:
        status = DocumentStatus(doc.rel, str(doc.path), error=doc.error)
        _check_pages(tree, status, doc.pages, fingerprint, seen)
        result.append(status)
    return RunStatus(out, result, seen, True, notices)


def status_from_manifests(out: Path, pages: set[int] | None = None,
                          shard: tuple[int, int] | None = None,
                          fingerprint: str | None = None) -> RunStatus:
    """Completeness of OUT from what it records itself (see the module note for the limits)."""
    if not out.is_dir():
        raise UsageError(f"{out} is not a folder; to count what is missing, pass the inputs too")
    tree, seen, result = OutputTree(out), Counter(), []
    notices: list[str] = []
    with_manifest: set[Path] = set()
    for manifest in sorted(out.rglob("manifest.json")):
        data = read_json(manifest)
        if data is None or not isinstance(data.get("page_count"), int):
            notices.append(f"skipped {manifest}: not an ocrcli manifest")
            continue
        with_manifest.add(manifest.parent)
        rel = manifest.parent.relative_to(out).as_posix()
        if not in_shard(rel, shard):
            continue
        doc = DocumentStatus(rel, str(data.get("source", "")), error=data.get("error"))
        selected = [p for p in range(1, data["page_count"] + 1) if pages is None or p in pages]
        _check_pages(tree, doc, selected, fingerprint, seen)
        result.append(doc)
    # Page files in a folder with no manifest: a document whose run stopped before its end.
    for folder in sorted({p.parent for p in out.rglob("page-*.json")} - with_manifest):
        rel = folder.relative_to(out).as_posix()
        if not in_shard(rel, shard):
            continue
        found = sorted(int(p.stem.removeprefix("page-")) for p in folder.glob("page-*.json")
                       if p.stem.removeprefix("page-").isdigit())
        first = read_json(folder / f"page-{found[0]:04d}.json") if found else None
        doc = DocumentStatus(rel, str((first or {}).get("source", "")), unfinished=True)
        _check_pages(tree, doc, [p for p in found if pages is None or p in pages], fingerprint, seen)
        result.append(doc)
    if not result and _summary_documents(out, shard) != 0:  # 0: the summary of an empty shard
        raise UsageError(f"{out} holds no converted documents; to count what is missing, "
                         "pass the inputs too")
    unseen = _unseen_documents_notice(out, len(result), shard)
    result.sort(key=lambda d: d.rel)
    return RunStatus(out, result, seen, False, ([unseen] if unseen else []) + notices)


def _summary_documents(out: Path, shard: tuple[int, int] | None) -> int | None:
    """How many documents the runs' summaries in OUT count: `summary.json`'s, or the sum
    over a complete set of `summary-shard-K-of-N.json` (every K), whichever is larger; with
    `shard`, that shard's summary. None when no summary covers the documents asked about."""
    def documents(path: Path) -> int | None:
        value = (read_json(path) or {}).get("documents")
        return value if isinstance(value, int) else None

    if shard is not None:
        return documents(out / f"summary-shard-{shard[0]}-of-{shard[1]}.json")
    counts = [documents(out / "summary.json")]
    by_shards: dict[int, dict[int, int | None]] = {}
    for path in out.glob("summary-shard-*-of-*.json"):
        m = re.fullmatch(r"summary-shard-(\d+)-of-(\d+)\.json", path.name)
        if m:
            by_shards.setdefault(int(m[2]), {})[int(m[1])] = documents(path)
    for n, shards in by_shards.items():
        if set(shards) == set(range(1, n + 1)) and None not in shards.values():
            counts.append(sum(shards.values()))
    known = [c for c in counts if c is not None]
    return max(known) if known else None


def _unseen_documents_notice(out: Path, found: int, shard: tuple[int, int] | None) -> str | None:
    """A warning when the manifests may not be every document: no summary accounts for the
    runs (one is still going, stopped early, or a shard has not run), or the summaries count
    more documents than OUT has manifests for. None when a finished run's summary agrees."""
    expected = _summary_documents(out, shard)
    if expected is None:
        which = f"of shard {shard[0]}/{shard[1]}" if shard else "that covers every document"
        return (f"no run summary {which} in OUT (a run still going or stopped early, or a "
                "shard not run yet): documents that no worker started cannot be counted; "
                "pass the inputs to check against them")
    if found < expected:
        return (f"the runs' summaries count {expected} documents, OUT has {found}: documents "
                "that no worker started cannot be counted; pass the inputs to check against them")
    return None


def format_status(status: RunStatus, limit: int = 20) -> str:
    """A few lines for people: the counts, then the first `limit` incomplete documents."""
    c = status.page_counts()
    done = ", ".join(f"{c[s]} {s}" for s in DONE_STATUSES if c[s])
    lines = [f"{status.out}: {len(status.documents)} documents, {c['total']} pages: "
             f"{c['done']} done" + (f" ({done})" if done else "")
             + f", {c['failed']} failed, {c['missing']} missing"
             + (f", {c['stale']} stale (other settings)" if c["stale"] else "")]
    if len(status.fingerprints) > 1:
        lines.append(f"note: done pages come from {len(status.fingerprints)} settings fingerprints "
                     f"({', '.join(sorted(status.fingerprints))}); pass --fingerprint to count "
                     "one of them as done")
    incomplete = [d for d in status.documents if not d.complete]
    for d in incomplete[:limit]:
        lines.append(f"  {d.rel}: {_describe(d)}")
    if len(incomplete) > limit:
        lines.append(f"  ... and {len(incomplete) - limit} more incomplete documents (--json lists all)")
    lines.append("complete" if status.complete else
                 f"incomplete: {len(incomplete)} of {len(status.documents)} documents")
    return "\n".join(lines)


def _describe(d: DocumentStatus) -> str:
    if d.error:
        return f"cannot be opened ({d.error})"
    parts = ["unfinished (no manifest: its run stopped before the end)"] if d.unfinished else []
    for state in INCOMPLETE_STATES:
        pages = [p for p, s in d.pages.items() if s == state]
        if pages:
            parts.append(f"{state} page{'s' if len(pages) > 1 else ''} {_ranges(pages)}")
    first_error = next(iter(d.errors.items()), None)
    if first_error:
        parts.append(f"page {first_error[0]}: {first_error[1]}")
    return "; ".join(parts)


def _ranges(pages: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3,7', the same syntax as --pages."""
    out, start, prev = [], None, None
    for p in sorted(pages) + [None]:
        if start is not None and (p is None or p != prev + 1):
            out.append(f"{start}-{prev}" if prev != start else str(start))
            start = None
        if p is not None and start is None:
            start = p
        prev = p
    return ",".join(out)
