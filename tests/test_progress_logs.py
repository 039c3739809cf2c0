"""Progress for people and logs for machines: the reporter alone on a fake clock, then the
real `ocrcli convert --log plain|json` in a subprocess."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pikepdf
import pytest

from ocrcli.engine.scheduler import OOM_MESSAGE
from ocrcli.progress import DocumentPlan, PageEvent, Reporter, summary_rows
from tests.conftest import REPO, SAMPLES, run_cli
from tests.test_errors import BUG_IN_CONVERT, _with_a_bug

# ISO-8601 local time with its offset, to the second, then one space.
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d) ")
FAST = ("--max-new-tokens", "8", "--dpi", "72", "--render-workers", "0")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _reporter(mode: str, clock: FakeClock,
              heartbeat_s: float = 30.0) -> tuple[Reporter, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Reporter(mode, heartbeat_s=heartbeat_s, clock=clock, timer=False, out=out, err=err), out, err


def _event(source: str, page: int, status: str = "ok", seconds: float = 1.0) -> PageEvent:
    return PageEvent(source, page, status, None if status == "ok" else f"{status}: why",
                     seconds, f"out/{source}/page-{page:04d}.json")


def _summary(**pages: int) -> dict:
    block = {"converted": 0, "skipped": 0, "failed": 0, "timeout": 0, "ok": 0, "truncated": 0,
             "degenerate": 0} | pages
    return {"documents": 2, "documents_failed": 1, "pages": block, "pages_per_s": 1.27,
            "tokens_per_s": 300.0, "mean_accepted": 5.0, "seconds": 10.0, "interrupted": False}


# -- the reporter alone ---------------------------------------------------------------------

def test_plain_heartbeat_when_a_page_ends_after_the_interval():
    clock = FakeClock()
    rep, out, err = _reporter("plain", clock)
    rep.start(1, 100, [DocumentPlan("big.pdf", 100)])
    rep.timing_from(clock.now)
    clock.now += 10
    rep.page(10, 2, _event("big.pdf", 1))
    assert len(out.getvalue().splitlines()) == 1  # the start line only: 10 s < 30 s
    clock.now += 20
    rep.problem("big.pdf page 1: truncated: reached the token cap")  # not a progress line
    clock.now += 1  # 31 s since the start line
    rep.page(10, 2, _event("big.pdf", 2))
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(STAMP.match(line) for line in lines)
    # 2 pages in 31 s: 0.06 pages/s; 98 pages left at that rate: 1519 s
    assert lines[1].endswith("page 2/100 of big.pdf, 0.06 pages/s, ETA 0:25:19"), lines[1]
    assert STAMP.match(err.getvalue()) and err.getvalue().count("\n") == 1


def test_timer_heartbeat_covers_one_slow_page():
    clock = FakeClock()
    rep, out, _ = _reporter("plain", clock, heartbeat_s=30)
    rep.start(1, 12, [DocumentPlan("slow.pdf", 12)])
    clock.now += 29
    rep.tick()
    assert len(out.getvalue().splitlines()) == 1
    clock.now += 1
    rep.tick()  # no page has ended yet, but 30 s have passed
    lines = out.getvalue().splitlines()
    assert lines[-1].endswith("page 0/12 of slow.pdf, 0.00 pages/s, ETA unknown")
    clock.now += 5
    rep.tick()
    assert len(out.getvalue().splitlines()) == 2  # the heartbeat itself was a line


def test_eta_comes_from_pages_left_and_the_summary_pages_per_s():
    clock = FakeClock()
    rep, _, _ = _reporter("plain", clock)
    rep.start(2, 102, [DocumentPlan("a.pdf", 2), DocumentPlan("b.pdf", 100)])
    clock.now += 50  # model loading: not part of pages/s, as in summary.json
    rep.timing_from(clock.now)
    clock.now += 4
    rep.page(5, 1, _event("a.pdf", 1))
    rep.page(0, 0, _event("a.pdf", 2, "failed"))  # finished, but not converted
    rep.document("a.pdf", {"1": "ok", "2": "failed"}, None)
    assert rep.counters.pages_per_s == pytest.approx(1 / 4)
    assert rep.counters.eta_s == pytest.approx(100 * 4)  # not 1 document left at 1 doc / 4 s
    assert "page 0/100 of b.pdf, 0.25 pages/s, ETA 0:06:40" in rep.heartbeat_text()


def test_document_cut_short_does_not_count_as_done():
    clock = FakeClock()
    rep, _, err = _reporter("json", clock)
    rep.start(1, 3, [DocumentPlan("a.pdf", 3)])
    rep.page(5, 1, _event("a.pdf", 1))
    clock.now += 2
    rep.document("a.pdf", {"1": "ok", "2": "missing", "3": "missing"}, None)
    doc = [json.loads(line) for line in err.getvalue().splitlines()][-1]
    assert doc["event"] == "document" and doc["complete"] is False
    assert doc["seconds"] == pytest.approx(3.0)  # from the start of its first page


def test_json_events_parse_and_the_summary_is_last():
    clock = FakeClock()
    rep, out, err = _reporter("json", clock, heartbeat_s=30)
    rep.start(1, 2, [DocumentPlan("a.pdf", 2)])
    rep.notice("skipped notes.txt: not a PDF or image")
    rep.page(5, 1, _event("a.pdf", 1, "ok", 0.5))
    rep.page(3, 1, _event("a.pdf", 2, "truncated", 0.7))
    rep.problem("a.pdf page 3: cannot render page")
    clock.now += 31
    rep.tick()
    rep.document("a.pdf", {"1": "ok", "2": "truncated"}, None)
    rep.finish(_summary(converted=2, ok=1, truncated=1))
    assert out.getvalue() == ""  # stdout stays free for `--summary -`
    events = [json.loads(line) for line in err.getvalue().splitlines()]
    assert [e["event"] for e in events] == ["start", "notice", "page", "page", "error", "progress",
                                            "document", "summary"]
    assert all(STAMP.match(e["time"] + " ") for e in events)
    page = events[3]
    assert (page["status"], page["reason"], page["seconds"]) == ("truncated", "truncated: why", 0.7)
    assert page["output"] == "out/a.pdf/page-0002.json" and page["page"] == 2
    assert events[-1]["pages_per_s"] == 1.27 and events[-1]["pages"]["truncated"] == 1


@pytest.mark.parametrize("quiet", [False, True])
def test_a_page_that_is_not_ok_is_told_once_even_when_quiet(quiet):
    """In json, one page event with its status and reason (no error event beside it);
    otherwise one problem line. `--quiet` keeps it: problems are always shown."""
    clock = FakeClock()
    rep = Reporter("json", quiet=quiet, clock=clock, timer=False, out=io.StringIO(),
                   err=(err := io.StringIO()))
    rep.start(1, 3, [DocumentPlan("a.pdf", 3)])
    rep.page(5, 1, _event("a.pdf", 1))
    rep.page(0, 0, _event("a.pdf", 2, "failed"))
    rep.page(0, 0, _event("a.pdf", 3, "timeout"))
    events = [json.loads(line) for line in err.getvalue().splitlines()]
    pages = [e for e in events if e["event"] == "page"]
    assert [(e["page"], e["status"], e["reason"]) for e in pages] == \
        [(1, "ok", None)] * (not quiet) + [(2, "failed", "failed: why"), (3, "timeout", "timeout: why")]
    assert not any(e["event"] == "error" for e in events)

    plain = Reporter("plain", quiet=quiet, clock=clock, timer=False, out=io.StringIO(),
                     err=(err := io.StringIO()))
    plain.start(1, 3, [DocumentPlan("a.pdf", 3)])
    plain.page(5, 1, _event("a.pdf", 1))
    plain.page(0, 0, _event("a.pdf", 2, "failed"))
    plain.page(3, 1, _event("a.pdf", 3, "truncated"))
    lines = [STAMP.sub("", line) for line in err.getvalue().splitlines()]
    assert lines == ["ocrcli: a.pdf page 2: failed: why",
                     "ocrcli: a.pdf page 3: truncated: truncated: why"]


def test_end_table_has_every_status_and_failed_documents():
    rows = dict(summary_rows(_summary(converted=45, ok=3, truncated=2, degenerate=40, failed=5,
                                      timeout=1)))
    assert rows["pages ok"] == "3" and rows["pages degenerate"] == "40"
    assert rows["pages truncated"] == "2" and rows["pages failed (timed out included)"] == "5"
    assert rows["pages timed out"] == "1" and rows["documents failed"] == "1"
    assert rows["pages/s"] == "1.27"


def test_rich_bars_stay_put_after_an_interrupt_and_show_the_summary_rate():
    clock = FakeClock()
    err = io.StringIO()
    rep = Reporter("rich", clock=clock, err=err)
    rep.start(2, 4, [DocumentPlan("a.pdf", 2), DocumentPlan("b.pdf", 2)])
    rep.timing_from(clock.now)
    clock.now += 2
    rep.page(5, 1, _event("a.pdf", 1))
    rep.page(5, 1, _event("a.pdf", 2))
    rep.document("a.pdf", {"1": "ok", "2": "ok"}, None)
    rep.page(5, 1, _event("b.pdf", 1))
    tasks = rep._progress.tasks
    assert "b.pdf page 1/2" in tasks[0].fields["info"]
    assert tasks[0].fields["eta"] == "ETA 0:00:01"  # 1 page left at 1.5 pages/s
    rep.document("b.pdf", {"1": "ok", "2": "missing"}, None)  # an interrupt cut it short
    rep.finish(_summary(converted=3, ok=3) | {"interrupted": True})
    assert tasks[0].completed == 1 and tasks[1].completed == 3
    assert "1.27 pages/s" in tasks[1].fields["info"]  # the summary's figure, not the bar's
    assert "pages degenerate" in err.getvalue() and "interrupted" in err.getvalue()


def test_heartbeat_thread_writes_on_a_real_clock():
    """The timer thread writes heartbeats while nothing else happens, and stops with the run
    (waited for, not timed: a loaded CPU may wake the thread late)."""
    out = io.StringIO()
    rep = Reporter("plain", heartbeat_s=0.05, out=out, err=io.StringIO())

    def beats() -> int:
        return sum("page 0/5 of a.pdf" in line for line in out.getvalue().splitlines())

    rep.start(1, 5, [DocumentPlan("a.pdf", 5)])
    give_up = time.monotonic() + 60
    while beats() < 2 and time.monotonic() < give_up:
        time.sleep(0.01)
    rep.finish(_summary())
    assert beats() >= 2
    assert not any(t.name == "ocrcli-heartbeat" for t in threading.enumerate())
    after = beats()
    time.sleep(0.2)
    assert beats() == after  # stopped: no heartbeat after the summary


# -- the real command -----------------------------------------------------------------------

def _pdf(tmp_path: Path, pages: int) -> Path:
    """`pages` pages cycled from samples/report.pdf."""
    path = tmp_path / f"doc-{pages}.pdf"
    with pikepdf.open(SAMPLES / "report.pdf") as src, pikepdf.new() as dst:
        for i in range(pages):
            dst.pages.append(src.pages[i % len(src.pages)])
        dst.save(path)
    return path


def _run_timed(args: list[str], env: dict[str, str]) -> tuple[int, list[tuple[float, str]]]:
    """The CLI with stdout and stderr merged, each line with the time it arrived."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1") | env
    proc = subprocess.Popen([sys.executable, "-m", "ocrcli.cli", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [(time.monotonic(), line.rstrip("\n")) for line in proc.stdout]
    return proc.wait(timeout=600), lines


# Slow by design (decode steps that sleep for seconds), and it times the gaps between lines,
# which a loaded CPU stretches: the fast set
# keeps the same behaviour on a fake clock (test_timer_heartbeat_covers_one_slow_page,
# test_plain_heartbeat_when_a_page_ends_after_the_interval) and the timer thread on a real one.
@pytest.mark.slow
def test_plain_lines_are_timestamped_and_slow_pages_leave_no_gap(tmp_path):
    """Every decode step sleeps 0.6 s (a slow device) and all requests of both pages decode
    together, so no page ends for about 5 s: only the timer's heartbeat can fill that."""
    doc = _pdf(tmp_path, 2)
    code, lines = _run_timed(
        ["convert", str(doc), "-o", str(tmp_path / "out"), "--log", "plain", *FAST,
         "--draft-depth", "0", "--batch-size", "64"],
        {"OCRCLI_HEARTBEAT_S": "1", "OCRCLI_ENABLE_FAULTS": "1",
         "OCRCLI_FAULT_STEP_DELAY": "0.6"})
    text = "\n".join(line for _, line in lines)
    assert code in (0, 5), text
    assert lines and all(STAMP.match(line) for _, line in lines), text
    stamps = [datetime.fromisoformat(STAMP.match(line)[1]) for _, line in lines]
    assert stamps == sorted(stamps) and stamps[0].utcoffset() is not None
    gaps = [b - a for (a, _), (b, _) in zip(lines, lines[1:])]
    assert lines[-1][0] - lines[0][0] > 4, text  # the slow stretch happened
    assert max(gaps) < 2.0, (max(gaps), text)  # 1 s heartbeat plus a wake-up's slack
    beats = [line for _, line in lines if f"page 0/2 of {doc}, 0.00 pages/s, ETA unknown" in line]
    assert len(beats) >= 3, text
    assert sum(f"{doc}: " in line for _, line in lines) == 1  # the document line, as before
    assert "pages degenerate" in lines[-1][1] and "pages truncated" in lines[-1][1]


def test_json_lines_all_parse_with_page_events_and_the_summary_last(tmp_path):
    doc = _pdf(tmp_path, 3)
    (tmp_path / "notes.txt").write_text("not a document")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "ocrcli.cli", "convert", str(doc),
                        str(tmp_path / "notes.txt"), "-o", str(out), "--log", "json", *FAST],
                       cwd=REPO, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode in (0, 5), r.stderr
    assert r.stdout == ""
    events = [json.loads(line) for line in r.stderr.splitlines()]  # every line parses
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "summary" and kinds.count("summary") == 1
    assert any(e["event"] == "notice" and "notes.txt" in e["message"] for e in events)
    pages = [e for e in events if e["event"] == "page"]
    assert sorted(e["page"] for e in pages) == [1, 2, 3]
    for e in pages:
        assert e["status"] in ("ok", "truncated", "degenerate") and e["seconds"] > 0
        assert e["source"].endswith(doc.name) and Path(e["output"]).is_file()
        assert (e["reason"] is None) == (e["status"] == "ok")
    summary = json.loads((out / "summary.json").read_text())
    assert {k: v for k, v in events[-1].items() if k not in ("event", "time")} == summary
    assert [e for e in events if e["event"] == "document"][0]["complete"] is True


def test_a_failed_page_is_one_page_event_with_its_reason(tmp_path):
    """Every decode pass runs out of memory (a device that fits no row): the page fails, and
    the log says so once, in its page event."""
    out = tmp_path / "out"
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", str(out), "--log", "json", *FAST,
                env={"OCRCLI_ENABLE_FAULTS": "1", "OCRCLI_FAULT_OOM_ROWS_OVER": "0"}, timeout=600)
    assert r.returncode == 1, r.stderr
    events = [json.loads(line) for line in r.stderr.splitlines()]
    told = [e for e in events if e["event"] not in ("summary", "document")
            and OOM_MESSAGE in json.dumps(e)]
    assert len(told) == 1, r.stderr
    assert (told[0]["event"], told[0]["page"], told[0]["status"], told[0]["reason"]) == \
        ("page", 1, "failed", OOM_MESSAGE)
    assert not any(e["event"] == "error" for e in events), r.stderr
    assert events[-1]["event"] == "summary" and events[-1]["failures"][0]["error"] == OOM_MESSAGE


