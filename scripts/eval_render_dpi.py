"""Reading quality by rendering resolution, on held-out synthetic pages.

    python scripts/eval_render_dpi.py            # a table
    python scripts/eval_render_dpi.py --json

The same held-out pages are typeset once at their size and once at twice it, and read as a
PDF page rendered at 144 and at 288 dpi: the layout sees the same page either way (a finer
page is laid out on a copy reduced to 144 dpi), and the reader gets its line crops cut from
the 144 or the 288 dpi pixels. The pages are clean, as a PDF's text renders (scan damage does
not grow finer with the dpi). CER and WER per band of body sizes (pixels at 144 dpi), in the
training fonts and in fonts never trained on. The built-in model's default rendering
resolution (`ocrcli.model_setup.render_dpi`) is chosen from these figures.
"""

from __future__ import annotations

import argparse
import sys

import orjson
from eval_builtin import decode, error_rates

from ocrcli.models.registry import load_model, resolve_device
from ocrcli.training.synth import available_fonts, make_page
from ocrcli.training.text import TextSources

BANDS = ((14, 15), (16, 18), (19, 22), (23, 26), (27, 30))
SCALES = (1, 2)  # 144 and 288 dpi


def band_pages(src: TextSources, n: int, unseen: bool, sizes: tuple[int, int], seed: int,
               scale: int):
    pages = [make_page(810_000_000 + seed * 10_000 + i, src, unseen, sizes, augment=False,
                       scale=scale) for i in range(n)]
    return [p.image for p in pages], [p.markdown for p in pages]


def measure(loaded, pages: int) -> list[dict]:
    src = TextSources.load("test")
    font_sets = [False] + ([True] if available_fonts(heldout=True) else [])
    rows = []
    for b, sizes in enumerate(BANDS):
        for unseen in font_sets:
            row = {"fonts": "unseen" if unseen else "training", "sizes": list(sizes)}
            for scale in SCALES:
                images, truth = band_pages(src, pages, unseen, sizes, 2 * b + unseen, scale)
                texts = [r.text for r in decode(loaded, images, None, dpi=144.0 * scale)]
                rates = error_rates(texts, truth)
                row[f"{144 * scale}"] = {"cer": rates["cer"], "wer": rates["wer"]}
            rows.append(row)
            print(orjson.dumps(row).decode(), file=sys.stderr, flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--pages", type=int, default=8, help="pages per band, font set and dpi")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = measure(load_model(args.model, resolve_device("cpu")), args.pages)
    if args.json:
        print(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return 0
    print(f"{'fonts':9} {'body px':8} {'CER 144':>8} {'CER 288':>8} {'WER 144':>8} {'WER 288':>8}")
    for r in rows:
        lo, hi = r["sizes"]
        print(f"{r['fonts']:9} {f'{lo}-{hi}':8} {r['144']['cer']:8.2%} {r['288']['cer']:8.2%} "
              f"{r['144']['wer']:8.2%} {r['288']['wer']:8.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
