from dataclasses import replace

import numpy as np
from PIL import Image, ImageDraw

from ocrcli.models.builtin import LinePageAdapter, join_pieces
from ocrcli.models.builtin.layout import (
    LINE_HEIGHT,
    WIDE_GAP,
    LineBox,
    assemble_markdown,
    join_paragraph,
    line_tensor_array,
    narrow_wide_gaps,
    segment_lines,
    split_wide,
)
from ocrcli.models.builtin.page_layout import analyse_page
from ocrcli.training.synth import _font, available_fonts


def _page(lines: list[tuple[str, int]], shaded: bool = False) -> Image.Image:
    img = Image.new("L", (900, 140 + 60 * len(lines)), 255)
    draw = ImageDraw.Draw(img)
    y = 40
    fonts = available_fonts()
    for text, size in lines:
        font = _font(fonts["bold" if size > 30 else "serif"][0], size)
        if shaded:
            draw.rectangle((30, y - 6, 870, y + size + 8), fill=225)
        draw.text((40, y), text, font=font, fill=0)
        y += int(size * 1.6)
    return img


def test_lines_are_found_and_normalised():
    img = _page([("A heading", 44), ("first body line", 22), ("second body line", 22)])
    boxes = segment_lines(img)
    assert len(boxes) == 3
    arr = line_tensor_array(img, boxes[1])
    assert arr.shape[0] == LINE_HEIGHT and arr.shape[1] % 8 == 0 and arr.max() > 0.9


def test_wide_gaps_between_words_are_narrowed_and_ink_is_kept():
    arr = np.zeros((LINE_HEIGHT, 120), dtype=np.float32)
    arr[8:24, 2:20] = 1.0  # a word
    arr[8:24, 26:40] = 1.0  # an ordinary space (6 columns) before the next
    arr[8:24, 90:101] = 1.0  # a gap of 50 columns before the last
    out = narrow_wide_gaps(arr)
    assert out.shape[0] == LINE_HEIGHT and out.shape[1] % 8 == 0
    inked = out.max(axis=0) > 0.25
    assert inked.sum() == (arr.max(axis=0) > 0.25).sum()
    gaps = [len(run) for run in "".join("x" if v else "." for v in inked).strip(".").split("x") if run]
    assert gaps == [6, WIDE_GAP]
    assert narrow_wide_gaps(arr[:, :40]).shape == (LINE_HEIGHT, 40)  # nothing wide: as it was


def test_a_shaded_line_keeps_its_wide_gaps():
    img = Image.new("L", (900, 120), 255)
    draw = ImageDraw.Draw(img)
    font = _font(available_fonts()["mono"][0], 22)
    draw.text((40, 40), "x = 1                  # note", font=font, fill=0)
    box = segment_lines(img)[0]
    plain = line_tensor_array(img, replace(box, shaded=False))
    shaded = line_tensor_array(img, replace(box, shaded=True))
    assert plain.shape[1] < shaded.shape[1]


def test_assemble_headings_lists_tables_and_paragraphs():
    img = _page([("Title", 44), ("one two", 22), ("three", 22), ("\u2022 item", 22),
                 ("| a | b |", 22), ("| 1 | 2 |", 22)])
    boxes = segment_lines(img)
    md = assemble_markdown(boxes, ["Title", "one two", "three", "\u2022 item", "| a | b |",
                                   "| 1 | 2 |"])
    first = md.split("\n")[0]
    assert first.startswith("#") and first.lstrip("#").strip() == "Title"
    assert "one two three" in md
    assert "- item" in md
    assert "| a | b |\n| --- | --- |\n| 1 | 2 |" in md


def test_a_paragraph_in_large_print_is_a_paragraph_not_a_run_of_headings():
    # Lines of prose, each with ascenders and descenders, as a paragraph's lines have.
    lines = [("A heading", 30), ("body text of the page", 20), ("body text, typed plainly", 20),
             ("a lead in large print, typeset", 30), ("by the journal, spanning lines", 30),
             ("quite like a paper's abstract", 30)] + [("body text of the page, typed plainly", 20)] * 6
    img = _page(lines)
    boxes = segment_lines(img)
    assert len(boxes) == len(lines)
    md = assemble_markdown(boxes, [t for t, _ in lines])
    assert md.startswith("## A heading") or md.startswith("# A heading")
    assert ("\n\na lead in large print, typeset by the journal, spanning lines quite like a "
            "paper's abstract") in md
    assert md.count("#") == md.split("\n")[0].count("#")


