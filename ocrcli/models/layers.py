"""Transformer building blocks shared by every model ocrcli ships.

DeepSeek-OCR's decoder and the built-in model's decoder are both made of these, so the
engine's code paths are exercised by the same modules whichever model runs.

Shapes: B batch rows, T new positions, S cache length, H heads, D head dim, d model dim.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

# MKL's sgemm (the CPU wheel's BLAS) computes rows in blocks of 4; a block's rows are
# bitwise the same whatever M is, but below 12 rows the 1-3 rows left over after the last
# full block take other paths (measured: a row's result then depends on M and on its
# position). Padding every product to a multiple of 4 rows keeps each row on the block path,
# so its result does not depend on how many rows share the call.
MIN_GEMM_ROWS = 4


def assume_constant_result(fn):
    """`torch.compiler.assume_constant_result` without its import of torch._dynamo, which
    takes longer than importing torch itself and which only torch.compile needs: the marker
    it sets on `fn` is all it does (tests/test_startup.py checks that they agree)."""
    fn._dynamo_marked_constant = True
    return fn


@assume_constant_result
def gemm_rows_are_independent(k: int, n: int, dtype: torch.dtype) -> bool:
    """Probe the host's BLAS once per shape: is row i of a padded [M, k] @ [k, n] product
    the same for every M, position and neighbour rows? A memo of a hardware fact, not state:
    the answer never changes within a process, so torch.compile takes it as a constant."""
    return _probe_gemm_rows(k, n, dtype)


@functools.cache
def _probe_gemm_rows(k: int, n: int, dtype: torch.dtype) -> bool:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(67, k, generator=gen, dtype=torch.float64).to(dtype)
    b = torch.randn(k, n, generator=gen, dtype=torch.float64).to(dtype)
    alone = _padded_matmul(a[:1], b)
    for m in range(2, 68):
        rows = a[:m].flip(0)  # the probed row last: position in the block must not matter
        if not torch.equal(_padded_matmul(rows, b)[-1:], alone):
            return False
    return True


def pad_rows(rows: torch.Tensor) -> torch.Tensor:
    """rows [M,k] with zero rows appended up to a multiple of MIN_GEMM_ROWS."""
    extra = -rows.shape[0] % MIN_GEMM_ROWS
    return F.pad(rows, (0, 0, 0, extra)) if extra else rows  # one op, not zeros + cat


def _padded_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [..., M, k] @ b [..., k, n], M padded with zero rows to a multiple of MIN_GEMM_ROWS."""
    m = a.shape[-2]
    extra = -m % MIN_GEMM_ROWS
    if not extra:
        return torch.matmul(a, b)
    return torch.matmul(F.pad(a, (0, 0, 0, extra)), b)[..., :m, :]


def rowwise_matmul(x: torch.Tensor, w_t: torch.Tensor) -> torch.Tensor:
    """x [..., k] @ w_t [k, n], each row's result independent of the other rows.

    CPU matmul kernels accumulate differently for 1 row and for many, so a row's result would
    depend on how many rows share the call: a verify pass over K+1 positions would not be
    bitwise the greedy step, and a near-tie could flip. Where the probe shows the host's
    GEMM is row-independent once padded, one padded GEMM does it; elsewhere every row gets
    its own matrix-vector product (exact by construction, several times slower).
    """
    if x.dim() != 2:  # [..., k] as rows [M,k]; a 2-D x needs no reshape (an op each way)
        return rowwise_matmul(x.reshape(-1, x.shape[-1]), w_t).view(*x.shape[:-1], w_t.shape[-1])
    if x.shape[0] == 0:
        return x @ w_t
    if gemm_rows_are_independent(w_t.shape[0], w_t.shape[1], x.dtype):
        return _padded_matmul(x, w_t)
    w = w_t.t()  # mv per row: a batched product over an expanded weight would copy it
    return torch.stack([torch.mv(w, r) for r in x])


def batch_invariant(x: torch.Tensor, exact: bool | None = None) -> bool:
    """Take the batch-invariant paths? Never in training. At inference, as the engine chose
    when it was built (`exact`, set on the modules by `choose_kernels`); unchosen (None),
    on the CPU, where float32 output is then bitwise greedy's, and not on a GPU, whose fast
    kernels may round a verify pass differently from a greedy step and flip a near-tie."""
    if torch.is_grad_enabled():
        return False
    return x.device.type == "cpu" if exact is None else exact


