"""Small random models for the engine's losslessness tests (float64: no near-tie blur)."""

from __future__ import annotations

import dataclasses

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
    # Logits are the final state against the (tied) embeddings, and at random init that state
    # is mostly the input token's own embedding: greedy decoding copies its input, and every
    # request read BOS forever, which any decoder, right or wrong, reproduces. Random signs
    # on the final norm break the copy, and a stronger position signal keeps the path moving;
    # some seeds still settle at once (VARIED_SEEDS lists ones that do not).
    with torch.no_grad():
        gen = torch.Generator().manual_seed(1000 + seed)
        model.norm.weight.copy_(torch.randn(cfg.dim, generator=gen, dtype=torch.float64))
        model.pos_table.mul_(3.0)
    model.eos_id = -1  # tests pick an EOS from real outputs where they need one
    return model


# random_model seeds whose greedy outputs are varied: several distinct tokens in every line,
# and lines that differ (test_lossless.py checks it, or its comparisons would prove nothing).
VARIED_SEEDS = (2, 7, 11)


def teach_head(model: BuiltinOCR, requests: list[DecodeRequest], steps: int = 60) -> BuiltinOCR:
    """Train the draft head, in place, on the model's own greedy output for `requests`: a
    head that proposes well on those lines and at random on others, so that decoding has
    accepted drafts, rejected ones, and rollbacks in between. A random head's drafts are all
    rejected, and losslessness is then only ever tested on the reject path."""
    from ocrcli.training.losses import mtp_loss

    requests = [dataclasses.replace(r, key=i) for i, r in enumerate(requests)]  # keys unique
    greedy, _ = decode(model, requests)
    dtype = model.embed.weight.dtype
    width = max(r.visual.shape[1] for r in requests)
    images = torch.zeros(len(requests), 1, 32, width, dtype=dtype)
    for i, r in enumerate(requests):
        images[i, 0, :, : r.visual.shape[1]] = torch.as_tensor(r.visual, dtype=dtype)
    widths = torch.tensor([r.visual.shape[1] for r in requests])
    lines = [r.prompt_ids + greedy[r.key][0] for r in requests]
    tokens = torch.zeros(len(lines), max(map(len, lines)), dtype=torch.long)
    valid = torch.zeros(tokens.shape, dtype=torch.bool)
    for i, line in enumerate(lines):
        tokens[i, : len(line)] = torch.tensor(line)
        valid[i, : len(line)] = True
    with torch.no_grad():
        _, hidden, memory, memory_valid, _ = model.forward_train(images, widths, tokens)
        targets = model.logits(hidden).argmax(-1)
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.mtp.parameters(), lr=1e-2)
    for _ in range(steps):
        logits = model.mtp_train(hidden, tokens, memory, memory_valid, model.max_draft_depth)
        loss, _ = mtp_loss(logits, targets, tokens, valid, curriculum=False)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.zero_grad(set_to_none=True)
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
