"""End-to-end: the command line behaves as a Unix tool should (stdout for pipes, input lists,
text files that end in a newline, one-line usage errors, no debris), through the real entry
point in a subprocess."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ocrcli.inputs import document_names, in_shard
from ocrcli.pipe import means_stdout
from tests.conftest import SAMPLES, run_cli

# Small and fast: the content does not matter here, so pages may come out `truncated`.
FAST = ("--max-new-tokens", "6", "--accept", "truncated,degenerate", "--render-workers", "0",
        "--dpi", "72")


def _one_error_line(r) -> str:
    """The stderr of a refused command: exactly one `ocrcli: error: ...` line."""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ocrcli: error: "), r.stderr
    return lines[0]


def _ends_with_one_newline(path: Path) -> bool:
    data = path.read_bytes()
    return data.endswith(b"\n") and not data.endswith(b"\n\n")


def _copy_samples(folder: Path, names: dict[str, str]) -> Path:
    """`names`: new name -> sample file."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, sample in names.items():
        shutil.copy(SAMPLES / sample, folder / name)
    return folder


# -- 1. `-o -`: one document's Markdown on stdout -------------------------------------------


def test_out_dash_prints_the_whole_document_markdown_and_nothing_else(tmp_path):
    pdf = str(SAMPLES / "report.pdf")
    folder = tmp_path / "folder"
    r = run_cli("convert", pdf, "-o", str(folder), "--pages", "1-2", *FAST)
    assert r.returncode == 0, r.stderr
    whole = (folder / "report.pdf.md").read_bytes()
    temp, cwd = tmp_path / "tmp", tmp_path / "cwd"
    temp.mkdir()
    cwd.mkdir()
    # --format json: the page files are not kept in this mode, so it changes nothing.
    r = run_cli("convert", pdf, "-o", "-", "--pages", "1-2", "--format", "json", *FAST,
                cwd=cwd, env={"TMPDIR": str(temp)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.encode() == whole  # the bytes of OUT/<name>.md, separators included
    assert r.stdout.startswith("<!-- page 1 -->\n\n") and "\n\n<!-- page 2 -->\n\n" in r.stdout
    assert "report.pdf" in r.stderr  # progress went to stderr
    assert not list(cwd.iterdir()) and not list(temp.iterdir())  # no folder "-", no temp left


def test_out_dash_refuses_several_documents_and_a_second_stdout(tmp_path):
    r = run_cli("convert", str(SAMPLES), "-o", "-", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert "4 documents" in _one_error_line(r)
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", "-", "--summary", "-", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "" and "--summary" in _one_error_line(r)
    assert not list(tmp_path.iterdir())


def test_only_a_bare_dash_means_stdout_and_dot_slash_dash_is_a_folder(tmp_path):
    """`-o ./-` (or `-o -/`) names a folder called `-`, as it would for any Unix tool: the
    page files go there, and stdout has the usual progress lines, not the Markdown. (A path
    forgets the spelling, `Path("./-") == Path("-")`: the option's text decides.)"""
    assert means_stdout("-") and not any(means_stdout(s) for s in ("./-", "-/", "--", "a/-"))
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", "./-", *FAST, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "<!-- page 1 -->" not in r.stdout and "memo.jpg: 1 " in r.stdout
    assert (tmp_path / "-" / "memo.jpg" / "page-0001.json").is_file()
    assert (tmp_path / "-" / "memo.jpg.md").is_file() and (tmp_path / "-" / "summary.json").is_file()


# -- 2. --files-from ---------------------------------------------------------------------------


def test_files_from_a_file_and_stdin_keep_spaces_and_add_to_the_arguments(tmp_path):
    src = _copy_samples(tmp_path / "in", {"my memo.jpg": "memo.jpg", " lead.jpg": "memo.jpg"})
    listing = tmp_path / "list.txt"
    listing.write_text("my memo.jpg\n\n  \n lead.jpg\n")  # names relative to the current folder
    out = tmp_path / "out"
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "--files-from", str(listing), "-o", str(out),
                "--summary", "-", *FAST, cwd=src)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["documents"] == 3
    assert {p.name for p in out.glob("*.md")} == {"memo.jpg.md", "my memo.jpg.md", " lead.jpg.md"}
    # `-`: stdin. `status` reads the inputs as `convert` does (the same code), without
    # loading a model: the one document listed is found, under its name with the space.
    r = run_cli("status", str(out), "--files-from", "-", "--json", cwd=src, stdin=" lead.jpg\n")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["documents"] == 1 and report["pages"]["done"] == 1 and report["complete"]


def test_files_from_a_missing_file_is_a_usage_error(tmp_path):
    r = run_cli("convert", "--files-from", str(tmp_path / "nope.txt"), "-o", str(tmp_path / "o"))
    assert r.returncode == 2 and "nope.txt" in _one_error_line(r)
    assert not (tmp_path / "o").exists()


# -- 3. text files end with one newline; resume keeps the pages --------------------------------


def test_markdown_files_end_with_one_newline_and_resume_skips_older_files(tmp_path):
    out = tmp_path / "out"
    args = ("convert", str(SAMPLES / "report.pdf"), "-o", str(out), "--pages", "1-2",
            "--summary", "-", *FAST)
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    pages = sorted((out / "report.pdf").glob("page-*.md"))
    assert len(pages) == 2
    for md in [*pages, out / "report.pdf.md"]:
        assert _ends_with_one_newline(md), md
    # A page file as earlier versions wrote it (no final newline) is done all the same, and
    # the rerun gives it the newline from its JSON's text instead of converting it again.
    text = json.loads(pages[0].with_suffix(".json").read_text())["text"]
    pages[0].write_text(text, encoding="utf-8")
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    counts = json.loads(r.stdout)["pages"]
    assert counts["skipped"] == 2 and counts["converted"] == 0
    assert pages[0].read_text(encoding="utf-8") == text.rstrip() + "\n"


# -- 4. --device -------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "CPU"])
def test_an_unknown_device_is_a_usage_error_before_any_work(tmp_path, device):
    out = tmp_path / "o"
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", str(out), "--device", device)
    assert r.returncode == 2
    assert _one_error_line(r) == ("ocrcli: error: --device must be one of auto, cpu, cuda, "
                                  f"cuda:N, mps (got {device!r})")
    assert not out.exists()


def test_eval_checks_the_device_too(tmp_path):
    r = run_cli("eval", str(tmp_path), "-o", str(tmp_path / "w"), "--device", "gpu")
    assert r.returncode == 2 and "--device must be one of" in _one_error_line(r)


# -- 5. no empty output folders ----------------------------------------------------------------


def test_a_failed_run_removes_the_output_folders_it_created(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "new" / "deep"
    r = run_cli("convert", str(empty), "-o", str(out))
    assert r.returncode == 2 and "no PDF or image" in _one_error_line(r)
    assert not (tmp_path / "new").exists()
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", str(out), "--model",
                str(tmp_path / "no-such-model"))
    assert r.returncode == 3 and not (tmp_path / "new").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    r = run_cli("convert", str(empty), "-o", str(existing))
    assert r.returncode == 2 and existing.is_dir()  # a folder the run did not create stays


# -- 6. a shard with no documents --------------------------------------------------------------


def test_an_empty_shard_exits_0_with_a_zero_page_summary(tmp_path):
    src = _copy_samples(tmp_path / "in", {"memo.jpg": "memo.jpg"})
    [name] = document_names([str(src)])
    k = next(k for k in (1, 2) if not in_shard(name, (k, 2)))
    out = tmp_path / "out"
    r = run_cli("convert", str(src), "-o", str(out), "--shard", f"{k}/2")
    assert r.returncode == 0, r.stderr
    assert f"shard {k}/2 has no documents (1 document in all)" in r.stderr
    summary = json.loads((out / f"summary-shard-{k}-of-2.json").read_text())
    assert summary["documents"] == 0 and summary["pages"]["converted"] == 0
    assert summary["exit_code"] == 0
    r = run_cli("status", str(out), str(src), "--shard", f"{k}/2")
    assert r.returncode == 0 and "complete" in r.stdout, r.stdout + r.stderr


# -- 7. eval -----------------------------------------------------------------------------------


def _bench(folder: Path, rules: list[dict]) -> Path:
    _copy_samples(folder / "pdfs", {"r.pdf": "report.pdf"})
    (folder / "text.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rules))
    return folder


RULE = {"pdf": "r.pdf", "page": 1, "id": "t1", "type": "present", "text": "Report"}


def test_eval_writes_only_under_its_out_folder(tmp_path):
    bench = _bench(tmp_path / "bench", [RULE])
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    r = run_cli("eval", str(bench), "-o", str(tmp_path / "work"), "--max-new-tokens", "6",
                "--json", cwd=cwd)
    assert r.returncode in (0, 5), r.stderr  # 5: the page is flagged `truncated`
    assert json.loads(r.stdout)["conversion"]["pages"]["converted"] == 1
    assert not list(cwd.iterdir())
    assert (tmp_path / "work" / "ocrcli" / "r_pg1_repeat1.md").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench", "cwd", "work"]


@pytest.mark.parametrize("pdf", ["../../evil.pdf", "/tmp/evil.pdf", "sub/../../evil.pdf"])
def test_eval_refuses_a_bench_pdf_outside_its_folder(tmp_path, pdf):
    bench = _bench(tmp_path / "bench", [RULE, RULE | {"id": "t2", "pdf": pdf}])
    work = tmp_path / "work"
    r = run_cli("eval", str(bench), "-o", str(work))
    assert r.returncode == 2
    line = _one_error_line(r)
    assert "text.jsonl:2:" in line and repr(pdf) in line
    assert not work.exists()


# -- 8. models and status ----------------------------------------------------------------------


def test_models_marks_the_default():
    r = run_cli("models")
    assert r.returncode == 0
    marked = [line for line in r.stdout.splitlines() if line.endswith("(default)")]
    assert marked == ["builtin (default)"]


def test_status_warns_only_when_the_manifests_may_miss_documents(tmp_path):
    src = _copy_samples(tmp_path / "in", {"a.jpg": "memo.jpg", "b.png": "reading-order.png"})
    out = tmp_path / "out"
    r = run_cli("convert", str(src), "-o", str(out), *FAST)
    assert r.returncode == 0, r.stderr
    r = run_cli("status", str(out))
    assert r.returncode == 0 and "complete" in r.stdout and r.stderr == ""  # a finished run
    shutil.rmtree(out / "in" / "b.png")  # as if no worker had started b.png
    r = run_cli("status", str(out))
    assert "no worker started" in r.stderr and "summaries count 2 documents" in r.stderr
    (out / "summary.json").unlink()  # a run still going, or killed
    r = run_cli("status", str(out))
    assert "no worker started" in r.stderr and "no run summary" in r.stderr


def test_status_has_no_page_timeout(tmp_path):
    """`status` counts what is on disk; a time limit per page changes nothing it can see (it
    is not part of the settings fingerprint), so it is not an option of `status`."""
    r = run_cli("status", str(tmp_path), "--page-timeout", "30")
    assert r.returncode == 2
    assert "No such option: --page-timeout" in _one_error_line(r)