def choose_kernels(model: nn.Module, exact: bool | None) -> None:
    """Set every module's kernel choice (`exact`, a class attribute of the modules that
    have one) once, when an engine is built: None restores the device's default."""
    for module in model.modules():
        if hasattr(type(module), "exact"):
            module.exact = exact


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           exact: bool | None = None) -> torch.Tensor:
    """F.linear whose exact (CPU inference) result for a row does not depend on the other rows."""
    if not batch_invariant(x, exact):
        return F.linear(x, weight, bias)
    y = rowwise_matmul(x, weight.t())
    return y if bias is None else y + bias


def project(x: torch.Tensor, w_t: torch.Tensor, exact: bool | None = None) -> torch.Tensor:
    """`linear` for a weight kept transposed, w_t [k,n] (`Fusable.fused`): x [..., k] -> [..., n]
    with no transpose op per call."""
    return rowwise_matmul(x, w_t) if batch_invariant(x, exact) else x @ w_t


class Linear(nn.Linear):
    """nn.Linear through `linear`."""

    exact: bool | None = None  # choose_kernels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.exact)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              exact: bool | None = None) -> torch.Tensor:
    """SDPA over q [B,H,T,D], k, v [B,H,S,D], boolean mask broadcastable to [B,H,T,S].

    With exact kernels a query row's result does not depend on the other rows, as
    `rowwise_matmul` explains."""
    if not batch_invariant(q, exact):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    b, h, t, d = q.shape
    s = k.shape[2]
    if sdpa_rows_are_independent(d, s, q.dtype):
        extra = -t % MIN_GEMM_ROWS
        if extra:  # padded queries attend everywhere: a fully masked row would be NaN
            q = F.pad(q, (0, 0, 0, extra))
            if mask is not None:  # boolean (True: seen) or additive (0: seen)
                if mask.shape[2] != t:
                    mask = mask.expand(mask.shape[0], mask.shape[1], t, s)
                mask = F.pad(mask, (0, 0, 0, extra), value=1 if mask.dtype == torch.bool else 0)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)[:, :, :t]
    rows = q.reshape(b * h * t, 1, d)
    keys = k.unsqueeze(2).expand(b, h, t, s, d).reshape(b * h * t, s, d)
    scores = torch.bmm(rows, keys.transpose(1, 2)).view(b, h, t, s) / math.sqrt(d)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask.expand(b, h, t, s), float("-inf"))
    elif mask is not None:  # additive: bitwise the masked fill (s + 0 = s, s - inf = -inf)
        scores = scores + mask
    probs = torch.softmax(scores, dim=-1).reshape(b * h * t, 1, s)
    values = v.unsqueeze(2).expand(b, h, t, s, d).reshape(b * h * t, s, d)
    return torch.bmm(probs, values).view(b, h, t, d)


@assume_constant_result
def sdpa_rows_are_independent(d: int, s: int, dtype: torch.dtype) -> bool:
    """The same probe as `gemm_rows_are_independent`, for the fused attention kernel with
    queries padded to a multiple of MIN_GEMM_ROWS: does a query row's output depend on how
    many queries share the call, their order, or the batch?"""
    return _probe_sdpa_rows(d, s, dtype)


