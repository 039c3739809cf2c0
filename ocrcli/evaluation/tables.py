"""Find tables in Markdown output and turn them into cell grids.

olmOCR-Bench's table tests look for a cell and its neighbours and headings, in
Markdown pipe tables and in HTML ``<table>`` elements alike. The parsing rules
here (what counts as a Markdown table, how spans fill the grid, which cells
count as headings) follow the official scorer closely, including its
permissive handling of malformed tables, because a different reading of the
same output would change pass/fail results.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from ocrcli.evaluation.html_tree import Element, parse_html


@dataclass
class TableGrid:
    """A table as a rectangular grid of cell texts plus what is known about headings.

    ``col_headers[c]`` lists heading texts that apply to column ``c`` and
    ``row_headers[r]`` those that apply to row ``r``; ``header_rows`` and
    ``header_cols`` are the indices of rows and columns made of heading cells.
    """

    cells: list[list[str]]
    header_rows: set[int] = field(default_factory=set)
    header_cols: set[int] = field(default_factory=set)
    col_headers: dict[int, list[str]] = field(default_factory=dict)
    row_headers: dict[int, list[str]] = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        return len(self.cells)

    @property
    def n_cols(self) -> int:
        return len(self.cells[0]) if self.cells else 0


def _pad(rows: list[list[str]]) -> list[list[str]]:
    width = max((len(r) for r in rows), default=0)
    return [r + [""] * (width - len(r)) for r in rows]


# --- Markdown pipe tables ---------------------------------------------------


def _is_separator(line: str) -> bool:
    body = line.replace("|", "").strip()
    return bool(body) and all(c in "- :" for c in body)


def _markdown_rows(lines: list[str]) -> list[list[str]]:
    """Cell texts of a block of pipe-containing lines; separator lines are dropped."""
    separator = next((i for i, line in enumerate(lines) if _is_separator(line)), None)
    rows: list[list[str]] = []
    for i, line in enumerate(lines):
        if i == separator:
            continue
        # Lines of only rule characters are formatting, wherever they appear.
        if line.strip() and all(c in "- :|" for c in line):
            continue
        cells = [c.strip() for c in line.split("|")]
        # Leading and trailing pipes leave an empty first/last piece.
        if cells and cells[0] == "":
            cells = cells[1:]
        if cells and cells[-1] == "":
            cells = cells[:-1]
        if cells:
            rows.append(cells)
    return rows


def markdown_table_rows(text: str) -> list[list[list[str]]]:
    """Raw (unpadded) rows of every Markdown pipe table in ``text``.

    A table is a run of at least two consecutive lines that contain ``|``; this
    is looser than GFM (no separator row is required), as olmOCR-Bench is.
    """
    tables: list[list[list[str]]] = []
    block: list[str] = []
    for line in [*text.strip().split("\n"), ""]:  # the sentinel closes the last block
        if "|" in line:
            block.append(line)
            continue
        if len(block) >= 2:
            rows = _markdown_rows(block)
            if rows:
                tables.append(rows)
        block = []
    return tables


def parse_markdown_tables(text: str) -> list[TableGrid]:
    """Markdown pipe tables; the first row and first column are taken as headings."""
    grids = []
    for rows in markdown_table_rows(text):
        cells = _pad(rows)
        grids.append(
            TableGrid(
                cells=cells,
                header_rows={0},
                header_cols={0},
                col_headers={c: [cells[0][c]] for c in range(len(cells[0]))},
                row_headers={r: [cells[r][0]] for r in range(1, len(cells))},
            )
        )
    return grids


# --- HTML tables -------------------------------------------------------------


def _add_unique(mapping: dict[int, list[str]], key: int, text: str) -> None:
    texts = mapping.setdefault(key, [])
    if text not in texts:
        texts.append(text)


@dataclass
class _Headings:
    """What an HTML table's heading cells say, gathered as its cells are read."""

    rows: set[int] = field(default_factory=set)  # rows made of heading cells
    cols: set[int] = field(default_factory=set)  # columns made of heading cells
    of_col: dict[int, list[str]] = field(default_factory=dict)  # column -> its heading texts
    of_row: dict[int, list[str]] = field(default_factory=dict)  # row -> its heading texts
    # Heading texts spanning several columns / rows, with the columns / rows covered.
    spanning_cols: dict[str, set[int]] = field(default_factory=dict)
    spanning_rows: dict[str, set[int]] = field(default_factory=dict)

    def heading_cell(self, text: str, r: int, c: int, rowspan: int, colspan: int,
                     row_count: int) -> None:
        self.cols.update(range(c, c + colspan))
        self.rows.update(r + i for i in range(1, rowspan) if r + i < row_count)
        for j in range(colspan):
            self.of_col.setdefault(c + j, []).append(text)
            if text and colspan > 1:
                self.spanning_cols.setdefault(text, set()).add(c + j)
        if text and rowspan > 1:
            self.spanning_rows.setdefault(text, set()).update(range(r, r + rowspan))

    def data_cell(self, text: str, r: int, c: int, rowspan: int, row_count: int) -> None:
        if rowspan > 1 and c in self.cols:
            # A row-spanning data cell in a heading column heads the rows it covers.
            for i in range(1, rowspan):
                if r + i < row_count:
                    self.of_row.setdefault(r + i, []).append(text)

    def spread(self, table_rows: list[list[str]]) -> None:
        """Headings over the cells they cover, once every row is read."""
        # A column-spanning heading also heads every column from its first one to
        # the right edge of any data row (the official scorer's reading).
        for text, cols in self.spanning_cols.items():
            for start in cols:
                for r, row in enumerate(table_rows):
                    if r not in self.rows:
                        for j in range(start, len(row)):
                            _add_unique(self.of_col, j, text)
        for text, covered in self.spanning_rows.items():
            for r in covered:
                if r < len(table_rows):
                    _add_unique(self.of_row, r, text)
        for c in self.cols:
            for r, row in enumerate(table_rows):
                if c < len(row) and row[c].strip():
                    _add_unique(self.of_row, r, row[c])


