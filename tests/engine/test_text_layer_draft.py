"""Drafting from the page's text layer gives exactly greedy's tokens, whatever the layer says.

A text layer may match the page, be wrong, shifted, in another order, empty, or bait the
model (its likely tokens, then something else): each must give drafter `none`'s tokens, with
the text layer alone and with `auto` (text and head together), at batch 1 and in batches that
mix rows with and without text; on a float64 random model with a taught head, on the shipped
built-in model with a real PDF's text layer, and on tiny DeepSeek-OCR and Jina-OCR-v1
checkpoints. Where the text matches, its drafts must also be accepted: the comparisons would
prove nothing if every run were rejected.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest
import torch

from ocrcli.engine.opcount import OpCounter
from ocrcli.engine.policy import Drafter, DraftPolicy, TextDraftPolicy
from ocrcli.engine.scheduler import Engine, list_source
from ocrcli.engine.text_draft import TextLayerProposer, upload_runs
from ocrcli.inputs import PageRef
from ocrcli.models.base import GuardConfig
from ocrcli.models.builtin import BUILTIN_DIR, load
from ocrcli.render import Renderer, RenderSettings, render_page
from ocrcli.testing.model_folders import tiny_checkpoint_writer
from ocrcli.text_layer import TextLayer
from tests.conftest import SAMPLES
from tests.engine.conftest import VARIED_SEEDS, random_model, random_requests, teach_head

GUARD = GuardConfig(ngram=4, window=16, loop_period_max=4, loop_repeats=4)
DRAFTERS = (Drafter.TEXT_LAYER, Drafter.AUTO)


def decode(model, requests, drafter=Drafter.HEAD, policy=DraftPolicy(6), batch=4, guard=None,
           exact=None, max_new=None):
    """{key: (tokens, status)} and the results, decoded under `drafter`."""
    max_new = max_new or max(r.max_new_tokens for r in requests)
    engine = Engine(model, batch, max_new, policy, guard or GuardConfig(), exact=exact,
                    drafter=drafter)
    results = list(engine.run(list_source(list(requests))))
    return {r.key: (r.tokens, r.status) for r in results}, results


def accepted_by(results, drafter: str) -> int:
    return sum(r.stats.accepted_by[drafter] for r in results)


def with_texts(requests, texts: dict) -> list:
    return [dataclasses.replace(r, draft_text=texts.get(r.key)) for r in requests]


def text_variants(greedy: dict, vocab: int) -> dict[str, dict]:
    """Per kind of text layer, each request's draft text, from the greedy outputs."""
    keys = sorted(greedy)
    out = {k: greedy[k][0] for k in keys}

    def reorder(t):  # chunks of three tokens, last chunk first
        chunks = [t[i:i + 3] for i in range(0, len(t), 3)]
        return [x for c in reversed(chunks) for x in c]

    def bait(t):  # the first tokens, again and again, then the rest off by one
        return t[:3] * 6 + [(x + 1) % vocab for x in t[3:]]

    return {
        "matching": out,
        "wrong": {k: out[keys[(i + 1) % len(keys)]] for i, k in enumerate(keys)},
        "shifted": {k: [7, 7] + t[4:] for k, t in out.items()},
        "reordered": {k: reorder(t) for k, t in out.items()},
        "empty": {k: [] for k in keys},
        "adversarial": {k: bait(t) for k, t in out.items()},
    }


# ------------------------------------------------------------------------------ the lookup


