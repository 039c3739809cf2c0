"""Synthetic pages for the page layout tests: typeset with PIL in the fonts the training data
uses (`ocrcli.training.synth.available_fonts`), so the tests need nothing but the repository
and DejaVu. Each builder returns the page and what is known about where things are."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ocrcli.training.synth import _font, _wrap, available_fonts

WIDTH, HEIGHT = 1224, 1584  # a US letter page at 144 dpi
BODY = 20  # body text size in pixels
LEADING = 27

WORDS = ("the of and to in is was for on that with as by it at from this be are have an which "
         "paper reading column layout page figure table order line text model result data each "
         "first second value method system results show using number between").split()


@dataclass
class Page:
    image: Image.Image
    lines: list[tuple[str, tuple[int, int, int, int]]] = field(default_factory=list)  # text, box
    regions: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)  # x0, y0, x1, y1


def _serif(size: int = BODY) -> ImageFont.FreeTypeFont:
    return _font(available_fonts()["serif"][0], size)


def _bold(size: int) -> ImageFont.FreeTypeFont:
    return _font(available_fonts()["bold"][0], size)


def paragraphs(page: Page, draw: ImageDraw.ImageDraw, x: int, y: int, width: int, bottom: int,
               rng: random.Random, size: int = BODY) -> int:
    """Paragraphs of random words from `y` down to `bottom`; returns the next free `y`."""
    font = _serif(size)
    leading = int(size * 1.35)
    while y + leading <= bottom:
        for line in _wrap(" ".join(rng.choice(WORDS) for _ in range(40)), font, width):
            if y + leading > bottom:
                break
            draw.text((x, y), line, font=font, fill=0)
            page.lines.append((line, tuple(int(v) for v in draw.textbbox((x, y), line, font=font))))
            y += leading
        y += size // 2
    return y


def blank() -> tuple[Page, ImageDraw.ImageDraw]:
    page = Page(Image.new("L", (WIDTH, HEIGHT), 255))
    return page, ImageDraw.Draw(page.image)


def columns_page(n: int = 2, seed: int = 0, gutter: int = 50) -> Page:
    """A title across the page, then `n` columns of running text."""
    rng = random.Random(seed)
    page, draw = blank()
    draw.text((90, 90), "A Study of Page Layout", font=_bold(36), fill=0)
    page.regions["title"] = (90, 90, WIDTH - 90, 140)
    width = (WIDTH - 180 - (n - 1) * gutter) // n
    for c in range(n):
        x = 90 + c * (width + gutter)
        first = len(page.lines)
        paragraphs(page, draw, x, 180, width, HEIGHT - 120, rng)
        page.regions[f"column{c}"] = (x, 180, x + width, HEIGHT - 120)
        assert len(page.lines) > first
    return page


def chart_page(seed: int = 0) -> Page:
    """Text, a line-and-bar chart with axes and tick labels, then more text."""
    rng = random.Random(seed)
    page, draw = blank()
    y = paragraphs(page, draw, 100, 100, 1000, 320, rng)
    top = y + 30
    draw.line((200, top, 200, top + 400), fill=0, width=2)
    draw.line((200, top + 400, 900, top + 400), fill=0, width=2)
    draw.line([(200 + i * 7, top + 200 - int(150 * math.sin(i / 12))) for i in range(100)],
              fill=0, width=3)
    for i in range(5):
        draw.rectangle((300 + i * 110, top + 400 - 60 * (i + 1), 340 + i * 110, top + 400), fill=80)
    for i in range(6):
        draw.text((190 + i * 120, top + 410), str(i * 10), font=_serif(16), fill=0)
    page.regions["figure"] = (190, top, 900, top + 430)
    paragraphs(page, draw, 100, top + 480, 1000, 1200, rng)
    return page


def chart_between_lines_page(seed: int = 0) -> Page:
    """A chart whose axes come within a few pixels of the text lines just above and just
    below it (a plot set tight in a column)."""
    rng = random.Random(seed)
    page, draw = blank()
    y = paragraphs(page, draw, 100, 100, 1000, 260, rng)
    line = " ".join(rng.choice(WORDS) for _ in range(8))
    draw.text((210, y), line, font=_serif(), fill=0)
    box = tuple(int(v) for v in draw.textbbox((210, y), line, font=_serif()))
    page.lines.append((line, box))
    top = box[3] + 5
    draw.line((200, top, 200, top + 400), fill=0, width=2)
    draw.line((200, top + 400, 900, top + 400), fill=0, width=2)
    draw.line([(200 + i * 7, top + 300 - int(250 * math.sin(i / 30))) for i in range(100)],
              fill=0, width=3)
    for i in range(5):
        draw.text((180, top + 380 - i * 90), str(i), font=_serif(16), fill=0)
    page.regions["figure"] = (180, top, 900, top + 401)
    paragraphs(page, draw, 100, top + 404, 1000, 900, rng)
    return page


def photo_page(seed: int = 0) -> Page:
    """Text, a grey-level photograph (blurred noise), then more text."""
    rng = random.Random(seed)
    page, draw = blank()
    y = paragraphs(page, draw, 100, 100, 1000, 260, rng)
    gen = np.random.default_rng(seed)
    coarse = Image.fromarray(gen.integers(0, 255, (12, 20)).astype(np.uint8))
    arr = np.asarray(coarse.resize((600, 380), Image.BICUBIC), dtype=np.float32)
    arr = arr + gen.normal(0, 6, arr.shape)  # a photograph's levels are many, not a few flat shades
    page.image.paste(Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)), (300, y + 30))
    page.regions["figure"] = (300, y + 30, 900, y + 410)
    paragraphs(page, draw, 100, y + 450, 1000, 1100, rng)
    return page


TABLE = [["Name", "Count", "Price", "Share"], ["Paper", "282", "45.16", "85%"],
         ["Model", "718", "90.86", "46%"], ["Column", "333", "61.05", "63%"],
         ["Figure", "646", "33.86", "25%"], ["Order", "17", "72.69", "15%"]]


def table_page(ruled: bool, seed: int = 0, shade: int | None = None) -> Page:
    """Text, a 6 x 4 table (a rule under the header; with `ruled`, a full grid; with `shade`,
    every other body row on a grey band of that level, dark enough to count as ink), more
    text."""
    rng = random.Random(seed)
    page, draw = blank()
    y = paragraphs(page, draw, 100, 100, 1000, 240, rng) + 40
    xs = [100, 400, 650, 900, 1120]
    top = y
    for r, row in enumerate(TABLE):
        if shade is not None and r % 2:
            draw.rectangle((xs[0], y, xs[-1], y + 40), fill=shade)
        for c, cell in enumerate(row):
            draw.text((xs[c] + 12, y + 8), cell, font=_serif(), fill=0)
        y += 44
        if ruled or r == 0:
            draw.line((xs[0], y - 2, xs[-1], y - 2), fill=0, width=2)
    if ruled:
        draw.line((xs[0], top - 2, xs[-1], top - 2), fill=0, width=2)
        for x in xs:
            draw.line((x, top - 2, x, y - 2), fill=0, width=2)
    page.regions["table"] = (xs[0], top, xs[-1], y)
    paragraphs(page, draw, 100, y + 50, 1000, 900, rng)
    return page


def spanning_heading_page(seed: int = 0) -> Page:
    """Text, then a table of a statement's kind: "Year ended" centred over three columns of
    figures, a date over each figure column, "(in millions)" under them; rows of a label, a
    "$" column and a figure column per year; more text. `regions` holds where the three
    heading lines are."""
    rng = random.Random(seed)
    page, draw = blank()
    y = paragraphs(page, draw, 100, 100, 1000, 240, rng) + 40
    font = _serif()
    cols = [(640, 760), (800, 920), (960, 1080)]  # "$" at the left edge, figures right-aligned

    def centred(text: str, a: int, b: int, top: int, name: str) -> None:
        w = int(draw.textlength(text, font=font))
        draw.text(((a + b - w) // 2, top), text, font=font, fill=0)
        page.regions[name] = ((a + b - w) // 2, top, (a + b + w) // 2, top + 24)

    centred("Year ended", cols[0][0], cols[-1][1], y, "year")
    for i, ((a, b), date) in enumerate(zip(cols, ["Jan 26, 2025", "Jan 28, 2024", "Jan 29, 2023"])):
        centred(date, a, b, y + 30, f"date{i}")
    centred("(in millions)", cols[0][0], cols[-1][1], y + 60, "unit")
    y += 100
    for label in ["Cost of revenue", "Research and development", "Sales and marketing", "Total"]:
        draw.text((100, y), label, font=font, fill=0)
        for a, b in cols:
            draw.text((a, y), "$", font=font, fill=0)
            figure = f"{rng.randint(1, 9)},{rng.randint(100, 999)}"
            draw.text((b - int(draw.textlength(figure, font=font)), y), figure, font=font, fill=0)
        y += 30
    paragraphs(page, draw, 100, y + 50, 1000, 900, rng)
    return page


def furniture_page(seed: int = 0, heading: bool = False, imprint: bool = False) -> Page:
    """A running header, a body (under a big heading with `heading`), a page number, and with
    `imprint` a publisher's line below the page number."""
    rng = random.Random(seed)
    page, draw = blank()
    if heading:
        draw.text((100, 60), "Results", font=_bold(40), fill=0)
        page.regions["heading"] = (100, 60, 400, 110)
    else:
        draw.text((100, 50), "Journal of Layout Studies, vol. 3", font=_serif(16), fill=0)
        page.regions["header"] = (100, 50, 500, 70)
    paragraphs(page, draw, 100, 160, 1000, 1300, rng)
    y = 1470 if imprint else 1520
    draw.text((600, y), "17", font=_serif(16), fill=0)
    page.regions["footer"] = (600, y, 630, y + 20)
    if imprint:
        draw.text((100, 1540), "Published by the Layout Press, 2024", font=_serif(12), fill=0)
        page.regions["imprint"] = (100, 1540, 400, 1556)
    return page


