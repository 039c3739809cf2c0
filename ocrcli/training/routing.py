"""Training the MTP head with TIGER-style routing, in two stages, on a frozen main model.

Our reading of TIGER (arXiv 2607.11131, "Text-Conditioned Visual Gated Routing with
Acceptance Alignment for Multimodal Speculative Decoding"; its abstract names the parts, but
its gating function, estimator, group size and KL coefficient are not public):

1. **Distillation warm start** (`kd_loss`): along the main model's own greedy continuation of
   a line, the head's step-k distribution at position i is pulled to the main model's
   next-token distribution at i+k (forward KL), plus `anchor` x KL(unrouted head || head),
   the anchor being the shipped unrouted head. Depths are weighted by the detached
   cumulative probability of the path before them, floored at FastMTP's 0.6^(k-1)
   (the repository's curriculum), because a deep draft only counts once the ones before it
   were accepted.
2. **Acceptance-aligned group policy training** (`grpo_loss`, GRPO-style): for C contexts per
   line, the head samples G draft chains of depth K from its own distribution. A chain's
   reward is the prefix length greedy verification accepts. That reward is exact: verify
   accepts draft k iff it equals the main model's argmax after the accepted prefix, and on
   the greedy path that argmax is the one `forward_train` computes with the same
   batch-invariant kernels (`tests/training/test_routing_training.py` checks it against the
   engine protocol's verify forward). Advantages are normalised within each group;
   the update is one on-policy step per rollout (so GRPO's ratio is 1 and its clip is a
   no-op), over the log-probabilities of the accepted drafts and the first rejected one
   (later drafts cannot change the reward), plus `kl` x KL(head || warm-started head) at the
   visited states.

Every variant reads the same cached batches (`prepare_batches`: lines, the main model's
greedy continuations, hidden states, visual memory and log-probabilities are the same for
every head, so they are computed once), in the same order, for the same number of steps.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from ocrcli.models.builtin.model import BuiltinConfig, BuiltinOCR
from ocrcli.models.builtin.tokenizer import BOS_ID, PAD_ID
from ocrcli.training.data import LineBatches
from ocrcli.training.losses import fixed_step_weights
from ocrcli.training.train import greedy_lines


@dataclass
class HeadBatch:
    """One batch of lines with everything the frozen main model contributes to head training."""

    tokens: torch.Tensor  # [B,T] BOS + the main model's greedy output, PAD after
    lengths: torch.Tensor  # [B] greedy tokens per line (position L's argmax is EOS)
    hidden: torch.Tensor  # [B,T,d] the main model's final-norm hidden states
    memory: torch.Tensor  # [B,N,d] visual tokens
    valid_mem: torch.Tensor  # [B,N] real visual tokens
    main_logp: torch.Tensor  # [B,T,V] the main model's next-token log-probabilities
    argmax: torch.Tensor  # [B,T] the main model's greedy token (what verify compares against)
    anchor_logp: list[torch.Tensor]  # K x [B,T,V] the unrouted head's log-probabilities (fp16)


@torch.no_grad()
def head_batch(model: BuiltinOCR, images: torch.Tensor, widths: torch.Tensor) -> HeadBatch:
    """images [B,1,32,W], widths [B] -> the frozen main model's side of a head batch."""
    model.eval()
    ids = greedy_lines(model, [img[0, :, : int(w)].numpy() for img, w in zip(images, widths)])
    t = max(len(s) for s in ids) + 1
    tokens = torch.full((len(ids), t), PAD_ID)
    for b, seq in enumerate(ids):
        tokens[b, : len(seq) + 1] = torch.tensor([BOS_ID] + seq)
    logits, hidden, memory, valid_mem, _ = model.forward_train(images, widths, tokens)
    argmax = logits.argmax(-1)
    lengths = torch.tensor([len(s) for s in ids])
    # The cached decode and this full pass can break a near-tie differently (rare); past such
    # a point the inputs are no longer the main model's greedy path, so the line ends there.
    for b, n in enumerate(lengths.tolist()):
        off = (argmax[b, :n] != tokens[b, 1 : n + 1]).nonzero()
        if len(off):
            lengths[b] = int(off[0])
    anchor = model.mtp_train(hidden, tokens, memory, valid_mem, model.cfg.mtp_depth)
    return HeadBatch(tokens, lengths, hidden, memory, valid_mem, logits.log_softmax(-1), argmax,
                     [a.log_softmax(-1).half() for a in anchor])


def prepare_batches(model: BuiltinOCR, n: int, batch_size: int, seed: int,
                    log: Callable[[str], None] = print) -> list[HeadBatch]:
    """`n` batches of training lines (synthetic pages seeded by `seed`, text split 'train')."""
    out: list[HeadBatch] = []
    it = iter(LineBatches(seed, start=0, batch_size=batch_size))
    t0 = time.time()
    for i in range(n):
        batch = next(it)
        out.append(head_batch(model, batch["images"], batch["widths"]))
        if (i + 1) % 10 == 0:
            log(f"prepared {i + 1}/{n} batches in {time.time() - t0:.0f}s")
    return out


