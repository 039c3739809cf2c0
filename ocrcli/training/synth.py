"""Synthetic document pages with exact ground-truth Markdown, deterministic by seed.

A page is a list of Markdown blocks (headings, paragraphs, bulleted and numbered lists, code
blocks, pipe tables) typeset with PIL in one of many fonts, sizes and margins, then lightly
degraded (noise, blur, JPEG, a small skew, scanned-look binarisation). Every typeset line keeps
the text a line reader should read from it, so training crops come from the same layout step
that reads real pages.
"""

from __future__ import annotations

import io
import random
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from ocrcli.models.builtin.layout import ink_mask
from ocrcli.models.builtin.tokenizer import DEFAULT_CHARS
from ocrcli.training.text import (
    TextSources,
    prose_text,
    random_text,
    sentence,
    symbol_row,
    typographic,
    word_sequence,
)

# Debian keeps TeX's Latin Modern (the face of most LaTeX papers) under texmf.
FONT_DIRS = (Path("/usr/share/fonts"), Path("/usr/share/texmf/fonts/opentype"))

# Families by role. Training fonts and held-out fonts never overlap.
TRAIN_FONTS = {
    "serif": ["DejaVuSerif.ttf", "DejaVuSerifCondensed.ttf", "LiberationSerif-Regular.ttf",
              "LiberationSerif-Italic.ttf", "NimbusRoman-Regular.otf", "NimbusRoman-Italic.otf",
              "DejaVuSerif-Italic.ttf", "lmroman10-regular.otf", "lmroman10-italic.otf",
              "Caladea-Regular.ttf", "Caladea-Italic.ttf", "LinLibertine_R.otf",
              "LinLibertine_RI.otf", "EBGaramond12-Regular.otf"],
    "sans": ["DejaVuSans.ttf", "DejaVuSansCondensed.ttf", "LiberationSans-Regular.ttf",
             "LiberationSansNarrow-Regular.ttf", "NimbusSans-Regular.otf", "DejaVuSans-Oblique.ttf",
             "LiberationSans-Italic.ttf", "NimbusSans-Italic.otf", "lmsans10-regular.otf",
             "Carlito-Regular.ttf", "Carlito-Italic.ttf", "Lato-Regular.ttf", "OpenSans-Regular.ttf",
             "Roboto-Regular.ttf", "GilliusADF-Regular.otf", "LinBiolinum_R.otf"],
    "bold": ["DejaVuSans-Bold.ttf", "DejaVuSerif-Bold.ttf", "LiberationSans-Bold.ttf",
             "LiberationSerif-Bold.ttf", "NimbusSans-Bold.otf", "NimbusRoman-Bold.otf",
             "DejaVuSansCondensed-Bold.ttf", "LiberationSansNarrow-Bold.ttf", "lmroman10-bold.otf",
             "lmsans10-bold.otf", "Carlito-Bold.ttf", "Caladea-Bold.ttf", "Lato-Bold.ttf",
             "OpenSans-Bold.ttf", "Roboto-Bold.ttf", "GilliusADF-Bold.otf", "LinLibertine_RB.otf"],
    "mono": ["DejaVuSansMono.ttf", "LiberationMono-Regular.ttf", "NimbusMonoPS-Regular.otf",
             "DejaVuSansMono-Bold.ttf", "LiberationMono-Bold.ttf", "lmmono10-regular.otf"],
}
HELDOUT_FONTS = {
    "serif": ["FreeSerif.ttf", "C059-Roman.otf", "P052-Roman.otf", "URWBookman-Light.otf",
              "FreeSerifItalic.ttf"],
    "sans": ["FreeSans.ttf", "URWGothic-Book.otf", "FreeSansOblique.ttf"],
    "bold": ["FreeSansBold.ttf", "FreeSerifBold.ttf", "P052-Bold.otf", "C059-Bold.otf"],
    "mono": ["FreeMono.ttf", "FreeMonoBold.ttf"],
}
# Light weights of humanist sans faces (thin strokes: an `a` whose bowl reads as `o`), set on a
# share of training pages in place of the sans face (`make_page(light=...)`).
LIGHT_FONTS = {"sans": ["Lato-Light.ttf", "Lato-LightItalic.ttf", "OpenSans-Light.ttf",
                        "OpenSans-LightItalic.ttf", "Roboto-Light.ttf", "RobotoCondensed-Light.ttf"]}
