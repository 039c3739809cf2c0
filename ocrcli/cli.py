"""The `ocrcli` command line: parses options into dataclasses and calls the package."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer

from ocrcli import __version__
from ocrcli.engine.policy import GATED_DEFAULT
from ocrcli.errors import ExitCode, OcrCliError
from ocrcli.inputs import parse_pages, parse_shard
from ocrcli.progress import Reporter

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Convert folders of PDFs and images to Markdown and JSON, page by page.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ocrcli {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """ocrcli: document-to-Markdown with lossless speculative decoding."""


def _fail(exc: OcrCliError) -> None:
    typer.echo(f"ocrcli: error: {exc}", err=True)
    raise typer.Exit(int(exc.exit_code))


# Options that `convert`, `ray-convert` and `eval` share, declared once (as `Annotated`
# types) so the commands cannot drift apart.
Inputs = Annotated[list[str], typer.Argument(
    help="PDFs, images, folders (recursive) or globs. Put -- before names that start with a dash.")]
Formats = Annotated[str, typer.Option("--format", help="Per-page outputs: md, json or both.")]
Pages = Annotated[str, typer.Option("--pages", help="1-based pages, e.g. 1-3,7.")]
Dpi = Annotated[int, typer.Option("--dpi", min=36, max=600, help="PDF rendering resolution.")]
MaxPixels = Annotated[int, typer.Option("--max-pixels", min=10_000, help="Pixel cap per page image.")]
Model = Annotated[str, typer.Option("--model", help="builtin, a hub id, or a folder.")]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda[:N] or mps.")]
BatchSize = Annotated[int, typer.Option("--batch-size", min=1, help="Requests decoded together.")]
DraftDepth = Annotated[int, typer.Option(
    "--draft-depth", min=0, max=16, help="Draft tokens per step (0: plain greedy). "
                                         "Default: confidence-gated up to the head's depth.")]
MinProb = Annotated[float, typer.Option(
    "--draft-min-prob", min=0.0, max=1.0,
    help="Gated drafting: stop below this draft probability.")]
MinPathProb = Annotated[float, typer.Option(
    "--draft-min-path-prob", min=0.0, max=1.0,
    help="Gated drafting: stop below this running product.")]
MaxNewTokens = Annotated[int, typer.Option(
    "--max-new-tokens", min=1, help="Token cap per request (status 'truncated').")]
Prompt = Annotated[str, typer.Option("--prompt", help="Override the model's instruction.")]
ImageMode = Annotated[str, typer.Option(
    "--mode", help="Image mode of DeepSeek-OCR / Jina-OCR-v1: tiny, small, base, large, "
                   "gundam (default) or gundam-m.")]
Resume = Annotated[bool, typer.Option(
    "--resume/--overwrite", help="Skip pages already done with the same settings.")]
Password = Annotated[str, typer.Option("--password", help="Password for encrypted PDFs.")]
PageTimeout = Annotated[float, typer.Option(
    "--page-timeout", min=0.001, help="Seconds one page may take to render and to decode; "
                                      "a slower page is stopped with status 'timeout'.")]
Summary = Annotated[str, typer.Option(
    "--summary", help="Also write the run summary JSON here; '-' prints it to stdout.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Only errors.")]


def _formats(format: str) -> frozenset[str]:
    formats = frozenset(f.strip() for f in format.split(",") if f.strip())
    if not formats or not formats <= {"md", "json"}:
        raise typer.BadParameter("use md, json or md,json", param_hint="--format")
    return formats | {"json"}  # the JSON record is what resume and status read


def _write_summary(summary: str | None, result: dict) -> None:
    from ocrcli.output import atomic_write

    if summary == "-":
        sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    elif summary:
        atomic_write(Path(summary), orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")


@app.command()
def convert(
    inputs: Inputs,
    out: Annotated[Path, typer.Option("-o", "--out", help="Output folder.")],
    format: Formats = "md,json",
    pages: Pages = None,
    dpi: Dpi = 144,
    max_pixels: MaxPixels = 12_000_000,
    model: Model = "builtin",
    device: Device = "auto",
    batch_size: BatchSize = 16,
    draft_depth: DraftDepth = None,
    min_prob: MinProb = GATED_DEFAULT.min_prob,
    min_path_prob: MinPathProb = GATED_DEFAULT.min_path_prob,
    max_new_tokens: MaxNewTokens = None,
    prompt: Prompt = None,
    image_mode: ImageMode = None,
    resume: Resume = True,
    render_workers: Annotated[int, typer.Option(
        "--render-workers", min=0, help="Renderer processes (0: render in this process).")] = 1,
    password: Password = None,
    page_timeout: PageTimeout = None,
    shard: Annotated[str, typer.Option(
        "--shard", help="K/N: this worker's share of documents.")] = None,
    workers: Annotated[int, typer.Option(
        "--workers", min=1, max=64, help="Converter processes: one per GPU when there are "
                                         "enough, else sharing the CPU cores. Same output as 1.")] = 1,
    summary: Summary = None,
    log: Annotated[str, typer.Option("--log", help="auto, rich, plain or json.")] = "auto",
    quiet: Quiet = False,
    cuda_graphs: Annotated[bool, typer.Option(
        "--cuda-graphs/--no-cuda-graphs",
        help="On CUDA, compile each decode step and replay it as a CUDA graph.")] = True,
) -> None:
    """Convert documents to Markdown (and JSON) per page."""
    from ocrcli.convert import Converter, ConvertSettings

    try:
        formats = _formats(format)
        if log not in ("auto", "rich", "plain", "json"):
            raise typer.BadParameter("use auto, rich, plain or json", param_hint="--log")
        mode = ("rich" if sys.stderr.isatty() else "plain") if log == "auto" else log
        settings = ConvertSettings(
            inputs=inputs, out=out, formats=formats, pages=parse_pages(pages),
            dpi=dpi, max_pixels=max_pixels, model=model, device=device, batch_size=batch_size,
            draft_depth=draft_depth, min_prob=min_prob, min_path_prob=min_path_prob,
            max_new_tokens=max_new_tokens, prompt=prompt, resume=resume,
            render_workers=render_workers, password=password, shard=parse_shard(shard),
            log=mode, quiet=quiet, page_timeout=page_timeout, mode=image_mode,
            cuda_graphs=cuda_graphs)
        # With `--summary -`, stdout carries the JSON summary alone; progress goes to stderr.
        reporter = Reporter(mode, quiet, lines_to_stderr=summary == "-")
        if workers > 1:
            from ocrcli.workers import run_workers

            code, result = run_workers(settings, workers, reporter)
        else:
            code, result = Converter(settings, reporter).run()
        _write_summary(summary, result)
    except OcrCliError as exc:
        _fail(exc)
    raise typer.Exit(int(code))


@app.command("eval")
def eval_bench(
    bench: Path = typer.Argument(..., help="An olmOCR-Bench folder (*.jsonl and pdfs/)."),
    out: Path = typer.Option(None, "-o", "--out",
                             help="Working folder (default: ./eval-<bench folder name>)."),
    system: str = typer.Option("ocrcli", "--system", help="Name of the outputs folder."),
    model: Model = "builtin",
    device: Device = "auto",
    batch_size: BatchSize = 16,
    draft_depth: DraftDepth = None,
    max_new_tokens: MaxNewTokens = None,
    dpi: Dpi = 144,
    image_mode: ImageMode = None,
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    resume: Resume = True,
) -> None:
    """Convert an olmOCR-Bench folder and score it (per-category pass rates)."""
    from ocrcli.convert import ConvertSettings
    from ocrcli.evaluation.olmocr_bench import format_bench_table
    from ocrcli.evaluation.run import run_eval

    work = out or Path(f"eval-{bench.resolve().name}")
    settings = ConvertSettings(inputs=[], out=work, model=model, device=device,
                               batch_size=batch_size, draft_depth=draft_depth,
                               max_new_tokens=max_new_tokens, dpi=dpi, resume=resume,
                               log="plain", quiet=True, mode=image_mode)
    try:
        code, score, summary = run_eval(bench, work, system, settings, Reporter("plain", True))
    except OcrCliError as exc:
        _fail(exc)
    if json_out:
        data = score.to_json()
        data["conversion"] = summary
        sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        typer.echo(format_bench_table(score))
    raise typer.Exit(int(code))


@app.command()
def models() -> None:
    """List the built-in and known models, and where their weights are."""
    from ocrcli.models.builtin import BUILTIN_DIR
    from ocrcli.models.registry import KNOWN_MODELS

    for m in KNOWN_MODELS:
        where = str(BUILTIN_DIR / "model.safetensors") if not m.hub else \
            "Hugging Face hub (downloaded on first use), or pass a local folder to --model"
        typer.echo(f"{m.name}\n    {m.description}\n    weights: {where}")


@app.command()
def status(
    out: Path = typer.Argument(..., help="The output folder of one or more convert runs."),
    inputs: list[str] = typer.Argument(None, help="The inputs the runs were given (the same "
                                                  "arguments). Default: the manifests in OUT, "
                                                  "which cannot see documents never started."),
    pages: str = typer.Option(None, "--pages", help="The --pages the runs were given."),
    shard: str = typer.Option(None, "--shard", help="K/N: check one shard only."),
    password: str = typer.Option(None, "--password", help="Password for encrypted PDFs."),
    page_timeout: float = typer.Option(None, "--page-timeout", min=0.001,
                                       help="Seconds one page may take to render and to decode; "
                                            "a slower page is stopped with status 'timeout'."),
    fingerprint: str = typer.Option(None, "--fingerprint",
                                    help="Count pages done under other settings as stale "
                                         "(the fingerprint is in summary.json)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Count pages done, failed and missing in OUT. Exit 0 when complete, 1 when not."""
    from ocrcli.status import format_status, status_from_inputs, status_from_manifests

    try:
        page_set, shard_spec = parse_pages(pages), parse_shard(shard)
        if inputs:
            result = status_from_inputs(out, inputs, page_set, shard_spec, password, fingerprint)
        else:
            result = status_from_manifests(out, page_set, shard_spec, fingerprint)
    except OcrCliError as exc:
        _fail(exc)
    if json_out:
        sys.stdout.buffer.write(orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        for n in result.notices:
            typer.echo(f"ocrcli: {n}", err=True)
        typer.echo(format_status(result))
    raise typer.Exit(int(result.exit_code))


@app.command("ray-convert")
def ray_convert(
    inputs: Inputs,
    out: Annotated[Path, typer.Option(
        "-o", "--out", help="Output folder (on a cluster: a path every node mounts).")],
    address: Annotated[str, typer.Option(
        "--address", help="Ray cluster address (default: $RAY_ADDRESS, else a local Ray).")] = None,
    actors: Annotated[int, typer.Option(
        "--actors", min=1, help="Model replicas (default: one per GPU, 1 without GPUs).")] = None,
    gpus_per_actor: Annotated[float, typer.Option(
        "--gpus-per-actor", min=0, help="Default: 1 when the cluster has GPUs, else 0.")] = None,
    pages_per_batch: Annotated[int, typer.Option(
        "--pages-per-batch", min=1, help="Pages an actor decodes together.")] = 32,
    format: Formats = "md,json",
    pages: Pages = None,
    dpi: Dpi = 144,
    max_pixels: MaxPixels = 12_000_000,
    model: Model = "builtin",
    device: Annotated[str, typer.Option(
        "--device", help="auto (a GPU when the actor has one), cpu or cuda.")] = "auto",
    batch_size: BatchSize = 16,
    draft_depth: DraftDepth = None,
    min_prob: MinProb = GATED_DEFAULT.min_prob,
    min_path_prob: MinPathProb = GATED_DEFAULT.min_path_prob,
    max_new_tokens: MaxNewTokens = None,
    prompt: Prompt = None,
    image_mode: ImageMode = None,
    resume: Resume = True,
    password: Password = None,
    shard: Annotated[str, typer.Option(
        "--shard", help="K/N: this run's share of documents.")] = None,
    summary: Summary = None,
    log: Annotated[str, typer.Option("--log", help="plain or json.")] = "plain",
    quiet: Quiet = False,
) -> None:
    r"""`convert` on a Ray cluster (Ray Data): same outputs. Needs `pip install 'ocrcli\[ray]'`.

    Not yet on Ray: --page-timeout, --render-workers and --workers (Ray places the work)."""
    from ocrcli.convert import ConvertSettings

    try:
        from ocrcli.distributed.ray import RayOptions, run_ray_convert
    except ImportError as exc:
        typer.echo(f"ocrcli: error: ray-convert needs Ray: pip install 'ocrcli[ray]' ({exc})",
                   err=True)
        raise typer.Exit(int(ExitCode.usage)) from None
    try:
        formats = _formats(format)
        if log not in ("plain", "json"):
            raise typer.BadParameter("use plain or json", param_hint="--log")
        if summary == "-" and log != "json":
            quiet = True  # stdout carries the JSON summary alone
        settings = ConvertSettings(
            inputs=inputs, out=out, formats=formats, pages=parse_pages(pages), dpi=dpi,
            max_pixels=max_pixels, model=model, device=device, batch_size=batch_size,
            draft_depth=draft_depth, min_prob=min_prob, min_path_prob=min_path_prob,
            max_new_tokens=max_new_tokens, prompt=prompt, resume=resume, password=password,
            shard=parse_shard(shard), log=log, quiet=quiet, mode=image_mode)
        options = RayOptions(address, actors, gpus_per_actor, pages_per_batch)
        code, result = run_ray_convert(settings, options, Reporter(log, quiet))
        _write_summary(summary, result)
    except OcrCliError as exc:
        _fail(exc)
    raise typer.Exit(int(code))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("ocrcli: interrupted", err=True)
        sys.exit(int(ExitCode.interrupted))


if __name__ == "__main__":
    main()
