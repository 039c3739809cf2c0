"""Prefetching renderer: worker processes turn `PageRef`s into page images.

PDFium is not thread-safe, so each worker is a process that opens a document once and renders
its pages on demand. At most `prefetch` pages are in flight, so memory stays flat however many
pages a PDF has; results come back in submission order. A page that cannot be rendered comes
back with its reason instead of an image.

Hostile documents are contained here. A worker's address space is capped, so a decompression
bomb inside a PDF fails its page instead of exhausting the machine. A render that runs past
`page_timeout` is abandoned: its worker is killed and replaced, and the page comes back as
timed out. A worker that dies (a crash in PDFium, the OOM killer) is replaced, and the page it
was rendering fails with that reason.

Why not ProcessPoolExecutor: it cannot stop one task or kill one worker, and killing its
workers can deadlock it for good (its result pipe is shared, and a worker killed half-way
through sending a page image leaves a message that never ends). Here each worker has its own
pipe, so the parent always knows which page a worker holds, and a dead worker's pipe simply
ends.
"""

from __future__ import annotations

import atexit
import math
import multiprocessing as mp
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps

from ocrcli.errors import one_line
from ocrcli.faults import NO_FAULTS, Faults
from ocrcli.inputs import PageRef, open_image, open_pdf
from ocrcli.text_layer import DPI_KEY, TextLayer, attach, text_layer_of

# A worker's address-space cap: far above what a legitimate page needs (a 200-megapixel image
# decodes in under 1 GiB), far below what a bomb would take.
WORKER_MEMORY_LIMIT = 4 << 30
# Characters of a page's text layer read for drafting: a real page holds a few thousand;
# past this the layer is a data dump, and reading its boxes would cost more than it saves.
MAX_TEXT_LAYER_CHARS = 100_000


@dataclass(frozen=True)
class RenderSettings:
    dpi: int = 144
    max_pixels: int = 12_000_000
    password: str | None = None
    page_timeout: float | None = None  # seconds; None: no limit
    faults: Faults = NO_FAULTS  # the run's injected render faults (tests only)


@dataclass
class PageImage:
    ref: PageRef
    image: Image.Image | None  # RGB
    dpi: float
    error: str | None = None
    timed_out: bool = False
    render_seconds: float = 0.0
    # What `prepare` made of the image in the worker (the model's decode requests), or why it
    # could not; both None when there was nothing to prepare.
    prepared: Any = None
    prepare_error: str | None = None
    # What the page holds, for the page's verdict (verdict.py): the share of its area that is
    # not background, and the visible characters of a PDF's text layer (None: not a PDF).
    ink: float = 0.0
    text_layer_chars: int | None = None

    @property
    def text_layer(self) -> TextLayer | None:
        """The PDF page's text layer in the image's pixels (None: no PDF, or no text). It
        travels inside the image (text_layer.attach), so `prepare` and adapters see it too."""
        return text_layer_of(self.image)


# A page's model-side preparation (layout, crops, tensors), run in the render worker so the
# engine's process spends its time decoding. Must be picklable: it travels to the worker.
Prepare = Callable[[Image.Image], Any]