# Geometric sans faces in the manner of Futura (a one-storey `a` that reads as `g`, `c` or `o`,
# a tall narrow `t` that reads as `f`), set with bold faces of their kind on a share of
# training pages (`make_page(geometric=...)`). Beteckna, the closest to Futura, lacks a third
# of Latin-1: its pages set those characters' stand-ins (`stand_ins`). Avant Garde's clones
# (URW Gothic, TeX Gyre Adventor) stay out, URW Gothic being a held-out face.
GEOMETRIC_FONTS = {"sans": ["LeagueSpartan-Light.otf", "LeagueSpartan-Regular.otf",
                            "Comfortaa-Light.ttf", "Comfortaa-Regular.ttf", "BetecknaGS.ttf",
                            "BetecknaGS-Italic.ttf", "eurof35.ttf", "eurof55.ttf"],
                   "bold": ["LeagueSpartan-SemiBold.otf", "LeagueSpartan-Bold.otf",
                            "Comfortaa-Bold.ttf", "BetecknaGS-Bold.ttf", "eurof75.ttf"]}
# Handwriting and informal faces, as on notes, forms filled in by hand and whiteboards, set on
# a share of training pages (`make_page(hand=...)`) in pale or coloured ink (blue, red and
# green pens are mid greys in the reader's greyscale), on plain or ruled paper. Code blocks keep
# their monospaced face. Femkeklaver (outlined letters) and Kristi (a cursive of hairlines)
# stay out.
HAND_FONTS = {"serif": ["dkg.ttf", "dkgIt.ttf", "Breip.ttf", "KleeOne-Regular.ttf",
                        "Ecolier-court.ttf", "DancingScript-Regular.otf"],
              "sans": ["dkg.ttf", "ComicNeue-Regular.otf", "ComicNeue-Italic.otf",
                       "ComicNeue-Light.otf", "KleeOne-Regular.ttf", "Breip.ttf"],
              "bold": ["dkgBd.ttf", "ComicNeue-Bold.otf", "KleeOne-SemiBold.ttf",
                       "DancingScript-Bold.otf"]}
# Faces whose lower case is drawn as capitals (marker lettering): their pages are set in
# capitals, so that the text and the page agree.
CAPS_HAND_FONTS = {role: ["Humor-Sans.ttf", "BecauseWeBuild-Regular.otf",
                          "BecauseWeConnect-Regular.otf", "BecauseWeCreate-Regular.otf",
                          "BecauseWeLearn-Regular.otf", "BecauseWeMentor-Regular.otf"]
                   for role in ("serif", "sans", "bold")}


@lru_cache(maxsize=1)
def _font_index() -> dict[str, Path]:
    index: dict[str, Path] = {}
    for root in FONT_DIRS:
        if root.exists():
            for p in sorted(root.rglob("*")):
                if p.suffix in (".ttf", ".otf"):
                    index.setdefault(p.name, p)
    return index


def available_fonts(heldout: bool = False) -> dict[str, list[Path]]:
    """Font files by role that are installed on the host; DejaVu alone is the minimum."""
    table = HELDOUT_FONTS if heldout else TRAIN_FONTS
    index = _font_index()
    found = {role: [index[n] for n in names if n in index] for role, names in table.items()}
    if heldout and not all(found.values()):
        return {}
    fallback = {"serif": "DejaVuSerif.ttf", "sans": "DejaVuSans.ttf", "bold": "DejaVuSans-Bold.ttf",
                "mono": "DejaVuSansMono.ttf"}
    for role, names in found.items():
        if not names and fallback[role] in index:
            found[role] = [index[fallback[role]]]
    return found


