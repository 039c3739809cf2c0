"""Inputs: find documents, count their pages, select pages and shards -> `PageRef`s.

Folders are searched recursively in a stable sorted order, globs are expanded, duplicates
are removed, and unknown file types are skipped with a notice. A document that cannot be
opened (corrupt, encrypted without a password, empty) is kept with its reason, so the run
records it instead of crashing. Output names are rooted at the command-line arguments and
keep the extension (`output_names`), so they stay the same when inputs come and go.
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
import struct
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ocrcli.errors import UsageError, one_line
from ocrcli.faults import NO_FAULTS, Faults

if TYPE_CHECKING:  # PDFium and Pillow load when a document is opened, not for `ocrcli --help`
    import pypdfium2 as pdfium
    from PIL import Image

PDF_SUFFIXES = {".pdf"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp", ".bmp"}
SUPPORTED = PDF_SUFFIXES | IMAGE_SUFFIXES
MAX_IMAGE_PIXELS = 200_000_000  # larger declared sizes are refused as decompression bombs
MAX_NAME_BYTES = 200  # an output name part; leaves room for '.md', a '~' suffix (255)


@dataclass
class Document:
    path: Path
    rel: str  # output path relative to -o, extension kept, '/'-separated (output_names)
    kind: str  # pdf | image
    page_count: int = 0
    error: str | None = None  # why it cannot be opened at all
    pages: list[int] = field(default_factory=list)  # selected 1-based pages


@dataclass(frozen=True)
class PageRef:
    doc_index: int
    path: Path
    kind: str
    page: int  # 1-based


def parse_pages(spec: str | None) -> set[int] | None:
    """'1-3,7' -> {1, 2, 3, 7}; None selects every page."""
    if not spec:
        return None
    pages: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if lo < 1 or hi < lo:
                    raise ValueError
                pages.update(range(lo, hi + 1))
            else:
                n = int(part)
                if n < 1:
                    raise ValueError
                pages.add(n)
        except ValueError:
            raise UsageError(f"--pages {spec!r}: expected 1-based pages like 1-3,7") from None
    return pages


def parse_shard(spec: str | None) -> tuple[int, int] | None:
    """'K/N' with 1 <= K <= N."""
    if not spec:
        return None
    try:
        k, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise UsageError(f"--shard {spec!r}: expected K/N, e.g. 2/8") from None
    if not 1 <= k <= n:
        raise UsageError(f"--shard {spec!r}: K must be between 1 and N")
    return k, n


def in_shard(rel: str, shard: tuple[int, int] | None) -> bool:
    """A stable hash of the relative path: adding a file never moves the others."""
    if shard is None:
        return True
    k, n = shard
    digest = int.from_bytes(hashlib.sha1(rel.encode("utf-8")).digest()[:8], "big")
    return digest % n == k - 1


def read_files_from(source: str) -> list[str]:
    """`--files-from FILE` (or `-`: stdin): one input per line, as `find ... > list` writes
    them. Only the line break is removed, so names with leading or trailing spaces stay
    whole; blank lines are skipped. Names are decoded as the OS decodes arguments, so a name
    that is not UTF-8 still reaches its file."""
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise UsageError(f"--files-from {display_path(source)}: "
                         f"{one_line(exc.strerror or exc)}") from None
    return [os.fsdecode(line) for line in data.split(b"\n") if line.strip()]


def document_names(inputs: list[str]) -> list[str]:
    """The output names of the documents the inputs find, as `collect` names them, without
    opening any of them."""
    found, _ = _find(inputs)
    return output_names(found)[0]


def empty_shard_notice(shard: tuple[int, int], total: int) -> str:
    """What `convert` and `status` say of a shard that the hash gave no documents."""
    return (f"shard {shard[0]}/{shard[1]} has no documents ({total} "
            f"document{'' if total == 1 else 's'} in all)")


def path_text(path: Path | str) -> str:
    """The path as valid UTF-8 text for JSON: a name with bytes that are not UTF-8 (Linux
    allows them) shows them as \\xNN escapes instead of failing to serialise."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def display_path(path: Path | str) -> str:
    """The path for a one-line message: newlines and other control characters escaped."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in path_text(path))


def _walk(folder: Path, notices: list[str]) -> list[Path]:
    found = []
    seen_dirs: set[tuple[int, int]] = set()
    for root, dirs, files in os.walk(folder, followlinks=True, onerror=lambda e: notices.append(
            f"skipped {display_path(e.filename)}: {e.strerror}")):
        try:
            st = os.stat(root)
        except OSError as exc:  # removed or made unreachable while we walk
            notices.append(f"skipped {display_path(root)}: {exc.strerror}")
            dirs[:] = []
            continue
        if (st.st_dev, st.st_ino) in seen_dirs:  # a symlink loop
            notices.append(f"skipped {display_path(root)}: folder visited twice (symlink loop)")
            dirs[:] = []
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        dirs.sort()
        found.extend(Path(root) / f for f in sorted(files))
    return found


def find_documents(inputs: list[str]) -> tuple[list[Path], list[str]]:
    """Expand files, folders and globs into supported files; return them and notices."""
    found, notices = _find(inputs)
    return [path for path, _ in found], notices


def _find(inputs: list[str]) -> tuple[list[tuple[Path, str]], list[str]]:
    """Supported files, each with the absolute folder its output name is relative to (see
    `output_names`), and notices. A file reached twice keeps its first argument's folder."""
    notices: list[str] = []
    candidates: list[tuple[Path, str]] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            # The folder's parent: the folder's own name leads its documents' names.
            base = os.path.dirname(os.path.abspath(p))
            candidates.extend((f, base) for f in _walk(p, notices))
        elif p.exists() or p.is_symlink():
            candidates.append((p, os.path.dirname(os.path.abspath(p))))
        elif glob.has_magic(item):
            base = _glob_base(item)
            matches = sorted(glob.glob(item, recursive=True))
            if not matches:
                notices.append(f"no match for {display_path(item)}")
            for m in matches:
                mp = Path(m)
                candidates.extend((f, base) for f in (_walk(mp, notices) if mp.is_dir() else [mp]))
        else:
            raise UsageError(f"input not found: {display_path(item)}")
    out, seen, unknown = [], set(), []
    for c, base in candidates:
        if c.suffix.lower() not in SUPPORTED:
            unknown.append(c)
            continue
        try:
            key = c.resolve()
        except (OSError, RuntimeError):
            key = c.absolute()
        if key in seen:
            continue
        seen.add(key)
        out.append((c, base))
    if len(unknown) == 1:
        notices.append(f"skipped {display_path(unknown[0])}: not a PDF or a supported image")
    elif unknown:
        notices.append(f"skipped {len(unknown)} files that are not PDFs or supported images "
                       f"(first: {display_path(unknown[0])})")
    return out, notices


