"""`--shard K/N`: every document lands in exactly one shard, for every N, stably."""

from __future__ import annotations

import json
from pathlib import Path

import pypdfium2 as pdfium
import pytest
from PIL import Image
from typer.testing import CliRunner

from ocrcli.cli import app
from ocrcli.inputs import collect, in_shard
from tests.conftest import run_cli


def blank_pdf(path: Path, pages: int) -> None:
    pdf = pdfium.PdfDocument.new()
    for _ in range(pages):
        pdf.new_page(120, 90)
    pdf.save(str(path))
    pdf.close()


def small_documents(folder: Path) -> dict[str, int]:
    """A folder of blank documents (no text lines, so the model has nothing to decode and each
    run is quick): nested folders, a multi-page PDF, and two files with one stem.
    Returns output name (the folder given is `folder`) -> page count."""
    expected: dict[str, int] = {}
    for name in [f"f{i:02d}.png" for i in range(10)] + ["sub/a.png", "sub/deep/b.png", "x.png"]:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (64, 48), "white").save(path)
        expected[f"{folder.name}/{name}"] = 1
    blank_pdf(folder / "sub" / "deep" / "c.pdf", 2)
    expected[f"{folder.name}/sub/deep/c.pdf"] = 2
    blank_pdf(folder / "x.pdf", 1)  # beside x.png: the extension keeps them apart
    expected[f"{folder.name}/x.pdf"] = 1
    return expected


def pages_written(out: Path) -> set[str]:
    """'name#page' for every page JSON under OUT."""
    found = set()
    for path in out.rglob("page-*.json"):
        record = json.loads(path.read_text())
        found.add(f"{path.parent.relative_to(out).as_posix()}#{record['page']}")
    return found


def all_pages(expected: dict[str, int]) -> set[str]:
    return {f"{name}#{p}" for name, n in expected.items() for p in range(1, n + 1)}


# Golden values: the hash is part of the interface (a rerun or another version of ocrcli must
# put each document in the same shard, or resume across versions would redo work).
@pytest.mark.parametrize("rel, shards", [
    ("report", {1: 1, 2: 1, 3: 2, 4: 3, 5: 3, 8: 7, 64: 47}),
    ("scans/2024/invoice-17", {1: 1, 2: 2, 3: 1, 4: 2, 5: 5, 8: 2, 64: 26}),
    ("a.png", {1: 1, 2: 1, 3: 1, 4: 3, 5: 3, 8: 7, 64: 55}),
])
def test_shard_of_a_name_is_fixed(rel, shards):
    for n, k in shards.items():
        assert [j for j in range(1, n + 1) if in_shard(rel, (j, n))] == [k]


def test_in_shard_partitions_names_for_n_1_to_5():
    names = [f"folder{i % 7}/doc-{i}" for i in range(300)]
    for n in range(1, 6):
        members = [{r for r in names if in_shard(r, (k, n))} for k in range(1, n + 1)]
        assert sum(len(m) for m in members) == len(names), f"N={n}: a name is in two shards"
        assert set().union(*members) == set(names), f"N={n}: a name is in no shard"
        assert min(len(m) for m in members) > len(names) / n / 2, f"N={n}: lopsided {members}"
    assert all(in_shard(r, None) for r in names)


def test_adding_a_file_moves_no_other(tmp_path):
    small_documents(tmp_path)
    before = {(k, n): {d.rel for d in collect([str(tmp_path)], shard=(k, n))[0]}
              for n in range(2, 6) for k in range(1, n + 1)}
    Image.new("RGB", (64, 48), "white").save(tmp_path / "sub" / "new.png")
    for (k, n), rels in before.items():
        after = {d.rel for d in collect([str(tmp_path)], shard=(k, n))[0]}
        assert after - rels <= {f"{tmp_path.name}/sub/new.png"}, (k, n)
        assert rels <= after, (k, n)


def test_adding_a_file_higher_up_keeps_names(tmp_path):
    (tmp_path / "sub").mkdir()
    Image.new("RGB", (64, 48), "white").save(tmp_path / "sub" / "a.png")
    before = [d.rel for d in collect([str(tmp_path)])[0]]
    Image.new("RGB", (64, 48), "white").save(tmp_path / "top.png")
    after = [d.rel for d in collect([str(tmp_path)])[0]]
    assert set(before) <= set(after)


def test_adding_a_file_with_the_same_stem_keeps_names(tmp_path):
    Image.new("RGB", (64, 48), "white").save(tmp_path / "x.png")
    before = {str(d.path): d.rel for d in collect([str(tmp_path)])[0]}
    blank_pdf(tmp_path / "x.pdf", 1)
    after = {str(d.path): d.rel for d in collect([str(tmp_path)])[0]}
    assert all(after[path] == rel for path, rel in before.items())


def _convert(args: list[str]) -> dict:
    """The Typer app with real arguments, in this process (15 runs in a subprocess each would
    mostly measure interpreter start-up)."""
    result = CliRunner().invoke(app, ["convert", *args, "--max-new-tokens", "8",
        "--accept", "truncated,degenerate", "--render-workers",
                                      "0", "--log", "plain", "--quiet", "--summary", "-"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow
def test_cli_shards_are_disjoint_and_cover_everything(tmp_path):
    src = tmp_path / "in"
    expected = small_documents(src)
    everything = all_pages(expected)
    for n in range(1, 6):
        seen: set[str] = set()
        for k in range(1, n + 1):
            out = tmp_path / f"out-{k}-of-{n}"
            summary = _convert([str(src), "-o", str(out), "--shard", f"{k}/{n}"])
            shard = pages_written(out)
            assert shard, f"shard {k}/{n} is empty: the test folder needs more files"
            assert not shard & seen, f"{k}/{n} repeats {sorted(shard & seen)}"
            assert summary["pages"]["converted"] == len(shard)
            seen |= shard
        assert seen == everything, f"N={n}: missing {sorted(everything - seen)}"


@pytest.mark.slow
def test_shards_into_one_folder_then_status(tmp_path):
    """The real entry point: N workers share OUT; `status` says when all of them are done."""
    src = tmp_path / "in"
    expected = small_documents(src)
    out = tmp_path / "out"
    for k in (1, 3):  # shard 2/3 has not run yet
        r = run_cli("convert", str(src), "-o", str(out), "--shard", f"{k}/3", "--max-new-tokens", "8",
            "--accept", "truncated,degenerate",
                    "--render-workers", "0", "--quiet")
        assert r.returncode == 0, r.stderr
    r = run_cli("status", str(out), str(src), "--json")
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    second = {d.rel for d in collect([str(src)], shard=(2, 3))[0]}
    assert {d["rel"] for d in report["incomplete"]} == second
    assert report["pages"]["missing"] == sum(expected[rel] for rel in second)
    r = run_cli("status", str(out), str(src), "--shard", "1/3")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_cli("convert", str(src), "-o", str(out), "--shard", "2/3", "--max-new-tokens", "8",
        "--accept", "truncated,degenerate",
                "--render-workers", "0", "--quiet")
    assert r.returncode == 0, r.stderr
    r = run_cli("status", str(out), str(src))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{sum(expected.values())} done" in r.stdout
    assert pages_written(out) == all_pages(expected)
    # Each shard kept its own summary: none overwrote another's.
    assert sorted(p.name for p in out.glob("summary*.json")) == \
        [f"summary-shard-{k}-of-3.json" for k in (1, 2, 3)]