# What a page shows where its font has no glyph for a character: the text is changed before
# it is set, so the ground truth never names a character the page draws as an empty box.
STAND_INS = {"\u2018": "'", "\u2019": "'", "\u201a": ",", "\u201c": '"', "\u201d": '"',
             "\u201e": '"', "\u2013": "-", "\u2014": "--", "\u2022": "*", "\u2026": "...",
             "\u2020": "+", "\u2021": "++", "\u2032": "'", "\u2033": '"', "\u20ac": "EUR",
             "\u2122": "TM", "\u2212": "-", "\u2190": "<-", "\u2192": "->", "\u2264": "<=",
             "\u2265": ">=", "\u2260": "!=", "\u00ab": '"', "\u00bb": '"', "\u00c6": "AE",
             "\u00e6": "ae", "\u00d0": "D", "\u00f0": "d", "\u00de": "Th", "\u00fe": "th",
             "\u00d8": "O", "\u00f8": "o", "\u00a9": "(c)", "\u00ae": "(R)", "\u00b7": "."}
# Characters a page may be asked to draw: the reader's alphabet and the stand-ins' own.
DRAWN_CHARS = frozenset(c for c in DEFAULT_CHARS + "".join(STAND_INS) if not c.isspace())


@lru_cache(maxsize=64)
def missing_glyphs(path: Path) -> frozenset[str]:
    """The DRAWN_CHARS the font draws as its empty box (or not at all)."""
    font = ImageFont.truetype(str(path), 24)

    def shape(ch: str) -> tuple[bytes, tuple[int, int]]:
        mask = font.getmask(ch)
        return bytes(mask), mask.size

    empty = {shape("\ue000"), shape("\U0001f600")}  # a private-use and an emoji code point
    return frozenset(ch for ch in DRAWN_CHARS
                     if shape(ch) in empty or font.getmask(ch).getbbox() is None)


def _stand_in(ch: str, missing: set[str]) -> str:
    """What is set for `ch`: its STAND_INS text, else its letter without accents (`ñ` -> `n`)
    where the font has that, else nothing."""
    if ch in STAND_INS:
        return STAND_INS[ch]
    marks = unicodedata.normalize("NFKD", ch)
    base = "".join(c for c in marks if not unicodedata.combining(c)).strip()
    return base if base != ch and base.isascii() and not set(base) & missing else ""


def stand_ins(fonts: dict[str, Path]) -> dict[int, str]:
    """A `str.translate` table for text set in any of `fonts`."""
    missing = set().union(*(missing_glyphs(p) for p in fonts.values()))
    return {ord(ch): _stand_in(ch, missing) for ch in missing}


@lru_cache(maxsize=256)
def _font(path: Path, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(path), size)


@dataclass
class TypesetLine:
    """One typeset line: its box on the page and the text a line reader should read."""

    text: str
    box: tuple[int, int, int, int]  # x0, y0, x1, y1 in page pixels
    kind: str  # heading | text | item | code | table | rule
    # Every space of `text` as (index, x_left, x_right) in page pixels: where a piece cut made
    # by the layout step falls, so a long line's pieces get their exact texts.
    spaces: list[tuple[int, float, float]] = field(default_factory=list)
    # Where a cut may also fall inside a run of one symbol (`*****`), as (index, x_left,
    # x_right): the piece on the right starts at `index` and no character is dropped.
    joints: list[tuple[int, float, float]] = field(default_factory=list)


@dataclass
class SynthPage:
    image: Image.Image  # grayscale "L"
    markdown: str  # exact ground truth
    lines: list[TypesetLine] = field(default_factory=list)
    scale: int = 1  # typeset at this multiple of its size: a PDF page rendered at scale x 144 dpi


@dataclass
class PageStyle:
    width: int
    height: int
    margin: int
    body_size: int
    spacing: float
    fonts: dict[str, Path]
    ink: int
    paper: int
    # Word spaces of prose lines as a share of the font's space: 1.0 as set; below 1 tight
    # (a caption set close); "justified" stretches each line but a paragraph's last to the
    # full measure.
    word_space: float | str = 1.0
    caps: bool = False  # the page is set in capitals (CAPS_HAND_FONTS)
    rule_shade: int = 0  # ruled paper: the grey of its rules, one per line pitch; 0: none


