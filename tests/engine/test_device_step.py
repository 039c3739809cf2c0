"""The decode step as a GPU runs it, checked on the CPU.

- Every tensor of a step is made on the model's device: the model is put on the `meta`
  device, where any tensor the engine makes on the CPU and mixes in raises, and the only thing
  a step may not do there is its one read of the committed tokens.
- At most one host sync per engine step, counted with a dispatch mode (ocrcli.engine.opcount).
- A fast engine (every slot stepped, attention over a length bucket, free slots rewound)
  gives the exact engine's tokens on a float64 model.
- The token cap and the cache never exceed the model's positions.
- torch.compile(fullgraph=True) traces the verify forward and the draft step of every model
  without a graph break, with the eager step's tokens.
"""

from __future__ import annotations

import functools
import traceback

import pytest
import torch

from ocrcli.engine.decode import decode_step
from ocrcli.engine.opcount import OpCounter
from ocrcli.engine.policy import DraftPolicy
from ocrcli.engine.scheduler import Engine, list_source
from ocrcli.models.base import DecodeRequest, GuardConfig
from ocrcli.models.builtin.model import BuiltinConfig, BuiltinOCR
from ocrcli.models.deepseek_ocr.config import DEEPSEEK_OCR, JINA_OCR_V1, tiny_config
from ocrcli.models.deepseek_ocr.model import DeepseekOcrForCausalLM
from ocrcli.models.deepseek_ocr.runtime import DeepseekOcrDecoder
from tests.engine.conftest import VARIED_SEEDS, random_model, random_requests, teach_head

GUARD = GuardConfig(ngram=4, window=16, loop_period_max=4, loop_repeats=4)


def _deepseek(arch: str, device: str = "cpu", dtype=torch.float32) -> DeepseekOcrDecoder:
    torch.manual_seed(0)
    with torch.device(device):
        net = DeepseekOcrForCausalLM(tiny_config(arch)).eval().to(dtype)
    return DeepseekOcrDecoder(net, prompt_bound=32)


def _builtin(device: str = "cpu") -> BuiltinOCR:
    torch.manual_seed(0)
    cfg = BuiltinConfig(vocab_size=40, dim=32, heads=2, encoder_layers=1, decoder_layers=2,
                        mlp_hidden=64, max_text=96, mtp_depth=4)
    with torch.device(device):
        return BuiltinOCR(cfg).eval()


MODELS = {
    "builtin": lambda device="cpu": _builtin(device),
    "deepseek": lambda device="cpu": _deepseek(DEEPSEEK_OCR, device),
    "jina": lambda device="cpu": _deepseek(JINA_OCR_V1, device),
}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("rows", ["run", "ids"])
def test_a_step_makes_every_tensor_on_the_model_device(name, rows):
    model = MODELS[name]("meta")
    assert model.spec.device.type == "meta"
    engine = Engine(model, 4, 16, DraftPolicy(3, 0.5, 0.3), GUARD, max_prompt=8, exact=False)
    assert engine.state.lengths.device.type == "meta"
    step_rows = slice(0, 4) if rows == "run" else torch.tensor([0, 2], device="meta")
    with pytest.raises(NotImplementedError, match="meta") as failure:
        decode_step(model, engine.state, step_rows, 64, engine.policy, engine.guard,
                    engine.guard_allowed, None)
    # Everything ran on the device; the step stopped only at its one read of the results.
    last = [f for f in traceback.extract_tb(failure.value.__traceback__) if "ocrcli" in f.filename][-1]
    assert last.name == "decode_step" and "packed.tolist()" in last.line


def _count(model, requests, policy, batch, exact, guard=GUARD) -> tuple[OpCounter, dict]:
    engine = Engine(model, batch, max(r.max_new_tokens for r in requests), policy, guard,
                    exact=exact)
    engine.step_counter = OpCounter()
    outputs = {r.key: (r.tokens, r.status) for r in engine.run(list_source(list(requests)))}
    return engine.step_counter, outputs


