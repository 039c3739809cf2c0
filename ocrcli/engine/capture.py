"""A model's decode-step functions compiled whole, so a GPU replays each step as one graph.

`torch.compile(fullgraph=True)` of the verify forward, the draft step and the head's cache
refill: a graph break would fail loudly instead of silently splitting the step. With the
default mode on CUDA ("reduce-overhead") the compiled step runs as a CUDA graph, and the host
launches it once instead of dispatching every operator. Shapes are static per (rows, T, span),
which a fast engine keeps to a few buckets (scheduler.Engine._span): each compiles once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CaptureSettings:
    mode: str | None = "reduce-overhead"  # torch.compile's mode (inductor); CUDA graphs
    backend: str = "inductor"  # "eager" / "aot_eager" trace without generating code (tests)


# Graphs one step function may hold: (rows, T, span) shapes per engine, times the engines a
# process builds over one model class (dynamo counts them per code object). Past torch's
# default of 8, fullgraph=True would fail instead of compiling another shape.
RECOMPILE_LIMIT = 256


def capture_failures() -> tuple[type[BaseException], ...]:
    """What a step that cannot be compiled raises (tracing, code generation or the recompile
    limit), before it has changed any state: the engine then runs it eagerly. Empty until
    torch.compile has been used: torch._dynamo takes longer to import than torch itself, and
    no step can raise its errors before it is imported."""
    if "torch._dynamo" not in sys.modules:
        return ()
    import torch._dynamo.exc
    import torch._inductor.exc

    return (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit,
            torch._inductor.exc.InductorError)


class CapturedSteps:
    """Stands in for the model in `decode_step`: the three step functions are compiled, the
    rest (spec, prefill, caches) is the model's own."""

    def __init__(self, model, settings: CaptureSettings = CaptureSettings()):
        self.model = model
        options = {"fullgraph": True, "dynamic": False, "backend": settings.backend}
        if settings.backend == "inductor" and settings.mode:
            options["mode"] = settings.mode
        self._forward = torch.compile(model.forward, **options)
        self._draft = torch.compile(model.draft, **options)
        self._draft_commit = torch.compile(model.draft_commit, **options)

    def forward(self, *args, **kwargs):
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            return self._forward(*args, **kwargs)

    def draft(self, *args, **kwargs):
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            return self._draft(*args, **kwargs)

    def draft_commit(self, *args, **kwargs):
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            return self._draft_commit(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.model, name)