def test_lookup_follows_the_text_and_drafts_deeper_after_longer_matches():
    policy = TextDraftPolicy(max_depth=8, max_ngram=4, depth_per_match=2)
    p = TextLayerProposer(policy, slots=2, eos_id=99)
    text = [5, 6, 7, 8, 5, 6, 9, 10, 11, 12, 13, 14]
    p.bind(0, text)
    # The first token, where the text starts too: a match of 1, plus 1 for starting together.
    assert p.propose([0], [[5]], room=50) == [[6, 7, 8, 5]]
    # "5 6" occurs twice; after "7 8 5 6" only the second fits, and a match of 4 drafts 8
    # (the text and its EOS hold 7).
    assert p.propose([0], [[5, 6, 7, 8, 5, 6]], room=50) == [[9, 10, 11, 12, 13, 14, 99]]
    assert p.propose([0], [[1, 6]], room=50) == [[7, 8]]  # a match of one: 2 deep
    # The run ends with EOS: the request ends where its text does.
    assert p.propose([0], [[5, 6, 7, 8, 5, 6, 9, 10, 11, 12]], room=50) == [[13, 14, 99]]
    # A token the text does not hold: no run. A free slot, or no room: none either.
    assert p.propose([0], [[5, 6, 42]], room=50) == [[]]
    assert p.propose([0, 1], [[5], None], room=0) == [[], []]
    assert p.propose([0], [[5]], room=2) == [[6, 7]]


def test_under_auto_a_short_match_leaves_the_row_to_the_head():
    p = TextLayerProposer(TextDraftPolicy(auto_min_match=3), slots=1, eos_id=0, beside_head=True)
    p.bind(0, [1, 2, 3, 4, 5, 6])
    assert p.propose([0], [[9, 3]], room=50) == [[]]  # a match of one token
    assert p.propose([0], [[2, 3]], room=50) == [[]]  # two
    assert p.propose([0], [[1, 2, 3]], room=50) == [[4, 5, 6, 0]]  # three, and the start


def test_each_rejected_run_halves_the_next():
    p = TextLayerProposer(TextDraftPolicy(depth_per_match=4), slots=1, eos_id=0)
    p.bind(0, list(range(1, 21)))
    assert p.propose([0], [[1]], room=50) == [[2, 3, 4, 5, 6, 7, 8, 9]]
    assert p.propose([0], [[1, 9, 3]], room=50) == [[4, 5]]  # 2 was rejected: 4 >> 1
    assert p.propose([0], [[1, 9, 3, 7, 8]], room=50) == [[9, 10]]  # 4 was: 8 >> 2
    assert p.propose([0], [[1, 9, 3, 7, 8, 9, 10, 11]], room=50) == [[12, 13, 14, 15, 16, 17, 18,
                                                                     19, 20, 0]]  # accepted


def test_ties_go_to_where_the_text_is_expected_to_continue():
    p = TextLayerProposer(TextDraftPolicy(max_ngram=2, depth_per_match=1), slots=1, eos_id=0)
    p.bind(0, [1, 2, 9, 1, 2, 8, 1, 2, 7])
    assert p.propose([0], [[1, 2]], room=50) == [[9, 1]]  # the first "1 2"
    # Three tokens later the expected place is the second "1 2", though the first matches too.
    assert p.propose([0], [[1, 2, 9, 1, 2]], room=50) == [[8, 1]]
    # Ahead of the expected place before behind it.
    assert p.propose([0], [[1, 2, 9, 1, 2, 8, 1, 2, 3, 1, 2]], room=50) == [[7, 0]]


def test_runs_upload_as_one_tensor_with_their_depths():
    drafts = upload_runs([[4, 5, 6], [], [7]], torch.device("cpu"), bucket=True, room=50)
    assert drafts.tokens.tolist() == [[4, 5, 6, 0], [0, 0, 0, 0], [7, 0, 0, 0]]
    assert drafts.depth.tolist() == [3, 0, 1] and drafts.rows == [True, False, True]
    head = torch.tensor([[1, 1], [2, 2], [3, 3]])
    merged, depth = drafts.merge(head, torch.tensor([2, 1, 0]))
    assert merged.tolist() == [[4, 5, 6, 0], [2, 2, 0, 0], [7, 0, 0, 0]]
    assert depth.tolist() == [3, 1, 1]
    assert upload_runs([[], []], torch.device("cpu"), bucket=False, room=50) is None


# ------------------------------------------------------------------------- the text layer