def mid_page_number_page(seed: int = 0) -> Page:
    """A body that ends mid-page, its page number well below it and a rule under that: the
    page number stands far above the page's bottom tenth."""
    rng = random.Random(seed)
    page, draw = blank()
    paragraphs(page, draw, 100, 120, 1000, 860, rng)
    draw.text((600, 1000), "62", font=_serif(16), fill=0)
    page.regions["footer"] = (600, 1000, 630, 1020)
    draw.rectangle((100, 1040, 1100, 1041), fill=0)
    return page


def drop_cap_page(seed: int = 0) -> Page:
    """A paragraph under body text that opens with a drop cap: an "O" three lines tall, its
    top at the first line's capitals, the first three lines set to its right."""
    rng = random.Random(seed)
    page, draw = blank()
    y = paragraphs(page, draw, 100, 120, 1000, 400, rng)
    font, cap = _serif(), _serif(88)
    cx, cy = 100, y
    line_top = draw.textbbox((0, y), "Over", font=font)[1]
    cap_box = draw.textbbox((cx, cy), "O", font=cap)
    cy += line_top - cap_box[1]
    draw.text((cx, cy), "O", font=cap, fill=0)
    cap_box = draw.textbbox((cx, cy), "O", font=cap)
    page.regions["cap"] = cap_box
    indent = cap_box[2] + 12
    words = " ".join(rng.choice(WORDS) for _ in range(60))
    lines = ["ver the " + w for w in _wrap(words, font, 1100 - indent)[:3]]
    for k, line in enumerate(lines):
        draw.text((indent, y + k * LEADING), line, font=font, fill=0)
        page.lines.append((line, tuple(draw.textbbox((indent, y + k * LEADING), line, font=font))))
    page.regions["first_line"] = page.lines[-3][1]
    paragraphs(page, draw, 100, y + 3 * LEADING, 1000, 1300, rng)
    return page