def _requests(model, n: int, max_new: int = 12) -> list[DecodeRequest]:
    if isinstance(model, BuiltinOCR):
        return random_requests(n, max_new=max_new)
    pixels = torch.zeros(3, 128, 128)
    from ocrcli.models.deepseek_ocr.preprocess import PageVisual, placeholder_count

    visual = PageVisual(pixels, None, (1, 1))
    image = [model.config.image_token_id] * placeholder_count(visual)
    return [DecodeRequest(i, [0] + image + [5 + i, 7], visual, max_new) for i in range(n)]


@pytest.mark.parametrize("name", ["builtin", "jina"])
@pytest.mark.parametrize("exact", [True, False])
def test_at_most_one_host_sync_per_step(name, exact):
    model = MODELS[name]()
    requests = _requests(model, 5)
    for policy in (DraftPolicy(0), DraftPolicy(3)) + (() if exact else (DraftPolicy(3, 0.5, 0.3),)):
        for batch in (1, 4):
            counter, _ = _count(model, requests, policy, batch, exact)
            assert counter.entries > 0
            assert counter.syncs <= counter.entries, (policy, batch, counter.syncs, counter.entries)


def test_the_counter_sees_host_reads():
    x = torch.arange(6.0)
    with OpCounter() as counter:
        _ = x.sum().item()
        _ = x.tolist()
        _ = bool((x > 2).any())
    assert counter.syncs == 3 and counter.ops >= 4


@functools.cache
def _taught_model() -> BuiltinOCR:
    """A float64 random model with varied lines and a head taught on other lines: its drafts
    are accepted at every depth and rejected too (a random head's are all but never accepted,
    which would leave the fast engine's bookkeeping of accepted runs untested)."""
    return teach_head(random_model(seed=VARIED_SEEDS[0]), random_requests(4, seed=100), steps=30)


def _accepted(results) -> int:
    """Verify steps that accepted at least one draft, over all requests."""
    return sum(n for r in results for k, n in r.stats.accepted_hist.items() if k > 0)


@pytest.mark.parametrize("policy", [DraftPolicy(0), DraftPolicy(3), DraftPolicy(4, 0.3, 0.1)])
def test_a_fast_engine_gives_the_exact_engines_tokens(policy):
    """float64, so kernel rounding cannot flip a token: what is tested is the bookkeeping of
    stepping every slot, bucketed spans and rewinding free slots (a tiny bucket exercises
    every bucket change and many rewinds), with drafts accepted and rejected."""
    model = _taught_model()
    requests = random_requests(11, seed=5, max_new=30)
    want, _ = _decode(model, requests, policy, exact=True)
    got, results = _decode(model, requests, policy, exact=False, span_bucket=8)
    assert got == want
    assert len({tuple(tokens) for tokens, _ in want.values()}) >= 2  # varied lines
    if policy.max_depth:
        assert _accepted(results) > 0


def _decode(model, requests, policy, exact, span_bucket=256):
    engine = Engine(model, 4, 30, policy, GUARD, exact=exact, span_bucket=span_bucket)
    results = list(engine.run(list_source(list(requests))))
    return {r.key: (r.tokens, r.status) for r in results}, results


