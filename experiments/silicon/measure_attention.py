"""Measure attention on a CUDA GPU (the device machine's H100): `h100-attention.csv`.

    python experiments/silicon/measure_attention.py --out experiments/data/h100-attention.csv

Needs PyTorch with CUDA, and Triton for the exp2 ceiling; CI never runs it (the CSV it wrote
is committed and `python -m simulator.validate` reads that). What it measures:

* **fused prefill**: forward attention in BF16 through `scaled_dot_product_attention`, once
  per backend it offers (cuDNN, flash, memory-efficient), over head dimension 64/128/256 x
  1K..64K tokens x full/causal, 32 query heads sharing 8 K/V heads (`enable_gqa`; a backend
  that cannot group gets K and V expanded before the timed region, said in `note`), the
  batch sized to 64K tokens so every shape fills the chip;
* **unfused prefill**: the unfused cascade's phases as separate kernels -- QK^T with the
  scale (a batched GEMM whose rows are a K/V head's group of query heads x the queries, so
  K/V are not expanded), the softmax (one kernel reading each row of scores whole, the
  mask applied inside it where causal), AV -- where the scores fit (fewer requests if
  needed);
* **decode**: one query per request, batch 64, 32 query heads, 8 K/V heads, head
  dimension 128, against 4K..32K cached keys, fused and unfused;
* **ceilings**: a large BF16 matrix product, a device-to-device copy, an exp2 loop in
  registers (Triton) -- the only rates the architecture file takes from the device.

Method: inputs are fresh standard-normal BF16 tensors per shape (never zeros); each kernel
is timed with `triton.testing.do_bench` (CUDA events, L2 flushed between runs, median of
the runs in its time budget, warm-up first), full and causal on the same inputs in three
alternating rounds, the median of the rounds kept (`note` gives their spread: the chip's
clock drifts with its temperature between shapes); every backend's output is checked against a
float32 reference on one K/V head's group (the last 256 queries where the sequence is
long, so the causal diagonal is covered). The CSV holds the device, driver, torch and CUDA
versions on every row. Rows are flushed as they are measured.

`--grid wide` measures the wide grid (`wide_prefill`, `wide_decode`: the three head
families, small batches, decode at several batches and contexts) in a seeded order until
`--deadline-s`, `--part K/N` of it per call (experiments/data/h100-attention-wide.csv:
two calls). `--graphs-below N` times decode and the prefill shapes up to N tokens again as
CUDA graphs of calls on distinct inputs (experiments/data/h100-attention-graphs.csv: the
same times within 1% at the median; the smallest 3-5 us less); on PyTorch 2.11 capturing
cuDNN's multi-query prefill at 8K tokens, d64, hit an illegal memory access, which ends
the process (the CUDA context is lost): that file stops there.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch.nn.attention import SDPBackend, sdpa_kernel

try:
    import triton
    import triton.language as tl
    from triton.testing import do_bench
except ImportError:  # pragma: no cover - the device machine has Triton
    triton = None

BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}
Q_HEADS, KV_HEADS = 32, 8
PREFILL_TOKENS = 65536  # batch x sequence of every prefill shape
SEQS = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
HEAD_DIMS = (64, 128, 256)
DECODE_BATCH, DECODE_CONTEXTS = 64, (4096, 8192, 16384, 32768)
UNFUSED_SCORE_BYTES = 20e9  # the unfused path runs where its scores fit this
ROUNDS = 3  # alternating full/causal timing rounds per shape (median kept)
COLUMNS = (
    "kind", "impl", "backend", "batch", "q_heads", "kv_heads", "queries", "keys",
    "head_dim", "causal", "time_s", "flops", "tflops", "rate", "unit", "max_abs_err",
    "rel_err", "ok", "note", "gpu", "sm_count", "clock_max_mhz", "driver", "torch", "cuda",
)  # fmt: skip


def environment() -> dict[str, str]:
    props = torch.cuda.get_device_properties(0)
    try:
        driver, clock = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True,
        ).stdout.strip().splitlines()[0].split(", ")  # fmt: skip
    except (OSError, subprocess.CalledProcessError, ValueError):
        driver, clock = "unknown", ""
    return {
        "gpu": props.name,
        "sm_count": str(props.multi_processor_count),
        "clock_max_mhz": clock,
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "",
    }


def bench(fn, budget_ms: float = 300.0) -> float:
    """Median seconds of `fn` (CUDA events, L2 flushed between runs)."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    once_ms = (time.perf_counter() - start) * 1e3
    rep = max(budget_ms, 5 * once_ms)
    return do_bench(fn, warmup=max(25, 2 * once_ms), rep=rep, return_mode="median") / 1e3


