"""A minimal HTML element tree built on the standard library's ``html.parser``.

The scorers need only a few DOM operations (find descendants, read text, read
attributes), so a small tree avoids a dependency on BeautifulSoup or lxml.

Two tree-building behaviours are offered because the two reference tools we
reproduce disagree on malformed HTML:

* ``implicit_table_closes=False`` follows BeautifulSoup's ``html.parser``
  builder, which the olmOCR-Bench scorer uses: a start tag never closes an open
  element, and an end tag closes the nearest open element of that name (or is
  ignored when there is none).
* ``implicit_table_closes=True`` additionally closes an open cell when the next
  cell starts, an open row when the next row starts, and an open section when
  the next section starts, as libxml2 (the parser behind the PubTabNet TEDS
  reference) does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

# Elements that never have content; HTML allows them without an end tag.
VOID_ELEMENTS = frozenset(
    {
        "area", "base", "br", "col", "embed", "hr", "img", "input", "keygen", "link",
        "meta", "param", "source", "track", "wbr", "basefont", "bgsound", "frame",
        "spacer",
    }
)

# Text inside these elements is not document text (BeautifulSoup's get_text
# leaves it out too).
_NON_TEXT_ELEMENTS = frozenset({"script", "style", "template"})

# For implicit closing: a new start tag of the key kind closes the nearest open
# element of one of the value kinds, provided no element in the stop set lies
# between (so a cell in a nested table never closes a cell of the outer table).
_IMPLICIT_CLOSES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "td": (frozenset({"td", "th"}), frozenset({"tr", "table"})),
    "th": (frozenset({"td", "th"}), frozenset({"tr", "table"})),
    "tr": (frozenset({"tr"}), frozenset({"table", "thead", "tbody", "tfoot"})),
    "thead": (frozenset({"thead", "tbody", "tfoot"}), frozenset({"table"})),
    "tbody": (frozenset({"thead", "tbody", "tfoot"}), frozenset({"table"})),
    "tfoot": (frozenset({"thead", "tbody", "tfoot"}), frozenset({"table"})),
}


@dataclass
class Element:
    """An HTML element; ``children`` holds child elements and text strings in order."""

    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Element | str] = field(default_factory=list)

    def elements(self) -> Iterator[Element]:
        """Child elements, without text."""
        return (c for c in self.children if isinstance(c, Element))

    def iter_descendants(self) -> Iterator[Element]:
        """All descendant elements in document order (the element itself excluded)."""
        stack = list(reversed(list(self.elements())))
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(list(node.elements())))

    def find_all(self, *tags: str) -> list[Element]:
        """Descendant elements whose tag is one of ``tags``, in document order."""
        wanted = set(tags)
        return [e for e in self.iter_descendants() if e.tag in wanted]

    def find(self, *tags: str) -> Element | None:
        """The first descendant element whose tag is one of ``tags``."""
        wanted = set(tags)
        return next((e for e in self.iter_descendants() if e.tag in wanted), None)

    def text(self, br: str | None = None) -> str:
        """Concatenated descendant text; ``br`` (when given) stands in for each ``<br>``."""
        parts: list[str] = []
        self._collect_text(parts, br)
        return "".join(parts)

    def _collect_text(self, parts: list[str], br: str | None) -> None:
        for child in self.children:
            if isinstance(child, str):
                parts.append(child)
            elif child.tag == "br" and br is not None:
                parts.append(br)
            elif child.tag not in _NON_TEXT_ELEMENTS:
                child._collect_text(parts, br)


class _TreeBuilder(HTMLParser):
    def __init__(self, implicit_table_closes: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document")
        self._stack: list[Element] = [self.root]
        self._implicit = implicit_table_closes

    def _pop_to(self, tags: frozenset[str], stop: frozenset[str] = frozenset()) -> None:
        # Close the nearest open element in ``tags`` and everything opened after it.
        for depth in range(len(self._stack) - 1, 0, -1):
            tag = self._stack[depth].tag
            if tag in tags:
                del self._stack[depth:]
                return
            if tag in stop:
                return

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._implicit and tag in _IMPLICIT_CLOSES:
            closes, stop = _IMPLICIT_CLOSES[tag]
            self._pop_to(closes, stop)
        # Later duplicates of an attribute win, and a bare attribute reads as "".
        element = Element(tag, {k: (v if v is not None else "") for k, v in attrs})
        self._stack[-1].children.append(element)
        if tag not in VOID_ELEMENTS:
            self._stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: (v if v is not None else "") for k, v in attrs})
        self._stack[-1].children.append(element)

    def handle_endtag(self, tag: str) -> None:
        if tag not in VOID_ELEMENTS:
            self._pop_to(frozenset({tag}))

    def handle_data(self, data: str) -> None:
        siblings = self._stack[-1].children
        # Merge adjacent text so that a cell's text is one string, like a DOM's.
        if siblings and isinstance(siblings[-1], str):
            siblings[-1] += data
        else:
            siblings.append(data)


def parse_html(markup: str, implicit_table_closes: bool = False) -> Element:
    """Parse ``markup`` into a tree rooted at a synthetic ``#document`` element.

    Comments, doctypes and processing instructions are dropped; character and
    entity references are decoded.
    """
    builder = _TreeBuilder(implicit_table_closes)
    builder.feed(markup)
    builder.close()
    return builder.root
