"""Train the built-in model on synthetic pages, on the CPU, and export it into the package.

    python scripts/train_builtin.py --out runs/builtin            # main, head, self-distil
    python scripts/train_builtin.py --out runs/builtin --export ocrcli/models/builtin

Stages resume from their checkpoints in --out. Run it in the background; the log is
--out/log.jsonl (CER on held-out lines, per-depth draft accuracy and stage weights).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ocrcli.training.text import missing_word_list
from ocrcli.training.train import StageConfig, Trainer, default_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/builtin"))
    ap.add_argument("--main-minutes", type=float, default=55)
    ap.add_argument("--head-minutes", type=float, default=8)
    ap.add_argument("--sd-minutes", type=float, default=8)
    ap.add_argument("--fixed-weights", action="store_true",
                    help="FastMTP's fixed beta=0.6 step weights instead of the curriculum")
    ap.add_argument("--init", type=Path,
                    help="start the head stages from this main checkpoint (.pt) or exported model "
                         "folder (e.g. ocrcli/models/builtin: retrain only the shipped model's head)")
    ap.add_argument("--mtp-mlp-hidden", type=int, default=None,
                    help="the head block's SwiGLU width (default: the reader's; 0: no MLP)")
    ap.add_argument("--warm-start", type=Path,
                    help="start the reader from this exported model folder instead of from scratch, "
                         "at --main-lr")
    ap.add_argument("--main-lr", type=float, default=1.5e-3, help="the reader's peak learning rate")
    ap.add_argument("--sizes", default="16,32", help="body text sizes of the training pages, MIN,MAX pixels")
    ap.add_argument("--scan", type=float, default=0.0,
                    help="share of training pages with heavier scanner damage (0 to 1)")
    ap.add_argument("--rows", type=float, default=0.0,
                    help="chance of a symbol row (`*****`, `=====`, dot leaders) before each block "
                         "of a training page (0 to 1)")
    ap.add_argument("--light", type=float, default=0.0,
                    help="share of training pages whose sans face is a light weight (0 to 1)")
    ap.add_argument("--geometric", type=float, default=0.0,
                    help="share of training pages set in geometric (Futura-like) sans faces "
                         "(0 to 1)")
    ap.add_argument("--spaces", type=float, default=0.0,
                    help="share of training pages whose paragraphs are justified or set with "
                         "tight word spaces (0 to 1)")
    ap.add_argument("--fine", type=float, default=0.0,
                    help="share of training pages typeset at twice their size and read as the "
                         "converter reads a 288 dpi render (0 to 1)")
    ap.add_argument("--hand", type=float, default=0.0,
                    help="share of training pages set in handwriting faces, in pen ink and on "
                         "plain or ruled paper (0 to 1)")
    ap.add_argument("--export", type=Path, help="write the final model into this folder")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=float, default=5.0, help="minutes of training between evaluations")
    args = ap.parse_args()
    warning = missing_word_list()
    if warning:
        print(warning, file=sys.stderr)
    torch.set_num_threads(args.threads)
    trainer = Trainer(args.out, default_config(mtp_mlp_hidden=args.mtp_mlp_hidden))
    curriculum = not args.fixed_weights
    lo, hi = (int(v) for v in args.sizes.split(","))
    data = {"sizes": (lo, hi), "scan": args.scan, "rows": args.rows,
            "light": args.light, "geometric": args.geometric, "spaces": args.spaces, "fine": args.fine,
            "hand": args.hand}
    if args.init is None:
        trainer.run_stage(StageConfig("main", args.main_minutes, lr=args.main_lr,
                                      warmup_steps=100 if args.warm_start else 300,
                                      eval_every_min=args.eval_every, **data), init=args.warm_start)
    main_ckpt = args.init or args.out / "main.pt"
    if args.head_minutes > 0:
        trainer.run_stage(StageConfig("head", args.head_minutes, lr=1e-3, warmup_steps=100,
                                      curriculum=curriculum, **data), init=main_ckpt)
    if args.sd_minutes > 0:
        trainer.run_stage(StageConfig("head_sd", args.sd_minutes, lr=5e-4, warmup_steps=50,
                                      curriculum=curriculum, **data),
                          init=args.out / ("head.pt" if args.head_minutes > 0 else "main.pt"))
    trainer.log(stage="final", **trainer.evaluate())
    if args.export:
        trainer.export(args.export)


if __name__ == "__main__":
    main()
