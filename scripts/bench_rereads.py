"""What reading unsure line pieces again costs the built-in model, and what it changes.

    python scripts/bench_rereads.py                    # the pages of samples/
    python scripts/bench_rereads.py DIR --repeats 5    # the PDFs and images under DIR

The built-in model reads a line piece whose mean log-probability per token is under
`layout.REREAD_BELOW` again from taller crops and keeps the likeliest reading. Two sides
decode the same rendered pages with one loaded model through the same `PageDecoder` (page
layout, engine, page assembly, verdicts): `rereads`, as the converter runs, and `first
reading`, with the adapter's `reread_below` at minus infinity. Each side runs once unmeasured,
then the sides alternate --repeats times, their order swapped every repeat. Printed: pages/s
of each side per repeat and their ratio (rereads / first reading), the medians, the share of
line pieces read again, and the pages whose text differs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import orjson

from ocrcli.distributed.page_decoder import PageDecoder
from ocrcli.inputs import PageRef, collect
from ocrcli.models.builtin import BUILTIN_DIR, load
from ocrcli.models.builtin.layout import REREAD_MARGINS
from ocrcli.models.identity import default_render_dpi
from ocrcli.render import RenderSettings, render_page
from ocrcli.settings import ConvertSettings

REPO = Path(__file__).resolve().parents[1]


def rendered_pages(folder: Path) -> list:
    docs, _ = collect([str(folder)])
    render = RenderSettings(dpi=default_render_dpi("builtin"))  # as the converter renders
    pages = [render_page(PageRef(i, d.path, d.kind, p), render)
             for i, d in enumerate(docs) for p in d.pages]
    return [p for p in pages if not p.error]


def timed(decoder: PageDecoder, pages: list, reread_below: float) -> tuple[float, list]:
    decoder.loaded.adapter.reread_below = reread_below
    t0 = time.perf_counter()
    records = decoder.decode(pages)
    return time.perf_counter() - t0, records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, default=REPO / "samples")
    ap.add_argument("--repeats", type=int, default=3, help="measurements of each side, interleaved")
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    pages = rendered_pages(args.folder)
    if not pages:
        print(f"bench_rereads: no pages under {args.folder}", file=sys.stderr)
        return 2
    loaded = load(BUILTIN_DIR)
    default = loaded.adapter.reread_below
    decoder = PageDecoder(loaded, ConvertSettings(inputs=[], out=Path("."), batch_size=args.batch_size))
    sides = {"rereads": default, "first reading": float("-inf")}
    records = {name: timed(decoder, pages, below)[1] for name, below in sides.items()}  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for k in range(args.repeats):
        for name in (list(sides) if k % 2 == 0 else list(sides)[::-1]):
            seconds, records[name] = timed(decoder, pages, sides[name])
            rates[name].append(len(pages) / seconds)
        print(f"repeat {k + 1}: " + ", ".join(f"{n} {r[-1]:.3f} pages/s" for n, r in rates.items())
              + f", ratio {rates['rereads'][-1] / rates['first reading'][-1]:.3f}", file=sys.stderr)
    with_rereads, once = records["rereads"], records["first reading"]
    pieces = sum(r.requests for r in with_rereads)
    read_again = sum(r.rereads for r in with_rereads) / len(REREAD_MARGINS)
    result = {
        "folder": str(args.folder), "pages": len(pages), "repeats": args.repeats,
        "pages_per_s": {n: round(statistics.median(r), 4) for n, r in rates.items()},
        "ratio": round(statistics.median(a / b for a, b in zip(*rates.values())), 4),
        "pieces": pieces,
        "pieces_read_again": round(read_again / max(1, pieces), 4),
        "pages_changed": [f"{Path(p.ref.path).name}#{p.ref.page}" for p, a, b in
                          zip(pages, with_rereads, once) if a.text != b.text],
    }
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
