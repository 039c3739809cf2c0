"""TIGER-style routing in the built-in model's MTP head: shapes, masking of padded visual
tokens, the two execution paths agreeing, determinism, and output identical to greedy."""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from ocrcli.engine.policy import DraftPolicy
from ocrcli.models.base import DecodeRequest
from ocrcli.models.builtin import BUILTIN_DIR, load
from ocrcli.models.builtin.layout import line_tensor_array, segment_lines
from ocrcli.models.builtin.model import BuiltinConfig, BuiltinOCR
from ocrcli.training.routing import routed_model
from ocrcli.training.synth import make_page
from ocrcli.training.text import TextSources
from tests.engine.conftest import VARIED_SEEDS, decode, random_model, random_requests, teach_head


def small_model(route_k: int, seed: int = 0, dtype=torch.float64) -> BuiltinOCR:
    torch.manual_seed(seed)
    cfg = BuiltinConfig(vocab_size=40, dim=32, heads=2, encoder_layers=1, decoder_layers=2,
                        mlp_hidden=64, max_text=96, mtp_depth=6, mtp_route_k=route_k)
    model = BuiltinOCR(cfg).to(dtype).eval()
    with torch.no_grad():
        model.embed.weight.mul_(3.0)  # peaked outputs: less repetitive greedy paths
    model.eos_id = -1
    return model


def head_inputs(model: BuiltinOCR, n_valid: list[int], n: int, t: int = 3, seed: int = 1):
    """Random head inputs over n visual positions, row b having n_valid[b] real ones."""
    gen = torch.Generator().manual_seed(seed)
    d = model.cfg.dim
    b = len(n_valid)
    memory = torch.randn(b, n, d, generator=gen, dtype=torch.float64)
    valid = torch.arange(n)[None, :] < torch.tensor(n_valid)[:, None]
    emb = torch.randn(b, t, d, generator=gen, dtype=torch.float64)
    hidden = torch.randn(b, t, d, generator=gen, dtype=torch.float64)
    k, v = model.mtp.block.cross_attn.memory_kv(memory)
    return emb, hidden, k, v, valid


def run_head(model, emb, hidden, k, v, valid, grad: bool):
    with torch.set_grad_enabled(grad):
        return model.mtp(emb, hidden, k, v, valid[:, None, None, :])[1].detach()


def test_default_is_unrouted_and_shipped_model_loads_unchanged():
    assert BuiltinConfig().mtp_route_k == 0
    shipped = json.loads((BUILTIN_DIR / "config.json").read_text())
    assert shipped.get("mtp_route_k", 0) == 0  # the shipped head is unrouted
    # A config written before routing existed (no key) still loads, as unrouted.
    older = {k: v for k, v in shipped.items() if k not in ("mtp_route_k", "architecture")}
    assert BuiltinConfig.from_dict(older).mtp_route_k == 0
    loaded = load()  # strict: a missing or unexpected tensor raises
    assert loaded.model.mtp.router is None
    assert set(loaded.model.state_dict()) == set(load_file(str(BUILTIN_DIR / "model.safetensors")))
    routed = small_model(8)
    assert any(n.startswith("mtp.router.") for n in routed.state_dict())


@pytest.mark.parametrize("grad", [False, True])
def test_routed_shapes_and_k_above_n_equals_unrouted(grad):
    plain, routed = small_model(0), small_model(64)
    routed.load_state_dict(plain.state_dict(), strict=False)
    inputs = head_inputs(plain, [10, 4, 7], n=12)
    a = run_head(plain, *inputs, grad=grad)
    b = run_head(routed, *inputs, grad=grad)
    assert b.shape == a.shape == (3, 3, plain.cfg.dim)
    torch.testing.assert_close(a, b)  # keeping every valid token is the unrouted head


