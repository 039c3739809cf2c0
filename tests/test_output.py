import json

from ocrcli.output import OutputTree, PageRecord, atomic_write


def test_atomic_write_leaves_no_temp_files(tmp_path):
    atomic_write(tmp_path / "a" / "f.txt", b"hello")
    atomic_write(tmp_path / "a" / "f.txt", b"world")
    assert (tmp_path / "a" / "f.txt").read_bytes() == b"world"
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["f.txt"]


def test_page_done_needs_a_done_json_with_matching_fingerprint(tmp_path):
    tree = OutputTree(tmp_path)
    rec = PageRecord(source="s.pdf", page=2, status="ok", text="# Hi", fingerprint="fp1")
    tree.write_page("docs/s", rec, {"md", "json"})
    assert tree.is_done("docs/s", 2, "fp1")
    assert not tree.is_done("docs/s", 2, "fp2")
    assert not tree.is_done("docs/s", 1, "fp1")
    failed = PageRecord(source="s.pdf", page=3, status="failed", error="boom", fingerprint="fp1")
    tree.write_page("docs/s", failed, set())
    assert not tree.is_done("docs/s", 3, "fp1")  # failures are retried


def test_document_manifest_and_combined_markdown(tmp_path):
    tree = OutputTree(tmp_path)
    for n in (1, 3):
        tree.write_page("d", PageRecord(source="d.pdf", page=n, status="ok", text=f"page {n}",
                                        fingerprint="f"), {"md", "json"})
    manifest = tree.write_document("d", "d.pdf", 3, "f")
    assert manifest["pages"] == {"1": "ok", "2": "missing", "3": "ok"}
    combined = (tmp_path / "d.md").read_text()
    assert combined.index("page 1") < combined.index("page 3")
    assert json.loads((tmp_path / "d" / "manifest.json").read_text())["page_count"] == 3


def test_format_json_pages_resume_and_markdown_comes_back_from_the_json(tmp_path):
    """--format json writes no .md; a rerun with json skips the page, and one with md (or a
    deleted .md) gets the file back from the JSON's text instead of decoding again."""
    tree = OutputTree(tmp_path)
    md = tmp_path / "d.pdf" / "page-0001.md"
    rec = PageRecord(source="d.pdf", page=1, status="ok", text="# Täst\n\nline", fingerprint="f")
    tree.write_page("d.pdf", rec, {"json"})
    assert not md.exists()
    assert tree.is_done("d.pdf", 1, "f", {"json"}) and not md.exists()
    assert not tree.is_done("d.pdf", 1, "other", {"json"})
    assert tree.is_done("d.pdf", 1, "f", {"md", "json"})
    assert md.read_bytes() == rec.text.encode("utf-8") + b"\n"  # the bytes write_page writes
    md.unlink()
    assert tree.is_done("d.pdf", 1, "f")  # the default is the CLI's: md and json
    assert md.read_bytes() == rec.text.encode("utf-8") + b"\n"


def test_page_written_without_md_removes_an_older_md(tmp_path):
    """A page rewritten without Markdown (--format json, or a failure) must not keep an
    earlier run's .md, which the combined document would pick up."""
    tree = OutputTree(tmp_path)
    old = PageRecord(source="d.pdf", page=1, status="ok", text="old text", fingerprint="a")
    tree.write_page("d", old, {"md", "json"})
    new = PageRecord(source="d.pdf", page=1, status="ok", text="new text", fingerprint="b")
    tree.write_page("d", new, {"json"})
    assert not (tmp_path / "d" / "page-0001.md").exists()
    tree.write_document("d", "d.pdf", 1, "b")
    assert not (tmp_path / "d.md").exists()