def attention_flops(b: int, h: int, q: int, k: int, d: int, causal: bool) -> float:
    """QK^T and AV multiply-adds x 2 (the kept half of the scores when causal, queries
    aligned to the last keys)."""
    pairs = q * k
    if causal:  # query i sees the keys up to k - q + i (bottom-right aligned)
        pairs = q * (k - q) + q * (q + 1) / 2
    return 4.0 * b * h * pairs * d


def reference(q, k, v, causal: bool, rows: slice) -> torch.Tensor:
    """float32 attention of one K/V head's group (batch 0, heads 0..G-1) for `rows`."""
    g = q.shape[1] // k.shape[1]
    qs = q[0, :g, rows].float()
    ks, vs = k[0, 0].float(), v[0, 0].float()
    s = qs @ ks.T / math.sqrt(q.shape[-1])
    if causal:
        nq, nk = q.shape[2], k.shape[2]
        qi = torch.arange(nq, device=q.device)[rows][:, None] + (nk - nq)
        s = s.masked_fill(torch.arange(nk, device=q.device)[None, :] > qi, float("-inf"))
    return torch.softmax(s, dim=-1) @ vs


def check(out, q, k, v, causal: bool) -> tuple[float, float]:
    """Largest absolute and the relative (Frobenius) error against float32."""
    n = q.shape[2]
    rows = slice(max(0, n - 256), n)
    g = q.shape[1] // k.shape[1]
    ref = reference(q, k, v, causal, rows)
    diff = out[0, :g, rows].float() - ref
    return float(diff.abs().max()), float(diff.norm() / ref.norm())


def sdpa(backend: str, q, k, v, causal: bool):
    """The fused call, and a note: K/V expanded where the backend cannot group."""

    def call(kk, vv, gqa):
        with sdpa_kernel(BACKENDS[backend]):
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, enable_gqa=gqa)

    try:
        call(k, v, True)
        return (lambda: call(k, v, True)), ""
    except RuntimeError:
        pass
    rep = q.shape[1] // k.shape[1]
    ke, ve = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    call(ke, ve, False)  # raises if the backend cannot run the shape at all
    return (lambda: call(ke, ve, False)), "kv expanded"


ROTATE_BYTES = 160e6  # distinct inputs a graph's calls rotate through: over 3x the L2
MAX_GRAPH_CALLS = 512


def graphed(impl: str, q, k, v, causal: bool):
    """One CUDA graph of `calls` fused calls, each on its own fresh inputs, so that neither
    the host's dispatch of each call (tens of microseconds in PyTorch, more than a small
    kernel takes) nor the L2 (the calls' inputs together are over three times its size)
    shows in the time: (replay, calls, note). Where capture fails: the eager call, noted."""
    per_call = (q.numel() + k.numel() + v.numel()) * q.element_size()
    calls = int(min(MAX_GRAPH_CALLS, max(1, math.ceil(ROTATE_BYTES / per_call))))
    sets = [(q, k, v)] + [
        (torch.randn_like(q), torch.randn_like(k), torch.randn_like(v)) for _ in range(calls - 1)
    ]
    fns = [sdpa(impl, *x, causal)[0] for x in sets]
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for fn in fns[:3]:
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for fn in fns:
                fn()
    except Exception as exc:  # noqa: BLE001 - a backend that cannot be captured runs eager
        del sets, fns
        torch.cuda.empty_cache()
        return sdpa(impl, q, k, v, causal)[0], 1, f"no graph ({str(exc).splitlines()[0][:60]})"
    return graph.replay, calls, f"cuda graph of {calls} calls on distinct inputs"


