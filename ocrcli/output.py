"""Output writers: per-page Markdown and JSON, per-document Markdown and manifest, and the
run summary. Every write is atomic (a temp file in the same folder, then rename), so a crash
or kill never leaves a half-written file, and what finished is never lost. A temp file names
the host and process that wrote it; one left behind by a killed process is removed by the
next run that writes beside it (never one a live process, such as another shard, is writing).

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
import re
import secrets
import socket
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from ocrcli.errors import OutputError, one_line
from ocrcli.faults import NO_FAULTS, Faults

DONE_STATUSES = ("ok", "truncated", "degenerate")  # pages a rerun with the same settings skips
PAGE_SEPARATOR = "<!-- page {page} -->"  # before each page in the whole-document Markdown


def markdown_bytes(text: str) -> bytes:
    """A Markdown file's bytes: the text, then exactly one newline, as POSIX text files end
    (`cat a.md b.md` keeps pages apart; a blank page is one empty line). The JSON keeps
    the text as the model wrote it."""
    return (text.rstrip() + "\n").encode("utf-8")


@dataclass
class PageRecord:
    source: str
    page: int
    status: str  # ok | truncated | degenerate | failed | timeout
    text: str = ""
    error: str | None = None  # why the page is not ok (one line)
    note: str | None = None  # requests the engine stopped, too few to flag the page (verdict.py)
    width: int = 0
    height: int = 0
    dpi: float = 0.0
    model: str = ""
    fingerprint: str = ""
    tokens: int = 0
    requests: int = 0
    rereads: int = 0  # requests that read an unsure region again from other crops
    verify_steps: int = 0
    mean_accepted: float = 0.0
    accepted_histogram: dict[str, int] = field(default_factory=dict)
    quality: dict[str, float] = field(default_factory=dict)
    mean_logprob: float | None = None  # per decoded token, the model's confidence in its reading
    drafters: dict[str, dict[str, int]] = field(default_factory=dict)  # head / text-layer: drafted, accepted


_TEMP = re.compile(r"^\.ocrcli-(?P<host>[A-Za-z0-9_-]{1,32})-(?P<pid>\d+)\.[^.]+\.tmp$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:32] or "host"


def _temp_prefix() -> str:
    # Short, so that it fits beside the longest name a file system allows.
    return f".ocrcli-{_host()}-{os.getpid()}."


def _create_temp(folder: Path) -> tuple[int, str]:
    """A new temp file in `folder`. Not tempfile.mkstemp: its files are private (0600), and
    outputs should get the usual permissions the umask gives."""
    for _ in range(100):
        tmp = os.path.join(folder, f"{_temp_prefix()}{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temp file name", str(folder))


def atomic_write(path: Path, data: bytes, inject_enospc: bool = False) -> None:
    """Write `data` to `path` through a temp file and a rename; `inject_enospc` is the test
    hook's full disk, failing half-way like a real one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _create_temp(path.parent)
    except OSError as exc:
        raise _output_error(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data[: len(data) // 2] if inject_enospc else data)
            if inject_enospc:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:  # an interrupt included: never leave the temp file behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise _output_error(path, exc) from None
        raise


def _output_error(path: Path, exc: OSError) -> OutputError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(f"no space left on the output device while writing {_show(path)}")
    return OutputError(f"cannot write {_show(path)}: {one_line(exc.strerror or exc)}")


def _show(path: Path) -> str:
    return one_line(os.fsencode(path).decode("utf-8", "backslashreplace"))


def remove_stale_temps(folder: Path) -> int:
    """Remove temp files that a killed ocrcli process on this host left in `folder`."""
    removed = 0
    host = _host()
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        m = _TEMP.match(name)
        if m is None or m["host"] != host or _alive(int(m["pid"])):
            continue
        try:
            os.unlink(folder / name)
            removed += 1
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


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
        fd, tmp = _create_temp(out)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise OutputError(f"output folder {_show(out)} is not writable: "
                          f"{one_line(exc.strerror or exc)}") from None
    remove_stale_temps(out)


@contextmanager
def removed_if_unused(out: Path) -> Iterator[None]:
    """A run that fails before writing anything (no documents, a bad model) leaves no empty
    output folder behind: the folders it created for `out` are removed again when they are
    still empty. A folder that existed before the run is never removed."""
    created = []  # `out` and the parents that check_writable's mkdir will create, deepest first
    for folder in (out, *out.absolute().parents):
        if os.path.lexists(folder):
            break
        created.append(folder)
    try:
        yield
    except BaseException:
        for folder in created:
            try:
                folder.rmdir()  # fails, as it should, on a folder that holds anything
            except OSError:
                break
        raise


class OutputTree:
    """Everything a run writes goes through here: paths stay under the root, and the count of
    files written drives the full-disk test hook."""

    def __init__(self, root: Path, faults: Faults = NO_FAULTS):
        self.root = root
        self.faults = faults
        self.files_written = 0
        self._swept: set[Path] = set()  # folders already cleared of stale temp files

    def write_bytes(self, path: Path, data: bytes) -> None:
        atomic_write(path, data, inject_enospc=self.faults.enospc_due(self.files_written))
        self.files_written += 1

    def write_json(self, path: Path, obj) -> None:
        self.write_bytes(path, orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
                         + b"\n")

    def doc_dir(self, rel: str) -> Path:
        path = (self.root / rel).resolve()
        if not path.is_relative_to(self.root.resolve()):  # names are sanitised; be sure anyway
            raise OutputError(f"refusing to write outside {_show(self.root)}: {_show(rel)}")
        return path

    def page_stem(self, rel: str, page: int) -> Path:
        return self.doc_dir(rel) / f"page-{page:04d}"

    def is_done(self, rel: str, page: int, fingerprint: str,
                formats: Collection[str] = ("md", "json"), retry: Collection[str] = ()) -> bool:
        """Whether a rerun with these settings can skip the page: its JSON is done under
        `fingerprint`. The JSON alone decides: it is always written and holds the page's
        text, so a wanted Markdown file that is missing (deleted, or the last run had
        `--format json`) is written back from it here instead of decoding the page again.
        `formats` is the run's --format set; the default is the CLI's. A page whose status is
        in `retry` (--retry degenerate,truncated) is converted again."""
        stem = self.page_stem(rel, page)
        record = read_json(stem.with_suffix(".json"))
        if (record is None or record.get("fingerprint") != fingerprint
                or record.get("status") not in DONE_STATUSES or record.get("status") in retry):
            return False
        md = stem.with_suffix(".md")
        if "md" in formats:
            text = record.get("text")
            if not isinstance(text, str):  # not a JSON this version wrote: decode again
                return False
            self._restore_markdown(md, text)
        return True

    def _restore_markdown(self, md: Path, text: str) -> None:
        """Write a page's Markdown back from its JSON's text when the file is missing, or
        when it holds the text without the final newline, as earlier builds wrote it (the
        page stays done; a file with other bytes, such as one edited by hand, is kept)."""
        try:
            current = md.read_bytes()
        except FileNotFoundError:
            current = None
        except OSError as exc:
            raise _output_error(md, exc) from None
        wanted = markdown_bytes(text)
        if current is None or (current != wanted and current == text.encode("utf-8")):
            self.write_bytes(md, wanted)

    def write_page(self, rel: str, record: PageRecord, formats: Collection[str]) -> None:
        stem = self.page_stem(rel, record.page)
        md = stem.with_suffix(".md")
        if "md" in formats:
            self.write_bytes(md, markdown_bytes(record.text))
        else:
            # A Markdown file from an earlier run would disagree with the new JSON (and the
            # combined document is built from the page files): a page's .md, where there is
            # one, always holds its JSON's text.
            try:
                md.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise _output_error(md, exc) from None
        # The JSON is written last: its presence with a matching fingerprint marks the page done.
        self.write_json(stem.with_suffix(".json"), asdict(record))

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
                text = md.read_text(encoding="utf-8", errors="replace").strip()
                parts.append(f"{PAGE_SEPARATOR.format(page=n)}\n\n{text}".rstrip())
        manifest = {"source": source, "page_count": page_count, "fingerprint": fingerprint,
                    "pages": pages, "error": error}
        self.write_json(folder / "manifest.json", manifest)
        if parts:
            self.write_bytes(folder.with_name(folder.name + ".md"), markdown_bytes("\n\n".join(parts)))
        for where in (folder, folder.parent):
            if where not in self._swept:
                self._swept.add(where)
                remove_stale_temps(where)
        return manifest
