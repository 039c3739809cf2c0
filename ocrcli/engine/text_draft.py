"""Drafts from the page's text layer: prompt lookup on the host, verified like the head's.

A born-digital PDF carries the text a model reads off its page, so a request's region of the
text layer (`DecodeRequest.draft_text`) is a nearly free drafter, beside the MTP head. At each
step, for each row, the row's generated suffix (its last n tokens, n from `max_ngram` down to
1) is looked up in the row's text, and the tokens after the match are the row's run of drafts:
as deep as the match is long (`TextDraftPolicy`), none where nothing matches. Verification is
the step's own, so a wrong, shifted or reordered layer costs speed, never a token.

Performance contract: the lookup runs on the host, from the committed tokens the step already
returns, so it adds no device->host read; a step's runs go up as one tensor [B, 1+K'] (depth,
then tokens), and not at all when no row has a run (the step is then exactly the head's or the
greedy one). The host work is O(candidates) per row: the expected position (the last match,
moved on by the tokens committed since) is tried first, so following the text costs one
comparison of at most `max_ngram` tokens.

Shapes: B rows this step, K' drafted positions.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ocrcli.engine.policy import Drafter, TextDraftPolicy


@dataclass
class TextDrafts:
    """One step's text runs on the device, and on the host which rows draft from the text."""

    tokens: torch.Tensor  # [B,K'] each row's run, zero-padded
    depth: torch.Tensor  # [B] run lengths; 0 where the row drafts from the head (or not at all)
    rows: list[bool]  # host: depth > 0

    @property
    def every_row(self) -> bool:
        """Every row drafts from its text: the head need not run this step."""
        return all(self.rows)

    def merge(self, drafts: torch.Tensor, depth: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The head's drafts [B,Kh] and depth [B] with the text runs, per row: the run where the
        row has one, the head's otherwise. -> drafts [B,K'], depth [B], K' = max(Kh, Kt)."""
        if self.every_row:
            return self.tokens, self.depth
        k = max(drafts.shape[1], self.tokens.shape[1])
        text = F.pad(self.tokens, (0, k - self.tokens.shape[1]))
        head = F.pad(drafts, (0, k - drafts.shape[1]))
        use = self.depth > 0  # [B]
        return torch.where(use[:, None], text, head), torch.where(use, self.depth, depth)