def _glob_base(pattern: str) -> str:
    """The absolute folder before a glob's first wildcard: 'scans/**/*.pdf' -> .../scans.
    Matches are named relative to it, as the shell-expanded files would be named from their
    folder ('scans/*.pdf' gives 'x.pdf' either way)."""
    literal: list[str] = []
    for part in Path(pattern).parts:
        if glob.has_magic(part):
            break
        literal.append(part)
    return os.path.abspath(os.path.join(*literal) if literal else ".")


def output_names(found: list[tuple[Path, str]]) -> tuple[list[str], list[str]]:
    """Output names ('/'-separated, extension kept) for files with the folder each is named
    from, and notices about names that had to be changed to stay apart.

    A name is the file's path relative to its folder: for a file given directly, its own
    name; for a folder given, the folder's name and the path inside it; for a glob, the path
    after the glob's literal folder. It depends on nothing but the file and its argument, so
    adding or removing files or other arguments renames nothing, and with the extension kept
    `a.pdf` and `a.png` never meet. Two files can still arrive at one name (two arguments
    with the same name, names that clean up alike, or that differ only in case, which a
    case-insensitive file system would merge): the first in input order keeps it, each later
    one gets '~' and 8 hex digits of a hash of its path as given, so its name does not depend
    on its position either.
    """
    names: list[str] = []
    notices: list[str] = []
    used: set[str] = set()  # case-folded
    for path, base in found:
        # abspath, not Path.absolute(): it folds 'a/../b', so a '..' in an input path can
        # never become a '..' in an output path.
        absolute = os.path.abspath(path)
        rel = os.path.relpath(absolute, base)
        parts = rel.split(os.sep)
        if rel == os.pardir or rel.startswith(os.pardir + os.sep):  # a glob's '..' led out
            parts = [os.path.basename(absolute)]
        safe = [_safe_part(x) for x in parts]
        name = "/".join(safe)
        if name.casefold() in used:
            first = name
            tag = hashlib.sha1(os.fsencode(path)).hexdigest()[:8]
            stem = "/".join([*safe[:-1], _safe_part(parts[-1], room=len(tag) + 1)]) + "~" + tag
            name, n = stem, 1
            while name.casefold() in used:
                n += 1
                name = f"{stem}-{n}"
            notices.append(f"{display_path(path)}: output name {first} is taken by an earlier "
                           f"input; written as {name}")
        used.add(name.casefold())
        names.append(name)
    return names, notices


def relative_names(paths: list[Path]) -> list[str]:
    """Output names of files given directly, as `collect` names them (see `output_names`)."""
    return output_names([(p, os.path.dirname(os.path.abspath(p))) for p in paths])[0]


