"""What a conversion run is asked to do (`ConvertSettings`, one per `convert`, `--workers`
worker, `ray-convert` and `eval`), and the processes and threads it takes on this host."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ocrcli.engine.policy import GATED_DEFAULT
from ocrcli.faults import Faults
from ocrcli.inputs import PageRef
from ocrcli.models.identity import default_render_dpi


@dataclass
class ConvertSettings:
    inputs: list[str]
    out: Path
    formats: frozenset[str] = frozenset({"md", "json"})
    pages: set[int] | None = None
    dpi: int | None = None  # None: the model's own (models.identity.default_render_dpi)
    max_pixels: int = 12_000_000
    model: str = "builtin"
    device: str = "auto"
    batch_size: int = 16
    draft_depth: int | None = None  # None: the model's gated default; 0: plain greedy
    drafter: str = "auto"  # engine.policy.Drafter: auto | head | text-layer | none
    min_prob: float = GATED_DEFAULT.min_prob
    min_path_prob: float = GATED_DEFAULT.min_path_prob
    max_new_tokens: int | None = None  # None: the model's own default
    prompt: str | None = None
    resume: bool = True
    render_workers: int = 1
    password: str | None = None
    shard: tuple[int, int] | None = None
    log: str = "plain"
    quiet: bool = False
    page_timeout: float | None = None  # seconds for one page: rendering, then decoding
    worker: tuple[int, int] | None = None  # (k, n): worker k of `--workers n` (see workers.py)
    threads: int | None = None  # torch threads; None: `decode_threads`
    mode: str | None = None  # image mode of a full-page model (--mode); None: its default
    cuda_graphs: bool = True  # on CUDA, compile each decode step whole and replay it as a graph
    rereads: bool = True  # the built-in model reads an unsure line piece again (--no-rereads: off)
    accept: frozenset[str] = frozenset()  # flagged statuses that still exit 0 (--accept)
    retry: frozenset[str] = frozenset()  # done statuses a resumed run converts again (--retry)
    # Injected faults (tests only): read from the environment once, as the run's settings are
    # made, and armed only with OCRCLI_ENABLE_FAULTS=1 (faults.py).
    faults: Faults = field(default_factory=Faults.from_env)

    def __post_init__(self) -> None:
        if self.dpi is None:
            self.dpi = default_render_dpi(self.model)


def render_processes(s: ConvertSettings, todo: list[PageRef]) -> int:
    """Render worker processes for these pages: `--render-workers`, except that a lone image
    page without `--page-timeout` renders in this process. Starting a worker (a fresh
    interpreter that imports the renderer and the model's page preparation) takes longer than
    such a page, and the image was already opened here and checked against the pixel limit;
    a PDF always renders in a worker, where PDFium's crashes and memory stay contained. The
    decode threads still count `--render-workers`, so decoding is the same either way."""
    if len(todo) == 1 and todo[0].kind == "image" and s.page_timeout is None:
        return 0
    return s.render_workers


def decode_threads(render_workers: int, share: int = 1) -> int:
    """Torch threads for decoding: the cores the render workers leave, of this process's
    share of the machine. OpenMP threads spin while they wait, so a thread on a core that a
    renderer also needs slows both (scripts/bench_pipeline.py on 2 cores, built-in model:
    4.40 pages/s with 1 thread beside 1 render worker, 3.55 with 2). OMP_NUM_THREADS, when
    set, wins."""
    if os.environ.get("OMP_NUM_THREADS"):
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    return max(1, (os.cpu_count() or 1) // share - render_workers)
