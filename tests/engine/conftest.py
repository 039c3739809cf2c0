"""Small random models for the engine's losslessness tests (float64: no near-tie blur)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ocrcli.engine.policy import DraftPolicy
from ocrcli.engine.scheduler import Engine, list_source
from ocrcli.models.base import DecodeRequest, GuardConfig
from ocrcli.models.builtin.model import BuiltinConfig, BuiltinOCR


def random_model(seed: int = 0, dtype=torch.float64, vocab: int = 40,
                 mtp_mlp_hidden: int | None = None) -> BuiltinOCR:
    torch.manual_seed(seed)
    cfg = BuiltinConfig(vocab_size=vocab, dim=32, heads=2, encoder_layers=1, decoder_layers=2,
                        mlp_hidden=64, max_text=96, mtp_depth=6, mtp_mlp_hidden=mtp_mlp_hidden)
    model = BuiltinOCR(cfg).to(dtype).eval()
    # A peaked output distribution makes the random model's greedy path less repetitive.
    with torch.no_grad():
        model.embed.weight.mul_(3.0)
    model.eos_id = -1  # tests pick an EOS from real outputs where they need one
    return model


def random_requests(n: int, seed: int = 0, max_new: int = 24) -> list[DecodeRequest]:
    rng = np.random.default_rng(seed)
    reqs = []
    for i in range(n):
        width = int(rng.integers(2, 20)) * 8
        image = rng.random((32, width)).astype(np.float32)
        reqs.append(DecodeRequest(key=i, prompt_ids=[1], visual=image, max_new_tokens=max_new))
    return reqs


def decode(model, requests, policy=DraftPolicy(0), batch_size=4, guard=None, proposer=None):
    """Run the engine; return {key: (tokens, status)} and the results."""
    engine = Engine(model, batch_size, max(r.max_new_tokens for r in requests), policy,
                    guard or GuardConfig(), proposer=proposer)
    results = list(engine.run(list_source(list(requests))))
    return {r.key: (r.tokens, r.status) for r in results}, results


@pytest.fixture(scope="module")
def model():
    return random_model()