def _safe_part(part: str, room: int = 0) -> str:
    """A path component that cannot escape the output folder or be too long to write (`room`:
    bytes kept free for a suffix)."""
    text = path_text(part)  # bytes that are not UTF-8 become visible escapes
    cleaned = "".join("_" if (c in "\\/" or not c.isprintable()) else c for c in text)
    if cleaned in ("", ".", ".."):
        cleaned = cleaned.replace(".", "_") or "_"
    raw = cleaned.encode("utf-8")
    limit = MAX_NAME_BYTES - room
    if len(raw) > limit:  # cut, and keep names that differ only at the end apart
        digest = hashlib.sha1(raw).hexdigest()[:8]
        cleaned = raw[: limit - 9].decode("utf-8", "ignore") + "-" + digest
    return cleaned


def _check_file(path: Path, faults: Faults = NO_FAULTS) -> None:
    """Only regular, non-empty, readable files are opened: a FIFO or a device named *.pdf
    would block or never end."""
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("not a regular file (a pipe, socket or device)")
    if st.st_size == 0:
        raise ValueError("empty file (0 bytes)")
    faults.check_readable(path.name)  # the test hook: a file the OS would refuse
    with path.open("rb"):  # permissions, as the OS sees them, before a library hides why
        pass


def open_pdf(path: Path, password: str | None, faults: Faults = NO_FAULTS) -> pdfium.PdfDocument:
    """Open a PDF or raise ValueError with a one-line reason."""
    import pypdfium2 as pdfium

    try:
        _check_file(path, faults)
        try:
            return pdfium.PdfDocument(str(path), password=password)
        except pdfium.PdfiumError as exc:
            if not password or "password" not in str(exc).lower():
                raise
            # A batch's --password is not every document's: one with only an owner password
            # (an empty user password) must still open.
            return pdfium.PdfDocument(str(path), password=None)
    except pdfium.PdfiumError as exc:
        msg = str(exc).lower()
        if "password" in msg:
            raise ValueError("encrypted PDF: pass the password with --password"
                             if not password else "encrypted PDF: the password is wrong") from None
        raise ValueError(f"not a readable PDF ({one_line(exc).rstrip('.')})") from None
    except OSError as exc:
        raise ValueError(f"cannot read the file: {one_line(exc.strerror or exc)}") from None


def open_image(path: Path, faults: Faults = NO_FAULTS) -> Image.Image:
    """Open an image or raise ValueError with a one-line reason (bombs are refused)."""
    from PIL import Image

    try:
        _check_file(path, faults)
        Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
        with warnings.catch_warnings():  # the size is checked below, with a one-line reason
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(path)
        w, h = img.size
        if w * h > MAX_IMAGE_PIXELS:
            raise ValueError(f"image of {w}x{h} pixels is larger than the {MAX_IMAGE_PIXELS:,} "
                             "pixel limit (decompression bomb?)")
        return img
    except Image.DecompressionBombError:
        raise ValueError(f"image larger than the {MAX_IMAGE_PIXELS:,} pixel limit "
                         "(decompression bomb?)") from None
    except PermissionError as exc:
        raise ValueError(f"cannot read the file: {one_line(exc.strerror or exc)}") from None
    except (OSError, SyntaxError, struct.error) as exc:  # Pillow's parsers raise all three
        raise ValueError(f"not a readable image ({one_line(exc)})") from None


def count_pages(path: Path, kind: str, password: str | None, faults: Faults = NO_FAULTS) -> int:
    if kind == "pdf":
        doc = open_pdf(path, password, faults)
        try:
            return len(doc)
        finally:
            doc.close()
    img = open_image(path, faults)
    try:
        return getattr(img, "n_frames", 1)
    except (OSError, SyntaxError, struct.error, EOFError) as exc:  # frames past a corrupt one
        raise ValueError(f"not a readable image ({one_line(exc)})") from None


def collect(inputs: list[str], pages: set[int] | None = None, shard: tuple[int, int] | None = None,
            password: str | None = None, faults: Faults = NO_FAULTS
            ) -> tuple[list[Document], list[str]]:
    """Documents of the run with their selected pages, and notices for the user."""
    found, notices = _find(inputs)
    names, name_notices = output_names(found)
    notices.extend(name_notices)
    docs = []
    for (path, _), rel in zip(found, names):
        if not in_shard(rel, shard):
            continue
        kind = "pdf" if path.suffix.lower() in PDF_SUFFIXES else "image"
        doc = Document(path, rel, kind)
        try:
            doc.page_count = count_pages(path, kind, password, faults)
            if doc.page_count == 0:
                doc.error = "the document has no pages"
        except ValueError as exc:
            doc.error = str(exc)
        doc.pages = [p for p in range(1, doc.page_count + 1) if pages is None or p in pages]
        docs.append(doc)
    return docs, notices
