"""Hostile inputs, generated: broken, lying, huge, encrypted and active PDFs, image bombs, odd
files and odd names. Shared by the test suite and scripts/stress.py.

Each generator writes files into a folder and returns `Hostile` records saying what a correct
run does with each: convert it, record a failure for it, either of the two (a byte-flipped PDF
may still open), or skip it as not a document. PDFs are written byte by byte here, so that
their defects are exactly the ones named; pikepdf (a test dependency) encrypts and attaches.
"""

from __future__ import annotations

import io
import os
import random
import socket
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

CONVERT, FAIL, SKIP = "convert", "fail", "skip"
EITHER = frozenset({CONVERT, FAIL})


@dataclass(frozen=True)
class Hostile:
    path: Path
    kind: str
    expect: frozenset[str]  # outcomes a correct run may give this input


def _h(path: Path, kind: str, *expect: str) -> Hostile:
    return Hostile(path, kind, frozenset(expect))


# --------------------------------------------------------------------------- PDF writing


def stream(data: bytes, entries: bytes = b"", flate: bool = False) -> bytes:
    if flate:
        data, entries = zlib.compress(data), entries + b" /Filter /FlateDecode"
    return b"<< /Length %d%s >>\nstream\n" % (len(data), entries) + data + b"\nendstream"


