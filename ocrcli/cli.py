"""The `ocrcli` command line: parses options into dataclasses and calls the package."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import orjson
import typer

from ocrcli import __version__
from ocrcli.engine.policy import GATED_DEFAULT, Drafter
from ocrcli.errors import ExitCode, InternalError, OcrCliError, UsageError, internal_error_line, one_line
from ocrcli.models.device import check_device

try:  # typer 0.2x parses with its own copy of click; earlier versions with click itself
    from typer._click.exceptions import ClickException
    from typer._click.exceptions import UsageError as ClickUsageError
except ImportError:  # pragma: no cover - depends on the typer installed
    from click.exceptions import ClickException
    from click.exceptions import UsageError as ClickUsageError

if TYPE_CHECKING:
    from ocrcli.progress import Reporter
    from ocrcli.settings import ConvertSettings

# The commands import what they use (rich's progress display, the input scanner, torch), so
# that `ocrcli --help` loads typer and little else.

# main() reports errors itself (one line each); typer's traceback display stays off even
# when `app` is called directly.
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Convert folders of PDFs and images to Markdown and JSON, page by page.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ocrcli {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug",
                               help="On an internal error (exit 15), print its traceback. "
                                    "May also be given after the command."),
) -> None:
    """ocrcli: document-to-Markdown with lossless speculative decoding."""
    # main() takes --debug off the command line before parsing (so that it works after the
    # command too); declared here for --help and for callers of `app` itself.


def _report_error(line: str, code: int, json_log: bool, traceback_text: str | None = None) -> None:
    """An error that ends the run, on stderr: its one `ocrcli: ` line (after the traceback,
    when there is one), or with `--log json` one JSON event that carries both (the message
    without `ocrcli: error: `; a bug's keeps its `internal error: `)."""
    if json_log:
        from ocrcli.progress import error_event

        message = line.removeprefix("ocrcli: ").removeprefix("error: ")
        extra = {} if traceback_text is None else {"traceback": traceback_text}
        sys.stderr.write(error_event(message, code, **extra) + "\n")
        sys.stderr.flush()
        return
    if traceback_text is not None:
        sys.stderr.write(traceback_text)
    typer.echo(line, err=True)


def _fail(exc: OcrCliError, json_log: bool = False) -> None:
    _report_error(f"ocrcli: error: {one_line(exc)}", int(exc.exit_code), json_log)
    raise typer.Exit(int(exc.exit_code))


# Options that `convert`, `ray-convert` and `eval` share, declared once (as `Annotated`
# types) so the commands cannot drift apart.
Inputs = Annotated[list[str], typer.Argument(
    help="PDFs, images, folders (recursive) or globs. Put -- before names that start with a dash.",
    show_default=False)]
FilesFrom = Annotated[str, typer.Option(
    "--files-from", help="Also read inputs from this file, one per line ('-': stdin); "
                         "blank lines are skipped, spaces in names are kept.")]
Formats = Annotated[str, typer.Option("--format", help="Per-page outputs: md, json or both.")]
Pages = Annotated[str, typer.Option("--pages", help="1-based pages, e.g. 1-3,7.")]
Dpi = Annotated[int, typer.Option("--dpi", min=36, max=600, help="PDF rendering resolution.")]
MaxPixels = Annotated[int, typer.Option("--max-pixels", min=10_000, help="Pixel cap per page image.")]
Model = Annotated[str, typer.Option("--model", help="builtin, a hub id, or a folder.")]
DEFAULT_MODEL = "builtin"  # what --model is when not given (`ocrcli models` marks it)
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda, cuda:N or mps.")]
BatchSize = Annotated[int, typer.Option("--batch-size", min=1, help="Requests decoded together.")]
DraftDepth = Annotated[int, typer.Option(
    "--draft-depth", min=0, max=16, help="Draft tokens per step (0: plain greedy). "
                                         "Default: confidence-gated up to the head's depth.")]
DrafterOption = Annotated[Drafter, typer.Option(
    "--drafter", help="Where drafts come from: auto (the PDF's text layer where it matches, "
                      "else the model's head), head, text-layer or none. Output is the same "
                      "with each.")]
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
Accept = Annotated[str, typer.Option(
    "--accept", help="Flagged statuses that still exit 0: truncated, degenerate or both "
                     "(default: none; a run with flagged pages exits 5).")]
Retry = Annotated[str, typer.Option(
    "--retry", help="Done statuses that a resumed run converts again: truncated, degenerate "
                    "or both (failed pages are always retried).")]
FLAGGED_STATUSES = ("truncated", "degenerate")


def _statuses(value: str | None, option: str) -> frozenset[str]:
    """A comma list of flagged statuses (--accept, --retry)."""
    statuses = frozenset(v.strip() for v in (value or "").split(",") if v.strip())
    if not statuses <= set(FLAGGED_STATUSES):
        raise typer.BadParameter(f"use {', '.join(FLAGGED_STATUSES)} or both, comma-separated",
                                 param_hint=option)
    return statuses


def _formats(format: str) -> frozenset[str]:
    formats = frozenset(f.strip() for f in format.split(",") if f.strip())
    if not formats or not formats <= {"md", "json"}:
        raise typer.BadParameter("use md, json or md,json", param_hint="--format")
    return formats | {"json"}  # the JSON record is what resume and status read


def _inputs(inputs: list[str] | None, files_from: str | None) -> list[str]:
    """The inputs on the command line, then those listed in --files-from."""
    from ocrcli.inputs import read_files_from

    given = [*(inputs or []), *(read_files_from(files_from) if files_from is not None else [])]
    if not given:
        raise UsageError("no inputs: give files, folders or globs, or --files-from FILE")
    return given


def _run_convert(settings: ConvertSettings, workers: int, reporter: Reporter) -> tuple[ExitCode, dict]:
    """One converter process, or `workers` of them. A run that fails before it writes
    anything leaves no output folder behind that it created."""
    from ocrcli.convert import Converter
    from ocrcli.output import removed_if_unused

    with removed_if_unused(settings.out):
        if workers > 1:
            from ocrcli.workers import run_workers

            return run_workers(settings, workers, reporter)
        return Converter(settings, reporter).run()


def _write_summary(summary: str | None, result: dict) -> None:
    from ocrcli.output import atomic_write

    if summary == "-":
        sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    elif summary:
        atomic_write(Path(summary), orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")


@app.command()
def convert(
    out: Annotated[str, typer.Option(
        "-o", "--out", help="Output folder. '-': print the document's Markdown to stdout (one "
                            "input document; its page files go to a temporary folder, removed "
                            "afterwards); './-' is a folder named '-'.")],
    inputs: Inputs = None,
    files_from: FilesFrom = None,
    format: Formats = "md,json",
    pages: Pages = None,
    dpi: Dpi = 144,
    max_pixels: MaxPixels = 12_000_000,
    model: Model = DEFAULT_MODEL,
    device: Device = "auto",
    batch_size: BatchSize = 16,
    draft_depth: DraftDepth = None,
    drafter: DrafterOption = Drafter.AUTO,
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
    accept: Accept = None,
    retry: Retry = None,
    log: Annotated[str, typer.Option("--log", help="auto, rich, plain or json.")] = "auto",
    quiet: Quiet = False,
    cuda_graphs: Annotated[bool, typer.Option(
        "--cuda-graphs/--no-cuda-graphs",
        help="On CUDA, compile each decode step and replay it as a CUDA graph.")] = True,
) -> None:
    """Convert documents to Markdown (and JSON) per page."""
    from ocrcli.inputs import parse_pages, parse_shard
    from ocrcli.pipe import markdown_to_stdout, means_stdout
    from ocrcli.progress import Reporter
    from ocrcli.settings import ConvertSettings

    to_stdout = means_stdout(out)
    try:
        formats = _formats(format)
        if log not in ("auto", "rich", "plain", "json"):
            raise typer.BadParameter("use auto, rich, plain or json", param_hint="--log")
        mode = ("rich" if sys.stderr.isatty() else "plain") if log == "auto" else log
        settings = ConvertSettings(
            inputs=_inputs(inputs, files_from), out=Path(out), formats=formats,
            pages=parse_pages(pages),
            dpi=dpi, max_pixels=max_pixels, model=model, device=check_device(device),
            batch_size=batch_size,
            draft_depth=draft_depth, drafter=drafter.value, min_prob=min_prob,
            min_path_prob=min_path_prob,
            max_new_tokens=max_new_tokens, prompt=prompt, resume=resume,
            render_workers=render_workers, password=password, shard=parse_shard(shard),
            log=mode, quiet=quiet, page_timeout=page_timeout, mode=image_mode,
            cuda_graphs=cuda_graphs, accept=_statuses(accept, "--accept"),
            retry=_statuses(retry, "--retry"))
        if to_stdout and summary == "-":
            raise UsageError("-o - and --summary - would both print to stdout; give --summary a file")
        # With `--summary -` or `-o -`, stdout carries that alone; progress goes to stderr.
        reporter = Reporter(mode, quiet, lines_to_stderr=summary == "-" or to_stdout)
        if to_stdout:
            code, result = markdown_to_stdout(
                settings, lambda stdout_settings: _run_convert(stdout_settings, workers, reporter))
        else:
            code, result = _run_convert(settings, workers, reporter)
        _write_summary(summary, result)
    except OcrCliError as exc:
        _fail(exc, log == "json")
    raise typer.Exit(int(code))


@app.command("eval")
def eval_bench(
    bench: Path = typer.Argument(..., help="An olmOCR-Bench folder (*.jsonl and pdfs/)."),
    out: Path = typer.Option(..., "-o", "--out",
                             help="Working folder: eval writes here and nowhere else (links to "
                                  "the bench's files, the converted pages, the outputs)."),
    system: str = typer.Option("ocrcli", "--system", help="Name of the outputs folder."),
    model: Model = DEFAULT_MODEL,
    device: Device = "auto",
    batch_size: BatchSize = 16,
    draft_depth: DraftDepth = None,
    drafter: DrafterOption = Drafter.AUTO,
    max_new_tokens: MaxNewTokens = None,
    dpi: Dpi = 144,
    image_mode: ImageMode = None,
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    resume: Resume = True,
) -> None:
    """Convert an olmOCR-Bench folder and score it (per-category pass rates)."""
    from ocrcli.evaluation.olmocr_bench import format_bench_table
    from ocrcli.evaluation.run import run_eval
    from ocrcli.progress import Reporter
    from ocrcli.settings import ConvertSettings

    try:
        settings = ConvertSettings(inputs=[], out=out, model=model, device=check_device(device),
                                   batch_size=batch_size, draft_depth=draft_depth,
                                   drafter=drafter.value, max_new_tokens=max_new_tokens,
                                   dpi=dpi, resume=resume,
                                   log="plain", quiet=True, mode=image_mode)
        code, score, summary = run_eval(bench, out, system, settings, Reporter("plain", True))
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
        default = " (default)" if m.name == DEFAULT_MODEL else ""
        typer.echo(f"{m.name}{default}\n    {m.description}\n    weights: {where}")


@app.command()
def status(
    out: Path = typer.Argument(..., help="The output folder of one or more convert runs."),
    inputs: list[str] = typer.Argument(None, help="The inputs the runs were given (the same "
                                                  "arguments). Default: the manifests in OUT, "
                                                  "which cannot see documents never started."),
    files_from: FilesFrom = None,
    pages: str = typer.Option(None, "--pages", help="The --pages the runs were given."),
    shard: str = typer.Option(None, "--shard", help="K/N: check one shard only."),
    password: str = typer.Option(None, "--password", help="Password for encrypted PDFs."),
    fingerprint: str = typer.Option(None, "--fingerprint",
                                    help="Count pages done under other settings as stale "
                                         "(the fingerprint is in summary.json)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Count pages done, failed and missing in OUT. Exit 0 when complete, 1 when not."""
    from ocrcli.inputs import parse_pages, parse_shard
    from ocrcli.status import format_status, status_from_inputs, status_from_manifests

    try:
        page_set, shard_spec = parse_pages(pages), parse_shard(shard)
        if inputs or files_from is not None:
            result = status_from_inputs(out, _inputs(inputs, files_from), page_set, shard_spec,
                                        password, fingerprint)
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
    out: Annotated[Path, typer.Option(
        "-o", "--out", help="Output folder (on a cluster: a path every node mounts).")],
    inputs: Inputs = None,
    files_from: FilesFrom = None,
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
    model: Model = DEFAULT_MODEL,
    device: Annotated[str, typer.Option(
        "--device", help="auto (a GPU when the actor has one), cpu or cuda.")] = "auto",
    batch_size: BatchSize = 16,
    draft_depth: DraftDepth = None,
    drafter: DrafterOption = Drafter.AUTO,
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
    accept: Accept = None,
    retry: Retry = None,
    log: Annotated[str, typer.Option("--log", help="plain or json.")] = "plain",
    quiet: Quiet = False,
) -> None:
    r"""`convert` on a Ray cluster (Ray Data): same outputs. Needs `pip install 'ocrcli\[ray]'`.

    Not yet on Ray: --page-timeout, --render-workers and --workers (Ray places the work)."""
    from ocrcli.inputs import parse_pages, parse_shard
    from ocrcli.progress import Reporter
    from ocrcli.settings import ConvertSettings

    try:
        from ocrcli.distributed.ray import RayOptions, run_ray_convert
    except ImportError as exc:
        _report_error(f"ocrcli: error: ray-convert needs Ray: pip install 'ocrcli[ray]' "
                      f"({one_line(exc)})", int(ExitCode.usage), log == "json")
        raise typer.Exit(int(ExitCode.usage)) from None
    try:
        formats = _formats(format)
        if log not in ("plain", "json"):
            raise typer.BadParameter("use plain or json", param_hint="--log")
        if summary == "-" and log != "json":
            quiet = True  # stdout carries the JSON summary alone
        settings = ConvertSettings(
            inputs=_inputs(inputs, files_from), out=out, formats=formats,
            pages=parse_pages(pages), dpi=dpi, max_pixels=max_pixels, model=model,
            device=check_device(device), batch_size=batch_size,
            draft_depth=draft_depth, drafter=drafter.value, min_prob=min_prob,
            min_path_prob=min_path_prob,
            max_new_tokens=max_new_tokens, prompt=prompt, resume=resume, password=password,
            shard=parse_shard(shard), log=log, quiet=quiet, mode=image_mode,
            accept=_statuses(accept, "--accept"), retry=_statuses(retry, "--retry"))
        options = RayOptions(address, actors, gpus_per_actor, pages_per_batch)
        from ocrcli.output import removed_if_unused

        with removed_if_unused(out):
            code, result = run_ray_convert(settings, options, Reporter(log, quiet))
        _write_summary(summary, result)
    except OcrCliError as exc:
        _fail(exc, log == "json")
    raise typer.Exit(int(code))


def _take_debug(args: list[str]) -> bool:
    """Remove --debug from the arguments (anywhere before a `--`: users add it to the end of
    the command that failed) and say whether it was there."""
    end = args.index("--") if "--" in args else len(args)
    found = "--debug" in args[:end]
    args[:end] = [a for a in args[:end] if a != "--debug"]
    return found


def _json_log(args: list[str]) -> bool:
    """Whether the command line asks for JSON logs (`--log json` or `--log=json`, before any
    `--`). It is read before parsing, so that an error in the command line itself (an unknown
    option, a missing argument) is a JSON event too."""
    end = args.index("--") if "--" in args else len(args)
    head = args[:end]
    return "--log=json" in head or any(a == "--log" and b == "json" for a, b in zip(head, head[1:]))


def _usage_error(exc: ClickUsageError, json_log: bool) -> int:
    """Click's and typer's usage errors as one line (never a usage block or a boxed panel)."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # bare `ocrcli`: the help (click >= 8.2)
        exc.show()
        return int(ExitCode.usage)
    hint = f"; see '{exc.ctx.command_path} --help'" if exc.ctx is not None else ""
    _report_error(f"ocrcli: error: {one_line(exc.format_message()).rstrip('.')}{hint}",
                  int(ExitCode.usage), json_log)
    return int(ExitCode.usage)


def _internal_error(exc: Exception, debug: bool, json_log: bool) -> int:
    """A bug: one line and a hint, or with --debug its traceback first."""
    if isinstance(exc, InternalError):  # raised in a worker process, carried here
        name, text = exc.type_name, exc.traceback_text
    else:
        name, text = type(exc).__name__, "".join(traceback.format_exception(exc))
    _report_error(internal_error_line(name, str(exc), debug), int(ExitCode.internal_error),
                  json_log, text if debug else None)
    return int(ExitCode.internal_error)


def main(argv: list[str] | None = None) -> None:
    """The `ocrcli` entry point: every way a run can end maps to one exit code (errors.py),
    and every message is one `ocrcli: ` line, or with `--log json` one JSON event."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = _take_debug(args)
    json_log = _json_log(args)
    try:
        # Not standalone: click's own handling would print usage errors as several lines
        # and let bugs end in typer's traceback display; both are handled here instead.
        code = app(args=args, standalone_mode=False)
    except ClickUsageError as exc:
        code = _usage_error(exc, json_log)
    except ClickException as exc:
        code = exc.exit_code
        _report_error(f"ocrcli: error: {one_line(exc.format_message())}", code, json_log)
    except OcrCliError as exc:  # one a command did not turn into its exit itself
        code = int(exc.exit_code)
        _report_error(f"ocrcli: error: {one_line(exc)}", code, json_log)
    except (KeyboardInterrupt, typer.Abort):
        code = int(ExitCode.interrupted)
        _report_error("ocrcli: interrupted", code, json_log)
    except Exception as exc:  # a bug in ocrcli
        code = _internal_error(exc, debug, json_log)
    sys.exit(int(code or 0))


if __name__ == "__main__":
    main()
