"""The Ray Data path writes what `ocrcli convert` writes, byte for byte (timings aside).

The decoder test needs no Ray; the Ray test starts a local Ray on the host's CPUs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ocrcli.distributed.page_decoder import PageDecoder
from ocrcli.inputs import PageRef, collect
from ocrcli.models.registry import load_model
from ocrcli.output import PageRecord
from ocrcli.render import RenderSettings, render_page
from ocrcli.settings import ConvertSettings
from tests.conftest import SAMPLES, run_cli
from tests.test_shards import blank_pdf

FAST = ("--max-new-tokens", "8", "--accept", "truncated,degenerate")


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> tuple[Path, Path]:
    """A folder with text pages, a multi-page PDF, a blank page and a corrupt PDF, converted
    once by `ocrcli convert`."""
    root = tmp_path_factory.mktemp("ray")
    src = root / "in"
    (src / "scans").mkdir(parents=True)
    shutil.copy(SAMPLES / "memo.jpg", src / "memo.jpg")
    shutil.copy(SAMPLES / "report.pdf", src / "scans" / "report.pdf")
    blank_pdf(src / "scans" / "blank.pdf", 1)
    good = (SAMPLES / "scanned-invoice.pdf").read_bytes()
    (src / "corrupt.pdf").write_bytes(good[: len(good) // 3])
    out = root / "convert"
    r = run_cli("convert", str(src), "-o", str(out), *FAST)
    assert r.returncode == 1, r.stderr  # the corrupt PDF
    return src, out


def assert_same_outputs(expected: Path, actual: Path) -> None:
    """Every file but summary.json: the same names, the same bytes (page JSON: timings aside)."""
    def files(root: Path) -> dict[str, Path]:
        return {p.relative_to(root).as_posix(): p for p in root.rglob("*")
                if p.is_file() and p.name != "summary.json"}

    want, got = files(expected), files(actual)
    assert sorted(got) == sorted(want)
    for name, path in want.items():
        assert got[name].read_bytes() == path.read_bytes(), name


def test_page_decoder_writes_convert_records(plain):
    """The worker's decoder, fed pages in one batch, gives `convert`'s records."""
    src, out = plain
    settings = ConvertSettings(inputs=[str(src)], out=out, max_new_tokens=8)
    decoder = PageDecoder(load_model("builtin", "cpu"), settings)
    docs = [d for d in collect([str(src)])[0] if not d.error]
    images = [render_page(PageRef(i, d.path, d.kind, p), RenderSettings(settings.dpi))
              for i, d in enumerate(docs) for p in d.pages]
    records = decoder.decode(images)
    assert [(r.source, r.page) for r in records] == [(str(i.ref.path), i.ref.page) for i in images]
    assert sum(r.tokens for r in records) > 0  # text was decoded, not only blank pages
    by_page = dict(zip([(d.rel, p) for d in docs for p in d.pages], records))
    for (rel, page), record in by_page.items():
        written = json.loads((out / rel / f"page-{page:04d}.json").read_text())
        assert vars(record) == written, (rel, page)
        assert (out / rel / f"page-{page:04d}.md").read_text() == record.text + "\n"


def test_page_decoder_records_unrenderable_pages():
    decoder = PageDecoder(load_model("builtin", "cpu"), ConvertSettings(inputs=[], out=Path("x")))
    ref = PageRef(0, SAMPLES / "report.pdf", "pdf", 99)  # past the last page
    [record] = decoder.decode([render_page(ref, RenderSettings())])
    assert isinstance(record, PageRecord) and record.status == "failed" and record.error
    assert record.fingerprint == decoder.fingerprint


@pytest.mark.slow
def test_ray_convert_matches_convert_and_resumes(plain, tmp_path):
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'ocrcli[ray]'")
    src, expected = plain
    out = tmp_path / "ray"
    # Two pages per actor call: the 3-page PDF spans batches, so its document is finished
    # only when its last page is written.
    args = ("ray-convert", str(src), "-o", str(out), "--pages-per-batch", "2", *FAST,
            "--summary", "-")
    r = run_cli(*args)
    assert r.returncode == 1, r.stderr  # the corrupt PDF, as with convert
    summary = json.loads(r.stdout)
    assert summary["pages"]["converted"] == 5 and summary["documents_failed"] == 1
    assert_same_outputs(expected, out)

    # Resume: only the deleted page is redone, and the outputs are the same again.
    (out / "in" / "scans" / "report.pdf" / "page-0002.json").unlink()
    (out / "in" / "scans" / "report.pdf" / "page-0002.md").unlink()
    r = run_cli(*args)
    assert r.returncode == 1, r.stderr
    summary = json.loads(r.stdout)
    assert summary["pages"]["converted"] == 1 and summary["pages"]["skipped"] == 4
    assert_same_outputs(expected, out)


@pytest.mark.slow  # starts a Ray cluster
def test_ray_convert_passes_the_model_options(tmp_path):
    """`--mode` reaches the model as with `convert`: the built-in reader has no image modes,
    so both commands refuse it with the same one-line usage error (exit 2)."""
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'ocrcli[ray]'")
    lines = []
    for command in ("convert", "ray-convert"):
        r = run_cli(command, str(SAMPLES / "memo.jpg"), "-o", str(tmp_path / command),
                    "--mode", "tiny")
        assert r.returncode == 2, r.stderr
        lines.append(r.stderr.strip().splitlines()[-1])
    assert lines[0] == lines[1] and "--mode" in lines[0]


def test_an_empty_shard_exits_0_with_a_zero_page_summary(tmp_path):
    out = tmp_path / "out"
    r = run_cli("ray-convert", str(SAMPLES), "-o", str(out), "--shard", "2/8")  # no documents
    assert r.returncode == 0, r.stderr
    assert "shard 2/8 has no documents (4 documents in all)" in r.stderr
    summary = json.loads((out / "summary-shard-2-of-8.json").read_text())
    assert summary["pages"]["converted"] == 0 and summary["exit_code"] == 0
