"""Text for synthetic documents, deterministic by seed, drawn from local sources only.

Sources are split by file into train and held-out halves, so evaluation text is never seen in
training: English prose (docstrings and comments of the Python standard library), code lines
from the same files, dictionary word sequences with numbers, URLs and e-mail addresses, and a
little random text over the whole vocabulary.
"""

from __future__ import annotations

import random
import re
import sysconfig
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

WORDS_FILE = Path("/usr/share/dict/words")


def missing_word_list() -> str | None:
    """A warning when the dictionary is not installed, else None. Without it, word sequences
    fall back to words of the stdlib's prose (identifiers, markup): other pages, harder ones.
    The shipped weights were trained, and the README's figures measured, with it."""
    if WORDS_FILE.exists():
        return None
    return (f"warning: {WORDS_FILE} is missing (Debian package wamerican): synthetic text "
            "falls back to words of Python's docstrings, so training data and CER are not "
            "comparable with the README's; install it with `apt-get install wamerican`")

ACCENTED_WORDS = (
    "café naïve résumé Zürich façade jalapeño Øresund Straße crème brûlée São Paulo Ångström "
    "déjà vu über Müller Gödel Dvořák Curaçao fiancée señor coöperate Besançon Kraków Málaga "
    "Genève Île-de-France Bogotá Reykjavík Þór Ærø smörgåsbord piñata doña Århus"
).split()
ACCENTED_WORDS = [w for w in ACCENTED_WORDS if all(ord(c) < 256 for c in w)]
TLDS = ("com", "org", "net", "io", "de", "fr", "edu", "co.uk", "dev")


def _split_of(path: Path) -> str:
    """'test' for about one file in six, by a stable hash of its name."""
    return "test" if zlib.crc32(path.name.encode()) % 6 == 0 else "train"


def _word_split(word: str) -> str:
    """'test' for about one word in six, by a stable hash of the word."""
    return "test" if zlib.crc32(word.encode()) % 6 == 0 else "train"


_DOCSTRING = re.compile(r'"""(.*?)"""', re.S)


@dataclass
class TextSources:
    prose: list[str]
    code: list[str]
    words: list[str]

    @classmethod
    def load(cls, split: str, max_files: int = 400, words_file: Path = WORDS_FILE) -> TextSources:
        """The `split` half of the sources; `words_file` is the word list (one word a line)."""
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        files = sorted(p for p in stdlib.glob("*.py") if _split_of(p) == split)[:max_files]
        prose, code = [], []
        for f in files:
            try:
                src = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            for doc in _DOCSTRING.findall(src):
                for para in re.split(r"\n\s*\n", doc):
                    text = " ".join(para.split())
                    if len(text) > 30 and text.isascii():
                        prose.append(text)
            for line in src.splitlines():
                s = line.rstrip()
                if 8 <= len(s.strip()) <= 90 and s.isascii() and not s.strip().startswith("#"):
                    code.append(s.strip())
        all_words = [w for w in words_file.read_text(encoding="latin-1").split() if w.isascii()] \
            if words_file.exists() else []
        if not all_words:  # no dictionary installed: fall back to words of the prose
            all_words = sorted({w.strip(".,;:()'\"") for p in prose for w in p.split()} - {""})
        # Split by word, not only by file: common words are in both halves' prose, and
        # held-out word sequences must still be words training never drew.
        words = [w for w in all_words if _word_split(w) == split]
        return cls(prose=prose or ["The quick brown fox jumps over the lazy dog."],
                   code=code or ["x = 1"], words=words)


def _number(rng: random.Random) -> str:
    kind = rng.randrange(8)
    if kind == 0:
        return f"${rng.randint(1, 9999)}.{rng.randint(0, 99):02d}"
    if kind == 1:
        return f"{rng.randint(1990, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if kind == 2:
        return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
    if kind == 3:
        return f"v{rng.randint(0, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"
    if kind == 4:
        return f"{rng.uniform(0, 100):.1f}%"
    if kind == 5:  # thousands grouped by a comma, a point or a space ("754 600"), or not
        sep = rng.choice([",", ",", ".", " ", ""])
        return f"{rng.randint(1000, 9_999_999):,}".replace(",", sep)
    if kind == 6:
        return str(rng.randint(0, 100000))
    return f"{rng.uniform(-50, 50):.{rng.randint(1, 3)}f}"


def _url(rng: random.Random, words: list[str]) -> str:
    host = rng.choice(words).lower()
    if rng.random() < 0.5:
        path = "/".join(rng.choice(words).lower() for _ in range(rng.randint(1, 2)))
        return f"https://{host}.{rng.choice(TLDS)}/{path}"
    return f"www.{host}.{rng.choice(TLDS)}"


