"""The routed head's training: the acceptance reward equals what verification accepts, and
both stages train (their losses can fail to fall)."""

from __future__ import annotations

import copy

import torch

from ocrcli.models.base import DecodeRequest
from ocrcli.models.builtin.tokenizer import BOS_ID
from ocrcli.training.routing import (
    accepted_prefix,
    grpo_loss,
    head_batch,
    kd_loss,
    train_head,
    verify_targets,
)
from tests.engine.conftest import random_requests
from tests.models.test_builtin_routing import small_model


def line_batch(model, n: int = 4, seed: int = 3):
    reqs = random_requests(n, seed=seed)
    width = max(r.visual.shape[1] for r in reqs)
    images = torch.zeros(n, 1, 32, width, dtype=model.embed.weight.dtype)
    for i, r in enumerate(reqs):
        images[i, 0, :, : r.visual.shape[1]] = torch.from_numpy(r.visual)
    widths = torch.tensor([r.visual.shape[1] for r in reqs])
    return head_batch(model, images, widths), images, widths


def test_accepted_prefix_is_the_leading_run_of_hits():
    hits = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool)
    valid = torch.ones_like(hits)
    valid[3, 2:] = False  # the line ends after two drafts
    assert accepted_prefix(hits, valid).tolist() == [2, 0, 4, 2]


@torch.no_grad()
def verify_by_engine_protocol(model, image, width, prefix: list[int], drafts: list[int]) -> int:
    """What the engine's verify accepts: prefill BOS, commit the prefix through the cache,
    run [last, d1..dK] in one forward pass and take the leading argmax matches."""
    model.setup_cache(1, 200)
    slot = torch.tensor([0])
    model.prefill(slot, [DecodeRequest(0, [BOS_ID], image[0, :, :width].numpy(), 50)])
    pos = 1
    for tok in prefix[:-1]:
        model.forward(slot, torch.tensor([[tok]]), torch.tensor([[pos]]))
        pos += 1
    seq = torch.tensor([[prefix[-1]] + drafts])
    _, logits = model.forward(slot, seq, torch.arange(pos, pos + seq.shape[1])[None])
    n = 0
    for j, d in enumerate(drafts):
        if int(logits[0, j].argmax()) != d:
            break
        n += 1
    return n


def test_reward_equals_engine_verify():
    model = small_model(0, seed=4)
    batch, images, widths = line_batch(model)
    depth = model.cfg.mtp_depth
    gen = torch.Generator().manual_seed(0)
    checked = 0
    for b in range(2):
        length = int(batch.lengths[b])
        for i in (0, length // 2):
            contexts = torch.tensor([[i]]).expand(batch.tokens.shape[0], 1)
            targets, exists = verify_targets(batch, contexts, depth)
            for cut in (0, 2, depth):  # wrong at step cut+1 (depth: all right)
                drafts = targets[b, 0].clone()
                if cut < depth:
                    drafts[cut] = (drafts[cut] + 1 + torch.randint(5, (1,), generator=gen)) % 40
                reward = int(accepted_prefix((drafts == targets[b, 0])[None], exists[b, 0][None]))
                prefix = batch.tokens[b, 1 : i + 2].tolist()
                got = verify_by_engine_protocol(model, images[b], int(widths[b]), prefix,
                                                drafts.tolist())
                assert reward == min(got, int(exists[b, 0].sum()))
                checked += 1
    assert checked == 12


def test_both_stages_train_a_routed_head():
    model = small_model(4, seed=5).float()
    batch, _, _ = line_batch(model, n=6, seed=6)
    before = kd_loss(model, batch)[0].item()
    rows: list[dict] = []
    train_head(model, [batch], kd_steps=30, grpo_steps=0, log=rows.append, kd_lr=3e-3)
    after = kd_loss(model, batch)[0].item()
    assert after < 0.8 * before
    ref = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    loss, stats = grpo_loss(model, ref, batch, gen, contexts=4, group=4)
    assert torch.isfinite(loss) and stats["kl"] == 0.0  # the anchor starts at the same head
    train_head(model, [batch], kd_steps=0, grpo_steps=5, log=rows.append)
    assert [r["stage"] for r in rows][-1] == "grpo"
    assert all(not p.requires_grad for p in model.parameters())
