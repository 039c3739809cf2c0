import hashlib
import os
import shutil
from pathlib import Path

import pytest
from PIL import Image

from ocrcli.errors import UsageError
from ocrcli.inputs import collect, find_documents, in_shard, parse_pages, parse_shard, relative_names
from tests.conftest import SAMPLES


def test_parse_pages_and_shard():
    assert parse_pages("1-3,7") == {1, 2, 3, 7}
    assert parse_pages(None) is None
    for bad in ("0", "3-1", "x", "1-"):
        with pytest.raises(UsageError):
            parse_pages(bad)
    assert parse_shard("2/5") == (2, 5)
    for bad in ("0/2", "3/2", "a/b", "2"):
        with pytest.raises(UsageError):
            parse_shard(bad)


def test_shards_partition_the_documents():
    names = [f"dir{i % 7}/doc{i}" for i in range(200)]
    for n in range(1, 6):
        shards = [{x for x in names if in_shard(x, (k, n))} for k in range(1, n + 1)]
        assert set().union(*shards) == set(names)
        assert sum(len(s) for s in shards) == len(names)


def test_find_documents_sorted_recursive_dedup_and_notice(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a").mkdir()
    shutil.copy(SAMPLES / "memo.jpg", tmp_path / "b" / "z.jpg")
    shutil.copy(SAMPLES / "memo.jpg", tmp_path / "a" / "y.JPG")
    (tmp_path / "a" / "readme.txt").write_text("x")
    os.symlink(tmp_path, tmp_path / "a" / "loop")
    found, notices = find_documents([str(tmp_path), str(tmp_path / "b" / "z.jpg")])
    assert [p.name for p in found] == ["y.JPG", "z.jpg"]
    assert any("readme.txt" in n for n in notices)
    assert any("loop" in n for n in notices)


def test_relative_names_keep_the_extension_and_avoid_collisions(tmp_path):
    paths = [tmp_path / "x" / "r.pdf", tmp_path / "y" / "r.pdf", tmp_path / "y" / "r.png"]
    tag = hashlib.sha1(os.fsencode(paths[1])).hexdigest()[:8]
    assert relative_names(paths) == ["r.pdf", f"r.pdf~{tag}", "r.png"]
    assert relative_names([tmp_path / ".." / "..pdf"])[0] != ".."


def _png(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("L", (32, 16), 255).save(path)


def test_names_are_rooted_at_the_arguments(tmp_path, monkeypatch):
    """A folder given: its name, then the path inside it; a file given: its own name; a glob:
    the path after its literal folder. Adding files or arguments renames nothing."""
    src, extra = tmp_path / "scans", tmp_path / "elsewhere" / "deep"
    _png(src / "2024" / "a.png")
    _png(extra / "b.png")
    alone = {d.path: d.rel for d in collect([str(src)])[0]}
    assert list(alone.values()) == ["scans/2024/a.png"]
    _png(src / "top.png")  # a file higher up than every other one
    _png(tmp_path / "more" / "c.png")
    docs, _ = collect([str(extra / "b.png"), str(src), str(tmp_path / "more")])
    both = {d.path: d.rel for d in docs}
    assert {p: both[p] for p in alone} == alone
    assert sorted(both.values()) == ["b.png", "more/c.png", "scans/2024/a.png", "scans/top.png"]
    # The same folder spelled differently (trailing slash, '..', '.') gives the same names.
    for spelling in (f"{src}/", str(src / "2024" / "..")):
        assert sorted(d.rel for d in collect([spelling])[0]) == \
            ["scans/2024/a.png", "scans/top.png"], spelling
    monkeypatch.chdir(src)
    assert sorted(d.rel for d in collect(["."])[0]) == ["scans/2024/a.png", "scans/top.png"]
    globbed = sorted(d.rel for d in collect([str(src / "**" / "*.png")])[0])
    assert globbed == ["2024/a.png", "top.png"]
    assert sorted(d.rel for d in collect([str(tmp_path / "sc*")])[0]) == \
        ["scans/2024/a.png", "scans/top.png"]


def test_same_stem_files_keep_apart_by_extension(tmp_path):
    _png(tmp_path / "in" / "a.png")
    (tmp_path / "in" / "a.jpg").write_bytes((SAMPLES / "memo.jpg").read_bytes())
    shutil.copy(SAMPLES / "report.pdf", tmp_path / "in" / "a.pdf")
    docs, notices = collect([str(tmp_path / "in")])
    assert [d.rel for d in docs] == ["in/a.jpg", "in/a.pdf", "in/a.png"]
    assert not any("output name" in n for n in notices)


def test_arguments_with_one_name_get_a_suffix_from_their_own_path(tmp_path):
    """Two folder arguments named alike (and names that differ only in case): the first
    keeps the name, a later one gets '~' and a hash of its own path, with a notice."""
    for folder in ("x/docs", "y/docs", "z/docs"):
        _png(tmp_path / folder / "r.png")
    _png(tmp_path / "w" / "R.PNG")
    args = [str(tmp_path / f) for f in ("x/docs", "y/docs")]
    docs, notices = collect(args)
    tag = hashlib.sha1(os.fsencode(tmp_path / "y" / "docs" / "r.png")).hexdigest()[:8]
    assert [d.rel for d in docs] == ["docs/r.png", f"docs/r.png~{tag}"]
    assert any(f"docs/r.png~{tag}" in n and "taken" in n for n in notices)
    # Its name does not depend on what else collided before it.
    more = collect([str(tmp_path / "z" / "docs"), *args])[0]
    assert more[2].rel == f"docs/r.png~{tag}"
    folded = collect([str(tmp_path / "x" / "docs" / "r.png"), str(tmp_path / "w" / "R.PNG")])[0]
    assert folded[0].rel == "r.png" and folded[1].rel.startswith("R.PNG~")


def test_collect_counts_pages_and_records_errors(tmp_path):
    (tmp_path / "bad.pdf").write_bytes(b"%PDF-1.4 garbage")
    shutil.copy(SAMPLES / "report.pdf", tmp_path / "good.pdf")
    docs, _ = collect([str(tmp_path)], pages={2, 9})
    by_name = {d.path.name: d for d in docs}
    assert by_name["good.pdf"].page_count == 3 and by_name["good.pdf"].pages == [2]
    assert by_name["bad.pdf"].error and "PDF" in by_name["bad.pdf"].error