class TextLayerProposer:
    """Per cache slot, the bound request's text (with EOS after it: the request ends where its
    text does) and an index from token to positions; `propose` gives each row's run."""

    def __init__(self, policy: TextDraftPolicy, slots: int, eos_id: int,
                 vocab_size: int | None = None, beside_head: bool = False):
        self.policy, self.eos = policy, eos_id
        # Beside a head (auto), a row drafts from its text only on a match of auto_min_match
        # tokens, one more per miss: the head is the better drafter where the text strays.
        self.beside_head = beside_head
        self.min_match = max(1, policy.auto_min_match) if beside_head else 1
        self.vocab = vocab_size  # tokens outside it are dropped: the embedding has no row for them
        self.texts: list[list[int] | None] = [None] * slots
        self.where: list[dict[int, list[int]]] = [{} for _ in range(slots)]
        # (text index of the token last matched, tokens generated then): where the text is
        # expected to continue, if the model keeps reading it
        self.anchor: list[tuple[int, int]] = [(-1, 0)] * slots
        # (first token of the last run proposed, tokens generated then), and how many runs in
        # a row had their first draft rejected: each such miss halves the next run, so a
        # garbled or wrong layer soon stops costing verify width (short runs still pay off:
        # a wrong line of the same language often shares the next few tokens).
        self.pending: list[tuple[int, int]] = [(-1, 0)] * slots
        self.misses = [0] * slots

    def bind(self, slot: int, draft_text: list[int] | None) -> None:
        """Point `slot` at a newly admitted request's text (None or empty: it has none)."""
        self.anchor[slot], self.pending[slot], self.misses[slot] = (-1, 0), (-1, 0), 0
        if not draft_text:
            self.texts[slot], self.where[slot] = None, {}
            return
        text = [*draft_text, self.eos]
        if self.vocab is not None:
            text = [t for t in text if 0 <= t < self.vocab]
        where: dict[int, list[int]] = {}
        for i, t in enumerate(text):
            where.setdefault(t, []).append(i)
        self.texts[slot], self.where[slot] = text, where

    def propose(self, slots: list[int], generated: list[list[int] | None], room: int) -> list[list[int]]:
        """Each row's run of drafts (empty: none) from its generated tokens so far (None: a
        free slot), at most `room` deep (the cache positions the step may write past the
        longest row)."""
        return [self._run(slot, tokens, room) if tokens and self.texts[slot] is not None else []
                for slot, tokens in zip(slots, generated)]

    def _run(self, slot: int, tokens: list[int], room: int) -> list[int]:
        """One row's run: the text after the best match, as deep as the match is long."""
        first, then = self.pending[slot]
        if first >= 0 and len(tokens) > then:  # the last run has been verified since
            self.misses[slot] = 0 if tokens[then] == first else min(self.misses[slot] + 1, 8)
            self.pending[slot] = (-1, 0)
        at, length = self._match(slot, tokens)
        need = self.min_match + (self.misses[slot] if self.beside_head else 0)
        if length < min(need, self.policy.max_ngram) or room <= 0:
            return []
        self.anchor[slot] = (at, len(tokens))
        depth = max(1, self.policy.depth_per_match * length >> self.misses[slot])
        depth = min(self.policy.max_depth, depth, room)
        run = self.texts[slot][at + 1: at + 1 + depth]
        if run:
            self.pending[slot] = (run[0], len(tokens))
        return run

    def _match(self, slot: int, tokens: list[int]) -> tuple[int, int]:
        """(index in the text of the token matching tokens[-1], match length): the longest
        match of the generated suffix, ties to the first at or after the expected position.
        (-1, 0) when the last token is nowhere in the text."""
        text, positions = self.texts[slot], self.where[slot].get(tokens[-1])
        if not positions:
            return -1, 0
        last, then = self.anchor[slot]
        expect = last + len(tokens) - then
        longest = min(self.policy.max_ngram, len(tokens) + 1)  # +1: both may start together
        first = bisect.bisect_left(positions, expect)
        best, best_length = -1, 0
        # ahead of the expected place (reading goes on), then behind it, nearest first
        for k in itertools.chain(range(first, len(positions)), range(first - 1, -1, -1)):
            at = positions[k]
            length = _suffix_match(text, at, tokens, longest)
            if length > best_length:
                best, best_length = at, length
                if length == longest:
                    break
        return best, best_length


def _suffix_match(text: list[int], at: int, tokens: list[int], longest: int) -> int:
    """How many of tokens' last tokens equal text up to `at` (text[at] == tokens[-1]), up to
    `longest`; one more where both reach their start together (the request began where the
    text begins: as good as one more matched token)."""
    n = 1
    while n < longest:
        i, j = at - n, len(tokens) - 1 - n
        if i < 0 or j < 0:
            return n + 1 if i < 0 and j < 0 else n
        if text[i] != tokens[j]:
            return n
        n += 1
    return n


def upload_runs(runs: list[list[int]], device: torch.device, bucket: bool, room: int
                ) -> TextDrafts | None:
    """A step's runs as one tensor on the device (None: no row has one). `bucket` rounds the
    width up to a power of two (within `room`), so that a captured step sees few shapes."""
    rows = [len(r) > 0 for r in runs]
    if not any(rows):
        return None
    width = max(map(len, runs))
    if bucket:
        width = max(width, min(1 << (width - 1).bit_length(), room))
    packed = torch.tensor([[len(r), *r, *[0] * (width - len(r))] for r in runs], dtype=torch.long)
    if device.type == "cuda":  # pinned: the copy does not wait for the host
        packed = packed.pin_memory()
    packed = packed.to(device, non_blocking=True)  # [B, 1+K']
    return TextDrafts(packed[:, 1:], packed[:, 0], rows)


def text_proposer(drafter: Drafter, policy: TextDraftPolicy, slots: int, eos_id: int,
                  vocab_size: int, has_head: bool) -> TextLayerProposer | None:
    """The text-layer drafter an engine runs for `drafter` (None: it drafts from no text).
    Under auto, a short match leaves the row to the head; with no head, any match drafts."""
    if drafter not in (Drafter.AUTO, Drafter.TEXT_LAYER):
        return None
    return TextLayerProposer(policy, slots, eos_id, vocab_size,
                             beside_head=drafter == Drafter.AUTO and has_head)
