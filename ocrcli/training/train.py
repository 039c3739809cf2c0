"""Training loops for the built-in model: the main reader, then its MTP draft head.

Schedules run on training wall-clock (evaluation excluded), so a run's budget is minutes, not
steps. Every stage checkpoints atomically and resumes from its last checkpoint.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from rapidfuzz.distance import Levenshtein
from safetensors.torch import load_file, save_file

from ocrcli.models.base import DecodeRequest
from ocrcli.models.builtin.layout import PIECE_WIDTH
from ocrcli.models.builtin.model import BuiltinConfig, BuiltinOCR
from ocrcli.models.builtin.tokenizer import BOS_ID, DEFAULT_CHARS, EOS_ID, PAD_ID, CharTokenizer
from ocrcli.training.data import LineBatches, LineSample, validation_lines
from ocrcli.training.losses import mtp_loss, ocr_loss


@dataclass
class StageConfig:
    name: str  # "main" | "head" | "head_sd"
    minutes: float
    lr: float
    warmup_steps: int
    batch_size: int = 32
    seed: int = 0
    curriculum: bool = True  # head stages: progressive curriculum, else FastMTP fixed weights
    eval_every_min: float = 5.0
    steps: int = 0  # when set, the budget is this many steps (ablations on a shared machine)
    sizes: tuple[int, int] = (16, 32)  # body text sizes of the training pages, pixels
    scan: float = 0.0  # share of training pages with heavier scanner damage
    rows: float = 0.0  # chance of a symbol row (`***`, dot leaders) before each page block
    light: float = 0.0  # share of training pages whose sans face is a light weight
    geometric: float = 0.0  # share of training pages set in geometric (Futura-like) sans faces
    spaces: float = 0.0  # share of training pages with justified or tight word spaces
    fine: float = 0.0  # share of training pages typeset at twice their size (288 dpi renders)
    hand: float = 0.0  # share of training pages set in handwriting faces, in pen ink


def lr_at(cfg: StageConfig, step: int, elapsed_s: float) -> float:
    warm = min(1.0, (step + 1) / cfg.warmup_steps)
    frac = min(1.0, step / cfg.steps if cfg.steps else elapsed_s / (cfg.minutes * 60))
    return cfg.lr * warm * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))


@torch.no_grad()
def greedy_lines(model: BuiltinOCR, images: list, max_new: int = 140, batch: int = 64) -> list[list[int]]:
    """Plain batched greedy decoding through the model's cache protocol (token ids, no EOS)."""
    was_training = model.training
    model.eval()
    out: list[list[int]] = []
    model.setup_cache(batch, max_new + 2)
    for start in range(0, len(images), batch):
        chunk = images[start : start + batch]
        reqs = [DecodeRequest(i, [BOS_ID], img, max_new) for i, img in enumerate(chunk)]
        slots = torch.arange(len(chunk))
        _, logits, pos = model.prefill(slots, reqs)
        tok = logits.argmax(-1)
        seqs: list[list[int]] = [[] for _ in chunk]
        done = torch.zeros(len(chunk), dtype=torch.bool)
        for _ in range(max_new):
            done |= tok == EOS_ID
            for i in torch.nonzero(~done).flatten().tolist():
                seqs[i].append(int(tok[i]))
            if done.all():
                break
            _, logits = model.forward(slots, tok[:, None], pos[:, None])
            pos = pos + 1
            tok = logits[:, 0].argmax(-1)
        out.extend(seqs)
    model.train(was_training)
    return out


def cer(preds: list[str], refs: list[str]) -> float:
    return sum(Levenshtein.distance(p, r) for p, r in zip(preds, refs)) / max(1, sum(map(len, refs)))


def default_config(**changes) -> BuiltinConfig:
    """The recipe's model: the shipped tokenizer's vocabulary, lines read in pieces."""
    return BuiltinConfig(vocab_size=CharTokenizer(DEFAULT_CHARS).vocab_size, piece_width=PIECE_WIDTH,
                         **changes)


