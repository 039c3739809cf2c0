from PIL import Image, ImageDraw

from ocrcli.models.builtin.layout import LINE_HEIGHT, assemble_markdown, line_tensor_array, segment_lines
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


def test_shaded_lines_become_a_code_block():
    img = _page([("x = 1", 22), ("y = 2", 22)], shaded=True)
    boxes = segment_lines(img)
    assert all(b.shaded for b in boxes)
    assert assemble_markdown(boxes, ["x = 1", "y = 2"]) == "```\nx = 1\ny = 2\n```"
