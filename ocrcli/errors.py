"""Exit codes and the exceptions that carry them (one enum, as ocrmypdf does)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    ok = 0  # every selected page converted
    pages_failed = 1  # some pages or documents failed (listed); the rest were converted
    usage = 2  # bad options, or no input documents
    model_error = 3  # the model could not be loaded (missing tensor, no network, ...)
    output_error = 4  # the output folder is not writable, or the disk filled up
    pages_flagged = 5  # every page converted, some flagged degenerate or truncated (--accept)
    internal_error = 15  # a bug in ocrcli: one line and a hint; --debug shows the traceback
    interrupted = 130  # SIGINT/SIGTERM: finished pages were kept


class OcrCliError(Exception):
    """An error with a one-line message for the user and the exit code it maps to."""

    exit_code = ExitCode.usage


class UsageError(OcrCliError):
    exit_code = ExitCode.usage


class ModelLoadError(OcrCliError):
    exit_code = ExitCode.model_error


class OutputError(OcrCliError):
    exit_code = ExitCode.output_error


class InternalError(Exception):
    """A bug in another process (a `--workers` converter), carried to the command line's one
    handler of bugs: the exception's type name and message, and its traceback as text."""

    def __init__(self, type_name: str, message: str, traceback_text: str):
        super().__init__(message)
        self.type_name, self.traceback_text = type_name, traceback_text


def internal_error_line(type_name: str, message: str, debug: bool) -> str:
    """The one line that reports a bug (exit code 15)."""
    hint = "please report it, with the traceback above" if debug else \
        "run again with --debug for the traceback, and please report it"
    return f"ocrcli: internal error: {type_name}: {one_line(message)} ({hint})"


def one_line(message: object) -> str:
    """A message as one printable line: a reason from PDFium, Pillow or the OS can carry
    newlines or control characters, and every problem is reported on exactly one line."""
    text = " ".join(str(message).split())
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
