"""A run's `summary.json` and exit code, the same for `convert`, `--workers` and `ray-convert`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from ocrcli import __version__
from ocrcli.errors import ExitCode
from ocrcli.inputs import Document
from ocrcli.pages import CONVERTED

INTERRUPTED_MESSAGE = ("interrupted: finished pages were kept; run the same command again to "
                       "convert the rest")


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
