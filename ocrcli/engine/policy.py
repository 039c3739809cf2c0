"""Draft policies: how many tokens the MTP head proposes per row and step (no torch here,
so the CLI can read the defaults without loading it).

- `DraftPolicy(max_depth=0)`: no drafting; the step is plain greedy decoding.
- fixed depth K: draft K tokens with the recursive head.
- confidence-gated depth (our reading of P-MTP's dynamic drafting): a row stops drafting at
  the first step whose top probability is under `min_prob`, or whose running product of top
  probabilities is under `min_path_prob`. `max_depth` bounds it.

Gating never changes output, only how many drafts are verified.

Drafts may also come from the page's PDF text layer (`Drafter`, `TextDraftPolicy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class DraftPolicy:
    max_depth: int = 0
    min_prob: float = 0.0  # 0 disables gating on a step's own confidence
    min_path_prob: float = 0.0  # 0 disables gating on the running product

    @property
    def gated(self) -> bool:
        return self.min_prob > 0 or self.min_path_prob > 0


# Chosen with scripts/bench_decode.py on samples/ (see the README's performance section).
GATED_DEFAULT = DraftPolicy(max_depth=6, min_prob=0.5, min_path_prob=0.3)


def default_policy(head_depth: int, batch_size: int, min_prob: float = GATED_DEFAULT.min_prob,
                   min_path_prob: float = GATED_DEFAULT.min_path_prob) -> DraftPolicy:
    """Gated drafting as deep as the head goes, when no depth is given. Once CPU verify
    passes were one padded GEMM instead of a product per row (models/layers.py), deep
    drafting won at batch 8 too (README, performance); `batch_size` stays in the signature
    for devices where a wide verify costs more."""
    del batch_size
    return DraftPolicy(head_depth, min_prob, min_path_prob)


class Drafter(str, Enum):
    """Where drafts come from (`--drafter`). Every choice gives the same output (greedy's)."""

    AUTO = "auto"  # per row and step: the text layer's run where it matches well, else the head
    HEAD = "head"  # the model's MTP head under a DraftPolicy
    TEXT_LAYER = "text-layer"  # the page's text layer alone (engine/text_draft.py)
    NONE = "none"  # no drafts: plain greedy decoding


@dataclass(frozen=True)
class TextDraftPolicy:
    """Prompt lookup in a request's text layer (engine/text_draft.py): how far a row's
    generated suffix is matched, and how deep a match lets it draft.

    A match of n tokens drafts `depth_per_match * n` tokens, up to `max_depth`: a long match
    says the model is reading the layer's text, a single token says little. Each run whose
    first draft was rejected halves the row's next one. Under `auto`, a row drafts from the
    text only where its match holds `auto_min_match` tokens or more (one more per such miss),
    and from the head otherwise (with no head, any match is used).

    Defaults measured with scripts/bench_decode.py --drafters on born-digital PDFs and on
    scans: on the CPU the head's drafting costs about two verify steps at batch 1, so auto
    leaves rows to the head only where the text stops matching."""

    max_depth: int = 32
    max_ngram: int = 8
    depth_per_match: int = 8
    auto_min_match: int = 2


TEXT_DEFAULT = TextDraftPolicy()
