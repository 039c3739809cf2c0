"""Pipeline vs decoding alone: does rendering hide behind decoding?

    python scripts/bench_pipeline.py                 # a 60-page PDF made from samples/
    python scripts/bench_pipeline.py --repeats 5     # more measurements of each side
    python scripts/bench_pipeline.py --measure-rss   # also peak RSS, 10 vs 500 pages
    python scripts/bench_pipeline.py --dpi 144       # PDF pages rendered at 144 dpi
    python scripts/bench_pipeline.py --model CHECKPOINT --device cuda

Two sides convert the same pages of the same PDF, in one process, with the same settings,
the same model loading (`model_setup.load_for_run`), the same engine (`model_setup.make_engine`)
and the same torch threads:

- pipeline: `ocrcli convert`'s Converter (renderer processes, page layout, decoding, page
  records, atomic writes), timed as summary.json times it: from the start of decoding to the
  end of the run (model loading and engine set-up are outside, as they are on the other side);
- decode only: the same pages rendered beforehand, outside the timer; the engine decodes
  them and the adapter assembles each page's text. Page layout (the requests of a page) is
  inside this timer exactly where the pipeline does it in this process, when the engine asks
  for more pages, and outside it where the pipeline does it in its render processes (models
  whose adapter `prepares_in_worker`, the built-in one): no layout runs on one side's clock
  only.

Each side first runs once unmeasured (a warm-up on the first --warmup-pages pages), then the
sides alternate --repeats times, their order swapped every repeat so that drift in the
machine's speed (turbo, other jobs) falls on both. Each repeat prints both rates and their
ratio (pipeline / decode only: 1.0 means rendering costs nothing); the medians end the JSON.
The pages' texts are compared (`same_text`): on the CPU, where decoding is batch-invariant,
they agree, or the sides did not do the same work; on a GPU a near tie may differ.
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import pypdfium2 as pdfium
import torch

from ocrcli.convert import Converter
from ocrcli.inputs import PageRef
from ocrcli.model_setup import load_for_run, make_engine, max_new_tokens
from ocrcli.pages import PageAssembly
from ocrcli.progress import Reporter
from ocrcli.render import RenderSettings, render_page
from ocrcli.settings import ConvertSettings, decode_threads

REPO = Path(__file__).resolve().parents[1]
SOURCES = [REPO / "samples" / "report.pdf", REPO / "samples" / "scanned-invoice.pdf"]


def make_pdf(path: Path, pages: int) -> Path:
    """A PDF of `pages` pages cycling through the sample PDFs' pages."""
    out = pdfium.PdfDocument.new()
    srcs = [pdfium.PdfDocument(str(p)) for p in SOURCES]
    order = [(s, i) for s in srcs for i in range(len(s))]
    for n in range(pages):
        src, i = order[n % len(order)]
        out.import_pages(src, [i])
    out.save(str(path))
    return path


def settings(pdf: Path, out: Path, args) -> ConvertSettings:
    return ConvertSettings(inputs=[str(pdf)], out=out, model=args.model, device=args.device,
                           batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                           draft_depth=args.draft_depth, dpi=args.dpi, resume=False,
                           render_workers=1, log="plain", quiet=True)


def threads(s: ConvertSettings) -> int:
    """The torch threads the converter decodes with (it sets them itself when it runs)."""
    return s.threads or decode_threads(s.render_workers)


def pipeline(s: ConvertSettings) -> tuple[float, int, dict[int, str]]:
    """Seconds from the start of decoding to the end of the run (summary.json's `seconds`),
    pages finished, and each page's text."""
    # Its page problems (flagged pages: a small token cap truncates them) are not the
    # benchmark's output: they go to a buffer.
    _, summary = Converter(s, Reporter("plain", quiet=True, err=io.StringIO())).run()
    texts = {}
    for path in s.out.rglob("page-*.json"):
        record = orjson.loads(path.read_bytes())
        texts[record["page"]] = record.get("text") or ""
    pages = summary["pages"]
    return summary["seconds"], pages["converted"] + pages["failed"], texts


