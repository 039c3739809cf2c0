"""DeepSeek MoE: the decode (gather) path against the prefill (grouped) path.

The gather path must equal the grouped one, be batch invariant on CPU inference, run without
host syncs, trace into one graph, and leave the state dict as the loader knows it.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from ocrcli.engine.opcount import OpCounter
from ocrcli.models.deepseek_ocr.config import tiny_config
from ocrcli.models.deepseek_ocr.decoder import MoE, pair_products

TINY = tiny_config("jina-ocr-v1").decoder  # 8 experts, top-3, d=32, I=16
WIDE = replace(TINY, n_routed_experts=64, experts_per_token=6)  # the real routing shape
# d=48, I=7: a shape whose products the probes reject on MKL, so the per-pair fallback runs.
ODD = replace(TINY, hidden_size=48, moe_intermediate_size=7, n_shared_experts=1)
CONFIGS = pytest.mark.parametrize("cfg", [TINY, WIDE, ODD], ids=["tiny", "64x6", "odd"])


def make_moe(cfg, seed: int = 0) -> MoE:
    torch.manual_seed(seed)
    moe = MoE(cfg).requires_grad_(False)
    # init_normal's 0.02 would make every expert output tiny: spread the routing too.
    for p in moe.parameters():
        p.normal_(0, 0.3)
    return moe


def grouped(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """The prefill path whatever N is."""
    moe.gather_max_tokens = -1
    try:
        return moe(x)
    finally:
        del moe.gather_max_tokens  # back to the class's threshold


def counted(fn) -> OpCounter:
    with OpCounter() as counter:
        fn()
    return counter


def syncs(counter: OpCounter) -> int:
    """Host reads, and the ops that read on the host inside a CUDA kernel's launch."""
    return counter.syncs + counter.by_op["nonzero"] + counter.by_op["bincount"]


# ----------------------------------------------------------------------- gather == grouped


@CONFIGS
@pytest.mark.parametrize("n", [1, 4, 37, 128])
def test_gather_path_equals_grouped_path_with_plain_kernels(cfg, n):
    # Grad mode with frozen weights: the non-invariant kernels a GPU runs (bmm, F.linear).
    moe = make_moe(cfg)
    x = torch.randn(2, n, cfg.hidden_size) if n % 2 == 0 else torch.randn(1, n, cfg.hidden_size)
    with torch.enable_grad():
        torch.testing.assert_close(moe(x), grouped(moe, x), rtol=1e-5, atol=1e-5)


@CONFIGS
@torch.no_grad()
def test_gather_path_is_bitwise_the_grouped_path_on_cpu_inference(cfg):
    # So the token-count threshold changes no bit on CPU: a page's prefill gives the same
    # result alone (few tokens, gather) as in a batch (many tokens, grouped).
    moe = make_moe(cfg)
    x = torch.randn(3, 21, cfg.hidden_size)
    assert torch.equal(moe(x), grouped(moe, x))


# -------------------------------------------------------------------------- invariance


@pytest.mark.parametrize("k,n", [(32, 16), (16, 32), (32, 32), (48, 7), (7, 48)])
@torch.no_grad()
def test_pair_product_does_not_depend_on_the_other_pairs(k, n):
    gen = torch.Generator().manual_seed(3)
    w_all = torch.randn(64, n, k, generator=gen)
    probe_x, probe_id = torch.randn(k, generator=gen), 5
    alone = pair_products(probe_x[None], w_all[[probe_id]])[0]
    for p in range(1, 201):
        pos = int(torch.randint(p, (1,), generator=gen))
        x = torch.randn(p, k, generator=gen)
        ids = torch.randint(64, (p,), generator=gen)
        x[pos], ids[pos] = probe_x, probe_id
        assert torch.equal(pair_products(x, w_all[ids])[pos], alone), (p, pos)


@CONFIGS
@torch.no_grad()
def test_token_output_does_not_depend_on_the_other_tokens(cfg):
    moe = make_moe(cfg)
    gen = torch.Generator().manual_seed(4)
    token = torch.randn(cfg.hidden_size, generator=gen)
    alone = moe(token[None, None])[0, 0]
    for others in range(1, 61):
        x = torch.randn(1, others + 1, cfg.hidden_size, generator=gen)
        pos = int(torch.randint(others + 1, (1,), generator=gen))
        x[0, pos] = token
        assert torch.equal(moe(x)[0, pos], alone), (others, pos)
    # A verify pass shape [B, K+1] against greedy steps [B, 1].
    x = torch.randn(8, 4, cfg.hidden_size, generator=gen)
    steps = torch.cat([moe(x[:, t : t + 1]) for t in range(4)], dim=1)
    assert torch.equal(moe(x), steps)


