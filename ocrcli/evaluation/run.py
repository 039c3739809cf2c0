"""`ocrcli eval`: convert the pages an olmOCR-Bench folder tests, then score them.

The bench folder may be read-only, so the run works in OUT: the bench's JSONL files and PDFs
are linked there, pages are converted with the ordinary converter (so the run resumes like
`convert`), and each tested page's Markdown is placed in the official layout
`OUT/<system>/<pdf stem>_pg<P>_repeat1.md`, which the official scorer also reads.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

from ocrcli.convert import Converter
from ocrcli.errors import ExitCode, UsageError, one_line
from ocrcli.evaluation.olmocr_bench import BenchScore, bench_conversion_jobs, score_bench
from ocrcli.inputs import relative_names
from ocrcli.progress import Reporter
from ocrcli.settings import ConvertSettings


def _link_bench(bench: Path, work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    for item in [*sorted(bench.glob("*.jsonl")), bench / "pdfs"]:
        target = work / item.name
        if target.is_symlink() or target.exists():
            continue
        try:
            os.symlink(item.resolve(), target, target_is_directory=item.is_dir())
        except OSError:
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, target)


def run_eval(bench: Path, work: Path, system: str, settings: ConvertSettings,
             reporter: Reporter) -> tuple[ExitCode, BenchScore, dict]:
    if not (bench / "pdfs").is_dir() or not list(bench.glob("*.jsonl")):
        raise UsageError(f"{bench} is not an olmOCR-Bench folder (*.jsonl and pdfs/)")
    try:  # the bench's own files are checked before anything is written
        bench_conversion_jobs(bench, system)
    except ValueError as exc:  # a malformed rule (file:line: why), a 'pdf' outside pdfs/, --system
        raise UsageError(one_line(exc)) from None
    _link_bench(bench, work)
    jobs = bench_conversion_jobs(work, system)
    pdfs = sorted({j.pdf_path for j in jobs})
    pages = {j.page for j in jobs}
    convert_dir = work / f"{system}.pages"
    # The score judges flagged pages; they do not fail the evaluation.
    s = replace(settings, inputs=[str(p) for p in pdfs], out=convert_dir, pages=pages,
                accept=frozenset({"truncated", "degenerate"}))
    code, summary = Converter(s, reporter).run()
    rel = dict(zip(pdfs, relative_names(pdfs)))
    for job in jobs:
        page_md = convert_dir / rel[job.pdf_path] / f"page-{job.page:04d}.md"
        job.output_path.parent.mkdir(parents=True, exist_ok=True)
        text = page_md.read_text(encoding="utf-8") if page_md.exists() else ""
        job.output_path.write_text(text, encoding="utf-8")
    return code, score_bench(work, system, force=True), summary
