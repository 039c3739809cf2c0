"""Rereads: a line piece the built-in model read unsurely is read again from taller crops, and
the page keeps the likeliest reading. Every reading is greedy's, so pages stay the same with
and without speculative decoding; and a page is written only once its rereads have ended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ocrcli.distributed.page_decoder import PageDecoder
from ocrcli.engine.scheduler import RequestStats
from ocrcli.inputs import PageRef
from ocrcli.models.builtin import BUILTIN_DIR, load
from ocrcli.models.builtin.layout import REREAD_MARGINS
from ocrcli.pages import PageAssembly
from ocrcli.render import PageImage, RenderSettings, render_page
from ocrcli.settings import ConvertSettings
from tests.conftest import SAMPLES, run_cli


@pytest.fixture(scope="module")
def loaded():
    return load(BUILTIN_DIR)


def sample_page(name: str = "report.pdf") -> PageImage:
    return render_page(PageRef(0, SAMPLES / name, "pdf", 1), RenderSettings(dpi=144))


def read(total_logprob: float, tokens: int = 10) -> RequestStats:
    return RequestStats(tokens=tokens, verify_steps=tokens, logprob_sum=total_logprob,
                        logprob_tokens=tokens)


def test_only_an_unsure_reading_that_ended_ok_is_read_again(loaded):
    image = sample_page()
    requests = loaded.adapter.page_requests(image.image, 160)[:3]
    assert all(len(r.alternates) == len(REREAD_MARGINS) for r in requests)
    page = PageAssembly.start(image, requests, key=7)
    assert page.add(0, "sure", "ok", read(-0.1)) == []  # -0.01 per token
    assert page.add(1, "looped", "degenerate", read(-20.0)) == []
    rereads = page.add(2, "unsure", "ok", read(-5.0))  # -0.5 per token
    assert [r.key for r in rereads] == [(7, 3), (7, 4)]
    assert [r.meta.index for r in rereads] == [requests[2].meta.index] * 2
    assert all(r.alternates == () for r in rereads)  # a reread is not read again
    assert not page.finished and page.read_once


def test_the_page_keeps_the_likeliest_reading_that_ended_ok(loaded):
    image = sample_page()
    requests = loaded.adapter.page_requests(image.image, 160)[:2]
    page = PageAssembly.start(image, requests, key=0)
    page.add(0, "The quarterly report of the board", "ok", read(0.0))
    first, second = page.add(1, "Sumnary of the year", "ok", read(-3.0))
    page.add(first.key[1], "Summary!! Summary!!", "degenerate", read(0.0))  # a loop: never kept
    page.add(second.key[1], "Summary of the year", "ok", read(-0.5))
    record = page.record(loaded, "fp")
    assert "Summary of the year" in record.text, record.text
    assert "Sumnary" not in record.text and "!!" not in record.text
    assert (record.status, record.requests, record.rereads) == ("ok", 2, 2)
    assert record.mean_logprob == round(-0.5 / 20, 4)  # over the readings kept
    assert record.tokens == 40  # the rereads' work counts


def decode_pages(loaded, draft_depth: int | None, reread_below: float) -> list:
    loaded.adapter.reread_below = reread_below
    try:
        settings = ConvertSettings(inputs=[], out=Path("."), draft_depth=draft_depth, batch_size=8)
        return PageDecoder(loaded, settings).decode([sample_page(), sample_page("scanned-invoice.pdf")])
    finally:
        loaded.adapter.reread_below = type(loaded.adapter).reread_below


@pytest.mark.slow
def test_pages_read_again_everywhere_are_the_same_with_and_without_drafts(loaded):
    everywhere = decode_pages(loaded, None, 0.0)  # every reading is under 0: all read again
    greedy = decode_pages(loaded, 0, 0.0)
    never = decode_pages(loaded, None, float("-inf"))
    for spec, plain, once in zip(everywhere, greedy, never):
        assert spec.status == "ok" and spec.rereads == len(REREAD_MARGINS) * spec.requests
        assert (spec.text, spec.mean_logprob) == (plain.text, plain.mean_logprob)
        assert once.rereads == 0 and once.requests == spec.requests
        assert spec.mean_logprob >= once.mean_logprob  # each region keeps its likeliest reading


def test_a_page_is_written_after_its_rereads_and_no_rereads_turns_them_off(tmp_path):
    # The scanned invoice has unsure pieces; the last of them end after every first reading,
    # when the converter has no other page to give the engine.
    records = {}
    for flag in ("--rereads", "--no-rereads"):
        done = run_cli("convert", str(SAMPLES / "scanned-invoice.pdf"), "-o",
                       str(tmp_path / flag), "--quiet", flag)
        assert done.returncode == 0, done.stderr
        page = tmp_path / flag / "scanned-invoice.pdf" / "page-0001.json"
        records[flag] = json.loads(page.read_text())
    on, off = records["--rereads"], records["--no-rereads"]
    assert on["status"] == "ok" and on["rereads"] > 0 and off["rereads"] == 0
    assert on["requests"] == off["requests"] and on["fingerprint"] != off["fingerprint"]