def _html_table_grid(table: Element) -> TableGrid | None:
    # Rows and cells are searched recursively, as BeautifulSoup's find_all does;
    # a nested table's rows therefore also count as rows of the outer table.
    rows = table.find_all("tr")
    heads = _Headings()
    thead = table.find("thead")
    if thead is not None:
        for tr in thead.find_all("tr"):
            # list.index compares structurally, as BeautifulSoup tags do.
            heads.rows.add(rows.index(tr))

    carried: dict[tuple[int, int], str] = {}  # grid positions filled by spans from above/left
    table_rows: list[list[str]] = []
    for r, row in enumerate(rows):
        row_cells: list[str] = []
        c = 0
        if row.find("th") is not None:
            heads.rows.add(r)
        for cell in row.find_all("th", "td"):
            while (r, c) in carried:
                row_cells.append(carried[(r, c)])
                c += 1
            text = cell.text(br="\n").strip()
            rowspan = int(cell.attrs.get("rowspan", 1))
            colspan = int(cell.attrs.get("colspan", 1))
            row_cells.append(text)
            for i in range(rowspan):
                for j in range(colspan):
                    if i or j:
                        # A row-spanning cell repeats its text in the rows below;
                        # other covered positions read as empty.
                        carried[(r + i, c + j)] = text if (j == 0 and i > 0) else ""
            if cell.tag == "th":
                heads.heading_cell(text, r, c, rowspan, colspan, len(rows))
            else:
                heads.data_cell(text, r, c, rowspan, len(rows))
            c += colspan
        table_rows.append(row_cells)

    if not table_rows:
        return None
    heads.spread(table_rows)
    return TableGrid(
        cells=_pad(table_rows),
        header_rows=heads.rows,
        header_cols=heads.cols,
        col_headers=heads.of_col,
        row_headers=heads.of_row,
    )


def parse_html_tables(text: str) -> list[TableGrid]:
    """Every HTML ``<table>`` in ``text`` (nested ones included), spans expanded.

    Raises ``ValueError`` when a ``rowspan``/``colspan`` is not an integer, as the
    official scorer does (a test on such output counts as an error).
    """
    root = parse_html(text)
    grids = (_html_table_grid(t) for t in root.find_all("table"))
    return [g for g in grids if g is not None]


# --- Markdown to HTML (for TEDS) ------------------------------------------


def markdown_tables_to_html(text: str) -> list[str]:
    """Each Markdown pipe table in ``text`` as an HTML document holding one table.

    Cells become ``<td>`` (no ``<thead>``/``<th>``), the form OmniDocBench
    compares after its own normalisation; rows keep their own cell counts.
    """
    documents = []
    for rows in markdown_table_rows(text):
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell, quote=False)}</td>" for cell in row) + "</tr>"
            for row in rows
        )
        documents.append(f"<html><body><table>{body}</table></body></html>")
    return documents
