"""A model's decode-step functions compiled whole, so a GPU replays each step as one graph.

`torch.compile(fullgraph=True)` of the verify forward, the draft step and the head's cache
refill: a graph break would fail loudly instead of silently splitting the step. With the
default mode on CUDA ("reduce-overhead") the compiled step runs as a CUDA graph, and the host
launches it once instead of dispatching every operator. Shapes are static per (rows, T, span),
which a fast engine keeps to a few buckets (scheduler.Engine._span): each compiles once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CaptureSettings:
    mode: str | None = "reduce-overhead"  # torch.compile's mode (inductor); CUDA graphs
    backend: str = "inductor"  # "eager" / "aot_eager" trace without generating code (tests)


class CapturedSteps:
    """Stands in for the model in `decode_step`: the three step functions are compiled, the
    rest (spec, prefill, caches) is the model's own."""

    def __init__(self, model, settings: CaptureSettings = CaptureSettings()):
        self.model = model
        options = {"fullgraph": True, "dynamic": False, "backend": settings.backend}
        if settings.backend == "inductor" and settings.mode:
            options["mode"] = settings.mode
        self.forward = torch.compile(model.forward, **options)
        self.draft = torch.compile(model.draft, **options)
        self.draft_commit = torch.compile(model.draft_commit, **options)

    def __getattr__(self, name: str):
        return getattr(self.model, name)