def test_a_heading_set_on_two_lines_is_one_heading():
    body = [("body text of the page, typed plainly", 20)] * 3
    lines = [("Corporate social responsibility and", 40), ("the tobacco industry: hope or hype?", 40),
             *body, ("Background", 40), ("and history", 40), *body, ("Methods", 40),
             ("Data sources", 40), *body]
    img = _page(lines)
    boxes = segment_lines(img)
    assert len(boxes) == len(lines)
    md = assemble_markdown(boxes, [t for t, _ in lines])
    heads = [line for line in md.split("\n") if line.startswith("#")]
    assert [h.lstrip("#").strip() for h in heads] == [
        "Corporate social responsibility and the tobacco industry: hope or hype?",
        "Background and history", "Methods", "Data sources"]


def test_a_paragraph_carried_on_in_the_next_column_is_one_paragraph():
    def column(block: int, x: int, lines: list[str]) -> list[LineBox]:
        return [LineBox(x, 100 + 30 * k, x + 400, 120 + 30 * k, 102 + 30 * k, 118 + 30 * k,
                        False, False, block=block) for k in range(len(lines))]

    left = ["The first column of the page ends", "in the middle of a sentence, as"]
    right = ["columns often do, and the second", "column carries it on.", "", "A new paragraph."]
    boxes = column(0, 50, left) + column(1, 500, right)
    boxes[-1] = replace(boxes[-1], y0=boxes[-1].y0 + 40, ink_top=boxes[-1].ink_top + 40,
                        ink_bottom=boxes[-1].ink_bottom + 40, y1=boxes[-1].y1 + 40)
    md = assemble_markdown(boxes, left + right)
    assert md.split("\n\n") == [
        "The first column of the page ends in the middle of a sentence, as columns often do, "
        "and the second column carries it on.", "A new paragraph."]
    ended = left[:1] + ["in the middle of a sentence."]
    md = assemble_markdown(boxes, ended + right)
    assert md.startswith("The first column of the page ends in the middle of a sentence.\n\ncolumns")


def test_a_word_hyphenated_at_a_lines_end_is_made_whole():
    lines = ["as an irretrie-", "vably negative force, a well-", "known COVID-", "19 test, a Quebec-",
             "Ontario line, a re-", "Étude"]
    assert join_paragraph(lines) == ("as an irretrievably negative force, a wellknown COVID- 19 test, "
                                     "a Quebec- Ontario line, a re- Étude")
    img = _page([("one irretrie-", 22), ("vably two", 22)])
    assert "one irretrievably two" in assemble_markdown(segment_lines(img), ["one irretrie-", "vably two"])


def _row(top: int) -> LineBox:
    return LineBox(20, top - 3, 500, top + 23, top, top + 20, shaded=False, rule=False)


def test_the_space_under_a_table_header_does_not_split_the_table():
    # The header's rule touches the header's ink, so it is no box of its own: only a wider gap
    # shows it. Rows: header at 100, body rows 15 px below it, then 5 px apart.
    boxes = [_row(40), _row(65), _row(100), _row(135), _row(160), _row(185)]
    texts = ["some text", "more text", "| a | bb |b |", "| 1 | 2 |", "| 3 | 4 |", "| 5 | 6 |"]
    md = assemble_markdown(boxes, texts)
    assert md == "some text more text\n\n| a | bb |b |\n| --- | --- |\n| 1 | 2 |\n| 3 | 4 |\n| 5 | 6 |"
    # A wide gap after a body row still ends the table.
    md = assemble_markdown(boxes[:5] + [_row(215)], texts)
    assert md.endswith("| 3 | 4 |\n\n| 5 | 6 |\n| --- | --- |")


