"""`scripts/bench_decode.py` measures what its rows say: its greedy row is plain greedy
decoding and its K rows draft from the head only, also on pages that have a text layer (the
converter's default drafter would otherwise draft from the layer in every row)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO, SAMPLES


def test_depth_rows_draft_from_the_head_alone_on_a_born_digital_page():
    done = subprocess.run(
        [sys.executable, "scripts/bench_decode.py", str(SAMPLES / "report.pdf"), "--max-pages", "1",
         "--batches", "1", "--depths", "1", "--repeats", "1", "--threads", "1", "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = {r["mode"]: r for r in json.loads(done.stdout)["rows"]}
    assert set(rows["greedy"]["accepted_histogram"]) == {"0"}  # nothing drafted, nothing accepted
    assert set(rows["K=1"]["accepted_histogram"]) <= {"0", "1"}  # the head's one token, no more
    assert rows["K=1"]["accepted_histogram"].get("1", 0) > 0
    assert all(r["identical"] for r in rows.values())
