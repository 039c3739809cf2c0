import json

from ocrcli.output import OutputTree, PageRecord, atomic_write


def test_atomic_write_leaves_no_temp_files(tmp_path):
    atomic_write(tmp_path / "a" / "f.txt", b"hello")
    atomic_write(tmp_path / "a" / "f.txt", b"world")
    assert (tmp_path / "a" / "f.txt").read_bytes() == b"world"
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["f.txt"]


def test_page_done_needs_matching_fingerprint_and_both_files(tmp_path):
    tree = OutputTree(tmp_path)
    rec = PageRecord(source="s.pdf", page=2, status="ok", text="# Hi", fingerprint="fp1")
    tree.write_page("docs/s", rec, {"md", "json"})
    assert tree.is_done("docs/s", 2, "fp1")
    assert not tree.is_done("docs/s", 2, "fp2")
    assert not tree.is_done("docs/s", 1, "fp1")
    (tmp_path / "docs" / "s" / "page-0002.md").unlink()
    assert not tree.is_done("docs/s", 2, "fp1")
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
