import pytest

from ocrcli.evaluation.tables import (
    markdown_table_rows,
    markdown_tables_to_html,
    parse_html_tables,
    parse_markdown_tables,
)

MARKDOWN = """Intro text | with a pipe

| Year | Revenue | Cost |
|:-----|--------:|------|
| 2023 | 10 |
| 2024 | 12 | 7 |
after
"""


def test_markdown_table_found_and_padded():
    grids = parse_markdown_tables(MARKDOWN)
    # The lone pipe line above the blank line is not a table (needs two lines).
    assert len(grids) == 1
    grid = grids[0]
    assert grid.cells == [["Year", "Revenue", "Cost"], ["2023", "10", ""], ["2024", "12", "7"]]
    assert grid.header_rows == {0}
    assert grid.header_cols == {0}
    assert grid.col_headers == {0: ["Year"], 1: ["Revenue"], 2: ["Cost"]}
    assert grid.row_headers == {1: ["2023"], 2: ["2024"]}


def test_markdown_tables_need_no_separator_and_split_on_non_pipe_lines():
    text = "a | b\nc | d\n\nx|y\nz|w"
    assert markdown_table_rows(text) == [[["a", "b"], ["c", "d"]], [["x", "y"], ["z", "w"]]]
    # Only rule characters: no rows, so no table.
    assert markdown_table_rows("|---|\n|---|") == []


HTML = """
<table>
  <thead><tr><th rowspan="2">Name</th><th colspan="2">Scores</th></tr>
         <tr><th>A</th><th>B</th></tr></thead>
  <tbody>
    <tr><td>x<br>y</td><td>1</td><td>2</td></tr>
    <tr><td rowspan="2">z</td><td>3</td><td>4</td></tr>
    <tr><td>5</td><td>6</td></tr>
    <tr><td>w</td><td>7</td><td>8</td><td>9</td></tr>
  </tbody>
</table>
"""


def test_html_spans_fill_the_grid():
    (grid,) = parse_html_tables(HTML)
    assert grid.cells == [
        ["Name", "Scores", "", ""],  # padded to the widest row
        ["Name", "A", "B", ""],  # the row-spanning heading repeats; A/B follow it
        ["x\ny", "1", "2", ""],
        ["z", "3", "4", ""],
        ["z", "5", "6", ""],
        ["w", "7", "8", "9"],
    ]
    assert grid.header_rows == {0, 1}
    assert grid.header_cols == {0, 1, 2}


def test_html_headings():
    (grid,) = parse_html_tables(HTML)
    assert grid.col_headers[1] == ["Scores", "A"]
    assert "Scores" in grid.col_headers[2]
    # A column-spanning <th> also heads every column to its right that a data
    # row reaches (the official scorer's reading, kept for parity).
    assert "Scores" in grid.col_headers[3]
    assert 0 not in grid.col_headers or "Scores" not in grid.col_headers[0]
    assert "Name" in grid.row_headers[1]
    assert "x\ny" in grid.row_headers[2]


def test_block_span_fills_only_its_first_column_below():
    markup = (
        '<table><tr><td rowspan="2" colspan="2">X</td><td>y</td></tr>'
        "<tr><td>z</td></tr></table>"
    )
    (grid,) = parse_html_tables(markup)
    # Below the first row the span repeats its text in its first column only.
    assert grid.cells == [["X", "y", ""], ["X", "", "z"]]


def test_nested_tables_are_also_returned():
    markup = "<table><tr><td>a<table><tr><td>b</td></tr></table></td></tr></table>"
    grids = parse_html_tables(markup)
    assert len(grids) == 2
    assert grids[1].cells == [["b"]]


def test_bad_span_raises():
    with pytest.raises(ValueError):
        parse_html_tables('<table><tr><td rowspan="two">a</td></tr></table>')


def test_markdown_to_html_escapes_cells():
    (doc,) = markdown_tables_to_html("| a<b | c |\n|---|---|\n| 1 | 2 |")
    assert doc == (
        "<html><body><table><tr><td>a&lt;b</td><td>c</td></tr>"
        "<tr><td>1</td><td>2</td></tr></table></body></html>"
    )
