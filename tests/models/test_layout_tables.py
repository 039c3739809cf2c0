"""Tables: found by their aligned whitespace or their rules, read cell by cell, written as
Markdown tables; a table typed with "|" stays text, as the reader was trained to read it."""

import numpy as np
import pytest
from PIL import Image, ImageDraw

from ocrcli.models.builtin.layout import LineBox, assemble_markdown, table_markdown
from ocrcli.models.builtin.page_layout import analyse_page
from tests.models.layout_pages import TABLE, _serif, spanning_heading_page, table_page


@pytest.mark.parametrize("ruled", [False, True])
def test_a_table_is_read_cell_by_cell(ruled):
    page = table_page(ruled)
    layout = analyse_page(page.image)
    assert [b.kind for b in layout.blocks] == ["text", "table", "text"]
    table = layout.blocks[1]
    assert (len(table.rows), len(table.cols)) == (len(TABLE), len(TABLE[0]))
    cells = [b for b in layout.boxes if b.kind == "cell"]
    assert sorted(b.cell for b in cells) == [(r, c) for r in range(6) for c in range(4)]
    assert all(b.readable for b in cells)
    # Rules are painted out of the image the cells are cut from.
    x0, y0, x1, y1 = page.regions["table"]
    rows = np.asarray(layout.image)[y0:y1, x0:x1]
    assert (rows < 128).sum(axis=1).max() < 0.5 * (x1 - x0)
    texts = [TABLE[b.cell[0]][b.cell[1]] if b.cell else "text" for b in layout.boxes]
    md = assemble_markdown(layout.boxes, texts)
    assert "| Name | Count | Price | Share |\n| --- | --- | --- | --- |\n| Paper | 282 |" in md


def test_a_typed_tables_header_whose_bars_stop_at_the_baseline_stays_text():
    # In some bold faces "|" sits on the baseline: above a header's descenders ("g") the bar
    # is shorter than its row. It stands where the body rows' bars stand, so the row is typed
    # too, and the table stays text (once it was cut into cells with the line above it).
    img = Image.new("L", (900, 400), 255)
    draw = ImageDraw.Draw(img)
    draw.text((40, 60), "for errors.", font=_serif(22), fill=0)  # a paragraph's last line
    xs = [40, 300, 560]
    rows = [["Segmenting", "Depot"], ["Irrevocably", "Keeping"]]
    for r, row in enumerate(rows):
        y = 100 + 40 * r
        ascent, descent = _serif(22).getmetrics()
        top, bottom = (y + 7, y + ascent - 1) if r == 0 else (y + 4, y + ascent + descent - 2)
        for x in xs:  # the header's bars stand on the baseline, from cap height
            draw.line((x, top, x, bottom), fill=0, width=2)
        for c, cell in enumerate(row):
            draw.text((xs[c] + 12, y), cell, font=_serif(22), fill=0)
    layout = analyse_page(img)
    assert [b.kind for b in layout.blocks] == ["text"]
    assert len(layout.boxes) == 3 and all(b.kind == "text" for b in layout.boxes)


def test_headings_spanning_a_tables_columns_are_its_first_rows():
    """A heading over several columns (and a date over a "$" column and a figure column)
    leaves no space where the columns' gutters are, so it is not cut by them: each of its
    phrases is one cell, which spans the columns nearer to it than to any other phrase, and
    the table is written in HTML, which can say so."""
    page = spanning_heading_page()
    layout = analyse_page(page.image)
    assert [b.kind for b in layout.blocks] == ["text", "table", "text"]
    table = layout.blocks[1]
    assert table.head == 3 and len(table.rows) == 3 + 4 and len(table.cols) == 7
    heads = {b.cell: b for b in layout.boxes if b.kind == "cell" and b.cell[0] < 3}
    spans = {cell: b.span for cell, b in heads.items()}
    assert spans == {(0, 1): 6, (1, 1): 2, (1, 3): 2, (1, 5): 2, (2, 1): 6}
    for cell, name in [((0, 1), "year"), ((1, 1), "date0"), ((1, 3), "date1"), ((1, 5), "date2"),
                       ((2, 1), "unit")]:
        x0, _, x1, _ = page.regions[name]
        assert heads[cell].x0 <= x0 + 4 and heads[cell].x1 >= x1 - 4  # the phrase whole
    texts = ["Year ended" if b.cell == (0, 1) else "x" for b in layout.boxes]
    md = assemble_markdown(layout.boxes, texts)
    assert '<tr><th></th><th colspan="6">Year ended</th></tr>' in md
    assert '<tr><th></th><th colspan="2">x</th><th colspan="2">x</th><th colspan="2">x</th></tr>' in md
    assert "<tr><td>x</td><td>x</td><td>x</td><td>x</td><td>x</td><td>x</td><td>x</td></tr>" in md