def _style(rng: random.Random, fonts: dict[str, list[Path]], sizes: tuple[int, int],
           scale: int = 1) -> PageStyle:
    body = rng.randint(*sizes)
    width = rng.randint(max(500, body * 32), max(700, body * 55))
    height = int(width * rng.uniform(1.25, 1.45))
    margin = rng.randint(body, body * 4)
    return PageStyle(
        width=width * scale,
        height=height * scale,
        margin=margin * scale,
        body_size=body * scale,
        spacing=rng.uniform(1.15, 1.6),
        fonts={role: rng.choice(paths) for role, paths in fonts.items()},
        ink=rng.randint(0, 60),
        paper=rng.randint(235, 255),
    )


def _wrap(text: str, font: ImageFont.FreeTypeFont, width: int) -> list[str]:
    lines, cur = [], ""
    for word in text.split():
        trial = f"{cur} {word}" if cur else word
        if cur and font.getlength(trial) > width:
            lines.append(cur)
            cur = word
        else:
            cur = trial
    if cur:
        lines.append(cur)
    return lines


def _space_spans(x: float, text: str, font: ImageFont.FreeTypeFont, offset: int = 0
                 ) -> list[tuple[int, float, float]]:
    return [(offset + i, x + font.getlength(text[:i]), x + font.getlength(text[: i + 1]))
            for i, ch in enumerate(text) if ch == " "]


def _joint_spans(x: float, text: str, font: ImageFont.FreeTypeFont) -> list[tuple[int, float, float]]:
    """Each boundary between two equal non-space characters, spanning half a glyph each side."""
    spans = []
    for i in range(1, len(text)):
        if text[i] == text[i - 1] != " ":
            at, half = x + font.getlength(text[:i]), font.getlength(text[i]) / 2
            spans.append((i, at - half, at + half))
    return spans


