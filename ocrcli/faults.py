"""Fault injection for the robustness tests (tests/test_robustness.py, scripts/stress.py).

The faults happen inside the real code paths (the real writer, engine, renderer and input
scanner), so the tests exercise the real recovery code, not a stand-in. They are armed only
when OCRCLI_ENABLE_FAULTS=1 is set beside the variables below, and read once, when a run's
settings are made (`Faults.from_env`): the run carries that frozen value to the places that
act on it, and its summary.json lists what was armed (`injected_faults`). A fault variable
inherited by a real run (a shell where the tests once ran) therefore does nothing: without the
switch, an OCRCLI_FAULT_UNREADABLE=.pdf would fail every PDF with a genuine-looking
"Permission denied", and OCRCLI_FAULT_RENDER_HANG would hang a page for ever.

    OCRCLI_FAULT_ENOSPC_AFTER=N   the output writer fails with ENOSPC once N files are written
    OCRCLI_FAULT_OOM_AT_STEP=N    decode step N (1-based, counting every forward call) raises
                                  torch.OutOfMemoryError
    OCRCLI_FAULT_OOM_ROWS_OVER=R  every decode or prefill call on more than R rows raises
                                  torch.OutOfMemoryError (a device that fits R rows)
    OCRCLI_FAULT_STEP_DELAY=S     every decode step sleeps S seconds (a slow device)
    OCRCLI_FAULT_RENDER_HANG=P    rendering page P of any document never returns
    OCRCLI_FAULT_RENDER_CRASH=P   rendering page P kills its worker process, as a crash in
                                  PDFium or the kernel's OOM killer would (workers only)
    OCRCLI_FAULT_UNREADABLE=TEXT  opening an input whose file name contains TEXT fails with
                                  EACCES (tests run as root, which ignores file permissions)
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

from ocrcli.errors import UsageError

ENABLE = "OCRCLI_ENABLE_FAULTS"
PREFIX = "OCRCLI_FAULT_"


def _env_name(field_name: str) -> str:
    return PREFIX + field_name.upper().removesuffix("_S")


# How each variable's text is read; every other one is an integer.
_PARSE: dict[str, Callable[[str], object]] = {"step_delay_s": float, "unreadable": str}


@dataclass(frozen=True)
class Faults:
    """The faults armed for one run; the default arms none."""

    enospc_after: int | None = None
    oom_at_step: int | None = None
    oom_rows_over: int | None = None
    step_delay_s: float | None = None
    render_hang: int | None = None
    render_crash: int | None = None
    unreadable: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Faults:
        """The faults the environment arms: none unless OCRCLI_ENABLE_FAULTS=1."""
        env = os.environ if environ is None else environ
        if env.get(ENABLE, "").strip() != "1":
            return NO_FAULTS
        values: dict[str, object] = {}
        for f in fields(cls):
            name = _env_name(f.name)
            raw = env.get(name, "").strip()
            if not raw:
                continue
            try:
                values[f.name] = _PARSE.get(f.name, int)(raw)
            except ValueError:  # a typo in a test's setup must not pass as "no fault"
                raise UsageError(f"{name}={raw!r}: not a valid value ({ENABLE}=1 is set)") from None
        return cls(**values)

    @property
    def armed(self) -> dict[str, int | float | str]:
        """The armed faults by variable name, for summary.json (empty: none)."""
        return {_env_name(f.name): getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    def enospc_due(self, files_written: int) -> bool:
        """True when the writer should fail this write as if the disk were full."""
        return self.enospc_after is not None and files_written >= self.enospc_after

    def check_oom(self, step: int | None, rows: int) -> None:
        """Raise torch.OutOfMemoryError when this forward call is to run out of memory."""
        at_step = step is not None and step == self.oom_at_step
        if at_step or (self.oom_rows_over is not None and rows > self.oom_rows_over):
            import torch

            raise torch.OutOfMemoryError(f"injected out-of-memory ({rows} rows)")

    def delay_step(self) -> None:
        if self.step_delay_s:
            time.sleep(self.step_delay_s)

    def render_fault(self, page: int) -> None:
        """Hang or crash while rendering `page`."""
        if self.render_hang == page:
            while True:  # a render that never returns; only killing the worker ends it
                time.sleep(3600)
        if self.render_crash == page and multiprocessing.parent_process() is not None:
            os.kill(os.getpid(), signal.SIGKILL)

    def check_readable(self, name: str) -> None:
        if self.unreadable and self.unreadable in name:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)


NO_FAULTS = Faults()


def faults_text(faults: Faults) -> str:
    """The armed faults as VAR=value words, for a notice."""
    return " ".join(f"{name}={value}" for name, value in faults.armed.items())
