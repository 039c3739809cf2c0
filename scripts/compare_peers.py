"""ocrcli's built-in model beside Tesseract, on the same rendered pages, in one run.

    python scripts/compare_peers.py                         # samples/ only
    python scripts/compare_peers.py BENCH                   # and an olmOCR-Bench folder
    python scripts/compare_peers.py BENCH --json -o WORK    # one JSON object; outputs kept in WORK

Every page is rendered once (`ocrcli.render.render_page`, the converter's renderer) and the same
image goes to each engine, so differences come from reading, not from rendering. Reported per
engine, side by side:

- text-only CER on `samples/` against `ground_truth/`: Markdown markup (headings, list
  markers, fences, table pipes and separator rows, emphasis, image placeholders) is stripped
  from both sides and whitespace collapsed, so an engine that writes plain text is not charged
  for structure it never claims; also OmniDocBench's normalised edit distance on the same pages;
- olmOCR-Bench pass rates per category and per rule type, scored by `ocrcli.evaluation`'s own
  scorer (`score_bench`), as `ocrcli eval` scores them;
- pages per second of reading alone (rendering, model loading and an untimed warm-up pass
  over the same pages excluded; ocrcli's layout analysis included), and for ocrcli the
  pages its verdicts flag as degenerate (for Tesseract: the pages it failed on).

Tesseract is optional: without a `tesseract` program on PATH its column says why it is missing.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from rapidfuzz.distance import Levenshtein

from ocrcli.distributed.page_decoder import PageDecoder
from ocrcli.evaluation.edit_distance import text_edit_distance
from ocrcli.evaluation.olmocr_bench import BenchScore, bench_conversion_jobs, score_bench
from ocrcli.evaluation.run import _link_bench
from ocrcli.inputs import PageRef, collect
from ocrcli.models.identity import default_render_dpi
from ocrcli.models.registry import load_model, resolve_device
from ocrcli.output import markdown_bytes
from ocrcli.render import PageImage, RenderSettings, render_page
from ocrcli.settings import ConvertSettings

REPO = Path(__file__).resolve().parents[1]
ENGINES = ("ocrcli", "tesseract")

_FENCE = re.compile(r"^\s*(```|~~~).*$", re.M)
_SEPARATOR_ROW = re.compile(r"^\s*\|?(\s*:?-{3,}:?\s*\|)+\s*:?-*:?\s*$", re.M)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+", re.M)
_LIST_MARKER = re.compile(r"^\s*(?:[-*+\u2022]|\d{1,3}[.)])\s+", re.M)
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_)(?=\S)(.+?)(?<=\S)\1")
_HTML_TAG = re.compile(r"</?[A-Za-z][^>]*>")


def strip_markdown(text: str) -> str:
    """The words of a Markdown page without its markup, whitespace collapsed to single spaces."""
    text = _IMAGE.sub(" ", text)
    text = _FENCE.sub(" ", text)
    text = _SEPARATOR_ROW.sub(" ", text)
    text = _HEADING.sub("", text)
    text = _LIST_MARKER.sub("", text)
    text = _HTML_TAG.sub(" ", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = text.replace("|", " ")
    return re.sub(r"\s+", " ", text).strip()


@dataclass
class EngineRun:
    """What one engine read: page key -> Markdown (or plain text), and how long reading took."""

    texts: dict[tuple[str, int], str] = field(default_factory=dict)
    seconds: float = 0.0
    degenerate: list[str] = field(default_factory=list)
    skipped: str | None = None


@dataclass
class Page:
    key: tuple[str, int]  # (document path, 1-based page)
    image: PageImage


def render_all(refs: list[tuple[Path, str, int]], dpi: int) -> list[Page]:
    settings = RenderSettings(dpi=dpi)
    pages = []
    for i, (path, kind, page) in enumerate(refs):
        image = render_page(PageRef(i, path, kind, page), settings)
        if image.error:
            raise SystemExit(f"cannot render {path} page {page}: {image.error}")
        pages.append(Page((str(path), page), image))
    return pages


def read_with_ocrcli(pages: list[Page], decoder: PageDecoder) -> EngineRun:
    run = EngineRun()
    # Untimed: the first pass pays for warming up (allocations per line width and batch
    # shape), which a long batch run pays once; the timed pass is the steady state.
    decoder.decode([p.image for p in pages])
    t0 = time.perf_counter()
    records = decoder.decode([p.image for p in pages])
    run.seconds = time.perf_counter() - t0
    for p, rec in zip(pages, records):
        run.texts[p.key] = rec.text
        if rec.status != "ok":
            run.degenerate.append(f"{Path(p.key[0]).name}#{p.key[1]}: {rec.status}: {rec.error}")
    return run


def tesseract_missing() -> str | None:
    if shutil.which("tesseract") is None:
        return "no `tesseract` program on PATH (e.g. apt-get install tesseract-ocr)"
    return None


def read_with_tesseract(pages: list[Page], dpi: int) -> EngineRun:
    why = tesseract_missing()
    if why:
        return EngineRun(skipped=why)
    run = EngineRun()
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, p in enumerate(pages):  # written before the clock starts: reading alone is timed
            f = Path(tmp) / f"page{i}.png"
            p.image.image.save(f)
            files.append(f)
        t0 = time.perf_counter()
        for p, f in zip(pages, files):
            done = subprocess.run(["tesseract", str(f), "stdout", "--dpi", str(dpi)],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                run.degenerate.append(f"{Path(p.key[0]).name}#{p.key[1]}: failed: "
                                      f"{done.stderr.strip()[-200:]}")
            run.texts[p.key] = done.stdout
        run.seconds = time.perf_counter() - t0
    return run


def sample_pages(samples: Path, truth_dir: Path
                 ) -> tuple[list[tuple[Path, str, int]], dict[tuple[str, int], str]]:
    """The sample pages that have ground truth in `truth_dir`, and their truths by page key."""
    docs, _ = collect([str(samples)])
    refs, truths = [], {}
    for doc in docs:
        for page in doc.pages:
            truth = truth_dir / doc.path.stem / f"page-{page:04d}.md"
            if truth.exists():
                refs.append((doc.path, doc.kind, page))
                truths[(str(doc.path), page)] = truth.read_text(encoding="utf-8")
    return refs, truths


def text_scores(run: EngineRun, truths: dict[tuple[str, int], str]) -> dict:
    """Text-only CER (edits over truth characters, summed over pages) and mean OmniDocBench NED."""
    edits = chars = 0
    per_page, neds = {}, []
    for key, truth in truths.items():
        pred, ref = strip_markdown(run.texts.get(key, "")), strip_markdown(truth)
        d = Levenshtein.distance(pred, ref)
        edits, chars = edits + d, chars + len(ref)
        per_page[f"{Path(key[0]).name}#{key[1]}"] = round(d / max(1, len(ref)), 4)
        neds.append(text_edit_distance(run.texts.get(key, ""), truth))
    return {"pages": len(truths), "cer": round(edits / max(1, chars), 5),
            "ned": round(sum(neds) / max(1, len(neds)), 5), "per_page_cer": per_page}


def bench_scores(score: BenchScore) -> dict:
    return {
        "categories": {c.name: {"passed": c.passed, "total": c.total,
                                "pass_rate": round(c.pass_rate, 4)} for c in score.categories},
        "by_type": {t.type: {"mean": round(t.mean, 4), "count": t.count} for t in score.by_type},
        "overall": round(score.overall, 4),
    }


def score_engine_on_bench(work: Path, system: str, run: EngineRun) -> dict:
    """Places the engine's pages where the scorer expects them, written as `ocrcli` writes a
    page's Markdown (the scorer's end-of-text checks see the same bytes as `ocrcli eval`'s),
    then scores them."""
    for job in bench_conversion_jobs(work, system):
        job.output_path.parent.mkdir(parents=True, exist_ok=True)
        job.output_path.write_bytes(markdown_bytes(run.texts.get((str(job.pdf_path), job.page), "")))
    return bench_scores(score_bench(work, system, force=True))


def speed(run: EngineRun, n_pages: int) -> dict:
    return {"pages": n_pages, "seconds": round(run.seconds, 3),
            "pages_per_s": round(n_pages / run.seconds, 4) if run.seconds > 0 else None,
            "degenerate_pages": len(run.degenerate), "degenerate": run.degenerate}


def compare(args: argparse.Namespace, work: Path) -> dict:
    refs, truths = sample_pages(args.samples, args.truth)
    jobs = []
    if args.bench is not None:
        _link_bench(args.bench, work)
        jobs = bench_conversion_jobs(work, "ocrcli")
    bench_refs = sorted({(j.pdf_path, "pdf", j.page) for j in jobs})
    pages = render_all(refs + bench_refs, args.dpi)
    loaded = load_model(args.model, resolve_device(args.device))
    decoder = PageDecoder(loaded, ConvertSettings(inputs=[], out=work, batch_size=args.batch_size))
    runs = {"ocrcli": read_with_ocrcli(pages, decoder),
            "tesseract": (EngineRun(skipped="--no-tesseract") if args.no_tesseract
                          else read_with_tesseract(pages, args.dpi))}
    result: dict = {"model": loaded.model_id, "dpi": args.dpi, "engines": {}}
    for name, run in runs.items():
        if run.skipped:
            result["engines"][name] = {"skipped": run.skipped}
            continue
        entry = {"samples": text_scores(run, truths), "speed": speed(run, len(pages))}
        if args.bench is not None:
            entry["bench"] = score_engine_on_bench(work, name, run)
        result["engines"][name] = entry
    return result


def _cell(entry: dict, path: tuple[str, ...], fmt: str) -> str:
    value: object = entry
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return "-"
        value = value[part]
    return fmt.format(value) if value is not None else "-"


def format_table(result: dict) -> str:
    engines = result["engines"]
    names = list(engines)
    rows = [("samples CER (text only)", ("samples", "cer"), "{:.2%}"),
            ("samples NED (OmniDocBench)", ("samples", "ned"), "{:.4f}"),
            ("pages/s (reading only)", ("speed", "pages_per_s"), "{:.3f}"),
            ("degenerate pages", ("speed", "degenerate_pages"), "{}")]
    first = next((e for e in engines.values() if "bench" in e), None)
    if first is not None:
        for cat, c in first["bench"]["categories"].items():
            rows.append((f"bench {cat} ({c['total']} rules)",
                         ("bench", "categories", cat, "pass_rate"), "{:.1%}"))
        for t, c in first["bench"]["by_type"].items():
            rows.append((f"  rule type {t} ({c['count']})", ("bench", "by_type", t, "mean"),
                         "{:.1%}"))
    lines = [f"{'':30}" + "".join(f"{n:>14}" for n in names)]
    for label, path, fmt in rows:
        lines.append(f"{label:30}" + "".join(f"{_cell(engines[n], path, fmt):>14}" for n in names))
    lines += [f"{n}: skipped ({e['skipped']})" for n, e in engines.items() if "skipped" in e]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench", nargs="?", type=Path, default=None,
                    help="an olmOCR-Bench folder (*.jsonl and pdfs/); optional")
    ap.add_argument("-o", "--out", type=Path, default=None,
                    help="working folder for the bench's outputs (default: a temporary one)")
    ap.add_argument("--samples", type=Path, default=REPO / "samples")
    ap.add_argument("--truth", type=Path, default=REPO / "ground_truth",
                    help="the samples' expected Markdown, <truth>/<name>/page-NNNN.md")
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dpi", type=int, default=None,
                    help="rendering resolution for both engines (default: the model's own)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--no-tesseract", action="store_true", help="ocrcli alone")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    args.dpi = args.dpi or default_render_dpi(args.model)
    if args.bench is not None and not (args.bench / "pdfs").is_dir():
        ap.error(f"{args.bench} is not an olmOCR-Bench folder (*.jsonl and pdfs/)")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        result = compare(args, args.out)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            result = compare(args, Path(tmp))
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
