"""Whether a converted page can be trusted, and if not, why.

The engine ends a request `ok` when the model emitted its end token, which says nothing about
what it read. A page whose reading came out empty while the page holds ink or a text layer,
that is mostly symbols, that loops, or that the model itself found unlikely is not `ok`: it is
`degenerate`, with a one-line reason, so that the exit code, `summary.json` and resume
(`--retry degenerate`) can act on it. Truncated requests get their reason here too.

The evidence is what the run has anyway: the rendered page (`render.ink_share`), the PDF's
text layer, the page's Markdown and the model's log-probabilities of its own tokens.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

# A page with a text layer longer than this, or with this much ink, should read to more than
# MIN_CHARS characters. A page that holds a heading or a page number alone has far less ink.
MIN_CHARS = 20
TEXT_LAYER_CHARS = 200
INK_SHARE = 0.005
# Below this share of letters and digits among the content characters, output is not text.
MIN_WORD_SHARE = 0.5
# A page whose output is mostly a loop (quality.repetition_score under this).
MIN_REPETITION_SCORE = 0.5
# A page of many requests (the built-in model reads a page as one request per line piece) with
# a loop or a token cap in at most this share of them is judged by the rest: the stop is noted
# in its JSON (`note`), and the page's text goes through doubt() like any other. A single-request
# page (DeepSeek-OCR, Jina-OCR-v1) that stopped is always flagged.
MAX_STOPPED_SHARE = 0.05
STOPPED = ("truncated", "degenerate")
# Characters of Markdown's own syntax: a table of empty cells is not content.
MARKDOWN_SYNTAX = frozenset("|-:#*_`>~=+")


@dataclass(frozen=True)
class PageEvidence:
    text: str  # the page's Markdown
    ink: float  # the share of the page's area that is not background (render.ink_share)
    text_layer_chars: int | None  # visible characters of the PDF's text layer; None: no PDF
    mean_logprob: float | None  # per decoded token; None where nothing was decoded
    repetition: float = 1.0  # quality.repetition_score of the text
    min_mean_logprob: float = -1.5  # the model's bound (models.base.ModelSpec.min_mean_logprob)


def content_chars(text: str) -> list[str]:
    """The output's visible characters that are not Markdown syntax."""
    return [c for c in text if not c.isspace() and c not in MARKDOWN_SYNTAX]


def word_share(chars: list[str]) -> float:
    """The share of `chars` that are letters or digits (in any script)."""
    if not chars:
        return 0.0
    return sum(unicodedata.category(c)[0] in "LN" for c in chars) / len(chars)


def readable_score(text: str) -> float:
    """1 for text that reads like language, towards 0 for symbols, noise or next to nothing:
    the share of letters and digits, scaled down when under MIN_CHARS content characters."""
    chars = content_chars(text)
    return round(word_share(chars) * min(1.0, len(chars) / MIN_CHARS), 4)


def doubt(e: PageEvidence) -> str | None:
    """Why the page's output cannot be trusted, in one line; None when nothing speaks against it."""
    chars = content_chars(e.text)
    n = len(chars)
    if n < MIN_CHARS:
        if e.text_layer_chars is not None and e.text_layer_chars > TEXT_LAYER_CHARS:
            return (f"the output has {n} characters but the PDF's text layer has "
                    f"{e.text_layer_chars}")
        if e.ink >= INK_SHARE:
            return f"the output has {n} characters but {e.ink:.1%} of the page is ink"
        return None  # a blank page, or one with a heading or a page number alone
    share = word_share(chars)
    if share < MIN_WORD_SHARE:
        return f"the output is mostly symbols ({share:.0%} letters and digits)"
    if e.repetition < MIN_REPETITION_SCORE:
        return f"the output repeats itself ({1 - e.repetition:.0%} of it is a loop)"
    if e.mean_logprob is not None and e.mean_logprob < e.min_mean_logprob:
        return (f"the model is unsure of its reading (mean log-probability {e.mean_logprob:.2f} "
                f"per token, under {e.min_mean_logprob:g})")
    return None


def stopped_share(statuses: list[str]) -> float:
    """The share of a page's requests that the engine stopped (a loop, or the token cap)."""
    return sum(s in STOPPED for s in statuses) / len(statuses) if statuses else 0.0


def request_reason(statuses: list[str], cap: int, out_of_positions: int = 0) -> str | None:
    """Why the engine itself flagged the page's requests (truncated, or looping).
    `out_of_positions`: truncated requests that the model's last position stopped before `cap`."""
    looped = statuses.count("degenerate")
    if looped:
        return f"the output looped and was stopped ({looped} of {len(statuses)} requests)"
    truncated = statuses.count("truncated")
    if out_of_positions:
        return (f"{out_of_positions} of {len(statuses)} requests reached the model's last position "
                f"before the token cap of {cap}")
    if truncated:
        return (f"{truncated} of {len(statuses)} requests reached the token cap of {cap}; "
                "raise --max-new-tokens")
    return None
