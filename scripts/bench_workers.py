"""`--workers N` vs `--workers 1`: pages/s side by side in one run, and identical outputs.

    python scripts/bench_workers.py                  # 40-page PDF from samples/, N = 2
    python scripts/bench_workers.py --pages 80 --workers 2,4 --json

Each setting runs the real `ocrcli convert` entry point in a subprocess on the same PDF into
its own output folder (`--overwrite`), rounds alternating so a slow spell of a shared machine
touches every setting alike; the best wall time per setting counts (model loading and worker
start-up included: that is what a user waits for). Every output file except summary.json is
compared byte for byte with the `--workers 1` run.
"""

from __future__ import annotations

import argparse
import filecmp
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import make_pdf  # noqa: E402  (scripts/ is not a package)


def convert(pdf: Path, out: Path, workers: int) -> float:
    cmd = ["ocrcli", "convert", str(pdf), "-o", str(out), "--overwrite", "--quiet",
           "--workers", str(workers)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return seconds


def differing_files(a: Path, b: Path) -> list[str]:
    names = {p.relative_to(a) for p in a.rglob("*") if p.is_file()} | \
            {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    return sorted(str(n) for n in names if n.name != "summary.json"
                  and not ((a / n).is_file() and (b / n).is_file()
                           and filecmp.cmp(a / n, b / n, shallow=False)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=40)
    ap.add_argument("--workers", default="2", help="settings to compare with 1, e.g. 2,4")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    settings = [1] + [int(w) for w in args.workers.split(",") if int(w) != 1]
    with tempfile.TemporaryDirectory() as tmp:
        pdf = make_pdf(Path(tmp) / "doc.pdf", args.pages)
        best = {w: float("inf") for w in settings}
        for _ in range(args.repeats):
            for w in settings:
                best[w] = min(best[w], convert(pdf, Path(tmp) / f"out-{w}", w))
        rows = []
        for w in settings:
            diff = differing_files(Path(tmp) / "out-1", Path(tmp) / f"out-{w}")
            rows.append({"workers": w, "seconds": round(best[w], 2),
                         "pages_per_s": round(args.pages / best[w], 3),
                         "ratio_to_1": round(best[1] / best[w], 3),
                         "identical_to_1": not diff, "differing_files": diff[:5]})
    result = {"pages": args.pages, "repeats": args.repeats, "rows": rows,
              "identical": all(r["identical_to_1"] for r in rows)}
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        for r in rows:
            print(f"--workers {r['workers']}: {r['pages_per_s']:.2f} pages/s "
                  f"({r['ratio_to_1']:.2f}x of 1), identical: {r['identical_to_1']}")
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
