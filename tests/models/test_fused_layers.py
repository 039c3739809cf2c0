"""The decode step's cheap layouts give bitwise the results of the plain ones: fused
projections (layers.Fusable), [N,d] rows, rotary tables looked up, additive step masks."""

from __future__ import annotations

import copy

import pytest
import torch

from ocrcli.models.layers import (
    Attention,
    KVCache,
    SwiGLU,
    attention,
    cache_mask,
    choose_kernels,
    rope_cos_sin,
    rope_lookup,
    rope_table,
    step_mask,
)


def _random_(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    return module


@pytest.mark.parametrize("head_dim", [16, 64, 128])
def test_rope_table_lookup_is_bitwise_rope_cos_sin(head_dim):
    table = rope_table(4096, head_dim, 1e6, torch.float32, "cpu")
    gen = torch.Generator().manual_seed(0)
    for b, t in ((1, 1), (1, 4), (3, 4), (16, 1), (2, 257)):
        positions = torch.randint(0, 4096, (b, t), generator=gen)
        for got, want in zip(rope_lookup(table, positions),
                             rope_cos_sin(positions, head_dim, 1e6, torch.float32)):
            assert got.shape == want.shape
            assert torch.equal(got, want), (head_dim, b, t)


@pytest.mark.parametrize("exact", [True, False])
@torch.no_grad()
def test_attention_takes_an_additive_step_mask_bitwise_as_the_boolean_one(exact):
    gen = torch.Generator().manual_seed(1)
    positions = torch.tensor([[5, 6, 7], [0, 1, 2]])  # T = 3: the exact path pads the queries
    q = torch.randn(2, 2, 3, 16, generator=gen)
    k, v = torch.randn(2, 2, 12, 16, generator=gen), torch.randn(2, 2, 12, 16, generator=gen)
    boolean = cache_mask(positions, 12)
    additive = step_mask(positions, 12, torch.float32)
    assert torch.equal(additive == 0, boolean)
    assert torch.equal(attention(q, k, v, additive, exact), attention(q, k, v, boolean, exact))


def _unfused_and_fused(module: torch.nn.Module):
    plain = _random_(module, 2)
    fused = copy.deepcopy(plain)
    fused.fuse()
    assert fused.fused, "fuse() built nothing"
    return plain, fused


@pytest.mark.parametrize("exact", [True, False])
@torch.no_grad()
def test_fused_attention_is_bitwise_the_separate_projections(exact):
    plain, fused = _unfused_and_fused(Attention(32, 2, rope_theta=1e6))
    choose_kernels(plain, exact)
    choose_kernels(fused, exact)
    gen = torch.Generator().manual_seed(3)
    for b, t in ((1, 1), (1, 4), (3, 4)):
        x = torch.randn(b, t, 32, generator=gen)
        positions = torch.arange(t).expand(b, t) + 5
        outs = []
        for module, rows in ((plain, x), (fused, x), (fused, x.reshape(b * t, 32))):
            cache = KVCache(b, 2, 16, 16, torch.float32, "cpu")
            outs.append(module(rows, positions, cache=cache, slots=slice(0, b)).reshape(b, t, 32))
            outs.append(cache.k.clone())
        assert torch.equal(outs[0], outs[2]) and torch.equal(outs[0], outs[4]), (b, t)
        assert torch.equal(outs[1], outs[3]) and torch.equal(outs[1], outs[5]), (b, t)


@pytest.mark.parametrize("exact", [True, False])
@torch.no_grad()
def test_fused_swiglu_is_bitwise_the_separate_projections(exact):
    # Hidden 64: the fast SiLU of a row of the fused product is then all vector body (a row
    # of 48 would end in a scalar tail, which may round 1 ulp away: fast kernels promise no bits).
    plain, fused = _unfused_and_fused(SwiGLU(32, 64 if not exact else 48))
    choose_kernels(plain, exact)
    choose_kernels(fused, exact)
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(4))
    assert torch.equal(plain(x), fused(x))
    assert torch.equal(plain(x[None]), fused(x[None]))


def test_fusing_keeps_one_copy_and_the_state_dict():
    plain, fused = _unfused_and_fused(SwiGLU(32, 48))
    assert plain.state_dict().keys() == fused.state_dict().keys()
    for name, value in plain.state_dict().items():
        assert torch.equal(value, fused.state_dict()[name]), name
    storage = fused.fused["gate_up"].untyped_storage().data_ptr()
    assert fused.gate_proj.weight.untyped_storage().data_ptr() == storage
    assert fused.up_proj.weight.untyped_storage().data_ptr() == storage
    # Loading drops them (with assign=True it replaces the parameters); fuse() builds them anew.
    fused.load_state_dict(_random_(SwiGLU(32, 48), 5).state_dict())
    assert not fused.fused
    fused.fuse()
    assert torch.equal(fused.fused["gate_up"].t()[:48], fused.gate_proj.weight)


def test_moving_copying_or_assigning_drops_the_fused_weights():
    _, fused = _unfused_and_fused(Attention(32, 2))
    assert not copy.deepcopy(fused).fused
    fused.load_state_dict(_random_(Attention(32, 2), 6).state_dict(), assign=True)
    assert not fused.fused
    fused.fuse()
    assert not fused.to(torch.float64).fused


def test_training_runs_the_separate_projections_and_reaches_the_parameters():
    _, fused = _unfused_and_fused(SwiGLU(32, 48))
    fused(torch.randn(3, 32)).sum().backward()
    assert fused.gate_proj.weight.grad is not None and fused.down_proj.weight.grad is not None
