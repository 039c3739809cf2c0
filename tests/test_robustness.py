"""Robustness and security: hostile inputs, crashes, interrupts and resource faults.

The fast subset of scripts/stress.py. Everything runs for real: the CLI in a subprocess, the
renderer's worker processes, the engine and the built-in model. Faults that cannot be caused
from outside (a hung or crashing render, out-of-memory on the device, a full disk) come from
the env-var hooks in ocrcli/faults.py, which act inside the real code paths.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from ocrcli.engine.policy import DraftPolicy
from ocrcli.engine.scheduler import OOM_MESSAGE, Engine, list_source
from ocrcli.errors import OutputError
from ocrcli.faults import NO_FAULTS, Faults
from ocrcli.inputs import PageRef, open_image, open_pdf, relative_names
from ocrcli.models.base import GuardConfig
from ocrcli.output import OutputTree, atomic_write, remove_stale_temps
from ocrcli.render import Renderer, RenderSettings
from ocrcli.testing import hostile_inputs as hi
from ocrcli.testing.harness import (
    FAST,
    OOM_ARGS,
    OOM_LINES,
    OOM_RETRY_FAULTS,
    Verdict,
    comparable_outputs,
    judge_process,
    judge_processes_gone,
    judged_convert,
    oom_retry_problems,
    run_cli,
    start_cli,
)
from ocrcli.testing.model_folders import corrupt_weights, looping_model, pickle_only, remote_code
from tests.conftest import SAMPLES, real_data
from tests.engine.conftest import random_model, random_requests


def assert_clean(verdict: Verdict) -> None:
    assert verdict.clean, "\n".join(verdict.problems)


def page_records(out: Path) -> dict[str, dict]:
    return {str(p.relative_to(out)): orjson.loads(p.read_bytes()) for p in out.rglob("page-*.json")}


# --------------------------------------------------------------------------- in process


def test_output_names_never_escape_or_collide():
    paths = [Path("/data/in/sub/../../etc/passwd.pdf"), Path("/data/in/..pdf"),
             Path("/data/in/...pdf"), Path("/data/in/a\nb.pdf"), Path("/data/in/a_b.pdf"),
             Path("/data/in/a\x01b.pdf"), Path(os.fsdecode(b"/data/in/bad-\xff.pdf")),
             Path("/data/in/" + "x" * 300 + ".pdf"), Path("/data/in/" + "x" * 300 + "y.pdf"),
             Path("/data/in/..\\..\\win.pdf"), Path("/data/in/-o.pdf")]
    names = relative_names(paths)
    assert len(set(names)) == len(names)
    for name in names:
        name.encode("utf-8")  # valid text, whatever the bytes of the input name
        for part in name.split("/"):
            assert part not in ("", ".", "..") and "\\" not in part
            assert part.isprintable() and len(part.encode()) <= 200
    tree = OutputTree(Path("/tmp/out"))
    with pytest.raises(OutputError):
        tree.doc_dir("../escaped")


def test_atomic_write_on_a_full_disk_keeps_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "page-0001.json"
    target.write_bytes(b"old, complete")
    with pytest.raises(OutputError, match="no space left"):
        atomic_write(target, b"new" * 1000, inject_enospc=True)
    assert target.read_bytes() == b"old, complete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page-0001.json"]
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new" and oct(target.stat().st_mode & 0o777) != "0o600"


def test_stale_temp_files_of_dead_processes_are_removed(tmp_path):
    from ocrcli.output import _temp_prefix

    proc = subprocess.Popen(["true"])  # its pid is free once it has exited
    proc.wait()
    mine = tmp_path / f"{_temp_prefix()}live1234.tmp"
    theirs = tmp_path / f"{_temp_prefix().rsplit('-', 1)[0]}-{proc.pid}.dead1234.tmp"
    other_host = tmp_path / ".ocrcli-elsewhere-1.abcd1234.tmp"
    for p in (mine, theirs, other_host):
        p.write_bytes(b"partial")
    assert remove_stale_temps(tmp_path) == 1
    assert mine.exists() and other_host.exists() and not theirs.exists()


def test_non_regular_files_and_bombs_are_refused(tmp_path):
    os.mkfifo(tmp_path / "pipe.pdf")
    with pytest.raises(ValueError, match="not a regular file"):
        open_pdf(tmp_path / "pipe.pdf", None)  # would block forever if opened
    (tmp_path / "bomb.png").write_bytes(hi.crafted_png(100_000, 100_000))
    with pytest.raises(ValueError, match="decompression bomb"):
        open_image(tmp_path / "bomb.png")
    (tmp_path / "bomb.tif").write_bytes(hi.crafted_tiff(1_000_000, 1_000_000))
    with pytest.raises(ValueError, match="decompression bomb"):
        open_image(tmp_path / "bomb.tif")


def _decode_all(model, requests, faults: Faults = NO_FAULTS, batch_size=4, **kw):
    engine = Engine(model, batch_size, max(r.max_new_tokens for r in requests),
                    DraftPolicy(4), GuardConfig(), faults=faults)
    results = {r.key: r for r in engine.run(list_source(list(requests)), **kw)}
    return engine, results


@pytest.mark.parametrize("faults", [Faults(oom_at_step=3), Faults(oom_rows_over=1)])
def test_out_of_memory_halves_and_retries_losslessly(faults):
    model = random_model()
    requests = random_requests(6, seed=2, max_new=16)
    _, expected = _decode_all(model, requests)
    engine, got = _decode_all(model, random_requests(6, seed=2, max_new=16), faults)
    assert engine.oom_retries >= 1 and engine.rows_per_pass < 4
    assert {k: (r.tokens, r.status) for k, r in got.items()} == \
        {k: (r.tokens, r.status) for k, r in expected.items()}


def test_out_of_memory_on_the_command_line_retries_on_halves_identically(tmp_path):
    """scripts/stress.py's out-of-memory scenario, one page: each fault must end in a retry
    (the scenario creates its condition whatever the timing), recorded in summary.json, with
    the outputs of a run without it."""
    doc = tmp_path / "doc.pdf"
    doc.write_bytes(hi.small_text_pdf(pages=1, lines=OOM_LINES, seed=3))
    item = [hi.Hostile(doc, "oom-retry", frozenset({hi.CONVERT}))]
    verdict = Verdict()
    _, _, ref = judged_convert(tmp_path / "ref", [str(doc)], {0}, verdict, item, args=OOM_ARGS)
    for n, env in enumerate(OOM_RETRY_FAULTS):
        run, _, out = judged_convert(tmp_path / f"oom-{n}", [str(doc)], {0}, verdict, item,
                                     args=OOM_ARGS, env=env)
        assert oom_retry_problems(run, out, ref, env) == []
    assert_clean(verdict)


def test_out_of_memory_with_one_row_fails_requests_not_the_run():
    _, got = _decode_all(random_model(), random_requests(3, max_new=8), Faults(oom_rows_over=0))
    assert len(got) == 3 and all(r.status == "failed" and r.error == OOM_MESSAGE
                                 for r in got.values())


def test_expired_requests_are_evicted_and_the_rest_unchanged():
    model = random_model()
    _, expected = _decode_all(model, random_requests(6, seed=3, max_new=20))
    holder: dict[str, Engine] = {}

    def expired(key) -> bool:  # requests 0 and 1 run out of time after 3 steps
        return key in (0, 1) and holder["engine"].steps >= 3

    engine = Engine(model, 4, 20, DraftPolicy(4), GuardConfig())
    holder["engine"] = engine
    got = {r.key: r for r in engine.run(list_source(random_requests(6, seed=3, max_new=20)),
                                        expired)}
    assert {got[k].status for k in (0, 1)} == {"timeout"}
    assert all((got[k].tokens, got[k].status) == (expected[k].tokens, expected[k].status)
               for k in range(2, 6))


def _render_all(pdf: Path, pages: int, settings: RenderSettings, workers: int) -> tuple[list, int]:
    renderer = Renderer(settings, workers, prefetch=4)
    try:
        stream = renderer.stream([PageRef(0, pdf, "pdf", p) for p in range(1, pages + 1)])
        results = []
        while not stream.done:
            results.append(stream.poll(True))
        return results, renderer.replaced
    finally:
        renderer.close()


def test_hung_render_is_abandoned_and_its_worker_replaced(tmp_path):
    pdf = tmp_path / "four.pdf"
    pdf.write_bytes(hi.small_text_pdf(pages=4, lines=1))
    t0 = time.perf_counter()
    settings = RenderSettings(dpi=36, page_timeout=3, faults=Faults(render_hang=2))
    results, replaced = _render_all(pdf, 4, settings, workers=1)
    assert [r.ref.page for r in results] == [1, 2, 3, 4] and replaced == 1
    assert results[1].timed_out and "page-timeout" in results[1].error
    assert all(r.image is not None for i, r in enumerate(results) if i != 1)
    assert time.perf_counter() - t0 < 60


def test_crashed_render_worker_fails_only_its_page(tmp_path):
    pdf = tmp_path / "four.pdf"
    pdf.write_bytes(hi.small_text_pdf(pages=4, lines=1))
    settings = RenderSettings(dpi=36, faults=Faults(render_crash=3))
    results, replaced = _render_all(pdf, 4, settings, workers=2)
    assert [r.ref.page for r in results] == [1, 2, 3, 4] and replaced == 1
    assert "died" in results[2].error and not results[2].timed_out
    assert all(r.image is not None for i, r in enumerate(results) if i != 2)


# --------------------------------------------------------------------------- the CLI


def test_junk_and_special_files_fail_one_line_each(tmp_path):
    folder = tmp_path / "in"
    good = hi.small_text_pdf()
    items = [i for i in hi.junk_files(folder / "junk") if i.path.stat().st_size < 10_000]
    items += hi.special_files(folder / "special", good)
    for name, data in (("png-100000x100000.png", hi.crafted_png(100_000, 100_000)),
                       ("tiff-huge.tif", hi.crafted_tiff(1_000_000, 1_000_000))):
        (folder / name).write_bytes(data)
        items.append(hi.Hostile(folder / name, "image-bomb", frozenset({hi.FAIL})))
    verdict = Verdict()
    run, outcomes, _ = judged_convert(tmp_path, [str(folder)], {1}, verdict, items,
                                      env={"OCRCLI_FAULT_UNREADABLE": "unreadable-by-hook"})
    assert_clean(verdict)
    assert outcomes[str(folder / "special" / "real.pdf")] == hi.CONVERT
    assert "Permission denied" in run.stderr and "not a regular file" in run.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions; "
                    "test_junk_and_special_files_fail_one_line_each covers this with the hook")
def test_unreadable_file_by_permissions(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "locked.pdf").write_bytes(hi.small_text_pdf())
    (folder / "locked.pdf").chmod(0)
    verdict = Verdict()
    run, _, _ = judged_convert(tmp_path, [str(folder)], {1}, verdict, [
        hi.Hostile(folder / "locked.pdf", "unreadable", frozenset({hi.FAIL}))])
    assert_clean(verdict)
    assert "Permission denied" in run.stderr


def test_damaged_pdfs_convert_or_fail_per_page(tmp_path):
    items = hi.damaged_pdfs(tmp_path / "in", hi.small_text_pdf(), "small", seed=7, flips=8)
    verdict = Verdict()
    judged_convert(tmp_path, [str(tmp_path / "in")], {0, 1}, verdict, items)
    assert_clean(verdict)


@pytest.mark.slow
def test_lying_structures_boxes_and_active_content(tmp_path):
    items = hi.lying_pdfs(tmp_path / "in" / "lying") + hi.box_pdfs(tmp_path / "in" / "boxes")
    active = hi.active_content_pdfs(tmp_path / "in" / "active")
    verdict = Verdict()
    _, outcomes, out = judged_convert(tmp_path, [str(tmp_path / "in")], {0, 1}, verdict,
                                      items + active, args=(*FAST, "--page-timeout", "120"),
                                      memory_limit_mb=6000)
    assert_clean(verdict)
    assert all(outcomes[str(i.path)] == hi.CONVERT for i in active)  # JavaScript etc. ignored
    assert not list(Path("/tmp").glob("OCRCLI_STRESS_ESCAPED*"))
    record = next(iter(page_records(out).values()))
    assert set(record["quality"]) >= {"repetition", "table_structure"}


def test_odd_names_get_their_own_outputs_inside_out(tmp_path):
    good = hi.small_text_pdf()
    items = hi.odd_names(tmp_path / "in", good)
    verdict = Verdict()
    _, outcomes, out = judged_convert(tmp_path, [str(tmp_path / "in")], {0}, verdict, items)
    assert_clean(verdict)
    manifests = list(out.rglob("manifest.json"))
    assert len(manifests) == len(items)
    resolved = out.resolve()
    assert all(m.resolve().is_relative_to(resolved) for m in manifests)


def test_dotdot_paths_and_leading_dash_names(tmp_path):
    (tmp_path / "in" / "sub").mkdir(parents=True)
    (tmp_path / "in" / "-o.pdf").write_bytes(hi.small_text_pdf())
    dotted = str(tmp_path / "in" / "sub" / ".." / ".." / "in" / "-o.pdf")
    verdict = Verdict()
    _, _, out = judged_convert(tmp_path, ["--", dotted], {0}, verdict,
                               [hi.Hostile(Path(dotted), "dotdot-dash", frozenset({hi.CONVERT}))])
    assert_clean(verdict)
    assert (out / "-o.pdf" / "page-0001.md").exists()


@pytest.mark.slow
def test_every_encryption_with_and_without_password(tmp_path):
    sets = hi.encrypted_pdfs(tmp_path / "user", "secret")
    owner = tmp_path / "owner"
    owner.mkdir()
    owner_items = []
    for item in sets["owner_only"]:
        item.path.rename(owner / item.path.name)
        owner_items.append(hi.Hostile(owner / item.path.name, item.kind, item.expect))
    verdict = Verdict()
    run, _, _ = judged_convert(tmp_path, [str(tmp_path / "user")], {1}, verdict, sets["user"])
    assert "--password" in run.stderr
    unlocked = [hi.Hostile(i.path, i.kind, frozenset({hi.CONVERT})) for i in sets["user"]]
    judged_convert(tmp_path, [str(tmp_path / "user"), str(owner)], {0}, verdict,
                   unlocked + owner_items, args=(*FAST, "--password", "secret"))
    assert_clean(verdict)


@pytest.mark.slow
def test_image_bombs_refused_odd_images_convert(tmp_path):
    items = [i for i in hi.image_files(tmp_path / "in") if "near-limit" not in i.path.name]
    (tmp_path / "in" / "odd-near-limit-14000x14000.png").unlink()
    verdict = Verdict()
    judged_convert(tmp_path, [str(tmp_path / "in")], {1}, verdict, items, memory_limit_mb=4000)
    assert_clean(verdict)


def test_unwritable_output_fails_before_any_work(tmp_path):
    doc = tmp_path / "doc.pdf"
    doc.write_bytes(hi.small_text_pdf())
    verdict = Verdict()
    for target in (Path("/proc/ocrcli-test-out"), tmp_path / "doc.pdf" / "out"):
        run = run_cli(["convert", str(doc), "-o", str(target), "-q"], tmp_path, tmp_path / "tmp")
        judge_process(run, {4}, verdict, str(target))
        assert "not writable" in run.stderr
    assert_clean(verdict)


def test_full_disk_exits_4_without_corrupt_files_then_a_rerun_finishes(tmp_path):
    doc = tmp_path / "doc.pdf"
    doc.write_bytes(hi.small_text_pdf(pages=4, lines=1))
    item = [hi.Hostile(doc, "full-disk", frozenset({hi.CONVERT}))]
    verdict = Verdict()
    out = tmp_path / "out"
    run, _, _ = judged_convert(tmp_path, [str(doc)], {4}, verdict, [], out=out,
                               env={"OCRCLI_FAULT_ENOSPC_AFTER": "3"})
    assert "no space left on the output device" in run.stderr
    for path in out.rglob("*.json"):
        orjson.loads(path.read_bytes())  # complete, or not there at all
    judged_convert(tmp_path, [str(doc)], {0}, verdict, item, out=out)
    assert_clean(verdict)


@pytest.mark.slow
def test_full_disk_on_a_real_tiny_file_system(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs",
                                             str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root with CAP_SYS_ADMIN; the ENOSPC hook test covers this")
    try:
        doc = tmp_path / "blank.pdf"
        doc.write_bytes(hi.pages_pdf([None] * 300))
        verdict = Verdict()
        run = run_cli(["convert", str(doc), "-o", str(mount / "out"), *FAST], tmp_path, tmp_path / "t")
        judge_process(run, {4}, verdict, "tmpfs")
        assert_clean(verdict)
        assert not [p for p in mount.rglob("*") if p.name.endswith(".tmp")]
        for path in mount.rglob("*.json"):
            orjson.loads(path.read_bytes())
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_hostile_model_folders_are_refused_without_running_them(tmp_path):
    doc = tmp_path / "doc.pdf"
    doc.write_bytes(hi.small_text_pdf())
    verdict = Verdict()
    folders = [pickle_only(tmp_path / "pickle", tmp_path / "PWNED_PICKLE"),
               remote_code(tmp_path / "remote", tmp_path / "PWNED_CODE"),
               corrupt_weights(tmp_path / "corrupt")]
    for folder in folders:
        run = run_cli(["convert", str(doc), "-o", str(tmp_path / "o"), "--model", str(folder), "-q"],
                      tmp_path, tmp_path / "tmp")
        judge_process(run, {3}, verdict, folder.name)
    assert_clean(verdict)
    assert not (tmp_path / "PWNED_PICKLE").exists() and not (tmp_path / "PWNED_CODE").exists()


def test_looping_model_pages_are_degenerate_and_the_run_goes_on(tmp_path):
    doc = tmp_path / "doc.pdf"
    doc.write_bytes(hi.small_text_pdf(pages=2, lines=2))
    model = looping_model(tmp_path / "looping")
    verdict = Verdict()
    _, _, out = judged_convert(tmp_path, [str(doc)], {0}, verdict,
                               [hi.Hostile(doc, "looping", frozenset({hi.CONVERT}))],
                               args=(*FAST, "--max-new-tokens", "120",
                                   "--accept", "truncated,degenerate", "--model", str(model)))
    assert_clean(verdict)
    records = page_records(out)
    assert len(records) == 2 and {r["status"] for r in records.values()} == {"degenerate"}
    assert all(r["tokens"] < 120 * r["requests"] for r in records.values())  # stopped early


def test_decoding_past_the_page_timeout_ends_the_page(tmp_path):
    doc = tmp_path / "doc.pdf"
    doc.write_bytes(hi.small_text_pdf(pages=1, lines=1))
    verdict = Verdict()
    run, _, out = judged_convert(
        tmp_path, [str(doc)], {1}, verdict, [hi.Hostile(doc, "slow", frozenset({hi.FAIL}))],
        args=(*FAST, "--max-new-tokens", "60", "--accept", "truncated,degenerate", "--page-timeout", "3"),
        env={"OCRCLI_FAULT_STEP_DELAY": "0.5"}, timeout=120)
    assert_clean(verdict)
    (record,) = page_records(out).values()
    assert record["status"] == "timeout" and "decoding took longer" in record["error"]
    assert run.summary["pages"]["timeout"] == 1 and run.seconds < 60


def _signal_after(doc: Path, out: Path, cwd: Path, pages: int, sig: int, args=FAST) -> tuple[int, str]:
    proc = start_cli(["convert", str(doc), "-o", str(out), *args], cwd, cwd / "tmp",
                     stdout=subprocess.DEVNULL)
    deadline = time.perf_counter() + 180
    while proc.poll() is None and time.perf_counter() < deadline:
        if len(list((out / doc.name).glob("page-*.json"))) >= pages:
            break
        time.sleep(0.05)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    verdict = Verdict()
    judge_processes_gone(proc.pid, verdict, "signal")
    assert_clean(verdict)
    return proc.returncode, err.decode()


@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
                         ids=["SIGTERM", "SIGINT"])
def test_sigterm_and_sigint_exit_130_and_keep_finished_pages(tmp_path, sig):
    doc = tmp_path / "blank.pdf"
    doc.write_bytes(hi.pages_pdf([None] * 3000))
    out = tmp_path / "out"
    code, err = _signal_after(doc, out, tmp_path, 20, sig)
    assert code == 130 and "Traceback" not in err and "interrupted" in err
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["interrupted"] and 20 <= summary["pages"]["converted"] < 3000
    records = page_records(out)
    assert len(records) >= 20 and all(r["status"] == "ok" for r in records.values())
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_kill_9_at_random_moments_then_rerun_is_identical(tmp_path):
    import random

    doc = tmp_path / "hundred.pdf"
    doc.write_bytes(hi.sparse_text_pdf(100, every=10, seed=11))
    args = ("--max-new-tokens", "4", "--accept", "truncated,degenerate", "--dpi", "36", "-q")
    verdict = Verdict()
    item = [hi.Hostile(doc, "kill-9", frozenset({hi.CONVERT}))]
    _, _, ref = judged_convert(tmp_path, [str(doc)], {0}, verdict, item, args=args)
    out = tmp_path / "killed"
    rng = random.Random(3)
    for target in sorted(rng.sample(range(5, 95), 3)):
        code, err = _signal_after(doc, out, tmp_path, target, signal.SIGKILL, args)
        assert code in (-signal.SIGKILL, 0), err
        for path in out.rglob("*.json"):
            orjson.loads(path.read_bytes())
    judged_convert(tmp_path, [str(doc)], {0}, verdict, item, out=out, args=args)
    assert_clean(verdict)
    assert comparable_outputs(out) == comparable_outputs(ref)


@pytest.mark.slow
def test_thousands_of_pages_with_flat_memory(tmp_path):
    item = hi.many_pages_pdf(tmp_path / "in" / "pages-2000.pdf", 2000)
    verdict = Verdict()
    run, _, _ = judged_convert(tmp_path, [str(item.path)], {0}, verdict, [item],
                               memory_limit_mb=1500)
    assert_clean(verdict)
    assert run.summary["pages"]["converted"] == 2000


@pytest.mark.slow
def test_gnarly_pdfs_convert_or_fail_per_page(tmp_path):
    folder = real_data("gnarly-pdfs")
    items = [hi.Hostile(p, "gnarly", hi.EITHER) for p in sorted(folder.glob("*.pdf"))]
    verdict = Verdict()
    judged_convert(tmp_path, [str(folder)], {0, 1}, verdict, items,
                   args=(*FAST, "--batch-size", "64", "--page-timeout", "300"), timeout=900,
                   memory_limit_mb=6000)
    assert_clean(verdict)


def test_summary_file_that_cannot_be_written_is_exit_4(tmp_path):
    run = run_cli(["convert", str(SAMPLES / "memo.jpg"), "-o", str(tmp_path / "o"), *FAST,
                   "--summary", "/proc/ocrcli-summary.json"], tmp_path, tmp_path / "tmp")
    verdict = Verdict()
    judge_process(run, {4}, verdict, "summary")
    assert_clean(verdict)