def build_pdf(objects: list[bytes], root: int = 1, trailer: bytes = b"") -> bytes:
    """A PDF with objects numbered from 1 in order, a classic xref table and trailer."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root %d 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, root, trailer, xref)
    return bytes(out)


def text_content(lines: list[str], top: float = 720, size: int = 14) -> bytes:
    ops = []
    for i, line in enumerate(lines):
        text = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        ops.append(f"BT /F1 {size} Tf 72 {top - i * size * 1.8:.1f} Td ({text}) Tj ET")
    return "\n".join(ops).encode("latin-1")


def pages_pdf(pages: list[bytes | None], media: bytes = b"[0 0 612 792]", page_extra: bytes = b"",
              catalog_extra: bytes = b"", extra: tuple[bytes, ...] = (), trailer: bytes = b"") -> bytes:
    """Pages with the given content streams (None: a blank page). Objects: 1 catalog, 2 page
    tree, 3 Helvetica, 4.. `extra` (for the caller to reference), then pages and contents."""
    first = 4 + len(extra)
    objects: list[bytes] = []
    kids, bodies = [], []
    number = first
    for content in pages:
        kids.append(number)
        if content is None:
            bodies.append([b"<< /Type /Page /Parent 2 0 R /MediaBox %s %s >>" % (media, page_extra)])
            number += 1
        else:
            bodies.append([b"<< /Type /Page /Parent 2 0 R /MediaBox %s /Resources << /Font << /F1 "
                           b"3 0 R >> >> /Contents %d 0 R %s >>" % (media, number + 1, page_extra),
                           stream(content)])
            number += 2
    objects.append(b"<< /Type /Catalog /Pages 2 0 R %s >>" % catalog_extra)
    objects.append(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids), len(kids)))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    objects.extend(extra)
    for body in bodies:
        objects.extend(body)
    return build_pdf(objects, trailer=trailer)


def small_text_pdf(pages: int = 1, lines: int = 3, seed: int = 0) -> bytes:
    """A born-digital PDF with a few short lines per page (cheap to convert)."""
    rng = random.Random(seed)
    words = "alpha beta gamma delta robust input page line text model".split()
    return pages_pdf([text_content([f"{p + 1}.{i + 1} " + " ".join(rng.choices(words, k=4))
                                    for i in range(lines)]) for p in range(pages)])


def sparse_text_pdf(pages: int, every: int = 4, seed: int = 0) -> bytes:
    """Mostly blank pages, with one short line on every `every`-th page: a long document
    that a slow CPU still converts in seconds (blank pages need no decoding)."""
    rng = random.Random(seed)
    words = "alpha beta gamma delta robust input page line".split()
    return pages_pdf([text_content([f"{p + 1} " + " ".join(rng.choices(words, k=3))])
                      if p % every == 0 else None for p in range(pages)])


# --------------------------------------------------------------------------- PDF families


def damaged_pdfs(folder: Path, base: bytes, name: str, seed: int = 0, flips: int = 24) -> list[Hostile]:
    """Truncations, byte flips and targeted structural damage of one good PDF."""
    folder.mkdir(parents=True, exist_ok=True)
    out: list[Hostile] = []
    n = len(base)
    cuts = sorted({1, 8, 64, n // 100, n // 20, n // 10, n // 4, n // 2, 3 * n // 4, 9 * n // 10,
                   n - 40, n - 6, n - 1})
    for cut in cuts:
        path = folder / f"{name}-cut{cut}.pdf"
        path.write_bytes(base[:cut])
        out.append(_h(path, "truncated-pdf", *EITHER))
    rng = random.Random(seed)
    for i in range(flips):
        data = bytearray(base)
        for _ in range((1, 4, 16, 256)[i % 4]):
            at = rng.randrange(n)
            data[at] ^= 1 << rng.randrange(8) if i % 2 else rng.randrange(1, 256)
        path = folder / f"{name}-flip{i}.pdf"
        path.write_bytes(bytes(data))
        out.append(_h(path, "byte-flipped-pdf", *EITHER))
    xref = base.rfind(b"xref")
    structural = {
        "no-xref": base.replace(b"xref", b"xxxx"),
        "bad-startxref": base[: base.rfind(b"startxref")] + b"startxref\n999999999\n%%EOF\n",
        "no-trailer": base.replace(b"trailer", b"tr@iler"),
        "no-eof": base.replace(b"%%EOF", b""),
        "zeroed-xref": base[:xref] + b"\0" * (n - xref),
        "no-endobj": base.replace(b"endobj", b"      "),
        "no-endstream": base.replace(b"endstream", b"         "),
        "lengths-wrong": base.replace(b"/Length ", b"/Length 9"),
        "junk-prefix": os.urandom(4096) + base,
        "junk-suffix": base + os.urandom(4096),
        "nul-inside": base[: n // 2] + b"\0" * 1000 + base[n // 2:],
        "header-only": b"%PDF-1.7\n",
        "twice-concatenated": base + base,
        "root-missing": base.replace(b"/Root", b"/Rxxt"),
        "pages-missing": base.replace(b"/Pages", b"/Pxxxx"),
    }
    for label, data in structural.items():
        path = folder / f"{name}-{label}.pdf"
        path.write_bytes(data)
        out.append(_h(path, f"structural-{label}", *EITHER))
    return out


def lying_pdfs(folder: Path) -> list[Hostile]:
    """Structures that lie or loop: page-tree cycles, counts, nesting, bombs, slow pages."""
    folder.mkdir(parents=True, exist_ok=True)
    page = text_content(["a page that is fine"])
    cases: dict[str, tuple[bytes, frozenset[str]]] = {}
    # Kids that point back at the page tree itself.
    cases["kids-cycle"] = (build_pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
        b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 1 >>"]), EITHER)
    cases["count-lies"] = (pages_pdf([page]).replace(b"/Count 1", b"/Count 2147483647"), EITHER)
    cases["count-negative"] = (pages_pdf([page]).replace(b"/Count 1", b"/Count -5"), EITHER)
    cases["deep-nesting"] = (pages_pdf([page], page_extra=b"/X " + b"[" * 50_000 + b"]" * 50_000),
                             EITHER)
    cases["deep-dict-nesting"] = (pages_pdf([page], page_extra=b"/X " + b"<< /A " * 20_000
                                            + b">> " * 20_000), EITHER)
    cases["q-stack-overflow"] = (pages_pdf([b"q " * 200_000 + page]), EITHER)
    cases["flate-bomb-content"] = (_flate_bomb_pdf(), EITHER)
    cases["image-bomb-xobject"] = (_image_bomb_pdf(60_000, 60_000), EITHER)
    cases["image-garbage-filters"] = (_garbage_images_pdf(), EITHER)
    cases["font-garbage"] = (pages_pdf([page], extra=(stream(os.urandom(3000)),)).replace(
        b"/BaseFont /Helvetica >>", b"/BaseFont /Garbage /FontDescriptor << /Type /FontDescriptor "
        b"/FontName /Garbage /Flags 32 /FontFile2 4 0 R >> >>"), EITHER)
    cases["type3-self-recursive"] = (_type3_recursive_pdf(), EITHER)
    cases["many-incremental-updates"] = (_incremental_updates(pages_pdf([page]), 200), EITHER)
    cases["unknown-operators"] = (pages_pdf([b"1 2 3 frobnicate /X Do BI EI " + page]), EITHER)
    cases["missing-objects"] = (pages_pdf([page], page_extra=b"/Annots [999 0 R 1000 0 R]"),
                                EITHER)
    out = []
    for label, (data, expect) in cases.items():
        path = folder / f"{label}.pdf"
        path.write_bytes(data)
        out.append(Hostile(path, f"lying-{label}", expect))
    return out


def _flate_bomb_pdf() -> bytes:
    """A content stream of 100 MB of spaces and one line of text, 100 kB compressed."""
    body = b" " * 100_000_000 + text_content(["after the bomb"])
    return build_pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R "
        b">> >> /Contents 5 0 R >>",
        stream(body, flate=True)])


def _image_bomb_pdf(width: int, height: int) -> bytes:
    """An image XObject that declares width x height gray pixels but carries a few kB."""
    data = zlib.compress(b"\0" * 2_000_000)
    image = b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray " \
            b"/BitsPerComponent 8 /Filter /FlateDecode /Length %d >>\nstream\n" % (
                width, height, len(data)) + data + b"\nendstream"
    content = b"q 500 0 0 700 50 50 cm /Im1 Do Q"
    return pages_pdf([content], extra=(image,)).replace(
        b"/Resources << /Font << /F1 3 0 R >> >>",
        b"/Resources << /Font << /F1 3 0 R >> /XObject << /Im1 4 0 R >> >>")


def _garbage_images_pdf() -> bytes:
    """Images in every exotic filter, each with random bytes for data."""
    filters = [b"/JBIG2Decode", b"/JPXDecode", b"/CCITTFaxDecode", b"/DCTDecode", b"/RunLengthDecode",
               b"/LZWDecode", b"/ASCII85Decode", b"/ASCIIHexDecode"]
    extra, names, draws = [], [], []
    for i, f in enumerate(filters):
        data = random.Random(i).randbytes(2048)
        extra.append(b"<< /Type /XObject /Subtype /Image /Width 400 /Height 300 /ColorSpace "
                     b"/DeviceGray /BitsPerComponent 1 /Filter %s /Length %d >>\nstream\n" % (
                         f, len(data)) + data + b"\nendstream")
        names.append(b"/Im%d %d 0 R" % (i, 4 + i))
        draws.append(b"q 60 0 0 60 %d 100 cm /Im%d Do Q" % (20 + 70 * i, i))
    return pages_pdf([b"\n".join(draws)], extra=tuple(extra)).replace(
        b"/Resources << /Font << /F1 3 0 R >> >>",
        b"/Resources << /Font << /F1 3 0 R >> /XObject << " + b" ".join(names) + b" >> >>")


def _type3_recursive_pdf() -> bytes:
    """A Type 3 font whose glyph draws text in the same font."""
    glyph = stream(b"0 0 d0 BT /T3 12 Tf (a) Tj ET")
    font = (b"<< /Type /Font /Subtype /Type3 /FontBBox [0 0 10 10] /FontMatrix [0.1 0 0 0.1 0 0] "
            b"/CharProcs << /a 5 0 R >> /Encoding << /Differences [97 /a] >> /FirstChar 97 "
            b"/LastChar 97 /Widths [10] /Resources << /Font << /T3 4 0 R >> >> >>")
    return pages_pdf([b"BT /T3 24 Tf 72 700 Td (aaaa) Tj ET"], extra=(font, glyph)).replace(
        b"/Font << /F1 3 0 R >>", b"/Font << /F1 3 0 R /T3 4 0 R >>")


def _incremental_updates(base: bytes, count: int) -> bytes:
    """`count` incremental updates, each re-writing the catalog."""
    data = bytearray(base)
    prev = int(base[base.rfind(b"startxref") + 9:].split()[0])
    size = int(base[base.rfind(b"/Size") + 5:].split()[0])
    for _ in range(count):
        offset = len(data)
        data += b"1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
        xref = len(data)
        data += b"xref\n1 1\n%010d 00000 n \ntrailer\n<< /Size %d /Root 1 0 R /Prev %d >>\n" \
                b"startxref\n%d\n%%%%EOF\n" % (offset, size, prev, xref)
        prev = xref
    return bytes(data)


def box_pdfs(folder: Path) -> list[Hostile]:
    """Page boxes: huge, tiny, empty, inverted, non-numbers; UserUnit; odd rotations."""
    folder.mkdir(parents=True, exist_ok=True)
    page = text_content(["boxes"], top=50)
    boxes = {
        "max-14400": (b"[0 0 14400 14400]", b"", frozenset({CONVERT})),
        "million": (b"[0 0 1000000 1000000]", b"", frozenset({CONVERT})),
        "1e30": (b"[0 0 1e30 1e30]", b"", EITHER),
        "huge-thin": (b"[0 0 1 1000000]", b"", EITHER),
        "thin-wide": (b"[0 0 1000000 1]", b"", EITHER),
        "tiny": (b"[0 0 0.001 0.001]", b"", EITHER),
        "empty": (b"[0 0 0 0]", b"", EITHER),
        "negative": (b"[0 0 -612 -792]", b"", EITHER),
        "inverted": (b"[612 792 0 0]", b"", EITHER),
        "offset": (b"[-1e6 -1e6 -999388 -999208]", b"", EITHER),
        "not-numbers": (b"[(a) /b null true]", b"", EITHER),
        "short-array": (b"[0 0 612]", b"", EITHER),
        "userunit-max": (b"[0 0 14400 14400]", b"/UserUnit 75000", EITHER),
        "rotate-45": (b"[0 0 612 792]", b"/Rotate 45", EITHER),
        "rotate-neg270": (b"[0 0 612 792]", b"/Rotate -270", frozenset({CONVERT})),
        "rotate-huge": (b"[0 0 612 792]", b"/Rotate 900000000000", EITHER),
        "cropbox-outside": (b"[0 0 612 792]", b"/CropBox [5000 5000 6000 6000]", EITHER),
        "cropbox-huge": (b"[0 0 612 792]", b"/CropBox [0 0 1e9 1e9]", EITHER),
    }
    out = []
    for label, (media, extra, expect) in boxes.items():
        path = folder / f"box-{label}.pdf"
        path.write_bytes(pages_pdf([page], media=media, page_extra=extra))
        out.append(Hostile(path, f"page-box-{label}", expect))
    return out


def active_content_pdfs(folder: Path) -> list[Hostile]:
    """JavaScript, embedded files, launch actions, XFA, links: all ignored, pages convert."""
    import pikepdf

    folder.mkdir(parents=True, exist_ok=True)
    page = text_content(["active content is ignored"])
    marker = "OCRCLI_STRESS_ESCAPED"
    js = stream(f"app.alert('{marker}'); this.exportDataObject({{cName: 'x', nLaunch: 2}});".encode())
    cases = {
        "openaction-js": pages_pdf([page], extra=(js,), catalog_extra=b"/OpenAction << /S /JavaScript "
                                   b"/JS 4 0 R >>"),
        "names-js": pages_pdf([page], extra=(js,), catalog_extra=b"/Names << /JavaScript << /Names "
                              b"[(a) << /S /JavaScript /JS 4 0 R >>] >> >>"),
        "page-aa-js": pages_pdf([page], extra=(js,), page_extra=b"/AA << /O << /S /JavaScript "
                                b"/JS 4 0 R >> >>"),
        "launch-action": pages_pdf([page], catalog_extra=b"/OpenAction << /S /Launch /F (/bin/sh) "
                                   b"/Win << /F (cmd.exe) >> >>"),
        "uri-link": pages_pdf([page], page_extra=b"/Annots [<< /Type /Annot /Subtype /Link /Rect "
                              b"[0 0 612 792] /A << /S /URI /URI (http://127.0.0.1:9/x) >> >>]"),
        "xfa-form": pages_pdf([page], extra=(stream(b"<xdp:xdp><template/></xdp:xdp>"),),
                              catalog_extra=b"/AcroForm << /Fields [] /XFA 4 0 R /NeedsRendering "
                              b"true >>"),
        "submit-form": pages_pdf([page], catalog_extra=b"/OpenAction << /S /SubmitForm /F "
                                 b"(http://127.0.0.1:9/) >>"),
    }
    out = []
    for label, data in cases.items():
        path = folder / f"active-{label}.pdf"
        path.write_bytes(data)
        out.append(_h(path, f"active-{label}", CONVERT))
    # Embedded files, as an attachment and as a file-attachment annotation.
    path = folder / "active-embedded-file.pdf"
    with pikepdf.open(io.BytesIO(pages_pdf([page]))) as pdf:
        pdf.attachments[f"{marker}.sh"] = pikepdf.AttachedFileSpec(
            pdf, b"#!/bin/sh\ntouch /tmp/" + marker.encode() + b"\n", mime_type="text/x-sh")
        pdf.save(path)
    out.append(_h(path, "active-embedded-file", CONVERT))
    return out


def encrypted_pdfs(folder: Path, user: str = "secret", base: bytes | None = None) -> dict[str, list[Hostile]]:
    """Every encryption pikepdf writes, with a user password and with an owner password only.
    Returns {'user': [...], 'owner_only': [...]}."""
    import pikepdf

    folder.mkdir(parents=True, exist_ok=True)
    base = base or small_text_pdf()
    out: dict[str, list[Hostile]] = {"user": [], "owner_only": []}
    schemes = {"rc4-40": dict(R=2, aes=False, metadata=False),
               "rc4-128": dict(R=3, aes=False, metadata=False),
               "aes-128": dict(R=4, aes=True), "aes-256": dict(R=6)}
    for label, kw in schemes.items():
        for who, pw in (("user", user), ("owner_only", "")):
            path = folder / f"enc-{label}-{who}.pdf"
            with pikepdf.open(io.BytesIO(base)) as pdf:
                pdf.save(path, encryption=pikepdf.Encryption(user=pw, owner="owner-pw", **kw))
            out[who].append(_h(path, f"encrypted-{label}-{who}", CONVERT if who == "owner_only" else FAIL))
    return out


def many_pages_pdf(path: Path, pages: int) -> Hostile:
    """Thousands of blank pages: every one must come back, memory must stay flat."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pages_pdf([None] * pages))
    return _h(path, f"pdf-{pages}-pages", CONVERT)