JSON = ("--log", "json")
JSON_ERRORS = {
    "unknown option": (["convert", "--bogus", *JSON], 2, "No such option: --bogus"),
    "missing option": (["convert", "--log=json"], 2, "Missing option '-o' / '--out'"),
    "bad value": (["convert", "x.pdf", "-o", "out", "--dpi", "5", *JSON], 2,
                  "Invalid value for '--dpi'"),
    "no inputs": (["convert", "-o", "out", *JSON], 2, "no inputs"),
    "unwritable output": (["convert", str(SAMPLES / "memo.jpg"), "-o", "blocker/out", *JSON], 4,
                          "output folder blocker/out is not writable"),
}


@pytest.mark.parametrize("args, code, expected", JSON_ERRORS.values(), ids=JSON_ERRORS.keys())
def test_an_error_that_ends_the_run_is_one_json_event(tmp_path, args, code, expected):
    """Usage errors (found while the command line is parsed, `--log json` or `--log=json`)
    and fatal errors alike."""
    (tmp_path / "blocker").write_text("a file, not a folder")
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == code, r.stderr
    assert r.stdout == ""
    (line,) = r.stderr.splitlines()
    event = json.loads(line)
    assert event["event"] == "error" and event["exit_code"] == code, line
    assert event["message"].startswith(expected), line
    assert STAMP.match(event["time"] + " ")


def test_a_bug_is_one_json_event_with_its_traceback_under_debug(tmp_path):
    env = _with_a_bug(tmp_path, BUG_IN_CONVERT)
    args = ["convert", str(SAMPLES / "memo.jpg"), "-o", str(tmp_path / "out"), "--log", "json", *FAST]
    for debug in ([], ["--debug"]):
        r = run_cli(*args, *debug, env=env)
        assert r.returncode == 15, r.stderr
        (line,) = [e for e in r.stderr.splitlines() if '"event":"error"' in e]
        assert all(json.loads(e) for e in r.stderr.splitlines())  # every line is an event
        event = json.loads(line)
        assert event["exit_code"] == 15
        assert event["message"].startswith("internal error: ZeroDivisionError: injected bug")
        assert ("traceback" in event) == bool(debug)
        if debug:
            assert 'raise ZeroDivisionError("injected bug")' in event["traceback"]
