"""The `ocrcli` command line: parses options into dataclasses and calls the package."""

from __future__ import annotations

import sys
from pathlib import Path

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


@app.command()
def convert(
    inputs: list[str] = typer.Argument(..., help="PDFs, images, folders (recursive) or globs. "
                                                 "Put -- before names that start with a dash."),
    out: Path = typer.Option(..., "-o", "--out", help="Output folder."),
    format: str = typer.Option("md,json", "--format", help="Per-page outputs: md, json or both."),
    pages: str = typer.Option(None, "--pages", help="1-based pages, e.g. 1-3,7."),
    dpi: int = typer.Option(144, "--dpi", min=36, max=600, help="PDF rendering resolution."),
    max_pixels: int = typer.Option(12_000_000, "--max-pixels", min=10_000,
                                   help="Pixel cap per page image."),
    model: str = typer.Option("builtin", "--model", help="builtin, a hub id, or a folder."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda[:N] or mps."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Requests decoded together."),
    draft_depth: int = typer.Option(None, "--draft-depth", min=0, max=16,
                                    help="Draft tokens per step (0: plain greedy). "
                                         "Default: confidence-gated up to the head's depth."),
    min_prob: float = typer.Option(GATED_DEFAULT.min_prob, "--draft-min-prob", min=0.0, max=1.0,
                                   help="Gated drafting: stop below this draft probability."),
    min_path_prob: float = typer.Option(GATED_DEFAULT.min_path_prob, "--draft-min-path-prob",
                                        min=0.0, max=1.0,
                                        help="Gated drafting: stop below this running product."),
    max_new_tokens: int = typer.Option(None, "--max-new-tokens", min=1,
                                       help="Token cap per request (status 'truncated')."),
    prompt: str = typer.Option(None, "--prompt", help="Override the model's instruction."),
    image_mode: str = typer.Option(None, "--mode",
                                   help="Image mode of DeepSeek-OCR / Jina-OCR-v1: tiny, small, "
                                        "base, large, gundam (default) or gundam-m."),
    resume: bool = typer.Option(True, "--resume/--overwrite",
                                help="Skip pages already done with the same settings."),
    render_workers: int = typer.Option(1, "--render-workers", min=0,
                                       help="Renderer processes (0: render in this process)."),
    password: str = typer.Option(None, "--password", help="Password for encrypted PDFs."),
    page_timeout: float = typer.Option(None, "--page-timeout", min=0.001,
                                       help="Seconds one page may take to render and to decode; "
                                            "a slower page is stopped with status 'timeout'."),
    shard: str = typer.Option(None, "--shard", help="K/N: this worker's share of documents."),
    workers: int = typer.Option(1, "--workers", min=1, max=64,
                                help="Converter processes: one per GPU when there are enough, "
                                     "else sharing the CPU cores. Same output as 1."),
    summary: str = typer.Option(None, "--summary", help="Also write the run summary JSON here; "
                                                        "'-' prints it to stdout."),
    log: str = typer.Option("auto", "--log", help="auto, rich, plain or json."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only errors."),
) -> None:
    """Convert documents to Markdown (and JSON) per page."""
    from ocrcli.convert import Converter, ConvertSettings
    from ocrcli.output import atomic_write

    try:
        formats = frozenset(f.strip() for f in format.split(",") if f.strip())
        if not formats or not formats <= {"md", "json"}:
            raise typer.BadParameter("use md, json or md,json", param_hint="--format")
        if log not in ("auto", "rich", "plain", "json"):
            raise typer.BadParameter("use auto, rich, plain or json", param_hint="--log")
        mode = ("rich" if sys.stderr.isatty() else "plain") if log == "auto" else log
        settings = ConvertSettings(
            inputs=inputs, out=out, formats=formats | {"json"}, pages=parse_pages(pages),
            dpi=dpi, max_pixels=max_pixels, model=model, device=device, batch_size=batch_size,
            draft_depth=draft_depth, min_prob=min_prob, min_path_prob=min_path_prob,
            max_new_tokens=max_new_tokens, prompt=prompt, resume=resume,
            render_workers=render_workers, password=password, shard=parse_shard(shard),
            log=mode, quiet=quiet, page_timeout=page_timeout, mode=image_mode)
        # With `--summary -`, stdout carries the JSON summary alone; progress goes to stderr.
        reporter = Reporter(mode, quiet, lines_to_stderr=summary == "-")
        if workers > 1:
            from ocrcli.workers import run_workers

            code, result = run_workers(settings, workers, reporter)
        else:
            code, result = Converter(settings, reporter).run()
        if summary == "-":
            sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
        elif summary:
            atomic_write(Path(summary), orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    except OcrCliError as exc:
        _fail(exc)
    raise typer.Exit(int(code))


@app.command("eval")
def eval_bench(
    bench: Path = typer.Argument(..., help="An olmOCR-Bench folder (*.jsonl and pdfs/)."),
    out: Path = typer.Option(None, "-o", "--out",
                             help="Working folder (default: ./eval-<bench folder name>)."),
    system: str = typer.Option("ocrcli", "--system", help="Name of the outputs folder."),
    model: str = typer.Option("builtin", "--model", help="builtin, a hub id, or a folder."),
    device: str = typer.Option("auto", "--device"),
    batch_size: int = typer.Option(16, "--batch-size", min=1),
    draft_depth: int = typer.Option(None, "--draft-depth", min=0, max=16),
    max_new_tokens: int = typer.Option(None, "--max-new-tokens", min=1),
    dpi: int = typer.Option(144, "--dpi", min=36, max=600),
    image_mode: str = typer.Option(None, "--mode",
                                   help="Image mode of DeepSeek-OCR / Jina-OCR-v1: tiny, small, "
                                        "base, large, gundam (default) or gundam-m."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    resume: bool = typer.Option(True, "--resume/--overwrite"),
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
    inputs: list[str] = typer.Argument(..., help="PDFs, images, folders (recursive) or globs. "
                                                 "Put -- before names that start with a dash."),
    out: Path = typer.Option(..., "-o", "--out", help="Output folder (on a cluster: a path "
                                                      "every node mounts)."),
    address: str = typer.Option(None, "--address", help="Ray cluster address (default: "
                                                        "$RAY_ADDRESS, else a local Ray)."),
    actors: int = typer.Option(None, "--actors", min=1,
                               help="Model replicas (default: one per GPU, 1 without GPUs)."),
    gpus_per_actor: float = typer.Option(None, "--gpus-per-actor", min=0,
                                         help="Default: 1 when the cluster has GPUs, else 0."),
    pages_per_batch: int = typer.Option(32, "--pages-per-batch", min=1,
                                        help="Pages an actor decodes together."),
    format: str = typer.Option("md,json", "--format", help="Per-page outputs: md, json or both."),
    pages: str = typer.Option(None, "--pages", help="1-based pages, e.g. 1-3,7."),
    dpi: int = typer.Option(144, "--dpi", min=36, max=600, help="PDF rendering resolution."),
    max_pixels: int = typer.Option(12_000_000, "--max-pixels", min=10_000,
                                   help="Pixel cap per page image."),
    model: str = typer.Option("builtin", "--model", help="builtin, a hub id, or a folder."),
    device: str = typer.Option("auto", "--device",
                               help="auto (a GPU when the actor has one), cpu or cuda."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Requests decoded together."),
    draft_depth: int = typer.Option(None, "--draft-depth", min=0, max=16,
                                    help="Draft tokens per step (0: plain greedy)."),
    max_new_tokens: int = typer.Option(None, "--max-new-tokens", min=1,
                                       help="Token cap per request (status 'truncated')."),
    prompt: str = typer.Option(None, "--prompt", help="Override the model's instruction."),
    resume: bool = typer.Option(True, "--resume/--overwrite",
                                help="Skip pages already done with the same settings."),
    password: str = typer.Option(None, "--password", help="Password for encrypted PDFs."),
    page_timeout: float = typer.Option(None, "--page-timeout", min=0.001,
                                       help="Seconds one page may take to render and to decode; "
                                            "a slower page is stopped with status 'timeout'."),
    shard: str = typer.Option(None, "--shard", help="K/N: this run's share of documents."),
    summary: str = typer.Option(None, "--summary", help="Also write the run summary JSON here; "
                                                        "'-' prints it to stdout."),
    log: str = typer.Option("plain", "--log", help="plain or json."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only errors."),
) -> None:
    """`convert` on a Ray cluster (Ray Data): same outputs. Needs `pip install ocrcli[ray]`."""
    from ocrcli.convert import ConvertSettings
    from ocrcli.output import atomic_write

    try:
        from ocrcli.distributed.ray import RayOptions, run_ray_convert
    except ImportError as exc:
        typer.echo(f"ocrcli: error: ray-convert needs Ray: pip install 'ocrcli[ray]' ({exc})",
                   err=True)
        raise typer.Exit(int(ExitCode.usage)) from None
    try:
        formats = frozenset(f.strip() for f in format.split(",") if f.strip())
        if not formats or not formats <= {"md", "json"}:
            raise typer.BadParameter("use md, json or md,json", param_hint="--format")
        if log not in ("plain", "json"):
            raise typer.BadParameter("use plain or json", param_hint="--log")
        if summary == "-" and log != "json":
            quiet = True  # stdout carries the JSON summary alone
        settings = ConvertSettings(
            inputs=inputs, out=out, formats=formats | {"json"}, pages=parse_pages(pages), dpi=dpi,
            max_pixels=max_pixels, model=model, device=device, batch_size=batch_size,
            draft_depth=draft_depth, max_new_tokens=max_new_tokens, prompt=prompt, resume=resume,
            password=password, shard=parse_shard(shard), log=log, quiet=quiet)
        options = RayOptions(address, actors, gpus_per_actor, pages_per_batch)
        code, result = run_ray_convert(settings, options, Reporter(log, quiet))
        if summary == "-":
            sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
        elif summary:
            atomic_write(Path(summary), orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
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
