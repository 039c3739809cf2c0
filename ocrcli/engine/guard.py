"""Repetition guard: a windowed no-repeat n-gram ban and loop detection.

The ban is evaluated at every verified position over the history *including the earlier
drafts of the same round*, so a greedy step and a speculative step see exactly the same rule
and give the same output (the lossless property).
"""

from __future__ import annotations

import torch

from ocrcli.models.base import GuardConfig


def banned_tokens(history: list[int], cfg: GuardConfig) -> set[int]:
    """Tokens that would complete an n-gram already seen in the window."""
    n = cfg.ngram
    if n <= 0 or len(history) < n - 1:
        return set()
    start = max(0, len(history) - cfg.window) if cfg.window else 0
    prefix = history[len(history) - (n - 1) :] if n > 1 else []
    banned = set()
    for i in range(start, len(history) - n + 1):
        if history[i : i + n - 1] == prefix:
            banned.add(history[i + n - 1])
    return banned - cfg.whitelist


def is_looping(history: list[int], cfg: GuardConfig) -> bool:
    """True when the tail is one short period repeated `loop_repeats` times."""
    if cfg.loop_period_max <= 0 or cfg.loop_repeats <= 1:
        return False
    for period in range(1, cfg.loop_period_max + 1):
        repeats = max(cfg.loop_repeats, -(-cfg.loop_min_span // period))
        span = period * repeats
        if len(history) < span:
            break
        tail = history[-span:]
        if tail == tail[:period] * repeats:
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Device-side n-gram ban: the same rule as `banned_tokens`, as tensor ops with no host sync and
# static shapes (given B, S, T, V and the config), so CUDA graphs / torch.compile(fullgraph=True)
# can capture it. `banned_tokens` stays the reference that the tests compare against.
# ---------------------------------------------------------------------------------------------


def whitelist_mask(cfg: GuardConfig, vocab_size: int,
                   device: torch.device | str | None = None) -> torch.Tensor:
    """Bool [V+1]: True for whitelisted ids. Index V is the dummy "no token" id and stays False.

    Built once per config (not per step) so the decode loop never turns a Python set into a tensor.
    Ids outside [0, V) cannot be produced by the model and are dropped.
    """
    mask = torch.zeros(vocab_size + 1, dtype=torch.bool, device=device)
    ids = [t for t in cfg.whitelist if 0 <= t < vocab_size]
    if ids:
        mask[torch.tensor(ids, dtype=torch.long, device=device)] = True
    return mask


_whitelist_from_cfg = whitelist_mask  # ban_repeats' parameter shadows the public name


def _window_tokens(history: torch.Tensor, history_len: torch.Tensor, drafts: torch.Tensor,
                   lead: int, pad: int) -> torch.Tensor:
    """The last `lead` history tokens of each row followed by its K drafts: [B, lead+K].

    Buffer index p holds the token at sequence position L_b - lead + p of [history[:L_b] | drafts];
    positions < 0 (short histories) hold `pad`. Aligning every row on its own length makes the end
    of position j's sequence the same buffer index (lead + j) for all rows, so the rest is static.
    """
    b, s = history.shape
    k = drafts.shape[1]
    src = torch.cat([history, drafts.to(history.dtype)], dim=1)  # [B, S+K]
    length = history_len.to(torch.long)[:, None]  # [B,1]
    pos = length - lead + torch.arange(lead + k, device=history.device)[None, :]  # [B,P] seq positions
    # history entries come from src[pos], drafts from src[S + pos - L]; clamp keeps pads in range.
    idx = torch.where(pos < length, pos, pos - length + s).clamp(0, s + k - 1)  # [B,P]
    tok = src.gather(1, idx)  # [B,P]
    return torch.where(pos >= 0, tok, pad)


def ban_repeats(logits: torch.Tensor, history: torch.Tensor, history_len: torch.Tensor,
                drafts: torch.Tensor, cfg: GuardConfig,
                whitelist_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Set logits to -inf where `banned_tokens` would ban, for every row and verify position.

    logits [B,T,V] float; history [B,S] long (entries at >= history_len[b] are ignored);
    history_len [B] long; drafts [B,K] long with K = T-1 (may be 0). Position j of row b bans
    `banned_tokens(history[b,:history_len[b]] + drafts[b,:j], cfg)`. whitelist_mask: bool [V+1]
    (see `whitelist_mask()`) or a long tensor of ids; None builds it from cfg.whitelist.
    Returns a new tensor (the input is not modified), or `logits` itself when the ban is off.
    """
    n, window = cfg.ngram, cfg.window
    bsz, t, v = logits.shape
    s, k = history.shape[1], drafts.shape[1]
    if n <= 0 or s + k == 0:  # config/shape branches only: disabled, or nothing ever seen
        return logits
    dev = logits.device
    # `lead` history tokens are enough: the window's start (L+j-window) and the prefix start
    # (L+j-n+1) both lie at or after L-lead. With window 0 everything (S) is kept.
    lead = max(window if window > 0 else s, n - 1)
    buf = _window_tokens(history, history_len, drafts, lead, pad=v)  # [B,P], P = lead+K
    q_len = lead + k - n + 1  # candidate n-gram starts q: n-gram is buf[q : q+n]
    nxt = buf[:, n - 1 : n - 1 + q_len]  # [B,Q] the token an n-gram starting at q ends with
    if n == 1:
        match = torch.ones(bsz, t, q_len, dtype=torch.bool, device=dev)  # empty prefix matches all
    else:
        # int32 halves the traffic of the [B,T,Q,n-1] compare (token ids and the pad V fit).
        grams = buf.to(torch.int32).unfold(1, n - 1, 1)  # [B,Q+1,n-1] all (n-1)-grams by start
        # prefix of position j = the n-1 tokens ending at lead+j, i.e. gram lead+j-n+1.
        prefix = grams[:, lead - n + 1 : lead - n + 1 + t]  # [B,T,n-1]
        match = (grams[:, None, :q_len] == prefix[:, :, None]).all(-1)  # [B,T,Q]
    # Valid starts for (b, j), in buffer coordinates (seq position i = L_b - lead + q):
    #   i >= 0                       <=> q >= lead - L_b     (drops the pad region)
    #   i >= L_b + j - window        <=> q >= lead + j - window   (window > 0 only)
    #   i <  L_b + j - n + 1         <=> q <  lead + j - n + 1    (the n-gram ends before the prefix end)
    q = torch.arange(q_len, device=dev)  # [Q]
    j = torch.arange(t, device=dev)[:, None]  # [T,1]
    lo = (lead - history_len.to(torch.long))[:, None, None]  # [B,1,1]
    valid = (q[None, None] >= lo) & (q < lead + j - n + 1)  # [B,T,Q]
    if window > 0:
        valid = valid & (q >= lead + j - window)
    if whitelist_mask is None:
        whitelist_mask = _whitelist_from_cfg(cfg, v, dev)
    elif whitelist_mask.dtype != torch.bool:  # ids -> mask, same static shape [V+1]
        ids = whitelist_mask.to(device=dev, dtype=torch.long)
        whitelist_mask = torch.zeros(v + 1, dtype=torch.bool, device=dev).index_fill(0, ids, True)
    ban = match & valid & ~whitelist_mask[nxt][:, None]  # [B,T,Q]
    # Scatter -inf into a flat copy with one extra dummy slot at the end, where the non-bans go:
    # static shapes, one pass over the logits (no [B,T,V] mask), and the result is contiguous.
    flat = logits.new_empty(bsz * t * v + 1)  # [B*T*V+1]
    out = flat[:-1].view(bsz, t, v)
    out.copy_(logits)
    row = (torch.arange(bsz, device=dev)[:, None, None] * t + j) * v  # [B,T,1] offset of (b, j)
    idx = torch.where(ban, row + nxt[:, None], bsz * t * v)  # [B,T,Q]
    flat.index_fill_(0, idx.flatten(), float("-inf"))
    return out