def softmax_rows(s: torch.Tensor, n_queries: int, causal: bool) -> torch.Tensor:
    """The unfused softmax phase as one library-style kernel: each row of scores read whole
    from DRAM (dense, as a library call computes what it is given), the causal mask applied
    in registers (query i of the row's head keeps keys <= i + keys - queries), the
    probabilities written back in BF16."""
    rows, m = s.shape[0] * s.shape[1] * s.shape[2], s.shape[3]
    p = torch.empty_like(s)
    block = triton.next_power_of_2(m)
    _softmax_rows[(rows,)](s, p, m, n_queries, m - n_queries, CAUSAL=causal, BLOCK=block,
                           num_warps=min(32, max(4, block // 512)))  # fmt: skip
    return p


def unfused(q, k, v, causal: bool):
    """QK^T (Q scaled first), the softmax (the mask inside it where causal), AV: three
    kernels, each through DRAM; a K/V head's group of query heads x its queries are the
    rows of one batched GEMM (no K/V expansion)."""
    b, h, n, d = q.shape
    hkv = k.shape[1]
    qg = q.reshape(b, hkv, (h // hkv) * n, d)
    scale = 1.0 / math.sqrt(d)

    def run():
        s = torch.matmul(qg * scale, k.transpose(-1, -2))  # the scale on Q: n x d, not n x m
        p = softmax_rows(s, n, causal)
        del s
        return torch.matmul(p, v).reshape(b, h, n, d)

    return run


def unfused_phases(q, k, v, causal: bool):
    """The unfused path's three kernels, each timed alone on its own inputs."""
    b, h, n, d = q.shape
    hkv = k.shape[1]
    qg = q.reshape(b, hkv, (h // hkv) * n, d) * (1.0 / math.sqrt(d))
    s = torch.matmul(qg, k.transpose(-1, -2))
    p = softmax_rows(s, n, causal)
    return {
        "qk": lambda: torch.matmul(qg, k.transpose(-1, -2)),
        "softmax": lambda: softmax_rows(s, n, causal),
        "av": lambda: torch.matmul(p, v),
    }


def row(env, **fields) -> dict[str, str]:
    out = {c: "" for c in COLUMNS}
    out.update(env)
    out.update({k: (f"{v:.6g}" if isinstance(v, float) else str(v)) for k, v in fields.items()})
    return out


def write_rows(path: str | Path, rows: list[dict]) -> None:
    """A diagnostic's rows as a CSV (the columns of its first row), its folder made."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def measure_attention(
    env,
    writer,
    flush,
    kind,
    b,
    n,
    m,
    d,
    causals,
    impls,
    rounds=ROUNDS,
    heads=(Q_HEADS, KV_HEADS),
    budget_ms=300.0,
    graphs=False,
):
    """Each implementation at one shape, full and causal on the same inputs: checked once
    each, then timed in `rounds` alternating rounds (full, causal, full, ...), the median
    written -- the chip's clock and temperature drift between shapes, and a ratio of two
    times should not see it. The memory-efficient backend (never the fastest) gets one
    round. `graphs`: each fused call timed inside a CUDA graph of calls on distinct inputs
    (:func:`graphed`)."""
    h, hkv = heads
    passed = 0
    gen = torch.Generator(device="cuda").manual_seed(b * 1_000_003 + n * 7 + d + 31 * h + hkv)
    q = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(b, hkv, m, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(b, hkv, m, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    for impl in impls:
        fused = impl != "unfused"
        common = dict(kind=kind, impl="fused" if fused else "unfused", batch=b, q_heads=h,
                      kv_heads=hkv, queries=n, keys=m, head_dim=d)  # fmt: skip
        runs = {}
        for causal in causals:
            try:
                if fused:
                    fn, note = sdpa(impl, q, k, v, causal)
                else:
                    fn, note = unfused(q, k, v, causal), ""
                err, rel = check(fn(), q, k, v, causal)
                calls = 1
                if graphs and fused:
                    fn, calls, gnote = graphed(impl, q, k, v, causal)
                    note = "; ".join(x for x in (note, gnote) if x)
                runs[causal] = (fn, note, err, rel, [], calls)
            except Exception as exc:  # noqa: BLE001 - a failed shape is a row, not the end
                writer.writerow(row(env, **common, backend=impl if fused else "torch",
                                    causal=int(causal), ok=0,
                                    note=f"failed: {str(exc).splitlines()[0][:120]}"))  # fmt: skip
                flush()
                torch.cuda.empty_cache()
        try:
            for _ in range(1 if impl == "efficient" else rounds):
                for fn, _note, _err, _rel, times, calls in runs.values():
                    times.append(bench(fn, budget_ms) / calls)
        except Exception as exc:  # noqa: BLE001
            for causal in runs:
                writer.writerow(row(env, **common, backend=impl if fused else "torch",
                                    causal=int(causal), ok=0,
                                    note=f"failed: {str(exc).splitlines()[0][:120]}"))  # fmt: skip
            flush()
            torch.cuda.empty_cache()
            continue
        for causal, (_fn, note, err, rel, times, _calls) in runs.items():
            passed += int(rel < 2e-2)
            t = statistics.median(times)
            spread = (max(times) - min(times)) / t
            flops = attention_flops(b, h, n, m, d, causal)
            rounds_note = f"median of {len(times)} rounds, spread {spread:.1%}"
            writer.writerow(row(env, **common, backend=impl if fused else "torch",
                                causal=int(causal), time_s=t, flops=flops,
                                tflops=flops / t / 1e12, max_abs_err=err, rel_err=rel,
                                ok=int(rel < 2e-2),  # bf16 operands: 1e-3..1e-2
                                note="; ".join(x for x in (note, rounds_note) if x)))  # fmt: skip
            flush()
            print(
                f"{kind} {impl:9s} b={b} n={n} m={m} d={d} causal={int(causal)}: "
                f"{t * 1e3:.3f} ms {flops / t / 1e12:.0f} TFLOP/s rel err {rel:.3g} "
                f"spread {spread:.1%} {note}",
                flush=True,
            )
            if not fused:
                for name, phase in unfused_phases(q, k, v, causal).items():
                    tp = bench(phase, 100.0)
                    writer.writerow(row(env, **{**common, "impl": f"unfused-{name}"},
                                        backend="torch", causal=int(causal), time_s=tp, ok=1,
                                        note="one phase of the unfused path, alone"))  # fmt: skip
                flush()
                torch.cuda.empty_cache()
        del runs
        torch.cuda.empty_cache()
    del q, k, v
    torch.cuda.empty_cache()
    return passed


if triton is not None:

    @triton.jit
    def _softmax_rows(s_ptr, p_ptr, m, n_queries, offset, CAUSAL: tl.constexpr,
                      BLOCK: tl.constexpr):  # fmt: skip
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        base = row.to(tl.int64) * m
        inside = cols < m
        x = tl.load(s_ptr + base + cols, mask=inside, other=float("-inf")).to(tl.float32)
        if CAUSAL:
            x = tl.where(cols <= row % n_queries + offset, x, float("-inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(p_ptr + base + cols, (e / tl.sum(e, axis=0)).to(tl.bfloat16), mask=inside)

    @triton.jit
    def _exp2_loop(x_ptr, y_ptr, n_iter, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        a = tl.load(x_ptr + offs)
        b = a + 0.25
        c = a + 0.5
        d = a + 0.75
        for _ in range(n_iter):  # four independent chains: the SFU, not latency, bounds it
            a = tl.math.exp2(a * 0.5)
            b = tl.math.exp2(b * 0.5)
            c = tl.math.exp2(c * 0.5)
            d = tl.math.exp2(d * 0.5)
        tl.store(y_ptr + offs, a + b + c + d)  # the input stays: every run the same


def ceilings(env, writer, flush) -> None:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t = bench(lambda: a @ b, 1000.0)
    writer.writerow(row(env, kind="ceiling", impl="matmul", backend="torch", queries=n,
                        keys=n, head_dim=n, time_s=t, flops=2.0 * n**3,
                        rate=2.0 * n**3 / t, unit="flop/s", ok=1,
                        note="bf16 8192^3 matrix product, random inputs"))  # fmt: skip
    print(f"matmul {2 * n**3 / t / 1e12:.0f} TFLOP/s", flush=True)
    a = b = None  # free before the copy
    size = 1 << 32  # 4 GiB each way
    src = torch.randn(size // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src), 1000.0)
    writer.writerow(row(env, kind="ceiling", impl="copy", backend="torch", time_s=t,
                        rate=2.0 * size / t, unit="byte/s", ok=1,
                        note="device-to-device copy of 4 GiB, bytes read + written"))  # fmt: skip
    print(f"copy {2 * size / t / 1e12:.2f} TB/s", flush=True)
    src = dst = None
    torch.cuda.empty_cache()
    if triton is None:
        return
    block, iters = 1024, 4096
    programs = int(env["sm_count"]) * 64
    x = torch.rand(programs * block, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    t = bench(lambda: _exp2_loop[(programs,)](x, y, iters, BLOCK=block), 1000.0)
    count = 4.0 * programs * block * iters
    writer.writerow(row(env, kind="ceiling", impl="exp2", backend="triton", time_s=t,
                        rate=count / t, unit="exp2/s", ok=int(bool(torch.isfinite(y).all())),
                        note="fp32 exp2 chains in registers, 4 per thread"))  # fmt: skip
    print(f"exp2 {count / t / 1e12:.3f} T/s", flush=True)
    flush()


# The wide grid (`--grid wide`): shapes the model was not built on. Query and K/V heads of
# the three families -- multi-head (H = Hkv), grouped (H / Hkv = 4, 8) and multi-query
# (Hkv = 1) --, head dimension 64/128/256, 512..64K tokens, full and causal on the same
# inputs, at a batch that fills the chip with several waves of 128-row blocks and at a
# batch of one or two requests (B x H below 132); decode at several batch sizes and
# contexts. The shapes are taken in a seeded random order until the time budget ends, so
# what was measured is a random sample of the grid, not its first corner.
WIDE_HEADS = ((8, 8), (16, 16), (32, 32), (64, 64), (16, 4), (32, 8), (64, 8), (64, 16),
              (8, 1), (16, 1), (32, 1), (64, 1))  # fmt: skip
WIDE_SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
WIDE_FLOPS_CAP = 1.2e14  # full-attention FLOPs of one request above this: left out (time)
WIDE_FILL_BLOCKS = 4 * 132  # a filling batch gives at least four waves of 128-row blocks
WIDE_FLOPS_TARGET = 3e13  # ... and at most this many FLOPs (fewer requests, at least one)
WIDE_DECODE_HEADS = ((32, 32), (32, 8), (32, 1), (64, 8), (64, 1), (16, 16))
WIDE_DECODE = ((1, 8, 64, 256), (1024, 4096, 16384, 65536))  # batches, contexts
WIDE_KV_BYTES_CAP = 8e9  # decode shapes whose K/V cache is larger: left out
WIDE_SEED = 20261127


def wide_prefill() -> list[tuple[int, int, int, int, int]]:
    """(batch, heads, kv heads, sequence, head dim) of the wide grid, in seeded order."""
    import random

    shapes = []
    for h, hkv in WIDE_HEADS:
        for d in HEAD_DIMS:
            for n in WIDE_SEQS:
                one = 4.0 * h * n * n * d
                if one > WIDE_FLOPS_CAP:
                    continue
                fill = max(1, -(-WIDE_FILL_BLOCKS * 128 // (h * n)))
                fill = max(1, min(fill, int(WIDE_FLOPS_TARGET // one)))
                small = 1 if h * n >= 128 * 132 else 2
                for b in dict.fromkeys((fill, small)):
                    if b * h < 132 or b == fill:
                        shapes.append((b, h, hkv, n, d))
    random.Random(WIDE_SEED).shuffle(shapes)
    return shapes


def wide_decode() -> list[tuple[int, int, int, int, int]]:
    """(batch, heads, kv heads, context, head dim) of the wide decode grid, seeded order."""
    import random

    shapes = []
    for h, hkv in WIDE_DECODE_HEADS:
        for d in (64, 128):
            for b in WIDE_DECODE[0]:
                for m in WIDE_DECODE[1]:
                    if 2 * 2 * b * hkv * m * d <= WIDE_KV_BYTES_CAP:
                        shapes.append((b, h, hkv, m, d))
    random.Random(WIDE_SEED + 1).shuffle(shapes)
    return shapes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true", help="a few shapes (a smoke test)")
    p.add_argument(
        "--grid",
        choices=["paper", "wide"],
        default="paper",
        help="wide: the families, head counts and batches of the wide grid",
    )
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="stop taking new shapes after this many seconds (wide grid)",
    )
    p.add_argument(
        "--part",
        default="0/1",
        help="K/N: every N-th shape of the wide grid from the K-th (runs split over calls)",
    )
    p.add_argument(
        "--graphs-below",
        type=int,
        default=0,
        help="wide grid: time decode and the prefill shapes up to this many tokens as CUDA "
        "graphs of calls on distinct inputs (no host dispatch, no L2 hits), only those",
    )
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    env = environment()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.grid == "wide":
        k, n = (int(x) for x in args.part.split("/"))
        return main_wide(env, out, args.deadline_s, args.quick, (k, n), args.graphs_below)
    seqs = SEQS[:2] if args.quick else SEQS
    dims = HEAD_DIMS[1:2] if args.quick else HEAD_DIMS
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, COLUMNS)
        writer.writeheader()
        ceilings(env, writer, fh.flush)
        for d in dims:
            for n in seqs:
                b = max(1, PREFILL_TOKENS // n)
                # the unfused path where its scores fit: the same batch, else fewer requests
                bu = min(b, int(UNFUSED_SCORE_BYTES // (Q_HEADS * n * n * 2)))
                impls = [*BACKENDS, "unfused"] if bu == b else list(BACKENDS)
                measure_attention(env, writer, fh.flush, "prefill", b, n, n, d, (False, True),
                                  impls)  # fmt: skip
                if 1 <= bu < b:
                    measure_attention(env, writer, fh.flush, "prefill", bu, n, n, d,
                                      (False, True), ["unfused"])  # fmt: skip
        for m in DECODE_CONTEXTS[: 1 if args.quick else None]:
            measure_attention(env, writer, fh.flush, "decode", DECODE_BATCH, 1, m, 128, (False,),
                              [*BACKENDS, "unfused"])  # fmt: skip
    print(f"wrote {out}", flush=True)
    return 0


def main_wide(
    env,
    out: Path,
    deadline_s: float | None,
    quick: bool,
    part: tuple[int, int] = (0, 1),
    graphs_below: int = 0,
) -> int:
    """The wide grid: ceilings, then prefill and decode shapes (three to one), each list in
    its seeded order, until the deadline (rows flushed as measured)."""
    start = time.perf_counter()
    decode, prefill = wide_decode(), wide_prefill()
    if quick:
        decode, prefill = decode[:2], [s for s in prefill if s[3] <= 2048][:2]
    print(f"wide grid: {len(decode)} decode and {len(prefill)} prefill shapes", flush=True)
    done = 0
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, COLUMNS)
        writer.writeheader()
        ceilings(env, writer, fh.flush)
        # three prefill shapes to one decode shape, so a deadline cuts both at random
        jobs = []
        for i, shape in enumerate(prefill):
            jobs.append(("prefill", shape))
            if i % 3 == 2 and decode:
                jobs.append(("decode", decode.pop(0)))
        jobs += [("decode", shape) for shape in decode]
        jobs = jobs[part[0] :: part[1]]
        if graphs_below:  # only decode and the prefill shapes up to this many tokens
            jobs = [j for j in jobs if j[0] == "decode" or j[1][3] <= graphs_below]
        for kind, (b, h, hkv, n, d) in jobs:
            if deadline_s is not None and time.perf_counter() - start > deadline_s:
                break
            # cuDNN is the fastest backend at every prefill shape of the paper grid (flash
            # runs at about half its rate there): prefill times flash only where cuDNN
            # fails; decode times both (flash is the faster at some shapes)
            if kind == "decode":
                measure_attention(env, writer, fh.flush, "decode", b, 1, n, d, (False,),
                                  ["cudnn", "flash"], heads=(h, hkv), budget_ms=60.0,
                                  graphs=bool(graphs_below))  # fmt: skip
            elif not measure_attention(env, writer, fh.flush, "prefill", b, n, n, d,
                                       (False, True), ["cudnn"], heads=(h, hkv),
                                       budget_ms=100.0, graphs=bool(graphs_below)):  # fmt: skip
                measure_attention(env, writer, fh.flush, "prefill", b, n, n, d, (False, True),
                                  ["flash"], heads=(h, hkv), budget_ms=100.0,
                                  graphs=bool(graphs_below))  # fmt: skip
            done += 1
    print(f"wrote {out}: {done} of {len(jobs)} shapes in {time.perf_counter() - start:.0f} s",
          flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
