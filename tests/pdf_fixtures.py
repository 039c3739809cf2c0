"""PDFs that tests build on the fly: encrypted ones (pikepdf, a test dependency)."""

from __future__ import annotations

import io

import pikepdf

from tests.conftest import SAMPLES


def encrypted_pdf(user: str, owner: str = "owner-secret", source: str = "scanned-invoice.pdf") -> bytes:
    """The sample, encrypted with AES-256. An empty `user` password makes an owner-only PDF."""
    buf = io.BytesIO()
    with pikepdf.open(SAMPLES / source) as pdf:
        pdf.save(buf, encryption=pikepdf.Encryption(user=user, owner=owner, R=6))
    return buf.getvalue()
