"""Measure non-attention cascades on a CUDA GPU (the device machine's H100): `h100-cascades.csv`.

    python experiments/silicon/measure_cascades.py --out experiments/data/h100-cascades.csv

Needs PyTorch with CUDA and Triton; CI never runs it (the CSV it wrote is committed and
`python -m simulator.validate --measured FILE` reads it). What it measures, in BF16 (FP32
inside every kernel's arithmetic), for the shipped cascades `rmsnorm`, `layernorm`,
`softmax`, `gelu-mlp`, `rmsnorm-ffn` (RMSNorm + SwiGLU), `cross-entropy` and
`linear-attention`, each at six shapes (`SHAPES`: the `--shape` of each row, ranks as the
cascade file names them; `batch`: independent instances, linear attention's heads):

* **unfused**: one kernel per Einsum of the cascade file, in its order, every tensor handed
  to the next kernel through DRAM. Each Einsum has its candidate kernels (`Case.steps`): a
  GEMM `torch.mm` (cuBLAS); a reduction or element-wise Einsum the PyTorch op that
  computes it where there is one (`torch.amax`, `torch.mean`, `torch.sum`, `torch.sub`,
  `torch.div`, the tanh GELU) and Triton kernels of that Einsum alone (a row per program,
  `_sumsq_rows`, `_sumexp_rows`, `_dot_rows`; rows per program, `_reduce_rows`; a tile of
  rows, `_bcast_rows`; `_sqrt_eps`, `_scale_rows`, `_loss`, `_silu_mul`, `_phi`; linear
  attention's contractions over the keys split over the SMs, `_kv_atomic`,
  `_colsum_atomic`, into FP32 buffers zeroed first, and `_rows_matmul`, `_rows_dot_vec`).
  Every candidate is checked against the first (relative error under 2e-2), timed alone
  (`unfused-EINSUM` rows, its `backend`), and the fastest runs in the unfused path (the
  `backend` of its row names the picks in order);
* **fused**: what one would write to fuse the cascade (the `backend` column names it):
  RMSNorm, LayerNorm, softmax -- one Triton kernel holding a row in registers (and
  PyTorch's own `layer_norm` / `softmax` kernels, one launch each); the GELU MLP -- the
  first GEMM with the GELU in cuBLASLt's epilogue (`torch._addmm_activation`), then the
  second GEMM; RMSNorm + SwiGLU -- the fused RMSNorm kernel, one GEMM against [W1 | W3],
  a Triton SiLU-multiply, the last GEMM; cross-entropy -- the logits GEMM, then one Triton
  kernel streaming each row of logits and one-hot targets once (online max and sum of
  exponentials, the target's logit); linear attention -- one Triton kernel for phi(K)^T V
  and the key sum (chunks of keys split over the SMs, accumulated atomically), one for
  phi(Q), its products and the division;
* **fixed costs**, from microbenchmarks never fitted per shape: `launch` -- a CUDA graph of
  1,000 launches of a kernel that stores one word per program over four programs per SM,
  its time over 1,000 (a kernel's fixed cost on the GPU, back to back, host excluded);
  `dram-latency` -- one thread chasing pointers through a random cycle of 128-byte lines
  over 256 MiB (five times the L2; each line visited once, after do_bench's L2 flush), its
  time over the number of loads; also for the record, not used: `launch-1` (one program),
  `launch-eager` (one launch from Python, host included), `launch-graph-1` (a graph of one
  launch replayed alone: what a timing of a single call adds), `l2-latency` (the chase
  walking a 4 MiB cycle ten times) and `dram-latency-1g` (over 1 GiB);
* **ceilings**: the attention script's three (`measure_attention.ceilings`: a BF16 8192^3
  matrix product, a 4 GiB copy, an exp2 loop).

Method: fresh standard-normal inputs per shape (weights scaled by 1/sqrt(fan-in), targets
random); every implementation checked against a float32 reference on 256 rows spread over
the whole output (relative Frobenius error; `ok` = under 2e-2). Each is timed as one CUDA
graph of `calls` calls, each call on its own set of inputs (at least two sets, over 200 MB
together: four times the L2, as the attention script's `--graphs-below`), replayed by
`triton.testing.do_bench` (CUDA events, the L2 flushed before each replay, the median),
its time over `calls`: a call's time on a busy GPU, kernels back to back, with neither the
host's launches, nor one replay's own start, nor the L2 holding a call's inputs in it. The
fused versions and the unfused path are timed in three alternating rounds (the median kept;
`note` gives their spread and the calls). Shapes run in a seeded round-robin over the
cascades until `--deadline-s`; rows are flushed as measured, a failed shape or kernel is a
row with `ok` = 0 and its error in `note`.

The first call (experiments/data/h100-cascades-v1.csv) timed one call per replay, with
PyTorch's ops alone where one computed the Einsum: each time then held a constant 4-6 us
(a replay's start; the L2 that do_bench's zeroing flush leaves dirty) and PyTorch's
broadcasting `sub`/`div` ran at half the copy rate (`amax`, `mean` at three quarters) --
docs/silicon.md.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_attention as att  # noqa: E402  (the ceilings, the environment, bench)

COLUMNS = (
    "kind", "impl", "backend", "cascade", "shape", "batch", "time_s", "flops", "tflops",
    "rate", "unit", "max_abs_err", "rel_err", "ok", "note", "gpu", "sm_count",
    "clock_max_mhz", "driver", "torch", "cuda",
)  # fmt: skip
ROUNDS = 3
CHECK_ROWS = 256
BF16 = torch.bfloat16

# cascade -> shapes (rank extents as the cascade file names them; `B`: instances)
SHAPES = {
    "rmsnorm": [
        {"E": 4096, "P": 16384}, {"E": 8192, "P": 8192}, {"E": 2048, "P": 4096},
        {"E": 4096, "P": 2048}, {"E": 8192, "P": 32768}, {"E": 1024, "P": 65536},
    ],
    "layernorm": [
        {"E": 4096, "P": 16384}, {"E": 8192, "P": 8192}, {"E": 2048, "P": 4096},
        {"E": 4096, "P": 2048}, {"E": 8192, "P": 32768}, {"E": 1024, "P": 65536},
    ],
    "softmax": [
        {"M": 1024, "P": 65536}, {"M": 4096, "P": 16384}, {"M": 32768, "P": 2048},
        {"M": 8192, "P": 8192}, {"M": 2048, "P": 2048}, {"M": 16384, "P": 16384},
    ],
    "gelu-mlp": [
        {"E": 1024, "F": 4096, "O": 1024, "P": 8192},
        {"E": 2048, "F": 8192, "O": 2048, "P": 4096},
        {"E": 4096, "F": 16384, "O": 4096, "P": 2048},
        {"E": 4096, "F": 16384, "O": 4096, "P": 8192},
        {"E": 2048, "F": 8192, "O": 2048, "P": 16384},
        {"E": 1024, "F": 4096, "O": 1024, "P": 2048},
    ],
    "rmsnorm-ffn": [
        {"E": 4096, "F": 11008, "O": 4096, "P": 4096},
        {"E": 4096, "F": 14336, "O": 4096, "P": 2048},
        {"E": 2048, "F": 5632, "O": 2048, "P": 8192},
        {"E": 4096, "F": 14336, "O": 4096, "P": 8192},
        {"E": 5120, "F": 13824, "O": 5120, "P": 4096},
        {"E": 2048, "F": 8192, "O": 2048, "P": 2048},
    ],
    "cross-entropy": [
        {"D": 4096, "C": 128256, "P": 1024}, {"D": 4096, "C": 128256, "P": 4096},
        {"D": 4096, "C": 32000, "P": 4096}, {"D": 2048, "C": 32000, "P": 8192},
        {"D": 4096, "C": 50304, "P": 2048}, {"D": 8192, "C": 128256, "P": 2048},
    ],
    "linear-attention": [
        {"M": 4096, "P": 4096, "E": 64, "F": 64, "B": 64},
        {"M": 16384, "P": 16384, "E": 64, "F": 64, "B": 32},
        {"M": 4096, "P": 4096, "E": 128, "F": 128, "B": 128},
        {"M": 16384, "P": 16384, "E": 128, "F": 128, "B": 64},
        {"M": 65536, "P": 65536, "E": 64, "F": 64, "B": 16},
        {"M": 1024, "P": 1024, "E": 128, "F": 128, "B": 256},
    ],
}  # fmt: skip
SEED = 20261201


def np2(n: int) -> int:
    return triton.next_power_of_2(n)


# --------------------------------------------------------------------------------------
# Triton kernels: one Einsum each (unfused), or a cascade fused


@triton.jit
def _sumsq_rows(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    """out[row] = sum_e x[row, e]^2 * scale (MS, VAR)."""
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=0.0).to(tl.float32)
        acc += x * x
    tl.store(out_ptr + row, (tl.sum(acc, axis=0) * scale).to(out_ptr.dtype.element_ty))


@triton.jit
def _sqrt_eps(x_ptr, out_ptr, n, eps, BLOCK: tl.constexpr):
    """out = sqrt(x + eps) (RMS, SD)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1.0).to(tl.float32)
    tl.store(out_ptr + offs, tl.sqrt(x + eps).to(out_ptr.dtype.element_ty), mask=offs < n)