# ---------------------------------------------------------------------------- host syncs


@pytest.mark.parametrize("grad", [False, True], ids=["cpu-inference", "plain-kernels"])
def test_decode_step_has_no_host_sync(grad):
    moe = make_moe(WIDE)
    for n in (1, 4, 128):
        x = torch.randn(1, n, WIDE.hidden_size)
        with torch.set_grad_enabled(grad):
            moe(x)  # first call: stacks the experts and runs the CPU probes
            c = counted(lambda: moe(x))  # noqa: B023
        assert syncs(c) == 0, (n, dict(c.by_op))
    # The counter sees the prefill path's sync: a prefill is above the threshold.
    x = torch.randn(1, MoE.gather_max_tokens + 1, WIDE.hidden_size)
    with torch.no_grad():
        assert counted(lambda: moe(x)).by_op["bincount"] == 1


def test_every_decode_step_takes_the_gather_path():
    # B*(K+1) for B <= 32 and K <= 3.
    assert MoE.gather_max_tokens >= 32 * 4


# -------------------------------------------------------------------------- compilation


def test_decode_step_compiles_into_one_graph():
    # The kernels a GPU step runs (grad mode, frozen weights). The CPU-inference path is not
    # a compile target: layers.rowwise_matmul's shape probe does not trace.
    torch._dynamo.reset()
    moe = make_moe(WIDE)
    x = torch.randn(8, 4, WIDE.hidden_size)
    with torch.enable_grad():
        eager = moe(x)  # stacks the experts: allocation stays out of the traced step
        compiled = torch.compile(moe, fullgraph=True, backend="eager")
        assert torch.equal(compiled(x), eager)
        assert torch.equal(compiled(x[:, :1]), moe(x[:, :1]))


# ------------------------------------------------------------------ loading, state dict


def test_stacking_keeps_the_state_dict_and_one_copy_of_the_weights():
    moe = make_moe(WIDE)
    before = {k: v.clone() for k, v in moe.state_dict().items()}
    moe.stack_experts()
    after = moe.state_dict()
    assert list(after) == list(before)
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert "experts.5.gate_proj.weight" in after and not any("w13" in k or "w2" in k for k in after)
    stack_storage = moe._w13.untyped_storage().data_ptr()
    for e in moe.experts:  # views: no second copy
        assert e.gate_proj.weight.untyped_storage().data_ptr() == stack_storage
        assert e.up_proj.weight.untyped_storage().data_ptr() == stack_storage
        assert e.down_proj.weight.untyped_storage().data_ptr() == moe._w2.untyped_storage().data_ptr()
    assert sum(p.numel() for p in moe.parameters()) == sum(v.numel() for v in before.values())


@pytest.mark.parametrize("assign", [False, True])
@torch.no_grad()
def test_loading_after_stacking_uses_the_new_weights(assign):
    moe, other = make_moe(WIDE, seed=0), make_moe(WIDE, seed=1)
    x = torch.randn(1, 4, WIDE.hidden_size)
    moe(x)  # stacked
    moe.load_state_dict(other.state_dict(), strict=True, assign=assign)
    assert torch.equal(moe(x), other(x))
    assert torch.equal(moe(x), grouped(other, x))


@torch.no_grad()
def test_conversion_and_copies_restack():
    moe = make_moe(WIDE)
    x = torch.randn(1, 4, WIDE.hidden_size)
    reference = moe(x)
    twin = copy.deepcopy(moe)
    assert torch.equal(twin(x), reference)
    moe.double()
    assert moe(x.double()).dtype == torch.float64
    assert moe._w13.dtype == torch.float64
    torch.testing.assert_close(moe(x.double()).float(), reference, rtol=1e-5, atol=1e-5)


def test_meta_construction_then_assign_load_as_the_loader_does():
    real = make_moe(TINY)
    with torch.device("meta"):
        moe = MoE(TINY)
    moe.load_state_dict(real.state_dict(), strict=True, assign=True)
    x = torch.randn(2, 3, TINY.hidden_size)
    with torch.inference_mode():
        assert torch.equal(moe(x), real(x))
        assert not moe._w13.is_inference()  # parameters stay updatable in place
