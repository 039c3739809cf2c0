"""End-to-end: the real `ocrcli` entry point in a subprocess, on real files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pypdfium2 as pdfium
import pytest
from PIL import Image

from tests.conftest import SAMPLES, real_data, run_cli
from tests.pdf_fixtures import encrypted_pdf


def _pages(out: Path) -> list[Path]:
    return sorted(out.rglob("page-*.json"))


def test_version_and_models():
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("ocrcli ")
    r = run_cli("models")
    assert r.returncode == 0 and "builtin" in r.stdout and "jinaai/jina-ocr-v1" in r.stdout


@pytest.mark.slow
def test_convert_samples_then_resume(tmp_path):
    out = tmp_path / "out"
    r = run_cli("convert", str(SAMPLES), "-o", str(out), "--summary", "-")
    assert r.returncode == 0, r.stderr
    assert "supported image" not in r.stderr  # no "skipped ...": the folder holds documents only
    summary = json.loads(r.stdout)
    assert summary["pages"]["failed"] == 0 and summary["pages"]["converted"] == 6
    for name, n in [("samples/report.pdf", 3), ("samples/scanned-invoice.pdf", 1),
                    ("samples/reading-order.png", 1), ("samples/memo.jpg", 1)]:
        for p in range(1, n + 1):
            page = json.loads((out / name / f"page-{p:04d}.json").read_text())
            assert page["status"] in ("ok", "truncated", "degenerate")
            assert page["page"] == p and page["width"] > 0 and page["fingerprint"]
            assert (out / name / f"page-{p:04d}.md").exists()
        assert (out / f"{name}.md").exists()
        assert json.loads((out / name / "manifest.json").read_text())["page_count"] == n
    # A rerun skips everything; deleting one page's files redoes that page only.
    r = run_cli("convert", str(SAMPLES), "-o", str(out), "--summary", "-")
    again = json.loads(r.stdout)
    assert r.returncode == 0 and again["pages"]["skipped"] == 6 and again["pages"]["converted"] == 0
    (out / "samples" / "report.pdf" / "page-0002.json").unlink()
    (out / "samples" / "report.pdf" / "page-0002.md").unlink()
    r = run_cli("convert", str(SAMPLES), "-o", str(out), "--summary", "-")
    third = json.loads(r.stdout)
    assert third["pages"]["converted"] == 1 and third["pages"]["skipped"] == 5
    # A changed setting that affects output redoes the pages.
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", str(out / "m"), "--summary", "-",
                "--max-new-tokens", "40", "--accept", "truncated,degenerate")
    assert json.loads(r.stdout)["pages"]["converted"] == 1


def _bad_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(SAMPLES / "scanned-invoice.pdf", folder / "good.pdf")
    good = (SAMPLES / "report.pdf").read_bytes()
    (folder / "corrupt.pdf").write_bytes(good[: len(good) // 3])
    (folder / "empty.pdf").write_bytes(b"")
    (folder / "encrypted.pdf").write_bytes(encrypted_pdf("secret"))
    (folder / "notes.txt").write_text("not a document")
    return folder


def test_bad_inputs_are_recorded_and_exit_1(tmp_path):
    folder = _bad_folder(tmp_path)
    out = tmp_path / "out"
    r = run_cli("convert", str(folder), "-o", str(out), "--summary", "-", "--max-new-tokens", "8",
        "--accept", "truncated,degenerate")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    summary = json.loads(r.stdout)
    failed = {Path(f["source"]).name: f["error"] for f in summary["failures"]}
    assert set(failed) == {"corrupt.pdf", "empty.pdf", "encrypted.pdf"}
    assert "password" in failed["encrypted.pdf"]
    assert "empty" in failed["empty.pdf"]
    for name in failed:
        assert name in r.stderr and "\n" not in failed[name]
    assert "notes.txt" in r.stderr  # unknown types are skipped with a notice
    assert json.loads((out / "in" / "good.pdf" / "page-0001.json").read_text())["status"] != "failed"


def test_encrypted_pdf_converts_with_password(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "locked.pdf").write_bytes(encrypted_pdf("secret"))
    r = run_cli("convert", str(folder), "-o", str(tmp_path / "out"), "--password", "secret",
                "--summary", "-", "--max-new-tokens", "8", "--accept", "truncated,degenerate")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["pages"]["converted"] == 1


def test_owner_password_only_pdf_converts(tmp_path):
    path = tmp_path / "owner-only.pdf"
    path.write_bytes(encrypted_pdf(""))
    r = run_cli("convert", str(path), "-o", str(tmp_path / "out"), "--summary", "-",
                "--max-new-tokens", "8", "--accept", "truncated,degenerate")
    assert r.returncode == 0, r.stderr


def test_usage_errors_exit_2(tmp_path):
    assert run_cli("convert", str(tmp_path / "nope.pdf"), "-o", str(tmp_path / "o")).returncode == 2
    assert run_cli("convert", str(SAMPLES), "-o", str(tmp_path / "o"), "--pages", "x").returncode == 2
    assert run_cli("convert", str(SAMPLES), "-o", str(tmp_path / "o"), "--shard", "3/2").returncode == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_cli("convert", str(empty), "-o", str(tmp_path / "o"))
    assert r.returncode == 2 and "no PDF or image" in r.stderr


def test_unwritable_output_fails_before_work(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", str(blocker / "out"))
    assert r.returncode == 4 and "not writable" in r.stderr and "Traceback" not in r.stderr


def test_broken_model_folder_fails_before_any_page(tmp_path):
    from ocrcli.models.builtin import BUILTIN_DIR

    folder = tmp_path / "model"
    shutil.copytree(BUILTIN_DIR, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    (folder / "tokenizer.json").unlink()
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", str(tmp_path / "o"), "--model", str(folder))
    assert r.returncode == 3 and "tokenizer.json" in r.stderr
    assert not (tmp_path / "o" / "memo.jpg").exists()


def test_output_mirrors_input_tree_and_pages_option(tmp_path):
    tree = tmp_path / "in"
    (tree / "a").mkdir(parents=True)
    (tree / "b").mkdir()
    shutil.copy(SAMPLES / "reading-order.png", tree / "a" / "doc.png")
    shutil.copy(SAMPLES / "report.pdf", tree / "b" / "doc.pdf")
    out = tmp_path / "out"
    r = run_cli("convert", str(tree), "-o", str(out), "--pages", "2", "--max-new-tokens", "6",
        "--accept", "truncated,degenerate",
                "--summary", "-")
    assert r.returncode == 0, r.stderr
    assert (out / "in" / "b" / "doc.pdf" / "page-0002.json").exists()
    assert not (out / "in" / "b" / "doc.pdf" / "page-0001.json").exists()
    assert not (out / "in" / "a" / "doc.png" / "page-0001.json").exists()  # one page only


def test_tiff_with_several_frames(tmp_path):
    frames = [Image.open(SAMPLES / "reading-order.png").convert("L"),
              Image.open(SAMPLES / "memo.jpg").convert("L")]
    path = tmp_path / "two.tiff"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    r = run_cli("convert", str(path), "-o", str(tmp_path / "o"), "--summary", "-",
                "--max-new-tokens", "6", "--accept", "truncated,degenerate")
    assert r.returncode == 0 and json.loads(r.stdout)["pages"]["converted"] == 2


@pytest.mark.slow
def test_every_olmocr_sample_pdf_yields_output_or_failure(tmp_path):
    pdfs = real_data("olmocr-bench-sample/pdfs")
    out = tmp_path / "out"
    r = run_cli("convert", str(pdfs), "-o", str(out), "--summary", "-", "--max-new-tokens", "24",
        "--accept", "truncated,degenerate",
                "--batch-size", "32")
    assert r.returncode in (0, 1), r.stderr
    assert "Traceback" not in r.stderr
    summary = json.loads(r.stdout)
    total = sum(len(pdfium.PdfDocument(str(pdf))) for pdf in sorted(pdfs.rglob("*.pdf")))
    records = [json.loads(p.read_text()) for p in out.rglob("page-*.json")]
    assert len(records) == total
    for record in records:
        assert record["status"] in ("ok", "truncated", "degenerate", "failed")
        assert record["status"] != "failed" or record["error"]
    assert summary["pages"]["converted"] + summary["pages"]["failed"] == total


# The fast set keeps test_output.py's test_format_json_pages_resume_and_markdown_comes_back_from_the_json.
@pytest.mark.slow
def test_format_json_reruns_skip_done_pages_and_md_comes_back_without_decoding(tmp_path):
    out = tmp_path / "out"
    args = ("convert", str(SAMPLES / "memo.jpg"), "-o", str(out), "--summary", "-",
            "--max-new-tokens", "6", "--accept", "truncated,degenerate")
    first = run_cli(*args, "--format", "json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["pages"]["converted"] == 1
    page = out / "memo.jpg" / "page-0001"
    assert page.with_suffix(".json").exists() and not page.with_suffix(".md").exists()
    for formats in ("json", "md"):  # md: the JSON's text becomes the .md, no page is decoded
        r = run_cli(*args, "--format", formats)
        assert r.returncode == 0, r.stderr
        pages = json.loads(r.stdout)["pages"]
        assert pages["skipped"] == 1 and pages["converted"] == 0, formats
    text = json.loads(page.with_suffix(".json").read_text())["text"]
    assert text and page.with_suffix(".md").read_text(encoding="utf-8") == text + "\n"


def test_format_json_rerun_writes_no_markdown(tmp_path):
    Image.new("L", (64, 48), 255).save(tmp_path / "blank.png")
    out = tmp_path / "out"
    for _ in range(2):
        r = run_cli("convert", str(tmp_path / "blank.png"), "-o", str(out), "--format", "json",
                    "--max-new-tokens", "6", "--accept", "truncated,degenerate")
        assert r.returncode == 0, r.stderr
    assert not list(out.rglob("page-*.md"))


@pytest.mark.slow  # the fast set keeps test_inputs.py's test_same_stem_files_keep_apart_by_extension
def test_same_stem_files_get_their_own_outputs(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(SAMPLES / "report.pdf", folder / "a.pdf")
    shutil.copy(SAMPLES / "reading-order.png", folder / "a.png")
    out = tmp_path / "out"
    r = run_cli("convert", str(folder), "-o", str(out), "--pages", "1", "--max-new-tokens", "6",
        "--accept", "truncated,degenerate")
    assert r.returncode == 0, r.stderr
    for name in ("a.pdf", "a.png"):
        record = json.loads((out / "in" / name / "page-0001.json").read_text())
        assert Path(record["source"]).name == name
        assert json.loads((out / "in" / name / "manifest.json").read_text())["source"] == record["source"]
        assert (out / "in" / f"{name}.md").exists()


def test_unreadable_document_is_finished_like_any_other(tmp_path):
    """Its manifest comes from OutputTree.write_document, which also clears temp files that a
    killed run left in the document's folder."""
    import subprocess

    from ocrcli.output import _host

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "corrupt.pdf").write_bytes((SAMPLES / "report.pdf").read_bytes()[:500])
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / "out" / "in" / "corrupt.pdf" / f".ocrcli-{_host()}-{dead.pid}.dead.tmp"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half")
    r = run_cli("convert", str(folder), "-o", str(tmp_path / "out"), "--max-new-tokens", "6",
        "--accept", "truncated,degenerate")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    manifest = json.loads((stale.parent / "manifest.json").read_text())
    assert manifest["page_count"] == 0 and manifest["pages"] == {} and "PDF" in manifest["error"]
    assert not stale.exists()
