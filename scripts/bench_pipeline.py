"""Pipeline vs engine alone: does rendering hide behind decoding?

    python scripts/bench_pipeline.py                 # a 60-page PDF made from samples/
    python scripts/bench_pipeline.py --measure-rss   # also peak RSS, 10 vs 500 pages
    python scripts/bench_pipeline.py --model CHECKPOINT --device cuda

The same PDF is converted twice in one run: through the whole pipeline (`ocrcli convert`'s
Converter: renderer processes, engine, atomic writes), and through the engine alone on pages
rendered beforehand (layout, decoding and assembly, no rendering, no writes), both with the
engine the converter builds (`convert.make_engine`). Prints JSON with pipeline_pages_per_s,
engine_only_pages_per_s and their ratio.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import pypdfium2 as pdfium
import torch

from ocrcli.convert import Converter, ConvertSettings, decode_threads, make_engine, max_new_tokens
from ocrcli.engine.scheduler import list_source
from ocrcli.inputs import PageRef
from ocrcli.models.registry import load_model, resolve_device
from ocrcli.progress import Reporter
from ocrcli.render import RenderSettings, render_page

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


def settings(pdf: Path, out: Path | None, args) -> ConvertSettings:
    return ConvertSettings(inputs=[str(pdf)], out=out, model=args.model, device=args.device,
                           batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                           draft_depth=args.draft_depth, resume=False, render_workers=1,
                           log="plain", quiet=True)


def pipeline(s: ConvertSettings) -> tuple[float, int]:
    t0 = time.perf_counter()
    code, summary = Converter(s, Reporter("plain", quiet=True)).run()
    return time.perf_counter() - t0, summary["pages"]["converted"]


def engine_only(pdf: Path, s: ConvertSettings) -> tuple[float, int]:
    loaded = load_model(s.model, resolve_device(s.device))
    n = len(pdfium.PdfDocument(str(pdf)))
    images = [render_page(PageRef(0, pdf, "pdf", p), RenderSettings()).image for p in range(1, n + 1)]
    max_new = max_new_tokens(s, loaded.model.spec.default_max_new_tokens)
    t0 = time.perf_counter()
    engine = make_engine(loaded, s, max_new)
    reqs, pages = [], []
    for i, img in enumerate(images):
        page_reqs = loaded.adapter.page_requests(img, max_new)
        for j, r in enumerate(page_reqs):
            r.key = (i, j)
        pages.append(page_reqs)
        reqs.extend(page_reqs)
    texts: dict = {}
    for r in engine.run(list_source(reqs)):
        texts[r.key] = loaded.tokenizer.decode(r.tokens)
    for i, page_reqs in enumerate(pages):
        loaded.adapter.assemble(page_reqs, [texts[(i, j)] for j in range(len(page_reqs))])
    return time.perf_counter() - t0, n


RSS_CHILD = """
import resource, sys
from ocrcli.cli import main
sys.argv = ["ocrcli"] + sys.argv[1:]
try:
    main()
except SystemExit:
    pass
print("RSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
"""


def peak_rss_mb(pdf: Path, out: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", RSS_CHILD, "convert", str(pdf), "-o", str(out),
                        "--max-new-tokens", "4", "--overwrite", "--quiet"],
                       capture_output=True, text=True)
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("RSS ")][-1]
    main_kb, child_kb = (int(x) for x in line.split()[1:])
    return {"main_mb": round(main_kb / 1024, 1), "renderer_mb": round(child_kb / 1024, 1),
            "exit_code": r.returncode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: the model's")
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--draft-depth", type=int, default=None)
    ap.add_argument("--measure-rss", action="store_true")
    args = ap.parse_args()
    # Both sides decode with the converter's thread count (the cores its render worker leaves).
    torch.set_num_threads(decode_threads(render_workers=1))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pdf = make_pdf(tmp / "bench.pdf", args.pages)
        engine_s, n = engine_only(pdf, settings(pdf, None, args))
        pipe_s, converted = pipeline(settings(pdf, tmp / "out", args))
        result = {"pages": n, "converted": converted, "batch_size": args.batch_size,
                  "torch_threads": torch.get_num_threads(),
                  "pipeline_seconds": round(pipe_s, 2), "engine_only_seconds": round(engine_s, 2),
                  "pipeline_pages_per_s": round(converted / pipe_s, 3),
                  "engine_only_pages_per_s": round(n / engine_s, 3),
                  "ratio": round((converted / pipe_s) / (n / engine_s), 3)}
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