class _DocCache:
    """The documents a worker has open: one PDF at a time, since pages arrive in order."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.doc = None

    def get(self, path: Path, password: str | None):
        if self.path != path:
            self.close()
            self.doc = open_pdf(path, password)
            self.path = path
        return self.doc

    def close(self) -> None:
        if self.doc is not None:
            self.doc.close()
        self.doc, self.path = None, None


_cache = _DocCache()  # one per worker process


def _worker_init() -> None:
    """Runs first in every worker process."""
    # Ctrl-C reaches the whole process group; the parent decides what an interrupt means.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Close the open PDF before PDFium's own exit hook, which would warn about it on stderr.
    atexit.register(_cache.close)
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = WORKER_MEMORY_LIMIT if hard == resource.RLIM_INFINITY else min(hard, WORKER_MEMORY_LIMIT)
        if soft == resource.RLIM_INFINITY or soft > limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):  # not on this platform: no cap
        pass
    # A killed parent (kill -9) cannot shut its workers down, and a worker blocked on its task
    # queue would wait forever: leave with the parent.
    parent = mp.parent_process()
    if parent is not None:
        threading.Thread(target=lambda: (parent.join(), os._exit(1)), daemon=True).start()


SMALL_PAGE_POINTS = 360  # 5 inches: a PDF page whose shorter side is under this is small
LETTER_WIDTH_POINTS = 612
SMALL_PAGE_MAX_ZOOM = 4.0


def small_page_zoom(width_pt: float, height_pt: float) -> float:
    """How many times the dpi a PDF page is rendered at: 1, or for a small page as much as
    makes it as wide as a Letter page (at most 4). A book page scanned onto a page of
    postcard size has its text a few pixels high at the dpi that suits a Letter page; the
    field's converters render to a pixel size, not a dpi, for the same reason (olmOCR renders
    every page to a fixed longest side)."""
    short = min(width_pt, height_pt)
    if short >= SMALL_PAGE_POINTS:
        return 1.0
    return min(SMALL_PAGE_MAX_ZOOM, LETTER_WIDTH_POINTS / short)


def _fit_scale(width: float, height: float, scale: float, max_pixels: int) -> float:
    """The largest scale up to `scale` whose bitmap (PDFium rounds each side up) fits."""
    scale = min(scale, (max_pixels / (width * height)) ** 0.5)
    while scale > 0 and math.ceil(width * scale) * math.ceil(height * scale) > max_pixels:
        scale *= 0.999
    return scale


def _render_image(ref: PageRef, settings: RenderSettings) -> PageImage:
    img = open_image(ref.path)
    img.seek(ref.page - 1)
    w, h = img.size
    if w * h > settings.max_pixels:
        # Shrink before converting: a big scan is decoded once at full size, never copied at
        # full size (JPEG decodes at a smaller size directly through draft mode).
        factor = max(1, math.floor((w * h / settings.max_pixels) ** 0.5))
        img.draft("RGB", (w // factor, h // factor))
        if img.size == (w, h) and factor > 1:
            img = img.reduce(factor)
    img = ImageOps.exif_transpose(img.convert("RGB") if img.mode not in ("RGB", "L") else img)
    img = img.convert("RGB")
    w, h = img.size
    if w * h > settings.max_pixels:
        f = (settings.max_pixels / (w * h)) ** 0.5
        img = img.resize((max(1, int(w * f)), max(1, int(h * f))), Image.LANCZOS)
    dpi = img.info.get("dpi", (settings.dpi, settings.dpi))[0] if hasattr(img, "info") else 0
    try:
        dpi = float(dpi or 0)
    except (TypeError, ValueError):  # a malformed dpi tag
        dpi = 0.0
    return PageImage(ref, img, dpi if math.isfinite(dpi) else 0.0)


def render_page(ref: PageRef, settings: RenderSettings) -> PageImage:
    """Render one page (in a worker). Errors become a one-line reason."""
    t0 = time.perf_counter()
    try:
        settings.faults.render_fault(ref.page)
        if ref.kind == "pdf":
            page = _cache.get(ref.path, settings.password)[ref.page - 1]
            w_pt, h_pt = page.get_size()
            if not (w_pt > 0 and h_pt > 0 and math.isfinite(w_pt * h_pt)):
                raise ValueError(f"the page has no area ({w_pt:g} x {h_pt:g} points)")
            zoom = small_page_zoom(w_pt, h_pt)
            scale = _fit_scale(w_pt, h_pt, settings.dpi / 72 * zoom, settings.max_pixels)
            # PDFium applies the page's own /Rotate when rendering.
            image = page.render(scale=scale, may_draw_forms=True).to_pil().convert("RGB")
            text_layer_chars = visible_text_chars(page)
            attach(image, read_text_layer(page, image.size))
            image.info[DPI_KEY] = scale * 72 / zoom  # a small page's zoom left out
            page.close()
            result = PageImage(ref, image, scale * 72, text_layer_chars=text_layer_chars)
        else:
            result = _render_image(ref, settings)
    except ValueError as exc:
        result = PageImage(ref, None, 0, one_line(exc))
    except MemoryError:
        result = PageImage(ref, None, 0, "cannot render page: it needs more memory than a "
                                         f"render worker may use ({WORKER_MEMORY_LIMIT >> 30} GiB)")
    except Exception as exc:  # a broken page must not kill the run
        result = PageImage(ref, None, 0, one_line(f"cannot render page: {type(exc).__name__}: {exc}"))
    if result.image is not None:
        result.ink = ink_share(result.image)
    result.render_seconds = time.perf_counter() - t0
    return result


def visible_text_chars(page) -> int:
    """Visible (non-space) characters in a PDF page's text layer (a pypdfium2 page)."""
    textpage = page.get_textpage()
    try:
        return sum(not c.isspace() for c in textpage.get_text_range())
    finally:
        textpage.close()


