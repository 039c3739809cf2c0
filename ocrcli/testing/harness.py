"""Run the real `ocrcli` on hostile inputs and judge what it did.

Shared by the test suite and scripts/stress.py. A run is judged on its exit code,
its stderr (one `ocrcli: ` line per message, never a traceback), the outputs of every input
(converted, or a recorded failure with a reason; no page lost), files written anywhere but
the output folder, temp files left behind, and the memory its processes held.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ocrcli.errors import ExitCode
from ocrcli.faults import ENABLE as ENABLE_FAULTS
from ocrcli.faults import PREFIX as FAULT_PREFIX
from ocrcli.inputs import path_text
from ocrcli.testing.hostile_inputs import CONVERT, FAIL, SKIP, Hostile

REPO = Path(__file__).resolve().parents[2]  # where the `ocrcli` package under test is
KNOWN_CODES = {int(c) for c in ExitCode}
PAGE_STATUSES = {"ok", "truncated", "degenerate", "failed", "timeout"}
CONVERTED = {"ok", "truncated", "degenerate"}
# Cheap settings: what is tested here is everything around the model, not its text.
FAST = ("--max-new-tokens", "1",
    "--accept", "truncated,degenerate", "--draft-depth", "0", "--dpi", "36", "-q")
COUNTERS = ("crashes", "hangs", "lost_pages", "wrong_exit_codes", "tracebacks",
            "writes_outside_output", "leftover_temp_files")
EXTRA_COUNTERS = ("bad_messages", "leftover_processes", "memory_over_limit", "outputs_differ")


@dataclass
class Run:
    args: list[str]
    returncode: int | None  # None: it hung and was killed
    stdout: str
    stderr: str
    seconds: float
    peak_rss_mb: float = 0.0
    pgid: int = 0  # its process group (start_new_session), to find what outlived it

    @property
    def summary(self) -> dict | None:
        try:
            data = orjson.loads(self.stdout)
        except orjson.JSONDecodeError:
            return None
        return data if isinstance(data, dict) else None


@dataclass
class Verdict:
    """What went wrong, by counter; `problems` says where, one line each."""

    counts: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    inputs_tried: int = 0
    runs: int = 0

    def add(self, counter: str, problem: str, n: int = 1) -> None:
        self.counts[counter] += n
        self.problems.append(f"{counter}: {problem}")

    def merge(self, other: Verdict) -> None:
        self.counts.update(other.counts)
        self.problems.extend(other.problems)
        self.inputs_tried += other.inputs_tried
        self.runs += other.runs

    @property
    def clean(self) -> bool:
        return not any(self.counts[c] for c in COUNTERS + EXTRA_COUNTERS)

    def report(self) -> dict:
        out = {"inputs_tried": self.inputs_tried}
        out.update({c: self.counts[c] for c in COUNTERS + EXTRA_COUNTERS})
        return out


def cli_env(tmpdir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one run: nothing inherited arms a fault; `extra`'s faults are armed
    (ocrcli reads OCRCLI_FAULT_* only beside OCRCLI_ENABLE_FAULTS=1)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(FAULT_PREFIX) and k != ENABLE_FAULTS}
    env.update({"PYTHONUNBUFFERED": "1", "TMPDIR": str(tmpdir), "PYTHONPATH": str(REPO)})
    # One math thread per run: on a machine whose cores are busy (CI neighbours, a training
    # job), OpenMP threads spin-wait for each other and a run gets tens of times slower.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    if any(k.startswith(FAULT_PREFIX) for k in extra or {}):
        env[ENABLE_FAULTS] = "1"
    return env


def start_cli(args: list[str], cwd: Path, tmpdir: Path, env: dict[str, str] | None = None,
              stdout=subprocess.PIPE) -> subprocess.Popen:
    tmpdir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "ocrcli.cli", *args], cwd=cwd,
                            env=cli_env(tmpdir, env), stdout=stdout, stderr=subprocess.PIPE,
                            start_new_session=True)


def run_cli(args: list[str], cwd: Path, tmpdir: Path, env: dict[str, str] | None = None,
            timeout: float = 600, measure_memory: bool = False) -> Run:
    """Run `ocrcli ARGS` to the end, or kill its whole process group after `timeout`."""
    t0 = time.perf_counter()
    proc = start_cli(args, cwd, tmpdir, env)
    sampler = _MemorySampler(proc.pid) if measure_memory else None
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    peak = sampler.stop() if sampler else 0.0
    return Run(args, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
               time.perf_counter() - t0, peak, proc.pid)


class _MemorySampler:
    """Peak resident memory of a process and all its descendants, sampled from /proc."""

    def __init__(self, pid: int, every: float = 0.5):
        self.pid, self.every, self.peak = pid, every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, sum(_rss_kb(p) for p in _tree(self.pid)))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak / 1024


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# --------------------------------------------------------------------------- judging


def snapshot(*roots: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple[int, int]]:
    """Every file under `roots` (not under `skip`) with its size and mtime."""
    files: dict[str, tuple[int, int]] = {}
    skipped = {os.path.abspath(s) for s in skip}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if os.path.abspath(os.path.join(dirpath, d)) not in skipped]
            for name in filenames:
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                files[path] = (st.st_size, st.st_mtime_ns)
    return files


def judge_process(run: Run, expect_codes: set[int], verdict: Verdict, label: str,
                  one_line: bool = True) -> None:
    """Exit code, hang, crash, traceback, and (with `one_line`) one-line messages."""
    verdict.runs += 1
    if run.returncode is None:
        verdict.add("hangs", f"{label}: no exit after {run.seconds:.0f}s")
        return
    if run.returncode not in KNOWN_CODES:
        verdict.add("crashes", f"{label}: exit code {run.returncode}")
    elif run.returncode not in expect_codes:
        verdict.add("wrong_exit_codes", f"{label}: exit {run.returncode}, expected "
                    f"{sorted(expect_codes)}; stderr: {run.stderr.strip()[-300:]!r}")
    text = run.stderr + run.stdout
    if "Traceback (most recent call last)" in text:
        verdict.add("tracebacks", f"{label}: {run.stderr.strip()[-400:]!r}")
    for line in run.stderr.splitlines() if one_line else ():
        line = re.sub(r"^\d{4}-\d\d-\d\dT\S+ ", "", line)  # `--log plain` timestamps each line
        if line.strip() and not line.startswith("ocrcli: "):
            verdict.add("bad_messages", f"{label}: stderr line {line[:200]!r}")
            break


def judge_outputs(out: Path, inputs: list[Hostile], verdict: Verdict, label: str,
                  summary: dict | None = None) -> dict[str, str]:
    """Each input's outcome (convert / fail / skip) against what it may give; pages lost.
    Returns {input path: outcome}."""
    manifests: dict[str, dict] = {}
    folders: dict[str, Path] = {}
    for path in out.rglob("manifest.json"):
        data = _json(path)
        if data is None:
            verdict.add("lost_pages", f"{label}: corrupt manifest {path}")
            continue
        manifests[data.get("source", "")] = data
        folders[data.get("source", "")] = path.parent
    failed_sources = {f.get("source") for f in (summary or {}).get("failures", [])}
    outcomes: dict[str, str] = {}
    for item in inputs:
        verdict.inputs_tried += 1
        source = path_text(item.path.absolute())  # as given: ocrcli records it so
        manifest = manifests.get(source)
        if manifest is None:
            outcome = SKIP
            if SKIP not in item.expect:
                verdict.add("lost_pages", f"{label}: {item.kind} {source!r}: no output at all")
        elif manifest.get("error"):
            outcome = FAIL
            if summary is not None and source not in failed_sources:
                verdict.add("lost_pages", f"{label}: {source!r} failed but is not in the summary")
        else:
            outcome = _judge_pages(manifest, folders[source], verdict, f"{label}: {source!r}")
        outcomes[str(item.path)] = outcome
        if outcome not in item.expect and outcome != "lost":
            verdict.add("wrong_exit_codes", f"{label}: {item.kind} {source!r} gave {outcome}, "
                        f"expected {sorted(item.expect)}")
    return outcomes


def _judge_pages(manifest: dict, folder: Path, verdict: Verdict, label: str) -> str:
    statuses = []
    for page, status in sorted(manifest.get("pages", {}).items(), key=lambda kv: int(kv[0])):
        record = _json(folder / f"page-{int(page):04d}.json")
        if status == "missing" or record is None:
            verdict.add("lost_pages", f"{label} page {page}: no page record")
            return "lost"
        if record.get("status") not in PAGE_STATUSES or record["status"] != status:
            verdict.add("lost_pages", f"{label} page {page}: status {record.get('status')!r}")
            return "lost"
        if status not in CONVERTED:
            error = record.get("error") or ""
            if not error or "\n" in error:
                verdict.add("bad_messages", f"{label} page {page}: error {error!r}")
        elif not (folder / f"page-{int(page):04d}.md").exists() or "quality" not in record:
            verdict.add("lost_pages", f"{label} page {page}: converted without Markdown or flags")
        statuses.append(status)
    if not statuses:
        verdict.add("lost_pages", f"{label}: a manifest with no pages and no error")
        return "lost"
    return CONVERT if all(s in CONVERTED for s in statuses) else FAIL


def judge_files(out: Path, before: dict, after: dict, verdict: Verdict, label: str,
                tmpdir: Path | None = None) -> None:
    """Writes outside `out`, and temp files left anywhere."""
    out_abs = os.path.abspath(out) + os.sep
    for path, stat in after.items():
        if path.startswith(out_abs):
            continue
        if before.get(path) != stat:
            verdict.add("writes_outside_output", f"{label}: {path!r}")
    for path in after:
        name = os.path.basename(path)
        if path.startswith(out_abs) and (name.endswith(".tmp") or name.startswith(".ocrcli-")):
            verdict.add("leftover_temp_files", f"{label}: {path!r}")
    if tmpdir is not None and tmpdir.exists():
        left = [p for p in tmpdir.rglob("*")]
        if left:
            verdict.add("leftover_temp_files", f"{label}: {len(left)} entries in TMPDIR, e.g. "
                        f"{left[0]}", len(left))


def leftover_processes(pgid: int) -> list[int]:
    """Processes still in a finished run's process group (its render workers, say)."""
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                left.append(int(entry))
    return left


