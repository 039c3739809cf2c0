"""Detecting degenerate repetition, the typical failure of autoregressive OCR models.

* :func:`trailing_repeat_counts` is olmOCR-Bench's baseline check: how often the
  last character n-gram repeats back to back at the very end of the output.
* :func:`looped_token_fraction` measures loops anywhere in the output: the share
  of tokens that are surplus copies in a run of a unit (a word or a short
  phrase) repeated back to back many times.
"""

from __future__ import annotations

import re

_WHITESPACE = re.compile(r"\s+")


def trailing_repeat_counts(text: str, max_ngram: int = 5) -> list[int]:
    """``counts[n-1]`` = back-to-back copies of the final ``n``-character string at the end.

    Whitespace runs are collapsed to one space first; an ``n`` longer than the
    text gets 0. ``"xabab"`` gives ``[1, 2, 1, 1, 1]``.
    """
    counts = [0] * max_ngram
    if not text:
        return counts
    text = _WHITESPACE.sub(" ", text)
    for n in range(1, max_ngram + 1):
        if len(text) < n:
            continue
        tail = text[-n:]
        start = len(text) - n
        copies = 0
        while start >= 0 and text[start : start + n] == tail:
            copies += 1
            start -= n
        counts[n - 1] = copies
    return counts


# Words (letters/digits) and single CJK/kana characters, which are written
# without spaces; punctuation is ignored so that dot leaders and table rules
# ("| --- | --- |") are not mistaken for loops.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+")


def tokenize_for_repetition(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def looped_token_fraction(
    tokens: list[str], max_period: int = 16, allowed_copies: int = 3, min_run_tokens: int = 12
) -> float:
    """Fraction of ``tokens`` that are surplus copies inside a repetition loop.

    A loop is a stretch that repeats a unit of ``p <= max_period`` tokens back to
    back. The first ``allowed_copies`` copies are legitimate (lists, table rows
    and refrains do repeat); the copies beyond them count as surplus, and only
    stretches of at least ``min_run_tokens`` tokens are considered so that
    short runs such as "0 0 0 0" in a table are not penalised.
    """
    n = len(tokens)
    if n == 0:
        return 0.0
    surplus = bytearray(n)  # 1 marks a token counted as surplus (no double counting)
    for p in range(1, min(max_period, n // 2) + 1):
        i = 0
        while i + p < n:
            if tokens[i] != tokens[i + p]:
                i += 1
                continue
            # tokens[i : j + p] is periodic with period p.
            j = i
            while j + p < n and tokens[j] == tokens[j + p]:
                j += 1
            span = j + p - i
            if span >= min_run_tokens and span > allowed_copies * p:
                surplus[i + allowed_copies * p : j + p] = b"\x01" * (span - allowed_copies * p)
            i = j + 1
    return sum(surplus) / n