def stamped_header_page(seed: int = 0) -> Page:
    """A running header of two lines: a download stamp in body size over the journal's
    running title at the left margin and the page number at the right, then the body after
    a gap narrower than the page's widest, which comes before a section heading."""
    rng = random.Random(seed)
    page, draw = blank()
    font = _serif()
    draw.text((250, 40), "Downloaded from www.layout.example on 12 July 2017", font=font, fill=0)
    draw.text((100, 67), "Layout in Action", font=font, fill=0)
    draw.text((1060, 67), "447", font=font, fill=0)
    page.regions["header"] = (100, 40, 1100, 92)
    y = paragraphs(page, draw, 100, 150, 1000, 700, rng)
    draw.text((100, y + 180), "Results", font=_bold(40), fill=0)
    page.regions["heading"] = (100, y + 180, 400, y + 230)
    paragraphs(page, draw, 100, y + 260, 1000, 1400, rng)
    return page


def spread_footer_page(seed: int = 0) -> Page:
    """A body and, at the foot, a footer of body size as wide as the body: a journal's name at
    the left margin and its issue at the right, a wide space between them."""
    rng = random.Random(seed)
    page, draw = blank()
    paragraphs(page, draw, 100, 120, 1000, 1380, rng)
    left, right = "Journal of Layout Studies | www.layout.example", "March 2024 | Volume 8 | e27"
    font = _serif()
    draw.text((100, 1500), left, font=font, fill=0)
    x = 1100 - int(draw.textlength(right, font=font))
    draw.text((x, 1500), right, font=font, fill=0)
    page.regions["footer"] = (100, 1500, 1100, 1525)
    return page


