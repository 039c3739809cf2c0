"""The `ocrcli` command line: parses options into dataclasses and calls the package."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import typer

from ocrcli import __version__
from ocrcli.cli_options import (
    DEFAULT_MODEL,
    Accept,
    BatchSize,
    Command,
    ConvertLog,
    ConvertOut,
    CudaGraphs,
    Device,
    Dpi,
    DraftDepth,
    DrafterOption,
    FilesFrom,
    Formats,
    GpusPerActor,
    Group,
    ImageMode,
    Inputs,
    JsonOut,
    MaxNewTokens,
    MaxPixels,
    MinPathProb,
    MinProb,
    Model,
    Pages,
    PagesPerBatch,
    PageTimeout,
    Password,
    Prompt,
    Quiet,
    RayActors,
    RayAddress,
    RayDevice,
    RayLog,
    RayOut,
    RenderWorkers,
    Rereads,
    Resume,
    Retry,
    Shard,
    Summary,
    Workers,
    convert_epilog,
)
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
app = typer.Typer(cls=Group, add_completion=False, no_args_is_help=True,
                  pretty_exceptions_enable=False,
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


@app.command(cls=Command, epilog=convert_epilog())
def convert(
    out: ConvertOut,
    inputs: Inputs = None,
    files_from: FilesFrom = None,
    format: Formats = "md,json",
    pages: Pages = None,
    dpi: Dpi = None,
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
    render_workers: RenderWorkers = 1,
    password: Password = None,
    page_timeout: PageTimeout = None,
    shard: Shard = None,
    workers: Workers = 1,
    summary: Summary = None,
    accept: Accept = None,
    retry: Retry = None,
    log: ConvertLog = "auto",
    quiet: Quiet = False,
    cuda_graphs: CudaGraphs = True,
    rereads: Rereads = True,
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
            cuda_graphs=cuda_graphs, rereads=rereads, accept=_statuses(accept, "--accept"),
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


@app.command("eval", cls=Command)
def eval_bench(
    bench: Path = typer.Argument(..., metavar="BENCH",
                                 help="An olmOCR-Bench folder (*.jsonl and pdfs/)."),
    out: Path = typer.Option(..., "-o", "--out", metavar="DIR",
                             help="Working folder: eval writes here and nowhere else (links to "
                                  "the bench's files, the converted pages, the outputs)."),
    system: str = typer.Option("ocrcli", "--system", metavar="NAME", help="Name of the outputs folder."),
    model: Model = DEFAULT_MODEL,
    device: Device = "auto",
    batch_size: BatchSize = 16,
    draft_depth: DraftDepth = None,
    drafter: DrafterOption = Drafter.AUTO,
    max_new_tokens: MaxNewTokens = None,
    dpi: Dpi = None,
    image_mode: ImageMode = None,
    json_out: JsonOut = False,
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


@app.command(cls=Command)
def models() -> None:
    """List the built-in and known models, and where their weights are."""
    from ocrcli.models.builtin import BUILTIN_DIR
    from ocrcli.models.registry import KNOWN_MODELS

    for m in KNOWN_MODELS:
        where = str(BUILTIN_DIR / "model.safetensors") if not m.hub else \
            "Hugging Face hub (downloaded on first use), or pass a local folder to --model"
        default = " (default)" if m.name == DEFAULT_MODEL else ""
        typer.echo(f"{m.name}{default}\n    {m.description}\n    weights: {where}")


@app.command(cls=Command)
def status(
    out: Path = typer.Argument(..., metavar="OUT",
                               help="The output folder of one or more convert runs."),
    inputs: list[str] = typer.Argument(
        None, metavar="INPUT", help="The inputs the runs were given (the same arguments). "
                                    "Default: the manifests in OUT, which cannot see documents "
                                    "never started."),
    files_from: FilesFrom = None,
    pages: str = typer.Option(None, "--pages", metavar="PAGES",
                              help="The --pages the runs were given."),
    shard: str = typer.Option(None, "--shard", metavar="K/N", help="Check one shard only."),
    password: Password = None,
    fingerprint: str = typer.Option(None, "--fingerprint", metavar="HASH",
                                    help="Count pages done under other settings as stale "
                                         "(the fingerprint is in summary.json)."),
    json_out: JsonOut = False,
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


@app.command("ray-convert", cls=Command)
def ray_convert(
    out: RayOut,
    inputs: Inputs = None,
    files_from: FilesFrom = None,
    address: RayAddress = None,
    actors: RayActors = None,
    gpus_per_actor: GpusPerActor = None,
    pages_per_batch: PagesPerBatch = 32,
    format: Formats = "md,json",
    pages: Pages = None,
    dpi: Dpi = None,
    max_pixels: MaxPixels = 12_000_000,
    model: Model = DEFAULT_MODEL,
    device: RayDevice = "auto",
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
    shard: Shard = None,
    summary: Summary = None,
    accept: Accept = None,
    retry: Retry = None,
    log: RayLog = "plain",
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