def read_text_layer(page, size: tuple[int, int]) -> TextLayer | None:
    """A PDF page's text layer (a pypdfium2 page), each character's loose box (the font's
    full height, so the boxes of a line share one band) mapped onto the page's bitmap of
    `size` pixels. The mapping is PDFium's own page-to-device transform for that bitmap, so
    the page's /Rotate and crop box are those the render applied. None: no text layer."""
    import ctypes

    import numpy as np
    import pypdfium2.raw as pdfium_c

    textpage = page.get_textpage()
    try:
        n = min(textpage.count_chars(), MAX_TEXT_LAYER_CHARS)
        if n <= 0:
            return None
        chars, boxes = [], np.full((n, 4), np.nan, dtype=np.float64)  # boxes: page points
        rect = pdfium_c.FS_RECTF()
        for i in range(n):
            code = pdfium_c.FPDFText_GetUnicode(textpage, i)
            chars.append("\ufffd" if 0xD800 <= code < 0xE000 else chr(code))
            if not chars[-1].isspace() and pdfium_c.FPDFText_GetLooseCharBox(textpage, i, rect):
                boxes[i] = rect.left, rect.top, rect.right, rect.bottom
    finally:
        textpage.close()
    # The transform is affine: read it off three points. PDFium returns whole device pixels,
    # so it maps onto a bitmap `fine` times larger and the result is divided back down.
    fine = 1000
    dx, dy = ctypes.c_int(), ctypes.c_int()

    def to_device(x: float, y: float) -> np.ndarray:
        pdfium_c.FPDF_PageToDevice(page, 0, 0, size[0] * fine, size[1] * fine, 0, x, y, dx, dy)
        return np.array([dx.value, dy.value], dtype=np.float64) / fine

    origin = to_device(0.0, 0.0)
    ax, ay = (to_device(100.0, 0.0) - origin) / 100, (to_device(0.0, 100.0) - origin) / 100
    corners = [origin + boxes[:, [i]] * ax + boxes[:, [j]] * ay for i, j in ((0, 1), (2, 3))]
    lo, hi = np.minimum(*corners), np.maximum(*corners)  # [N,2]: a rotation swaps corners
    return TextLayer("".join(chars), np.concatenate([lo, hi], axis=1).astype(np.float32))


def ink_share(image: Image.Image, contrast: int = 64) -> float:
    """The share of the page's pixels that differ from its background (its most common grey
    level) by more than `contrast`: about 0.03-0.1 for a page of text, 0 for a blank one."""
    grey = image.convert("L")
    grey.thumbnail((1024, 1024))  # the share, not the detail, matters: keep it cheap
    hist = grey.histogram()
    background = max(range(256), key=hist.__getitem__)
    ink = sum(n for level, n in enumerate(hist) if abs(level - background) > contrast)
    return ink / max(1, grey.width * grey.height)


def render_and_prepare(ref: PageRef, settings: RenderSettings, prepare: Prepare | None) -> PageImage:
    """`render_page`, then `prepare` on the image; its failure is the page's, not the run's."""
    result = render_page(ref, settings)
    if prepare is not None and result.image is not None:
        t0 = time.perf_counter()
        try:
            result.prepared = prepare(result.image)
        except Exception as exc:  # a page the model cannot read must not stop the run
            result.prepare_error = one_line(f"cannot prepare page: {exc}")
        result.render_seconds += time.perf_counter() - t0
    return result


def _worker_main(conn: Connection, settings: RenderSettings, prepare: Prepare | None) -> None:
    """A worker: render (and prepare) each PageRef the parent sends until it sends None or
    goes away."""
    _worker_init()
    conn.send("ready")  # starting a process can take seconds; no page's clock runs meanwhile
    while True:
        try:
            ref = conn.recv()
        except (EOFError, OSError):
            return
        if ref is None:
            return
        conn.send(render_and_prepare(ref, settings, prepare))


class _Worker:
    """One render process and its own pipe."""

    def __init__(self, settings: RenderSettings, prepare: Prepare | None):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, settings, prepare),
                                   daemon=True, name="ocrcli-render")
        self.process.start()
        child.close()  # only the worker may hold its end: its death must end the pipe
        self.job: _Job | None = None

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


@dataclass
class _Job:
    ref: PageRef
    result: PageImage | None = None
    worker: _Worker | None = None
    started: float = 0.0  # when its worker took it: the page-timeout clock


class Renderer:
    """Renders pages ahead of the engine in `workers` processes (0: in this process, where
    neither a timeout nor a crash can be contained)."""

    def __init__(self, settings: RenderSettings, workers: int = 1, prefetch: int = 4,
                 prepare: Prepare | None = None):
        self.settings = settings
        self.prepare = prepare
        self.workers = workers
        self.prefetch = max(1, prefetch)
        self.pool: list[_Worker] = []  # started on first use
        self.replaced = 0  # workers killed (timeout) or lost (crash), for the summary

    def stream(self, refs: Iterable[PageRef]) -> RenderStream:
        return RenderStream(self, iter(refs))

    def close(self) -> None:
        """Stop the workers. They are killed, not asked: one may be stuck in a page, and none
        holds anything worth waiting for."""
        for worker in self.pool:
            worker.kill()
        self.pool = []

    def idle_worker(self) -> _Worker | None:
        for worker in self.pool:
            if worker.job is None:
                return worker
        if len(self.pool) < self.workers:
            self.pool.append(_Worker(self.settings, self.prepare))
            return self.pool[-1]
        return None

    def retire(self, worker: _Worker, replaced: bool = True) -> None:
        """Kill a worker that hangs, or bury one that died; a new one starts when needed."""
        worker.kill()
        self.pool.remove(worker)
        self.replaced += int(replaced)


