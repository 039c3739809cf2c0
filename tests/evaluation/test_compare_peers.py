"""`scripts/compare_peers.py` scores each engine's pages from the same bytes `ocrcli eval`
writes, so that the scorer's end-of-text checks judge both commands alike."""

from __future__ import annotations

import importlib.util
import json
import sys

from ocrcli.output import markdown_bytes
from tests.conftest import REPO


def _compare_peers():
    spec = importlib.util.spec_from_file_location("compare_peers", REPO / "scripts" / "compare_peers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_pages_are_written_as_the_converter_writes_them(tmp_path):
    (tmp_path / "pdfs").mkdir()
    pdf = tmp_path / "pdfs" / "a.pdf"
    pdf.write_bytes(b"%PDF-1.4")
    rule = {"pdf": "a.pdf", "page": 1, "id": "t1", "type": "present", "text": "Hello"}
    (tmp_path / "text.jsonl").write_text(json.dumps(rule) + "\n")
    cp = _compare_peers()
    # A line that ends in a run of dots: without the converter's final newline the
    # baseline rule reads it as a repeated 1-gram at the end of the text.
    text = "Hello world\n\n# heading" + "." * 32
    scores = cp.score_engine_on_bench(tmp_path, "engine", cp.EngineRun(texts={(str(pdf), 1): text}))
    written = (tmp_path / "engine" / "a_pg1_repeat1.md").read_bytes()
    assert written == markdown_bytes(text)
    assert scores["categories"]["baseline"]["passed"] == 1
