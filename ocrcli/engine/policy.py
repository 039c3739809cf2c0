"""Draft policies: how many tokens the MTP head proposes per row and step (no torch here,
so the CLI can read the defaults without loading it).

- `DraftPolicy(max_depth=0)`: no drafting; the step is plain greedy decoding.
- fixed depth K: draft K tokens with the recursive head.
- confidence-gated depth (our reading of P-MTP's dynamic drafting): a row stops drafting at
  the first step whose top probability is under `min_prob`, or whose running product of top
  probabilities is under `min_path_prob`. `max_depth` bounds it.

Gating never changes output, only how many drafts are verified.
"""

from __future__ import annotations

from dataclasses import dataclass


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