class RenderStream:
    """An ordered stream of rendered pages that can be polled without blocking."""

    def __init__(self, renderer: Renderer, refs: Iterator[PageRef]):
        self.r = renderer
        self.refs = refs
        self.pending: deque[_Job] = deque()
        self.exhausted = False
        self._fill()

    @property
    def done(self) -> bool:
        return self.exhausted and not self.pending

    def stop(self) -> None:
        """Admit no more pages (an interrupt); pages in flight are dropped."""
        self.exhausted = True
        self.pending.clear()
        for worker in list(self.r.pool):
            if worker.job is not None:  # its answer would arrive for a job that is gone
                self.r.retire(worker, replaced=False)

    def poll(self, block: bool) -> PageImage | None:
        """The next page if it is ready (or, with block, once it is); None otherwise."""
        while self.pending:
            self._collect(0)
            self._dispatch()
            head = self.pending[0]
            if head.result is not None:
                self.pending.popleft()
                self._fill()
                return head.result
            if not block:
                return None
            self._collect(self._until_next_deadline())
        return None

    def _fill(self) -> None:
        while not self.exhausted and len(self.pending) < self.r.prefetch:
            ref = next(self.refs, None)
            if ref is None:
                self.exhausted = True
                break
            job = _Job(ref)
            if self.r.workers == 0:
                job.result = render_and_prepare(ref, self.r.settings, self.r.prepare)
            self.pending.append(job)
        self._dispatch()

    def _dispatch(self) -> None:
        """Give waiting jobs, oldest first, to idle workers."""
        for job in self.pending:
            if job.result is not None or job.worker is not None:
                continue
            worker = self.r.idle_worker()
            if worker is None:
                return
            try:
                worker.conn.send(job.ref)
            except OSError:  # it died while idle: replace it, try again on the next pass
                self.r.retire(worker)
                return
            worker.job, job.worker, job.started = job, worker, time.perf_counter()

    def _until_next_deadline(self) -> float | None:
        timeout = self.r.settings.page_timeout
        running = [j.started for j in self.pending if j.worker is not None]
        if timeout is None or not running:
            return None
        return max(0.0, min(running) + timeout - time.perf_counter())

    def _collect(self, wait_s: float | None) -> None:
        """Take in finished pages and dead workers (waiting up to `wait_s`), and stop renders
        that ran out of time."""
        busy = [w for w in self.r.pool if w.job is not None]
        if busy:
            ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy], wait_s))
            for worker in busy:
                if worker.conn in ready or worker.process.sentinel in ready:
                    self._receive(worker)
        timeout = self.r.settings.page_timeout
        if timeout is None:
            return
        now = time.perf_counter()
        for job in self.pending:
            if job.worker is not None and now - job.started >= timeout:
                job.result = PageImage(job.ref, None, 0, f"rendering took longer than "
                                       f"--page-timeout {timeout:g}s; abandoned", timed_out=True,
                                       render_seconds=now - job.started)
                worker, job.worker = job.worker, None
                self.r.retire(worker)

    def _receive(self, worker: _Worker) -> None:
        job = worker.job
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                if isinstance(message, str) and message == "ready":  # the page's clock starts now
                    job.started = time.perf_counter()
                    continue
                if not isinstance(message, PageImage) or message.ref != job.ref:
                    raise TypeError(f"a {type(message).__name__} instead of page {job.ref.page}")
                worker.job, job.worker, job.result = None, None, message
                if not worker.process.is_alive():  # it sent its page, then died
                    self.r.retire(worker)
                return
        except (EOFError, OSError):  # it died part-way through sending: reported below
            pass
        except Exception as exc:  # noqa: BLE001 - an answer that cannot be read or is not a page
            # Its pipe can no longer be trusted, and the worker would keep the job for ever
            # (no --page-timeout to end it): the page fails, the worker is replaced.
            self._fail(worker, job, f"cannot render page: the renderer process sent an answer "
                                    f"that is not a page ({type(exc).__name__}: {one_line(exc)})")
            return
        if worker.process.is_alive():
            return
        self._fail(worker, job, "cannot render page: the renderer process died on it (a crash, "
                                "or out of memory)")

    def _fail(self, worker: _Worker, job: _Job, reason: str) -> None:
        """End `job` as failed with `reason`, and retire the worker that held it."""
        worker.job, job.worker = None, None
        job.result = PageImage(job.ref, None, 0, reason,
                               render_seconds=time.perf_counter() - job.started)
        self.r.retire(worker)
