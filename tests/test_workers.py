"""`ocrcli convert --workers N`: the page split, and the same bytes as one worker."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ocrcli.inputs import Document
from ocrcli.plan import worker_share
from tests.conftest import SAMPLES, run_cli


def _docs() -> list[Document]:
    return [Document(Path("a.pdf"), "a", "pdf", 7, pages=list(range(1, 8))),
            Document(Path("bad.pdf"), "bad", "pdf", 0, error="not a PDF"),
            Document(Path("b.png"), "b", "image", 1, pages=[1]),
            Document(Path("c.pdf"), "c", "pdf", 3, pages=[1, 3])]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_worker_shares_are_disjoint_and_cover_the_run(n):
    docs = _docs()
    taken: list[tuple[str, int]] = []
    errors: list[str] = []
    for k in range(1, n + 1):
        share = worker_share(docs, (k, n))
        taken += [(d.rel, p) for d in share for p in d.pages]
        errors += [d.rel for d in share if d.error]
        assert all(d.pages or d.error for d in share)  # no empty documents to finish
        assert len({(d.rel, p) for d in share for p in d.pages}) <= -(-10 // n)  # balanced
    assert sorted(taken) == sorted((d.rel, p) for d in docs for p in d.pages)
    assert len(taken) == len(set(taken)) and errors == ["bad"]


def _outputs(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "summary.json"}


@pytest.mark.slow
def test_two_workers_write_the_same_bytes_as_one(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("report.pdf", "memo.jpg", "reading-order.png"):
        shutil.copy(SAMPLES / name, inputs / name)
    (inputs / "broken.pdf").write_bytes(b"%PDF-1.7 not really")
    one, two = tmp_path / "one", tmp_path / "two"
    r1 = run_cli("convert", str(inputs), "-o", str(one), "--summary", "-")
    r2 = run_cli("convert", str(inputs), "-o", str(two), "--summary", "-", "--workers", "2")
    assert r1.returncode == r2.returncode == 1, (r1.stderr, r2.stderr)
    s1, s2 = json.loads(r1.stdout), json.loads(r2.stdout)
    assert s2["workers"] == 2 and s2["pages"]["converted"] == s1["pages"]["converted"] == 5
    assert [f["source"] for f in s2["failures"]] == [f["source"] for f in s1["failures"]]
    assert r2.stderr.count("broken.pdf") == r1.stderr.count("broken.pdf")  # by one worker
    assert _outputs(one) == _outputs(two)
    # A rerun with workers skips everything, like a rerun without.
    again = run_cli("convert", str(inputs), "-o", str(two), "--summary", "-", "--workers", "2")
    assert json.loads(again.stdout)["pages"]["skipped"] == 5
    assert _outputs(one) == _outputs(two)


def test_workers_refuse_a_shard(tmp_path):
    r = run_cli("convert", str(SAMPLES / "memo.jpg"), "-o", str(tmp_path / "o"),
                "--workers", "2", "--shard", "1/2")
    assert r.returncode == 2 and "--workers" in r.stderr and "Traceback" not in r.stderr
