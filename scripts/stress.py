"""Stress `ocrcli convert` with hostile inputs, crashes, interrupts and resource faults.

    python scripts/stress.py --json        # everything; one JSON object on stdout

Every scenario runs the real CLI in a subprocess (the real renderer, engine and model) and
judges it with ocrcli/testing/harness.py: the documented exit code, one-line messages and
no traceback, every page of every input converted or failed with a recorded reason, nothing
written outside -o, no temp file or process left behind, bounded memory. Faults that cannot
be caused from outside (a hung or crashing renderer, out-of-memory on the device, a full disk
where mount is not allowed) use the env-var hooks of ocrcli/faults.py.

Byte-identity after kill -9 and after an out-of-memory retry compares every output file
except summary.json (the run's report, with its timings) byte for byte.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import orjson  # noqa: E402

from ocrcli.testing import hostile_inputs as hi  # noqa: E402
from ocrcli.testing.harness import (  # noqa: E402
    FAST,
    OOM_ARGS,
    OOM_LINES,
    OOM_RETRY_FAULTS,
    Run,
    Verdict,
    comparable_outputs,
    judge_process,
    judge_processes_gone,
    judged_convert,
    oom_retry_problems,
    run_cli,
    start_cli,
)

# Real PDFs (the olmOCR-Bench sample, hard real-world PDFs) are not shipped: OCRCLI_REAL_DATA
# names their folder, as for the tests; without them the real_pdfs scenario notes it and skips.
SHARED = Path(os.environ.get("OCRCLI_REAL_DATA", REPO.parent / "shared" / "data"))
SAMPLES = REPO / "samples"
MEMORY_LIMIT_MB = 6000  # the whole process tree, on any input here
PASSWORD = "secret"


class Stress:
    def __init__(self, work: Path, seed: int = 0, verbose: bool = False):
        self.work = work
        self.v = Verdict()
        self.rng = random.Random(seed)
        self.verbose = verbose
        self.timings: dict[str, float] = {}
        self.good = hi.small_text_pdf(pages=1, lines=2)

    def log(self, message: str) -> None:
        if self.verbose:
            print(f"[stress] {message}", file=sys.stderr, flush=True)

    # -- one run of the CLI, fully judged -----------------------------------------------
    def convert(self, scenario: str, inputs: list[str], expect: set[int],
                hostile: list[hi.Hostile] = (), inputs_counted: int = 0, **kw
                ) -> tuple[Run, dict[str, str], Path]:
        run, outcomes, out = judged_convert(self.work / scenario, inputs, expect, self.v,
                                            list(hostile), **kw)
        self.v.inputs_tried += inputs_counted
        self.log(f"{scenario} {' '.join(Path(i).name for i in inputs)[:50]}: exit "
                 f"{run.returncode} in {run.seconds:.1f}s, {run.peak_rss_mb:.0f} MB, "
                 f"problems so far {len(self.v.problems)}")
        return run, outcomes, out

    # -- scenarios -------------------------------------------------------------------------
    def real_pdfs(self) -> None:
        """Every real PDF converts, or fails per page with a reason; memory stays bounded."""
        for sub in ("gnarly-pdfs", "olmocr-bench-sample/pdfs"):
            folder = SHARED / sub
            if not folder.exists():
                self.v.problems.append(f"note: {folder} is missing; real PDFs not tried")
                continue
            docs = [hi.Hostile(p, f"real:{sub}", hi.EITHER) for p in sorted(folder.rglob("*.pdf"))]
            self.convert("real", [str(folder)], {0, 1}, docs,
                         args=(*FAST, "--batch-size", "64", "--page-timeout", "300"),
                         timeout=900, memory_limit_mb=MEMORY_LIMIT_MB)

    def generated(self) -> None:
        """Hostile files in folders, one run per family; every file judged on its own."""
        root = self.work / "generated"
        report = (SAMPLES / "report.pdf").read_bytes()
        families: list[tuple[str, Callable[[Path], list[hi.Hostile]], set[int], dict]] = [
            ("damaged", lambda d: hi.damaged_pdfs(d, self.good, "small", seed=1)
             + hi.damaged_pdfs(d, report, "report", seed=2, flips=8), {0, 1}, {}),
            ("lying", hi.lying_pdfs, {0, 1}, {}),
            ("boxes", hi.box_pdfs, {0, 1}, {}),
            ("active", hi.active_content_pdfs, {0}, {}),
            ("junk", hi.junk_files, {1}, {}),
            ("images", hi.image_files, {1}, {}),
            ("special", lambda d: hi.special_files(d, self.good), {1},
             {"OCRCLI_FAULT_UNREADABLE": "unreadable-by-hook"}),
            ("names", lambda d: hi.odd_names(d, self.good), {0}, {}),
        ]
        for name, make, expect, env in families:
            folder = root / name / "in"
            items = make(folder)
            self.convert(f"generated/{name}", [str(folder)], expect, items, env=env,
                         args=(*FAST, "--page-timeout", "120"), timeout=600,
                         memory_limit_mb=MEMORY_LIMIT_MB)
        self._no_escape_markers()

    def _no_escape_markers(self) -> None:
        """JavaScript, launch actions and attachments must have had no effect anywhere."""
        for path in [*Path("/tmp").glob("*OCRCLI_STRESS_ESCAPED*"),
                     *self.work.glob("**/*OCRCLI_STRESS_ESCAPED*")]:
            self.v.add("writes_outside_output", f"active content escaped: {path}")

    def encrypted(self) -> None:
        folder = self.work / "encrypted" / "in"
        sets = hi.encrypted_pdfs(folder / "user", PASSWORD)
        owner_only = folder / "owner_only"
        owner_only.mkdir()
        for item in sets["owner_only"]:
            item.path.rename(owner_only / item.path.name)
        owner = [hi.Hostile(owner_only / i.path.name, i.kind, i.expect) for i in sets["owner_only"]]
        user_dir = folder / "user"
        run, _, _ = self.convert("encrypted", [str(user_dir)], {1}, sets["user"])
        if "--password" not in run.stderr:
            self.v.add("bad_messages", "encrypted without --password: the message does not say "
                       "to pass --password")
        with_pw = [hi.Hostile(i.path, i.kind, frozenset({hi.CONVERT})) for i in sets["user"]]
        self.convert("encrypted", [str(user_dir)], {0}, with_pw, args=(*FAST, "--password", PASSWORD))
        self.convert("encrypted", [str(user_dir)], {1}, sets["user"], args=(*FAST, "--password", "wrong"))
        self.convert("encrypted", [str(owner_only)], {0}, owner)

    def many_pages(self) -> None:
        """Thousands of pages in one PDF: all come back, memory stays flat."""
        item = hi.many_pages_pdf(self.work / "many" / "in" / "pages-5000.pdf", 5000)
        self.convert("many", [str(item.path)], {0}, [item], timeout=600, memory_limit_mb=1500)

    def path_tricks(self) -> None:
        """'..' in input paths, absolute paths, links from outside, a leading dash: outputs
        stay under -o, one per document."""
        base = self.work / "paths"
        (base / "in" / "sub").mkdir(parents=True)
        outside = base / "outside"
        outside.mkdir()
        (outside / "far.pdf").write_bytes(self.good)
        (base / "in" / "doc.pdf").write_bytes(self.good)
        (base / "in" / "-dash.pdf").write_bytes(self.good)
        os.symlink(outside / "far.pdf", base / "in" / "sub" / "linked.pdf")
        dotted = str(base / "in" / "sub" / ".." / ".." / "in" / "doc.pdf")
        items = [hi.Hostile(Path(dotted), "dotdot-input", frozenset({hi.CONVERT})),
                 hi.Hostile(base / "in" / "-dash.pdf", "leading-dash-arg", frozenset({hi.CONVERT}))]
        run, _, out = self.convert("paths", ["--", dotted, str(base / "in" / "-dash.pdf")], {0},
                                   items)
        self.convert("paths", [str(base / "in")], {0}, [hi.Hostile(
            base / "in" / "sub" / "linked.pdf", "symlink-from-outside", frozenset({hi.CONVERT}))])

    def output_faults(self) -> None:
        """Unwritable -o fails before any work (4); a full disk fails with 4 and no corrupt
        or temp files; a rerun then finishes the job."""
        base = self.work / "output"
        base.mkdir(parents=True)
        (base / "a-file").write_text("x")
        doc = base / "doc.pdf"
        doc.write_bytes(hi.small_text_pdf(pages=6, lines=2))
        for target in (base / "a-file" / "out", Path("/proc/ocrcli-stress-out"),
                       Path("/sys/ocrcli-stress-out")):
            run = run_cli(["convert", str(doc), "-o", str(target), "-q"], base, base / "tmp")
            judge_process(run, {4}, self.v, f"unwritable -o {target}")
            self.v.inputs_tried += 1
            if "not writable" not in run.stderr or run.seconds > 60:
                self.v.add("wrong_exit_codes", f"unwritable -o {target}: {run.stderr.strip()!r}")
        item = [hi.Hostile(doc, "full-disk", frozenset({hi.CONVERT}))]
        ref = self.convert("output", [str(doc)], {0}, item, args=(*FAST, "--max-new-tokens", "3"))[2]
        out = base / "enospc"
        run, _, _ = self.convert("output", [str(doc)], {4}, [], out=out,
                                 env={"OCRCLI_FAULT_ENOSPC_AFTER": "5"},
                                 args=(*FAST, "--max-new-tokens", "3"), inputs_counted=1)
        self._all_json_valid(out, "full disk (hook)")
        if "no space left" not in run.stderr:
            self.v.add("bad_messages", f"full disk: {run.stderr.strip()!r}")
        self.convert("output", [str(doc)], {0}, item, out=out, args=(*FAST, "--max-new-tokens", "3"))
        self._same(ref, out, "rerun after a full disk")
        self._tmpfs_full_disk(base, doc)

    def _tmpfs_full_disk(self, base: Path, doc: Path) -> None:
        mount = base / "tiny"
        mount.mkdir()
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs",
                                                 str(mount)], capture_output=True).returncode:
            self.v.problems.append("note: no tmpfs mount here; full disk tried with the hook only")
            return
        try:
            many = base / "blank-400.pdf"
            many.write_bytes(hi.pages_pdf([None] * 400))
            run = run_cli(["convert", str(many), "-o", str(mount / "out"), *FAST], base, base / "tmp2")
            judge_process(run, {4}, self.v, "full disk (tmpfs)")
            self.v.inputs_tried += 1
            self._all_json_valid(mount / "out", "full disk (tmpfs)")
            left = [p for p in mount.rglob("*") if p.name.endswith(".tmp")]
            if left:
                self.v.add("leftover_temp_files", f"full disk (tmpfs): {left[0]}", len(left))
        finally:
            subprocess.run(["umount", str(mount)], capture_output=True)

    def _all_json_valid(self, out: Path, label: str) -> None:
        for path in out.rglob("*.json"):
            try:
                orjson.loads(path.read_bytes())
            except orjson.JSONDecodeError:
                self.v.add("lost_pages", f"{label}: corrupt {path}")

    def _same(self, ref: Path, out: Path, label: str) -> None:
        a, b = comparable_outputs(ref), comparable_outputs(out)
        if a != b:
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            self.v.add("outputs_differ", f"{label}: {len(diff)} files differ, e.g. {diff[:3]}")

    def usage_and_models(self) -> None:
        base = self.work / "usage"
        (base / "empty").mkdir(parents=True)
        doc = base / "doc.pdf"
        doc.write_bytes(self.good)
        cases = [
            (["convert", str(base / "missing.pdf"), "-o", str(base / "o")], 2),
            (["convert", str(base / "empty"), "-o", str(base / "o")], 2),
            (["convert", str(doc), "-o", str(base / "o"), "--pages", "0-x"], 2),
            (["convert", str(doc), "-o", str(base / "o"), "--shard", "0/1"], 2),
            (["convert", str(doc), "-o", str(base / "o"), "--page-timeout", "-1"], 2),
            (["convert", str(doc), "-o", str(base / "o"), "--no-such-option"], 2),
            (["convert", str(doc), "-o", str(base / "o"), "--model", str(base / "nope")], 3),
        ]
        for folder, expect in self._model_folders(base):
            cases.append((["convert", str(doc), "-o", str(base / "o"), "--model", str(folder)], expect))
        for args, expect in cases:
            run = run_cli([*args, "-q"], base, base / "tmp")
            # A bad option too is one `ocrcli: error:` line (no usage block, no boxed panel).
            judge_process(run, {expect}, self.v, f"usage {' '.join(args[1:])[-80:]}")
            self.v.inputs_tried += 1
        for marker in ("PWNED_PICKLE", "PWNED_REMOTE_CODE"):
            if (base / marker).exists():
                self.v.add("writes_outside_output", f"model folder ran code: {marker}")

    def _model_folders(self, base: Path) -> list[tuple[Path, int]]:
        """Model folders that must be refused (3) without running anything in them."""
        from ocrcli.testing.model_folders import corrupt_weights, pickle_only, remote_code

        return [(pickle_only(base / "m-pickle", base / "PWNED_PICKLE"), 3),
                (remote_code(base / "m-remote", base / "PWNED_REMOTE_CODE"), 3),
                (corrupt_weights(base / "m-corrupt"), 3)]

    def model_faults(self) -> None:
        """A looping model ends pages as degenerate; out-of-memory halves and retries with
        identical output; decoding past --page-timeout ends the page as timeout."""
        from ocrcli.testing.model_folders import looping_model

        base = self.work / "model"
        base.mkdir(parents=True)
        doc = base / "doc.pdf"
        doc.write_bytes(hi.small_text_pdf(pages=2, lines=OOM_LINES, seed=3))
        item = [hi.Hostile(doc, "model-fault", frozenset({hi.CONVERT}))]
        looping = looping_model(base / "looping")
        run, _, out = self.convert("model", [str(doc)], {0}, item,
                                   args=(*FAST, "--max-new-tokens", "120", "--model", str(looping)))
        statuses = {orjson.loads(p.read_bytes())["status"] for p in out.rglob("page-*.json")}
        if statuses != {"degenerate"}:
            self.v.add("wrong_exit_codes", f"looping model: page statuses {statuses}")
        args = OOM_ARGS
        ref = self.convert("model", [str(doc)], {0}, item, args=args)[2]
        for env in OOM_RETRY_FAULTS:
            run, _, out = self.convert("model", [str(doc)], {0}, item, args=args, env=env)
            for counter, problem in oom_retry_problems(run, out, ref, env):
                self.v.add(counter, problem)
        failing = [hi.Hostile(doc, "oom-always", frozenset({hi.FAIL}))]
        self.convert("model", [str(doc)], {1}, failing, args=args,
                     env={"OCRCLI_FAULT_OOM_ROWS_OVER": "0"})
        run, _, _ = self.convert("model", [str(doc)], {1}, failing,
                                 args=(*FAST, "--max-new-tokens", "30", "--page-timeout", "4"),
                                 env={"OCRCLI_FAULT_STEP_DELAY": "1"}, timeout=120)
        if "decoding took longer" not in run.stderr:
            self.v.add("wrong_exit_codes", f"decode timeout: {run.stderr.strip()[-200:]!r}")

    def render_faults(self) -> None:
        """A hung render is abandoned at --page-timeout and its worker replaced; a crashed
        worker fails its page only; both runs go on."""
        base = self.work / "render"
        base.mkdir(parents=True)
        doc = base / "doc.pdf"
        doc.write_bytes(hi.small_text_pdf(pages=6, lines=1, seed=4))
        for env, expect_error in (({"OCRCLI_FAULT_RENDER_HANG": "3"}, "rendering took longer"),
                                  ({"OCRCLI_FAULT_RENDER_CRASH": "2"}, "process died")):
            run, _, out = self.convert("render", [str(doc)], {1}, [], env=env, inputs_counted=1,
                                       args=(*FAST, "--render-workers", "2", "--page-timeout", "10"),
                                       timeout=180)
            failures = (run.summary or {}).get("failures", [])
            pages = {p.name: orjson.loads(p.read_bytes())["status"] for p in out.rglob("page-*.json")}
            bad = [n for n, s in pages.items() if s not in ("ok", "truncated", "degenerate")]
            if len(pages) != 6 or len(bad) != 1 or not any(expect_error in f["error"] for f in failures):
                self.v.add("lost_pages", f"render fault {env}: pages {pages}, failures {failures}")

    def crashes_and_signals(self) -> None:
        """kill -9 at random moments of a 100-page run, then a rerun: outputs identical to an
        uninterrupted run. SIGINT and SIGTERM: exit 130, finished pages kept and valid."""
        base = self.work / "kill"
        base.mkdir(parents=True)
        doc = base / "hundred.pdf"
        # Text on every 4th page: a 2-core CPU decodes a line in about a second.
        doc.write_bytes(hi.sparse_text_pdf(100, every=4, seed=5))
        item = [hi.Hostile(doc, "kill-9-run", frozenset({hi.CONVERT}))]
        # A 4-token cap truncates pages, which is not what is judged here: accept them (exit 0).
        args = ("--max-new-tokens", "4", "--accept", "truncated,degenerate", "--dpi", "72", "-q")
        ref = self.convert("kill", [str(doc)], {0}, item, args=args)[2]
        out = base / "killed"
        # Once early (while it starts up, loads the model, counts pages), then at growing
        # page counts, so that every kill lands in a different part of the run.
        self._kill_when(doc, out, args, 0, signal.SIGKILL, "kill -9 during start-up",
                        after_s=self.rng.uniform(0.5, 3.0))
        for target in sorted(self.rng.sample(range(5, 95), 3)):
            self._kill_when(doc, out, args, target, signal.SIGKILL, f"kill -9 at {target} pages")
        self.convert("kill", [str(doc)], {0}, item, out=out, args=args)
        self._same(ref, out, "rerun after kill -9")
        for sig in (signal.SIGINT, signal.SIGTERM):
            out = base / f"signal-{sig.name}"
            self._kill_when(doc, out, args, self.rng.randint(5, 40), sig, sig.name)
            kept = comparable_outputs(out)
            reference = comparable_outputs(ref)
            pages = [k for k in kept if k.endswith(".md") and "/page-" in k]
            if not pages:
                self.v.add("lost_pages", f"{sig.name}: no finished page was kept")
            for key in pages + [k.replace(".md", ".json") for k in pages]:
                if kept.get(key) != reference.get(key):
                    self.v.add("outputs_differ", f"{sig.name}: kept page {key} differs")
                    break

    def _kill_when(self, doc: Path, out: Path, args: tuple[str, ...], pages: int, sig: int,
                   label: str, after_s: float = 0.0) -> None:
        """Start a run; once `pages` pages are written (and `after_s` has passed), send `sig`
        to the main process only (its workers must notice on their own)."""
        tmp = out.parent / "tmp-kill"
        proc = start_cli(["convert", str(doc), "-o", str(out), *args], out.parent, tmp,
                         stdout=subprocess.DEVNULL)
        self.v.inputs_tried += 1
        start = time.perf_counter()
        folder = out / doc.name  # a file given directly: its output folder keeps the extension
        while proc.poll() is None and time.perf_counter() < start + 240:
            if time.perf_counter() >= start + after_s and (
                    pages == 0 or (folder.exists() and len(list(folder.glob("page-*.json"))) >= pages)):
                break
            time.sleep(0.05)
        if proc.poll() is None:
            os.kill(proc.pid, sig)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            self.v.add("hangs", f"{label}: no exit after the signal")
        code, stderr = proc.returncode, err.decode("utf-8", "replace")
        expect = {-signal.SIGKILL} if sig == signal.SIGKILL else {130}
        if code not in expect and code != 0:  # 0: it finished before the signal landed
            self.v.add("wrong_exit_codes", f"{label}: exit {code}: {stderr.strip()[-200:]!r}")
        if "Traceback (most recent call last)" in stderr:
            self.v.add("tracebacks", f"{label}: {stderr.strip()[-300:]!r}")
        judge_processes_gone(proc.pid, self.v, label)
        self._all_json_valid(out, label)
        shutil.rmtree(tmp, ignore_errors=True)

    # -- the whole run -----------------------------------------------------------------------
    SCENARIOS = ("generated", "encrypted", "path_tricks", "usage_and_models", "output_faults",
                 "model_faults", "render_faults", "crashes_and_signals", "many_pages", "real_pdfs")

    def run(self, only: list[str] | None = None) -> dict:
        t0 = time.perf_counter()
        for name in self.SCENARIOS:
            if only and name not in only:
                continue
            start = time.perf_counter()
            self.log(f"== {name}")
            getattr(self, name)()
            self.timings[name] = round(time.perf_counter() - start, 1)
        # Temp files a run left anywhere in the work tree (outputs included).
        for path in self.work.rglob("*"):
            if path.name.startswith(".ocrcli-") and path.name.endswith(".tmp"):
                self.v.add("leftover_temp_files", str(path))
        result = self.v.report()
        result.update({"runs": self.v.runs, "seconds": round(time.perf_counter() - t0, 1),
                       "scenario_seconds": self.timings,
                       "problems": [p for p in self.v.problems if not p.startswith("note:")],
                       "notes": [p for p in self.v.problems if p.startswith("note:")]})
        return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--only", action="append", choices=Stress.SCENARIOS,
                        help="run only this scenario (repeatable)")
    parser.add_argument("--work", type=Path, help="work folder (default: a new temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    a = parser.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="ocrcli-stress-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = Stress(work, a.seed, a.verbose).run(a.only)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    if a.json:
        sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        for key, value in result.items():
            if key not in ("problems", "notes"):
                print(f"{key}: {value}")
        for line in result["notes"] + result["problems"]:
            print(f"  {line}")
    bad = [k for k in ("crashes", "hangs", "lost_pages", "wrong_exit_codes", "tracebacks",
                       "writes_outside_output", "leftover_temp_files") if result[k]]
    return 1 if bad or result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
