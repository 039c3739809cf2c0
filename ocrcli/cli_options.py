"""The options that `convert`, `ray-convert` and `eval` share, and how `--help` shows them.

Declared once, as `Annotated` types, so the commands cannot drift apart. Each option names its
value by a metavar (DIR, FILE, N) and sits in a help panel; decoding's tuning knobs have an
advanced panel of their own, below what most runs need.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from ocrcli.engine.policy import Drafter
from ocrcli.errors import ExitCode

INPUT = "Input"
OUTPUT = "Output and exit code"
RUN = "Model and run"
DECODING = "Decoding (advanced; the output is the same with any of these)"


def _unnamed_flags(params: list) -> None:
    """Flags take no value: typer would show their Python type (`<bool>`) beside them."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""


class Group(TyperGroup):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _unnamed_flags(self.params)

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        _unnamed_flags([option])
        return option


class Command(TyperCommand):
    """A command whose help names a value by its metavar alone: typer would add the Python
    annotation (`<list[str]>`, `<bool>`), which tells a user nothing."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _unnamed_flags(self.params)
        for param in self.params:
            if isinstance(param, TyperArgument) and param.metavar:
                param.display_type_rich = lambda ctx: None

    def get_help_option(self, ctx):
        """`--help` joins the first panel of a command whose options all sit in panels, so it
        does not stand alone in a default panel above them."""
        option = super().get_help_option(ctx)
        _unnamed_flags([option])
        options = [p for p in self.params if isinstance(p, TyperOption)]
        panels = [getattr(p, "rich_help_panel", None) for p in options]
        if option is not None and panels and all(panels):
            option.rich_help_panel = panels[0]
        return option


# What an exit code means, for --help (README's table says the same at more length).
EXIT_MEANINGS = {
    ExitCode.ok: "every page converted and trusted",
    ExitCode.pages_failed: "some pages or documents failed (the rest were written)",
    ExitCode.usage: "bad options, or no input documents",
    ExitCode.model_error: "the model could not be loaded",
    ExitCode.output_error: "the output folder is not writable, or the disk filled up",
    ExitCode.pages_flagged: "every page converted, some flagged truncated or degenerate "
                            "(--accept makes this 0)",
    ExitCode.internal_error: "a bug in ocrcli (--debug shows the traceback)",
    ExitCode.interrupted: "interrupted (SIGINT/SIGTERM); finished pages were kept",
}


def convert_epilog() -> str:
    """`convert --help`'s closing text: examples, the output layout and the exit codes.
    Paragraphs are separated by blank lines; lines inside one are kept (rich markup)."""
    exit_lines = "\n".join(f"  {int(code):>3}  {meaning}" for code, meaning in EXIT_MEANINGS.items())
    return (
        "[b]Examples[/b]\n"
        "  ocrcli convert scans/ -o out/                   every PDF and image under scans/\n"
        "  ocrcli convert report.pdf --pages 1-3 -o -      pages 1-3 as Markdown on stdout\n"
        "  ocrcli convert in/ -o out/ --log json           one JSON event per page on stderr\n"
        "  ocrcli convert in/ -o out/ --retry degenerate   resume, converting flagged pages again\n"
        "  find in -name '*.pdf' | ocrcli convert --files-from - -o out/\n\n"
        "[b]Output[/b]\n"
        "  OUT/NAME/page-0001.md, page-0001.json   each page's Markdown; status, reason, counts\n"
        "  OUT/NAME/manifest.json                  page statuses and the settings fingerprint\n"
        "  OUT/NAME.md                             the whole document\n"
        "  OUT/summary.json                        the run: counts, failures, flagged pages, speed\n"
        "  NAME is the input's path as given, as `cp -r INPUT... OUT/` would name its copy.\n\n"
        f"[b]Exit codes[/b]\n{exit_lines}")


Inputs = Annotated[list[str], typer.Argument(
    metavar="INPUT", show_default=False,
    help="PDFs, images, folders (recursive) or globs. Put -- before names that start with a dash.")]
FilesFrom = Annotated[str, typer.Option(
    "--files-from", metavar="FILE", rich_help_panel=INPUT,
    help="Also read inputs from this file, one per line ('-': stdin); blank lines are skipped, "
         "spaces in names are kept.")]
Pages = Annotated[str, typer.Option(
    "--pages", metavar="PAGES", rich_help_panel=INPUT, help="1-based pages, e.g. 1-3,7.")]
Dpi = Annotated[int | None, typer.Option(
    "--dpi", min=36, max=600, metavar="N", rich_help_panel=INPUT, show_default=False,
    help="PDF rendering resolution (default: the model's own, 288 for the built-in model "
         "and 144 for DeepSeek-OCR and Jina-OCR-v1).")]
MaxPixels = Annotated[int, typer.Option(
    "--max-pixels", min=10_000, metavar="N", rich_help_panel=INPUT,
    help="Pixel cap per page image.")]
Password = Annotated[str, typer.Option(
    "--password", metavar="TEXT", rich_help_panel=INPUT, help="Password for encrypted PDFs.")]
Shard = Annotated[str, typer.Option(
    "--shard", metavar="K/N", rich_help_panel=INPUT, help="This run's share of documents.")]

Formats = Annotated[str, typer.Option(
    "--format", metavar="md,json", rich_help_panel=OUTPUT, help="Per-page outputs: md, json or both.")]
Resume = Annotated[bool, typer.Option(
    "--resume/--overwrite", rich_help_panel=OUTPUT,
    help="Skip pages already done with the same settings.")]
Summary = Annotated[str, typer.Option(
    "--summary", metavar="FILE", rich_help_panel=OUTPUT,
    help="Also write the run summary JSON here; '-' prints it to stdout.")]
Accept = Annotated[str, typer.Option(
    "--accept", metavar="STATUSES", rich_help_panel=OUTPUT,
    help="Flagged statuses that still exit 0: truncated, degenerate or both (default: none; a "
         "run with flagged pages exits 5).")]
Retry = Annotated[str, typer.Option(
    "--retry", metavar="STATUSES", rich_help_panel=OUTPUT,
    help="Done statuses that a resumed run converts again: truncated, degenerate or both "
         "(failed pages are always retried).")]
Quiet = Annotated[bool, typer.Option(
    "--quiet", "-q", rich_help_panel=OUTPUT, help="Only errors.")]

Model = Annotated[str, typer.Option(
    "--model", metavar="MODEL", rich_help_panel=RUN,
    help="builtin, a hub id, or a folder (`ocrcli models` lists them).")]
DEFAULT_MODEL = "builtin"  # what --model is when not given (`ocrcli models` marks it)
Device = Annotated[str, typer.Option(
    "--device", metavar="DEVICE", rich_help_panel=RUN, help="auto, cpu, cuda, cuda:N or mps.")]
BatchSize = Annotated[int, typer.Option(
    "--batch-size", min=1, metavar="N", rich_help_panel=RUN, help="Requests decoded together.")]
MaxNewTokens = Annotated[int, typer.Option(
    "--max-new-tokens", min=1, metavar="N", rich_help_panel=RUN,
    help="Token cap per request (status 'truncated'). Default: the model's.")]
Prompt = Annotated[str, typer.Option(
    "--prompt", metavar="TEXT", rich_help_panel=RUN, help="Override the model's instruction.")]
ImageMode = Annotated[str, typer.Option(
    "--mode", metavar="MODE", rich_help_panel=RUN,
    help="Image mode of DeepSeek-OCR / Jina-OCR-v1: tiny, small, base, large, gundam (default) "
         "or gundam-m.")]
PageTimeout = Annotated[float, typer.Option(
    "--page-timeout", min=0.001, metavar="SECONDS", rich_help_panel=RUN,
    help="Seconds one page may take to render and to decode; a slower page is stopped with "
         "status 'timeout'.")]

DraftDepth = Annotated[int, typer.Option(
    "--draft-depth", min=0, max=16, metavar="N", rich_help_panel=DECODING,
    help="Draft tokens per step (0: plain greedy). Default: confidence-gated up to the head's "
         "depth.")]
DrafterOption = Annotated[Drafter, typer.Option(
    "--drafter", metavar="DRAFTER", rich_help_panel=DECODING,
    help="Where drafts come from: auto (the PDF's text layer where it matches, else the "
         "model's head), head, text-layer or none.")]
MinProb = Annotated[float, typer.Option(
    "--draft-min-prob", min=0.0, max=1.0, metavar="P", rich_help_panel=DECODING,
    help="Gated drafting: stop below this draft probability.")]
MinPathProb = Annotated[float, typer.Option(
    "--draft-min-path-prob", min=0.0, max=1.0, metavar="P", rich_help_panel=DECODING,
    help="Gated drafting: stop below this running product.")]

# Options of `eval` and `status`.
JsonOut = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]

# Options of `convert` alone.
ConvertOut = Annotated[str, typer.Option(
    "-o", "--out", metavar="DIR", rich_help_panel=OUTPUT,
    help="Output folder. '-': print the document's Markdown to stdout (one input document; "
         "its page files go to a temporary folder, removed afterwards); './-' is a folder "
         "named '-'.")]
RenderWorkers = Annotated[int, typer.Option(
    "--render-workers", min=0, metavar="N", rich_help_panel=RUN,
    help="Renderer processes (0: render in this process).")]
Workers = Annotated[int, typer.Option(
    "--workers", min=1, max=64, metavar="N", rich_help_panel=RUN,
    help="Converter processes: one per GPU when there are enough, else sharing the CPU "
         "cores. Same output as 1.")]
ConvertLog = Annotated[str, typer.Option(
    "--log", metavar="MODE", rich_help_panel=OUTPUT,
    help="auto, rich, plain or json (auto: rich on a terminal, else plain).")]
CudaGraphs = Annotated[bool, typer.Option(
    "--cuda-graphs/--no-cuda-graphs", rich_help_panel=DECODING,
    help="On CUDA, compile each decode step and replay it as a CUDA graph.")]

Rereads = Annotated[bool, typer.Option(
    "--rereads/--no-rereads", rich_help_panel=DECODING,
    help="Built-in model: read a line piece it is unsure of again from taller crops and keep "
         "the likelier reading (slower on hard pages).")]

# Options of `ray-convert` alone.
RayOut = Annotated[Path, typer.Option(
    "-o", "--out", metavar="DIR", rich_help_panel=OUTPUT,
    help="Output folder (on a cluster: a path every node mounts).")]
RayAddress = Annotated[str, typer.Option(
    "--address", metavar="ADDRESS", rich_help_panel=RUN,
    help="Ray cluster address (default: $RAY_ADDRESS, else a local Ray).")]
RayActors = Annotated[int, typer.Option(
    "--actors", min=1, metavar="N", rich_help_panel=RUN,
    help="Model replicas (default: one per GPU, 1 without GPUs).")]
GpusPerActor = Annotated[float, typer.Option(
    "--gpus-per-actor", min=0, metavar="N", rich_help_panel=RUN,
    help="Default: 1 when the cluster has GPUs, else 0.")]
PagesPerBatch = Annotated[int, typer.Option(
    "--pages-per-batch", min=1, metavar="N", rich_help_panel=RUN,
    help="Pages an actor decodes together.")]
RayDevice = Annotated[str, typer.Option(
    "--device", metavar="DEVICE", rich_help_panel=RUN,
    help="auto (a GPU when the actor has one), cpu or cuda.")]
RayLog = Annotated[str, typer.Option(
    "--log", metavar="MODE", rich_help_panel=OUTPUT, help="plain or json.")]
