"""Normalised edit distances as OmniDocBench reports them (lower is better).

* Text: Levenshtein distance between the normalised prediction and ground truth
  divided by the longer length (:func:`text_edit_distance`). OmniDocBench's
  leaderboard "Text Edit" sums edits and lengths over a page's matched blocks
  before dividing (:func:`page_text_edit_distance`), then averages pages.
* Reading order: the ground-truth block indices in the order the prediction
  emits them, compared with the same indices sorted
  (:func:`reading_order_edit_distance`).

The block matching that pairs predicted paragraphs with ground-truth blocks is
OmniDocBench's own and is not reproduced here; callers pass matched pairs (or
a whole page as one pair, OmniDocBench's ``no_split`` mode).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence

from rapidfuzz.distance import Levenshtein

from ocrcli.evaluation.normalize import normalize_omnidoc_text, simple_latex_to_text


def _normalised_levenshtein(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    if not a and not b:
        return 0.0
    return Levenshtein.distance(a, b) / max(len(a), len(b))


def text_edit_distance(
    pred: str,
    truth: str,
    normalize: bool = True,
    latex_to_text: Callable[[str], str] = simple_latex_to_text,
) -> float:
    """OmniDocBench normalised edit distance in [0, 1]; two empty texts give 0.

    With ``normalize`` both sides first go through
    :func:`~ocrcli.evaluation.normalize.normalize_omnidoc_text`.
    """
    if normalize:
        pred = normalize_omnidoc_text(pred, latex_to_text)
        truth = normalize_omnidoc_text(truth, latex_to_text)
    return _normalised_levenshtein(pred, truth)


def page_text_edit_distance(
    pairs: Iterable[tuple[str, str]],
    normalize: bool = True,
    latex_to_text: Callable[[str], str] = simple_latex_to_text,
) -> float:
    """A page's edit distance over matched ``(pred, truth)`` blocks: sum of edits / sum of lengths.

    Summing before dividing weights long blocks more than short ones, as the
    leaderboard's per-page figure does. A page with no text gives 0.
    """
    edits = 0
    length = 0
    for pred, truth in pairs:
        if normalize:
            pred = normalize_omnidoc_text(pred, latex_to_text)
            truth = normalize_omnidoc_text(truth, latex_to_text)
        edits += Levenshtein.distance(pred, truth)
        length += max(len(pred), len(truth))
    return edits / length if length else 0.0


def reading_order_edit_distance(
    predicted_order: Sequence[int], truth_indices: Sequence[int] | None = None
) -> float:
    """Edit distance between the predicted reading order and the true one, in [0, 1].

    ``predicted_order`` lists ground-truth block indices (their ``order``
    attributes) in the order the prediction emits the blocks matched to them.
    The true order is ``truth_indices`` sorted (by default the same indices
    sorted); blocks the prediction missed thus count as deletions when
    ``truth_indices`` lists all ground-truth blocks.
    """
    truth = sorted(predicted_order if truth_indices is None else truth_indices)
    return _normalised_levenshtein(list(predicted_order), truth)