def test_column_names_above_a_spanning_line_stay_with_their_table():
    # The names line up with the columns, but a line spanning the figure columns parts them
    # from the rows below.
    img = Image.new("L", (1224, 700), 255)
    draw = ImageDraw.Draw(img)
    xs = [100, 420, 700, 900]
    for c, name in enumerate(["Source", "Type", "Tokens", "Words"]):
        draw.text((xs[c], 60), name, font=_serif(), fill=0)
    draw.text((520, 95), "Pretraining mix", font=_serif(), fill=0)
    for r, row in enumerate([["Web crawl", "Web pages", "3.71T", "3.32T"],
                             ["Code files", "Code", "83.0B", "70.0B"],
                             ["Papers", "Academic", "58.6B", "51.1B"],
                             ["Encyclopedia", "Reference", "3.7B", "3.16B"]]):
        for c, cell in enumerate(row):
            draw.text((xs[c], 130 + 32 * r), cell, font=_serif(), fill=0)
    layout = analyse_page(img)
    [table] = [b for b in layout.blocks if b.kind == "table"]
    assert table.head == 2 and len(table.cols) == 4
    names = sorted(b.cell for b in layout.boxes if b.cell and b.cell[0] == 0)
    assert names == [(0, 0), (0, 1), (0, 2), (0, 3)]


def test_text_on_dark_shaded_rows_is_read_not_taken_for_a_picture():
    page = table_page(False, shade=150)
    layout = analyse_page(page.image)
    assert not any(b.kind == "figure" for b in layout.boxes)
    assert [b.kind for b in layout.blocks] == ["text", "table", "text"]
    cells = [b for b in layout.boxes if b.kind == "cell"]
    assert sorted(b.cell for b in cells) == [(r, c) for r in range(6) for c in range(4)]
    x0, y0, x1, y1 = page.regions["table"]
    # The shade is painted as paper; the letters on it stay.
    shaded_row = np.asarray(layout.image)[y0 + 44 : y0 + 84, x0:x1]
    assert np.median(shaded_row) > 240 and shaded_row.min() < 80


def test_a_table_typed_with_bars_stays_text():
    img = Image.new("L", (900, 400), 255)
    draw = ImageDraw.Draw(img)
    rows = ["| Step    | Seconds | Share |", "| render  | 4.2     | 7%    |",
            "| decode  | 51.0    | 88%   |", "| write   | 2.9     | 5%    |"]
    xs = [40, 90, 260, 420, 560]
    for r, row in enumerate(rows):
        for c, cell in enumerate(row.strip("|").split("|")):
            draw.text((xs[c], 40 + 40 * r), "|", font=_serif(22), fill=0)
            draw.text((xs[c] + 14, 40 + 40 * r), cell.strip(), font=_serif(22), fill=0)
        draw.text((xs[-1], 40 + 40 * r), "|", font=_serif(22), fill=0)
    layout = analyse_page(img)
    assert [b.kind for b in layout.blocks] == ["text"]
    assert len(layout.boxes) == 4 and all(b.kind == "text" for b in layout.boxes)


def test_rows_typed_with_bars_among_other_lines_are_not_split_into_columns():
    """Wide typed cells leave an empty band down the rows, which the short lines around them
    share: a gutter between two text columns, but for the bars across it."""
    img = Image.new("L", (1224, 1000), 255)  # the lines in the middle: no header or footer
    draw = ImageDraw.Draw(img)
    font = _serif(22)
    draw.text((60, 340), "a short line above", font=font, fill=0)
    rows = [("Heading", "Another heading"), ("a cell with words", "the other cell"),
            ("2024-01-19 www.example.org", "45.56")]
    for r, cells in enumerate(rows):
        y = 400 + 40 * r
        for x, text in ((60, cells[0]), (760, cells[1])):
            draw.text((x, y), "|", font=font, fill=0)
            draw.text((x + 14, y), text, font=font, fill=0)
        draw.text((1100, y), "|", font=font, fill=0)
    for i, text in enumerate(["short lines below", "and one more", "and another", "a last one"]):
        draw.text((60, 522 + 36 * i), text, font=font, fill=0)
    layout = analyse_page(img)
    assert [b.kind for b in layout.blocks] == ["text"]
    assert len(layout.boxes) == 8  # each typed row one line, bars and both cells in it
    assert all(b.kind == "text" and b.x1 - b.x0 > 1000 for b in layout.boxes[1:4])


def _cell(r: int, c: int, top: int) -> LineBox:
    return LineBox(0, top, 10, top + 20, top, top + 20, False, False, kind="cell", block=1, cell=(r, c))


def test_table_markdown_joins_a_cells_lines_and_drops_empty_columns_and_bars():
    boxes = [_cell(0, 0, 0), _cell(0, 2, 0), _cell(1, 0, 30), _cell(1, 0, 50), _cell(1, 2, 30)]
    texts = ["Name", "| Value", "long", "name", "3.5 |"]
    assert table_markdown(boxes, texts) == "| Name | Value |\n| --- | --- |\n| long name | 3.5 |"
    assert table_markdown(boxes, [""] * 5) == ""
