"""Page regions: columns read one after the other, pictures left out, running headers and
footers kept apart from the body."""

import random

import numpy as np
import pytest
from PIL import Image

from ocrcli.models.builtin import LinePageAdapter
from ocrcli.models.builtin.layout import assemble_markdown, despeckle, ink_mask
from ocrcli.models.builtin.page_layout import analyse_page, fine_page, line_height
from ocrcli.text_layer import DPI_KEY
from tests.models.layout_pages import (
    _serif,
    blank,
    book_head_page,
    cards_page,
    chart_between_lines_page,
    chart_page,
    columns_page,
    cover_page,
    drop_cap_page,
    form_page,
    furniture_page,
    mid_page_number_page,
    narrow_table_page,
    paragraphs,
    photo_page,
    spread_footer_page,
    stamped_header_page,
)


def _inside(box, region, slack: int = 6) -> bool:
    x0, y0, x1, y1 = region
    return box.x0 >= x0 - slack * 4 and box.x1 <= x1 + slack * 4 and box.ink_top >= y0 - slack \
        and box.ink_bottom <= y1 + slack


@pytest.mark.parametrize("n", [2, 3])
def test_columns_are_read_one_after_the_other(n):
    page = columns_page(n, seed=n)
    layout = analyse_page(page.image)
    text = [b for b in layout.boxes if b.readable]
    assert len(text) == len(page.lines) + 1  # every line, and the title
    assert _inside(text[0], page.regions["title"])
    # Reading order: the title, then every line of column 0, then of column 1, ...
    at = 1
    for c in range(n):
        region = page.regions[f"column{c}"]
        count = sum(1 for _, (x0, _, x1, _) in page.lines if region[0] <= (x0 + x1) / 2 < region[2])
        assert all(_inside(b, region) for b in text[at : at + count]), f"column {c}"
        tops = [b.ink_top for b in text[at : at + count]]
        assert tops == sorted(tops)
        at += count
    assert at == len(text)


@pytest.mark.parametrize("staggered,rows", [(False, 2), (True, 2), (True, 1)])
def test_a_grid_of_cards_is_read_row_after_row(staggered, rows):
    # Staggered: the left card's first line, alone at its height, once broke the grid; in a
    # single row the space under the headings, its widest, parted them from their cards.
    page = cards_page(staggered=staggered, rows=rows)
    layout = analyse_page(page.image)
    order = []
    for b in layout.boxes:
        card = next(k for k, r in page.regions.items() if _inside(b, r))
        if not order or order[-1] != card:
            order.append(card)
    assert order == ["card1", "card2", "card3", "card4"][: 2 * rows]


def test_a_single_column_page_is_one_block():
    page = columns_page(1, seed=5)
    layout = analyse_page(page.image)
    assert [b.kind for b in layout.blocks] == ["text"]
    assert len(layout.boxes) == len(page.lines) + 1


@pytest.mark.parametrize("make", [chart_page, photo_page])
def test_pictures_are_never_read(make):
    page = make()
    layout = analyse_page(page.image)
    figures = [b for b in layout.boxes if b.kind == "figure"]
    assert len(figures) == 1 and not figures[0].readable
    fx0, fy0, fx1, fy1 = page.regions["figure"]
    f = figures[0]
    assert f.x0 <= fx0 + 12 and f.x1 >= fx1 - 12 and f.y0 <= fy0 + 12 and f.y1 >= fy1 - 12
    read = [b for b in layout.boxes if b.readable]
    assert len(read) == len(page.lines)
    assert not any(b.ink_bottom > fy0 and b.ink_top < fy1 for b in read)
    # The picture is painted out of the image the lines are cut from.
    crop = np.asarray(layout.image)[fy0 + 10 : fy1 - 30, fx0 + 10 : fx1 - 10]
    assert crop.min() > 200


