"""Tiny random checkpoints written by scripts/make_tiny_checkpoint.py, loaded and driven
through the DecoderModel protocol on CPU in float32.

What speculative decoding relies on is measured directly: a forward over T tokens gives the
logits of T single cache steps (1e-5), batched prefill of ragged prompts equals prefill
alone, speculative decoding with the MTP head emits exactly the greedy tokens, and after
draft/verify/commit rounds the caches equal those of a prefill over the committed text.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from ocrcli.models.base import DecodeRequest, DecoderModel, LoadedModel
from ocrcli.models.deepseek_ocr import DEEPSEEK_OCR, JINA_OCR_V1, ModelLoadError, load
from ocrcli.models.deepseek_ocr.runtime import DeepseekOcrDecoder
from ocrcli.testing.model_folders import tiny_checkpoint_writer

ATOL = 1e-5


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    write = tiny_checkpoint_writer()
    base = tmp_path_factory.mktemp("tiny")
    return {
        # One unindexed file for DeepSeek; Jina sharded with an index and the duplicate MTP
        # tensors some revisions carry (the loader must accept and ignore them).
        DEEPSEEK_OCR: write(base / "deepseek", DEEPSEEK_OCR, seed=1, index=False),
        JINA_OCR_V1: write(base / "jina", JINA_OCR_V1, seed=2, shards=2, duplicates=True),
    }


@pytest.fixture(scope="module", params=[DEEPSEEK_OCR, JINA_OCR_V1])
def loaded(request, checkpoints) -> LoadedModel:
    return load(str(checkpoints[request.param]), "cpu", torch.float32)


@pytest.fixture(scope="module")
def jina(checkpoints) -> LoadedModel:
    return load(str(checkpoints[JINA_OCR_V1]), "cpu", torch.float32)


def page(width: int, height: int, seed: int = 0) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def request_for(lm: LoadedModel, width: int, height: int, seed: int = 0) -> DecodeRequest:
    (request,) = lm.adapter.page_requests(page(width, height, seed), max_new_tokens=32)
    return request


# ------------------------------------------------------------------------------ protocol


def test_protocol_and_attributes(loaded):
    model = loaded.model
    assert isinstance(model, DecoderModel)
    assert model.eos_id == 1 and model.vocab_size == 129280
    jina = model.config.arch == JINA_OCR_V1
    assert model.max_draft_depth == (3 if jina else 0)
    assert len(loaded.weights_hash) == 16
    assert loaded.guard.ngram == (35 if jina else 20)
    if not jina:
        model.setup_cache(1, 8)
        with pytest.raises(RuntimeError):
            model.draft(torch.tensor([0]), torch.zeros(1, 32), torch.tensor([5]), torch.tensor([3]))
        model.draft_commit(  # a model without a head of its own does nothing
            torch.tensor([0]), torch.zeros(1, 1, 32), torch.tensor([[5]]), torch.tensor([[3]])
        )


def test_weights_are_the_checkpoints(checkpoints):
    folder = checkpoints[DEEPSEEK_OCR]
    stored = load_file(str(folder / "model.safetensors"))
    net = load(str(folder), "cpu", torch.float32).model.net
    ours = net.state_dict()
    for name in (
        "model.layers.2.mlp.experts.5.up_proj.weight",
        "model.sam_model.pos_embed",
        "model.vision_model.transformer.layers.1.self_attn.qkv_proj.bias",
        "lm_head.weight",
    ):
        assert torch.equal(ours[name], stored[name]), name


def test_prefill_and_forward_run(loaded):
    model: DeepseekOcrDecoder = loaded.model
    request = request_for(loaded, 200, 300)
    model.setup_cache(1, 256)
    hidden, logits, lengths = model.prefill(torch.tensor([0]), [request])
    assert hidden.shape == (1, 32) and logits.shape == (1, 129280)
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
    assert lengths.tolist() == [len(request.prompt_ids)]
    token = logits.argmax(-1)
    hidden, logits = model.forward(torch.tensor([0]), token[:, None], lengths[:, None])
    assert hidden.shape == (1, 1, 32) and logits.shape == (1, 1, 129280)
    text = loaded.tokenizer.decode([int(token)])
    assert isinstance(loaded.adapter.assemble([request], [text]), str)


def test_visual_tokens_reach_the_decoder(loaded):
    """Two different pages with the same prompt length must give different logits."""
    model = loaded.model
    a, b = request_for(loaded, 200, 300, seed=0), request_for(loaded, 200, 300, seed=1)
    assert a.prompt_ids == b.prompt_ids
    model.setup_cache(2, 256)
    _, logits, _ = model.prefill(torch.tensor([0, 1]), [a, b])
    assert (logits[0] - logits[1]).abs().max() > 1e-3


# --------------------------------------------------------------------------- exactness


def test_chunked_forward_equals_single_steps(loaded):
    model: DeepseekOcrDecoder = loaded.model
    request = request_for(loaded, 300, 200)
    model.setup_cache(2, 256)
    slots = torch.tensor([0, 1])
    _, _, lengths = model.prefill(slots, [request, request])
    length = int(lengths[0])
    steps = 7
    tokens = torch.randint(3, 1000, (1, steps), generator=torch.Generator().manual_seed(0))
    positions = (length + torch.arange(steps))[None]
    chunk_hidden, chunk_logits = model.forward(slots[:1], tokens, positions)
    single = [
        model.forward(slots[1:], tokens[:, t : t + 1], positions[:, t : t + 1])
        for t in range(steps)
    ]
    single_hidden = torch.cat([h for h, _ in single], dim=1)
    single_logits = torch.cat([lg for _, lg in single], dim=1)
    torch.testing.assert_close(chunk_logits, single_logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(chunk_hidden, single_hidden, atol=ATOL, rtol=0)

    # And both equal one causal pass over the whole sequence without any cache.
    net = model.net
    with torch.inference_mode():
        embeds, _, _ = model.prompt_embeddings([request])
        x = torch.cat([embeds, net.model.embed_tokens(tokens)], dim=1)
        n = x.shape[1]
        mask = torch.ones(n, n, dtype=torch.bool).tril()[None, None]
        hidden = net.model.norm(net.model.run_layers(x, torch.arange(n)[None], mask=mask))
        reference = net.logits(hidden[:, length:])
    torch.testing.assert_close(chunk_logits, reference, atol=ATOL, rtol=0)


def test_batched_ragged_prefill_equals_prefill_alone(loaded):
    model = loaded.model
    tiled = request_for(loaded, 200, 300, seed=3)  # 6 tiles
    plain = request_for(loaded, 60, 50, seed=4)  # no tiles: a much shorter prompt
    assert len(tiled.prompt_ids) != len(plain.prompt_ids)
    model.setup_cache(3, 256)
    batch_hidden, batch_logits, lengths = model.prefill(torch.tensor([2, 0]), [tiled, plain])
    step_tokens = batch_logits.argmax(-1)[:, None]
    _, batch_next = model.forward(torch.tensor([2, 0]), step_tokens, lengths[:, None])
    for row, request in enumerate([tiled, plain]):
        hidden, logits, _ = model.prefill(torch.tensor([1]), [request])
        torch.testing.assert_close(hidden[0], batch_hidden[row], atol=ATOL, rtol=0)
        torch.testing.assert_close(logits[0], batch_logits[row], atol=ATOL, rtol=0)
        _, next_logits = model.forward(
            torch.tensor([1]), step_tokens[row : row + 1], lengths[row : row + 1, None]
        )
        torch.testing.assert_close(next_logits[0], batch_next[row], atol=ATOL, rtol=0)


def test_rows_are_bitwise_independent_of_the_batch_on_cpu(loaded):
    """What makes speculative output equal greedy output token for token on the CPU: a row's
    logits are bitwise the same whether it is verified among K+1 positions or stepped alone,
    and whatever pages share its prefill (vision included). 1e-5 is not enough: a 1-ulp
    difference at a near-tie flips the argmax."""
    model = loaded.model
    tiled = request_for(loaded, 200, 300, seed=3)
    plain = request_for(loaded, 60, 50, seed=4)
    model.setup_cache(3, 256)
    batch_hidden, batch_logits, _ = model.prefill(torch.tensor([2, 0]), [tiled, plain])
    alone_hidden, alone_logits, lengths = model.prefill(torch.tensor([1]), [tiled])
    assert torch.equal(batch_logits[0], alone_logits[0])
    assert torch.equal(batch_hidden[0], alone_hidden[0])
    steps = 5
    tokens = torch.randint(3, 1000, (1, steps), generator=torch.Generator().manual_seed(1))
    positions = (lengths[0] + torch.arange(steps))[None]
    _, chunk = model.forward(torch.tensor([1]), tokens, positions)
    single = [model.forward(torch.tensor([2]), tokens[:, t : t + 1], positions[:, t : t + 1])[1]
              for t in range(steps)]
    assert torch.equal(chunk, torch.cat(single, dim=1))


# ------------------------------------------------------------------ speculative decoding


def greedy_decode(model, request, steps: int) -> list[int]:
    slot = torch.tensor([0])
    model.setup_cache(1, 256)
    _, logits, position = model.prefill(slot, [request])
    token = logits.argmax(-1)
    out = [int(token)]
    while len(out) < steps:
        _, logits = model.forward(slot, token[:, None], position[:, None])
        token, position = logits[:, -1].argmax(-1), position + 1
        out.append(int(token))
    return out


def speculative_decode(model, request, steps: int, depth: int, oracle: list[int] | None = None):
    """Greedy chain speculation as the design describes it (draft K, verify in one forward,
    accept the matching prefix plus the correction, refill the head's cache).

    A random head's drafts are never accepted, so `oracle` (the greedy continuation) can
    steer them: the head still runs and writes its cache, but the chained draft tokens are
    the oracle's, with every third one wrong, so accepted lengths vary over 0..K.
    """
    slot = torch.tensor([0])
    model.setup_cache(1, 256)
    previous_hidden, logits, lengths = model.prefill(slot, [request])
    prompt_length = int(lengths[0])
    token, position = logits.argmax(-1), prompt_length  # token sits at `position`, uncached
    out, accepted, planted = [int(token)], 0, 0
    while len(out) < steps:
        drafts, hidden, draft_token = [], previous_hidden, token
        for k in range(depth):
            p = torch.tensor([position + k])
            draft_logits, hidden = model.draft(slot, hidden, draft_token, p)
            draft_token = draft_logits.argmax(-1)
            if oracle is not None:
                truth = oracle[position - prompt_length + k + 1]
                planted += 1
                draft_token = torch.tensor([truth if planted % 3 else truth + 1])
            drafts.append(draft_token)
        chain = torch.stack([token] + drafts, dim=1)  # [1,K+1]
        positions = (position + torch.arange(depth + 1))[None]
        verify_hidden, verify_logits = model.forward(slot, chain, positions)
        targets = verify_logits[0].argmax(-1)  # [K+1]
        n_ok = 0
        while n_ok < depth and int(drafts[n_ok]) == int(targets[n_ok]):
            n_ok += 1
        accepted += n_ok
        model.draft_commit(
            slot,
            torch.cat([previous_hidden[:, None], verify_hidden[:, :n_ok]], dim=1),
            chain[:, : n_ok + 1],
            positions[:, : n_ok + 1],
        )
        out += [int(t) for t in targets[: n_ok + 1]]
        previous_hidden, token = verify_hidden[:, n_ok], targets[n_ok : n_ok + 1]
        position += n_ok + 1
    return out, position, accepted


@pytest.fixture(scope="module")
def greedy_reference(jina):
    request = request_for(jina, 200, 300, seed=5)
    return request, greedy_decode(jina.model, request, 40)


@pytest.mark.parametrize("steered", [False, True])
@pytest.mark.parametrize("depth", [1, 3])
def test_speculative_decoding_emits_the_greedy_tokens(jina, greedy_reference, depth, steered):
    request, expected = greedy_reference
    oracle = expected if steered else None
    got, _, accepted = speculative_decode(jina.model, request, 24, depth, oracle)
    assert got[:24] == expected[:24]
    if steered:
        assert accepted >= 8  # the accept path ran, with several multi-token blocks


def test_caches_after_speculation_equal_a_prefill_of_the_committed_text(jina, greedy_reference):
    """Main caches: rollback by length works. Draft cache: the invariant that its entry at p
    comes from the token at p and the target hidden at p-1, whatever was drafted."""
    model: DeepseekOcrDecoder = jina.model
    request, expected = greedy_reference
    out, position, accepted = speculative_decode(model, request, 16, depth=3, oracle=expected)
    assert accepted > 0
    spec_main = [c.k[0, :, :position].clone() for c in model.caches]
    spec_draft_k = model.draft_cache.k[0, :, :position].clone()
    spec_draft_v = model.draft_cache.v[0, :, :position].clone()
    committed = out[: position - len(request.prompt_ids)]
    replay = DecodeRequest(None, request.prompt_ids + committed, request.visual, 1)
    model.setup_cache(1, 256)
    model.prefill(torch.tensor([0]), [replay])
    for layer, k in enumerate(spec_main):
        torch.testing.assert_close(k, model.caches[layer].k[0, :, :position], atol=ATOL, rtol=0)
    draft = model.draft_cache
    torch.testing.assert_close(spec_draft_k, draft.k[0, :, :position], atol=ATOL, rtol=0)
    torch.testing.assert_close(spec_draft_v, draft.v[0, :, :position], atol=ATOL, rtol=0)


def test_draft_reads_the_paired_hidden_and_zeroes_position_zero(jina):
    model = jina.model
    model.setup_cache(1, 16)
    slot, token = torch.tensor([0]), torch.tensor([7])
    hidden = torch.randn(1, 32, generator=torch.Generator().manual_seed(0))
    a, _ = model.draft(slot, hidden, token, torch.tensor([0]))
    b, _ = model.draft(slot, hidden, torch.tensor([8]), torch.tensor([0]))
    torch.testing.assert_close(a, b)  # at position 0 the token embedding is zeroed
    c, _ = model.draft(slot, hidden, token, torch.tensor([1]))
    d, _ = model.draft(slot, 2 * hidden + 1, token, torch.tensor([1]))
    assert (c - d).abs().max() > 1e-4  # the head depends on the hidden it is given


def test_bfloat16_load_runs(checkpoints):
    lm = load(str(checkpoints[JINA_OCR_V1]), "cpu", torch.bfloat16)
    model = lm.model
    assert model.dtype == torch.bfloat16
    model.setup_cache(1, 256)
    hidden, logits, lengths = model.prefill(torch.tensor([0]), [request_for(lm, 90, 90)])
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
    draft_logits, _ = model.draft(torch.tensor([0]), hidden, logits.argmax(-1), lengths)
    assert torch.isfinite(draft_logits).all()


# ----------------------------------------------------------------------------- loading


def _copy(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        if f.name not in skip:
            shutil.copy(f, dst / f.name)
    return dst


def _rewrite(src: Path, dst: Path, edit) -> Path:
    folder = _copy(src, dst, skip=("model.safetensors",))
    state = load_file(str(src / "model.safetensors"))
    edit(state)
    save_file(state, str(folder / "model.safetensors"))
    return folder


def test_missing_tensor(checkpoints, tmp_path):
    name = "model.layers.1.mlp.experts.3.up_proj.weight"
    folder = _rewrite(checkpoints[DEEPSEEK_OCR], tmp_path / "m", lambda s: s.pop(name))
    with pytest.raises(ModelLoadError, match=name.replace(".", r"\.")) as err:
        load(str(folder), "cpu", torch.float32)
    assert "\n" not in str(err.value)


def test_wrong_shape(checkpoints, tmp_path):
    def edit(state):
        state["model.norm.weight"] = torch.ones(33)

    folder = _rewrite(checkpoints[DEEPSEEK_OCR], tmp_path / "m", edit)
    with pytest.raises(ModelLoadError, match=r"model\.norm\.weight.*\[33\].*\[32\]"):
        load(str(folder), "cpu", torch.float32)


def test_unexpected_tensor(checkpoints, tmp_path):
    def edit(state):
        state["model.layers.0.mlp.extra.weight"] = torch.ones(2)

    folder = _rewrite(checkpoints[DEEPSEEK_OCR], tmp_path / "m", edit)
    with pytest.raises(ModelLoadError, match="unexpected tensor model.layers.0.mlp.extra"):
        load(str(folder), "cpu", torch.float32)


@pytest.mark.parametrize("missing", ["tokenizer.json", "config.json"])
def test_missing_files(checkpoints, tmp_path, missing):
    folder = _copy(checkpoints[DEEPSEEK_OCR], tmp_path / "m", skip=(missing,))
    with pytest.raises(ModelLoadError, match=f"no {missing}"):
        load(str(folder), "cpu", torch.float32)


def test_missing_shard(checkpoints, tmp_path):
    shard = "model-00002-of-00002.safetensors"
    folder = _copy(checkpoints[JINA_OCR_V1], tmp_path / "m", skip=(shard,))
    with pytest.raises(ModelLoadError, match=shard):
        load(str(folder), "cpu", torch.float32)


class _Tripwire:
    """Unpickling this creates a file: proof that a pickle was read."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_pickle_checkpoints_are_never_read(checkpoints, tmp_path):
    folder = _copy(checkpoints[DEEPSEEK_OCR], tmp_path / "m", skip=("model.safetensors",))
    marker = tmp_path / "unpickled"
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_Tripwire(marker)))
    with pytest.raises(ModelLoadError, match="no \\*.safetensors"):
        load(str(folder), "cpu", torch.float32)
    assert not marker.exists()


def test_hub_unreachable_says_to_pass_a_folder(monkeypatch):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(ModelLoadError, match="pass a local folder"):
        load("jinaai/jina-ocr-v1", "cpu", torch.float32)
    with pytest.raises(ModelLoadError, match="does not exist"):
        load("./no/such/folder", "cpu", torch.float32)


def test_fingerprint_is_stable_and_distinguishes_checkpoints(checkpoints, loaded):
    again = load(str(checkpoints[loaded.model.config.arch]), "cpu", torch.float32)
    assert again.weights_hash == loaded.weights_hash
    other = JINA_OCR_V1 if loaded.model.config.arch == DEEPSEEK_OCR else DEEPSEEK_OCR
    assert load(str(checkpoints[other]), "cpu", torch.float32).weights_hash != loaded.weights_hash
