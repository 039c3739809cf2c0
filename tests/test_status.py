"""`ocrcli status`: pages done, failed and missing in OUT, against the inputs or the manifests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ocrcli.status import _ranges, status_from_inputs, status_from_manifests
from tests.conftest import SAMPLES, run_cli
from tests.test_shards import all_pages, small_documents


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> tuple[Path, Path, dict[str, int]]:
    """One real conversion of a folder of small documents, shared read-only by the tests."""
    root = tmp_path_factory.mktemp("status")
    src = root / "in"
    expected = small_documents(src)
    out = root / "out"
    r = run_cli("convert", str(src), "-o", str(out), "--max-new-tokens", "8",
        "--accept", "truncated,degenerate", "--render-workers", "0",
                "--quiet")
    assert r.returncode == 0, r.stderr
    return src, out, expected


@pytest.fixture
def run(converted, tmp_path) -> tuple[Path, Path, dict[str, int]]:
    """A copy of the converted run that a test may damage."""
    src, out, expected = converted
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    return src, copy, expected


def status(*args: str) -> tuple[int, dict]:
    r = run_cli("status", *map(str, args), "--json")
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {}


def test_complete_run_exits_0_both_ways(run):
    src, out, expected = run
    total = sum(expected.values())
    for args in [(out, src), (out,)]:
        code, report = status(*args)
        assert code == 0, report
        assert report["complete"] and report["pages"]["total"] == report["pages"]["done"] == total
        assert report["pages"]["missing"] == report["pages"]["failed"] == 0
        assert len(report["fingerprints"]) == 1
    assert status(out)[1]["from"] == "manifests" and status(out, src)[1]["from"] == "inputs"
    r = run_cli("status", str(out), str(src))
    assert r.returncode == 0 and "complete" in r.stdout and f"{total} done" in r.stdout


def test_deleted_page_is_missing(run):
    src, out, expected = run
    (out / "in" / "sub" / "deep" / "c.pdf" / "page-0002.json").unlink()
    for args in [(out, src), (out,)]:
        code, report = status(*args)
        assert code == 1
        assert report["pages"]["missing"] == 1 and report["pages"]["done"] == sum(expected.values()) - 1
        [doc] = report["incomplete"]
        assert doc["rel"] == "in/sub/deep/c.pdf" and doc["missing"] == [2]
    r = run_cli("status", str(out), str(src))
    assert r.returncode == 1 and "in/sub/deep/c.pdf: missing page 2" in r.stdout
    # The page was not asked for: complete.
    assert status(out, src, "--pages", "1")[0] == 0


def test_failed_page_is_counted_with_its_reason(run):
    src, out, _ = run
    page = out / "in" / "f03.png" / "page-0001.json"
    record = json.loads(page.read_text())
    record.update(status="failed", error="cannot render page: boom")
    page.write_text(json.dumps(record))
    code, report = status(out, src)
    assert code == 1 and report["pages"]["failed"] == 1
    assert report["incomplete"][0]["errors"] == {"1": "cannot render page: boom"}
    r = run_cli("status", str(out), str(src))
    assert "in/f03.png: failed page 1; page 1: cannot render page: boom" in r.stdout


def test_documents_never_started_need_the_inputs(run):
    src, out, expected = run
    shutil.rmtree(out / "in" / "f07.png")
    (out / "in" / "f07.png.md").unlink()
    code, report = status(out, src)
    assert code == 1 and report["incomplete"][0]["rel"] == "in/f07.png" and report["pages"]["missing"] == 1
    code, report = status(out)  # the manifests alone cannot know f07.png existed
    assert code == 0 and report["documents"] == len(expected) - 1
    assert "documents that no worker started" in report["notices"][0]


def test_document_without_manifest_is_unfinished(run):
    src, out, _ = run
    (out / "in" / "sub" / "deep" / "c.pdf" / "manifest.json").unlink()
    (out / "in" / "sub" / "deep" / "c.pdf" / "page-0002.json").unlink()
    code, report = status(out)
    assert code == 1 and report["documents_unfinished"] == 1
    [doc] = report["incomplete"]
    assert doc["rel"] == "in/sub/deep/c.pdf" and doc["unfinished"] and doc["source"].endswith("c.pdf")
    code, report = status(out, src)  # the inputs know its page count
    assert code == 1 and report["incomplete"][0]["missing"] == [2]


def test_unreadable_document_fails(run, tmp_path):
    src, out, _ = run
    good = (SAMPLES / "report.pdf").read_bytes()
    (src / "corrupt.pdf").write_bytes(good[: len(good) // 3])
    try:
        code, report = status(out, src)
    finally:
        (src / "corrupt.pdf").unlink()  # the source folder is shared by the module's tests
    assert code == 1 and report["documents_failed"] == 1
    assert "not a readable PDF" in report["incomplete"][0]["error"]


def test_fingerprint_marks_other_settings_stale(run):
    src, out, expected = run
    fp = json.loads((out / "summary.json").read_text())["fingerprint"]
    assert status(out, src, "--fingerprint", fp)[0] == 0
    code, report = status(out, src, "--fingerprint", "0000000000000000")
    assert code == 1 and report["pages"]["stale"] == sum(expected.values())
    assert report["pages"]["done"] == 0


def test_shard_option_checks_one_shard(run):
    src, out, _ = run
    from ocrcli.inputs import collect

    second = [d.rel for d in collect([str(src)], shard=(2, 2))[0]]
    for rel in second:
        shutil.rmtree(out / rel)
    assert status(out, src, "--shard", "1/2")[0] == 0
    assert status(out, "--shard", "1/2")[0] == 0
    code, report = status(out, src, "--shard", "2/2")
    assert code == 1 and {d["rel"] for d in report["incomplete"]} == set(second)


def test_usage_errors_exit_2(tmp_path):
    r = run_cli("status", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "pass the inputs" in r.stderr
    assert run_cli("status", str(tmp_path), str(tmp_path / "nope.pdf")).returncode == 2
    assert run_cli("status", str(tmp_path), str(SAMPLES), "--shard", "0/2").returncode == 2


def test_api_counts_match_the_files(run):
    src, out, expected = run
    result = status_from_inputs(out, [str(src)])
    pages = {f"{d.rel}#{p}" for d in result.documents for p in d.pages}
    assert pages == all_pages(expected) and result.complete
    assert status_from_manifests(out).page_counts()["done"] == len(pages)


def test_ranges():
    assert _ranges([7, 1, 2, 3, 9, 10]) == "1-3,7,9-10"
    assert _ranges([4]) == "4"