# --------------------------------------------------------------------------- other bytes


def junk_files(folder: Path, seed: int = 0) -> list[Hostile]:
    """Random bytes, zero-byte files and wrong contents under supported names."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    out = []
    # Random bytes, bare or behind a PDF header (in this order: the files depend on the seed).
    random_pdfs = [("random", b"", "random-bytes-pdf", (1, 7, 100, 1000, 4096, 65536)),
                   ("pdf-header-random", b"%PDF-1.7\n", "pdf-header-then-random", (10, 1000, 100_000))]
    for name, header, kind, sizes in random_pdfs:
        for size in sizes:
            path = folder / f"{name}-{size}.pdf"
            path.write_bytes(header + rng.randbytes(size))
            out.append(_h(path, kind, FAIL))
    for suffix in ("pdf", "PDF", "png", "jpg", "jpeg", "tif", "tiff", "webp", "bmp"):
        path = folder / f"zero-bytes.{suffix}"
        path.write_bytes(b"")
        out.append(_h(path, "zero-byte-file", FAIL))
    for suffix in ("png", "jpg", "tiff", "webp", "bmp"):
        path = folder / f"random.{suffix}"
        path.write_bytes(rng.randbytes(5000))
        out.append(_h(path, "random-bytes-image", FAIL))
    png = io.BytesIO()
    Image.new("L", (64, 32), 255).save(png, "PNG")
    (folder / "png-named.pdf").write_bytes(png.getvalue())
    out.append(_h(folder / "png-named.pdf", "image-bytes-named-pdf", FAIL))
    (folder / "pdf-named.png").write_bytes(small_text_pdf())
    out.append(_h(folder / "pdf-named.png", "pdf-bytes-named-png", FAIL))
    (folder / "text-named.pdf").write_text("just some text\n" * 50)
    out.append(_h(folder / "text-named.pdf", "text-named-pdf", FAIL))
    (folder / "html-named.pdf").write_text("<html><script>alert(1)</script></html>")
    out.append(_h(folder / "html-named.pdf", "html-named-pdf", FAIL))
    return out


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def crafted_png(width: int, height: int, idat: bytes = b"") -> bytes:
    """A PNG header that declares any size; the pixel data is whatever `idat` is."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
            + _png_chunk(b"IDAT", zlib.compress(idat or b"\0" * 1000)) + _png_chunk(b"IEND", b""))