def book_head_page(seed: int = 0, rows: int = 1) -> Page:
    """A book page whose running head (its page number at the left margin, the book's title in
    the middle, the chapter at the right) sits at the body's own leading above the text. With
    `rows` > 1 the page opens instead on a table of that many rows laid out the same way."""
    rng = random.Random(seed)
    page, draw = blank()
    font = _serif()
    y = 100
    for r in range(rows):
        parts = ("400", "BRITISH HUSBANDRY.", "[Ch. XIX.") if rows == 1 else (
            f"{rng.randint(100, 999)}", f"{rng.choice(WORDS)} {rng.choice(WORDS)}.".upper(),
            f"[No. {r + 1}.")
        xs = (100, 600 - int(draw.textlength(parts[1], font=font)) // 2,
              1100 - int(draw.textlength(parts[2], font=font)))
        for x, part in zip(xs, parts):
            draw.text((x, y), part, font=font, fill=0)
            if rows > 1:
                page.lines.append((part, tuple(int(v) for v in draw.textbbox((x, y), part, font=font))))
        y += LEADING
    page.regions["header"] = (100, 100, 1100, 100 + BODY + 6)
    paragraphs(page, draw, 100, y, 1000, 1480, rng)
    return page


def narrow_table_page(seed: int = 0) -> Page:
    """A small two-column table opening the page, narrower than the text under it: its
    heading row's short first word leaves a wide space before the second column, where its
    other rows' longer words leave an ordinary one."""
    rng = random.Random(seed)
    page, draw = blank()
    font = _serif()
    y = 100
    for left, right in (("Bsds", "Atonement"), ("Moistness", "Zero"), ("Coors", "Depressant")):
        for x, cell in ((100, left), (230, right)):
            draw.text((x, y), cell, font=font, fill=0)
            page.lines.append((cell, tuple(int(v) for v in draw.textbbox((x, y), cell, font=font))))
        y += LEADING
    paragraphs(page, draw, 100, y + 20, 1000, 1480, rng)
    return page


def form_page(rows: int = 14) -> Page:
    """A form: a label at the left of each row and, beside it, an empty field framed by a thin
    box twice a line's height, some rows holding two fields; a line of instructions on top."""
    page, draw = blank()
    font = _serif()
    intro = "Provide the following contact details"
    draw.text((100, 90), intro, font=font, fill=0)
    page.lines.append((intro, tuple(int(v) for v in draw.textbbox((100, 90), intro, font=font))))
    labels = ("Email address", "Phone", "Postal address", "Suburb", "Country", "Postcode", "State")
    y = 150
    for r in range(rows):
        label = labels[r % len(labels)]
        draw.text((100, y + 12), label, font=font, fill=0)
        page.lines.append((label, tuple(int(v) for v in draw.textbbox((100, y + 12), label, font=font))))
        fields = [(320, 1100)] if r % 3 else [(320, 640), (780, 1100)]
        for x0, x1 in fields:
            draw.rectangle((x0, y, x1, y + 48), outline=0, width=2)
        if not r % 3:
            draw.text((660, y + 12), "Fax", font=font, fill=0)
            page.lines.append(("Fax", tuple(int(v) for v in draw.textbbox((660, y + 12), "Fax", font=font))))
        y += 66
    return page


def cover_page() -> Page:
    """A sparse title page: a title, a few lines far apart, and two lines of small print at
    the foot (a policy, a download date), as a repository's cover sheet has."""
    page, draw = blank()
    draw.text((100, 90), "Tilted Layouts in Practice", font=_bold(32), fill=0)
    for i, line in enumerate(["Doe, Jane; Roe, Richard", "Document version: publisher's PDF",
                              "Publication date: 2018", "Citation for published version:",
                              "Doe, J. (2018). Tilted layouts. Layout Press."]):
        y = 210 + i * 200 + (i % 2) * 60
        draw.text((100, y), line, font=_serif(), fill=0)
        page.lines.append((line, (100, y, 700, y + 25)))
    draw.text((100, 1455), "Take down policy", font=_serif(16), fill=0)
    draw.text((100, 1540), "Download date: 28 Dec 2018", font=_serif(16), fill=0)
    page.regions["footer"] = (100, 1455, 500, 1560)
    return page