def judge_processes_gone(pgid: int, verdict: Verdict, label: str, grace: float = 5.0) -> None:
    deadline = time.perf_counter() + grace
    while (left := leftover_processes(pgid)) and time.perf_counter() < deadline:
        time.sleep(0.2)
    if left:
        verdict.add("leftover_processes", f"{label}: {len(left)} processes outlived the run", len(left))
        for pid in left:  # ours: started by this harness, in this process group
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _json(path: Path) -> dict | None:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def comparable_outputs(out: Path) -> dict[str, object]:
    """Every output file except the run summary (a report of the run, with its timings), as
    bytes: pages carry no timings, so any two runs must agree byte for byte."""
    files: dict[str, object] = {}
    for path in sorted(out.rglob("*")):
        if not path.is_file() or path.name == "summary.json":
            continue
        rel = str(path.relative_to(out))
        files[rel] = path.read_bytes()
    return files


# Out-of-memory on the device, injected so that it happens whatever the timing and batching.
# A page of OOM_LINES text lines is OOM_LINES decode requests (one per line, all with the same
# one-token prompt), queued together when the page is laid out and admitted together (the
# batch holds them all), so the page's prefill is one pass of two rows or more, and so is
# its first decode pass (a request stops at its first token only on EOS; here all of them
# reach the token cap). A device that fits one row (OOM_ROWS_OVER=1) therefore fails that
# prefill, and OOM_AT_STEP=1 hits a decode pass that can be halved, however fast pages
# render. (The scenario once used OOM_ROWS_OVER=2 on pages of two lines: it fired only when
# a second page's requests were in the same pass, so under load, with rendering behind, no
# retry happened at all.) `oom_retry_problems` checks the pages' request counts, so that a
# change of layout that breaks this is reported as such, not as a broken recovery.
OOM_RETRY_FAULTS = ({"OCRCLI_FAULT_OOM_AT_STEP": "1"}, {"OCRCLI_FAULT_OOM_ROWS_OVER": "1"})
OOM_LINES = 3
# Drafting on (the model's default), so a retried pass re-verifies drafts too.
OOM_ARGS = ("--max-new-tokens", "6", "--accept", "truncated,degenerate", "--dpi", "72", "-q",
            "--batch-size", "8")