def test_text_in_reads_rows_top_to_bottom_left_to_right_with_word_gaps():
    # "cd" is stored before "ab" and "y" before "x": reading order comes from the boxes.
    boxes = [[30, 0, 40, 10], [40, 0, 50, 10], [0, 0, 10, 10], [10, 0, 20, 10],
             [np.nan] * 4, [10, 20, 20, 30], [0, 20, 10, 30], [0, 50, 10, 60]]
    layer = TextLayer("cdab yxz", np.array(boxes))
    assert layer.text_in((0, 0, 60, 35)) == "ab cd xy"
    assert layer.text_in((0, 0, 60, 100)) == "ab cd xy z"
    assert layer.text_in((100, 100, 200, 200)) == ""
    assert layer.page_text() == "cdab yxz"


@pytest.mark.parametrize("rotation", [0, 90, 180, 270])
def test_the_text_layer_lands_on_its_glyphs_in_every_rotation(tmp_path, rotation):
    """Each character's box, mapped into the rendered image, holds ink: the page's scale and
    its /Rotate are those of the render."""
    pdf = pdfium.PdfDocument(SAMPLES / "report.pdf")
    pdf[0].set_rotation(rotation)
    path = tmp_path / "rotated.pdf"
    pdf.save(path)
    pdf.close()
    page = render_page(PageRef(0, path, "pdf", 1), RenderSettings(dpi=100))
    layer = page.text_layer
    gray = np.asarray(page.image.convert("L"))
    visible = [i for i, c in enumerate(layer.chars) if not c.isspace()]
    inked = 0
    for i in visible:
        x0, y0, x1, y1 = (int(round(v)) for v in layer.boxes[i])
        inked += gray[max(0, y0):y1 + 1, max(0, x0):x1 + 1].min(initial=255) < 128
    assert len(visible) > 500 and inked >= 0.97 * len(visible), (inked, len(visible))
    h, w = gray.shape
    assert (w > h) == (rotation in (90, 270))
    if rotation == 0:  # turned pages read as the image shows them: upside down, or sideways
        assert layer.text_in((0, 0, w, h)).startswith("Field notes on batch conversion This")


@functools.cache
def builtin():
    return load(BUILTIN_DIR)


def report_page(page: int = 1):
    return render_page(PageRef(0, SAMPLES / "report.pdf", "pdf", page), RenderSettings())


def test_each_line_request_carries_the_text_of_its_line():
    loaded = builtin()
    image = report_page().image
    requests = loaded.adapter.page_requests(image, 160)
    texts = [loaded.tokenizer.decode(r.draft_text) for r in requests]
    assert texts[:3] == ["Field notes on batch conversion", "This report describes how a small team",
                         "turns folders of scanned letters,"]
    assert all(r.draft_text for r in requests)
    scan = render_page(PageRef(0, SAMPLES / "scanned-invoice.pdf", "pdf", 1), RenderSettings())
    assert scan.text_layer is None and scan.text_layer_chars == 0
    assert all(r.draft_text is None for r in loaded.adapter.page_requests(scan.image, 160))


def test_line_requests_prepared_in_a_render_worker_carry_their_text():
    """The layer travels with the page image through the worker's pipe, to `prepare` there."""
    prepare = functools.partial(builtin().adapter.page_requests, max_new_tokens=160)
    renderer = Renderer(RenderSettings(), workers=1, prepare=prepare)
    try:
        stream = renderer.stream([PageRef(0, SAMPLES / "report.pdf", "pdf", 2)])
        page = stream.poll(block=True)
    finally:
        renderer.close()
    assert page.text_layer is not None and len(page.text_layer) > 100
    assert sum(bool(r.draft_text) for r in page.prepared) >= 0.8 * len(page.prepared)


# ---------------------------------------------------------- lossless: a float64 random model


@pytest.fixture(scope="module")
def taught():
    """A random model with varied lines and a head taught on other lines: its drafts are
    partly right, so under auto the head's runs are accepted and rejected too. Its greedy
    outputs without and with the repetition guard (whose ban reads the drafts)."""
    model = teach_head(random_model(seed=VARIED_SEEDS[0]), random_requests(4, seed=100), steps=30)
    requests = random_requests(6, seed=3, max_new=24)
    greedy = {name: decode(model, requests, Drafter.NONE, batch=3, guard=guard)[0]
              for name, guard in (("plain", None), ("guard", GUARD))}
    return model, requests, greedy