class DecodeOnly:
    """The engine and the adapter alone, on pages rendered beforehand."""

    def __init__(self, s: ConvertSettings, pdf: Path):
        self.s = s
        self.loaded = load_for_run(s, s.device)
        self.max_new = max_new_tokens(s, self.loaded.model.spec.default_max_new_tokens)
        # Where the pipeline lays pages out in its render processes, this side does it before
        # its clock starts; otherwise on its clock, as the pipeline's main process does.
        self.layout_on_clock = not getattr(self.loaded.adapter, "prepares_in_worker", False)
        render = RenderSettings(s.dpi, s.max_pixels, s.password)
        n = len(pdfium.PdfDocument(str(pdf)))
        self.images = [render_page(PageRef(0, pdf, "pdf", p), render) for p in range(1, n + 1)]
        failed = [img.error for img in self.images if img.error]
        if failed:
            raise SystemExit(f"bench_pipeline: a page did not render: {failed[0]}")

    def layout(self, page: int) -> list:
        return self.loaded.adapter.page_requests(self.images[page].image, self.max_new)

    def run(self, pages: int) -> tuple[float, int, dict[int, str]]:
        """Seconds from the start of decoding to the last page assembled, pages finished,
        and each page's text (pages 1..`pages`). Pages are assembled as the converter does
        (`pages.PageAssembly`), unsure regions read again included."""
        torch.set_num_threads(threads(self.s))
        engine = make_engine(self.loaded, self.s, self.max_new)
        laid_out = None if self.layout_on_clock else [self.layout(i) for i in range(pages)]
        decoding: dict[int, PageAssembly] = {}
        texts: dict[int, str] = {}
        queued: list = []
        next_page = 0

        def fetch(n: int, block: bool):
            nonlocal next_page
            while len(queued) < n and next_page < pages:
                i, next_page = next_page, next_page + 1
                reqs = self.layout(i) if laid_out is None else laid_out[i]
                for j, r in enumerate(reqs):
                    r.key = (i, j)
                if reqs:
                    decoding[i] = PageAssembly.start(self.images[i], reqs, key=i)
                    queued.extend(reqs)
                else:  # a blank page: nothing to decode
                    texts[i + 1] = ""
            if not queued:
                return [] if decoding else None
            batch, queued[:] = queued[:n], queued[n:]
            return batch

        t0 = time.perf_counter()
        for result in engine.run(fetch):
            i, j = result.key
            page = decoding[i]
            queued[:0] = page.add(j, self.loaded.tokenizer.decode(result.tokens) if result.tokens
                                  else "", result.status, result.stats, result.error)
            if page.finished:
                texts[i + 1] = decoding.pop(i).record(self.loaded, "").text
        return time.perf_counter() - t0, len(texts), texts


# The converter's own peak is VmHWM, the high-water mark of its address space: getrusage's
# ru_maxrss would start from this benchmark's size, which a process keeps across fork and exec
# (the decode-only side holds every rendered page). The render workers' figure is getrusage's
# for the largest child, which likewise starts from the converter's size when it was started:
# an upper bound.
RSS_CHILD = """
import re, resource, sys
from ocrcli.cli import main
sys.argv = ["ocrcli"] + sys.argv[1:]
try:
    main()
except SystemExit:
    pass
with open("/proc/self/status") as f:
    hwm = int(re.search(r"VmHWM:\\s+(\\d+)", f.read()).group(1))
print("RSS", hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
"""


def peak_rss_mb(pdf: Path, out: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", RSS_CHILD, "convert", str(pdf), "-o", str(out),
                        "--max-new-tokens", "4", "--overwrite", "--quiet"],
                       capture_output=True, text=True)
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("RSS ")][-1]
    main_kb, child_kb = (int(x) for x in line.split()[1:])
    return {"main_mb": round(main_kb / 1024, 1), "renderer_mb": round(child_kb / 1024, 1),
            "exit_code": r.returncode}


