from ocrcli.evaluation.html_tree import parse_html


def test_nesting_text_and_void_elements():
    root = parse_html("<div>a<b>b<br>c</b>d<img src=x>e</div>")
    div = root.find("div")
    assert div is not None
    assert div.text() == "abcde"
    assert div.text(br="\n") == "ab\ncde"
    assert [e.tag for e in div.iter_descendants()] == ["b", "br", "img"]
    assert root.find("img").attrs == {"src": "x"}


def test_entities_are_decoded_and_comments_dropped():
    root = parse_html("<p>&lt;x&gt; &amp; &#233;<!-- hidden --></p>")
    assert root.find("p").text() == "<x> & \u00e9"


def test_unmatched_end_tag_is_ignored_and_end_tag_closes_nearest_open():
    root = parse_html("<table><tr><td>a</span>b</td></tr></table>")
    assert root.find("td").text() == "ab"
    # </div> closes the inner <b> that is still open inside it.
    root = parse_html("<div><b>x</div>y")
    assert root.find("div").text() == "x"
    assert root.children[-1] == "y"


def test_without_implicit_closes_cells_nest_like_beautifulsoup():
    markup = "<table><tr><td>a<td>b</tr></table>"
    cells = parse_html(markup).find_all("td")
    assert [c.text() for c in cells] == ["ab", "b"]  # second cell nested in the first


def test_implicit_closes_make_sibling_cells_and_rows():
    markup = "<table><tr><td>a<td>b<tr><td>c</table>"
    root = parse_html(markup, implicit_table_closes=True)
    table = root.find("table")
    rows = table.find_all("tr")
    assert len(rows) == 2
    assert [[c.text() for c in r.find_all("td")] for r in rows] == [["a", "b"], ["c"]]
    # A cell of a nested table does not close the outer cell.
    nested = "<table><tr><td><table><tr><td>x</td></tr></table>y</td></tr></table>"
    outer = parse_html(nested, implicit_table_closes=True).find("td")
    assert outer.text() == "xy"


def test_bare_attribute_and_duplicate_attribute():
    root = parse_html('<td rowspan colspan="1" colspan="3">x</td>')
    assert root.find("td").attrs == {"rowspan": "", "colspan": "3"}
