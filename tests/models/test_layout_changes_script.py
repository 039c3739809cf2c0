"""`scripts/layout_changes.py` lays pages out as the converter does and names the pages whose
layout differs between two dumps."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "layout_changes.py"


def _run(*args: str) -> str:
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                       cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_dump_compares_equal_to_itself_and_a_lost_box_is_named(tmp_path):
    before = tmp_path / "before.json"
    _run("dump", "samples/memo.jpg", "-o", str(before))
    layouts = json.loads(before.read_text())
    [(key, page)] = layouts.items()
    assert key == "memo.jpg#1" and page[0] == 0 and len(page) >= 3  # upright, with its lines
    assert _run("compare", str(before), str(before)).splitlines()[-1] == "0 of 1 pages change"
    lost = page.pop(3)
    after = tmp_path / "after.json"
    after.write_text(json.dumps(layouts))
    report = _run("compare", str(before), str(after)).splitlines()
    assert report[0] == f"memo.jpg#1: {len(page)} -> {len(page) - 1} boxes"
    assert report[1] == f"  - {lost}" and report[-1] == "1 of 1 pages change"
