"""Speculative decoding must give exactly the tokens of plain greedy decoding."""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter

import pytest
import torch

from ocrcli.engine.draft import OracleProposer
from ocrcli.engine.policy import DraftPolicy
from ocrcli.models.base import GuardConfig
from ocrcli.models.builtin.tokenizer import BOS_ID
from tests.engine.conftest import VARIED_SEEDS, decode, random_model, random_requests, teach_head


def taught_model(seed: int = VARIED_SEEDS[0], **kw):
    """A random model whose greedy lines vary, with a head taught on other lines (seed 100):
    its drafts are partly right, so decoding accepts some, rejects some and rolls back."""
    return teach_head(random_model(seed=seed, **kw), random_requests(4, seed=100), steps=30)


@pytest.fixture(scope="module")
def model():
    return taught_model()


def accepted_histogram(results) -> Counter:
    """Verify steps by drafts accepted, over all requests."""
    hist = Counter()
    for r in results:
        hist.update(r.stats.accepted_hist)
    return hist


def assert_drafts_accepted(results, rejected_too: bool = True) -> None:
    """Drafts were accepted (the accept and rollback paths ran, not only rejection), and,
    with `rejected_too`, some were rejected as well."""
    hist = accepted_histogram(results)
    assert sum(n for k, n in hist.items() if k > 0) > 0, hist
    tokens = sum(r.stats.tokens for r in results)
    assert tokens / sum(r.stats.verify_steps for r in results) > 1.2, hist
    if rejected_too:
        assert hist[0] > 0, hist


def test_the_random_models_write_varied_lines():
    """Every comparison below is only as good as the lines compared: a model that writes one
    token for ever (as the random model once did: BOS, on every line) is reproduced by any
    decoder, right or wrong."""
    for seed in VARIED_SEEDS:
        got, _ = decode(random_model(seed=seed), random_requests(6, seed=2))
        lines = [tokens for tokens, _ in got.values()]
        assert min(len(set(line)) for line in lines) >= 3, (seed, lines)
        assert len({tuple(line) for line in lines}) >= 2, (seed, lines)


def naive_greedy(model, request) -> list[int]:
    """Greedy decoding by full recomputation, without any cache: the independent reference."""
    img = torch.as_tensor(request.visual, dtype=model.embed.weight.dtype)[None, None]
    width = torch.tensor([img.shape[-1]])
    tokens = [BOS_ID]
    out = []
    with torch.no_grad():
        for _ in range(request.max_new_tokens):
            logits = model.forward_train(img, width, torch.tensor([tokens]))[0]
            nxt = int(logits[0, -1].argmax())
            if nxt == model.eos_id:
                break
            out.append(nxt)
            tokens.append(nxt)
    return out


def test_engine_greedy_matches_uncached_greedy(model):
    reqs = random_requests(5, seed=1)
    got, _ = decode(model, reqs, batch_size=3)
    for r in reqs:
        assert got[r.key][0] == naive_greedy(model, r)


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5, 6])
def test_head_drafts_every_depth(model, depth):
    reqs = random_requests(6, seed=2)
    ref, _ = decode(model, reqs)
    spec, results = decode(model, reqs, DraftPolicy(depth))
    assert spec == ref
    assert all(sum(r.stats.accepted_hist.values()) == r.stats.verify_steps for r in results)
    assert_drafts_accepted(results)


def test_a_random_head_is_lossless_and_accepts_next_to_nothing():
    """The reject path on its own: an untaught head's drafts are almost never the model's."""
    model = random_model(seed=VARIED_SEEDS[0])
    reqs = random_requests(6, seed=2)
    ref, _ = decode(model, reqs)
    spec, results = decode(model, reqs, DraftPolicy(4))
    assert spec == ref
    hist = accepted_histogram(results)
    assert hist[0] >= 0.9 * sum(hist.values()), hist


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_oracle_drafter_accepts_everything(model, depth):
    reqs = random_requests(4, seed=3)
    ref, _ = decode(model, reqs)
    reference = {k: toks + [model.eos_id] for k, (toks, _) in ref.items()}
    oracle = OracleProposer(reference, 1.0, model.vocab_size)
    spec, results = decode(model, reqs, DraftPolicy(depth), proposer=oracle)
    assert spec == ref
    for r in results:
        # every step but possibly the last commits depth + 1 tokens
        full = r.stats.accepted_hist[depth]
        assert full >= r.stats.verify_steps - 1


def test_adversarial_drafter_accepts_nothing(model):
    reqs = random_requests(4, seed=4)
    ref, _ = decode(model, reqs)
    reference = {k: toks + [model.eos_id] for k, (toks, _) in ref.items()}
    adversary = OracleProposer(reference, 0.0, model.vocab_size)
    spec, results = decode(model, reqs, DraftPolicy(4), proposer=adversary)
    assert spec == ref
    assert all(set(r.stats.accepted_hist) == {0} for r in results)


