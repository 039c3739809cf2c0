import os
import shutil

import pytest

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


def test_relative_names_mirror_tree_and_avoid_collisions(tmp_path):
    paths = [tmp_path / "x" / "r.pdf", tmp_path / "y" / "r.pdf", tmp_path / "y" / "r.png"]
    assert relative_names(paths) == ["x/r", "y/r", "y/r.png"]
    assert relative_names([tmp_path / ".." / "..pdf"])[0] != ".."


def test_collect_counts_pages_and_records_errors(tmp_path):
    (tmp_path / "bad.pdf").write_bytes(b"%PDF-1.4 garbage")
    shutil.copy(SAMPLES / "report.pdf", tmp_path / "good.pdf")
    docs, _ = collect([str(tmp_path)], pages={2, 9})
    by_name = {d.path.name: d for d in docs}
    assert by_name["good.pdf"].page_count == 3 and by_name["good.pdf"].pages == [2]
    assert by_name["bad.pdf"].error and "PDF" in by_name["bad.pdf"].error
