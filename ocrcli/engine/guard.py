"""Repetition guard: a windowed no-repeat n-gram ban and loop detection.

The ban is evaluated at every verified position over the history *including the earlier
drafts of the same round*, so a greedy step and a speculative step see exactly the same rule
and give the same output (the lossless property).
"""

from __future__ import annotations

from ocrcli.models.base import GuardConfig


def banned_tokens(history: list[int], cfg: GuardConfig) -> set[int]:
    """Tokens that would complete an n-gram already seen in the window."""
    n = cfg.ngram
    if n <= 0 or len(history) < n - 1:
        return set()
    start = max(0, len(history) - cfg.window) if cfg.window else 0
    prefix = history[len(history) - (n - 1) :] if n > 1 else []
    banned = set()
    for i in range(start, len(history) - n + 1):
        if history[i : i + n - 1] == prefix:
            banned.add(history[i + n - 1])
    return banned - cfg.whitelist


def is_looping(history: list[int], cfg: GuardConfig) -> bool:
    """True when the tail is one short period repeated `loop_repeats` times."""
    if cfg.loop_period_max <= 0 or cfg.loop_repeats <= 1:
        return False
    for period in range(1, cfg.loop_period_max + 1):
        repeats = max(cfg.loop_repeats, -(-cfg.loop_min_span // period))
        span = period * repeats
        if len(history) < span:
            break
        tail = history[-span:]
        if tail == tail[:period] * repeats:
            return True
    return False
