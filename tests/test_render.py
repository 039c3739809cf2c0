from PIL import Image

from ocrcli.inputs import PageRef
from ocrcli.render import Renderer, RenderSettings, render_page
from ocrcli.text_layer import rendered_dpi
from tests.conftest import SAMPLES


def test_pdf_page_renders_at_dpi_and_pixel_cap():
    ref = PageRef(0, SAMPLES / "report.pdf", "pdf", 2)
    img = render_page(ref, RenderSettings(dpi=144))
    assert img.error is None and img.image.size == (1224, 1584) and rendered_dpi(img.image) == 144
    capped = render_page(ref, RenderSettings(dpi=144, max_pixels=500_000))
    w, h = capped.image.size
    assert w * h <= 500_000 and w > 500


def test_a_small_pdf_page_is_rendered_as_wide_as_a_letter_page(tmp_path):
    # A book page scanned onto a 180 x 300 point page: at 144 dpi its text would be a few
    # pixels high. It is rendered at 3.4 times the dpi, as wide as a Letter page.
    path = tmp_path / "small.pdf"
    Image.new("L", (500, 833), 255).save(path, resolution=200.0)
    img = render_page(PageRef(0, path, "pdf", 1), RenderSettings(dpi=144))
    assert img.error is None and img.image.size[0] == 1224 and round(img.dpi) == 490
    assert round(rendered_dpi(img.image)) == 144  # the zoom for a small page is left out
    tiny = tmp_path / "tiny.pdf"  # no more than 4 times the dpi
    Image.new("L", (100, 100), 255).save(tiny, resolution=200.0)
    assert render_page(PageRef(0, tiny, "pdf", 1), RenderSettings(dpi=72)).image.size == (144, 144)


def test_bad_page_becomes_a_reason_not_an_exception(tmp_path):
    bad = tmp_path / "x.pdf"
    bad.write_bytes(b"%PDF-1.7\n garbage")
    img = render_page(PageRef(0, bad, "pdf", 1), RenderSettings())
    assert img.image is None and "PDF" in img.error


def test_rotated_pdf_page_is_honoured(tmp_path):
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(SAMPLES / "report.pdf"))
    doc[0].set_rotation(90)
    path = tmp_path / "rot.pdf"
    doc.save(str(path))
    img = render_page(PageRef(0, path, "pdf", 1), RenderSettings(dpi=72))
    assert img.image.size == (792, 612)


def test_stream_keeps_order_with_worker_processes(tmp_path):
    refs = [PageRef(0, SAMPLES / "report.pdf", "pdf", p) for p in (3, 1, 2)]
    refs.append(PageRef(1, SAMPLES / "reading-order.png", "image", 1))
    renderer = Renderer(RenderSettings(dpi=72), workers=1, prefetch=2)
    try:
        stream = renderer.stream(refs)
        got = []
        while not stream.done:
            page = stream.poll(block=True)
            got.append(page)
    finally:
        renderer.close()
    assert [g.ref for g in got] == refs
    assert all(isinstance(g.image, Image.Image) for g in got)


def _refuse_to_unpickle() -> None:
    raise ValueError("garbage on the pipe")


class _Unreadable:
    """Pickles in the render worker; reading it back in the parent raises, as a corrupt or
    foreign message on the worker's pipe would."""

    def __reduce__(self):
        return (_refuse_to_unpickle, ())


def _garbage_for_small_images(image: Image.Image) -> object:
    """A page preparation whose answer for a 100-pixel-wide image cannot be read back."""
    return _Unreadable() if image.width == 100 else "prepared"


def test_a_worker_answer_that_is_not_a_page_fails_that_page_and_the_stream_goes_on(tmp_path):
    """Without --page-timeout nothing else would ever take the page back from its worker."""
    import signal

    small = tmp_path / "small.png"
    Image.new("RGB", (100, 50), "white").save(small)
    refs = [PageRef(0, SAMPLES / "report.pdf", "pdf", 1), PageRef(1, small, "image", 1),
            PageRef(0, SAMPLES / "report.pdf", "pdf", 2)]
    renderer = Renderer(RenderSettings(dpi=72), workers=1, prefetch=3,
                        prepare=_garbage_for_small_images)

    def hung(signum, frame):
        raise TimeoutError("the stream kept waiting for the page with the bad answer")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    try:
        stream = renderer.stream(refs)
        got = []
        while not stream.done:
            got.append(stream.poll(block=True))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        renderer.close()
    assert [g.ref for g in got] == refs
    assert got[0].prepared == got[2].prepared == "prepared"
    bad = got[1]
    assert bad.image is None and not bad.timed_out
    assert bad.error.startswith("cannot render page: the renderer process sent an answer that "
                                "is not a page (ValueError: garbage on the pipe)")
    assert "\n" not in bad.error and renderer.replaced == 1