@triton.jit
def _scale_rows(x_ptr, g_ptr, r_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y[row, e] = x[row, e] * g[e] / r[row] (RMSNorm's Y)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=inside, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row).to(tl.float32)
    tl.store(y_ptr + row * n + cols, (x * g / r).to(y_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _exp_sub_rows(x_ptr, m_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y[row, m] = exp(x[row, m] - mx[row]) (softmax's SN)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=inside, other=0.0).to(tl.float32)
    m = tl.load(m_ptr + row).to(tl.float32)
    tl.store(y_ptr + row * n + cols, tl.exp(x - m).to(y_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _sumexp_rows(x_ptr, m_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[row] = sum_c exp(x[row, c] - m[row]) (cross-entropy's SE)."""
    row = tl.program_id(0).to(tl.int64)
    m = tl.load(m_ptr + row).to(tl.float32)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=float("-inf")).to(tl.float32)
        acc += tl.exp(x - m)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


@triton.jit
def _dot_rows(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[row] = sum_c a[row, c] * b[row, c] (cross-entropy's PICK: one-hot x logits)."""
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        a = tl.load(a_ptr + row * n + cols, mask=cols < n, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + row * n + cols, mask=cols < n, other=0.0).to(tl.float32)
        acc += a * b
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


@triton.jit
def _loss(gm_ptr, se_ptr, pick_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out = gm + log(se) - pick (cross-entropy's LOSS)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    gm = tl.load(gm_ptr + offs, mask=inside, other=0.0).to(tl.float32)
    se = tl.load(se_ptr + offs, mask=inside, other=1.0).to(tl.float32)
    pick = tl.load(pick_ptr + offs, mask=inside, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (gm + tl.log(se) - pick).to(out_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _silu_mul(a_ptr, b_ptr, y_ptr, n, stride_a, stride_b, BLOCK: tl.constexpr):
    """y[row, f] = silu(a[row, f]) * b[row, f] (SwiGLU's SG; a, b may be halves of one
    tensor: their row strides are given)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < n
    a = tl.load(a_ptr + row * stride_a + cols, mask=inside, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + row * stride_b + cols, mask=inside, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n + cols, (a / (1.0 + tl.exp(-a)) * b).to(y_ptr.dtype.element_ty),
             mask=inside)  # fmt: skip


@triton.jit
def _phi(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y = exp(min(x, 0)) + max(x, 0) (elu(x) + 1: linear attention's PK, PQ)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    y = tl.exp(tl.minimum(x, 0.0)) + tl.maximum(x, 0.0)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=offs < n)


@triton.jit
def _reduce_rows(x_ptr, out_ptr, rows, n, scale, OP: tl.constexpr, ROWS: tl.constexpr,
                 BLOCK: tl.constexpr):  # fmt: skip
    """A reduction of ROWS rows per program (OP 0: sum, 1: sum of squares, 2: max), times
    `scale` (sums): MU, MS, VAR, GM, SD with more bytes in flight per program."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = r < rows
    base = r.to(tl.int64) * n
    if OP == 2:
        acc = tl.full([ROWS, BLOCK], float("-inf"), dtype=tl.float32)
    else:
        acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        keep = live[:, None] & (cols[None, :] < n)
        x = tl.load(x_ptr + base[:, None] + cols[None, :], mask=keep, other=0.0).to(tl.float32)
        if OP == 0:
            acc += x
        elif OP == 1:
            acc += x * x
        else:
            acc = tl.maximum(acc, tl.where(keep, x, float("-inf")))
    if OP == 2:
        res = tl.max(acc, axis=1)
    else:
        res = tl.sum(acc, axis=1) * scale
    tl.store(out_ptr + r, res.to(out_ptr.dtype.element_ty), mask=live)


@triton.jit
def _bcast_rows(x_ptr, v_ptr, y_ptr, rows, n, OP: tl.constexpr, ROWS: tl.constexpr,
                BLOCK: tl.constexpr):  # fmt: skip
    """A tile of ROWS x BLOCK: y = x - v[row] (OP 0), x / v[row] (1), exp(x - v[row]) (2):
    LayerNorm's D and Y, softmax's SN and Y, linear attention's AV."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    keep = (r < rows)[:, None] & (cols < n)[None, :]
    at = r.to(tl.int64)[:, None] * n + cols[None, :]
    x = tl.load(x_ptr + at, mask=keep, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + r, mask=r < rows, other=1.0).to(tl.float32)[:, None]
    if OP == 0:
        y = x - v
    elif OP == 1:
        y = x / v
    else:
        y = tl.exp(x - v)
    tl.store(y_ptr + at, y.to(y_ptr.dtype.element_ty), mask=keep)


@triton.jit
def _colsum_atomic(x_ptr, out_ptr, m, chunk, E: tl.constexpr, BM: tl.constexpr):
    """KS[b, e] += the sum of a chunk of rows of x[b, :, e] (FP32, atomically)."""
    b = tl.program_id(0).to(tl.int64)
    lo = tl.program_id(1) * chunk
    e = tl.arange(0, E)
    acc = tl.zeros([E], dtype=tl.float32)
    for start in range(lo, lo + chunk, BM):
        rows = start + tl.arange(0, BM)
        x = tl.load(x_ptr + b * m * E + rows[:, None] * E + e[None, :],
                    mask=(rows < m)[:, None], other=0.0).to(tl.float32)  # fmt: skip
        acc += tl.sum(x, axis=0)
    tl.atomic_add(out_ptr + b * E + e, acc)


@triton.jit
def _kv_atomic(pk_ptr, v_ptr, kv_ptr, m, chunk, E: tl.constexpr, F: tl.constexpr,
               BM: tl.constexpr):  # fmt: skip
    """KV[b] += PK[b, chunk]^T V[b, chunk] (FP32, atomically)."""
    b = tl.program_id(0).to(tl.int64)
    lo = tl.program_id(1) * chunk
    e = tl.arange(0, E)
    f = tl.arange(0, F)
    acc = tl.zeros([E, F], dtype=tl.float32)
    for start in range(lo, lo + chunk, BM):
        rows = start + tl.arange(0, BM)
        inside = (rows < m)[:, None]
        pk = tl.load(pk_ptr + b * m * E + rows[:, None] * E + e[None, :], mask=inside, other=0.0)
        v = tl.load(v_ptr + b * m * F + rows[:, None] * F + f[None, :], mask=inside, other=0.0)
        acc += tl.dot(tl.trans(pk), v)
    tl.atomic_add(kv_ptr + b * E * F + e[:, None] * F + f[None, :], acc)


@triton.jit
def _rows_matmul(x_ptr, w_ptr, out_ptr, p, E: tl.constexpr, F: tl.constexpr,
                 BP: tl.constexpr):  # fmt: skip
    """NUM[b, rows] = PQ[b, rows] KV[b] (KV in FP32, rounded to BF16 for the tensor cores)."""
    b = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BP + tl.arange(0, BP)
    inside = (rows < p)[:, None]
    e = tl.arange(0, E)
    f = tl.arange(0, F)
    x = tl.load(x_ptr + b * p * E + rows[:, None] * E + e[None, :], mask=inside, other=0.0)
    w = tl.load(w_ptr + b * E * F + e[:, None] * F + f[None, :]).to(tl.bfloat16)
    out = tl.dot(x, w)
    tl.store(out_ptr + b * p * F + rows[:, None] * F + f[None, :],
             out.to(out_ptr.dtype.element_ty), mask=inside)  # fmt: skip


@triton.jit
def _rows_dot_vec(x_ptr, v_ptr, out_ptr, p, E: tl.constexpr, BP: tl.constexpr):
    """DEN[b, rows] = PQ[b, rows] . KS[b]."""
    b = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BP + tl.arange(0, BP)
    inside = rows < p
    e = tl.arange(0, E)
    x = tl.load(x_ptr + b * p * E + rows[:, None] * E + e[None, :], mask=inside[:, None],
                other=0.0).to(tl.float32)  # fmt: skip
    v = tl.load(v_ptr + b * E + e).to(tl.float32)
    tl.store(out_ptr + b * p + rows, tl.sum(x * v[None, :], axis=1).to(out_ptr.dtype.element_ty),
             mask=inside)  # fmt: skip


@triton.jit
def _rmsnorm_fused(x_ptr, g_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
    """RMSNorm of a row held in registers: one read of X, one write of Y."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=inside, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    rms = tl.sqrt(tl.sum(x * x, axis=0) / n + eps)
    tl.store(y_ptr + row * n + cols, (x * g / rms).to(y_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _layernorm_fused(x_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
    """LayerNorm (no scale, no shift) of a row held in registers."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=inside, other=0.0).to(tl.float32)
    mu = tl.sum(x, axis=0) / n
    d = tl.where(inside, x - mu, 0.0)
    sd = tl.sqrt(tl.sum(d * d, axis=0) / n + eps)
    tl.store(y_ptr + row * n + cols, (d / sd).to(y_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _softmax_fused(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """Row softmax of a row held in registers."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=inside, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty),
             mask=inside)  # fmt: skip


@triton.jit
def _xent_fused(l_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Cross-entropy of a row of logits and its one-hot targets, streamed once: a running
    maximum, the sum of exponentials rescaled to it, the target's logit."""
    row = tl.program_id(0).to(tl.int64)
    m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    pick = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < n
        x = tl.load(l_ptr + row * n + cols, mask=inside, other=float("-inf")).to(tl.float32)
        y = tl.load(y_ptr + row * n + cols, mask=inside, other=0.0).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        s = tl.where(m_new == float("-inf"), 0.0, s)
        m = m_new
        pick += tl.where(inside, x * y, 0.0)
    mx = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - mx), axis=0)
    loss = mx + tl.log(total) - tl.sum(pick, axis=0)
    tl.store(out_ptr + row, loss.to(out_ptr.dtype.element_ty))


@triton.jit
def _linattn_keys(k_ptr, v_ptr, b, m, lo, hi, E: tl.constexpr, F: tl.constexpr,
                  BM: tl.constexpr):  # fmt: skip
    """phi(K)^T V [E, F] and the key sum [E] over keys lo .. hi of instance b (FP32)."""
    e = tl.arange(0, E)
    f = tl.arange(0, F)
    acc = tl.zeros([E, F], dtype=tl.float32)
    ks = tl.zeros([E], dtype=tl.float32)
    for start in range(lo, hi, BM):
        rows = start + tl.arange(0, BM)
        inside = rows < m
        k = tl.load(k_ptr + b * m * E + rows[:, None] * E + e[None, :], mask=inside[:, None],
                    other=0.0).to(tl.float32)  # fmt: skip
        pk = tl.exp(tl.minimum(k, 0.0)) + tl.maximum(k, 0.0)
        pk = tl.where(inside[:, None], pk, 0.0)
        v = tl.load(v_ptr + b * m * F + rows[:, None] * F + f[None, :], mask=inside[:, None],
                    other=0.0)  # fmt: skip
        acc += tl.dot(tl.trans(pk.to(tl.bfloat16)), v)
        ks += tl.sum(pk, axis=0)
    return acc, ks


@triton.jit
def _linattn_rows(q_ptr, kv, ks, out_ptr, b, p, start, E: tl.constexpr, F: tl.constexpr,
                  BP: tl.constexpr):  # fmt: skip
    """The block of BP queries from `start`: phi(Q) KV / phi(Q) KS (KV in BF16)."""
    rows = start + tl.arange(0, BP)
    inside = rows < p
    e = tl.arange(0, E)
    f = tl.arange(0, F)
    q = tl.load(q_ptr + b * p * E + rows[:, None] * E + e[None, :], mask=inside[:, None],
                other=0.0).to(tl.float32)  # fmt: skip
    pq = tl.exp(tl.minimum(q, 0.0)) + tl.maximum(q, 0.0)
    num = tl.dot(pq.to(tl.bfloat16), kv)
    den = tl.sum(pq * ks[None, :], axis=1)
    y = (num / den[:, None]).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + b * p * F + rows[:, None] * F + f[None, :], y, mask=inside[:, None])


@triton.jit
def _linattn_kv(k_ptr, v_ptr, kv_ptr, ks_ptr, m, chunk, E: tl.constexpr, F: tl.constexpr,
                BM: tl.constexpr):  # fmt: skip
    """phi(K)^T V and the key sum of one instance's chunk of keys, added atomically to the
    instance's FP32 KV [E, F] and KS [E]."""
    b = tl.program_id(0).to(tl.int64)
    lo = tl.program_id(1) * chunk
    acc, ks = _linattn_keys(k_ptr, v_ptr, b, m, lo, lo + chunk, E, F, BM)
    e = tl.arange(0, E)
    f = tl.arange(0, F)
    tl.atomic_add(kv_ptr + b * E * F + e[:, None] * F + f[None, :], acc)
    tl.atomic_add(ks_ptr + b * E + e, ks)


@triton.jit
def _linattn_out(q_ptr, kv_ptr, ks_ptr, out_ptr, p, E: tl.constexpr, F: tl.constexpr,
                 BP: tl.constexpr):  # fmt: skip
    """A block of queries: phi(Q) KV / phi(Q) KS."""
    b = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, E)
    f = tl.arange(0, F)
    kv = tl.load(kv_ptr + b * E * F + e[:, None] * F + f[None, :]).to(tl.bfloat16)
    ks = tl.load(ks_ptr + b * E + e)
    _linattn_rows(q_ptr, kv, ks, out_ptr, b, p, tl.program_id(1) * BP, E, F, BP)


@triton.jit
def _linattn_one(q_ptr, k_ptr, v_ptr, out_ptr, m, p, E: tl.constexpr, F: tl.constexpr,
                 BM: tl.constexpr, BP: tl.constexpr):  # fmt: skip
    """One instance in one program: phi(K)^T V and the key sum over all its keys, held in
    registers, then its queries' outputs -- no atomics, nothing through memory between."""
    b = tl.program_id(0).to(tl.int64)
    acc, ks = _linattn_keys(k_ptr, v_ptr, b, m, 0, m, E, F, BM)
    kv = acc.to(tl.bfloat16)
    for start in range(0, p, BP):
        _linattn_rows(q_ptr, kv, ks, out_ptr, b, p, start, E, F, BP)


@triton.jit
def _touch(out_ptr):
    """The least a kernel does: one word stored per program."""
    pid = tl.program_id(0)
    tl.store(out_ptr + pid, pid)


@triton.jit
def _chase(nxt_ptr, out_ptr, start_ptr, n_iter):
    """One thread following a cycle of pointers: each load waits for the one before."""
    i = tl.load(start_ptr)
    for _ in range(n_iter):
        i = tl.load(nxt_ptr + i, cache_modifier=".cg")
    tl.store(out_ptr, i)


# --------------------------------------------------------------------------------------
# Launch helpers: each one kernel


def warps(block: int) -> int:
    return min(32, max(4, block // 512))


def sumsq_rows(x: torch.Tensor, scale: float) -> torch.Tensor:
    rows, n = x.shape
    out = torch.empty(rows, device=x.device, dtype=x.dtype)
    block = min(np2(n), 4096)
    _sumsq_rows[(rows,)](x, out, n, scale, BLOCK=block, num_warps=8)
    return out


def sqrt_eps(x: torch.Tensor, eps: float) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    _sqrt_eps[(triton.cdiv(n, 1024),)](x, out, n, eps, BLOCK=1024, num_warps=4)
    return out


def scale_rows(x: torch.Tensor, g: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    rows, n = x.shape
    y = torch.empty_like(x)
    block = min(np2(n), 2048)
    _scale_rows[(rows, triton.cdiv(n, block))](x, g, r, y, n, BLOCK=block, num_warps=4)
    return y


def exp_sub_rows(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    rows, n = x.shape
    y = torch.empty_like(x)
    block = min(np2(n), 2048)
    _exp_sub_rows[(rows, triton.cdiv(n, block))](x, m, y, n, BLOCK=block, num_warps=4)
    return y


def sumexp_rows(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    rows, n = x.shape
    out = torch.empty(rows, device=x.device, dtype=x.dtype)
    _sumexp_rows[(rows,)](x, m, out, n, BLOCK=min(np2(n), 4096), num_warps=8)
    return out


def dot_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    rows, n = a.shape
    out = torch.empty(rows, device=a.device, dtype=a.dtype)
    _dot_rows[(rows,)](a, b, out, n, BLOCK=min(np2(n), 4096), num_warps=8)
    return out


def loss_vec(gm: torch.Tensor, se: torch.Tensor, pick: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(gm)
    n = gm.numel()
    _loss[(triton.cdiv(n, 1024),)](gm, se, pick, out, n, BLOCK=1024, num_warps=4)
    return out


def silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    rows, n = a.shape
    y = torch.empty((rows, n), device=a.device, dtype=a.dtype)
    block = min(np2(n), 2048)
    _silu_mul[(rows, triton.cdiv(n, block))](a, b, y, n, a.stride(0), b.stride(0), BLOCK=block,
                                             num_warps=4)  # fmt: skip
    return y


def phi(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    n = x.numel()
    _phi[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096, num_warps=8)
    return y


def reduce_rows(x: torch.Tensor, op: int, scale: float = 1.0, out_dtype=None) -> torch.Tensor:
    """Several rows per program (`_reduce_rows`): at least 16 KB of each program's rows in
    flight."""
    n = x.shape[-1]
    rows = x.numel() // n
    out = torch.empty(x.shape[:-1], device=x.device, dtype=out_dtype or x.dtype)
    block = min(np2(n), 2048)
    many = max(2, 8192 // block)
    _reduce_rows[(triton.cdiv(rows, many),)](x, out, rows, n, scale, OP=op, ROWS=many,
                                             BLOCK=block, num_warps=8)  # fmt: skip
    return out


def bcast_rows(x: torch.Tensor, v: torch.Tensor, op: int) -> torch.Tensor:
    """`_bcast_rows` over x's rows (its last dimension), v one value per row."""
    n = x.shape[-1]
    rows = x.numel() // n
    y = torch.empty_like(x)
    block = min(np2(n), 1024)
    many = max(2, 2048 // block)
    grid = (triton.cdiv(rows, many), triton.cdiv(n, block))
    _bcast_rows[grid](x, v, y, rows, n, OP=op, ROWS=many, BLOCK=block, num_warps=4)
    return y


def _splits(b: int, m: int, bm: int, sms: int) -> int:
    """Chunks of M per instance so that the grid fills the SMs twice, in whole blocks."""
    splits = max(1, min(m // bm, -(-2 * sms // b)))
    chunk = -(-m // splits)
    return -(-chunk // bm) * bm


def colsum_atomic(x: torch.Tensor, sms: int) -> torch.Tensor:
    b, m, e = x.shape
    out = torch.zeros((b, e), device=x.device, dtype=torch.float32)
    chunk = _splits(b, m, 64, sms)
    _colsum_atomic[(b, triton.cdiv(m, chunk))](x, out, m, chunk, E=e, BM=64, num_warps=4)
    return out


def kv_atomic(pk: torch.Tensor, v: torch.Tensor, sms: int) -> torch.Tensor:
    b, m, e = pk.shape
    f = v.shape[2]
    kv = torch.zeros((b, e, f), device=pk.device, dtype=torch.float32)
    chunk = _splits(b, m, 64, sms)
    nw = 4 if e * f <= 4096 else 8
    _kv_atomic[(b, triton.cdiv(m, chunk))](pk, v, kv, m, chunk, E=e, F=f, BM=64, num_warps=nw)
    return kv


def rows_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    b, p, e = x.shape
    f = w.shape[2]
    out = torch.empty((b, p, f), device=x.device, dtype=x.dtype)
    nw = 4 if e * f <= 4096 else 8
    _rows_matmul[(b, triton.cdiv(p, 64))](x, w, out, p, E=e, F=f, BP=64, num_warps=nw)
    return out


def rows_dot_vec(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    b, p, e = x.shape
    out = torch.empty((b, p), device=x.device, dtype=x.dtype)
    _rows_dot_vec[(b, triton.cdiv(p, 64))](x, v, out, p, E=e, BP=64, num_warps=4)
    return out


def rmsnorm_fused(x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    rows, n = x.shape
    y = torch.empty_like(x)
    block = np2(n)
    _rmsnorm_fused[(rows,)](x, g, y, n, eps, BLOCK=block, num_warps=min(16, warps(block)))
    return y


def layernorm_fused(x: torch.Tensor, eps: float) -> torch.Tensor:
    rows, n = x.shape
    y = torch.empty_like(x)
    block = np2(n)
    _layernorm_fused[(rows,)](x, y, n, eps, BLOCK=block, num_warps=min(16, warps(block)))
    return y


def softmax_fused(x: torch.Tensor) -> torch.Tensor:
    rows, n = x.shape
    y = torch.empty_like(x)
    block = np2(n)
    _softmax_fused[(rows,)](x, y, n, BLOCK=block, num_warps=warps(block))
    return y


def xent_fused(logits: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
    rows, n = logits.shape
    out = torch.empty(rows, device=logits.device, dtype=logits.dtype)
    _xent_fused[(rows,)](logits, onehot, out, n, BLOCK=2048, num_warps=8)
    return out


def linattn_fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sms: int,
                  fill: int = 2, bm: int = 64, bp: int = 64, warps: int | None = None,
                  stages: int | None = None) -> torch.Tensor:  # fmt: skip
    """The two kernels: the keys' chunks split so that the grid fills the SMs `fill`
    times; tiles of `bm` keys and `bp` queries (the first call: 2, 64, 64, the warps by
    the tile, Triton's stages)."""
    b, m, e = k.shape
    p, f = q.shape[1], v.shape[2]
    kv = torch.zeros((b, e, f), device=q.device, dtype=torch.float32)
    ks = torch.zeros((b, e), device=q.device, dtype=torch.float32)
    splits = max(1, min(m // bm, -(-fill * sms // b)))
    chunk = -(-m // splits)
    chunk = -(-chunk // bm) * bm
    nw = warps or (4 if e * f <= 4096 else 8)
    extra = {} if stages is None else {"num_stages": stages}
    _linattn_kv[(b, triton.cdiv(m, chunk))](k, v, kv, ks, m, chunk, E=e, F=f, BM=bm,
                                            num_warps=nw, **extra)  # fmt: skip
    out = torch.empty((b, p, f), device=q.device, dtype=q.dtype)
    _linattn_out[(b, triton.cdiv(p, bp))](q, kv, ks, out, p, E=e, F=f, BP=bp, num_warps=nw,
                                          **extra)  # fmt: skip
    return out


def linattn_one(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bm: int = 64,
                warps: int = 8) -> torch.Tensor:  # fmt: skip
    """One kernel, a program per instance (:func:`_linattn_one`)."""
    b, m, e = k.shape
    p, f = q.shape[1], v.shape[2]
    out = torch.empty((b, p, f), device=q.device, dtype=q.dtype)
    _linattn_one[(b,)](q, k, v, out, m, p, E=e, F=f, BM=bm, BP=bm, num_warps=warps)
    return out


# The second call's fused linear attention: the two kernels over a few tile sizes, warps,
# stages and splits, and one kernel per instance -- each a backend of its own, timed as the
# others (the fastest that passes is the one `validate` keeps).
LINATTN_TUNED = tuple(
    (fill, bm, warps, stages)
    for fill in (2, 4)
    for bm in (64, 128)
    for warps in (4, 8)
    for stages in (2, 3)
)


# --------------------------------------------------------------------------------------
# The cascades: inputs, the unfused kernels (one per Einsum), the fused versions, a float32
# reference on rows spread over the output


class Case:
    """One cascade at one shape, on one set of inputs. The unfused path's steps are the
    cascade's Einsums in order, each with its candidate kernels (backend -> fn(tensors));
    `picks` names the one each step runs (the fastest that passed, :func:`measure_case`)."""

    def __init__(self, name: str, shape: dict[str, int], gen: torch.Generator, sms: int):
        self.name, self.shape, self.sms = name, shape, sms
        self.batch = shape.get("B", 1)
        self.inputs: dict[str, torch.Tensor] = {}
        self.steps: list[tuple[str, dict[str, object]]] = []
        self.picks: dict[str, str] = {}
        self.fused: dict[str, object] = {}  # backend -> fn() -> output
        self.out = ""
        self.flops = 0.0
        self.held: dict[str, torch.Tensor] = {}
        getattr(self, "_" + name.replace("-", "_"))(gen, sms)

    @property
    def shape_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.shape.items() if k != "B")

    @property
    def input_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.inputs.values())

    def randn(self, gen, *dims, scale: float = 1.0) -> torch.Tensor:
        x = torch.randn(*dims, device="cuda", dtype=torch.float32, generator=gen)
        return (x * scale).to(BF16)

    def unfused(self) -> torch.Tensor:
        t = dict(self.inputs)
        for name, kernels in self.steps:
            t[name] = kernels[self.picks.get(name, next(iter(kernels)))](t)
        return t[self.out]

    def hold(self) -> None:
        """Every intermediate, by each step's first kernel: the inputs of the steps alone."""
        t = dict(self.inputs)
        for name, kernels in self.steps:
            t[name] = next(iter(kernels.values()))(t)
        self.held = t

    # ---- the cascades ----

    def _rmsnorm(self, gen, sms):
        e, p = self.shape["E"], self.shape["P"]
        self.inputs = {"X": self.randn(gen, p, e), "G": self.randn(gen, e)}
        self.steps = [
            ("MS", {
                "triton-row": lambda t: sumsq_rows(t["X"], 1.0 / e),
                "triton-rows": lambda t: reduce_rows(t["X"], 1, 1.0 / e),
            }),
            ("RMS", {"triton": lambda t: sqrt_eps(t["MS"], 1e-6)}),
            ("Y", {"triton": lambda t: scale_rows(t["X"], t["G"], t["RMS"])}),
        ]  # fmt: skip
        self.out = "Y"
        x, g = self.inputs["X"], self.inputs["G"]
        self.fused = {"triton": lambda: rmsnorm_fused(x, g, 1e-6)}

    def _layernorm(self, gen, sms):
        e, p = self.shape["E"], self.shape["P"]
        self.inputs = {"X": self.randn(gen, p, e)}
        self.steps = [
            ("MU", {
                "torch.mean": lambda t: torch.mean(t["X"], dim=-1),
                "triton-rows": lambda t: reduce_rows(t["X"], 0, 1.0 / e),
            }),
            ("D", {
                "torch.sub": lambda t: torch.sub(t["X"], t["MU"][:, None]),
                "triton": lambda t: bcast_rows(t["X"], t["MU"], 0),
            }),
            ("VAR", {
                "triton-row": lambda t: sumsq_rows(t["D"], 1.0 / e),
                "triton-rows": lambda t: reduce_rows(t["D"], 1, 1.0 / e),
            }),
            ("SD", {"triton": lambda t: sqrt_eps(t["VAR"], 1e-5)}),
            ("Y", {
                "torch.div": lambda t: torch.div(t["D"], t["SD"][:, None]),
                "triton": lambda t: bcast_rows(t["D"], t["SD"], 1),
            }),
        ]  # fmt: skip
        self.out = "Y"
        x = self.inputs["X"]
        self.fused = {
            "triton": lambda: layernorm_fused(x, 1e-5),
            "torch.layer_norm": lambda: F.layer_norm(x, (e,), eps=1e-5),
        }

    def _softmax(self, gen, sms):
        m, p = self.shape["M"], self.shape["P"]
        self.inputs = {"X": self.randn(gen, p, m, scale=4.0)}
        self.steps = [
            ("GM", {
                "torch.amax": lambda t: torch.amax(t["X"], dim=-1),
                "triton-rows": lambda t: reduce_rows(t["X"], 2),
            }),
            ("SN", {
                "triton": lambda t: bcast_rows(t["X"], t["GM"], 2),
                "triton-2d": lambda t: exp_sub_rows(t["X"], t["GM"]),
            }),
            ("SD", {
                "torch.sum": lambda t: torch.sum(t["SN"], dim=-1),
                "triton-rows": lambda t: reduce_rows(t["SN"], 0),
            }),
            ("Y", {
                "torch.div": lambda t: torch.div(t["SN"], t["SD"][:, None]),
                "triton": lambda t: bcast_rows(t["SN"], t["SD"], 1),
            }),
        ]  # fmt: skip
        self.out = "Y"
        x = self.inputs["X"]
        self.fused = {"torch.softmax": lambda: torch.softmax(x, dim=-1)}
        if m <= 32768:
            self.fused["triton"] = lambda: softmax_fused(x)

    def _gelu_mlp(self, gen, sms):
        e, f, o, p = (self.shape[k] for k in "EFOP")
        self.inputs = {
            "X": self.randn(gen, p, e),
            "W1": self.randn(gen, e, f, scale=e**-0.5),
            "W2": self.randn(gen, f, o, scale=f**-0.5),
        }
        self.steps = [
            ("H", {"torch.mm": lambda t: torch.mm(t["X"], t["W1"])}),
            ("A", {"torch.gelu-tanh": lambda t: F.gelu(t["H"], approximate="tanh")}),
            ("Z", {"torch.mm": lambda t: torch.mm(t["A"], t["W2"])}),
        ]
        self.out = "Z"
        x, w1, w2 = (self.inputs[k] for k in ("X", "W1", "W2"))
        bias = torch.zeros(f, device="cuda", dtype=BF16)
        self.fused = {
            "cublaslt-gelu-epilogue+mm": lambda: torch.mm(
                torch._addmm_activation(bias, x, w1, use_gelu=True), w2
            )
        }
        self.flops = 2.0 * p * e * f + 2.0 * p * f * o

    def _rmsnorm_ffn(self, gen, sms):
        e, f, o, p = (self.shape[k] for k in "EFOP")
        self.inputs = {
            "X": self.randn(gen, p, e),
            "G": self.randn(gen, e),
            "W1": self.randn(gen, e, f, scale=e**-0.5),
            "W3": self.randn(gen, e, f, scale=e**-0.5),
            "W2": self.randn(gen, f, o, scale=f**-0.5),
        }
        self.steps = [
            ("MS", {
                "triton-row": lambda t: sumsq_rows(t["X"], 1.0 / e),
                "triton-rows": lambda t: reduce_rows(t["X"], 1, 1.0 / e),
            }),
            ("RMS", {"triton": lambda t: sqrt_eps(t["MS"], 1e-6)}),
            ("Y", {"triton": lambda t: scale_rows(t["X"], t["G"], t["RMS"])}),
            ("H1", {"torch.mm": lambda t: torch.mm(t["Y"], t["W1"])}),
            ("H3", {"torch.mm": lambda t: torch.mm(t["Y"], t["W3"])}),
            ("SG", {"triton": lambda t: silu_mul(t["H1"], t["H3"])}),
            ("Z", {"torch.mm": lambda t: torch.mm(t["SG"], t["W2"])}),
        ]  # fmt: skip
        self.out = "Z"
        x, g, w2 = (self.inputs[k] for k in ("X", "G", "W2"))
        w13 = torch.cat([self.inputs["W1"], self.inputs["W3"]], dim=1).contiguous()

        def fused():
            h13 = torch.mm(rmsnorm_fused(x, g, 1e-6), w13)
            return torch.mm(silu_mul(h13[:, :f], h13[:, f:]), w2)

        self.fused = {"triton-rmsnorm+mm[W1|W3]+triton-silu-mul+mm": fused}
        self.flops = 2.0 * 2 * p * e * f + 2.0 * p * f * o

    def _cross_entropy(self, gen, sms):
        d, c, p = self.shape["D"], self.shape["C"], self.shape["P"]
        target = torch.randint(0, c, (p,), device="cuda", generator=gen)
        onehot = torch.zeros(p, c, device="cuda", dtype=BF16)
        onehot[torch.arange(p, device="cuda"), target] = 1.0
        self.inputs = {
            "X": self.randn(gen, p, d),
            "W": self.randn(gen, d, c, scale=d**-0.5),
            "Y": onehot,
        }
        self.steps = [
            ("L", {"torch.mm": lambda t: torch.mm(t["X"], t["W"])}),
            ("GM", {
                "torch.amax": lambda t: torch.amax(t["L"], dim=-1),
                "triton-rows": lambda t: reduce_rows(t["L"], 2),
            }),
            ("SE", {"triton-row": lambda t: sumexp_rows(t["L"], t["GM"])}),
            ("PICK", {"triton-row": lambda t: dot_rows(t["Y"], t["L"])}),
            ("LOSS", {"triton": lambda t: loss_vec(t["GM"], t["SE"], t["PICK"])}),
        ]  # fmt: skip
        self.out = "LOSS"
        x, w = self.inputs["X"], self.inputs["W"]
        self.fused = {"mm+triton-online-xent": lambda: xent_fused(torch.mm(x, w), onehot)}
        self.flops = 2.0 * p * d * c

    def _linear_attention(self, gen, sms):
        m, p, e, f, b = (self.shape[k] for k in "MPEFB")
        self.inputs = {
            "Q": self.randn(gen, b, p, e),
            "K": self.randn(gen, b, m, e),
            "V": self.randn(gen, b, m, f),
        }
        # KV and KS accumulate atomically in FP32, in buffers zeroed first (a memset each)
        self.steps = [
            ("PK", {"triton": lambda t: phi(t["K"])}),
            ("PQ", {"triton": lambda t: phi(t["Q"])}),
            ("KV", {"triton-split-m": lambda t: kv_atomic(t["PK"], t["V"], sms)}),
            ("KS", {
                "triton-split-m": lambda t: colsum_atomic(t["PK"], sms),
                "torch.sum": lambda t: torch.sum(t["PK"], dim=1, dtype=torch.float32),
            }),
            ("NUM", {"triton": lambda t: rows_matmul(t["PQ"], t["KV"])}),
            ("DEN", {"triton": lambda t: rows_dot_vec(t["PQ"], t["KS"])}),
            ("AV", {
                "triton": lambda t: bcast_rows(t["NUM"], t["DEN"], 1),
                "torch.div": lambda t: torch.div(t["NUM"], t["DEN"][:, :, None]),
            }),
        ]  # fmt: skip
        self.out = "AV"
        q, k, v = (self.inputs[x] for x in "QKV")
        self.fused = {"triton-kv+triton-out": lambda: linattn_fused(q, k, v, sms)}
        for fill, bm, w, st in LINATTN_TUNED:
            self.fused[f"triton-kv+triton-out fill{fill} bm{bm} w{w} s{st}"] = (
                lambda fill=fill, bm=bm, w=w, st=st: linattn_fused(q, k, v, sms, fill, bm, bm,
                                                                   w, st))  # fmt: skip
        for bm, w in ((32, 4), (64, 4), (64, 8)):
            self.fused[f"triton-one bm{bm} w{w}"] = lambda bm=bm, w=w: linattn_one(q, k, v, bm, w)
        self.flops = b * (2.0 * m * e * f + 2.0 * p * e * f + 2.0 * p * e)

    # ---- the reference ----

    def rows(self) -> torch.Tensor:
        p = self.shape["P"]
        return torch.linspace(0, p - 1, min(p, CHECK_ROWS), device="cuda").round().long()

    def reference(self) -> torch.Tensor:
        """float32 output at `rows()` (linear attention: of instance 0)."""
        r = self.rows()
        t = {k: v.float() for k, v in self.inputs.items()}
        if self.name in ("rmsnorm", "rmsnorm-ffn"):
            x = t["X"][r]
            y = x * t["G"] / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)
            if self.name == "rmsnorm":
                return y
            h1, h3 = y @ t["W1"], y @ t["W3"]
            return (h1 * torch.sigmoid(h1) * h3) @ t["W2"]
        if self.name == "layernorm":
            x = t["X"][r]
            d = x - x.mean(-1, keepdim=True)
            return d / torch.sqrt((d * d).mean(-1, keepdim=True) + 1e-5)
        if self.name == "softmax":
            return torch.softmax(t["X"][r], dim=-1)
        if self.name == "gelu-mlp":
            h = t["X"][r] @ t["W1"]
            a = h * torch.sigmoid(h * (1.5957691216057308 + 0.07135481627260089 * h * h))
            return a @ t["W2"]
        if self.name == "cross-entropy":
            logits = t["X"][r] @ t["W"]
            return torch.logsumexp(logits, -1) - (logits * t["Y"][r]).sum(-1)
        if self.name == "linear-attention":

            def phi32(x):
                return torch.exp(torch.clamp(x, max=0)) + torch.clamp(x, min=0)

            pk, pq = phi32(t["K"][0]), phi32(t["Q"][0][r])
            return (pq @ (pk.T @ t["V"][0])) / (pq @ pk.sum(0))[:, None]
        raise ValueError(self.name)

    def picked(self, out: torch.Tensor) -> torch.Tensor:
        r = self.rows()
        return (out[0] if self.name == "linear-attention" else out)[r].float()


def check(case: Case, out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    got = case.picked(out)
    if not bool(torch.isfinite(got).all()):
        return float("inf"), float("inf")
    diff = got - ref
    return float(diff.abs().max()), float(diff.norm() / ref.norm())


# --------------------------------------------------------------------------------------
# Timing


def graphed(fn):
    """A CUDA graph of `fn`'s kernels (warmed up on a side stream first)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def per_call(fns, budget_ms: float = 100.0) -> float:
    """Seconds per call of one CUDA graph of the calls `fns` (each on its own inputs),
    replayed by do_bench (the L2 flushed before each replay)."""
    graph = graphed(lambda: [fn() for fn in fns])
    t = att.bench(graph.replay, budget_ms) / len(fns)
    del graph
    return t


def row(env, **fields) -> dict[str, str]:
    out = {c: "" for c in COLUMNS}
    out.update(env)
    out.update({k: (f"{v:.6g}" if isinstance(v, float) else str(v)) for k, v in fields.items()})
    return out


class Sink:
    """The CSV writer; the attention script's ceiling rows mapped onto these columns."""

    def __init__(self, fh):
        self.fh = fh
        self.writer = csv.DictWriter(fh, COLUMNS, extrasaction="ignore")
        self.writer.writeheader()

    def writerow(self, d: dict) -> None:
        self.writer.writerow({c: d.get(c, "") for c in COLUMNS})
        self.fh.flush()


ROTATE_BYTES = 200e6  # the calls of one timing read distinct inputs: four times the L2
MAX_CALLS = 32


def rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    got, ref = got.float(), ref.float()
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    return float((got - ref).norm() / ref.norm())


def measure_case(env, sink, name: str, shape: dict[str, int], sms: int) -> None:
    """One cascade at one shape: `calls` input sets (distinct, over ROTATE_BYTES together,
    at least two); each unfused step's candidate kernels checked against its first and
    timed alone, the fastest picked; the fused versions and the unfused path (the picks)
    checked against float32 and timed in alternating rounds."""
    common = {"kind": "cascade", "cascade": f"cascades/{name}.yaml",
              "shape": ",".join(f"{k}={v}" for k, v in shape.items() if k != "B"),
              "batch": shape.get("B", 1)}  # fmt: skip

    def failed(impl, backend, exc):
        sink.writerow(row(env, **common, impl=impl, backend=backend, ok=0,
                          note=f"failed: {str(exc).splitlines()[0][:160]}"))  # fmt: skip
        print(f"{name} {common['shape']} {impl} {backend}: FAILED {exc}", flush=True)

    seed = SEED + sum(shape.values()) * 7 + len(name)
    try:
        first = Case(name, shape, torch.Generator(device="cuda").manual_seed(seed), sms)
        calls = int(min(MAX_CALLS, max(2, math.ceil(ROTATE_BYTES / first.input_bytes))))
        cases = [first] + [
            Case(name, shape, torch.Generator(device="cuda").manual_seed(seed + i), sms)
            for i in range(1, calls)
        ]
        ref = first.reference()
        for c in cases:
            c.hold()
    except Exception as exc:  # noqa: BLE001 - a failed shape is a row, not the end
        failed("unfused", "", exc)
        torch.cuda.empty_cache()
        return
    note = f"cuda graph of {calls} calls on distinct inputs"
    # each step's candidates: checked against the first, timed alone, the fastest picked
    for einsum, kernels in first.steps:
        best = None
        want = first.held[einsum]
        for backend, kernel in kernels.items():
            try:
                rel = rel_error(kernel(first.held), want)
                if rel > 2e-2:
                    raise ValueError(f"differs from {next(iter(kernels))} by {rel:.2g}")
                t = per_call([lambda c=c, b=backend, e=einsum: dict(c.steps)[e][b](c.held)
                              for c in cases], 50.0)  # fmt: skip
            except Exception as exc:  # noqa: BLE001
                failed(f"unfused-{einsum}", backend, exc)
                continue
            sink.writerow(row(env, **common, impl=f"unfused-{einsum}", backend=backend,
                              time_s=t, rel_err=rel, ok=1,
                              note=f"one kernel of the unfused path, alone; {note}"))  # fmt: skip
            if best is None or t < best[0]:
                best = (t, backend)
        if best is not None:
            for c in cases:
                c.picks[einsum] = best[1]
    for c in cases:
        c.held = {}
    picked = "+".join(first.picks.get(e, "?") for e, _k in first.steps)
    impls = {f"fused:{b}": [lambda c=c, b=b: c.fused[b]() for c in cases] for b in first.fused}
    impls[f"unfused:{picked}"] = [c.unfused for c in cases]
    runs = {}
    for key, fns in impls.items():
        impl, backend = key.split(":", 1)
        try:
            out = fns[0]()
            torch.cuda.synchronize()
            err, rel = check(first, out, ref)
            del out
            runs[key] = (fns, err, rel, [])
        except Exception as exc:  # noqa: BLE001
            failed(impl, backend, exc)
            torch.cuda.empty_cache()
    try:
        for _ in range(ROUNDS):
            for fns, _e, _r, times in runs.values():
                times.append(per_call(fns, 100.0))
    except Exception as exc:  # noqa: BLE001
        for key in runs:
            failed(*key.split(":", 1), exc)
        runs = {}
    for key, (_fns, err, rel, times) in runs.items():
        impl, backend = key.split(":", 1)
        t = statistics.median(times)
        spread = (max(times) - min(times)) / t
        ok = int(rel < 2e-2)
        extra = {"flops": first.flops, "tflops": first.flops / t / 1e12} if first.flops else {}
        sink.writerow(row(env, **common, impl=impl, backend=backend, time_s=t, max_abs_err=err,
                          rel_err=rel, ok=ok, **extra,
                          note=f"{note}; median of {len(times)} rounds, "
                          f"spread {spread:.1%}"))  # fmt: skip
        print(f"{name:16s} {common['shape']:28s} b{common['batch']:<3d} {impl:8s} "
              f"{t * 1e6:10.1f} us rel err {rel:.2g} spread {spread:.1%} x{calls} {backend}",
              flush=True)  # fmt: skip
    del runs, cases, first, ref, impls
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def fixed_costs(env, sink) -> None:
    """The launch time and the DRAM latency (microbenchmarks; see the module docstring)."""
    sms = int(env["sm_count"])
    out = torch.zeros(4 * sms, device="cuda", dtype=torch.int32)
    for impl, programs in (("launch", 4 * sms), ("launch-1", 1)):
        n = 1000
        graph = graphed(lambda programs=programs, n=n: [_touch[(programs,)](out) for _ in range(n)])
        t = att.bench(graph.replay, 300.0) / n
        sink.writerow(row(env, kind="ceiling", impl=impl, backend="triton", time_s=t,
                          rate=1.0 / t, unit="1/s", ok=1,
                          note=f"cuda graph of {n} launches of a kernel storing one word per "
                          f"program, {programs} programs; time / {n}"))  # fmt: skip
        print(f"{impl}: {t * 1e6:.3f} us per kernel", flush=True)
        del graph
    t = att.bench(lambda: _touch[(4 * sms,)](out), 200.0)
    sink.writerow(row(env, kind="ceiling", impl="launch-eager", backend="triton", time_s=t,
                      rate=1.0 / t, unit="1/s", ok=1,
                      note="one launch from Python (host included), do_bench median"))  # fmt: skip
    print(f"launch-eager: {t * 1e6:.3f} us", flush=True)
    graph = graphed(lambda: _touch[(4 * sms,)](out))
    t = att.bench(graph.replay, 200.0)
    del graph
    sink.writerow(row(env, kind="ceiling", impl="launch-graph-1", backend="triton", time_s=t,
                      rate=1.0 / t, unit="1/s", ok=1,
                      note="a cuda graph of one launch, replayed alone (its events around "
                      "the replay), do_bench median"))  # fmt: skip
    print(f"launch-graph-1: {t * 1e6:.3f} us", flush=True)
    line = 16  # int64 words per 128-byte line
    # the L2 chase walks its 4 MiB cycle ten times: the first walk misses (do_bench flushes
    # the L2 before each run), the nine others hit
    for impl, region, n_iter in (("l2-latency", 4 << 20, 327680),
                                 ("dram-latency", 256 << 20, 20000),
                                 ("dram-latency-1g", 1 << 30, 10000)):  # fmt: skip
        lines = region // 128
        gen = torch.Generator(device="cuda").manual_seed(SEED + lines)
        perm = torch.randperm(lines, device="cuda", generator=gen)
        nxt = torch.zeros(lines * line, device="cuda", dtype=torch.int64)
        nxt[perm * line] = torch.roll(perm, -1) * line  # one cycle through every line
        res = torch.zeros(1, device="cuda", dtype=torch.int64)
        start = perm[:1] * line
        _chase[(1,)](nxt, res, start, 10, num_warps=1)
        torch.cuda.synchronize()
        t = att.bench(lambda nxt=nxt, res=res, start=start, n_iter=n_iter: _chase[(1,)](
            nxt, res, start, n_iter, num_warps=1), 300.0) / n_iter  # fmt: skip
        # the chase landed where the cycle says: every load was a real dependent load
        expect = int(perm[n_iter % lines]) * line
        ok = int(int(res.item()) == expect)
        sink.writerow(row(env, kind="ceiling", impl=impl, backend="triton", time_s=t,
                          rate=1.0 / t, unit="1/s", ok=ok,
                          note=f"one thread chasing a random cycle of 128-byte lines over "
                          f"{region >> 20} MiB, {n_iter} dependent loads (.cg); "
                          "time / loads"))  # fmt: skip
        print(f"{impl}: {t * 1e9:.1f} ns per load (chase ok={ok})", flush=True)
        del nxt, perm, res
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true", help="one small shape per cascade")
    p.add_argument("--only", help="comma-separated cascades (default: all)")
    p.add_argument("--deadline-s", type=float, default=None,
                   help="stop taking new shapes after this many seconds")  # fmt: skip
    p.add_argument("--no-ceilings", action="store_true", help="skip the ceilings")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    start = time.perf_counter()
    env = att.environment()
    sms = int(env["sm_count"])
    names = args.only.split(",") if args.only else list(SHAPES)
    # round-robin over the cascades, each cascade's shapes in a seeded order: a deadline
    # cuts every cascade alike
    order = {n: random.Random(SEED + i).sample(SHAPES[n], len(SHAPES[n])) for i, n in
             enumerate(names)}  # fmt: skip
    if args.quick:
        order = {n: [min(s, key=lambda x: math.prod(x.values()))] for n, s in order.items()}
    jobs = [(n, order[n][i]) for i in range(max(len(v) for v in order.values())) for n in names
            if i < len(order[n])]  # fmt: skip
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = 0
    with out.open("w", newline="", encoding="utf-8") as fh:
        sink = Sink(fh)
        if not args.no_ceilings:
            att.ceilings(env, sink, fh.flush)
            fixed_costs(env, sink)
        for name, shape in jobs:
            if args.deadline_s is not None and time.perf_counter() - start > args.deadline_s:
                print(f"deadline: {len(jobs) - done} shapes left", flush=True)
                break
            measure_case(env, sink, name, shape, sms)
            done += 1
    print(f"wrote {out}: {done} of {len(jobs)} shapes in {time.perf_counter() - start:.0f} s",
          flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
