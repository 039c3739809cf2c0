"""Prefetching renderer: worker processes turn `PageRef`s into page images.

PDFium is not thread-safe, so each worker is a process that opens a document once and renders
its pages on demand. At most `prefetch` pages are in flight, so memory stays flat however many
pages a PDF has; results come back in submission order. A page that cannot be rendered comes
back with its reason instead of an image.
"""

from __future__ import annotations

import multiprocessing as mp
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageOps

from ocrcli.inputs import PageRef, open_image, open_pdf


@dataclass(frozen=True)
class RenderSettings:
    dpi: int = 144
    max_pixels: int = 12_000_000
    password: str | None = None


@dataclass
class PageImage:
    ref: PageRef
    image: Image.Image | None  # RGB
    dpi: float
    error: str | None = None


class _DocCache:
    """The documents a worker has open: one PDF at a time, since pages arrive in order."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.doc = None

    def get(self, path: Path, password: str | None):
        if self.path != path:
            if self.doc is not None:
                self.doc.close()
            self.doc, self.path = None, None
            self.doc = open_pdf(path, password)
            self.path = path
        return self.doc


_cache = _DocCache()  # one per worker process


def render_page(ref: PageRef, settings: RenderSettings) -> PageImage:
    """Render one page (in a worker). Errors become a one-line reason."""
    try:
        if ref.kind == "pdf":
            page = _cache.get(ref.path, settings.password)[ref.page - 1]
            w_pt, h_pt = page.get_size()
            scale = settings.dpi / 72
            if w_pt * h_pt * scale * scale > settings.max_pixels:
                scale = (settings.max_pixels / (w_pt * h_pt)) ** 0.5
            # PDFium applies the page's own /Rotate when rendering.
            image = page.render(scale=scale, may_draw_forms=True).to_pil().convert("RGB")
            page.close()
            return PageImage(ref, image, scale * 72)
        img = open_image(ref.path)
        img.seek(ref.page - 1)
        img = ImageOps.exif_transpose(img.convert("RGB") if img.mode not in ("RGB", "L") else img)
        img = img.convert("RGB")
        w, h = img.size
        if w * h > settings.max_pixels:
            f = (settings.max_pixels / (w * h)) ** 0.5
            img = img.resize((max(1, int(w * f)), max(1, int(h * f))), Image.LANCZOS)
        dpi = img.info.get("dpi", (settings.dpi, settings.dpi))[0] if hasattr(img, "info") else 0
        return PageImage(ref, img, float(dpi or 0))
    except ValueError as exc:
        return PageImage(ref, None, 0, str(exc))
    except Exception as exc:  # a broken page must not kill the run
        return PageImage(ref, None, 0, f"cannot render page: {type(exc).__name__}: {exc}".strip())


class Renderer:
    """Renders pages ahead of the engine in `workers` processes (0: in this process)."""

    def __init__(self, settings: RenderSettings, workers: int = 1, prefetch: int = 4):
        self.settings = settings
        self.workers = workers
        self.prefetch = max(1, prefetch)
        self.pool: ProcessPoolExecutor | None = None
        if workers > 0:
            self.pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"))

    def stream(self, refs: Iterable[PageRef]) -> RenderStream:
        return RenderStream(self, iter(refs))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


class RenderStream:
    """An ordered stream of rendered pages that can be polled without blocking."""

    def __init__(self, renderer: Renderer, refs: Iterator[PageRef]):
        self.r = renderer
        self.refs = refs
        self.pending: deque[Future | PageImage] = deque()
        self.exhausted = False
        self._fill()

    def _fill(self) -> None:
        while not self.exhausted and len(self.pending) < self.r.prefetch:
            ref = next(self.refs, None)
            if ref is None:
                self.exhausted = True
                break
            if self.r.pool is None:
                self.pending.append(render_page(ref, self.r.settings))
            else:
                self.pending.append(self.r.pool.submit(render_page, ref, self.r.settings))

    def stop(self) -> None:
        """Admit no more pages (an interrupt); pages already rendered are dropped."""
        self.exhausted = True
        for f in self.pending:
            if isinstance(f, Future):
                f.cancel()
        self.pending.clear()

    @property
    def done(self) -> bool:
        return self.exhausted and not self.pending

    def poll(self, block: bool) -> PageImage | None:
        """The next page if it is ready (or, with block, once it is); None otherwise."""
        if not self.pending:
            return None
        head = self.pending[0]
        if isinstance(head, Future):
            if not block and not head.done():
                return None
            result = head.result()
        else:
            result = head
        self.pending.popleft()
        self._fill()
        return result
