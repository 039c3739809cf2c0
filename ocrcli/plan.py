"""Planning a run, before any model is loaded: is OUT writable, which documents does this run
convert (its `--shard`, its share of `--workers`), and what did the scan of the inputs notice.
`convert`, the `--workers` parent and `ray-convert` all start here."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ocrcli.errors import UsageError
from ocrcli.faults import faults_text
from ocrcli.inputs import Document, collect, document_names, empty_shard_notice
from ocrcli.output import check_writable
from ocrcli.progress import Reporter
from ocrcli.settings import ConvertSettings


@dataclass(frozen=True)
class RunPlan:
    documents: list[Document]  # what this run converts, in input order
    # The inputs hold documents and `--shard K/N` gave this shard none of them. That shard is
    # done, not wrong (its share may be empty by chance, as with fewer documents than shards):
    # it exits 0 with a zero-page summary, which a scheduler waiting for every shard needs.
    empty_shard: bool = False


def plan_run(s: ConvertSettings, reporter: Reporter) -> RunPlan:
    """The documents of the run. Inputs that hold no documents at all are a usage error.
    A `--workers` worker keeps its share, and leaves the notices to the parent, which tells
    them once."""
    check_writable(s.out)
    docs, notices = collect(s.inputs, s.pages, s.shard, s.password, s.faults)
    if s.worker is not None:
        return RunPlan(worker_share(docs, s.worker))
    if s.faults.armed:  # never silent: these make pages fail on purpose
        reporter.notice(f"injected faults are armed ({faults_text(s.faults)})")
    for notice in notices:
        reporter.notice(notice)
    if docs:
        return RunPlan(docs)
    total = len(document_names(s.inputs)) if s.shard is not None else 0
    if not total:
        raise UsageError("no PDF or image documents found in the inputs")
    reporter.notice(empty_shard_notice(s.shard, total))
    return RunPlan([], empty_shard=True)


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
