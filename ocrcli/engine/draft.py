"""Drafting: the MTP head run recursively under a `DraftPolicy` (engine/policy.py), and an
oracle drafter for measuring engine overhead."""

from __future__ import annotations

import torch

from ocrcli.engine.policy import DraftPolicy


def draft_tokens(model, rows, hidden, tokens, positions, policy: DraftPolicy, proposer=None,
                 span: int | None = None, early_exit: bool = False):
    """Run the head recursively. hidden [B,d] (main model, position p-1), tokens, positions
    [B] at p. Returns drafts [B,K'] and depth [B] (drafts per row that count), K' <= max_depth.

    Gating only masks rows (`depth`), so every step has the same shapes and no host read.
    `early_exit` stops once every row is gated off: one host read per draft step, which an
    exact CPU engine takes because a skipped draft step saves more there than the read costs."""
    b = tokens.shape[0]
    drafts: list[torch.Tensor] = []
    if policy.gated:
        depth = torch.zeros(b, dtype=torch.long, device=tokens.device)
        alive = torch.ones(b, dtype=torch.bool, device=tokens.device)
        path = torch.ones(b, device=tokens.device)
    h, t = hidden, tokens
    for k in range(policy.max_depth):
        if proposer is not None:
            d = proposer(rows, positions + k)
            p = torch.ones(b, device=tokens.device)
        else:
            logits, h = model.draft(rows, h, t, positions + k, span=span)
            if policy.gated:
                p, d = torch.softmax(logits.float(), dim=-1).max(dim=-1)
            else:  # no confidence needed: the head's top token
                d = logits.argmax(dim=-1)
        if policy.gated:
            path = path * p
            alive = alive & (p >= policy.min_prob) & (path >= policy.min_path_prob)
            if early_exit and not alive.any():
                break
            depth += alive
        drafts.append(d)
        t = d
    if not policy.gated:  # every row drafts every step
        depth = torch.full((b,), len(drafts), dtype=torch.long, device=tokens.device)
    if not drafts:
        return tokens.new_zeros(b, 0), depth
    return torch.stack(drafts, dim=1), depth


class OracleProposer:
    """A drafter that proposes the model's own greedy token with probability `p`.

    It measures the engine's overhead with no trained head: `reference[key]` holds each
    request's greedy output, and a wrong proposal is any other token. Proposals are made on
    the device from a table of the bound requests' references, so drafting with it adds no
    host read to a step.
    """

    def __init__(self, reference: dict, p: float, vocab_size: int, seed: int = 0):
        self.reference, self.p, self.vocab, self.seed = reference, p, vocab_size, seed
        self.table: torch.Tensor | None = None  # [S, L] reference tokens per slot (0 past the end)
        self.start: torch.Tensor | None = None  # [S] prompt length per slot
        self.generator: torch.Generator | None = None

    def bind(self, slot: int, key, prompt_len: int, slots: int, device) -> None:
        """Point `slot` at request `key` (at admission, on the host)."""
        ref = [t if 0 <= t < self.vocab else 0 for t in self.reference.get(key, [])]
        width = max(len(ref), 1 if self.table is None else self.table.shape[1])
        if self.table is None or self.table.shape[1] < width:
            table = torch.zeros(slots, width, dtype=torch.long, device=device)
            if self.table is not None:
                table[:, : self.table.shape[1]] = self.table
            self.table = table
            self.start = self.start if self.start is not None else torch.zeros_like(table[:, 0])
            self.generator = self.generator or torch.Generator(device=device).manual_seed(self.seed)
        self.table[slot] = 0
        self.table[slot, : len(ref)] = torch.tensor(ref, dtype=torch.long)
        self.start[slot] = prompt_len

    def __call__(self, rows, positions: torch.Tensor) -> torch.Tensor:
        """rows: the step's slots (a slice or ids), positions [B] -> proposals [B]."""
        table, start = self.table[rows], self.start[rows]  # [B,L], [B]
        # the token at position pos+1 is generated token index pos+1-prompt_len
        index = (positions + 1 - start).clamp(0, table.shape[1] - 1)
        good = table.gather(1, index[:, None])[:, 0]
        hit = torch.rand(good.shape, generator=self.generator, device=good.device) < self.p
        return torch.where(hit, good, (good + 1) % self.vocab)
