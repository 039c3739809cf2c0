"""Batch invariance of the CPU inference kernels: what makes speculative output identical."""

from __future__ import annotations

import pytest
import torch

from ocrcli.models.layers import (
    _padded_matmul,
    attention,
    gemm_rows_are_independent,
    rowwise_matmul,
    rowwise_silu,
)


@pytest.mark.parametrize("k,n", [(192, 192), (192, 512), (512, 192), (192, 215), (48, 7)])
def test_row_result_does_not_depend_on_the_other_rows(k, n):
    # (48, 7) is a shape the probe rejects on MKL: it checks the per-row fallback.
    gen = torch.Generator().manual_seed(1)
    w_t = torch.randn(k, n, generator=gen)
    probe = torch.randn(k, generator=gen)
    alone = rowwise_matmul(probe[None], w_t)[0]
    for m in range(1, 41):
        for pos in (0, m // 2, m - 1):
            rows = torch.randn(m, k, generator=gen)
            rows[pos] = probe
            assert torch.equal(rowwise_matmul(rows, w_t)[pos], alone), (m, pos)


def _padded_gemm_rows_independent(k: int, n: int, seed: int) -> bool:
    """The probe's question asked again on data it never saw, at every row count it checks
    and at the first, middle and last position: does a row of a padded GEMM come out the same
    whatever shares the call? (When a kernel's accumulation depends on the row count, random
    data shows it; agreeing bit for bit by chance is not a concern.)"""
    gen = torch.Generator().manual_seed(seed)
    w_t = torch.randn(k, n, generator=gen)
    probe = torch.randn(1, k, generator=gen)
    alone = _padded_matmul(probe, w_t)
    for m in range(2, 68):
        for pos in (0, m // 2, m - 1):
            rows = torch.randn(m, k, generator=gen)
            rows[pos] = probe[0]
            if not torch.equal(_padded_matmul(rows, w_t)[pos:pos + 1], alone):
                return False
    return True


@pytest.mark.parametrize("k,n", [(192, 192), (192, 512), (512, 192), (48, 7)])
def test_probe_answers_per_shape_what_the_gemm_does(k, n):
    """rowwise_matmul takes the fast path on the probe's yes: a yes that is not true would
    break losslessness, a no that is not true would cost speed."""
    answer = gemm_rows_are_independent(k, n, torch.float32)
    assert answer == _padded_gemm_rows_independent(k, n, seed=11), (k, n, answer)
    assert gemm_rows_are_independent(k, n, torch.float32) is answer  # one answer per shape


def test_rowwise_matmul_agrees_with_plain_products():
    w_t = torch.randn(192, 192)
    x = torch.randn(5, 192)
    torch.testing.assert_close(rowwise_matmul(x, w_t), x @ w_t)


@torch.no_grad()  # inference: training keeps the fused kernel
def test_attention_query_row_does_not_depend_on_the_other_queries():
    gen = torch.Generator().manual_seed(2)
    b, h, s, d = 3, 4, 256, 48
    k = torch.randn(b, h, s, d, generator=gen)
    v = torch.randn(b, h, s, d, generator=gen)
    q_one = torch.randn(b, h, 1, d, generator=gen)
    mask_one = torch.ones(b, 1, 1, s, dtype=torch.bool)
    mask_one[..., 100:] = False
    alone = attention(q_one, k, v, mask_one)
    for t in (2, 3, 4, 5, 7, 8):
        q = torch.randn(b, h, t, d, generator=gen)
        q[:, :, t - 1] = q_one[:, :, 0]
        mask = mask_one.expand(b, 1, t, s)
        assert torch.equal(attention(q, k, v, mask)[:, :, t - 1:], alone), t
    torch.testing.assert_close(alone, torch.nn.functional.scaled_dot_product_attention(
        q_one, k, v, attn_mask=mask_one))


@torch.no_grad()
def test_silu_of_a_row_does_not_depend_on_the_call():
    gen = torch.Generator().manual_seed(3)
    for width in (16, 24, 512):
        row = torch.randn(width, generator=gen) * 4
        alone = rowwise_silu(row[None])[0]
        for rows in (2, 5, 33, 100):  # 100 x 512 crosses ATen's parallel grain
            x = torch.randn(rows, width, generator=gen) * 4
            x[rows // 2] = row
            assert torch.equal(rowwise_silu(x)[rows // 2], alone), (width, rows)
    torch.testing.assert_close(rowwise_silu(row), torch.nn.functional.silu(row))