class _Typesetter:
    def __init__(self, style: PageStyle, rng: random.Random):
        self.s = style
        self.rng = rng
        self.image = Image.new("L", (style.width, style.height), style.paper)
        self.draw = ImageDraw.Draw(self.image)
        if style.rule_shade:
            self._rule_paper()
        self.y = style.margin
        self.lines: list[TypesetLine] = []
        self.blocks: list[str] = []
        self.stand_ins = stand_ins(style.fonts)

    def fit(self, text: str) -> str:
        """`text` with the characters the page's fonts cannot draw replaced."""
        return (text.upper() if self.s.caps else text).translate(self.stand_ins)

    def _rule_paper(self) -> None:
        """Faint rules under the body lines' baselines, edge to edge, as on a notepad; paler
        than anything the layout step counts as ink, they cross the descenders."""
        pitch = int(self.s.body_size * self.s.spacing)
        y = self.s.margin + int(self.s.body_size * self.rng.uniform(0.8, 1.0))
        while y < self.s.height:
            self.draw.line((0, y, self.s.width, y), fill=self.s.rule_shade,
                           width=self.rng.randint(1, 2))
            y += pitch

    @property
    def text_width(self) -> int:
        return self.s.width - 2 * self.s.margin

    def room(self, font: ImageFont.FreeTypeFont, n_lines: int = 1) -> bool:
        return self.y + n_lines * font.size * self.s.spacing < self.s.height - self.s.margin

    def put(self, x: int, text: str, font: ImageFont.FreeTypeFont, kind: str,
            runs: bool = False, word_space: float = 1.0) -> None:
        """Draw a line; `runs`: its runs of one symbol may be cut inside (`joints`);
        `word_space`: its spaces as a share of the font's."""
        if word_space == 1.0:  # drawn whole, kerned as set: such pages stay as they were
            self.draw.text((x, self.y), text, font=font, fill=self.s.ink)
            box = self.draw.textbbox((x, self.y), text, font=font)
            spaces = _space_spans(x, text, font)
        else:
            box, spaces = self._put_spaced(x, text, font, word_space)
        joints = _joint_spans(x, text, font) if runs else []
        self.lines.append(TypesetLine(text, box, kind, spaces, joints))
        self.y += int(font.size * self.s.spacing)

    def _put_spaced(self, x: float, text: str, font: ImageFont.FreeTypeFont, word_space: float
                    ) -> tuple[tuple[int, int, int, int], list[tuple[int, float, float]]]:
        """Draw `text` word by word, each space `word_space` times the font's: its box and
        its space spans."""
        space = font.getlength(" ") * word_space
        boxes, spaces, at, i = [], [], float(x), 0
        words = text.split(" ")
        for k, word in enumerate(words):
            if word:
                self.draw.text((at, self.y), word, font=font, fill=self.s.ink)
                boxes.append(self.draw.textbbox((at, self.y), word, font=font))
            at, i = at + font.getlength(word), i + len(word)
            if k < len(words) - 1:
                spaces.append((i, at, at + space))
                at, i = at + space, i + 1
        box = (int(min(b[0] for b in boxes)), int(min(b[1] for b in boxes)),
               int(max(b[2] for b in boxes)) + 1, int(max(b[3] for b in boxes)) + 1)
        return box, spaces

    def line_word_space(self, line: str, font: ImageFont.FreeTypeFont, last: bool) -> float:
        """The word space of one line of a paragraph, by the page's `word_space`."""
        if self.s.word_space != "justified":
            return float(self.s.word_space)
        gaps = line.count(" ")
        if last or not gaps:
            return 1.0
        slack = self.text_width - font.getlength(line)
        return min(3.0, 1.0 + slack / (gaps * font.getlength(" ")))

    def gap(self, factor: float = 0.9) -> None:
        self.y += int(self.s.body_size * self.s.spacing * factor)

    def heading(self, text: str, level: int) -> bool:
        text = self.fit(text)
        font = _font(self.s.fonts["bold"], int(self.s.body_size * (2.0, 1.6, 1.3)[level - 1]))
        lines = _wrap(text, font, self.text_width)[:1]
        if not lines or not self.room(font, 2):
            return False
        self.gap(0.3)
        self.put(self.s.margin, lines[0], font, "heading")
        self.blocks.append("#" * level + " " + lines[0])
        return True

    def paragraph(self, text: str) -> bool:
        text = self.fit(text)
        font = _font(self.s.fonts["serif" if self.rng.random() < 0.6 else "sans"], self.s.body_size)
        lines = _wrap(text, font, self.text_width)
        while lines and not self.room(font, len(lines)):
            lines.pop()
        if not lines:
            return False
        for k, line in enumerate(lines):
            self.put(self.s.margin, line, font, "text",
                     word_space=self.line_word_space(line, font, k == len(lines) - 1))
        self.blocks.append(" ".join(lines))
        self.gap()
        return True

    def symbol_row(self, rng: random.Random, sources: TextSources) -> bool:
        """One line of `symbol_row` text in a body or code font, drawn from `rng` alone."""
        role = rng.choice(("serif", "sans", "mono"))
        font = _font(self.s.fonts[role], self.s.body_size)
        text = self.fit(symbol_row(rng, sources, lambda t: len(t) <= 100
                                   and font.getlength(t) <= self.text_width))
        if font.getlength(text) > self.text_width or not self.room(font):
            return False
        self.put(self.s.margin, text, font, "text", runs=True)
        self.blocks.append(text)
        self.gap()
        return True

    def items(self, texts: list[str], numbered: bool) -> bool:
        font = _font(self.s.fonts["sans" if self.rng.random() < 0.5 else "serif"], self.s.body_size)
        indent = self.s.margin + self.s.body_size
        out = []
        first = 1 if self.rng.random() < 0.6 else self.rng.randint(2, 400)  # "150." too
        for i, text in enumerate(map(self.fit, texts), first):
            marker = f"{i}." if numbered else "\u2022"
            lines = _wrap(f"{marker} {text}", font, self.text_width - self.s.body_size)
            if not self.room(font, len(lines)):
                break
            for j, line in enumerate(lines):
                self.put(indent if j == 0 else indent + self.s.body_size, line, font,
                         "item" if j == 0 else "text")
            out.append(("1." if numbered else "-") + " " + " ".join(lines)[len(marker) + 1 :])
            if numbered:
                out[-1] = f"{i}. " + " ".join(lines)[len(marker) + 1 :]
        if not out:
            return False
        self.blocks.append("\n".join(out))
        self.gap()
        return True

    def code(self, lines: list[str]) -> bool:
        font = _font(self.s.fonts["mono"], max(12, int(self.s.body_size * 0.9)))
        lines = [ln for ln in map(self.fit, lines) if font.getlength(ln) < self.text_width - 2 * font.size]
        while lines and not self.room(font, len(lines) + 1):
            lines.pop()
        if not lines:
            return False
        pad = font.size // 2
        top = self.y - pad
        bottom = self.y + int(len(lines) * font.size * self.s.spacing) + pad // 2
        shade = self.s.paper - self.rng.randint(14, 30)
        self.draw.rectangle((self.s.margin - pad, top, self.s.width - self.s.margin + pad, bottom),
                            fill=shade)
        for line in lines:
            self.put(self.s.margin + pad, line, font, "code")
        self.blocks.append("```\n" + "\n".join(lines) + "\n```")
        self.y += pad
        self.gap()
        return True

    def table(self, rows: list[list[str]]) -> bool:
        font = _font(self.s.fonts["sans"], self.s.body_size)
        bold = _font(self.s.fonts["bold"], self.s.body_size)
        rows = [[self.fit(cell) for cell in row] for row in rows]
        cols = len(rows[0])
        widths = [max(bold.getlength(r[c]) for r in rows) + font.size * 1.2 for c in range(cols)]
        if sum(widths) + font.size > self.text_width or not self.room(font, len(rows) + 2):
            return False
        md_rows = []
        for i, row in enumerate(rows):
            f = bold if i == 0 else font
            x = self.s.margin
            parts = ["|"]
            spaces: list[tuple[int, float, float]] = []
            self.draw.text((x, self.y), "|", font=f, fill=self.s.ink)
            for c, cell in enumerate(row):
                cell_x = x + font.size * 0.6
                self.draw.text((cell_x, self.y), cell, font=f, fill=self.s.ink)
                at = len("".join(parts))  # the space before the cell
                spaces.append((at, x + f.getlength("|"), cell_x))
                spaces += _space_spans(cell_x, cell, f, at + 1)
                x += widths[c]
                spaces.append((at + 1 + len(cell), cell_x + f.getlength(cell), x))
                self.draw.text((x, self.y), "|", font=f, fill=self.s.ink)
                parts.append(f" {cell} |")
            text = "".join(parts)
            box = self.draw.textbbox((self.s.margin, self.y), "|", font=f)
            x1 = self.draw.textbbox((x, self.y), "|", font=f)[2]
            self.lines.append(TypesetLine(text, (box[0], box[1], x1, box[3]), "table", spaces))
            self.y += int(font.size * self.s.spacing)
            md_rows.append(text)
            if i == 0:
                rule_y = self.y - int(font.size * (self.s.spacing - 1.0) / 2) - 1
                self.draw.line((self.s.margin, rule_y, x1, rule_y), fill=self.s.ink, width=2)
                self.y += int(font.size * 0.4)
                md_rows.append("|" + " --- |" * cols)
        self.blocks.append("\n".join(md_rows))
        self.gap()
        return True