def test_noise_on_a_shaded_block_does_not_stretch_its_lines():
    img = _page([("x = 1", 22), ("y = 2", 22)], shaded=True)
    arr = np.asarray(img, dtype=np.float32)
    noise = np.random.default_rng(0).normal(0, 14, arr.shape)
    noisy = Image.fromarray(np.clip(arr + noise, 0, 255).astype(np.uint8))
    boxes = segment_lines(noisy)
    assert len(boxes) == 2 and all(b.shaded for b in boxes)
    assert all(b.x1 < 200 for b in boxes)  # the text ends near x = 110; the block at 870


def test_shaded_lines_become_a_code_block():
    img = _page([("x = 1", 22), ("y = 2", 22)], shaded=True)
    boxes = segment_lines(img)
    assert all(b.shaded for b in boxes)
    assert assemble_markdown(boxes, ["x = 1", "y = 2"]) == "```\nx = 1\ny = 2\n```"


LONG = "the quick brown fox jumps over the lazy dog while seven wizards quietly hex the judge"


def test_wide_lines_are_cut_at_word_gaps_into_narrow_pieces():
    img = _page([(LONG, 20), ("short line", 20)])
    gray = np.asarray(img, dtype=np.float32)
    long_box, short_box = segment_lines(img)
    pieces = split_wide(img, long_box, 256)
    assert len(pieces) >= 3
    assert pieces[0].x0 == long_box.x0 and pieces[-1].x1 == long_box.x1
    assert all(a.x1 + 1 == b.x0 for a, b in zip(pieces, pieces[1:]))  # left to right, no overlap
    for piece in pieces:
        assert line_tensor_array(img, piece).shape[1] <= 256 + 8
    ink_cols = ~np.all(gray[long_box.ink_top : long_box.ink_bottom + 1] > 128, axis=0)
    assert not any(ink_cols[p.x1] for p in pieces[:-1])  # every cut runs through blank paper
    assert split_wide(img, short_box, 256) == [short_box]
    assert split_wide(img, long_box, 0) == [long_box]  # 0: whole lines (older weights)


def test_adapter_joins_a_lines_pieces_with_a_space_in_order():
    img = _page([("Title", 44), (LONG, 20)])
    whole = LinePageAdapter(0).page_requests(img, 200)
    pieces = LinePageAdapter(256).page_requests(img, 200)
    assert len(whole) == 2 and len(pieces) > 3
    assert [r.meta.index for r in pieces] == sorted(r.meta.index for r in pieces)
    texts = ["Title"] + [f"p{i}" for i in range(len(pieces) - 1)]
    body = LinePageAdapter(256).assemble(pieces, texts).split("\n\n")[1]
    assert body == " ".join(texts[1:])


def test_runs_of_spaces_are_one_space_except_in_code():
    plain = LinePageAdapter(0).page_requests(_page([("simply as a", 22), ("corporate", 22)]), 200)
    assert LinePageAdapter(0).assemble(plain, ["simply  as a", "corporate  entity"]) == \
        "simply as a corporate entity"
    code = LinePageAdapter(0).page_requests(_page([("x = 1", 22), ("y = 2", 22)], shaded=True), 200)
    assert LinePageAdapter(0).assemble(code, ["x = 1  # one", "y = 2"]) == "```\nx = 1  # one\ny = 2\n```"


def test_a_run_of_one_symbol_cut_between_its_glyphs_is_joined_back_without_a_space():
    assert join_pieces(["*" * 20, "*" * 20, "**** *"]) == "*" * 44 + " *"
    assert join_pieces(["Contents .....", "..... 12"]) == "Contents .......... 12"
    # A cut at a word space stays one: spaced runs, words, a single symbol either side.
    assert join_pieces(["* * *", "* * *"]) == "* * * * * *"
    assert join_pieces(["see", "see"]) == "see see"
    assert join_pieces(["a *", "* b"]) == "a * * b"
    assert join_pieces([]) == ""


def test_underscores_and_accents_stay_with_their_line():
    img = Image.new("L", (900, 400), 255)
    draw = ImageDraw.Draw(img)
    mono = _font(available_fonts()["mono"][0], 30)
    serif = _font(available_fonts()["serif"][0], 30)
    draw.text((40, 40), "_CD_FLAG_BITS = 5", font=mono, fill=0)  # no descenders but "_"
    draw.text((40, 120), "ÊÎÔ ÉÈ ÂÛ", font=serif, fill=0)  # accents over capitals
    draw.text((40, 200), "plain words", font=serif, fill=0)
    draw.line((40, 300, 860, 300), fill=0, width=2)  # a rule stays a rule
    boxes = segment_lines(img)
    assert [b.rule for b in boxes] == [False, False, False, True]


