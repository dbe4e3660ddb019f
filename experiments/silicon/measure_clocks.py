"""The SM clock a GPU holds under each kind of load: the tensor cores' matrix product, the
special-function units' exp2 loop, a copy, and fused attention (a diagnostic of the model's
clocks; CI never runs it).

    python experiments/silicon/measure_clocks.py --out experiments/data/h200-clocks.csv

Each load runs back to back for `--seconds` while `nvidia-smi` samples the SM clock and the
board power every 20 ms; the first quarter of the samples (the ramp) is dropped and the
median of the rest kept, with the load's own rate (work over time, CUDA events). The loads
are the ceilings' own kernels (measure_attention.ceilings: a BF16 8192^3 product, a 4 GiB
copy, the exp2 loop) and cuDNN's fused attention at 16K tokens, 32 query heads over 8 K/V
heads, head dimension 64, 128, 256, a batch of 4.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_attention as att  # noqa: E402


def sampled(fn, seconds: float) -> tuple[float, float, float, int]:
    """(median SM clock MHz, median power W, seconds per call, calls) while `fn` repeats."""
    fn()
    torch.cuda.synchronize()
    smi = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
         "-lms", "20"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = 0
    t0 = time.perf_counter()
    start.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(8):
            fn()
        calls += 8
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    smi.terminate()
    out, _ = smi.communicate()
    samples = [tuple(float(x) for x in line.split(",")) for line in out.splitlines() if line]
    samples = samples[len(samples) // 4 :]
    clock = statistics.median(s[0] for s in samples)
    power = statistics.median(s[1] for s in samples)
    return clock, power, start.elapsed_time(end) * 1e-3 / calls, calls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=4.0)
    args = p.parse_args(argv)
    env = att.environment()
    sms = int(env["sm_count"])
    loads = []
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    loads.append(("matmul", lambda: a @ b, 2.0 * n**3, "flop/s"))
    size = 1 << 32
    src = torch.randn(size // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    loads.append(("copy", lambda: dst.copy_(src), 2.0 * size, "byte/s"))
    block, iters = 1024, 4096
    programs = sms * 64
    x = torch.rand(programs * block, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    loads.append(("exp2", lambda: att._exp2_loop[(programs,)](x, y, iters, BLOCK=block),
                  4.0 * programs * block * iters, "exp2/s"))  # fmt: skip
    for d in (64, 128, 256):
        q = torch.randn(4, 32, 16384, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(4, 8, 16384, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(4, 8, 16384, d, device="cuda", dtype=torch.bfloat16)
        fn, _note = att.sdpa("cudnn", q, k, v, False)
        loads.append((f"attention-d{d}", fn, att.attention_flops(4, 32, 16384, 16384, d, False),
                      "flop/s"))  # fmt: skip
    idle_clock = float(subprocess.run(
        ["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True).stdout.split()[0])  # fmt: skip
    rows = [{"gpu": env["gpu"], "load": "idle", "sm_clock_mhz": idle_clock, "power_w": "",
             "seconds_per_call": "", "rate": "", "unit": "", "calls": 0}]  # fmt: skip
    for name, fn, work, unit in loads:
        clock, power, t, calls = sampled(fn, args.seconds)
        rows.append({"gpu": env["gpu"], "load": name, "sm_clock_mhz": clock, "power_w": power,
                     "seconds_per_call": f"{t:.6g}", "rate": f"{work / t:.6g}", "unit": unit,
                     "calls": calls})  # fmt: skip
        print(f"{name:16s} {clock:7.0f} MHz {power:6.0f} W {work / t:.4g} {unit}", flush=True)
    att.write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
