#!/usr/bin/env python3
"""Score one system on an olmOCR-Bench folder with ours and the official scorer; compare.

Usage (defaults: the olmOCR-Bench sample in a data folder beside the checkout, see
``DEFAULT_BENCH``, and olmOCR's own outputs)::

    python scripts/compare_olmocr_scorer.py [--dir BENCH] [--system NAME]
        [--official-python PYTHON]

The official scorer (``python -m olmocr.bench.benchmark``) runs in a
subprocess with ``--official-python`` (default: this interpreter) if it can
import it; it is never a dependency of ocrcli. To install it without its heavy
dependencies (ideally in a separate virtual environment)::

    pip install --no-deps olmocr==0.4.27
    pip install fuzzysearch rapidfuzz "pypdf>=5.2" numpy beautifulsoup4 lxml tqdm \
        playwright Pillow pypdfium2

Its math tests also need the headless Chromium that Playwright drives (Playwright's own
browser download, or Debian's ``chromium-headless-shell`` linked where Playwright looks for
it; pin Playwright, whose browser revision it names); ours uses the same one when
``playwright`` is importable here, and otherwise reports undecidable math tests
as skipped, in which case the math-bearing categories cannot be identical.

Exit status: 0 when per-category results are identical, 1 when they differ,
2 when the official scorer is not available.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# OCRCLI_REAL_DATA names the folder of real documents, as for the tests (tests/conftest.py)
REAL_DATA = Path(os.environ.get("OCRCLI_REAL_DATA", REPO_ROOT.parent / "shared" / "data"))
DEFAULT_BENCH = REAL_DATA / "olmocr-bench-sample"

INSTALL_HINT = """The official scorer is not importable by {python}.
Install it (a separate virtual environment keeps its packages out of ocrcli's):
    python -m venv --system-site-packages /path/to/olmocr-venv
    /path/to/olmocr-venv/bin/pip install --no-deps olmocr==0.4.27
    /path/to/olmocr-venv/bin/pip install fuzzysearch rapidfuzz "pypdf>=5.2" numpy \\
        beautifulsoup4 lxml tqdm playwright Pillow pypdfium2
then rerun this script with that interpreter (so that ours can use its Playwright
for math too):  /path/to/olmocr-venv/bin/python scripts/compare_olmocr_scorer.py
Math tests also need the headless Chromium that Playwright drives."""


@dataclass(frozen=True)
class Row:
    passed: int
    total: int

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass
class Table:
    categories: dict[str, Row]
    by_type: dict[str, tuple[str, int]]  # type -> (percentage as printed, count)
    overall: str  # percentage as printed, one decimal
    not_all_passed: set[str]  # ids of tests that failed on some repeat
    math_skipped: int = 0


def _ours(bench: Path, system: str, bootstrap: int) -> Table:
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from ocrcli.evaluation.olmocr_bench import format_bench_table, score_bench

    score = score_bench(bench, system, bootstrap=bootstrap)
    print("=== ours (ocrcli.evaluation) ===")
    print(format_bench_table(score))
    return Table(
        categories={c.name: Row(c.passed, c.total) for c in score.categories},
        by_type={t.type: (f"{100 * t.mean:.1f}", t.count) for t in score.by_type},
        overall=f"{100 * score.overall:.1f}",
        not_all_passed={r.id for r in score.results if r.status != "skipped" and r.score < 1.0},
        math_skipped=score.math_skipped,
    )


def _official_available(python: str) -> bool:
    probe = subprocess.run(
        [python, "-c", "import olmocr.bench.benchmark"], capture_output=True, text=True
    )
    return probe.returncode == 0


_CATEGORY_LINE = re.compile(r"^\s+(\S+)\s*: ([\d.]+)% \((\d+)/(\d+) tests\)$")
_TYPE_LINE = re.compile(r"^\s+(\w+)\s*: ([\d.]+)% average pass rate over (\d+) tests$")
_OVERALL_LINE = re.compile(r"^\S.*: Average Score: ([\d.]+)%")
_FAIL_LINE = re.compile(r"^\s+\[FAIL\] Test (\S+) on ")


def _official(python: str, bench: Path, system: str, bootstrap: int) -> Table:
    run = subprocess.run(
        [
            python, "-m", "olmocr.bench.benchmark", "--dir", str(bench), "--candidate", system,
            "--bootstrap_samples", str(max(bootstrap, 1)),
        ],
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        sys.exit(f"official scorer failed (exit {run.returncode}):\n{run.stdout}\n{run.stderr}")
    summary = run.stdout.split("Final Summary", 1)[-1]
    print("=== official (olmocr.bench.benchmark) ===")
    print("Final Summary" + summary.rstrip())
    table = parse_official_output(run.stdout)
    if not table.categories:
        sys.exit("could not read the official per-category table; output was:\n" + run.stdout)
    return table


def parse_official_output(stdout: str) -> Table:
    """Read the official scorer's printed results (per file, per type, overall, failures)."""
    summary = stdout.split("Final Summary", 1)[-1]
    categories: dict[str, Row] = {}
    by_type: dict[str, tuple[str, int]] = {}
    overall = "?"
    for line in summary.splitlines():
        if m := _CATEGORY_LINE.match(line):
            # Official categories are file names ("dataset.jsonl"); ours are stems.
            name = m.group(1).removesuffix(".jsonl")
            categories[name] = Row(int(m.group(3)), int(m.group(4)))
        elif m := _TYPE_LINE.match(line):
            by_type[m.group(1)] = (m.group(2), int(m.group(3)))
        elif m := _OVERALL_LINE.match(line):
            overall = m.group(1)
    failed = {m.group(1) for line in stdout.splitlines() if (m := _FAIL_LINE.match(line))}
    return Table(categories, by_type, overall, failed)


def compare(ours: Table, official: Table) -> bool:
    names = sorted(set(ours.categories) | set(official.categories))
    print("\n=== per-category comparison ===")
    print(f"{'category':<20} {'ours':>14} {'official':>14}  same")
    same_all = True
    for name in names:
        a, b = ours.categories.get(name), official.categories.get(name)
        same = a == b
        same_all &= same
        fa = f"{a.passed}/{a.total} {100 * a.rate:.1f}%" if a else "-"
        fb = f"{b.passed}/{b.total} {100 * b.rate:.1f}%" if b else "-"
        print(f"{name:<20} {fa:>14} {fb:>14}  {'yes' if same else 'NO'}")
    types_same = ours.by_type == official.by_type
    overall_same = ours.overall == official.overall
    print(f"{'overall':<20} {ours.overall + '%':>14} {official.overall + '%':>14}  "
          f"{'yes' if overall_same else 'NO'}")
    print(f"per-type breakdown identical: {'yes' if types_same else 'NO'}")
    tests_same = ours.not_all_passed == official.not_all_passed
    print(f"failing tests identical: {'yes' if tests_same else 'NO'} "
          f"({len(ours.not_all_passed)} ours, {len(official.not_all_passed)} official)")
    for test_id in sorted(ours.not_all_passed ^ official.not_all_passed):
        side = "ours" if test_id in ours.not_all_passed else "official"
        print(f"  fails only in {side}: {test_id}")
    identical = same_all and types_same and overall_same and tests_same
    print(f"\nIDENTICAL: {'yes' if identical else 'NO'}")
    return identical


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_BENCH, help="bench folder")
    parser.add_argument("--system", default="olmocr_pipeline", help="output folder to score")
    parser.add_argument(
        "--official-python", default=sys.executable, help="interpreter that has olmocr installed"
    )
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples")
    args = parser.parse_args()
    if not args.dir.is_dir():
        print(f"bench folder {args.dir} not found", file=sys.stderr)
        return 2

    ours = _ours(args.dir, args.system, args.bootstrap)
    print()
    if not _official_available(args.official_python):
        print(INSTALL_HINT.format(python=args.official_python))
        return 2
    official = _official(args.official_python, args.dir, args.system, args.bootstrap)
    if ours.math_skipped:
        print(
            f"\nnote: ours skipped {ours.math_skipped} math tests (no KaTeX renderer in this "
            "interpreter); run the script with the official scorer's interpreter to compare them"
        )
    return 0 if compare(ours, official) else 1


if __name__ == "__main__":
    sys.exit(main())
