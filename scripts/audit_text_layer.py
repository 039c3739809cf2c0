"""Audit a finished run against its PDFs' text layers: no `ok` page may have read next to
nothing where its PDF holds text.

    ocrcli convert docs/ -o out --log plain
    python scripts/audit_text_layer.py out            # a table; exit 1 on a violation
    python scripts/audit_text_layer.py out --json

For every page JSON under OUT whose source is a PDF, compares the output's visible characters
with the visible characters of that page's text layer (pypdfium2), and lists `ok` pages with
under --min-chars characters of output where the text layer has over --layer-chars; it also
counts statuses and checks that every page that is not ok has a reason.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import orjson
import pypdfium2 as pdfium

from ocrcli.render import visible_text_chars


def text_layer_chars(pdf: Path, page: int, cache: dict) -> int | None:
    """Visible characters of a page's text layer; None when the PDF cannot be opened."""
    if pdf not in cache:
        try:
            cache[pdf] = pdfium.PdfDocument(str(pdf))
        except pdfium.PdfiumError:
            cache[pdf] = None
    doc = cache[pdf]
    if doc is None or page > len(doc):
        return None
    return visible_text_chars(doc[page - 1])  # what the renderer records for the verdict


def audit(out: Path, min_chars: int, layer_chars: int) -> dict:
    statuses: Counter = Counter()
    violations, unexplained, cache = [], [], {}
    for path in sorted(out.rglob("page-*.json")):
        record = orjson.loads(path.read_bytes())
        statuses[record["status"]] += 1
        if record["status"] != "ok" and not record.get("error"):
            unexplained.append(str(path.relative_to(out)))
        source = Path(record["source"])
        if record["status"] != "ok" or source.suffix.lower() != ".pdf":
            continue
        chars = sum(not c.isspace() for c in record.get("text", ""))
        layer = text_layer_chars(source, record["page"], cache)
        if layer is not None and layer > layer_chars and chars < min_chars:
            violations.append({"source": str(source), "page": record["page"], "output_chars": chars,
                               "text_layer_chars": layer})
    summary = orjson.loads((out / "summary.json").read_bytes()) if (out / "summary.json").exists() else {}
    return {"pages": sum(statuses.values()), "statuses": dict(statuses),
            "exit_code": summary.get("exit_code"), "ok_pages_that_read_nothing": violations,
            "not_ok_pages_without_reason": unexplained}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--min-chars", type=int, default=20)
    ap.add_argument("--layer-chars", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = audit(args.out, args.min_chars, args.layer_chars)
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        print(f"pages {result['pages']}  statuses {result['statuses']}  exit code {result['exit_code']}")
        for v in result["ok_pages_that_read_nothing"]:
            print(f"ok but read nothing: {v}")
        for p in result["not_ok_pages_without_reason"]:
            print(f"not ok, no reason: {p}")
    return 1 if result["ok_pages_that_read_nothing"] or result["not_ok_pages_without_reason"] else 0


if __name__ == "__main__":
    sys.exit(main())