def cards_page(seed: int = 0, staggered: bool = False, rows: int = 2) -> Page:
    """A 2 x 2 grid of cards (a heading and a short paragraph each), rows far apart: read
    card after card, row after row. `regions` holds each card's box as card1 .. card4.
    `staggered`: short headings over a short formula, each right-hand card's paragraph a
    line lower than its neighbour's, and the left cards' paragraphs set narrower after their
    first line: that line stands alone at its height, reaching far into the space that the
    headings and formulas leave, further than any line near it."""
    rng = random.Random(seed)
    page, draw = blank()
    for i, (x, y) in enumerate([(90, 150), (660, 150), (90, 650), (660, 650)][: 2 * rows], 1):
        draw.text((x, y), f"{i}. Card" if staggered else f"{i}. Card heading", font=_bold(28),
                  fill=0)
        if staggered:
            draw.text((x + 180, y + 70), f"a + b = {i}", font=_serif(), fill=0)
        top = y + 60 + (50 + (LEADING if x > 600 else 0)) * staggered
        width = 470
        if staggered and x < 600:
            top, width = paragraphs(page, draw, x, top, width, top + LEADING, rng), 380
        bottom = paragraphs(page, draw, x, top, width, y + 400 if staggered else y + 330, rng)
        page.regions[f"card{i}"] = (x, y, x + 470, bottom)
    return page


def reversed_banner_page(seed: int = 0, fill: int = 50) -> Page:
    """A banner of white capitals on a dark fill over running text, a black bar (a
    redaction: no letters in it), a black square holding three white marks one above the
    other (a logo) and a word in heavy capitals whose letters touch (one blob, with the
    letters' counters side by side in it). `regions` holds the four."""
    rng = random.Random(seed)
    page, draw = blank()
    paragraphs(page, draw, 100, 100, 1000, 260, rng)
    draw.rectangle((100, 300, 520, 350), fill=fill)
    draw.text((120, 308), "ANNUAL REVIEW", font=_bold(32), fill=255)
    page.regions["banner"] = (100, 300, 520, 350)
    paragraphs(page, draw, 100, 390, 1000, 700, rng)
    draw.rectangle((100, 760, 600, 790), fill=0)
    page.regions["bar"] = (100, 760, 600, 790)
    draw.rectangle((100, 860, 200, 1000), fill=0)
    for y in (875, 915, 955):
        draw.ellipse((135, y, 165, y + 30), fill=255)
    page.regions["logo"] = (100, 860, 200, 1000)
    draw.text((300, 880), "BOOO", font=_bold(72), fill=0, stroke_width=4, stroke_fill=0)
    page.regions["bold"] = (290, 870, 600, 1000)
    return page


def dark_slide_page(seed: int = 0) -> Page:
    """A slide: white paragraphs on a dark fill that covers most of the page."""
    rng = random.Random(seed)
    page, draw = blank()
    draw.rectangle((60, 60, WIDTH - 60, 900), fill=40)
    inverted = Image.new("L", (WIDTH, HEIGHT), 255)
    paragraphs(page, ImageDraw.Draw(inverted), 120, 120, 980, 860, rng)
    page.image.paste(255, mask=Image.eval(inverted, lambda v: 255 - v))
    return page


def cut_band_page(seed: int = 0, level: int = 110) -> Page:
    """Running text over a footer band of grey `level` cut by two slanted gaps: a piece from
    the page's left edge with a slanted, anti-aliased right edge, two slanted pieces, and the
    band's main piece holding white text. Drawn four times larger and reduced, so that the
    slanted edges are anti-aliased as a renderer's are. `regions`: "band", "pieces" (the left
    piece and the slanted ones) and "text" (the white words)."""
    rng = random.Random(seed)
    page, draw = blank()
    paragraphs(page, draw, 100, 100, 1000, 1300, rng)
    top, bottom, slant = 1420, 1490, 50
    big = Image.new("L", (WIDTH * 4, 280), 255)
    band = ImageDraw.Draw(big)

    def piece(x0: int, x1: int) -> None:
        band.polygon([(4 * (x0 + slant), 0), (4 * (x1 + slant), 0), (4 * x1, 279), (4 * x0, 279)],
                     fill=level)

    piece(-slant, 330)
    piece(370, 400)
    piece(440, 470)
    piece(510, WIDTH)
    page.image.paste(big.resize((WIDTH, bottom - top), Image.BOX), (0, top))
    draw.text((640, top + 20), "Copyright 2018 Example Press", font=_bold(28), fill=255)
    page.regions["band"] = (0, top, WIDTH, bottom)
    page.regions["pieces"] = (0, top, 520 + slant, bottom)
    page.regions["text"] = tuple(int(v) for v in draw.textbbox(
        (640, top + 20), "Copyright 2018 Example Press", font=_bold(28)))
    return page
