"""Which pages a change to the page layout moves, before anything is decoded.

    python scripts/layout_changes.py dump samples DIR... -o before.json
    (change ocrcli/models/builtin/page_layout.py)
    python scripts/layout_changes.py dump samples DIR... -o after.json
    python scripts/layout_changes.py compare before.json after.json

`dump` renders every page of the PDFs and images under the folders as the converter renders
them for the built-in model (`identity.default_render_dpi`, 288 dpi) and lays each out as the
model does (`models.builtin.lay_out`: on a copy reduced to 144 dpi), then writes per page the
quarter turns and every line box (kind, block, cell, box on the rendered page) to a JSON
file. `compare` prints the pages whose layout differs, with the boxes only one side has, and
the count: "N of M pages change". Layout alone is quick (about 0.3 s a page on a 2-core x86
CPU), so a layout rule can be checked on many pages before the slower `ocrcli eval`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from ocrcli.inputs import PageRef, collect
from ocrcli.models.builtin import lay_out
from ocrcli.models.identity import default_render_dpi
from ocrcli.render import RenderSettings, render_page


def page_layouts(folders: list[str]) -> dict[str, list]:
    """Per page ("file#page"): its quarter turns, then one row per line box."""
    docs, _ = collect(folders)
    render = RenderSettings(dpi=default_render_dpi("builtin"))
    out: dict[str, list] = {}
    for i, doc in enumerate(docs):
        for page in doc.pages:
            rendered = render_page(PageRef(i, doc.path, doc.kind, page), render)
            if rendered.error:
                print(f"{doc.rel}#{page}: {rendered.error}", file=sys.stderr)
                continue
            layout, _, boxes = lay_out(rendered.image)
            out[f"{doc.rel}#{page}"] = [layout.turns] + [
                [b.kind, b.block, list(b.cell) if b.cell else None, b.x0, b.y0, b.x1, b.y1]
                for b in boxes]
    return out


def changes(before: dict[str, list], after: dict[str, list]) -> dict[str, list[str]]:
    """Per page whose layout differs, what differs: its turns, the boxes only one side has."""
    out = {}
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if old is None or new is None:
            out[key] = [f"laid out only {'after' if old is None else 'before'}"]
            continue
        lines = [f"{len(old) - 1} -> {len(new) - 1} boxes"]
        if old[0] != new[0]:
            lines.append(f"quarter turns {old[0]} -> {new[0]}")
        lines += [f"- {b}" for b in old[1:] if b not in new[1:]]
        lines += [f"+ {b}" for b in new[1:] if b not in old[1:]]
        out[key] = lines
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    dump = sub.add_parser("dump", help="lay out every page under the folders")
    dump.add_argument("folders", nargs="+")
    dump.add_argument("-o", "--output", type=Path, required=True)
    compare = sub.add_parser("compare", help="the pages whose layout differs")
    compare.add_argument("before", type=Path)
    compare.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.command == "dump":
        layouts = page_layouts(args.folders)
        args.output.write_bytes(orjson.dumps(layouts))
        print(f"{len(layouts)} pages laid out: {args.output}")
        return 0
    before, after = (orjson.loads(p.read_bytes()) for p in (args.before, args.after))
    changed = changes(before, after)
    for key, lines in changed.items():
        print(f"{key}: {lines[0]}")
        for line in lines[1:]:
            print(f"  {line}")
    print(f"{len(changed)} of {len(before.keys() | after.keys())} pages change")
    return 0


if __name__ == "__main__":
    sys.exit(main())
