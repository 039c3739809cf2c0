"""Evaluation: olmOCR-Bench scoring and document metrics.

Modules, each owning one thing:

* :mod:`~ocrcli.evaluation.olmocr_bench`: score a system's outputs on an
  olmOCR-Bench folder (:func:`score_bench`, :func:`format_bench_table`,
  :func:`bench_conversion_jobs`);
* :mod:`~ocrcli.evaluation.bench_rules`: the bench's rule types;
* :mod:`~ocrcli.evaluation.math_render`: KaTeX rendering equivalence (optional);
* :mod:`~ocrcli.evaluation.normalize`: olmOCR-Bench and OmniDocBench normalisation;
* :mod:`~ocrcli.evaluation.tables`: Markdown/HTML tables as grids;
* :mod:`~ocrcli.evaluation.teds`: TEDS and TEDS-S;
* :mod:`~ocrcli.evaluation.edit_distance`: OmniDocBench text and reading-order NED;
* :mod:`~ocrcli.evaluation.repetition`, :mod:`~ocrcli.evaluation.bootstrap`,
  :mod:`~ocrcli.evaluation.html_tree`: helpers.

and :mod:`~ocrcli.evaluation.run`, the `ocrcli eval` command. The dense per-page quality
checks, which the converter runs on every page, are :mod:`ocrcli.quality`. Apart from
:mod:`~ocrcli.evaluation.run`, these modules import nothing of ocrcli outside this package,
so the runtime may build on them (the quality checks read HTML with ``html_tree``).

Names below are imported on first use, so that e.g. importing
``teds`` does not load the bench scorer's dependencies.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "score_bench": "olmocr_bench",
    "format_bench_table": "olmocr_bench",
    "bench_conversion_jobs": "olmocr_bench",
    "BenchScore": "olmocr_bench",
    "ConversionJob": "olmocr_bench",
    "MissingOutputsError": "olmocr_bench",
    "teds": "teds",
    "text_edit_distance": "edit_distance",
    "page_text_edit_distance": "edit_distance",
    "reading_order_edit_distance": "edit_distance",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