@pytest.mark.parametrize("kind", ["matching", "wrong", "shifted", "reordered", "empty",
                                  "adversarial"])
def test_every_kind_of_text_layer_gives_greedy_tokens(taught, kind):
    model, requests, greedy = taught
    texts = text_variants(greedy["guard"], model.vocab_size)[kind]
    for drafter in DRAFTERS:
        for batch in (1, 3):
            got, results = decode(model, with_texts(requests, texts), drafter, batch=batch,
                                  guard=GUARD)
            assert got == greedy["guard"], (kind, drafter, batch)
            if kind == "matching":  # the text was right: nearly every token came from it
                tokens = sum(r.stats.tokens for r in results)
                assert accepted_by(results, "text-layer") >= 0.7 * tokens, (drafter, batch)
                assert tokens / sum(r.stats.verify_steps for r in results) > 3
            if kind == "empty":
                assert accepted_by(results, "text-layer") == 0


def test_mixed_batches_of_rows_with_and_without_text(taught):
    """Rows with a matching text, a wrong one and none at all share steps: under auto the
    head drafts for the rows the text does not serve, in the same step."""
    model, requests, greedy = taught
    variants = text_variants(greedy["plain"], model.vocab_size)
    texts = {k: (variants["matching"] if k % 3 == 0 else variants["wrong"])[k]
             for k in greedy["plain"] if k % 3 != 2}
    mixed = with_texts(requests, texts)
    for drafter in (*DRAFTERS, Drafter.HEAD):
        got, results = decode(model, mixed, drafter, batch=3)
        assert got == greedy["plain"], drafter
        if drafter != Drafter.HEAD:
            assert accepted_by(results, "text-layer") > 0
        if drafter != Drafter.TEXT_LAYER:
            assert sum(r.stats.drafted_by["head"] for r in results) > 0
    alone, _ = decode(model, mixed[:1], Drafter.AUTO, batch=1)
    assert alone == {0: greedy["plain"][0]}


def test_a_fast_engine_with_text_drafts_gives_the_exact_engines_tokens(taught):
    """Every slot stepped, bucketed spans, rewound free slots and run widths rounded up to a
    power of two: the exact engine's tokens (float64, so rounding cannot flip one)."""
    model, requests, greedy = taught
    texts = text_variants(greedy["guard"], model.vocab_size)
    mixed = with_texts(requests, {k: texts["matching" if k % 2 else "adversarial"][k]
                                  for k in greedy["guard"]})
    for drafter in DRAFTERS:
        engine = Engine(model, 4, 24, DraftPolicy(6), GUARD, exact=False, span_bucket=8,
                        drafter=drafter)
        results = list(engine.run(list_source(list(mixed))))
        assert {r.key: (r.tokens, r.status) for r in results} == greedy["guard"], drafter
        assert accepted_by(results, "text-layer") > 0


@pytest.mark.parametrize("exact", [True, False])
def test_text_drafts_add_no_host_read(taught, exact):
    model, requests, greedy = taught
    requests = with_texts(requests, text_variants(greedy["plain"], model.vocab_size)["matching"])
    engine = Engine(model, 4, 24, DraftPolicy(6), GuardConfig(), exact=exact, drafter=Drafter.AUTO)
    engine.step_counter = counter = OpCounter()
    results = list(engine.run(list_source(list(requests))))
    assert accepted_by(results, "text-layer") > 0
    assert counter.entries > 0 and counter.syncs <= counter.entries  # the step's own read only


def test_the_cache_holds_the_deepest_run_without_shortening_requests():
    """Text runs go deeper than the head; the cache grows for them, and a request's token
    cap is what it would be without them."""
    model = random_model(seed=3)
    plain = Engine(model, 2, 40, DraftPolicy(3), GuardConfig())
    text = Engine(model, 2, 40, DraftPolicy(3), GuardConfig(), drafter=Drafter.AUTO)
    assert text.max_len == plain.max_len + 32 - 3
    request = random_requests(1, max_new=40)[0]
    assert text.budget(request) == plain.budget(request) == 40