@pytest.mark.parametrize("grad", [False, True])
def test_padded_visual_tokens_never_change_the_routed_head(grad):
    # Rows with fewer valid tokens than k, and garbage in the padding: the output must be
    # the same as with the padding cut off, on both the gathered and the masked path.
    model = small_model(6)
    emb, hidden, k, v, valid = head_inputs(model, [9, 3, 6, 1], n=20)
    full = run_head(model, emb, hidden, k, v, valid, grad)
    for row, n in enumerate([9, 3, 6, 1]):
        alone = run_head(model, emb[row : row + 1], hidden[row : row + 1], k[row : row + 1, :, :n],
                         v[row : row + 1, :, :n], valid[row : row + 1, :n], grad)
        torch.testing.assert_close(full[row : row + 1], alone)
    scores = model.mtp.router.scores(model.mtp.block.cross_norm(emb), k, valid)
    idx, sel_valid = model.mtp.router.select(scores, valid)
    chosen_valid = valid[:, None, :].expand_as(scores).gather(2, idx)
    assert torch.equal(chosen_valid, sel_valid)
    # a row with at least k real tokens selects only real ones
    assert sel_valid[0].all() and sel_valid[2].all() and sel_valid[1].sum(-1).eq(3).all()


def test_gathered_inference_equals_masked_training_path_and_is_deterministic():
    model = small_model(4)
    inputs = head_inputs(model, [15, 11], n=16, t=5)
    infer = run_head(model, *inputs, grad=False)
    train = run_head(model, *inputs, grad=True)
    torch.testing.assert_close(infer, train)
    assert torch.equal(infer, run_head(model, *inputs, grad=False))
    # routing really restricts the view: with k=4 of 15 the output differs from unrouted
    plain = small_model(0)
    plain.load_state_dict(model.state_dict(), strict=False)
    assert not torch.allclose(infer, run_head(plain, *inputs, grad=False))


def test_straight_through_gradient_reaches_the_gate():
    model = small_model(4)
    emb, hidden, k, v, valid = head_inputs(model, [15, 11], n=16, t=5)
    _, out = model.mtp(emb, hidden, k, v, valid[:, None, None, :])
    out.square().sum().backward()
    grad = model.mtp.router.query.weight.grad
    assert grad is not None and grad.abs().sum() > 0


@functools.cache
def taught_routed_model(route_k: int = 3) -> BuiltinOCR:
    """A routed head on a random model whose greedy lines vary (`random_model`: a model that
    writes one token for ever is reproduced by any decoder), taught on other lines: a random
    head's drafts are all but never accepted, and losslessness would then be tested on the
    reject path only."""
    base = random_model(seed=VARIED_SEEDS[0])
    torch.manual_seed(5)
    model = BuiltinOCR(dataclasses.replace(base.cfg, mtp_route_k=route_k)).to(torch.float64).eval()
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    assert missing == ["mtp.router.query.weight"] and not unexpected
    model.eos_id = base.eos_id
    return teach_head(model, random_requests(4, seed=100), steps=30)


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_routed_head_is_lossless_and_its_drafts_are_accepted(depth):
    model = taught_routed_model()
    reqs = random_requests(6, seed=11)
    ref, _ = decode(model, reqs)
    assert len({tuple(tokens) for tokens, _ in ref.values()}) >= 2  # varied lines
    spec, results = decode(model, reqs, DraftPolicy(depth), batch_size=3)
    assert spec == ref
    assert all(sum(r.stats.accepted_hist.values()) == r.stats.verify_steps for r in results)
    accepted = sum(n for r in results for k, n in r.stats.accepted_hist.items() if k > 0)
    assert accepted > 0  # the accept path ran, not only rejections


def test_routed_trained_model_is_lossless_and_still_drafts():
    # The shipped model with a k=8 routed head (gate started from its attention query):
    # speculative output equals greedy, and the routed head's drafts are mostly accepted.
    base = load().model
    model = routed_model(load_file(str(BUILTIN_DIR / "model.safetensors")), base.cfg, 8).eval()
    page = make_page(800_500_000, TextSources.load("test", max_files=20))
    gray = page.image.convert("L")
    boxes = [b for b in segment_lines(gray) if not b.rule][:6]
    reqs = [DecodeRequest(i, [1], line_tensor_array(gray, b), 60) for i, b in enumerate(boxes)]
    assert reqs and all(isinstance(r.visual, np.ndarray) for r in reqs)
    ref, _ = decode(model, reqs, batch_size=4)
    spec, results = decode(model, reqs, DraftPolicy(6), batch_size=4)
    assert spec == ref
    tokens = sum(r.stats.tokens for r in results)
    steps = sum(r.stats.verify_steps for r in results)
    assert tokens / steps > 1.5
