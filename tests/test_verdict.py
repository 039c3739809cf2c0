"""Page verdicts: a page that read nothing, noise, a loop or a guess is not `ok`, says why, and
decides the exit code (5 unless --accept); --retry converts such pages again."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from PIL import Image

from ocrcli.engine.scheduler import RequestStats
from ocrcli.inputs import PageRef
from ocrcli.models.base import DecodeRequest
from ocrcli.pages import PageAssembly
from ocrcli.quality import quality_flags
from ocrcli.render import PageImage, ink_share
from ocrcli.verdict import PageEvidence, doubt, readable_score, request_reason
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[1]
PROSE = ("The committee met on Tuesday to review the budget for the coming year. Members "
         "agreed that the reserve fund should grow by four percent.")


def evidence(text: str, **kw) -> PageEvidence:
    return PageEvidence(text, kw.pop("ink", 0.05), kw.pop("text_layer_chars", None),
                        kw.pop("mean_logprob", -0.01), **kw)


def test_a_good_reading_is_not_doubted():
    assert doubt(evidence(PROSE)) is None
    assert doubt(evidence("| a | b |\n|---|---|\n| 1 | 2 |\n" * 3 + PROSE)) is None


def test_near_empty_output_of_a_page_with_ink_or_a_text_layer_is_doubted():
    assert "text layer has 20064" in doubt(evidence("|", ink=0.0, text_layer_chars=20064))
    assert "5.0% of the page is ink" in doubt(evidence("", ink=0.05))
    # a table of empty cells is Markdown syntax, not content
    assert doubt(evidence("| | | |\n|---|---|---|\n| | | |", ink=0.05)) is not None


def test_a_blank_page_or_a_page_number_alone_is_fine():
    assert doubt(evidence("", ink=0.0)) is None
    assert doubt(evidence("12", ink=0.0005)) is None
    assert doubt(evidence("", ink=0.0, text_layer_chars=150)) is None


def test_symbols_loops_and_guesses_are_doubted():
    assert "mostly symbols" in doubt(evidence("ï=v=> ^^ {}[] @@ ;; ~~ << ·· ¶¶ §§ ±± ∆∆ ◊◊"))
    assert "repeats itself" in doubt(evidence(PROSE, repetition=0.2))
    assert "unsure" in doubt(evidence(PROSE, mean_logprob=-0.5, min_mean_logprob=-0.2))
    assert doubt(evidence(PROSE, mean_logprob=-0.5)) is None  # the default bound is looser


def test_request_reasons_name_the_cause():
    assert "token cap of 160" in request_reason(["ok", "truncated"], 160)
    assert "looped" in request_reason(["degenerate", "ok", "ok"], 160)
    assert request_reason(["ok"], 160) is None


def page_verdict(statuses: list[str], text: str = PROSE) -> tuple[str, str | None, str | None]:
    """The verdict of a page whose requests ended with `statuses`, its Markdown `text`."""
    image = PageImage(PageRef(0, Path("doc.pdf"), "pdf", 1), None, 144.0, ink=0.05)
    requests = [DecodeRequest((0, i), [1], None, 160) for i in range(len(statuses))]
    page = PageAssembly.start(image, requests)
    for i, status in enumerate(statuses):
        page.add(i, "a line", status)
    return page.verdict(text, quality_flags(text), -1.5)


def test_one_stopped_line_piece_in_many_is_noted_not_flagged():
    status, reason, note = page_verdict(["degenerate"] + ["ok"] * 29)
    assert (status, reason) == ("ok", None) and "looped and was stopped (1 of 30" in note
    status, reason, note = page_verdict(["truncated"] + ["ok"] * 19)
    assert (status, reason) == ("ok", None) and "token cap of 160" in note
    # the rest of the page is still judged
    status, reason, note = page_verdict(["degenerate"] + ["ok"] * 29, text="|")
    assert status == "degenerate" and "5.0% of the page is ink" in reason and note


def test_more_stopped_requests_or_a_single_request_flag_the_page():
    assert page_verdict(["degenerate", "truncated"] + ["ok"] * 8)[:1] == ("degenerate",)
    assert page_verdict(["truncated", "ok"])[0] == "truncated"
    status, reason, note = page_verdict(["truncated"])  # DeepSeek-OCR: the page is one request
    assert status == "truncated" and "1 of 1 requests" in reason and note is None
    assert page_verdict(["ok"] * 5) == ("ok", None, None)


def test_a_request_stopped_by_the_models_positions_says_so():
    """Where the model's last position comes before the cap, raising the cap cannot help."""
    image = PageImage(PageRef(0, Path("doc.pdf"), "pdf", 1), None, 144.0, ink=0.05)
    page = PageAssembly.start(image, [DecodeRequest((0, 0), [1], None, 160)])
    page.add(0, PROSE, "truncated", RequestStats(tokens=120))  # ended 40 tokens short of its cap
    status, reason, _ = page.verdict(PROSE, quality_flags(PROSE), -1.5)
    assert status == "truncated" and "last position before the token cap of 160" in reason
    capped = PageAssembly.start(image, [DecodeRequest((0, 0), [1], None, 160)])
    capped.add(0, PROSE, "truncated", RequestStats(tokens=160))
    assert "raise --max-new-tokens" in capped.verdict(PROSE, quality_flags(PROSE), -1.5)[1]


