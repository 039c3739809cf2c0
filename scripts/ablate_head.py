"""Ablation of the MTP head's training recipe at the same budget, on one frozen main model.

    python scripts/ablate_head.py --main runs/builtin/main.pt --warm-steps 400 --steps 300 --json

A head from random weights drafts no better than a unigram model until its cross-attention
finds the line's alignment, after about 400 steps (the shipped head's log); before that the
curriculum's weights sit on their floors, FastMTP's. So every variant starts from one shared
warm-up head (`--warm-steps` of plain FastMTP training from the main checkpoint) and then gets
the same `--steps` optimiser steps: the progressive curriculum (path-reliability weights and
target-consistency down-weighting) vs FastMTP's fixed step weights (beta = 0.6, every position
alike), each with and without self-distillation (the self-distilled variants spend half their
steps on the main model's own greedy outputs). Each is scored on held-out synthetic pages by
mean tokens per verify step at a fixed depth of 6 and with gated drafting, and per-depth
acceptance; the warm-up head is scored too, as the common starting point.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import orjson
import torch

from ocrcli.models.builtin import load
from ocrcli.training.train import StageConfig, Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_builtin import acceptance, decode, synthetic  # noqa: E402


def warm_up(out: Path, main_ckpt: Path, steps: int) -> Path:
    """The shared starting head: plain FastMTP training from the main checkpoint."""
    trainer = Trainer(out, validation=False)
    trainer.run_stage(StageConfig("head", 0, lr=1e-3, warmup_steps=50, curriculum=False,
                                  steps=steps), init=main_ckpt)
    trainer.export(out / "export")
    return out / "head.pt"


def train_variant(out: Path, start: Path, steps: int, curriculum: bool, self_distil: bool) -> Path:
    trainer = Trainer(out, validation=False)
    head_steps = steps // 2 if self_distil else steps
    trainer.run_stage(StageConfig("head", 0, lr=5e-4, warmup_steps=25, curriculum=curriculum,
                                  steps=head_steps), init=start)
    last = out / "head.pt"
    if self_distil:
        trainer.run_stage(StageConfig("head_sd", 0, lr=5e-4, warmup_steps=25,
                                      curriculum=curriculum, steps=steps - head_steps), init=last)
    trainer.export(out / "export")
    return out / "export"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--main", type=Path, default=Path("runs/builtin/main.pt"))
    ap.add_argument("--warm-steps", type=int, default=400)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--pages", type=int, default=12)
    ap.add_argument("--out", type=Path, default=Path("runs/ablation"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(2)
    images, _ = synthetic(args.pages, False, (18, 30), seed=3)
    rows = []

    def score(export: Path, name: str, steps: int) -> None:
        loaded = load(export, model_id=name)
        depth = loaded.model.max_draft_depth
        fixed = acceptance(decode(loaded, images, depth), depth)
        gated = acceptance(decode(loaded, images, None), depth)
        rows.append({"head": name, "steps": steps,
                     "mean_accepted_fixed6": fixed["mean_accepted"],
                     "mean_accepted_gated": gated["mean_accepted"],
                     "per_depth_acceptance": fixed["per_depth_acceptance"]})
        print(orjson.dumps(rows[-1]).decode(), file=sys.stderr)

    warm_dir = args.out / "warm-up"
    if warm_dir.exists():
        shutil.rmtree(warm_dir)
    start = warm_up(warm_dir, args.main, args.warm_steps)
    score(warm_dir / "export", "warm-up (shared start)", 0)
    for curriculum in (True, False):
        for self_distil in (False, True):
            name = f"{'curriculum' if curriculum else 'fixed-0.6'}{' + self-distil' if self_distil else ''}"
            folder = args.out / name.replace(" ", "").replace("+", "_")
            if folder.exists():
                shutil.rmtree(folder)
            score(train_variant(folder, start, args.steps, curriculum, self_distil), name,
                  args.steps)
    if args.json:
        print(orjson.dumps({"warm_steps": args.warm_steps, "pages": args.pages, "rows": rows},
                           option=orjson.OPT_INDENT_2).decode())
    else:
        for r in rows:
            print(f"{r['head']:28} fixed K=6 {r['mean_accepted_fixed6']:.2f}  "
                  f"gated {r['mean_accepted_gated']:.2f}  per depth {r['per_depth_acceptance']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
