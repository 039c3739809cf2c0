"""The MTP head's losses: FastMTP's fixed step weights and the progressive curriculum."""

from __future__ import annotations

import torch

from ocrcli.training.losses import fixed_step_weights, mtp_loss


def test_fixed_weights_are_fastmtp_beta_06():
    assert [round(w, 2) for w in fixed_step_weights(3).tolist()] == [0.51, 0.31, 0.18]


def _logits_for(targets: torch.Tensor, confidence: float, vocab: int = 5) -> torch.Tensor:
    """Logits [B,T,V] giving each target probability about `confidence`."""
    logits = torch.zeros(*targets.shape, vocab)
    logit = float(torch.log(torch.tensor(confidence * (vocab - 1) / (1 - confidence))))
    logits.scatter_(-1, targets.clamp(min=0)[..., None], logit)
    return logits


def _case(confidence: float, tokens: torch.Tensor, argmax: torch.Tensor, curriculum: bool):
    depth = 3
    valid = torch.ones_like(tokens, dtype=torch.bool)
    step_logits = []
    for k in range(1, depth + 1):
        target = torch.zeros_like(argmax)
        target[:, :-k] = argmax[:, k:]
        step_logits.append(_logits_for(target, confidence))
    return mtp_loss(step_logits, argmax, tokens, valid, curriculum=curriculum)


def test_curriculum_weights_rise_with_path_reliability():
    argmax = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4]])
    tokens = torch.cat([torch.tensor([[0]]), argmax[:, :-1]], dim=1)  # teacher path = main's
    _, unsure = _case(0.2, tokens, argmax, curriculum=True)
    _, sure = _case(0.99, tokens, argmax, curriculum=True)
    _, fixed = _case(0.99, tokens, argmax, curriculum=False)
    # An unreliable head keeps FastMTP's weights (the floors); a reliable one spreads weight
    # to the deeper steps.
    assert [round(w, 2) for w in unsure["weight"]] == [0.51, 0.31, 0.18]
    assert [round(w, 2) for w in fixed["weight"]] == [0.51, 0.31, 0.18]
    assert sure["weight"][2] > 0.3 and sure["weight"][0] < 0.4


def test_target_consistency_downweights_paths_the_main_model_would_not_walk():
    argmax = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4]])
    tokens = torch.cat([torch.tensor([[0]]), argmax[:, :-1]], dim=1)
    tokens[0, 3] = 1  # the ground truth here is not what the main model predicted (3)
    valid = torch.ones_like(argmax, dtype=torch.bool)
    step_logits = []
    for k in range(1, 4):
        target = torch.zeros_like(argmax)
        target[:, :-k] = argmax[:, k:]
        logits = _logits_for(target, 0.95)
        logits[0, :3] = 0.0  # unsure before the off-path token: the positions reading it
        step_logits.append(logits)
    weighted, _ = mtp_loss(step_logits, argmax, tokens, valid, curriculum=True)
    unweighted, _ = mtp_loss(step_logits, argmax, tokens, valid, curriculum=True,
                             inconsistent_weight=1.0)
    plain, _ = mtp_loss(step_logits, argmax, tokens, valid, curriculum=False)
    # Positions whose input path holds the off-path token count less with the curriculum;
    # FastMTP's plain loss weighs every position alike.
    assert weighted < unweighted
    fixed_equal, _ = mtp_loss(step_logits, argmax, tokens, valid, curriculum=False,
                              inconsistent_weight=1.0)
    assert plain == fixed_equal