def crafted_tiff(width: int, height: int) -> bytes:
    """A little-endian TIFF whose first IFD declares width x height 8-bit gray pixels."""
    entries = [(256, 4, 1, width), (257, 4, 1, height), (258, 3, 1, 8), (259, 3, 1, 1),
               (262, 3, 1, 1), (273, 4, 1, 8 + 2 + 12 * 9 + 4), (277, 3, 1, 1),
               (278, 4, 1, height), (279, 4, 1, 16)]
    ifd = struct.pack("<H", len(entries)) + b"".join(
        struct.pack("<HHII", tag, typ, count, value) for tag, typ, count, value in entries) + b"\0" * 4
    return b"II*\0" + struct.pack("<I", 8) + ifd + b"\0" * 16


def _patched_jpeg(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (16, 16), 200).save(buf, "JPEG")
    data = bytearray(buf.getvalue())
    sof = data.find(b"\xff\xc0")
    data[sof + 5: sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def _patched_bmp(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (16, 16), 200).save(buf, "BMP")
    data = bytearray(buf.getvalue())
    data[18:26] = struct.pack("<ii", width, height)
    return bytes(data)


def image_files(folder: Path) -> list[Hostile]:
    """Decompression bombs (refused), and odd but valid images (converted)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    bombs = {
        "png-100000x100000.png": crafted_png(100_000, 100_000),
        "png-2147483647x1.png": crafted_png(2_147_483_647, 1),
        "png-65535x65535.png": crafted_png(65_535, 65_535),
        "tiff-1000000x1000000.tif": crafted_tiff(1_000_000, 1_000_000),
        "jpeg-65000x65000.jpg": _patched_jpeg(65_000, 65_000),
        "bmp-100000x100000.bmp": _patched_bmp(100_000, 100_000),
    }
    for name, data in bombs.items():
        (folder / f"bomb-{name}").write_bytes(data)
        out.append(_h(folder / f"bomb-{name}", "image-bomb-declared", FAIL))
    # A real bomb: 400 megapixels of one colour, 50 kB on disk.
    real = folder / "bomb-real-20000x20000.png"
    Image.new("1", (20_000, 20_000), 1).save(real, optimize=False)
    out.append(_h(real, "image-bomb-real", FAIL))
    bad_png = crafted_png(300, 200, idat=b"\0" * 10)  # declares more rows than it carries
    (folder / "png-short-data.png").write_bytes(bad_png)
    out.append(_h(folder / "png-short-data.png", "image-truncated-data", *EITHER))
    jpeg = io.BytesIO()
    Image.new("RGB", (300, 200), (250, 250, 250)).save(jpeg, "JPEG")
    (folder / "jpeg-truncated.jpg").write_bytes(jpeg.getvalue()[:300])
    out.append(_h(folder / "jpeg-truncated.jpg", "image-truncated-file", *EITHER))
    odd: dict[str, Image.Image] = {
        "one-pixel.png": Image.new("L", (1, 1), 0),
        "thin-1x20000.png": Image.new("L", (1, 20_000), 255),
        "wide-20000x1.png": Image.new("L", (20_000, 1), 255),
        "gray16.png": Image.new("I;16", (200, 100), 3000),
        "palette-transparent.png": Image.new("P", (200, 100), 3),
        "la.png": Image.new("LA", (200, 100), (200, 10)),
        "rgba.webp": Image.new("RGBA", (200, 100), (1, 2, 3, 0)),
        "cmyk.jpg": Image.new("CMYK", (200, 100), (0, 0, 0, 10)),
        "bilevel.tif": Image.new("1", (200, 100), 1),
        "float.tif": Image.new("F", (50, 50), 0.5),
    }
    for name, img in odd.items():
        img.save(folder / f"odd-{name}")
        out.append(_h(folder / f"odd-{name}", f"image-{name}", CONVERT))
    for orientation in (6, 8, 99):  # 99 is not a valid EXIF orientation
        img = Image.new("L", (120, 60), 255)
        exif = Image.Exif()
        exif[0x0112] = orientation
        path = folder / f"odd-exif-orientation-{orientation}.jpg"
        img.save(path, exif=exif.tobytes())
        out.append(_h(path, "image-exif-orientation", CONVERT))
    frames = [Image.new("L", (40, 40), 255) for _ in range(60)]
    frames[0].save(folder / "odd-60-frames.tiff", save_all=True, append_images=frames[1:])
    out.append(_h(folder / "odd-60-frames.tiff", "image-many-frames", CONVERT))
    big = folder / "odd-near-limit-14000x14000.png"  # 196 megapixels, under the 200 limit
    Image.new("L", (14_000, 14_000), 255).save(big)
    out.append(_h(big, "image-near-pixel-limit", CONVERT))
    return out


# --------------------------------------------------------------------------- file system


def special_files(folder: Path, good_pdf: bytes) -> list[Hostile]:
    """Things with a document's name that are not regular files, and symlink tricks."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    os.mkfifo(folder / "fifo.pdf")
    out.append(_h(folder / "fifo.pdf", "fifo-named-pdf", FAIL))
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(folder / "socket.pdf"))
        out.append(_h(folder / "socket.pdf", "socket-named-pdf", FAIL))
    except OSError:  # path too long for a socket: skip this one
        pass
    finally:
        sock.close()
    for name, target in (("dev-zero.pdf", "/dev/zero"), ("dev-urandom.png", "/dev/urandom"),
                         ("dangling.pdf", str(folder / "does-not-exist.pdf")),
                         ("self-loop.pdf", str(folder / "self-loop.pdf"))):
        os.symlink(target, folder / name)
        out.append(_h(folder / name, f"symlink-{name}", FAIL))
    (folder / "real.pdf").write_bytes(good_pdf)
    out.append(_h(folder / "real.pdf", "regular-pdf", CONVERT))
    # The same document twice: converted once, under the name found first (sorted order).
    os.symlink("real.pdf", folder / "zz-link-to-real.pdf")
    out.append(_h(folder / "zz-link-to-real.pdf", "symlink-duplicate", SKIP))
    sub = folder / "loop"
    sub.mkdir()
    os.symlink("..", sub / "up")  # a folder that contains its parent
    os.symlink(".", sub / "self")
    (sub / "inner.pdf").write_bytes(good_pdf)
    out.append(_h(sub / "inner.pdf", "inside-symlink-loop", CONVERT))
    (folder / "dir.pdf").mkdir()  # a folder with a document's name is searched, not opened
    out.append(_h(folder / "dir.pdf", "folder-named-pdf", SKIP))
    (folder / "unreadable-by-hook.pdf").write_bytes(good_pdf)
    out.append(_h(folder / "unreadable-by-hook.pdf", "unreadable-file", FAIL))
    return out