def oom_retry_problems(run: Run, out: Path, reference: Path, env: dict[str, str]
                       ) -> list[tuple[str, str]]:
    """What is wrong with a run under one of OOM_RETRY_FAULTS, as (Verdict counter, problem):
    no retry happened, the faults it armed are not recorded, or its outputs differ from a run
    without the fault."""
    summary = run.summary or {}
    problems = []
    requests = [(_json(p) or {}).get("requests") for p in sorted(reference.rglob("page-*.json"))]
    if not requests or any(not isinstance(n, int) or n < 2 for n in requests):
        problems.append(("wrong_exit_codes", f"{env}: the scenario no longer creates its "
                         f"condition: every page must be 2 decode requests or more, and the "
                         f"pages are {requests} (see OOM_LINES)"))
    elif summary.get("faults", {}).get("oom_retries", 0) < 1:
        problems.append(("wrong_exit_codes", f"{env}: no out-of-memory retry happened, on "
                         f"pages of {requests} requests: the recovery path did not run"))
    recorded = {k: str(v) for k, v in (summary.get("injected_faults") or {}).items()}
    if recorded != env:
        problems.append(("bad_messages", f"{env}: summary.json records injected faults "
                         f"{summary.get('injected_faults')!r}"))
    a, b = comparable_outputs(reference), comparable_outputs(out)
    if a != b:
        diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        problems.append(("outputs_differ", f"{env}: {len(diff)} files differ from the run "
                         f"without it, e.g. {diff[:3]}"))
    return problems


