"""Output writers: per-page Markdown and JSON, per-document Markdown and manifest, and the
run summary. Every write is atomic (a temp file in the same folder, then rename), so a crash
or kill never leaves a half-written file, and what finished is never lost.

Layout under OUT:
    <rel>/page-0001.md      the page's Markdown
    <rel>/page-0001.json    text, status, timings, tokens, acceptance
    <rel>/manifest.json     page statuses and the settings fingerprint
    <rel>.md                the whole document, pages in order
    summary.json            the run
"""

from __future__ import annotations

import errno
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from ocrcli.errors import OutputError

DONE_STATUSES = ("ok", "truncated", "degenerate")  # pages a rerun with the same settings skips


@dataclass
class PageRecord:
    source: str
    page: int
    status: str  # ok | failed | degenerate | truncated | timeout
    text: str = ""
    error: str | None = None
    width: int = 0
    height: int = 0
    dpi: float = 0.0
    model: str = ""
    fingerprint: str = ""
    tokens: int = 0
    requests: int = 0
    decode_seconds: float = 0.0
    verify_steps: int = 0
    mean_accepted: float = 0.0
    accepted_histogram: dict[str, int] = field(default_factory=dict)
    quality: dict[str, float] = field(default_factory=dict)


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OutputError(f"no space left on the output device while writing {path}") from None
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_json(path: Path, obj) -> None:
    atomic_write(path, orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


def read_json(path: Path) -> dict | None:
    try:
        data = orjson.loads(path.read_bytes())
        return data if isinstance(data, dict) else None
    except (OSError, orjson.JSONDecodeError):
        return None


def check_writable(out: Path) -> None:
    """Fail before any work when the output folder cannot be written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".ocrcli-probe.", dir=out)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise OutputError(f"output folder {out} is not writable: {exc.strerror or exc}") from None


class OutputTree:
    def __init__(self, root: Path):
        self.root = root

    def doc_dir(self, rel: str) -> Path:
        path = (self.root / rel).resolve()
        if not path.is_relative_to(self.root.resolve()):  # names are sanitised; be sure anyway
            raise OutputError(f"refusing to write outside {self.root}: {rel}")
        return path

    def page_stem(self, rel: str, page: int) -> Path:
        return self.doc_dir(rel) / f"page-{page:04d}"

    def is_done(self, rel: str, page: int, fingerprint: str) -> bool:
        stem = self.page_stem(rel, page)
        record = read_json(stem.with_suffix(".json"))
        return (record is not None and record.get("fingerprint") == fingerprint
                and record.get("status") in DONE_STATUSES and stem.with_suffix(".md").exists())

    def write_page(self, rel: str, record: PageRecord, formats: set[str]) -> None:
        stem = self.page_stem(rel, record.page)
        if "md" in formats:
            atomic_write(stem.with_suffix(".md"), record.text.encode("utf-8"))
        # The JSON is written last: its presence with a matching fingerprint marks the page done.
        write_json(stem.with_suffix(".json"), asdict(record))

    def write_document(self, rel: str, source: str, page_count: int, fingerprint: str,
                       error: str | None = None) -> dict:
        """Manifest from the page files on disk, and the combined Markdown of done pages."""
        folder = self.doc_dir(rel)
        pages, parts = {}, []
        for n in range(1, page_count + 1):
            stem = folder / f"page-{n:04d}"
            record = read_json(stem.with_suffix(".json"))
            if record is None:
                pages[str(n)] = "missing"
                continue
            pages[str(n)] = record.get("status", "missing")
            md = stem.with_suffix(".md")
            if record.get("status") in DONE_STATUSES and md.exists():
                parts.append(f"<!-- page {n} -->\n\n" + md.read_text(encoding="utf-8").strip())
        manifest = {"source": source, "page_count": page_count, "fingerprint": fingerprint,
                    "pages": pages, "error": error}
        write_json(folder / "manifest.json", manifest)
        if parts:
            atomic_write(folder.with_name(folder.name + ".md"), ("\n\n".join(parts) + "\n").encode())
        return manifest
