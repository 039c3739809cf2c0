"""TEDS and TEDS-S: tree-edit-distance similarity between two HTML tables.

TEDS (PubTabNet, arXiv 1911.10683) is ``1 - TED(a, b) / max(|a|, |b|)``. The
tree edit distance comes from APTED with unit insert/delete costs; renaming a
node costs 1 when tag, colspan or rowspan differ, and for two ``<td>`` cells
otherwise the normalised Levenshtein distance between their content tokens
(characters and inline tags). TEDS-S ignores cell content.

Two details make results match the reference implementation exactly:

* ``|T|`` is the number of *all* elements below ``<table>``, inline tags inside
  cells (``<b>``, ``<sup>``, ...) included, even though the APTED tree stops at
  ``<td>`` and the table node itself is part of it.
* Only ``td`` is a cell. A ``th`` is an ordinary node whose children are
  compared as nodes and whose text is ignored, as in the reference.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from apted import APTED, Config
from rapidfuzz.distance import Levenshtein

from ocrcli.evaluation.html_tree import Element, parse_html
from ocrcli.evaluation.tables import markdown_tables_to_html


@dataclass(eq=False)
class _Node:
    tag: str
    colspan: int | None = None
    rowspan: int | None = None
    tokens: tuple[str, ...] = ()
    children: list[_Node] = field(default_factory=list)


class _TableConfig(Config):
    def rename(self, node1: _Node, node2: _Node) -> float:
        if (node1.tag, node1.colspan, node1.rowspan) != (node2.tag, node2.colspan, node2.rowspan):
            return 1.0
        if node1.tag == "td" and (node1.tokens or node2.tokens):
            return Levenshtein.normalized_distance(node1.tokens, node2.tokens)
        return 0.0

    def children(self, node: _Node) -> list[_Node]:
        return node.children


def _cell_tokens(element: Element) -> list[str]:
    """Characters of the cell's text with its inline tags as ``<b>``/``</b>`` tokens."""
    tokens: list[str] = []
    for child in element.children:
        if isinstance(child, str):
            tokens.extend(child)
        else:
            tokens.append(f"<{child.tag}>")
            tokens.extend(_cell_tokens(child))
            if child.tag != "unk":  # the reference's placeholder tag has no closing token
                tokens.append(f"</{child.tag}>")
    return tokens


def _to_tree(element: Element, structure_only: bool) -> _Node:
    if element.tag == "td":
        return _Node(
            "td",
            int(element.attrs.get("colspan", "1")),
            int(element.attrs.get("rowspan", "1")),
            () if structure_only else tuple(_cell_tokens(element)),
        )
    return _Node(element.tag, children=[_to_tree(c, structure_only) for c in element.elements()])


def _strip_tags(element: Element, tags: frozenset[str]) -> None:
    """Remove elements named in ``tags`` but keep their content in place (lxml's strip_tags)."""
    flat: list[Element | str] = []
    for child in element.children:
        if isinstance(child, Element):
            _strip_tags(child, tags)
            parts = child.children if child.tag in tags else [child]
        else:
            parts = [child]
        for part in parts:
            if isinstance(part, str) and flat and isinstance(flat[-1], str):
                flat[-1] += part
            else:
                flat.append(part)
    element.children = flat


def _find_table(markup: str) -> Element | None:
    # The first table that is not inside another table. The reference looks
    # only at html/body/table; bare <table> fragments are accepted here too.
    return parse_html(markup, implicit_table_closes=True).find("table")


def teds(
    pred_html: str,
    true_html: str,
    structure_only: bool = False,
    ignore_nodes: Iterable[str] = (),
) -> float:
    """TEDS (or TEDS-S with ``structure_only``) of a predicted table against the truth.

    Each argument is an HTML document or fragment; its first top-level
    ``<table>`` is compared. Tags in ``ignore_nodes`` are removed (content
    kept) on both sides first. A side with no table scores 0.0.
    """
    if not pred_html or not true_html:
        return 0.0
    pred, true = _find_table(pred_html), _find_table(true_html)
    if pred is None or true is None:
        return 0.0
    strip = frozenset(ignore_nodes)
    if strip:
        _strip_tags(pred, strip)
        _strip_tags(true, strip)
    n_nodes = max(sum(1 for _ in pred.iter_descendants()), sum(1 for _ in true.iter_descendants()))
    distance = APTED(
        _to_tree(pred, structure_only), _to_tree(true, structure_only), _TableConfig()
    ).compute_edit_distance()
    if n_nodes == 0:  # two empty tables; the reference would divide by zero
        return 1.0 if distance == 0 else 0.0
    return 1.0 - float(distance) / n_nodes


def teds_markdown(
    pred_markdown: str,
    true_html: str,
    structure_only: bool = False,
    ignore_nodes: Iterable[str] = (),
) -> float:
    """TEDS of the first Markdown pipe table in ``pred_markdown`` against an HTML table."""
    tables = markdown_tables_to_html(pred_markdown)
    if not tables:
        return 0.0
    return teds(tables[0], true_html, structure_only, ignore_nodes)
