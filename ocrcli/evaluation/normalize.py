"""Text normalisation used before comparing OCR output with ground truth.

Two benchmark conventions live here:

* :func:`normalize_bench_text` is olmOCR-Bench's normalisation, applied to both
  a test's strings and the candidate Markdown before fuzzy matching. The order
  of the steps matters (whitespace is collapsed before emphasis markers are
  removed, so an emphasis span never crosses a line break in the original) and
  is kept identical to the official scorer so that scores agree.
* :func:`normalize_omnidoc_text` is OmniDocBench's text normalisation for the
  normalised edit distance: inline formulas become Unicode text, then
  everything except word characters and CJK ideographs is removed.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

# --- olmOCR-Bench ----------------------------------------------------------

# Each step is (pattern, replacement); applied in this order.
_BENCH_STEPS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"<br/?>"), " "),  # HTML line breaks read as spaces
    (re.compile(r"\s+"), " "),  # then every whitespace run is one space
    (re.compile(r"\*\*(.*?)\*\*"), r"\1"),  # **bold**
    (re.compile(r"__(.*?)__"), r"\1"),  # __bold__
    (re.compile(r"</?b>"), ""),  # <b> tags
    (re.compile(r"</?i>"), ""),  # <i> tags
    (re.compile(r"\*(.*?)\*"), r"\1"),  # *italic*
    (re.compile(r"_(.*?)_"), r"\1"),  # _italic_
)

# Typographic variants that OCR systems and PDFs disagree on; folded after NFC.
_BENCH_FOLD = str.maketrans(
    {
        "\u2018": "'",  # left single quote
        "\u2019": "'",  # right single quote
        "\u201a": "'",  # single low-9 quote
        "\u201c": '"',  # left double quote
        "\u201d": '"',  # right double quote
        "\u201e": '"',  # double low-9 quote
        "\uff3f": "_",  # fullwidth low line
        "\u2013": "-",  # en dash
        "\u2014": "-",  # em dash
        "\u2011": "-",  # non-breaking hyphen
        "\u2012": "-",  # figure dash
        "\u2212": "-",  # minus sign
        "\u00b5": "\u03bc",  # micro sign -> Greek mu
    }
)


def normalize_bench_text(text: str) -> str:
    """olmOCR-Bench normalisation of test strings and candidate output."""
    for pattern, replacement in _BENCH_STEPS:
        text = pattern.sub(replacement, text)
    return unicodedata.normalize("NFC", text).translate(_BENCH_FOLD)


# --- OmniDocBench ----------------------------------------------------------

# Inline formulas as OmniDocBench finds them in text blocks.
_INLINE_MATH = re.compile(r"\$(.*?)\$|\\\((.*?)\\\)")
# Escaped specials whose backslash OmniDocBench drops before conversion.
_ESCAPED_SPECIAL = re.compile(r"\\([\\_&%^])")
# Characters that survive the final clean-up: word characters and CJK ideographs.
_NON_WORD = re.compile(r"[^\w\u4e00-\u9fff]")
_MACRO = re.compile(r"\\([A-Za-z]+)\s*")

# The LaTeX macros whose Unicode output is a word character (and so survives the
# final clean-up). Symbols such as \times map to non-word characters, which the
# clean-up removes anyway, so they need no entry.
_GREEK_NAMES = (
    "alpha beta gamma delta zeta eta theta iota kappa lambda mu nu xi pi rho sigma tau "
    "upsilon chi psi omega"
).split()
_GREEK_SMALL = "αβγδζηθικλμνξπρστυχψω"
_MACRO_TEXT: dict[str, str] = {
    **dict(zip(_GREEK_NAMES, _GREEK_SMALL, strict=True)),
    **{n.capitalize(): c.upper() for n, c in zip(_GREEK_NAMES, _GREEK_SMALL, strict=True)},
    # TeX's \epsilon and \phi are the lunate/loopless forms; the var- forms are
    # the ordinary letters.
    "epsilon": "\u03f5",
    "varepsilon": "\u03b5",
    "phi": "\u03d5",
    "varphi": "\u03c6",
    "Phi": "\u03a6",
    "vartheta": "\u03d1",
    "varpi": "\u03d6",
    "varrho": "\u03f1",
    "varsigma": "\u03c2",
    "ell": "\u2113",
    "hbar": "\u210f",
}


def simple_latex_to_text(latex: str) -> str:
    """Dependency-free stand-in for ``pylatexenc``'s LaTeX-to-text conversion.

    It is exact for what survives :func:`normalize_omnidoc_text`'s clean-up in
    common inline math: Greek letters and a few letter-like symbols become their
    Unicode characters, other macro names (``\\mathrm``, ``\\frac``, ...) vanish
    and their arguments stay. Pass ``pylatexenc.latex2text.LatexNodes2Text()
    .latex_to_text`` to :func:`normalize_omnidoc_text` for full fidelity.
    """
    return _MACRO.sub(lambda m: _MACRO_TEXT.get(m.group(1), ""), latex)


def _inline_math_to_text(text: str, latex_to_text: Callable[[str], str]) -> str:
    pieces: list[str] = []
    last = 0
    for match in _INLINE_MATH.finditer(text):
        content = match.group(1) if match.group(1) is not None else match.group(2)
        content = _ESCAPED_SPECIAL.sub("", content)
        # OmniDocBench converts only formulas that contain LaTeX syntax; plain
        # "$5$"-style spans keep their delimiters, which the clean-up removes.
        if not any(ch in content for ch in "\\^_"):
            continue
        try:
            converted = latex_to_text(content + (" " if content.endswith("\\") else ""))
        except Exception:  # a converter failure keeps the formula's source, as upstream does
            continue
        pieces.append(text[last : match.start()])
        pieces.append(converted.strip())
        last = match.end()
    pieces.append(text[last:])
    return "".join(pieces)


def normalize_omnidoc_text(
    text: str, latex_to_text: Callable[[str], str] = simple_latex_to_text
) -> str:
    """OmniDocBench's text normalisation for the normalised edit distance.

    Inline formulas are turned into text with ``latex_to_text``; then literal
    ``\\t``/``\\n`` escapes, tabs and newlines are dropped and every character
    that is not a word character or a CJK ideograph is removed (so whitespace
    and punctuation never count as edits).
    """
    text = _inline_math_to_text(text, latex_to_text)
    for junk in ("\\t", "\\n", "\t", "\n", "/t", "/n"):
        text = text.replace(junk, "")
    return _NON_WORD.sub("", text)
