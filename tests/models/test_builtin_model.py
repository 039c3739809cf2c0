"""The built-in model's modules: the head's forward against its sub-modules."""

from __future__ import annotations

import pytest
import torch

from ocrcli.models.builtin.model import BuiltinConfig, BuiltinOCR


def small_model(mtp_mlp_hidden: int | None, dtype=torch.float32, seed: int = 0) -> BuiltinOCR:
    torch.manual_seed(seed)
    cfg = BuiltinConfig(vocab_size=40, dim=32, heads=2, encoder_layers=1, decoder_layers=2,
                        mlp_hidden=64, max_text=96, mtp_depth=6, mtp_mlp_hidden=mtp_mlp_hidden)
    return BuiltinOCR(cfg).to(dtype).eval()


@pytest.mark.parametrize("mtp_mlp_hidden", [None, 48, 0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("grad", [False, True])  # inference, and the training path
def test_head_step_is_its_modules_bitwise(mtp_mlp_hidden, dtype, grad):
    # `MTPHead.forward` calls the layers' functions on its sub-modules' weights for speed; it
    # must compute exactly what the sub-modules compute, as the earlier heads were trained.
    model = small_model(mtp_mlp_hidden, dtype)
    gen = torch.Generator().manual_seed(1)
    b, t, n, d = 3, 4, 11, 32
    memory = torch.randn(b, n, d, generator=gen, dtype=torch.float64).to(dtype)
    valid = torch.arange(n)[None, :] < torch.tensor([11, 5, 8])[:, None]
    emb, hidden = (torch.randn(b, t, d, generator=gen, dtype=torch.float64).to(dtype) for _ in "eh")
    with torch.set_grad_enabled(grad):
        k, v = model.mtp.block.cross_attn.memory_kv(memory)
        mask = valid[:, None, None, :]
        head, blk = model.mtp, model.mtp.block
        g = head.eh_proj(torch.cat([head.enorm(emb), head.hnorm(hidden)], dim=-1))
        g = g + blk.cross_attn(blk.cross_norm(g), k, v, mask)
        if blk.mlp is not None:
            g = g + blk.mlp(blk.mlp_norm(g))
        want = g, head.norm(g)
        got = head(emb, hidden, k, v, mask)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_mlp_width_of_the_head():
    full, narrow, none = small_model(None), small_model(48), small_model(0)
    assert full.mtp.block.mlp.gate_proj.out_features == 64  # the reader's width by default
    assert narrow.mtp.block.mlp.gate_proj.out_features == 48
    assert none.mtp.block.mlp is None
    assert not any(".mlp" in k for k in none.mtp.state_dict())
    # A config written before the field existed keeps its full-width head.
    older = {k: v for k, v in full.cfg.to_dict().items() if k != "mtp_mlp_hidden"}
    assert BuiltinConfig.from_dict(older).mtp_mlp_hidden is None
