"""How fast a GPU runs linear attention's key-value contraction `KV = phi(K)^T V` by cuBLAS
and by the measured Triton kernels, against a copy and a read of the same bytes: whether
the measured fused kernels run at the chip's rate (a diagnostic; CI never runs it).

    python experiments/silicon/probe_linattn.py --out experiments/data/h200-linattn-probe.csv

Per shape of `measure_cascades.SHAPES["linear-attention"]`'s kind (keys M, width E = F,
instances b): `copy K` (K read and written), `read K, V` (a sum of each), `bmm phi(K)^T V`
(cuBLAS's batched GEMM on phi(K) made beforehand: the contraction alone), `triton kv` (the
measured fused kernel's first half, `measure_cascades._linattn_kv`, phi inside, keys split
over the SMs four times over), `triton fused` (the fastest of `LINATTN_TUNED`: Q, K, V read,
the output written). Timed by `triton.testing.do_bench` (the median; L2 flushed); the rate
is the bytes each moves over its time.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_attention as att  # noqa: E402
import measure_cascades as mc  # noqa: E402

CASES = ((65536, 64, 16), (4096, 64, 64), (4096, 128, 128), (1024, 128, 256))


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200) * 1e-3


def kv_triton(k: torch.Tensor, v: torch.Tensor, sms: int) -> torch.Tensor:
    b, m, e = k.shape
    f = v.shape[2]
    kv = torch.zeros((b, e, f), device=k.device, dtype=torch.float32)
    ks = torch.zeros((b, e), device=k.device, dtype=torch.float32)
    bm = 64
    splits = max(1, min(m // bm, -(-4 * sms // b)))
    chunk = -(-m // splits)
    chunk = -(-chunk // bm) * bm
    mc._linattn_kv[(b, triton.cdiv(m, chunk))](k, v, kv, ks, m, chunk, E=e, F=f, BM=bm,
                                               num_warps=4, num_stages=3)  # fmt: skip
    return kv


def probe(m: int, e: int, b: int, sms: int, gpu: str) -> list[dict]:
    """One shape: each implementation's time and rate."""
    g = torch.Generator(device="cuda").manual_seed(mc.SEED + m + e + b)
    q, k, v = (torch.randn((b, m, e), device="cuda", dtype=torch.bfloat16, generator=g)
               for _ in range(3))  # fmt: skip
    pk = mc.phi(k)
    dst = torch.empty_like(k)
    one = k.numel() * 2  # bytes of one tensor
    ref = torch.bmm(pk.transpose(1, 2).float(), v.float())
    err = float((kv_triton(k, v, sms) - ref).norm() / ref.norm())
    fused = min(
        bench(lambda c=c: mc.linattn_fused(q, k, v, sms, c[0], c[1], c[1], c[2], c[3]))
        for c in mc.LINATTN_TUNED
    )
    rows = []
    for impl, t, moved in (
        ("copy K", bench(lambda: dst.copy_(k)), 2 * one),
        ("read K, V", bench(lambda: (k.sum(), v.sum())), 2 * one),
        ("bmm phi(K)^T V (cuBLAS)", bench(lambda: torch.bmm(pk.transpose(1, 2), v)), 2 * one),
        (f"triton kv (rel err {err:.1g})", bench(lambda: kv_triton(k, v, sms)), 2 * one),
        ("triton fused, fastest tuned", fused, 4 * one),
    ):
        rows.append({"gpu": gpu, "M": m, "E": e, "F": e, "batch": b, "impl": impl,
                     "time_s": f"{t:.6g}", "bytes": moved,
                     "tb_per_s": f"{moved / t / 1e12:.3f}"})  # fmt: skip
        print(f"M={m:6d} E=F={e:3d} b{b:<3d} {impl:32s} {t * 1e6:9.1f} us "
              f"{moved / t / 1e12:6.2f} TB/s", flush=True)  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    gpu = torch.cuda.get_device_name(0)
    rows = [r for m, e, b in CASES for r in probe(m, e, b, sms, gpu)]
    att.write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