def test_budget_stops_at_the_models_positions():
    """A cap past the positions: requests end `truncated` where the cache ends; a prompt that
    leaves no room fails with a reason; nothing is written past the cache."""
    model = random_model(seed=3)
    positions = model.spec.max_positions
    engine = Engine(model, 2, 10_000, DraftPolicy(3), GuardConfig())
    assert engine.max_len == positions
    long_prompt = DecodeRequest("long", [1] * (positions - 2), random_requests(1)[0].visual, 50)
    requests = [*random_requests(2, seed=4, max_new=10_000), long_prompt]
    model.eos_id = -1  # never stops on its own
    results = {r.key: r for r in engine.run(list_source(requests))}
    for key in (0, 1):
        assert results[key].status == "truncated"
        assert len(results[key].tokens) == positions - 1 - 3
    assert results["long"].status == "failed" and "cache positions" in results["long"].error


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_fullgraph_compile_of_verify_and_draft_gives_the_eager_tokens(name):
    model = MODELS[name]()
    model.choose_kernels(True)
    model.setup_cache(4, 64)
    vocab = model.spec.vocab_size if isinstance(model, BuiltinOCR) else 600
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(3, vocab, (2, 4), generator=gen)
    positions = torch.arange(4)[None] + torch.tensor([[5], [9]])
    if isinstance(model, BuiltinOCR):  # a line of visual memory for each row
        model.prefill(torch.tensor([0, 1]), random_requests(2))
    rows = slice(0, 2)
    verify = torch.compile(model.forward, fullgraph=True, backend="aot_eager")
    hidden, logits = verify(rows, tokens, positions, span=None)
    eager_hidden, eager_logits = model.forward(rows, tokens, positions, span=None)
    assert torch.equal(logits.argmax(-1), eager_logits.argmax(-1))
    if model.spec.max_draft_depth:
        draft = torch.compile(model.draft, fullgraph=True, backend="aot_eager")
        step = (rows, hidden[:, -1], tokens[:, -1], positions[:, -1] + 1)
        got, _ = draft(*step)
        want, _ = model.draft(*step)
        assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.parametrize("name", ["builtin", "jina"])
def test_a_captured_step_gives_the_uncaptured_tokens(name):
    """The compiled step functions (traced whole, no code generated on the CPU) drive the
    engine to the tokens of the plain fast engine, with drafts accepted as well as rejected:
    the built-in model's taught head drafts; the random Jina-OCR-v1 head's drafts would all be
    rejected, so a drafter proposes that model's own tokens (right 70% of the time)."""
    from ocrcli.engine.capture import CaptureSettings
    from ocrcli.engine.draft import OracleProposer

    if name == "builtin":
        model, requests, drafter = _taught_model(), random_requests(5, seed=2, max_new=12), None
    else:
        model = MODELS[name]()
        requests = _requests(model, 5)
        greedy = Engine(model, 4, 12, DraftPolicy(0), GUARD, exact=False)
        reference = {r.key: r.tokens + [model.spec.eos_id]
                     for r in greedy.run(list_source(list(requests)))}

        def drafter():
            return OracleProposer(reference, 0.7, model.spec.vocab_size)

    runs = {}
    for capture in (None, CaptureSettings(mode=None, backend="eager")):
        engine = Engine(model, 4, 12, DraftPolicy(3), GUARD, exact=False, capture=capture,
                        proposer=drafter() if drafter else None)
        results = list(engine.run(list_source(list(requests))))
        assert engine.capture_error is None
        assert _accepted(results) > 0
        runs[capture is not None] = {r.key: r.tokens for r in results}
    assert runs[True] == runs[False]
    assert len({tuple(tokens) for tokens in runs[False].values()}) >= 2  # varied lines


def test_a_step_that_cannot_be_captured_runs_eagerly():
    """A graph break in a step function: the engine says why and decodes eagerly, same tokens."""
    from ocrcli.engine.capture import CaptureSettings

    model = MODELS["builtin"]()
    requests = _requests(model, 3)
    want = {r.key: r.tokens for r in Engine(model, 2, 12, DraftPolicy(2), GUARD, exact=False)
            .run(list_source(list(requests)))}

    def forward_with_a_break(*args, **kwargs):
        torch._dynamo.graph_break()
        return BuiltinOCR.forward(model, *args, **kwargs)

    model.forward = forward_with_a_break
    captured = Engine(model, 2, 12, DraftPolicy(2), GUARD, exact=False,
                      capture=CaptureSettings(mode=None, backend="eager"))
    got = {r.key: r.tokens for r in captured.run(list_source(list(requests)))}
    assert captured.capture_error and captured.stepper is model
    assert got == want