def _email(rng: random.Random, words: list[str]) -> str:
    user = rng.choice(words).lower() + rng.choice(["", ".", "_"]) + rng.choice(words).lower()
    return f"{user}@{rng.choice(words).lower()}.{rng.choice(TLDS)}"


def typographic(text: str, rng: random.Random) -> str:
    """Curly quotes, dashes and ellipses, as typeset documents use them."""
    if rng.random() < 0.35:
        text = re.sub(r'"([^"]*)"', "\u201c\\1\u201d", text)
        text = re.sub(r"(\w)'(\w)", "\\1\u2019\\2", text)
    if rng.random() < 0.3:
        text = text.replace(" - ", rng.choice([" \u2013 ", "\u2014"]))
    if rng.random() < 0.2:
        text = text.replace("...", "\u2026")
    return text


RANDOM_CHARS = (
    "".join(chr(c) for c in range(33, 127))
    + "".join(chr(c) for c in range(0xC0, 0x100) if c not in (0xD7, 0xF7))
    + "\u2018\u2019\u201c\u201d\u2013\u2014\u2022\u2026\u20ac\u00a9\u00b0\u00a7\u00b1\u00bd"
)


def word_sequence(rng: random.Random, src: TextSources, n_words: int) -> str:
    out = []
    for i in range(n_words):
        r = rng.random()
        if r < 0.10:
            w = _number(rng)
        elif r < 0.13:
            w = _url(rng, src.words)
        elif r < 0.15:
            w = _email(rng, src.words)
        elif r < 0.19:
            w = rng.choice(ACCENTED_WORDS)
        else:
            w = rng.choice(src.words)
            if i == 0 or rng.random() < 0.1:
                w = w.capitalize()
            elif rng.random() < 0.03:
                w = w.upper()
        if rng.random() < 0.05:
            w = rng.choice(["(", "[", '"', "'"]) + w + rng.choice([")", "]", '"', "'"])
        if rng.random() < 0.12:
            w += rng.choice([",", ",", ".", ";", ":", "!", "?"])
        out.append(w)
    return " ".join(out)


def random_text(rng: random.Random, length: int) -> str:
    chars = [rng.choice(RANDOM_CHARS) for _ in range(length)]
    for i in range(1, len(chars) - 1):
        if rng.random() < 0.15:
            chars[i] = " "
    return "".join(chars).strip() or "x"


def prose_text(rng: random.Random, src: TextSources) -> str:
    return typographic(rng.choice(src.prose), rng)


# Runs alone are of symbols with body: a lone run of `-`, `=`, `_` or `~` is a rule to the
# layout step, never read. Around words any of them is text.
RUN_SYMBOLS, BANNER_SYMBOLS = "***##+", "**##+=-~"


def symbol_row(rng: random.Random, src: TextSources, fits: Callable[[str], bool]) -> str:
    """A line made mostly of runs of one symbol, as the longest that `fits` allows: a rule of
    asterisks, hashes or plus signs, a banner around a few words, a spaced run (`* * *`), or
    a contents line with dot leaders. Comment banners and separator lines are common on real
    pages, and a reader that never saw one loops on it."""
    kind = rng.randrange(4)
    char = rng.choice(BANNER_SYMBOLS if kind == 1 else RUN_SYMBOLS)
    words = sentence(rng, src, 1, 6).rstrip(".")
    sep = rng.choice([" ", ""])  # dot leaders touch the words or not
    number = f"{sep}{rng.randint(1, 400)}" if rng.random() < 0.7 else ""

    def build(n: int) -> str:
        if kind == 0:
            return char * n
        if kind == 1:
            run = char * max(1, n // 4)
            return f"{run} {words} {run}"
        if kind == 2:
            return " ".join(char * n)
        return f"{words}{sep}{'.' * n}{number}"

    n = rng.randint(3, 100)
    while n > 3 and not fits(build(n)):
        n = n * 9 // 10
    return build(n)


def sentence(rng: random.Random, src: TextSources, min_words: int = 3, max_words: int = 12) -> str:
    """A short line of text: a prose fragment or a word sequence."""
    if rng.random() < 0.5:
        words = prose_text(rng, src).split()
        start = rng.randrange(max(1, len(words) - min_words))
        return " ".join(words[start : start + rng.randint(min_words, max_words)])
    return typographic(word_sequence(rng, src, rng.randint(min_words, max_words)), rng)