def test_the_lines_just_above_and_under_a_chart_are_read_not_taken_into_it():
    page = chart_between_lines_page()
    layout = analyse_page(page.image)
    figures = [b for b in layout.boxes if b.kind == "figure"]
    fx0, fy0, fx1, fy1 = page.regions["figure"]
    assert len(figures) == 1 and figures[0].y0 >= fy0 - 4 and figures[0].y1 <= fy1 + 4
    read = [b for b in layout.boxes if b.readable]
    assert len(read) == len(page.lines)


def test_a_picture_becomes_a_placeholder_between_the_paragraphs_around_it():
    page = chart_page(seed=2)
    layout = analyse_page(page.image)
    texts = ["line" if b.readable else "" for b in layout.boxes]
    md = assemble_markdown(layout.boxes, texts)
    before, _, after = md.partition("![figure]()")
    assert before.strip() and after.strip() and "line" in before and "line" in after


def test_running_header_and_page_number_are_kept_out_of_the_body():
    page = furniture_page()
    layout = analyse_page(page.image)
    kinds = [b.kind for b in layout.blocks]
    assert kinds == ["header", "text", "footer"]
    header = [b for b in layout.boxes if b.kind == "header"]
    footer = [b for b in layout.boxes if b.kind == "footer"]
    assert len(header) == 1 and _inside(header[0], page.regions["header"])
    assert len(footer) == 1 and _inside(footer[0], page.regions["footer"])
    assert not header[0].readable and not footer[0].readable
    requests = LinePageAdapter(0).page_requests(page.image.convert("RGB"), 100)
    assert len(requests) == len(page.lines)
    md = assemble_markdown(layout.boxes, ["HF" if not b.readable else "body" for b in layout.boxes])
    assert "HF" not in md and "body" in md


def test_a_page_number_above_an_imprint_is_furniture_too():
    page = furniture_page(imprint=True)
    layout = analyse_page(page.image)
    footer = [b for b in layout.boxes if b.kind == "footer"]
    assert len(footer) == 2
    assert _inside(footer[0], page.regions["footer"]) and _inside(footer[1], page.regions["imprint"])
    assert sum(b.readable for b in layout.boxes) == len(page.lines)


def test_a_paragraphs_last_line_near_the_bottom_is_no_footer():
    page, draw = blank()
    rng = random.Random(4)
    y = 120
    while y < 1430:  # paragraphs of three lines, a wide gap (1.7 line heights) between them
        y = paragraphs(page, draw, 100, y, 1000, y + 3 * 27, rng) + 24
    assert 1430 <= y <= 1540  # the last line sits in the page's bottom tenth
    draw.text((100, y), "the end of the last paragraph", font=_serif(), fill=0)
    layout = analyse_page(page.image)
    assert [b.kind for b in layout.blocks] == ["text"]
    assert layout.boxes[-1].readable and layout.boxes[-1].ink_top >= y


def test_a_long_last_line_after_a_wide_gap_is_body_text():
    """A paragraph's one long line below a wide gap (as under a code block or a table) sits
    where a footer would, but a footer of body size is short: leaving the line out would
    lose text."""
    page, draw = blank()
    paragraphs(page, draw, 100, 120, 1000, 1300, random.Random(6))
    line = "the last paragraph of the page is a single line that runs across the body"
    draw.text((100, 1480), line, font=_serif(), fill=0)
    layout = analyse_page(page.image)
    assert [b.kind for b in layout.blocks] == ["text"]
    assert layout.boxes[-1].readable and layout.boxes[-1].ink_top >= 1480


def test_a_footer_with_parts_at_both_margins_is_furniture_though_wide():
    page = spread_footer_page()
    layout = analyse_page(page.image)
    assert [b.kind for b in layout.blocks] == ["text", "footer"]
    footer = [b for b in layout.boxes if b.kind == "footer"]
    assert footer and all(_inside(b, page.regions["footer"]) for b in footer)
    assert sum(b.readable for b in layout.boxes) == len(page.lines)