class Trainer:
    def __init__(self, out_dir: Path, model_cfg: BuiltinConfig | None = None, validation: bool = True):
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.tok = CharTokenizer(DEFAULT_CHARS)
        self.cfg = model_cfg or default_config()
        torch.manual_seed(0)
        self.model = BuiltinOCR(self.cfg)
        self.val: list[LineSample] = (validation_lines(300, seed=1, piece_width=self.cfg.piece_width)
                                      if validation else [])
        self.log_path = out_dir / "log.jsonl"

    def log(self, **row) -> None:
        row["time"] = time.strftime("%H:%M:%S")
        with self.log_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    def save(self, path: Path, state: dict) -> None:
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)

    def evaluate(self) -> dict:
        ids = greedy_lines(self.model, [s.image for s in self.val])
        preds = [self.tok.decode(i) for i in ids]
        return {"val_cer": round(cer(preds, [s.text for s in self.val]), 5)}

    def run_stage(self, cfg: StageConfig, init: Path | None = None) -> None:
        ckpt = self.out_dir / f"{cfg.name}.pt"
        head = cfg.name != "main"
        params = self.model.mtp.parameters() if head else [
            p for n, p in self.model.named_parameters() if not n.startswith("mtp.")]
        opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.98), weight_decay=0.01)
        step, elapsed = 0, 0.0
        if ckpt.exists():
            state = torch.load(ckpt, weights_only=True)
            self.model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            step, elapsed = state["step"], state["elapsed"]
            if state.get("done"):
                self.log(stage=cfg.name, event="already done")
                return
        elif init is not None:
            self.load_init(init, head)
        self.model.train()
        if head:  # the main model is frozen: BatchNorm statistics must not move either
            self.model.eval()
            self.model.mtp.train()
        data = torch.utils.data.DataLoader(
            LineBatches(cfg.seed + (7 if head else 0), start=step * 3, batch_size=cfg.batch_size,
                        sizes=cfg.sizes, piece_width=self.cfg.piece_width, scan=cfg.scan,
                        rows=cfg.rows, light=cfg.light, geometric=cfg.geometric,
                        spaces=cfg.spaces, fine=cfg.fine, hand=cfg.hand),
            batch_size=None, num_workers=1, prefetch_factor=4, persistent_workers=False)
        last_eval = last_ckpt = elapsed
        t0, elapsed0 = time.time(), elapsed
        for batch in data:
            for group in opt.param_groups:
                group["lr"] = lr_at(cfg, step, elapsed)
            if head:
                loss, stats = self.head_step(batch, cfg)
            else:
                logits, _, _, valid, ctc_logits = self.model.forward_train(
                    batch["images"], batch["widths"], batch["tokens"])
                loss, ce = ocr_loss(logits, batch["targets"], ctc_logits, valid,
                                    batch["ctc_targets"], batch["ctc_lengths"])
                stats = {"ce": round(ce.item(), 4)}
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            opt.step()
            step += 1
            elapsed = elapsed0 + time.time() - t0
            if step % 50 == 0:
                self.log(stage=cfg.name, step=step, min=round(elapsed / 60, 2),
                         loss=round(loss.item(), 4), lr=round(opt.param_groups[0]["lr"], 6), **stats)
            finished = step >= cfg.steps if cfg.steps else elapsed >= cfg.minutes * 60
            if not head and (elapsed - last_eval >= cfg.eval_every_min * 60 or finished):
                t_eval = time.time()
                self.log(stage=cfg.name, step=step, min=round(elapsed / 60, 2), **self.evaluate())
                self.model.train()
                t0 += time.time() - t_eval  # evaluation is not training time
                last_eval = elapsed
            if elapsed - last_ckpt >= 120 or finished:
                self.save(ckpt, {"model": self.model.state_dict(), "opt": opt.state_dict(),
                                 "step": step, "elapsed": elapsed, "done": finished})
                last_ckpt = elapsed
            if finished:
                break

    def load_init(self, path: Path, head: bool) -> None:
        """Weights from a stage checkpoint (.pt) or an exported model folder (the shipped
        model: `ocrcli/models/builtin`). A head stage may start from a head with parts this
        config's head lacks (its MLP, when `mtp_mlp_hidden` is 0): those are left out and
        logged; every other tensor must match."""
        if path.is_dir():
            state = load_file(str(path / "model.safetensors"))
        else:
            state = torch.load(path, weights_only=True)["model"]
        own = self.model.state_dict()
        dropped = sorted(k for k in state if head and k.startswith("mtp.") and k not in own)
        self.model.load_state_dict({k: v for k, v in state.items() if k not in dropped})
        if dropped:
            self.log(event="init: head tensors this head has no place for", keys=dropped)

    def head_step(self, batch: dict, cfg: StageConfig):
        tokens = batch["tokens"]
        with torch.no_grad():
            if cfg.name == "head_sd":
                # Self-distillation: the head learns on the main model's own greedy outputs.
                ids = greedy_lines(self.model, [img[0, :, : int(w)].numpy() for img, w in
                                                zip(batch["images"], batch["widths"])])
                t = max(len(i) for i in ids) + 1
                tokens = torch.full((len(ids), t), PAD_ID)
                for b, seq in enumerate(ids):
                    tokens[b, : len(seq) + 1] = torch.tensor([BOS_ID] + seq)
                self.model.eval()
            _, hidden, memory, valid_mem, _ = self.model.forward_train(
                batch["images"], batch["widths"], tokens)
            argmax = self.model.logits(hidden).argmax(-1)
        valid = tokens != PAD_ID
        valid[:, 0] = True
        step_logits = self.model.mtp_train(hidden, tokens, memory, valid_mem, self.cfg.mtp_depth)
        loss, stats = mtp_loss(step_logits, argmax, tokens, valid, curriculum=cfg.curriculum)
        return loss, {"acc": [round(a, 3) for a in stats["acc"]],
                      "w": [round(w, 3) for w in stats["weight"]]}

    def export(self, folder: Path) -> None:
        """Write the shipped model: weights (safetensors), config and tokenizer (JSON)."""
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.model.state_dict().items()}
        save_file(state, str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps(self.cfg.to_dict(), indent=1))
        self.tok.save(folder / "tokenizer.json")

