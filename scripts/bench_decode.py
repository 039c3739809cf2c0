"""Decoding speed: greedy vs speculative, side by side in one run, on real inputs.

    python scripts/bench_decode.py                          # built-in model on samples/
    python scripts/bench_decode.py --json
    python scripts/bench_decode.py --oracle-acceptance 1.0 --json   # engine overhead alone
    python scripts/bench_decode.py --model CHECKPOINT --device cuda --count-ops --json

Pages are rendered and split into requests once; then the same requests are decoded with
greedy (`--draft-depth 0`), fixed K = 1..6 and confidence-gated drafting, at batch 1 and at
batch 8. Every output is checked against greedy's. `--oracle-acceptance P` replaces the head
with a drafter that proposes the model's own greedy token with probability P. Engines are
built by the converter's own factory (`model_setup.make_engine`).

`--drafters none,head,text-layer,auto` compares where drafts come from instead of depths: the
model's head (the converter's gated policy), the pages' PDF text layer, both (auto), or none
(greedy, the baseline of every speedup), on the same requests, warm, repeats interleaved.
Give it born-digital PDFs (`pages` reports each page's text-layer characters); on scans
(no text layer) auto should match head.

    python scripts/bench_decode.py DOC.pdf ... --drafters none,head,text-layer,auto --json

`--count-ops` adds a `dispatch` list: aten operators and host syncs per engine step
(`ocrcli.engine.opcount`), for greedy and K=3 at batches 1 and 16, on the same requests.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import orjson
import torch

from ocrcli.engine.draft import OracleProposer
from ocrcli.engine.opcount import OpCounter
from ocrcli.engine.policy import Drafter, DraftPolicy, default_policy
from ocrcli.engine.scheduler import Engine, list_source
from ocrcli.inputs import PageRef, collect
from ocrcli.model_setup import make_engine
from ocrcli.models.base import DecodeRequest
from ocrcli.models.identity import default_render_dpi
from ocrcli.models.registry import load_model, resolve_device
from ocrcli.render import RenderSettings, render_page
from ocrcli.settings import ConvertSettings, decode_threads


def page_requests(loaded, inputs: list[str], max_pages: int, max_new: int,
                  pages: list[dict] | None = None) -> list[DecodeRequest]:
    """The requests of the inputs' first `max_pages` pages; `pages` gets one entry per page:
    its source, page number and the characters of its text layer (None: not a PDF)."""
    docs, _ = collect(inputs)
    render = RenderSettings(dpi=default_render_dpi(loaded.model_id))  # as the converter renders
    reqs: list[DecodeRequest] = []
    n = 0
    for i, doc in enumerate(docs):
        for p in doc.pages:
            if n >= max_pages or doc.error:
                break
            img = render_page(PageRef(i, doc.path, doc.kind, p), render)
            if img.image is None:
                continue
            for j, r in enumerate(loaded.adapter.page_requests(img.image, max_new)):
                r.key = (n, j)
                reqs.append(r)
            if pages is not None:
                pages.append({"source": str(doc.path), "page": p,
                              "text_layer_chars": img.text_layer_chars})
            n += 1
    return reqs


def run(loaded, reqs, batch: int, policy: DraftPolicy, max_new: int, proposer=None, counter=None,
        exact: bool | None = None):
    settings = ConvertSettings(inputs=[], out=None, model=loaded.model_id, batch_size=batch)
    # Depths are the head's (or the oracle's): greedy stays greedy on pages with a text layer.
    engine = make_engine(loaded, settings, max_new, policy, proposer, exact, drafter=Drafter.HEAD)
    engine.step_counter = counter
    t0 = time.perf_counter()
    results = list(engine.run(list_source(reqs)))
    seconds = time.perf_counter() - t0
    tokens = sum(r.stats.tokens for r in results)
    steps = sum(r.stats.verify_steps for r in results)
    outputs = {r.key: (r.tokens, r.status) for r in results}
    depth_hits = {}
    for r in results:
        for acc, count in r.stats.accepted_hist.items():
            depth_hits[acc] = depth_hits.get(acc, 0) + count
    return outputs, seconds, tokens, steps, depth_hits


def count_dispatch(loaded, reqs, max_new: int, reference) -> list[dict]:
    """Operators and host syncs per engine step, greedy and K=3 (the head, or the oracle at
    acceptance 1 for a model without one), at batches 1 and 16, each checked against greedy
    with the same kernels. On the CPU both kernel choices are counted: exact (the CPU's,
    batch-invariant) and fast (the kernels and step shapes a GPU engine runs)."""
    rows = []
    kernels = ("exact", "fast") if loaded.model.spec.device.type == "cpu" else ("fast",)
    for batch, kind in ((b, k) for b in (1, 16) for k in kernels):
        part = reqs[: max(batch, 4)]
        greedy = None
        for mode, policy in (("greedy", DraftPolicy(0)), ("K=3", DraftPolicy(3))):
            proposer = None
            if policy.max_depth and not loaded.model.spec.max_draft_depth:
                proposer = OracleProposer(reference, 1.0, loaded.model.spec.vocab_size)
            counter = OpCounter()
            outputs = run(loaded, part, batch, policy, max_new, proposer, counter, kind == "exact")[0]
            greedy = outputs if greedy is None else greedy
            steps = max(counter.entries, 1)
            rows.append({"batch": batch, "kernels": kind, "mode": mode, "steps": counter.entries,
                         "aten_ops_per_step": round(counter.ops / steps, 1),
                         "host_syncs_per_step": round(counter.syncs / steps, 2),
                         "identical": outputs == greedy})
    return rows


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", default=["samples"])
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, auto")
    ap.add_argument("--count-ops", action="store_true",
                    help="also count aten ops and host syncs per engine step (greedy, K=3; batches 1, 16)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--oracle-acceptance", type=float, default=None)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--depths", default="1,2,3,4,5,6")
    ap.add_argument("--gates", default="", help="extra gated settings 'p:q,...' to compare")
    ap.add_argument("--max-pages", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=2, help="best of N timings per row")
    ap.add_argument("--drafters", default="",
                    help="compare drafters instead of depths: 'none,head,text-layer,auto'")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads (0: what `ocrcli convert` would use beside one render "
                         "worker, settings.decode_threads)")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    torch.set_num_threads(args.threads or decode_threads(render_workers=1))
    loaded = load_model(args.model, resolve_device(args.device))
    pages: list[dict] = []
    reqs = page_requests(loaded, args.inputs, args.max_pages, args.max_new_tokens, pages)
    if not reqs:
        print("no requests: no readable pages in the inputs", file=sys.stderr)
        return 2
    if args.drafters:
        drafters = [Drafter(d) for d in args.drafters.split(",")]
        batches = [int(b) for b in args.batches.split(",")]
        result = compare_drafters(loaded, reqs, drafters, batches, args.max_new_tokens, args.repeats)
        result |= {"threads": torch.get_num_threads(), "pages": pages}
        print_drafters(result, args.json)
        return 0 if result["identical"] else 1
    head_depth = loaded.model.max_draft_depth
    depths = [int(d) for d in args.depths.split(",")]
    modes: list[tuple[str, DraftPolicy]] = [("greedy", DraftPolicy(0))]
    if args.oracle_acceptance is not None:
        modes += [(f"K={k}", DraftPolicy(k)) for k in depths]
    else:
        modes += [(f"K={k}", DraftPolicy(k)) for k in depths if k <= head_depth]
        modes.append(("gated", None))  # the converter's default for the batch size
        for g in filter(None, args.gates.split(",")):
            p, q = (float(x) for x in g.split(":"))
            modes.append((f"gated({p},{q})", DraftPolicy(head_depth, p, q)))
    rows, identical = [], True
    reference = None
    for batch in [int(b) for b in args.batches.split(",")]:
        run(loaded, reqs[: min(len(reqs), 2 * batch)], batch, DraftPolicy(0), args.max_new_tokens)
        # Repeats go round the modes (greedy first), so a slow spell of a shared machine
        # touches every mode alike instead of one mode's every repeat.
        best: dict[str, tuple] = {}
        for _ in range(args.repeats):
            for name, policy in modes:
                policy = policy or default_policy(head_depth, batch)
                proposer = None
                if args.oracle_acceptance is not None and policy.max_depth > 0:
                    proposer = OracleProposer(reference, args.oracle_acceptance,
                                              loaded.model.vocab_size)
                got = run(loaded, reqs, batch, policy, args.max_new_tokens, proposer)
                if name not in best or got[1] < best[name][1]:
                    best[name] = got
                if name == "greedy" and reference is None:
                    reference = {k: t + [loaded.model.eos_id] for k, (t, _) in got[0].items()}
                    greedy_outputs = got[0]
        greedy_s = best["greedy"][1]
        for name, _ in modes:
            outputs, seconds, tokens, steps, hist = best[name]
            same = outputs == greedy_outputs
            identical &= same
            rows.append({"batch": batch, "mode": name, "tokens_per_s": round(tokens / seconds, 1),
                         "mean_accepted": round(tokens / steps, 3), "speedup": round(greedy_s / seconds, 3),
                         "identical": same, "seconds": round(seconds, 3),
                         "accepted_histogram": {str(k): v for k, v in sorted(hist.items())}})
    best_by_batch = {
        b: max((r["speedup"] for r in rows if r["batch"] == b and r["mode"] != "greedy"), default=1.0)
        for b in {r["batch"] for r in rows}}
    dispatch = count_dispatch(loaded, reqs, args.max_new_tokens, reference) if args.count_ops else None
    identical &= dispatch is None or all(d["identical"] for d in dispatch)
    result = {"model": loaded.model_id, "device": str(loaded.model.spec.device), "requests": len(reqs),
              "oracle_acceptance": args.oracle_acceptance, "threads": torch.get_num_threads(),
              "identical": identical, "rows": rows,
              "best_speedup_batch1": best_by_batch.get(1), "best_speedup_batch8": best_by_batch.get(8)}
    if dispatch is not None:
        result["dispatch"] = dispatch
    print_result(result, args.json)
    return 0 if identical else 1


def drafter_engine(loaded, batch: int, max_new: int, drafter: Drafter) -> Engine:
    """An engine drafting with `drafter`, built by the converter's own factory (the gated
    head policy for the batch, CUDA graphs on a GPU)."""
    settings = ConvertSettings(inputs=[], out=None, model=loaded.model_id, batch_size=batch)
    return make_engine(loaded, settings, max_new, drafter=drafter)


def run_drafter(loaded, reqs, batch: int, max_new: int, drafter: Drafter) -> dict:
    engine = drafter_engine(loaded, batch, max_new, drafter)
    t0 = time.perf_counter()
    results = list(engine.run(list_source(reqs)))
    seconds = time.perf_counter() - t0
    accepted, drafted = Counter(), Counter()
    for r in results:
        accepted.update(r.stats.accepted_by)
        drafted.update(r.stats.drafted_by)
    return {"outputs": {r.key: (r.tokens, r.status) for r in results}, "seconds": seconds,
            "tokens": sum(r.stats.tokens for r in results),
            "steps": sum(r.stats.verify_steps for r in results),
            "accepted_by": dict(accepted), "drafted_by": dict(drafted)}


def compare_drafters(loaded, reqs, drafters: list[Drafter], batches: list[int], max_new: int,
                     repeats: int) -> dict:
    """Each drafter on the same requests, side by side: per batch one warm-up, then `repeats`
    rounds that go round the drafters (so a slow spell touches each alike), best time kept.
    Speedups are against drafter none (greedy), which is run whether asked for or not."""
    drafters = [Drafter.NONE] + [d for d in drafters if d != Drafter.NONE]
    rows, identical = [], True
    for batch in batches:
        run_drafter(loaded, reqs[: 2 * batch], batch, max_new, Drafter.AUTO)  # warm-up
        best: dict[Drafter, dict] = {}
        for _ in range(repeats):
            for d in drafters:
                got = run_drafter(loaded, reqs, batch, max_new, d)
                if d not in best or got["seconds"] < best[d]["seconds"]:
                    best[d] = got
        greedy = best[Drafter.NONE]
        for d in drafters:
            b = best[d]
            same = b["outputs"] == greedy["outputs"]
            identical &= same
            rows.append({"batch": batch, "drafter": d.value,
                         "tokens_per_s": round(b["tokens"] / b["seconds"], 1),
                         "mean_accepted": round(b["tokens"] / b["steps"], 3),
                         "speedup": round(greedy["seconds"] / b["seconds"], 3), "identical": same,
                         "seconds": round(b["seconds"], 3), "accepted_by": b["accepted_by"],
                         "drafted_by": b["drafted_by"]})
    speed = {(r["batch"], r["drafter"]): r["speedup"] for r in rows}
    auto_vs_head = {f"batch{b}": round(speed[(b, "auto")] / speed[(b, "head")], 3) for b in batches
                    if (b, "auto") in speed and (b, "head") in speed}
    return {"model": loaded.model_id, "device": str(loaded.model.spec.device), "requests": len(reqs),
            "requests_with_text": sum(bool(r.draft_text) for r in reqs), "identical": identical,
            "rows": rows, "auto_vs_head": auto_vs_head}


def print_drafters(result: dict, as_json: bool) -> None:
    if as_json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        return
    for p in result["pages"]:
        print(f"{p['source']} page {p['page']}: text layer {p['text_layer_chars']}")
    print(f"{'batch':>5} {'drafter':<11} {'tok/s':>9} {'tok/verify':>10} {'speedup':>8} identical")
    for r in result["rows"]:
        print(f"{r['batch']:>5} {r['drafter']:<11} {r['tokens_per_s']:>9.1f} "
              f"{r['mean_accepted']:>10.2f} {r['speedup']:>7.2f}x {r['identical']}")
    print(f"identical to greedy: {result['identical']}; auto vs head: {result['auto_vs_head']}")


def print_result(result: dict, as_json: bool) -> None:
    if as_json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        return
    print(f"{'batch':>5} {'mode':<16} {'tok/s':>9} {'tok/verify':>10} {'speedup':>8} identical")
    for r in result["rows"]:
        print(f"{r['batch']:>5} {r['mode']:<16} {r['tokens_per_s']:>9.1f} "
              f"{r['mean_accepted']:>10.2f} {r['speedup']:>7.2f}x {r['identical']}")
    for d in result.get("dispatch", []):
        print(f"{d['batch']:>5} {d['kernels']:<6} {d['mode']:<8} aten ops/step {d['aten_ops_per_step']:>8} "
              f"host syncs/step {d['host_syncs_per_step']} identical {d['identical']}")
    print(f"identical to greedy: {result['identical']}; best speedup batch 1: "
          f"{result['best_speedup_batch1']}, batch 8: {result['best_speedup_batch8']}")


if __name__ == "__main__":
    sys.exit(main())
