import random

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from ocrcli.models.builtin.layout import PIECE_WIDTH, segment_lines, split_wide
from ocrcli.training.data import page_lines, piece_texts
from ocrcli.training.synth import (
    GEOMETRIC_FONTS,
    HAND_FONTS,
    LIGHT_FONTS,
    PageStyle,
    TypesetLine,
    _font,
    _font_index,
    _Typesetter,
    available_fonts,
    erases_text,
    make_page,
    missing_glyphs,
)
from ocrcli.training.text import TextSources


def test_pages_are_deterministic_by_seed_and_carry_markdown():
    src = TextSources.load("train", max_files=40)
    a, b = make_page(7, src), make_page(7, src)
    assert a.markdown == b.markdown and a.image.tobytes() == b.image.tobytes()
    assert make_page(8, src).markdown != a.markdown
    assert a.lines and all(line.text for line in a.lines)


def test_scanner_damage_leaves_other_pages_as_they_were_and_keeps_the_text():
    src = TextSources.load("train", max_files=40)
    changed = 0
    for seed in range(6):
        plain = make_page(seed, src)
        assert plain.image.tobytes() == make_page(seed, src, scan=0.0).image.tobytes()
        damaged = make_page(seed, src, scan=1.0)
        clean = make_page(seed, src, augment=False)
        assert damaged.markdown == plain.markdown
        assert not erases_text(clean.image, damaged.image, clean.lines)  # the truth still holds
        changed += damaged.image.tobytes() != plain.image.tobytes()
    assert changed >= 3


@pytest.mark.parametrize("dictionary", [True, False], ids=["word list", "no word list"])
def test_train_and_test_text_come_from_different_files(tmp_path, dictionary):
    """Held out by file (prose, code) and by word, with a word list or without one (the
    words then come from the prose, where common words are in both halves)."""
    words_file = tmp_path / "words"
    if dictionary:
        words_file.write_text("\n".join(f"{a}{b}{c}" for a in "abcdefgh" for b in "ijklmnop"
                                        for c in "qrstuvwxyz") + "\n", encoding="latin-1")
    train = TextSources.load("train", words_file=words_file)
    test = TextSources.load("test", words_file=words_file)
    shared = set(train.prose) & set(test.prose)  # boilerplate docstrings repeat across files
    assert test.prose and len(shared) < 0.05 * len(set(test.prose))
    assert test.words and train.words and not set(train.words) & set(test.words)
    if dictionary:
        assert set(train.words) | set(test.words) == set(words_file.read_text().split())


def test_most_pages_segment_into_their_typeset_lines():
    src = TextSources.load("train", max_files=40)
    matched = sum(page_lines(make_page(seed, src)) is not None for seed in range(12))
    assert matched >= 8  # the rest are skipped in training, never mislabelled


def test_pages_typeset_twice_as_large_are_read_as_finer_renders():
    """`fine` pages: the same page at twice the size, segmented at its own size and cut from
    the full pixels, as the converter reads a 288 dpi render. Other pages stay as they were."""
    src = TextSources.load("train", max_files=40)
    matched = 0
    for seed in range(8):
        plain, fine = make_page(seed, src), make_page(seed, src, fine=1.0)
        assert make_page(seed, src, fine=0.0).image.tobytes() == plain.image.tobytes()
        assert (fine.scale, fine.image.size) == (2, (plain.image.width * 2, plain.image.height * 2))
        samples = page_lines(fine)
        if samples is None:
            continue
        matched += 1
        assert all(s.image.shape[0] == 32 for s in samples)
        lines = [line.text for line in fine.lines]
        assert all(any(s.text in line for line in lines) for s in samples)  # pieces of its lines
    assert matched >= 5


def test_dejavu_is_enough():
    fonts = available_fonts()
    assert all(fonts[role] for role in ("serif", "sans", "bold", "mono"))


def _page_set_in(font_file) -> _Typesetter:
    style = PageStyle(width=900, height=400, margin=20, body_size=24, spacing=1.3, ink=0,
                      paper=255, fonts=dict.fromkeys(("serif", "sans", "bold", "mono"), font_file))
    return _Typesetter(style, random.Random(0))


def test_characters_a_font_cannot_draw_are_replaced_in_the_page_and_its_markdown(tmp_path):
    # Pillow's built-in face (Aileron) has no arrows or comparison signs; DejaVu has both.
    aileron = tmp_path / "aileron.ttf"
    aileron.write_bytes(ImageFont.load_default(24).font_bytes)
    assert {"\u2192", "\u2264"} <= missing_glyphs(aileron)
    text = "if x \u2264 y then x \u2192 y"
    narrow = _page_set_in(aileron)
    assert narrow.paragraph(text) and narrow.table([["a \u2192 b", "c"], ["1 \u2264 2", "3"]])
    assert narrow.blocks[0] == "if x <= y then x -> y"
    assert "a -> b" in narrow.blocks[1] and "1 <= 2" in narrow.blocks[1]
    assert all("\u2192" not in line.text for line in narrow.lines)
    full = _page_set_in(available_fonts()["serif"][0])
    assert full.paragraph(text) and full.blocks[0] == text
    # Nor has it Latin-1's letters: they lose their accents; signs with no letter in them go.
    assert "\u00f1" in missing_glyphs(aileron)
    assert narrow.paragraph("Pe\u00f1a \u00c6sop \u00a3 5 \u00b8") and narrow.blocks[-1] == "Pena AEsop 5"


