"""Page orientation: a page turned by 90, 180 or 270 degrees is turned back before reading."""

import numpy as np
import pytest
from PIL import Image, ImageDraw

from ocrcli.models.builtin import LinePageAdapter
from ocrcli.models.builtin.layout import despeckle, ink_mask
from ocrcli.models.builtin.page_layout import analyse_page, orientation, upside_down_evidence
from tests.models.layout_pages import _serif, columns_page


@pytest.fixture(scope="module")
def page() -> Image.Image:
    return columns_page(1).image


@pytest.mark.parametrize("degrees", [0, 90, 180, 270])
def test_a_turned_page_is_turned_back_exactly(page, degrees):
    turned = page.rotate(degrees, expand=True)  # counterclockwise
    layout = analyse_page(turned)
    assert layout.turns == (4 - degrees // 90) % 4
    assert np.array_equal(np.asarray(layout.image), np.asarray(page))


@pytest.mark.parametrize("degrees", [90, 180, 270])
def test_a_turned_two_column_page_reads_like_the_upright_one(degrees):
    upright = columns_page(2, seed=3).image
    want = analyse_page(upright).boxes
    got = analyse_page(upright.rotate(degrees, expand=True)).boxes
    assert [(b.x0, b.y0, b.x1, b.y1, b.block) for b in got] == \
        [(b.x0, b.y0, b.x1, b.y1, b.block) for b in want]


def test_ascenders_outweigh_descenders_on_an_upright_page(page):
    ink = despeckle(ink_mask(np.asarray(page, dtype=np.float32)))
    above, below = upside_down_evidence(ink, 20.0)
    assert above > 1.5 * below
    above, below = upside_down_evidence(np.rot90(ink, 2), 20.0)
    assert below > 1.5 * above


def test_a_page_with_too_little_text_stays_as_it_is():
    img = Image.new("L", (800, 1000), 255)
    ImageDraw.Draw(img).text((100, 100), "Hi", font=_serif(), fill=0)
    ink = despeckle(ink_mask(np.asarray(img, dtype=np.float32)))
    assert orientation(ink) == 0
    assert orientation(np.zeros((100, 100), dtype=bool)) == 0


def test_the_adapter_reads_a_turned_page_from_its_upright_image(page):
    adapter = LinePageAdapter(384)
    want = adapter.page_requests(page.convert("RGB"), 200)
    got = adapter.page_requests(page.rotate(270, expand=True).convert("RGB"), 200)
    assert len(got) == len(want) > 10
    assert all(np.array_equal(a.visual, b.visual) for a, b in zip(got, want))
