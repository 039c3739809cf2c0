"""Trainer: where head stages start from."""

from __future__ import annotations

import pytest
import torch

from ocrcli.models.builtin.model import BuiltinConfig
from ocrcli.training.train import Trainer


def tiny(mtp_mlp_hidden: int | None) -> BuiltinConfig:
    return BuiltinConfig(vocab_size=215, dim=32, heads=2, encoder_layers=1, decoder_layers=1,
                         mlp_hidden=64, max_text=96, mtp_depth=3, mtp_mlp_hidden=mtp_mlp_hidden)


def test_head_stage_starts_from_an_exported_model_with_a_larger_head(tmp_path):
    source = Trainer(tmp_path / "a", tiny(None), validation=False)
    source.export(tmp_path / "export")
    target = Trainer(tmp_path / "b", tiny(0), validation=False)
    target.load_init(tmp_path / "export", head=True)
    want = source.model.state_dict()
    got = target.model.state_dict()
    assert set(got) < set(want)  # the MLP's tensors were left out...
    assert all(torch.equal(got[k], want[k]) for k in got)  # ...and everything else was loaded
    logged = (tmp_path / "b" / "log.jsonl").read_text()
    assert "mtp.block.mlp.gate_proj.weight" in logged


def test_reader_stages_load_strictly(tmp_path):
    source = Trainer(tmp_path / "a", tiny(None), validation=False)
    source.export(tmp_path / "export")
    target = Trainer(tmp_path / "b", tiny(0), validation=False)
    with pytest.raises(RuntimeError, match="Unexpected key"):  # never dropped silently
        target.load_init(tmp_path / "export", head=False)