# ---------------------------------------------------- lossless: the shipped built-in model


@pytest.mark.slow
def test_the_built_in_model_on_a_real_text_layer():
    """The report's own text layer, and page 3's layer on page 1's lines (wrong text)."""
    loaded = builtin()
    requests = loaded.adapter.page_requests(report_page().image, 160)[:10]
    other = loaded.adapter.page_requests(report_page(3).image, 160)
    for i, r in enumerate(requests):
        r.key = i
    wrong = [dataclasses.replace(r, draft_text=other[i % len(other)].draft_text)
             for i, r in enumerate(requests)]
    greedy, _ = decode(loaded.model, requests, Drafter.NONE, batch=4)
    for drafter in DRAFTERS:
        for batch in (1, 4):
            got, results = decode(loaded.model, requests, drafter, batch=batch)
            assert got == greedy, (drafter, batch)
            tokens = sum(r.stats.tokens for r in results)
            assert accepted_by(results, "text-layer") >= 0.7 * tokens, (drafter, batch)
        got, results = decode(loaded.model, wrong, drafter, batch=4)
        assert got == greedy, drafter
    mixed = [r if i % 2 else dataclasses.replace(r, draft_text=None) for i, r in enumerate(requests)]
    got, results = decode(loaded.model, mixed, Drafter.AUTO, batch=4)
    assert got == greedy
    assert accepted_by(results, "text-layer") > 0 and accepted_by(results, "head") > 0


# ---------------------------------------------------- lossless: tiny DeepSeek and Jina


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    from ocrcli.models.deepseek_ocr import DEEPSEEK_OCR, JINA_OCR_V1

    write = tiny_checkpoint_writer()
    base = tmp_path_factory.mktemp("tiny-text")
    return {"deepseek": write(base / "deepseek", DEEPSEEK_OCR, seed=3, index=False, draftable=True),
            "jina": write(base / "jina", JINA_OCR_V1, seed=4, draftable=True)}


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["deepseek", "jina"])
def test_tiny_page_models_with_text_drafts_give_greedy_tokens(tiny, arch):
    """One request per page, the page's text as the draft source: the report's real text
    layer (which these random models do not write), and texts made from their own output.
    DeepSeek-OCR has no head: there the text layer is the only drafter, and `text-layer` must
    equal `none`. Jina-OCR-v1 drafts with its head as well (auto)."""
    from ocrcli.models.deepseek_ocr import load as load_page_model

    loaded = load_page_model(str(tiny[arch]), "cpu", torch.float32, mode="tiny")
    pages = [report_page(1).image, render_page(PageRef(0, SAMPLES / "memo.jpg", "image", 1),
                                               RenderSettings()).image]
    requests = [r for image in pages for r in loaded.adapter.page_requests(image, 40)]
    for i, r in enumerate(requests):
        r.key = i
    assert requests[0].draft_text and requests[1].draft_text is None  # a PDF page, an image
    model = loaded.model
    greedy, _ = decode(model, requests, Drafter.NONE, guard=loaded.guard, batch=2)
    assert min(len(t) for t, _ in greedy.values()) >= 8
    variants = text_variants(greedy, 600)
    drafters = (Drafter.TEXT_LAYER,) if arch == "deepseek" else (*DRAFTERS, Drafter.HEAD)
    for kind in ("real", "matching", "shifted", "adversarial"):
        reqs = requests if kind == "real" else with_texts(requests, variants[kind])
        for drafter in drafters:
            for batch in (1, 2):
                got, results = decode(model, reqs, drafter, DraftPolicy(3), batch, loaded.guard)
                assert got == greedy, (kind, drafter, batch)
                if kind == "matching" and drafter != Drafter.HEAD:
                    tokens = sum(r.stats.tokens for r in results)
                    assert accepted_by(results, "text-layer") >= 0.5 * tokens, (drafter, batch)
                if drafter == Drafter.HEAD:  # the draftable checkpoint's head is right often
                    assert accepted_by(results, "head") > 0
