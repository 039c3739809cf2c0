"""Losses for the built-in model: next-token CE with auxiliary CTC, and the MTP head's
progressive curriculum.

Progressive curriculum (our reading of P-MTP; the paper's formula is not public):
- cumulative path reliability: depth k's weight is the batch mean of the detached product
  p_1 ... p_{k-1} of the head's probabilities for the targets on the path before it,
  floored at FastMTP's beta^(k-1), then normalised over depths. Deep look-ahead gains weight
  as the shallower steps become reliable.
- retrospective target consistency: a position whose teacher-forced input path contains a
  token the main model would not have produced there (ground truth != main argmax) is
  down-weighted to `inconsistent_weight`, since drafts never walk such a path at inference.
With `curriculum=False` it is plain FastMTP: fixed weights beta^(k-1), normalised, and every
position weighted alike (no target-consistency down-weighting), the ablation's baseline.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def ocr_loss(logits, targets, ctc_logits, valid, ctc_targets, ctc_lengths, ctc_weight=0.5):
    """logits [B,T,V], targets [B,T] (-100 = ignore); ctc_logits [B,N,V], valid [B,N]."""
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
    if ctc_weight == 0:
        return ce, ce.detach()
    log_probs = ctc_logits.log_softmax(-1).transpose(0, 1)  # [N,B,V]
    ctc = F.ctc_loss(log_probs, ctc_targets, valid.sum(1), ctc_lengths, blank=0,
                     zero_infinity=True)
    return ce + ctc_weight * ctc, ce.detach()


def fixed_step_weights(depth: int, beta: float = 0.6) -> torch.Tensor:
    w = torch.tensor([beta**k for k in range(depth)])
    return w / w.sum()


def mtp_loss(
    step_logits: list[torch.Tensor],  # K x [B,T,V]
    main_argmax: torch.Tensor,  # [B,T] the main model's greedy token at each position
    tokens: torch.Tensor,  # [B,T] teacher-forced inputs
    valid: torch.Tensor,  # [B,T] real positions
    curriculum: bool = True,
    beta: float = 0.6,
    inconsistent_weight: float = 0.1,
) -> tuple[torch.Tensor, dict]:
    """Step k at position i predicts main_argmax[i+k]. Returns the loss and per-depth stats."""
    b, t = tokens.shape
    depth = len(step_logits)
    path_prob = torch.ones(b, t, device=tokens.device)
    consistent = torch.ones(b, t, dtype=torch.bool, device=tokens.device)
    floors = fixed_step_weights(depth, beta).to(tokens.device) * (sum(beta**k for k in range(depth)))
    losses, weights, stats = [], [], {"acc": [], "weight": []}
    for k, logits in enumerate(step_logits, start=1):
        target = torch.full_like(main_argmax, -100)
        target[:, : t - k] = main_argmax[:, k:]
        mask = valid.clone()
        mask[:, t - k :] = False
        mask[:, : t - k] &= valid[:, k:]
        # the input token at i+k must be what the main model predicted at i+k-1
        same = torch.zeros_like(consistent)
        same[:, : t - k] = tokens[:, k:] == main_argmax[:, k - 1 : t - 1]
        consistent = consistent & same
        ce = F.cross_entropy(logits.flatten(0, 1), target.clamp(min=0).flatten(),
                             reduction="none").view(b, t)
        pos_w = (torch.where(consistent, 1.0, inconsistent_weight) if curriculum else 1.0) * mask
        losses.append((ce * pos_w).sum() / pos_w.sum().clamp(min=1))
        with torch.no_grad():
            p_target = torch.exp(-ce)
            reliability = (path_prob * mask).sum() / mask.sum().clamp(min=1)
            weights.append(torch.maximum(reliability, floors[k - 1]) if curriculum else floors[k - 1])
            hit = (logits.argmax(-1) == target) & mask
            stats["acc"].append((hit.sum() / mask.sum().clamp(min=1)).item())
            path_prob = path_prob * p_target
    w = torch.stack(weights)
    w = w / w.sum()
    stats["weight"] = w.tolist()
    return sum(wk * lk for wk, lk in zip(w, losses)), stats