def test_a_drop_cap_is_read_at_the_start_of_its_paragraphs_first_line():
    page = drop_cap_page()
    layout = analyse_page(page.image)
    assert "figure" not in [b.kind for b in layout.blocks]
    x0, y0, x1, y1 = page.regions["first_line"]
    first = [b for b in layout.boxes if b.readable and b.ink_top <= y0 + 4 and b.ink_bottom >= y1 - 8]
    assert len(first) == 1
    upright = np.asarray(layout.image.convert("L"))
    cap = page.regions["cap"]
    moved = upright[y0 : y1, cap[0] : x0 - 2] < 128  # the cap, at the line's height
    assert moved.any() and first[0].x0 < x0 - 8
    assert (upright[y1 + 2 : cap[3], cap[0] : cap[2]] > 200).all()  # nothing left below it
    assert sum(b.readable for b in layout.boxes) == len(page.lines)


def test_a_running_title_with_its_page_number_and_a_stamp_above_it_is_the_header():
    page = stamped_header_page()
    layout = analyse_page(page.image)
    assert layout.blocks[0].kind == "header"
    header = [b for b in layout.boxes if b.kind == "header"]
    assert len(header) >= 2 and all(_inside(b, page.regions["header"]) for b in header)
    assert sum(b.readable for b in layout.boxes) == len(page.lines) + 1  # the heading, read too


def test_a_books_running_head_at_the_bodys_leading_is_the_header():
    """Page number, title and chapter at the margins, no wider gap under them than between
    the body's lines: their wide spaces, over prose that has none, set them apart."""
    page = book_head_page()
    layout = analyse_page(page.image)
    assert [b.kind for b in layout.blocks][:2] == ["header", "text"]
    header = [b for b in layout.boxes if b.kind == "header"]
    assert header and all(_inside(b, page.regions["header"]) for b in header)
    assert sum(b.readable for b in layout.boxes) == len(page.lines)


@pytest.mark.parametrize("make", [lambda: book_head_page(rows=4), narrow_table_page])
def test_a_table_opening_a_page_is_no_running_head(make):
    """Under a table's first row lies another row like it, or the row is narrower than the
    text: a running head spans the text's measure."""
    page = make()
    layout = analyse_page(page.image)
    assert "header" not in [b.kind for b in layout.blocks]
    read = [b for b in layout.boxes if b.readable]
    assert all(any(_inside(b, box, slack=2) for b in read) for _, box in page.lines[:3])


def test_the_empty_fields_of_a_form_are_not_read_and_do_not_set_the_line_height():
    """A framed field inks every row it spans: counted as a line, it made the page's lines
    look twice as tall, and its frame, too short for a rule at that height, was read."""
    page = form_page()
    gray = np.asarray(page.image, dtype=np.float32)
    assert line_height(despeckle(ink_mask(gray))) <= 30  # the labels' lines, not the fields
    layout = analyse_page(page.image)
    read = [b for b in layout.boxes if b.readable]

    def covers(b, box) -> bool:
        x0, y0, x1, y1 = box
        return b.x0 <= x0 + 4 and b.x1 >= x1 - 4 and b.ink_top <= y0 + 6 and b.ink_bottom >= y1 - 6

    assert all(any(covers(b, box) for b in read) for _, box in page.lines)
    # One line a row (a label, and "Fax" where a row has two fields), no frame read alone.
    assert len(read) == 1 + 14 and all(any(covers(b, box) for _, box in page.lines) for b in read)


def test_the_page_number_of_a_body_that_ends_mid_page_is_furniture():
    page = mid_page_number_page()
    layout = analyse_page(page.image)
    assert layout.blocks[-1].kind == "footer"
    footer = [b for b in layout.boxes if b.kind == "footer"]
    assert len(footer) == 1 and _inside(footer[0], page.regions["footer"])
    assert sum(b.readable for b in layout.boxes) == len(page.lines)