def _noisy(img: Image.Image, sigma: float, seed: int = 0) -> Image.Image:
    arr = np.asarray(img, dtype=np.float32)
    noise = np.random.default_rng(seed).normal(0, sigma, arr.shape)
    return Image.fromarray(np.clip(arr + noise, 0, 255).astype(np.uint8))


def test_scanner_noise_does_not_make_plain_lines_look_shaded():
    # Paper at 245 with strong noise: the page's 75th percentile sits above most lines'
    # paper, which once turned every line of such a page into a code block.
    img = _page([("plain words on paper", 22), ("and a second line", 22),
                 ("a third one here", 22)])
    img = Image.fromarray(np.minimum(np.asarray(img), 245).astype(np.uint8))
    boxes = segment_lines(_noisy(img, 14))
    assert len(boxes) == 3 and not any(b.shaded for b in boxes)
    code = segment_lines(_noisy(_page([("x = 1", 22), ("y = 2", 22)], shaded=True), 14))
    assert all(b.shaded for b in code)


def test_a_paragraph_whose_every_line_touches_the_next_is_read_line_by_line():
    # A tightly set old book: each line's descenders run into the next line's ascenders, so
    # no row between lines is empty and the whole paragraph is one band of ink.
    font = _font(available_fonts()["serif"][0], 26)
    img = Image.new("L", (900, 420), 255)
    draw = ImageDraw.Draw(img)
    texts = [f"jumping gypsy quay{i} lifted by the boughs" for i in range(9)]
    for i, text in enumerate(texts):
        draw.text((40, 40 + 26 * i), text, font=font, fill=0)
    for i in range(1, 9):  # a stroke through every gap between lines: nothing is empty
        draw.rectangle((60 + 50 * i, 40 + 26 * i - 6, 62 + 50 * i, 40 + 26 * i + 10), fill=0)
    boxes = [b for b in analyse_page(img).boxes if b.readable]
    assert len(boxes) == 9
    assert all(20 <= b.ink_height <= 40 for b in boxes)


def test_two_touching_lines_of_small_print_under_body_text_are_read_as_two():
    # The page's usual line is the body's; a note in small print, its two lines touching,
    # is under 1.7 usual lines tall but holds two lines all the same.
    img = _page([("Body text of the usual size", 24), ("and a second line of it", 24),
                 ("and a third line of it", 24), ("", 24), ("", 24)])
    draw = ImageDraw.Draw(img)
    small = _font(available_fonts()["serif"][0], 15)
    draw.text((40, 200), "the first line of a note in small print, quite long", font=small, fill=0)
    draw.text((40, 215), "the second line of the same note, below it", font=small, fill=0)
    draw.rectangle((300, 210, 301, 218), fill=0)  # a descender resting on the line below
    boxes = [b for b in analyse_page(img).boxes if b.readable]
    assert len(boxes) == 5 and boxes[3].ink_bottom < boxes[4].ink_top


def test_two_lines_whose_ink_touches_are_read_as_two():
    # A descender resting on the accent of the line below joins their rows of ink.
    img = _page([("plain words", 22), ("more words", 22), ("Above here", 22),
                 ("Below there", 22)])
    boxes = segment_lines(img)
    assert len(boxes) == 4
    upper, lower = boxes[2], boxes[3]
    draw = ImageDraw.Draw(img)
    draw.rectangle((60, upper.ink_bottom, 62, lower.ink_top), fill=0)
    touching = segment_lines(img)
    assert len(touching) == 4
    assert abs(touching[2].ink_top - upper.ink_top) <= 1
    assert abs(touching[3].ink_bottom - lower.ink_bottom) <= 1
    # A heading twice the body's height is dense with ink in its middle: it stays whole.
    assert len(segment_lines(_page([("Big Heading", 46), ("body one", 22), ("body two", 22),
                                    ("body three", 22)]))) == 4
