"""`make bench`: speed benchmarks, printed as times and ratios to their targets.

Targets (issue 3): `python -m simulator.run --model bert --seq 1M` under 1 s of wall time
including interpreter start; the full 5 configurations x 24 points sweep under 5 s.
Ratios below 1.0 meet the target.
"""

from __future__ import annotations

import subprocess
import sys
import time


def _best_of(n: int, fn) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_cli() -> float:
    cmd = [sys.executable, "-m", "simulator.run", "--model", "bert", "--seq", "1M"]
    return _best_of(3, lambda: subprocess.run(cmd, check=True, capture_output=True))


def bench_sweep() -> float:
    from simulator.configs import STANDARD, Specs, evaluate
    from simulator.spec.workload import default_sequence_lengths, load_models, make_workload

    models = load_models()
    seqs = default_sequence_lengths()

    def sweep() -> None:
        specs = Specs()
        for config in STANDARD:
            for model in models:
                for seq in seqs:
                    evaluate(specs, config, make_workload(model, seq, models=models))

    return _best_of(3, sweep)


def main() -> int:
    rows = [
        ("simulator.run --model bert --seq 1M (wall, incl. interpreter)", bench_cli(), 1.0),
        ("5 configurations x 24 points, analytic engine", bench_sweep(), 5.0),
    ]
    width = max(len(name) for name, _, _ in rows)
    print(f"{'benchmark'.ljust(width)}  {'time (s)':>9}  {'target':>7}  {'ratio':>6}")
    for name, seconds, target in rows:
        print(f"{name.ljust(width)}  {seconds:9.3f}  {target:7.1f}  {seconds / target:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
