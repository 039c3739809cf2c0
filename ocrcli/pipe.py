"""`convert INPUT -o -`: one document's Markdown on stdout, for pipes (`ocrcli convert a.pdf
-o - | less`). The run writes its usual files into a temporary folder, removed afterwards, and
stdout gets the whole-document Markdown (`OUT/<name>.md`) and nothing else; progress and
notices go to stderr. Nothing is kept, so there is nothing to resume."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ocrcli.errors import ExitCode, UsageError
from ocrcli.inputs import document_names

if TYPE_CHECKING:
    from ocrcli.settings import ConvertSettings

STDOUT = "-"  # `-o -`


def means_stdout(out: str) -> bool:
    """Whether `-o OUT` asks for stdout: exactly `-`. Read from the text as given, since a
    path forgets how it was spelt (`Path("./-") == Path("-")`): `-o ./-` is a folder named
    `-`, as it is for any other Unix tool."""
    return out == STDOUT


def markdown_to_stdout(settings: ConvertSettings,
                       run: Callable[[ConvertSettings], tuple[ExitCode, dict]]) -> tuple[ExitCode, dict]:
    """Run `run` on the settings with a temporary output folder and print the document's
    Markdown. More than one document is a usage error: their Markdown would run together."""
    names = document_names(settings.inputs)
    if len(names) > 1:
        raise UsageError(f"-o - prints one document's Markdown, and the inputs hold "
                         f"{len(names)} documents; give one document, or an output folder")
    with tempfile.TemporaryDirectory(prefix="ocrcli-stdout-") as folder:
        # The whole-document Markdown is built from the page .md files: always write them.
        code, result = run(replace(settings, out=Path(folder),
                                   formats=settings.formats | {"md"}))
        whole = Path(folder) / f"{names[0]}.md" if names else None
        if code != ExitCode.interrupted and whole is not None and whole.exists():
            _write_stdout(whole.read_bytes())
    return code, result


def _write_stdout(data: bytes) -> None:
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (`| head`): not an error of ours. Point stdout at
        # /dev/null so that Python's own flush at exit does not report it again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