def odd_names(folder: Path, good_pdf: bytes) -> list[Hostile]:
    """Names with spaces, unicode, control characters, leading dashes, dots, shell syntax,
    bytes that are not UTF-8, and maximal length; all convert, each to its own output."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [
        "with space.pdf", "  leading and trailing  .pdf", "ünïcödé.pdf", "中文文件.pdf",
        "emoji-📄.pdf", "rtl-\u202egnp.pdf", "zero\u200bwidth.pdf", "new\nline.pdf", "tab\tname.pdf",
        "-leading-dash.pdf", "--help.pdf", "-o.pdf", "..pdf", "...pdf", "..\\..\\escape.pdf",
        "$(touch pwned).pdf", "`id`.pdf", "'quote\".pdf", "semi;colon&amp.pdf", "[glob]*?.pdf",
        "UPPER.PDF", "a_b.pdf", "a\x01b.pdf", "x" * 250 + ".pdf",
    ]
    out = []
    for name in names:
        (folder / name).write_bytes(good_pdf)
        out.append(_h(folder / name, "odd-name", CONVERT))
    raw = os.fsencode(folder) + b"/bad-utf8-\xff\xfe.pdf"
    with open(raw, "wb") as f:
        f.write(good_pdf)
    out.append(_h(Path(os.fsdecode(raw)), "odd-name-not-utf8", CONVERT))
    return out
