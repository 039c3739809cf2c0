"""Reversed text: light letters on a dark fill are read as any other line."""

import numpy as np
from PIL import ImageDraw

from ocrcli.models.builtin.layout import despeckle, ink_mask
from ocrcli.models.builtin.page_layout import analyse_page, components, reverse_light_text
from tests.conftest import run_cli
from tests.models.layout_pages import _bold, cut_band_page, dark_slide_page, reversed_banner_page


def _region(image, box) -> np.ndarray:
    x0, y0, x1, y1 = box
    return np.asarray(image)[y0:y1, x0:x1]


def test_a_dark_banner_becomes_dark_letters_on_paper_and_is_read():
    page = reversed_banner_page()
    layout = analyse_page(page.image)
    banner = _region(layout.image, page.regions["banner"])
    assert np.median(banner) > 200  # the fill is paper now
    assert (banner < 100).mean() > 0.05  # and the letters are ink
    x0, y0, x1, y1 = page.regions["banner"]
    [line] = [b for b in layout.boxes if y0 <= b.ink_top and b.ink_bottom <= y1]
    assert line.readable and line.x0 >= x0 and line.x1 <= x1
    assert not any(b.kind == "figure" and b.ink_top < y1 for b in layout.boxes)


def test_a_bar_a_logo_and_a_heavy_word_stay_as_they_are():
    page = reversed_banner_page()
    gray = np.asarray(page.image, dtype=np.float32)
    ink = despeckle(ink_mask(gray))
    reversed_text = reverse_light_text(gray, components(ink), 255.0)
    assert reversed_text is not None  # the banner
    for name in ("bar", "logo", "bold"):
        assert np.array_equal(_region(reversed_text, page.regions[name]),
                              _region(gray, page.regions[name])), name
    layout = analyse_page(page.image)
    x0, y0, x1, y1 = page.regions["logo"]
    assert not any(b.readable and b.x1 <= x1 and b.ink_bottom >= y0 for b in layout.boxes)


def test_a_grey_fill_with_white_letters_is_reversed_too():
    page = reversed_banner_page(fill=110)
    banner = _region(analyse_page(page.image).image, page.regions["banner"])
    assert np.median(banner) > 200 and (banner < 100).mean() > 0.05


def test_a_band_cut_by_slanted_gaps_leaves_no_ink_beside_its_words():
    page = cut_band_page()
    layout = analyse_page(page.image)
    x0, y0, x1, y1 = page.regions["pieces"]
    assert (_region(layout.image, page.regions["pieces"]) < 178).sum() == 0  # no slanted edge left
    band = [b for b in layout.boxes if b.ink_bottom >= y0]
    assert [b.kind for b in band] == ["text"]  # the pieces are neither a figure nor a line
    tx0, ty0, tx1, ty1 = page.regions["text"]
    assert tx0 - 8 <= band[0].x0 and band[0].x1 <= tx1 + 8


def test_an_upside_down_dark_slide_is_turned_by_its_letters():
    page = dark_slide_page()
    upright = analyse_page(page.image)
    turned = analyse_page(page.image.rotate(180))
    assert upright.turns == 0 and turned.turns == 2
    readable = [b for b in upright.boxes if b.readable]
    assert len(readable) == len(page.lines)


def test_the_converter_reads_the_banner(tmp_path):
    page = reversed_banner_page()
    src = tmp_path / "banner.png"
    page.image.crop((0, 80, 1224, 720)).save(src)  # the banner between two paragraphs
    out = tmp_path / "out"
    r = run_cli("convert", str(src), "-o", str(out), "--render-workers", "0", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "ANNUAL REVIEW" in (out / "banner.png" / "page-0001.md").read_text()


def test_a_dark_word_on_a_wide_grey_band_stays():
    page = cut_band_page()
    draw = ImageDraw.Draw(page.image)
    draw.rectangle((100, 1330, 1124, 1400), fill=110)  # a wide fill, its own top and bottom
    draw.text((120, 1350), "Note", font=_bold(28), fill=0)  # a sliver of its pixels
    layout = analyse_page(page.image)
    assert [b for b in layout.boxes if b.readable and 1330 <= b.ink_top and b.ink_bottom <= 1400]


def test_the_converter_reads_the_cut_band_as_its_words_alone(tmp_path):
    page = cut_band_page()
    src = tmp_path / "band.png"
    page.image.crop((0, 1300, 1224, 1584)).save(src)  # the band under the last paragraph
    out = tmp_path / "out"
    r = run_cli("convert", str(src), "-o", str(out), "--render-workers", "0", "--quiet")
    assert r.returncode == 0, r.stderr
    lines = [line for line in (out / "band.png" / "page-0001.md").read_text().splitlines() if line]
    assert len(lines) == 1 and "Example Press" in lines[0]  # nothing read from the pieces
