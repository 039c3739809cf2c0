"""Fault injection for the robustness tests (tests/test_robustness.py, scripts/stress.py).

Each hook reads its environment variable at the point of use, so a test turns one fault on
for one `ocrcli` subprocess and nothing else sees it. Unset (always, in normal use), every
hook does nothing. The faults happen inside the real code paths (the real writer, engine and
renderer), so the tests exercise the real recovery code, not a stand-in.

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


def _int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value.lstrip("-").isdigit() else None


def enospc_due(files_written: int) -> bool:
    """True when the writer should fail this write as if the disk were full."""
    limit = _int("OCRCLI_FAULT_ENOSPC_AFTER")
    return limit is not None and files_written >= limit


def check_oom(step: int | None, rows: int) -> None:
    """Raise torch.OutOfMemoryError when a hook says this forward call runs out of memory."""
    at = _int("OCRCLI_FAULT_OOM_AT_STEP")
    over = _int("OCRCLI_FAULT_OOM_ROWS_OVER")
    if (step is not None and at is not None and step == at) or (over is not None and rows > over):
        import torch

        raise torch.OutOfMemoryError(f"injected out-of-memory ({rows} rows)")


def step_delay() -> None:
    value = os.environ.get("OCRCLI_FAULT_STEP_DELAY")
    if value:
        time.sleep(float(value))


def render_fault(page: int) -> None:
    """Hang or crash while rendering `page`, when a hook asks for it."""
    if _int("OCRCLI_FAULT_RENDER_HANG") == page:
        while True:  # a render that never returns; only killing the worker ends it
            time.sleep(3600)
    if _int("OCRCLI_FAULT_RENDER_CRASH") == page and multiprocessing.parent_process() is not None:
        os.kill(os.getpid(), signal.SIGKILL)


def check_readable(name: str) -> None:
    text = os.environ.get("OCRCLI_FAULT_UNREADABLE")
    if text and text in name:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)
