"""Ablation of TIGER-style drafter routing and acceptance-aligned training, at one step budget.

    OMP_NUM_THREADS=1 python scripts/bench_routing.py --steps 200 --json     # train + measure
    OMP_NUM_THREADS=1 python scripts/bench_routing.py --skip-train --json    # measure again

Eight heads, each trained for the same number of optimiser steps from the shipped model's
head (the main reader frozen), on the same cached batches in the same order
(`ocrcli/training/routing.py` describes both stages):
- routing k in {0 (unrouted), 8, 16, 32} visual tokens per draft step;
- without the acceptance stage: all steps are the distillation warm start; with it
  ("+accept"): half the steps warm start, half acceptance-aligned group policy training.
The shipped head itself is measured too, as a reference with no extra training.

Measured on held-out synthetic pages (text split 'test', page seeds disjoint from training
and from eval_builtin.py's; never the real-document data): mean tokens per verify step and per-depth
conditional acceptance at a fixed depth of 6, and speedup over greedy at batch 1 and 8 at
fixed depth 6 (and with the default gate: --gated), greedy side by side in the same run,
every output checked identical to greedy; plus the cost of one draft step (ms) at batch 1
and 8.
Trained heads are kept under --out (runs/routing/<variant>/export), so --skip-train
re-measures without training.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import orjson
import torch
from safetensors.torch import load_file

from ocrcli.engine.policy import DraftPolicy, default_policy
from ocrcli.models.builtin import BUILTIN_DIR, load
from ocrcli.training.routing import export_model, prepare_batches, routed_model, train_head

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decode import run  # noqa: E402
from eval_builtin import synthetic  # noqa: E402

ROUTES = (0, 8, 16, 32)
EVAL_SEED = 5  # eval_builtin.py uses 1 and 10-12, ablate_head.py 3; training pages use 11


def selected(spec: str) -> list[tuple[int, bool]]:
    """'all' or e.g. '0,8+' (k, '+' = with the acceptance stage); the unrouted head without
    it is always included: every row is compared with it."""
    if spec == "all":
        return [(k, a) for k in ROUTES for a in (False, True)]
    out = [(0, False)]
    for item in spec.split(","):
        v = (int(item.rstrip("+")), item.endswith("+"))
        if v not in out:
            out.append(v)
    return out


def variant_name(k: int, accept: bool) -> str:
    return ("unrouted" if k == 0 else f"routed k={k}") + (" +accept" if accept else "")


def folder_of(out: Path, name: str) -> Path:
    return out / name.replace(" ", "_").replace("=", "").replace("+", "")


def train_all(args, log) -> None:
    base = load().model
    state = load_file(str(BUILTIN_DIR / "model.safetensors"))
    t0 = time.time()
    batches = prepare_batches(base, args.train_batches, args.batch_size, seed=11,
                              log=lambda m: log({"prepare": m}))
    log({"prepared_batches": len(batches), "seconds": round(time.time() - t0, 1)})
    for k, accept in selected(args.variants):
        name = variant_name(k, accept)
        folder = folder_of(args.out, name)
        info = folder / "train.json"
        if info.exists() and json.loads(info.read_text()).get("steps") == args.steps:
            log({"variant": name, "event": "already trained"})
            continue
        torch.manual_seed(0)
        model = routed_model(state, base.cfg, k)
        kd = args.steps // 2 if accept else args.steps
        timing = train_head(model, batches, kd_steps=kd, grpo_steps=args.steps - kd,
                            log=lambda row, n=name: log({"variant": n, **row}))
        export_model(model, folder / "export", BUILTIN_DIR / "tokenizer.json")
        info.write_text(json.dumps({"variant": name, "route_k": k, "accept": accept,
                                    "steps": args.steps, "kd_steps": kd,
                                    "grpo_steps": args.steps - kd,
                                    "batch_size": args.batch_size, **timing}))
        log({"variant": name, "event": "trained", **timing})


def page_requests(loaded, pages: int, max_new: int):
    images, _ = synthetic(pages, False, (18, 30), seed=EVAL_SEED)
    reqs = []
    for n, img in enumerate(images):
        for j, r in enumerate(loaded.adapter.page_requests(img, max_new)):
            r.key = (n, j)
            reqs.append(r)
    return reqs


def per_depth(hist: dict[int, int], depth: int) -> list[float | None]:
    out = []
    for k in range(1, depth + 1):
        reached = sum(v for a, v in hist.items() if a >= k - 1)
        passed = sum(v for a, v in hist.items() if a >= k)
        out.append(round(passed / reached, 4) if reached else None)
    return out


@torch.no_grad()
def draft_step_ms(model, batch: int, calls: int = 200) -> float:
    """One `draft` call on `batch` slots of a line 100 visual tokens wide."""
    model.setup_cache(batch, 8)
    model.mem_valid[:, :100] = True
    model.mem_k.normal_()
    model.mem_v.normal_()
    slots = torch.arange(batch)
    hidden = torch.randn(batch, model.cfg.dim)
    tokens = torch.full((batch,), 40)
    positions = torch.full((batch,), 5)
    for _ in range(10):
        model.draft(slots, hidden, tokens, positions)
    t0 = time.perf_counter()
    for _ in range(calls):
        model.draft(slots, hidden, tokens, positions)
    return round((time.perf_counter() - t0) / calls * 1000, 4)


def measure(args, log) -> dict:
    shipped = load(model_id="shipped")
    heads = [("shipped head (no extra training)", shipped)]
    for k, accept in selected(args.variants):
        name = variant_name(k, accept)
        export = folder_of(args.out, name) / "export"
        if not export.exists():
            raise SystemExit(f"{export} is missing: run without --skip-train first")
        heads.append((name, load(export, model_id=name)))
    reqs = page_requests(shipped, args.pages, args.max_new_tokens)
    depth = shipped.model.max_draft_depth
    log({"requests": len(reqs), "pages": args.pages})
    rows = {name: {"head": name} for name, _ in heads}
    mode_names = ("K6", "gated") if args.gated else ("K6",)
    identical = True
    greedy_tokens = 0
    for batch in (1, 8):
        run(shipped, reqs[: min(len(reqs), 2 * batch)], batch, DraftPolicy(0), args.max_new_tokens)
        best: dict[str, float] = {}
        reference = None
        modes = [("K6", DraftPolicy(depth))]
        if args.gated:
            modes.append(("gated", default_policy(depth, batch)))
        # Repeats go round greedy and every head, so a slow spell of a shared CPU
        # touches all of them alike; the best time of each counts.
        for _ in range(args.repeats):
            outputs, seconds, tokens, _, _ = run(shipped, reqs, batch, DraftPolicy(0), args.max_new_tokens)
            reference = reference or outputs
            greedy_tokens = tokens
            best["greedy"] = min(best.get("greedy", 1e9), seconds)
            for name, loaded in heads:
                for mode, policy in modes:
                    outputs, seconds, tokens, steps, hist = run(loaded, reqs, batch, policy,
                                                                args.max_new_tokens)
                    same = outputs == reference
                    identical &= same
                    key = f"{name}|{mode}"
                    best[key] = min(best.get(key, 1e9), seconds)
                    row = rows[name]
                    row.setdefault("identical", True)
                    row["identical"] &= same
                    if batch == 1:
                        row[f"mean_accepted_{mode}"] = round(tokens / steps, 3)
                        if mode == "K6":
                            row["per_depth_acceptance"] = per_depth(hist, depth)
            log({"batch": batch, "times": {k: round(v, 2) for k, v in best.items()}})
        for name, _ in heads:
            for mode in mode_names:
                rows[name][f"speedup_{mode}_b{batch}"] = round(best["greedy"] / best[f"{name}|{mode}"], 3)
        rows_greedy = {"batch": batch, "greedy_tokens_per_s": round(greedy_tokens / best["greedy"], 1)}
        log(rows_greedy)
        for name, loaded in heads:
            rows[name][f"draft_ms_b{batch}"] = draft_step_ms(loaded.model, batch)
    for name, _ in heads:
        info = folder_of(args.out, name) / "train.json"
        if info.exists():
            rows[name]["train"] = json.loads(info.read_text())
    unrouted = rows[variant_name(0, False)]["mean_accepted_K6"]
    for row in rows.values():
        row["vs_unrouted"] = round(row["mean_accepted_K6"] / unrouted - 1, 4)
    return {"steps_per_variant": args.steps, "batch_size": args.batch_size,
            "train_batches": args.train_batches, "eval_pages": args.pages,
            "eval_requests": len(reqs), "threads": torch.get_num_threads(),
            "identical": identical, "rows": list(rows.values())}


def markdown(result: dict) -> str:
    lines = [f"Budget: {result['steps_per_variant']} optimiser steps per head (batches of "
             f"{result['batch_size']} lines), {result['eval_pages']} held-out pages "
             f"({result['eval_requests']} lines); outputs identical to greedy: {result['identical']}.",
             "",
             "| head | tokens/verify (K=6) | vs unrouted | per-depth acceptance | speedup K=6 b1 / b8 "
             "| draft step ms b1 / b8 |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        pd = ", ".join(f"{p:.2f}" if p is not None else "-" for p in r["per_depth_acceptance"])
        lines.append(
            f"| {r['head']} | {r['mean_accepted_K6']:.2f} | {r['vs_unrouted']:+.1%} | {pd} | "
            f"{r['speedup_K6_b1']:.2f}× / {r['speedup_K6_b8']:.2f}× | "
            f"{r['draft_ms_b1']:.2f} / {r['draft_ms_b8']:.2f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/routing"))
    ap.add_argument("--steps", type=int, default=200, help="optimiser steps per variant")
    ap.add_argument("--train-batches", type=int, default=50, help="cached training batches (cycled)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--pages", type=int, default=3, help="held-out synthetic pages")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=2, help="best of N timings")
    ap.add_argument("--gated", action="store_true", help="also time the default gated drafting")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", default="all",
                    help="'all', or a subset such as '8+,16' (k; '+' = with the acceptance stage)")
    ap.add_argument("--skip-train", action="store_true", help="measure the heads already in --out")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "log.jsonl"

    def log(row: dict) -> None:
        row = {"time": time.strftime("%H:%M:%S"), **row}
        with log_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), file=sys.stderr, flush=True)

    if not args.skip_train:
        train_all(args, log)
    result = measure(args, log)
    (args.out / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    table = markdown(result)
    (args.out / "table.md").write_text(table + "\n")
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    print(table)
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