def _table_rows(rng: random.Random, src: TextSources) -> list[list[str]]:
    cols, nrows = rng.randint(2, 4), rng.randint(2, 5)
    header = [rng.choice(src.words).capitalize() for _ in range(cols)]
    body = []
    for _ in range(nrows):
        row = []
        for _c in range(cols):
            r = rng.random()
            if r < 0.4:
                row.append(word_sequence(rng, src, 1).strip(",.;:!?"))
            elif r < 0.8:
                row.append(str(rng.choice([rng.randint(0, 9999), f"{rng.uniform(0, 100):.2f}"])))
            else:
                row.append(word_sequence(rng, src, 2).strip(",.;:!?"))
        body.append(row)
    return [header] + body


def degrade(image: Image.Image, rng: random.Random, strength: float = 1.0) -> Image.Image:
    """Light scan-like augmentation: skew, blur, noise, JPEG, binarisation."""
    if rng.random() < 0.3 * strength:
        image = image.rotate(rng.uniform(-0.25, 0.25), resample=Image.BILINEAR,
                             fillcolor=int(np.median(np.asarray(image))))
    if rng.random() < 0.3 * strength:
        image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 0.9)))
    if rng.random() < 0.3 * strength:
        arr = np.asarray(image, dtype=np.float32)
        arr = arr + np.random.default_rng(rng.randrange(2**32)).normal(0, rng.uniform(3, 14), arr.shape)
        image = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    if rng.random() < 0.1 * strength:
        arr = np.asarray(image)
        image = Image.fromarray(np.where(arr < rng.randint(110, 170), 0, 255).astype(np.uint8))
    if rng.random() < 0.25 * strength:
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=rng.randint(35, 90))
        image = Image.open(io.BytesIO(buf.getvalue())).convert("L")
    return image