def test_pieces_of_long_lines_get_their_exact_texts():
    src = TextSources.load("train", max_files=40)
    split = paired = 0
    for seed in range(6):
        page = make_page(seed, src)
        boxes = [b for b in segment_lines(page.image) if not b.rule]
        if len(boxes) != len(page.lines):
            continue
        for box, line in zip(boxes, page.lines):
            pieces = split_wide(page.image, box, PIECE_WIDTH)
            if len(pieces) == 1:
                continue
            split += 1
            texts = piece_texts(line, pieces)
            if texts is not None:
                paired += 1
                assert " ".join(texts) == line.text and all(t == t.strip() for t in texts)
    assert split >= 20 and paired >= 0.85 * split  # the rest are left out of training


def test_a_degradation_that_wipes_out_a_line_is_caught():
    # Thin strokes at 14 px, blurred and then binarised at a low threshold, vanish: a page
    # like that no longer shows the text its Markdown claims (make_page keeps it clean then).
    clean = Image.new("L", (400, 40), 250)
    draw = ImageDraw.Draw(clean)
    font = _font(available_fonts()["serif"][0], 14)
    text = "a thin line of small serif text"
    draw.text((10, 10), text, font=font, fill=40)
    line = TypesetLine(text, draw.textbbox((10, 10), text, font=font), "text")
    blurred = clean.filter(ImageFilter.GaussianBlur(1.2))
    erased = Image.fromarray(np.where(np.asarray(blurred) < 90, 0, 255).astype(np.uint8))
    kept = Image.fromarray(np.where(np.asarray(clean) < 150, 0, 255).astype(np.uint8))
    assert erases_text(clean, erased, [line])
    assert not erases_text(clean, kept, [line])
    assert not erases_text(clean, blurred, [line])


def test_symbol_rows_and_extra_faces_leave_other_pages_as_they_were():
    src = TextSources.load("train", max_files=40)
    for seed in range(3):
        plain = make_page(seed, src).image.tobytes()
        assert plain == make_page(seed, src, rows=0.0, light=0.0, geometric=0.0,
                                  spaces=0.0).image.tobytes()
        assert plain == make_page(seed, src, hand=0.0).image.tobytes()
        for share, faces in (("light", LIGHT_FONTS), ("geometric", GEOMETRIC_FONTS),
                             ("hand", HAND_FONTS)):
            if any(name in _font_index() for name in faces["sans"]):
                assert plain != make_page(seed, src, **{share: 1.0}).image.tobytes()
    rows = [line.text for seed in range(3) for line in make_page(seed, src, rows=1.0).lines
            if line.joints or "..." in line.text]
    assert len(rows) >= 3


def test_justified_and_tight_word_spaces_fall_where_their_spans_say():
    src = TextSources.load("train", max_files=40)
    centres_in_ink, spaces = 0, 0
    for seed in range(6):
        page = make_page(seed, src, spaces=1.0, augment=False)
        ink = np.asarray(page.image) < 128
        for line in page.lines:
            if line.kind == "text" and not line.joints:
                y0, y1 = line.box[1], line.box[3]
                for _, left, right in line.spaces:
                    centres_in_ink += bool(ink[y0:y1, int((left + right) / 2)].any())
                    spaces += 1
    # An italic overhang or a `?` may reach the middle of a tight space, rarely.
    assert spaces > 200 and centres_in_ink <= 0.02 * spaces


def test_a_run_of_one_symbol_is_cut_into_pieces_that_join_back_without_a_space():
    page = _page_set_in(available_fonts()["serif"][0])
    row = page.symbol_row(random.Random(0), TextSources.load("train", max_files=40))
    page.put(page.s.margin, "*" * 60, _font(page.s.fonts["serif"], 24), "text", runs=True)
    assert row and page.lines[0].text == page.blocks[0]
    box = [b for b in segment_lines(page.image) if not b.rule][-1]
    pieces = split_wide(page.image, box, PIECE_WIDTH)
    texts = piece_texts(page.lines[-1], pieces)
    assert len(pieces) >= 3 and texts is not None
    assert "".join(texts) == "*" * 60 and all(set(t) == {"*"} for t in texts)


def test_capitals_only_faces_set_the_text_in_capitals_and_ruled_paper_is_not_ink():
    fonts = {role: paths[0] for role, paths in available_fonts().items()}
    style = PageStyle(width=700, height=600, margin=40, body_size=22, spacing=1.5, fonts=fonts,
                      ink=90, paper=245, caps=True, rule_shade=205)
    ts = _Typesetter(style, random.Random(0))
    assert ts.heading("Data mixes", 1)
    assert ts.paragraph("The stack, whatever we scraped: ~85% source code and 10% code text, "
                        "with the rest from the web.")
    assert ts.blocks[0] == "# DATA MIXES"
    assert all(line.text == line.text.upper() for line in ts.lines)
    gray = np.asarray(ts.image)
    ruled_rows = int(((gray == 205).mean(axis=1) > 0.5).sum())
    assert ruled_rows >= 10  # rules run edge to edge down the page
    # Paler than ink, the rules neither make lines of their own nor join the text's.
    boxes = [b for b in segment_lines(ts.image) if not b.rule]
    assert len(boxes) == len(ts.lines)
