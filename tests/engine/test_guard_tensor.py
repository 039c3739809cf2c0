"""The tensor n-gram ban (`ban_repeats`) against the list reference (`banned_tokens`)."""

from __future__ import annotations

import random

import torch

from ocrcli.engine.guard import ban_repeats, banned_tokens, whitelist_mask
from ocrcli.engine.opcount import OpCounter
from ocrcli.models.base import GuardConfig

Case = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, GuardConfig]


def random_case(rng: random.Random) -> Case:
    """Small vocab so repeats are common; history padded with garbage past each row's length."""
    v = rng.randint(5, 8)
    b, k = rng.randint(1, 4), rng.randint(0, 4)
    lens = [rng.randint(0, 40) for _ in range(b)]
    s = max(lens) + rng.randint(0, 5)
    history = torch.randint(0, v, (b, s))  # garbage everywhere, then the real prefix per row
    for r, n_r in enumerate(lens):
        if n_r and rng.random() < 0.5:  # periodic rows make long n-grams repeat too
            period = rng.randint(1, 4)
            history[r, :n_r] = torch.randint(0, v, (period,)).repeat(n_r // period + 1)[:n_r]
    drafts = torch.randint(0, v, (b, k))
    whitelist = frozenset(rng.sample(range(v), rng.randint(1, 2))) if rng.random() < 0.4 else frozenset()
    cfg = GuardConfig(ngram=rng.randint(1, 5), window=rng.randint(0, 12), whitelist=whitelist)
    logits = torch.randn(b, k + 1, v)
    return logits, history, torch.tensor(lens, dtype=torch.long), drafts, cfg


def reference_mask(history: torch.Tensor, lens: torch.Tensor, drafts: torch.Tensor, cfg: GuardConfig,
                   v: int) -> torch.Tensor:
    """Bool [B,T,V]: what banned_tokens bans at each row and verify position."""
    b, k = drafts.shape
    mask = torch.zeros(b, k + 1, v, dtype=torch.bool)
    for r in range(b):
        hist = history[r, : int(lens[r])].tolist()
        for j in range(k + 1):
            for tok in banned_tokens(hist + drafts[r, :j].tolist(), cfg):
                mask[r, j, tok] = True
    return mask


def test_matches_banned_tokens_on_random_cases():
    rng = random.Random(0)
    torch.manual_seed(0)
    banned_any = 0
    for _ in range(1500):
        logits, history, lens, drafts, cfg = random_case(rng)
        v = logits.shape[-1]
        expect = reference_mask(history, lens, drafts, cfg, v)
        wl = whitelist_mask(cfg, v, logits.device) if rng.random() < 0.5 else None
        out = ban_repeats(logits, history, lens, drafts, cfg, wl)
        assert torch.equal(torch.isneginf(out), expect), (cfg, lens, history, drafts)
        assert torch.equal(out[~expect], logits[~expect])  # everything else untouched
        banned_any += int(expect.any())
    assert banned_any > 200  # the cases really exercise bans


def test_edge_configs():
    logits = torch.zeros(1, 2, 6)
    hist = torch.tensor([[1, 2, 1, 2, 3, 9]])  # 9 is garbage past the length
    lens, drafts = torch.tensor([5]), torch.tensor([[1]])
    assert ban_repeats(logits, hist, lens, drafts, GuardConfig(ngram=0)) is logits
    out = ban_repeats(logits, hist, lens, drafts, GuardConfig(ngram=1, window=2))
    assert torch.isneginf(out[0, 0]).nonzero().flatten().tolist() == [2, 3]
    assert torch.isneginf(out[0, 1]).nonzero().flatten().tolist() == [1, 3]
    ids = torch.tensor([3])  # whitelist given as an id tensor
    out = ban_repeats(logits, hist, lens, drafts, GuardConfig(ngram=1, window=2), ids)
    assert torch.isneginf(out[0, 1]).nonzero().flatten().tolist() == [1]
    empty = torch.zeros(2, 0, dtype=torch.long)  # no history storage and no drafts
    assert torch.equal(ban_repeats(torch.zeros(2, 1, 6), empty, torch.zeros(2, dtype=torch.long),
                                   empty, GuardConfig(ngram=1)), torch.zeros(2, 1, 6))


def test_fullgraph_compile_matches_eager():
    rng = random.Random(1)
    torch.manual_seed(1)
    torch._dynamo.reset()
    compiled = torch.compile(ban_repeats, fullgraph=True, backend="eager")
    for _ in range(4):  # a few shapes: the first compiles static, later ones dynamic
        logits, history, lens, drafts, cfg = random_case(rng)
        wl = whitelist_mask(cfg, logits.shape[-1])
        expect = ban_repeats(logits, history, lens, drafts, cfg, wl)
        assert torch.equal(compiled(logits, history, lens, drafts, cfg, wl), expect)


def test_no_host_sync():
    rng = random.Random(2)
    torch.manual_seed(2)
    for _ in range(20):
        logits, history, lens, drafts, cfg = random_case(rng)
        wl = whitelist_mask(cfg, logits.shape[-1])
        ids = torch.tensor(sorted(cfg.whitelist), dtype=torch.long)
        with OpCounter() as counter:
            ban_repeats(logits, history, lens, drafts, cfg, wl)
            ban_repeats(logits, history, lens, drafts, cfg, ids)
        assert counter.syncs == 0 and counter.by_op["nonzero"] == 0, dict(counter.by_op)