def scan_degrade(image: Image.Image, rng: random.Random) -> Image.Image:
    """Heavier scanner damage than `degrade`, for the warm-started reader: a page scanned at
    a lower resolution and scaled back, uneven paper light, binarisation at a threshold that
    thins strokes (breaking thin serifs) or thickens them, and specks."""
    w, h = image.size
    if rng.random() < 0.5:
        f = rng.uniform(0.45, 0.8)
        small = image.resize((max(1, int(w * f)), max(1, int(h * f))), Image.BOX)
        image = small.resize((w, h), Image.BILINEAR)
    arr = np.asarray(image, dtype=np.float32)
    if rng.random() < 0.3:
        ramp = np.linspace(0.0, 1.0, w if rng.random() < 0.5 else h, dtype=np.float32)
        ramp = ramp[None, :] if ramp.size == w else ramp[:, None]
        arr = arr - rng.uniform(15, 60) * ramp
    if rng.random() < 0.5:
        arr = np.where(arr < rng.uniform(70, 180), 0.0, 255.0)
    if rng.random() < 0.3:
        specks = np.random.default_rng(rng.randrange(2**32)).random(arr.shape) < rng.uniform(1e-4, 1e-3)
        arr = np.where(specks, 0.0, arr)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def erases_text(clean: Image.Image, degraded: Image.Image, lines: list[TypesetLine],
                 keep: float = 0.5) -> bool:
    """Whether degrading wiped out a line: it kept under `keep` of the ink the layout step sees
    in it. Blur and then a low binarisation threshold erase thin strokes at small sizes; such a
    page no longer shows the text its Markdown claims."""
    before, after = ink_mask(np.asarray(clean, np.float32)), ink_mask(np.asarray(degraded, np.float32))
    for line in lines:
        if line.kind == "rule":
            continue
        x0, y0, x1, y1 = map(int, line.box)
        had = before[y0 : y1 + 1, x0 : x1 + 1].sum()
        if had and after[y0 : y1 + 1, x0 : x1 + 1].sum() < keep * had:
            return True
    return False


def _swap_faces(style: PageStyle, faces: dict[str, list[str]], share: float,
                rng: random.Random) -> None:
    """On a `share` of pages, each role named in `faces` takes one of its installed faces."""
    index = _font_index()
    installed = {role: [index[n] for n in names if n in index] for role, names in faces.items()}
    if share and any(installed.values()) and rng.random() < share:
        for role, paths in installed.items():
            if paths:
                style.fonts[role] = rng.choice(paths)


def hand_faces_installed() -> bool:
    """Whether any of the handwriting faces is installed (`make_page(hand=...)` needs one)."""
    index = _font_index()
    return any(n in index for faces in (HAND_FONTS, CAPS_HAND_FONTS) for names in faces.values()
               for n in names)


def _hand_style(style: PageStyle, share: float, rng: random.Random) -> None:
    """On a `share` of pages: handwriting faces (a third of them capitals only) for every role
    but code, pen ink from black to mid grey and, on half of them, ruled paper."""
    if not share or rng.random() >= share:
        return
    caps = rng.random() < 0.35
    before = dict(style.fonts)
    _swap_faces(style, CAPS_HAND_FONTS if caps else HAND_FONTS, 1.0, rng)
    if style.fonts == before:
        return  # none of the faces is installed
    style.caps = caps
    style.ink = rng.randint(0, 130)
    if rng.random() < 0.5:
        style.rule_shade = style.paper - rng.randint(20, 50)