def judged_convert(base: Path, inputs: list[str], expect: set[int], verdict: Verdict,
                   hostile: list[Hostile] = (), args: tuple[str, ...] = FAST,
                   env: dict[str, str] | None = None, timeout: float = 300,
                   memory_limit_mb: float | None = None, out: Path | None = None,
                   label: str | None = None) -> tuple[Run, dict[str, str], Path]:
    """`ocrcli convert -o OUT --summary - ARGS INPUTS` run in `base`, judged on everything:
    process, per-input outcomes, files outside OUT, temp files, processes, memory."""
    n = sum(1 for _ in base.glob("out-*")) + 1 if base.exists() else 1
    out = out or base / f"out-{n}"
    cwd, tmp = base / "cwd", base / f"tmp-{n}"
    cwd.mkdir(parents=True, exist_ok=True)
    before = snapshot(base, skip=(out,))
    # Inputs last: a "--" among them ends the options.
    run = run_cli(["convert", "-o", str(out), "--summary", "-", *args, *inputs], cwd, tmp, env,
                  timeout, measure_memory=memory_limit_mb is not None)
    label = label or f"{base.name} ({' '.join(Path(i).name for i in inputs)[:60]})"
    judge_process(run, expect, verdict, label)
    outcomes = judge_outputs(out, list(hostile), verdict, label, run.summary) if hostile else {}
    judge_files(out, before, snapshot(base, skip=(out,)), verdict, label, tmp)
    judge_processes_gone(run.pgid, verdict, label)
    if memory_limit_mb is not None and run.peak_rss_mb > memory_limit_mb:
        verdict.add("memory_over_limit", f"{label}: {run.peak_rss_mb:.0f} MB")
    if tmp.exists() and not any(tmp.iterdir()):
        tmp.rmdir()
    return run, outcomes, out