def test_alone_equals_inside_mixed_batch(model):
    reqs = random_requests(8, seed=5)
    alone, results = decode(model, reqs[:1], DraftPolicy(3), batch_size=1)
    mixed, _ = decode(model, reqs, DraftPolicy(3), batch_size=8)
    assert mixed[0] == alone[0]
    assert_drafts_accepted(results, rejected_too=False)


def test_requests_admitted_mid_flight(model):
    # Different lengths finish at different steps, so new requests join a running batch.
    reqs = [dataclasses.replace(r, max_new_tokens=5 + 3 * i) for i, r in
            enumerate(random_requests(9, seed=6))]
    ref, _ = decode(model, reqs, batch_size=1)
    spec, results = decode(model, reqs, DraftPolicy(4), batch_size=3)
    assert spec == ref
    assert_drafts_accepted(results)


def test_guard_parity_and_effect(model):
    reqs = random_requests(5, seed=7, max_new=40)
    guard = GuardConfig(ngram=2, window=30)
    plain, _ = decode(model, reqs)
    ref, _ = decode(model, reqs, guard=guard)
    assert ref != plain, "the ban must change some output, or this test proves nothing"
    for depth in (1, 3, 6):
        spec, results = decode(model, reqs, DraftPolicy(depth), guard=guard)
        assert spec == ref
        assert_drafts_accepted(results)


def test_eos_inside_accepted_run():
    model = taught_model(VARIED_SEEDS[1])
    reqs = random_requests(4, seed=8, max_new=30)
    ref_no_eos, _ = decode(model, reqs)
    # Use a token from the middle of an output as EOS: the output must stop right before it.
    tokens = ref_no_eos[0][0]
    model.eos_id = tokens[len(tokens) // 2]
    ref, _ = decode(model, reqs)
    assert ref[0][1] == "ok" and len(ref[0][0]) < len(tokens)
    reference = {k: toks + [model.eos_id] for k, (toks, _) in ref.items()}
    for depth in (2, 6):
        spec, results = decode(model, reqs, DraftPolicy(depth),
                               proposer=OracleProposer(reference, 1.0, model.vocab_size))
        assert spec == ref
        assert accepted_histogram(results)[depth] > 0  # runs accepted whole, EOS inside
        spec, results = decode(model, reqs, DraftPolicy(depth))
        assert spec == ref
        assert_drafts_accepted(results, rejected_too=False)


def test_cap_inside_accepted_run(model):
    reqs = random_requests(3, seed=9, max_new=7)
    ref, _ = decode(model, reqs)
    assert all(status == "truncated" and len(toks) == 7 for toks, status in ref.values())
    reference = {k: toks + [model.eos_id] for k, (toks, _) in
                 decode(model, [dataclasses.replace(r, max_new_tokens=30) for r in reqs])[0].items()}
    spec, results = decode(model, reqs, DraftPolicy(6),
                           proposer=OracleProposer(reference, 1.0, model.vocab_size))
    assert spec == ref
    assert accepted_histogram(results)[6] > 0  # a whole run accepted, the cap inside it


def test_loop_detection_marks_degenerate(model):
    reqs = random_requests(6, seed=10, max_new=60)
    guard = GuardConfig(loop_period_max=4, loop_repeats=3)
    ref, _ = decode(model, reqs, guard=guard)
    spec, results = decode(model, reqs, DraftPolicy(5), guard=guard)
    assert spec == ref
    assert any(status == "degenerate" for _, status in ref.values()), "no loop to detect"
    assert_drafts_accepted(results, rejected_too=False)


def test_gated_drafting_is_lossless(model):
    reqs = random_requests(6, seed=11)
    ref, _ = decode(model, reqs)
    for policy in (DraftPolicy(6, min_prob=0.3), DraftPolicy(6, min_path_prob=0.2),
                   DraftPolicy(4, min_prob=0.9, min_path_prob=0.9)):
        spec, results = decode(model, reqs, policy)
        assert spec == ref
        assert_drafts_accepted(results, rejected_too=False)


def test_float32_random_model_is_lossless():
    model = taught_model(VARIED_SEEDS[2], dtype=torch.float32)
    reqs = random_requests(6, seed=12)
    ref, _ = decode(model, reqs)
    for depth in (1, 3, 6):
        spec, results = decode(model, reqs, DraftPolicy(depth), batch_size=6)
        assert spec == ref
        assert_drafts_accepted(results)


@functools.cache
def no_mlp_model():
    return taught_model(VARIED_SEEDS[1], mtp_mlp_hidden=0)


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5, 6])
def test_head_without_mlp_is_lossless(depth):
    # mtp_mlp_hidden=0: the head's block is cross-attention only (a cheaper draft step).
    model = no_mlp_model()
    reqs = random_requests(6, seed=13)
    ref, _ = decode(model, reqs)
    for batch in (1, 3):
        spec, results = decode(model, reqs, DraftPolicy(depth), batch_size=batch)
        assert spec == ref, batch
        assert_drafts_accepted(results)
