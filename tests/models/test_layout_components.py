"""The layout step's building blocks: connected components, rules, runs."""

from collections import deque

import numpy as np
import pytest
from PIL import Image

from ocrcli.models.builtin.layout import despeckle, ink_mask
from ocrcli.models.builtin.page_layout import components, long_runs, rulings
from tests.models.layout_pages import table_page


def _flood_boxes(mask: np.ndarray) -> list[tuple[int, int, int, int, int]]:
    """8-connected components by breadth-first search: (top, left, bottom, right, area)."""
    h, w = mask.shape
    seen = np.zeros_like(mask)
    out = []
    for y, x in zip(*np.nonzero(mask)):
        if seen[y, x]:
            continue
        seen[y, x] = True
        queue, box, area = deque([(y, x)]), [y, x, y, x], 0
        while queue:
            cy, cx = queue.popleft()
            area += 1
            box = [min(box[0], cy), min(box[1], cx), max(box[2], cy), max(box[3], cx)]
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    ny, nx = cy + dy, cx + dx
                    if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not seen[ny, nx]:
                        seen[ny, nx] = True
                        queue.append((ny, nx))
        out.append((*box, area))
    return sorted(out)


@pytest.mark.parametrize("seed", range(4))
def test_components_match_a_flood_fill(seed):
    mask = np.random.default_rng(seed).random((40, 60)) < 0.35
    comps = components(mask)
    got = sorted((*map(int, b), int(a)) for b, a in zip(comps.boxes, comps.area))
    assert got == _flood_boxes(mask)
    label = int(np.argmax(comps.area))
    rows, cols = comps.pixels(label)
    assert rows.size == comps.area[label]
    assert np.array_equal(comps.mask(mask.shape, np.array([label]))[rows, cols], np.ones(rows.size, bool))


def test_components_of_an_empty_mask():
    assert components(np.zeros((5, 5), dtype=bool)).area.size == 0


def test_long_runs_keep_only_runs_that_long():
    mask = np.zeros((3, 20), dtype=bool)
    mask[0, 2:12] = True  # 10 long
    mask[1, 0:4] = True
    mask[2, 5:20] = True  # 15 long
    assert long_runs(mask, 10).sum(axis=1).tolist() == [10, 0, 15]
    assert long_runs(mask.T, 10, axis=0).T.sum(axis=1).tolist() == [10, 0, 15]


def test_a_tables_grid_is_found_as_rules_and_its_text_is_not():
    page = table_page(ruled=True)
    gray = np.asarray(page.image, dtype=np.float32)
    ink = despeckle(ink_mask(gray))
    horizontal, vertical = rulings(ink, 20.0)
    x0, y0, x1, y1 = page.regions["table"]
    assert 7 * (x1 - x0) * 0.9 < horizontal.sum() < 7 * (x1 - x0) * 2 * 1.2  # 7 rules, 2 px thick
    assert vertical[y0 + 5 : y1 - 5, x0 - 2 : x0 + 3].any(axis=1).all()
    outside = np.ones_like(ink)
    outside[y0 - 5 : y1 + 5, x0 - 5 : x1 + 5] = False
    assert not (horizontal | vertical)[outside].any()  # no letter of the text is a rule


def test_a_blank_page_has_no_rules():
    ink = despeckle(ink_mask(np.asarray(Image.new("L", (100, 100), 255), dtype=np.float32)))
    h, v = rulings(ink, 20.0)
    assert not h.any() and not v.any()