def make_page(
    seed: int,
    sources: TextSources,
    heldout_fonts: bool = False,
    sizes: tuple[int, int] = (18, 30),
    augment: bool = True,
    scan: float = 0.0,
    rows: float = 0.0,
    light: float = 0.0,
    geometric: float = 0.0,
    spaces: float = 0.0,
    scale: int = 1,
    fine: float = 0.0,
    hand: float = 0.0,
) -> SynthPage:
    """A typeset page and its exact Markdown. Same seed, same page. `scan` is the share of
    pages that also get `scan_degrade`; `rows` the chance, before each block, of a
    `symbol_row` line; `light` the share of pages whose sans face is one of `LIGHT_FONTS`,
    `geometric` of those set in `GEOMETRIC_FONTS`; `spaces` of those whose paragraphs are
    justified or set with tight word spaces; `hand` of those in handwriting faces (`HAND_FONTS`,
    `CAPS_HAND_FONTS`). Each draws from a generator of its own, so
    that the pages made without them stay as they were. `scale` typesets the same page that
    many times as large, as a PDF page rendered at that multiple of the dpi; `fine` is the
    share of pages typeset at twice their scale (the built-in model's 288 dpi renders)."""
    rng = random.Random(seed)
    row_rng = random.Random(seed ^ 0x50B1)
    fonts = available_fonts(heldout_fonts) or available_fonts(False)
    fine_rng = random.Random(seed ^ 0xF1E5)
    if fine and fine_rng.random() < fine:
        scale *= 2
    style = _style(rng, fonts, sizes, scale)
    _swap_faces(style, LIGHT_FONTS, light, random.Random(seed ^ 0x11A7))
    _swap_faces(style, GEOMETRIC_FONTS, geometric, random.Random(seed ^ 0x6E0F))
    _hand_style(style, hand, random.Random(seed ^ 0x4A4D))
    space_rng = random.Random(seed ^ 0x5BAC)
    if spaces and space_rng.random() < spaces:
        style.word_space = "justified" if space_rng.random() < 0.5 else space_rng.uniform(0.4, 0.8)
    ts = _Typesetter(style, rng)
    if rng.random() < 0.7:
        ts.heading(sentence(rng, sources, 2, 7).rstrip(".,;:"), 1)
    for _ in range(40):
        if rows and row_rng.random() < rows:
            ts.symbol_row(row_rng, sources)
        r = rng.random()
        if r < 0.12:
            ok = ts.heading(sentence(rng, sources, 2, 7).rstrip(".,;:"), rng.choice((2, 3)))
        elif r < 0.55:
            text = prose_text(rng, sources) if rng.random() < 0.6 else typographic(
                word_sequence(rng, sources, rng.randint(12, 60)), rng)
            ok = ts.paragraph(text)
        elif r < 0.70:
            ok = ts.items([sentence(rng, sources, 2, 14) for _ in range(rng.randint(2, 5))],
                          numbered=rng.random() < 0.4)
        elif r < 0.82:
            start = rng.randrange(max(1, len(sources.code) - 8))
            ok = ts.code(sources.code[start : start + rng.randint(2, 6)])
        elif r < 0.92:
            ok = ts.table(_table_rows(rng, sources))
        else:
            ok = ts.paragraph(random_text(rng, rng.randint(10, 70)))
        if not ok and not ts.room(_font(ts.s.fonts["serif"], ts.s.body_size), 3):
            break
    image = ts.image
    if augment:
        image = degrade(ts.image, rng)
        if erases_text(ts.image, image, ts.lines):
            image = ts.image  # the ground truth must describe what is on the page
        scan_rng = random.Random(seed ^ 0x5CA7)
        if scan and scan_rng.random() < scan:
            scanned = scan_degrade(image, scan_rng)
            if not erases_text(ts.image, scanned, ts.lines):
                image = scanned
    return SynthPage(image=image, markdown="\n\n".join(ts.blocks), lines=ts.lines, scale=scale)
