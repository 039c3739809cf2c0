"""Losslessness on the shipped, trained built-in model, in float32, on real sample pages."""

from __future__ import annotations

import pytest
import torch

from ocrcli.engine.policy import GATED_DEFAULT, DraftPolicy
from ocrcli.inputs import PageRef
from ocrcli.models.builtin import BUILTIN_DIR, load
from ocrcli.render import RenderSettings, render_page
from tests.conftest import SAMPLES
from tests.engine.conftest import decode


@pytest.fixture(scope="module")
def sample_lines():
    loaded = load(BUILTIN_DIR)
    reqs = []
    for name, page in [("report.pdf", 1), ("scanned-invoice.pdf", 1)]:
        img = render_page(PageRef(0, SAMPLES / name, "pdf", page), RenderSettings()).image
        reqs += loaded.adapter.page_requests(img, 160)
    for i, r in enumerate(reqs):
        r.key = i
    return loaded, reqs


@pytest.mark.slow
def test_trained_model_spec_equals_greedy(sample_lines):
    loaded, reqs = sample_lines
    model = loaded.model
    ref, _ = decode(model, reqs, batch_size=8)
    assert set(ref) == {r.key for r in reqs}  # a result for every request
    alone, _ = decode(model, reqs[:3], batch_size=1)
    # Whole dicts: a request missing from one side fails, where a check over one side's
    # keys would pass.
    assert alone == {r.key: ref[r.key] for r in reqs[:3]}
    policies = [DraftPolicy(k) for k in range(1, model.max_draft_depth + 1)]
    policies.append(DraftPolicy(model.max_draft_depth, GATED_DEFAULT.min_prob,
                                GATED_DEFAULT.min_path_prob))
    for policy in policies:
        for batch in (1, 8):
            subset = reqs if batch == 8 else reqs[:6]
            spec, results = decode(model, subset, policy, batch_size=batch)
            assert spec == {r.key: ref[r.key] for r in subset}, (policy, batch)
            # The trained head proposes well: drafts were accepted, so the accepted-run
            # paths were exercised, not only the rejections.
            tokens = sum(r.stats.tokens for r in results)
            assert tokens / sum(r.stats.verify_steps for r in results) > 1.5, (policy, batch)


def test_drafts_do_not_depend_on_the_batch(sample_lines):
    # Page files record acceptance counts (docs/design.md, section 7): the head's rows must come out the
    # same bits alone, repeated as query positions (batches under MIN_GEMM_ROWS), and in a
    # batch of any size.
    loaded, reqs = sample_lines
    model = loaded.model
    model.setup_cache(6, 64)
    slots = torch.arange(6)
    hidden, logits, lengths = model.prefill(slots, reqs[:6])
    tokens = logits.argmax(-1)
    batched = model.draft(slots, hidden, tokens, lengths)
    for b in (1, 2, 3, 5):
        part = model.draft(slots[:b], hidden[:b], tokens[:b], lengths[:b])
        assert torch.equal(part[0], batched[0][:b]) and torch.equal(part[1], batched[1][:b]), b
    policy = DraftPolicy(model.max_draft_depth, GATED_DEFAULT.min_prob, GATED_DEFAULT.min_path_prob)
    counts = {}
    for batch in (1, 3, 8):
        _, results = decode(model, reqs[:8], policy, batch_size=batch)
        counts[batch] = {r.key: dict(r.stats.accepted_hist) for r in results}
    assert counts[1] == counts[3] == counts[8]
    # ...and drafts were accepted, so the counts compared are not all zeros.
    assert any(k > 0 and n > 0 for hist in counts[1].values() for k, n in hist.items())