def depth_mask(lengths: torch.Tensor, t: int, k: int) -> torch.Tensor:
    """[B,T]: step k at position i has a real input token and target, i.e. i + k <= L."""
    return (torch.arange(t)[None, :] + k) <= lengths[:, None]


def kd_loss(model: BuiltinOCR, batch: HeadBatch, anchor: float = 0.2,
            beta: float = 0.6) -> tuple[torch.Tensor, dict]:
    """Stage 1: KL to the main model's next-token distributions, anchored to the unrouted head."""
    depth = model.cfg.mtp_depth
    b, t = batch.tokens.shape
    step_logits = model.mtp_train(batch.hidden, batch.tokens, batch.memory, batch.valid_mem, depth)
    floors = fixed_step_weights(depth, beta) * sum(beta**k for k in range(depth))
    path = torch.ones(b, t)
    losses, weights, acc = [], [], []
    for k, logits in enumerate(step_logits, start=1):
        mask = depth_mask(batch.lengths, t, k).float()
        logq = logits.log_softmax(-1)
        teacher = torch.zeros_like(batch.main_logp)
        teacher[:, : t - k] = batch.main_logp[:, k:]
        p = teacher.exp()
        kl_main = (p * (teacher - logq)).sum(-1)
        ref = batch.anchor_logp[k - 1].float()
        kl_anchor = (ref.exp() * (ref - logq)).sum(-1)
        per_pos = kl_main + anchor * kl_anchor
        losses.append((per_pos * mask).sum() / mask.sum().clamp(min=1))
        with torch.no_grad():
            target = torch.zeros_like(batch.argmax)
            target[:, : t - k] = batch.argmax[:, k:]
            weights.append(torch.maximum((path * mask).sum() / mask.sum().clamp(min=1), floors[k - 1]))
            acc.append(round(float(((logq.argmax(-1) == target).float() * mask).sum()
                                   / mask.sum().clamp(min=1)), 3))
            path = path * logq.gather(-1, target[..., None])[..., 0].exp()
    w = torch.stack(weights)
    w = w / w.sum()
    return sum(wk * lk for wk, lk in zip(w, losses)), {"acc": acc}


def rollout_contexts(batch: HeadBatch, contexts: int, gen: torch.Generator) -> torch.Tensor:
    """[B,C] context positions i (0 <= i < L): after the main model committed token i+1,
    the head drafts from (hidden[i], token[i+1]). Lines with no output get i = -1 (skipped)."""
    b = batch.lengths.shape[0]
    u = torch.rand(b, contexts, generator=gen)
    pos = (u * batch.lengths[:, None].clamp(min=1)).long()
    return torch.where(batch.lengths[:, None] > 0, pos, torch.full_like(pos, -1))