def test_the_quality_checks_score_junk_low():
    assert quality_flags(PROSE)["readable_text"] > 0.9
    for junk in ("|", "ï=v=>", "", "| | |\n|---|---|"):
        assert quality_flags(junk)["readable_text"] < 0.3, junk
    assert readable_score("ï=v=>") < readable_score(PROSE)


def test_ink_share_separates_blank_from_printed():
    blank = Image.new("RGB", (600, 800), "white")
    assert ink_share(blank) == 0.0
    page = Image.open(REPO / "samples" / "memo.jpg")
    assert 0.01 < ink_share(page) < 0.3


def _noise_png(path: Path) -> Path:
    rng = random.Random(0)
    img = Image.new("L", (600, 800), 255)
    img.putdata([0 if rng.random() < 0.08 else 255 for _ in range(600 * 800)])
    img.save(path)
    return path


def _invisible_text_pdf(path: Path, lines: int = 12) -> Path:
    """A page whose text layer holds prose drawn invisibly (render mode 3): it renders blank."""
    body = "".join(f"BT /F1 10 Tf 3 Tr 40 {760 - 14 * i} Td ({PROSE[:90]}) Tj ET\n"
                   for i in range(lines)).encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
               b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
               b"<< /Length %d >>\nstream\n" % len(body) + body + b"endstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def _page(out: Path, name: str) -> dict:
    return json.loads((out / name / "page-0001.json").read_text())


@pytest.mark.parametrize("extra, code", [((), 5), (("--accept", "degenerate"), 0)])
def test_flagged_pages_decide_the_exit_code(tmp_path, extra, code):
    noise = _noise_png(tmp_path / "noise.png")
    pdf = _invisible_text_pdf(tmp_path / "hidden.pdf")
    out = tmp_path / "out"
    done = run_cli("convert", str(noise), str(pdf), str(REPO / "samples" / "memo.jpg"), "-o",
                   str(out), "--log", "plain", *extra)
    assert done.returncode == code, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_code"] == code
    assert summary["pages"]["ok"] == 1 and summary["pages"]["degenerate"] == 2
    flagged = {Path(f["source"]).name: f for f in summary["flagged"]}
    assert set(flagged) == {"noise.png", "hidden.pdf"}
    assert "text layer has" in flagged["hidden.pdf"]["reason"]
    assert "ink" in flagged["noise.png"]["reason"]
    page = _page(out, "noise.png")
    assert page["status"] == "degenerate" and page["error"] == flagged["noise.png"]["reason"]
    assert page["quality"]["readable_text"] < 0.5
    assert "noise.png page 1: degenerate: the output has" in done.stderr
    assert _page(out, "memo.jpg")["status"] == "ok"
    assert _page(out, "memo.jpg")["mean_logprob"] > -0.2
    if code == 5:
        assert "2 pages flagged" in done.stderr and "--accept degenerate" in done.stderr


def test_retry_converts_flagged_pages_again(tmp_path):
    noise = _noise_png(tmp_path / "noise.png")
    out = tmp_path / "out"
    args = ("convert", str(noise), str(REPO / "samples" / "memo.jpg"), "-o", str(out),
            "--log", "plain")
    assert run_cli(*args).returncode == 5
    again = run_cli(*args)  # done pages, flagged ones included, are skipped: nothing new
    assert again.returncode == 0
    assert json.loads((out / "summary.json").read_text())["pages"]["skipped"] == 2
    retried = run_cli(*args, "--retry", "degenerate")
    assert retried.returncode == 5
    pages = json.loads((out / "summary.json").read_text())["pages"]
    assert pages["skipped"] == 1 and pages["degenerate"] == 1


def test_bad_accept_value_is_a_usage_error(tmp_path):
    done = run_cli("convert", str(REPO / "samples" / "memo.jpg"), "-o", str(tmp_path / "o"),
                   "--accept", "failed")
    assert done.returncode == 2