def measure(args, tmp: Path) -> dict:
    pdf = make_pdf(tmp / "bench.pdf", args.pages)
    warm_pdf = make_pdf(tmp / "warm.pdf", min(args.warmup_pages, args.pages))
    runs = iter(range(1_000_000))

    def pipeline_run(path: Path) -> tuple[float, int, dict[int, str]]:
        return pipeline(settings(path, tmp / f"out-{next(runs)}", args))

    decode = DecodeOnly(settings(pdf, tmp / "unused", args), pdf)
    # Warm-up, unmeasured: each side once (kernels, allocator, caches, compiled steps).
    pipeline_run(warm_pdf)
    decode.run(min(args.warmup_pages, args.pages))
    rows, texts = [], {}
    for k in range(args.repeats):
        order = ("pipeline", "decode_only") if k % 2 == 0 else ("decode_only", "pipeline")
        got = {}
        for side in order:
            got[side] = pipeline_run(pdf) if side == "pipeline" else decode.run(args.pages)
        (pipe_s, pipe_n, pipe_text), (dec_s, dec_n, dec_text) = got["pipeline"], got["decode_only"]
        texts = {"pipeline": pipe_text, "decode_only": dec_text}
        pipe_rate, dec_rate = pipe_n / pipe_s, dec_n / dec_s
        rows.append({"repeat": k + 1, "first": order[0],
                     "pipeline_seconds": round(pipe_s, 3), "decode_only_seconds": round(dec_s, 3),
                     "pipeline_pages_per_s": round(pipe_rate, 3),
                     "decode_only_pages_per_s": round(dec_rate, 3),
                     "ratio": round(pipe_rate / dec_rate, 3)})
        print(f"repeat {k + 1} ({order[0]} first): pipeline {pipe_rate:.3f} pages/s, "
              f"decode only {dec_rate:.3f} pages/s, ratio {pipe_rate / dec_rate:.3f}",
              file=sys.stderr, flush=True)
    ratios = [r["ratio"] for r in rows]
    return {
        "pages": args.pages, "repeats": args.repeats, "warmup_pages": args.warmup_pages,
        "batch_size": args.batch_size, "dpi": decode.s.dpi, "torch_threads": threads(decode.s),
        "layout": "on both clocks, in the main process" if decode.layout_on_clock
                  else "in the pipeline's render processes; before the decode-only clock",
        "same_text": texts["pipeline"] == texts["decode_only"],
        "runs": rows,
        "pipeline_pages_per_s": round(statistics.median(r["pipeline_pages_per_s"] for r in rows), 3),
        "decode_only_pages_per_s": round(statistics.median(r["decode_only_pages_per_s"]
                                                           for r in rows), 3),
        "ratio": round(statistics.median(ratios), 3),
        "ratio_min": min(ratios), "ratio_max": max(ratios),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3, help="measurements of each side, interleaved")
    ap.add_argument("--warmup-pages", type=int, default=8, help="pages of each side's warm-up run")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: the model's")
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--draft-depth", type=int, default=None)
    ap.add_argument("--dpi", type=int, default=None, help="default: the model's own")
    ap.add_argument("--measure-rss", action="store_true")
    args = ap.parse_args()
    if args.pages < 1 or args.repeats < 1 or args.warmup_pages < 1:
        ap.error("--pages, --repeats and --warmup-pages must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        result = measure(args, tmp)
        if args.measure_rss:
            result["rss_10_pages"] = peak_rss_mb(make_pdf(tmp / "p10.pdf", 10), tmp / "r10")
            result["rss_500_pages"] = peak_rss_mb(make_pdf(tmp / "p500.pdf", 500), tmp / "r500")
            result["rss_ratio_500_vs_10"] = round(
                result["rss_500_pages"]["main_mb"] / result["rss_10_pages"]["main_mb"], 3)
            total = {k: result[k]["main_mb"] + result[k]["renderer_mb"]
                     for k in ("rss_10_pages", "rss_500_pages")}
            result["rss_ratio_500_vs_10_with_renderer"] = round(
                total["rss_500_pages"] / total["rss_10_pages"], 3)
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    if not result["same_text"]:
        print("bench_pipeline: the two sides' page texts differ", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