def verify_targets(batch: HeadBatch, p: torch.Tensor, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """p [B,R] context positions -> [B,R,K] the token greedy verification accepts as draft k
    (the main model's argmax at p+k on its own greedy path), and whether step k exists."""
    t = batch.tokens.shape[1]
    at = p[..., None] + torch.arange(1, depth + 1)  # [B,R,K]
    rows = torch.arange(p.shape[0])[:, None, None]
    return batch.argmax[rows, at.clamp(max=t - 1)], at <= batch.lengths[:, None, None]


def rollout(model: BuiltinOCR, batch: HeadBatch, pos: torch.Tensor, group: int,
            gen: torch.Generator, ref: BuiltinOCR | None = None):
    """Sample `group` draft chains of depth K per context. Returns per-step log-prob of the
    sampled draft [R,K], whether it equals verify's choice [R,K] (`verify_targets`), whether
    the step exists [R,K], and the per-step KL(head || ref) [R,K] when `ref` is given
    (R = B x C x G, laid out [B, C*G])."""
    depth = model.cfg.mtp_depth
    b, c = pos.shape
    t = batch.tokens.shape[1]
    p = pos.clamp(min=0).repeat_interleave(group, dim=1)  # [B,C*G]
    live = (pos >= 0).repeat_interleave(group, dim=1)
    rows = torch.arange(b)[:, None]
    g = batch.hidden[rows, p]  # [B,R,d]
    tok = batch.tokens[rows, (p + 1).clamp(max=t - 1)]
    mem_mask = batch.valid_mem[:, None, None, :]
    k_mem, v_mem = model.mtp.block.cross_attn.memory_kv(batch.memory)
    if ref is not None:
        with torch.no_grad():
            rk, rv = ref.mtp.block.cross_attn.memory_kv(batch.memory)
        g_ref = g
    targets, exists = verify_targets(batch, p, depth)
    logps, drafts, kls = [], [], []
    max_pos = model.pos_table.shape[0] - 1
    for k in range(1, depth + 1):
        positions = (p + k).clamp(max=max_pos)
        emb = model.embed_tokens(tok, positions)
        g, normed = model.mtp(emb, g, k_mem, v_mem, mem_mask)
        logq = model.logits(normed).log_softmax(-1)  # [B,R,V]
        draft = torch.multinomial(logq.detach().exp().flatten(0, 1), 1, generator=gen).view(b, -1)
        logps.append(logq.gather(-1, draft[..., None])[..., 0])
        drafts.append(draft)
        if ref is not None:
            with torch.no_grad():
                g_ref, rn = ref.mtp(ref.embed_tokens(tok, positions), g_ref, rk, rv, mem_mask)
                logr = ref.logits(rn).log_softmax(-1)
            kls.append((logq.exp() * (logq - logr)).sum(-1))
        tok = draft
    stack = lambda xs: torch.stack(xs, -1).flatten(0, 1)  # noqa: E731  [B*R,K]
    hits = (stack(drafts) == targets.flatten(0, 1))
    valid = (exists & live[..., None]).flatten(0, 1)
    return stack(logps), hits, valid, (stack(kls) if kls else None)


def accepted_prefix(hits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[R,K] -> [R] drafts greedy verification accepts: the leading run of hits (a step
    past the line's end never counts: the row has finished)."""
    return torch.cumprod((hits & valid).long(), dim=-1).sum(-1)


def grpo_loss(model: BuiltinOCR, ref: BuiltinOCR, batch: HeadBatch, gen: torch.Generator,
              contexts: int = 8, group: int = 8, kl: float = 0.05) -> tuple[torch.Tensor, dict]:
    """Stage 2: group-normalised policy gradient on the accepted prefix length."""
    pos = rollout_contexts(batch, contexts, gen)
    logp, hits, valid, kls = rollout(model, batch, pos, group, gen, ref)
    reward = accepted_prefix(hits, valid).float()  # [R]
    live = valid[:, 0]
    r = reward.view(-1, group)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()
    steps = torch.arange(logp.shape[1])[None, :]
    # the accepted drafts and the first rejected one decide the reward; later ones cannot
    counts = (steps <= reward[:, None]) & valid
    pg = -(adv * (logp * counts).sum(-1))[live].mean()
    kl_term = (kls * counts).sum() / counts.sum().clamp(min=1)
    return pg + kl * kl_term, {"reward": round(reward[live].mean().item(), 3),
                               "kl": round(kl_term.item(), 4)}


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    warm = min(1.0, (step + 1) / max(1, warmup))
    return lr * warm * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(1, steps)))))


def routed_model(base_state: dict, cfg: BuiltinConfig, route_k: int) -> BuiltinOCR:
    """A model with the base weights and a head routed to `route_k` tokens (0 = unrouted);
    a new gate starts as the head's own attention query (`init_router_from_attention`)."""
    cfg = BuiltinConfig.from_dict({**cfg.to_dict(), "mtp_route_k": route_k})
    model = BuiltinOCR(cfg)
    missing, unexpected = model.load_state_dict(base_state, strict=False)
    if unexpected or any(not m.startswith("mtp.router.") for m in missing):
        raise ValueError(f"base weights do not fit: missing {missing}, unexpected {unexpected}")
    if missing:
        model.mtp.init_router_from_attention()
    return model


def train_head(model: BuiltinOCR, batches: list[HeadBatch], kd_steps: int, grpo_steps: int,
               log: Callable[[dict], None], seed: int = 0, kd_lr: float = 3e-4,
               grpo_lr: float = 1e-4) -> dict:
    """Stage 1 for `kd_steps`, then stage 2 for `grpo_steps`; only the head's weights move."""
    model.eval()  # the main model is frozen (BatchNorm statistics too)
    for p in model.parameters():
        p.requires_grad_(False)
    params = list(model.mtp.parameters())
    for p in params:
        p.requires_grad_(True)
    gen = torch.Generator().manual_seed(seed)
    timing = {}
    for stage, steps, lr in (("kd", kd_steps, kd_lr), ("grpo", grpo_steps, grpo_lr)):
        if steps <= 0:
            continue
        ref = None
        if stage == "grpo":
            ref = copy.deepcopy(model).eval()
            for p in ref.parameters():
                p.requires_grad_(False)
        opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
        t0 = time.time()
        for step in range(steps):
            batch = batches[step % len(batches)]
            for group in opt.param_groups:
                group["lr"] = lr_at(step, steps, lr, max(1, steps // 10))
            if stage == "kd":
                loss, stats = kd_loss(model, batch)
            else:
                loss, stats = grpo_loss(model, ref, batch, gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            if (step + 1) % 10 == 0 or step + 1 == steps:
                log({"stage": stage, "step": step + 1, "loss": round(loss.item(), 4),
                     "s": round(time.time() - t0, 1), **stats})
        timing[f"{stage}_seconds"] = round(time.time() - t0, 1)
    for p in model.parameters():
        p.requires_grad_(False)
    return timing


def export_model(model: BuiltinOCR, folder: Path, tokenizer_json: Path) -> None:
    """A loadable built-in model folder (weights, config with the routing k, tokenizer)."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(model.cfg.to_dict(), indent=1))
    (folder / "tokenizer.json").write_bytes(tokenizer_json.read_bytes())