def test_small_print_at_the_foot_of_a_sparse_cover_page_is_furniture():
    """The cover's own gaps are wider than the gap between its two foot lines: "set apart"
    is measured in line heights there, not against the body's gaps."""
    page = cover_page()
    layout = analyse_page(page.image)
    assert layout.blocks[-1].kind == "footer"
    footer = [b for b in layout.boxes if b.kind == "footer"]
    assert len(footer) == 2 and all(_inside(b, page.regions["footer"]) for b in footer)
    assert sum(b.readable for b in layout.boxes) == len(page.lines) + 1  # the title, read too


def test_a_big_heading_at_the_top_is_no_running_header():
    page = furniture_page(heading=True)
    layout = analyse_page(page.image)
    assert layout.blocks[0].kind == "text"
    assert _inside(layout.boxes[0], page.regions["heading"]) and layout.boxes[0].readable


def test_a_page_rendered_finer_is_laid_out_reduced_and_read_from_its_own_pixels():
    page = columns_page(2)
    coarse = page.image.convert("RGB")
    fine = page.image.resize((2 * page.image.width, 2 * page.image.height), Image.LANCZOS)
    fine = fine.convert("RGB")
    fine.info[DPI_KEY] = 288.0
    adapter = LinePageAdapter(384)
    read_coarse = adapter.page_requests(coarse, 100)
    read_fine = adapter.page_requests(fine, 100)
    assert read_fine[0].meta.boxes == read_coarse[0].meta.boxes  # one layout, every line read
    assert {r.meta.index for r in read_fine} == {r.meta.index for r in read_coarse}

    def whole_lines(requests):  # lines read in one piece (pieces may be cut apart elsewhere)
        index = [r.meta.index for r in requests]
        return {i: r.visual for i, r in zip(index, requests) if index.count(i) == 1}

    coarse_lines, fine_lines = whole_lines(read_coarse), whole_lines(read_fine)
    same_width = [(coarse_lines[i], v) for i, v in fine_lines.items()
                  if i in coarse_lines and coarse_lines[i].shape == v.shape]
    assert len(same_width) > 0.5 * len(coarse_lines)
    # Cut from the fine pixels (not the coarse ones enlarged), showing the same line.
    assert all(0 < np.abs(a - b).mean() < 0.08 for a, b in same_width)


@pytest.mark.parametrize("make", [photo_page, chart_page, columns_page], ids=["photo", "chart", "text"])
def test_the_fine_page_takes_what_the_layout_painted_and_keeps_the_rest(make):
    """What the layout painted out (a picture, a chart) is paper on the fine page too; every
    pixel the layout left alone is the fine page's own."""
    page = make()
    fine = page.image.resize((2 * page.image.width, 2 * page.image.height), Image.LANCZOS)
    layout = analyse_page(page.image)
    out = np.asarray(fine_page(fine, page.image, layout), dtype=np.int16)
    changed = np.asarray(layout.image) != np.asarray(page.image.convert("L"))
    near_change = np.kron(changed, np.ones((2, 2), bool))
    for _ in range(2):  # bilinear enlargement reaches one coarse pixel further
        near_change[1:] |= near_change[:-1]
        near_change[:-1] |= near_change[1:]
        near_change[:, 1:] |= near_change[:, :-1]
        near_change[:, :-1] |= near_change[:, 1:]
    untouched = ~near_change
    assert np.array_equal(out[untouched], np.asarray(fine, dtype=np.int16)[untouched])
    if changed.any():  # inside what was painted (every neighbour painted too): the paint
        deep = changed.copy()
        deep[1:-1, 1:-1] &= (changed[:-2, 1:-1] & changed[2:, 1:-1] & changed[1:-1, :-2]
                             & changed[1:-1, 2:])
        deep[[0, -1]], deep[:, [0, -1]] = False, False
        inside = np.kron(deep, np.ones((2, 2), bool))
        painted = np.kron(np.asarray(layout.image), np.ones((2, 2), np.uint8)).astype(np.int16)
        assert inside.any() and np.abs(out[inside] - painted[inside]).max() <= 1