@functools.cache
def _probe_sdpa_rows(d: int, s: int, dtype: torch.dtype) -> bool:
    gen = torch.Generator().manual_seed(0)
    k, v = (torch.randn(3, 2, s, d, generator=gen, dtype=torch.float64).to(dtype) for _ in "kv")
    q = torch.randn(3, 2, 40, d, generator=gen, dtype=torch.float64).to(dtype)
    mask = torch.rand(3, 1, 40, s, generator=gen) > 0.3
    mask[..., 0] = True

    def padded(rows: torch.Tensor, m: torch.Tensor, batch: int) -> torch.Tensor:
        t = rows.shape[2]
        extra = -t % MIN_GEMM_ROWS
        rows = torch.cat([rows, rows.new_zeros(*rows.shape[:2], extra, d)], dim=2)
        m = torch.cat([m, m.new_ones(*m.shape[:2], extra, s)], dim=2)
        return F.scaled_dot_product_attention(rows, k[:batch], v[:batch], attn_mask=m)[:, :, :t]

    alone = padded(q[:1, :, :1], mask[:1, :, :1], 1)
    for t in range(2, 41):
        rows, m = q[:, :, :t].flip(2), mask[:, :, :t].flip(2)  # the probed row last
        if not torch.equal(padded(rows, m, 3)[:1, :, -1:], alone):
            return False
    return True


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps) over the last dim."""
    if x.dtype == torch.float32:  # one fused op, bitwise the formula below in float32
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    # Normalise in float32 at least: bf16 variance loses the small rows.
    dtype = x.dtype
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(dtype)


# Elementwise kernels run a vector body over 2 * lanes elements at a time and a scalar tail,
# and SiLU's two paths round differently (measured: 1 ulp). An element's activation would then
# depend on where its row sits in the call. 64 elements cover 2 * lanes for every dtype and
# ISA; calls above ATen's parallel grain (32768 elements) are split across threads at
# unaligned offsets, so larger inputs go in aligned serial slices.
_VECTOR_BODY = 64
_SERIAL_GRAIN = 32768


def rowwise_silu(x: torch.Tensor, exact: bool | None = None) -> torch.Tensor:
    """F.silu whose exact result per element does not depend on the tensor around it."""
    if not batch_invariant(x, exact):
        return F.silu(x)
    flat = x.reshape(-1)
    n = flat.numel()
    extra = -n % _VECTOR_BODY
    if extra:
        flat = torch.cat([flat, flat.new_zeros(extra)])
    if flat.numel() <= _SERIAL_GRAIN:
        out = F.silu(flat)
    else:
        out = torch.cat([F.silu(part) for part in flat.split(_SERIAL_GRAIN)])
    return out[:n].view(x.shape)


def fuse_linears(*linears: nn.Linear) -> torch.Tensor:
    """The linears' weights [out_i, in] concatenated by rows and returned transposed,
    [in, sum(out_i)]: the layout `project` takes. Each linear's weight becomes a view of its
    rows, so one copy of the weights exists and the state dict is unchanged. No biases."""
    if len(linears) == 1:
        return linears[0].weight.t()
    # Plain tensors even under inference_mode: views of inference tensors could no longer be
    # updated in place (load_state_dict copies into parameters).
    with torch.inference_mode(False), torch.no_grad():
        fused = torch.cat([lin.weight for lin in linears])
        start = 0
        for lin in linears:
            stop = start + lin.out_features
            lin.weight = nn.Parameter(fused[start:stop], requires_grad=lin.weight.requires_grad)
            start = stop
    return fused.t()


def _unfuse_after_load(module: Fusable, _incompatible_keys) -> None:
    # load_state_dict(assign=True) replaces the parameters: the fused weights may be stale.
    module.fused = {}


class Fusable(nn.Module):
    """A module whose inference path can run on `fused` weights: its Linears' weights
    concatenated where they read the same input (q, k, v; gate, up) and kept transposed
    (`fuse_linears`). At small batch a decode step costs its operator count, and one product
    of a 2-D input is one op where three Linears of [B,T,d] are twelve.

    `fuse()` builds them once the weights are loaded and placed (the runtime's setup_cache),
    before a CUDA-graph capture or torch.compile: it allocates and replaces parameters.
    Loading (load_state_dict: with assign=True it replaces the parameters), moving (.to) or
    copying the module drops them; until `fuse()` runs again the separate Linears run, as
    they do in training (no gradient reaches the parameters through the fused tensors)."""

    def __init__(self) -> None:
        super().__init__()
        self.fused: dict[str, torch.Tensor] = {}  # name -> weight [in, out]
        self.register_load_state_dict_post_hook(_unfuse_after_load)

    def fused_weights(self) -> dict[str, torch.Tensor] | None:
        """The fused weights where the fused path runs (built, and no gradient), else None."""
        return self.fused if self.fused and not torch.is_grad_enabled() else None

    def _apply(self, fn, recurse=True):
        # .to() / .half() convert each parameter on its own, which breaks the views.
        self.fused = {}
        return super()._apply(fn, recurse)

    def __getstate__(self):
        # Pickling or deepcopy would copy the fused tensors apart from the parameters.
        state = super().__getstate__()
        state["fused"] = {}
        return state


class SwiGLU(Fusable):
    """DeepSeek-V2's MLP: down(silu(gate(x)) * up(x))."""

    exact: bool | None = None  # choose_kernels

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = Linear(dim, hidden, bias=False)
        self.up_proj = Linear(dim, hidden, bias=False)
        self.down_proj = Linear(hidden, dim, bias=False)

    def fuse(self) -> None:
        """One product for gate and up (a column's result does not depend on the columns
        beside it: bitwise the two apart with the exact kernels), and the down weight kept
        transposed. The fast SiLU of a strided half may round a row's scalar tail 1 ulp
        away from the contiguous one's; widths that are multiples of 64 have no tail."""
        if not self.fused:
            self.fused = {"gate_up": fuse_linears(self.gate_proj, self.up_proj),
                          "down": fuse_linears(self.down_proj)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., d] -> [..., d]; a 2-D x [N,d] takes no reshape."""
        fused = self.fused_weights()
        if fused is None:
            return self.down_proj(rowwise_silu(self.gate_proj(x), self.exact) * self.up_proj(x))
        gate, up = project(x, fused["gate_up"], self.exact).split(self.gate_proj.out_features, -1)
        return project(rowwise_silu(gate, self.exact) * up, fused["down"], self.exact)


def sinusoid_table(length: int, dim: int) -> torch.Tensor:
    """Fixed sine/cosine positions [length, dim]; positions must exist from step 0."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    inv = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    table = torch.zeros(length, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv)
    return table.float()


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [B,T] -> cos, signed sin [B,1,T,D] in the rotate-half layout (HF/DeepSeek-V2).

    The sine's first half is negated: rotate_half(x) * sin is then x.roll(D/2) * signed sin,
    bitwise (a product's sign does not depend on which factor carries it), and one roll
    replaces rotate_half's two slices, negation and concatenation in every layer."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    freqs = positions.float()[..., None] * inv  # [B,T,D/2]
    emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # [B,1,T,D]
    sign = torch.ones(head_dim, device=positions.device)
    sign[: head_dim // 2] = -1.0
    return emb.cos().to(dtype), (emb.sin() * sign).to(dtype)


def rope_table(length: int, head_dim: int, theta: float, dtype: torch.dtype,
               device) -> tuple[torch.Tensor, torch.Tensor]:
    """rope_cos_sin of positions 0..length-1 as tables cos, signed sin [length, D], made once
    (with the caches): a step looks its positions up (`rope_lookup`, 4 ops) instead of
    computing them (18). Bitwise the same: every element is the same elementwise function
    of its position (tests/models/test_layers.py checks it)."""
    cos, sin = rope_cos_sin(torch.arange(length, device=device)[None], head_dim, theta, dtype)
    return cos[0, 0], sin[0, 0]


def rope_lookup(table: tuple[torch.Tensor, torch.Tensor],
                positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """rope_table's rows for positions [B,T] -> cos, signed sin [B,1,T,D], as rope_cos_sin."""
    cos, sin = table
    return cos[positions][:, None], sin[positions][:, None]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin, with rope_cos_sin's signed sine."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


class KVCache(nn.Module):
    """Static per-slot key/value buffers [slots, H, S_max, D].

    Each slot has its own length, kept by the engine. Rollback is by length alone: rejected
    positions are hidden by the position mask and overwritten by later writes.
    """

    def __init__(self, slots: int, heads: int, max_len: int, head_dim: int, dtype, device):
        super().__init__()
        shape = (slots, heads, max_len, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    def update(self, rows, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               span: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v [B,H,T,D] in place at (rows, positions [B,T]); return the rows' keys and
        values [B,H,span,D]. `rows` is a slice of slots (the result is a view) or slot ids [B]
        (a gather of `span` positions); span None reads the whole cache."""
        span = self.max_len if span is None else span
        if isinstance(rows, slice):  # a scatter along positions into views of the buffers
            keys, values = self.k[rows], self.v[rows]
            b, _, t, _ = k.shape
            index = positions.view(b, 1, t, 1).expand(k.shape)  # [B,H,T,D]
            keys.scatter_(2, index, k)
            values.scatter_(2, index, v)
            if span == self.max_len:  # the whole cache: no slicing op
                return keys, values
            return keys[:, :, :span], values[:, :, :span]
        self.k[rows[:, None], :, positions] = k.transpose(1, 2)
        self.v[rows[:, None], :, positions] = v.transpose(1, 2)
        return select_slots(self.k[:, :, :span], rows), select_slots(self.v[:, :, :span], rows)


def select_slots(buffer: torch.Tensor, rows) -> torch.Tensor:
    """buffer's rows (dim 0) for a step: a view for a slice of slots, a gather for slot ids."""
    return buffer[rows] if isinstance(rows, slice) else buffer.index_select(0, rows)


def cache_mask(positions: torch.Tensor, span: int) -> torch.Tensor:
    """Boolean [B,1,T,span]: a query at position p sees cache entries 0..p of its own row."""
    keys = torch.arange(span, device=positions.device)
    return (keys[None, None, :] <= positions[:, :, None])[:, None]


def step_mask(positions: torch.Tensor, span: int, dtype: torch.dtype) -> torch.Tensor:
    """cache_mask as an additive mask [B,1,T,span]: 0 where seen, -inf elsewhere. Made once
    per step: SDPA turns a boolean mask into this in every layer (three ops each)."""
    b, t = positions.shape
    keys = torch.arange(span, device=positions.device)
    unseen = keys > positions.view(b, 1, t, 1)  # [B,1,T,span]
    return torch.zeros(unseen.shape, dtype=dtype, device=positions.device).masked_fill_(
        unseen, float("-inf"))


class Attention(Fusable):
    """Multi-head self-attention with optional RoPE, run through SDPA.

    Training passes `mask` [B,1,T,T]; decoding passes a KVCache, `slots` and `positions`.
    """

    exact: bool | None = None  # choose_kernels

    def __init__(self, dim: int, heads: int, rope_theta: float | None = None, bias: bool = False):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.rope_theta = rope_theta
        self.q_proj = Linear(dim, dim, bias=bias)
        self.k_proj = Linear(dim, dim, bias=bias)
        self.v_proj = Linear(dim, dim, bias=bias)
        self.o_proj = Linear(dim, dim, bias=bias)

    def fuse(self) -> None:
        """One product for q, k and v (bitwise the three apart: a column's result does not
        depend on the columns beside it), and the output weight kept transposed. Projections
        with a bias stay apart."""
        if not self.fused and self.q_proj.bias is None:
            self.fused = {"qkv": fuse_linears(self.q_proj, self.k_proj, self.v_proj),
                          "o": fuse_linears(self.o_proj)}

    def _split(self, x: torch.Tensor, b: int, t: int) -> torch.Tensor:
        return x.view(b, t, -1, self.head_dim).transpose(1, 2)  # [B,T,d] or [N,d] -> [B,H,T,D]

    def forward(
        self,
        x: torch.Tensor,  # [B,T,d], or [N,d]: N = B*T rows in the order of positions
        positions: torch.Tensor,  # [B,T]
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        slots=None,
        span: int | None = None,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """-> shaped like x. With a cache, `mask` may be given for the step (cache_mask over
        `span`, or step_mask) and `rope` (rope_cos_sin of `positions`): a decoder computes
        both once per step, not per layer."""
        b, t = x.shape[:2] if x.dim() == 3 else positions.shape
        fused = self.fused_weights()
        q, k, v = self._qkv(x, positions, rope, b, t, fused)  # [B,H,T,D]
        if cache is not None:
            k, v = cache.update(slots, positions, k, v, span)
            if mask is None:
                mask = cache_mask(positions, k.shape[2])
        out = attention(q, k, v, mask, self.exact).transpose(1, 2)  # [B,T,H,D]
        out = out.reshape(b, t, -1) if x.dim() == 3 else out.reshape(b * t, -1)
        return self.o_proj(out) if fused is None else project(out, fused["o"], self.exact)

    def _qkv(self, x, positions, rope, b: int, t: int, fused) -> tuple[torch.Tensor, ...]:
        """-> q, k, v [B,H,T,D], q and k rotated."""
        if fused is None:  # three products, two rotations
            q, k, v = (self._split(p(x), b, t) for p in (self.q_proj, self.k_proj, self.v_proj))
            qk = None
        else:  # one product, and q and k rotated together (elementwise: bitwise the same)
            qkv = self._split(project(x, fused["qkv"], self.exact), b, t)  # [B,3H,T,D]
            qk, v = qkv.split([2 * self.heads, self.heads], dim=1)
        if self.rope_theta is None:
            return (q, k, v) if qk is None else (*qk.split(self.heads, dim=1), v)
        cos, sin = rope if rope is not None else rope_cos_sin(positions, self.head_dim,
                                                              self.rope_theta, v.dtype)
        if qk is None:
            return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v
        q, k = apply_rope(qk, cos, sin).split(self.heads, dim=1)
        return q, k, v


class CrossAttention(nn.Module):
    """Attention from text positions to a request's visual tokens (no positions of its own).

    `memory_kv` projects visual tokens once per request; the engine keeps the result per slot.
    """

    exact: bool | None = None  # choose_kernels

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.q_proj = Linear(dim, dim, bias=False)
        self.k_proj = Linear(dim, dim, bias=False)
        self.v_proj = Linear(dim, dim, bias=False)
        self.o_proj = Linear(dim, dim, bias=False)

    def memory_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """memory [B,N,d] -> k, v [B,H,N,D]."""
        b, n, _ = memory.shape
        k = self.k_proj(memory).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(memory).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        return k, v

    def forward(
        self,
        x: torch.Tensor,  # [B,T,d]
        k: torch.Tensor,  # [B,H,N,D]
        v: torch.Tensor,  # [B,H,N,D]
        memory_mask: torch.Tensor,  # [B,1,1,N] True where a visual token is real
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        out = attention(q, k, v, memory_mask, self.exact)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))
