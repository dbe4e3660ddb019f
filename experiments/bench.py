"""`make bench`: speed benchmarks, printed as times and ratios to their targets.

Targets: `python -m simulator.run --model bert --seq 1M` under 0.5 s of wall time
including interpreter start; the full 5 configurations x 24 points sweep under 5 s.
Cycle engine: simulating BERT at 1M tokens costs less than 2x simulating it at 1K
(steady-state extrapolation); one configuration at one point under 1 s; the functional 8x8
attention check under 10 s. GEMM mapper: one GEMM mapped under 1 s; a 100-point sweep under
30 s. `python -m experiments` (`make experiments`: every figure, CSV and the report) under
10 s on 2 cores from a cold start (the mapper's cache empty); the test suite under 180 s.
`python -m simulator.compare` with five cascades at 128K under 5 s.
Extreme inputs (10T tokens, a 65536-wide array, a 1 TB buffer, ...) each
answer or stop with one line within 2 s. The mapper: one `--mapping auto` point searched
from scratch (cache off) within 2 s. Ratios below 1.0 meet the target; `make bench`
exits 1 when one is over, after printing them all.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simulator.drivers.configs import STANDARD, EvalOptions, Specs, evaluate, prepare
from simulator.plan.gemm_mapper import Gemm, forget_gemm_mappings, map_gemm
from simulator.plan.point import plan_point
from simulator.spec.workload import (
    default_sequence_lengths,
    load_models,
    make_workload,
    workloads_file,
)
from simulator.timing.cycle.functional import check_attention
from simulator.timing.cycle.simulate import pipelined_point


def _best_of(n: int, fn) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_cli(seq: str = "1M") -> float:
    cmd = [sys.executable, "-m", "simulator.run", "--model", "bert", "--seq", seq]
    return _best_of(3, lambda: subprocess.run(cmd, check=True, capture_output=True))


def bench_sweep() -> float:
    models = load_models(workloads_file())  # the paper's four
    seqs = default_sequence_lengths()

    def sweep() -> None:
        specs = Specs()
        for config in STANDARD:
            for model in models:
                for seq in seqs:
                    evaluate(specs, config, make_workload(model, seq, models=models))

    return _best_of(3, sweep)


def _cycle_point(config: str, seq: str) -> float:
    specs = Specs()
    workload = make_workload("bert", seq)
    evaluate(
        specs, config, workload, options=EvalOptions(engine="analytic")
    )  # specs parsed and cached
    return _best_of(
        3, lambda: evaluate(specs, config, workload, options=EvalOptions(engine="cycle"))
    )


def bench_functional() -> float:
    def run() -> None:
        workload = make_workload("custom", "64", {"batch": 1, "heads": 1, "embed": 8})
        for config in ("binding", "arch"):
            c, m, a = prepare(Specs(), config, workload, pe_dim=8)
            pt = pipelined_point(plan_point(c, m, a, workload))
            assert check_attention(pt).error < 1e-6

    return _best_of(1, run)


def bench_mapper() -> float:
    """Mapping one GEMM (BERT FFN1 at 1M tokens on FuseMax, the default linear spec)."""

    specs = Specs()
    spec, _cascade = specs.linear("gemm")
    arch = specs.architecture(specs.mapping("binding"))
    ert = specs.tables(arch)[0]
    gemm = Gemm("FFN1", ("N", "S", "D"), (64 * 2**20, 3072, 768), ("Z", "W1", "F1"))

    def mapped() -> None:
        forget_gemm_mappings()  # a search each time, not the process's kept answer
        map_gemm(gemm, arch, spec.mapper, ert)

    return _best_of(3, mapped)


def bench_sweep_100() -> float:
    """`python -m simulator.sweep` over 100 points (4 models x 5 lengths x 5 PE arrays,
    cycle engine), on all local cores, wall time including interpreter start."""
    grid = ["model=bert,trxl,t5,xlm", "seq=4K,16K,64K,256K,1M", "pe_dim=32,64,128,256,512"]
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "simulator.sweep", "--grid", *grid, "--no-progress"]
        cmd += ["--out", f"{out}/sweep.csv"]
        return _best_of(1, lambda: subprocess.run(cmd, check=True, capture_output=True))


def bench_experiments() -> float:
    """`python -m experiments` end to end, as `make experiments` runs it, from a cold start:
    into a temporary folder (experiments/out is left alone), with an empty mapper cache
    (every search made afresh)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "experiments", "--out", out, "--no-progress"]
        env = {**os.environ, "FUSEMAX_SIM_CACHE": str(Path(out) / "cache")}
        return _best_of(1, lambda: subprocess.run(cmd, check=True, capture_output=True, env=env))


ROOT = Path(__file__).resolve().parent.parent


def bench_tests() -> float:
    """The README's test command, `python -m pytest` (every core, as its addopts say). A
    failing suite is no time: its summary is printed and the row counts as over (inf)."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfE"]
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        failed = [line for line in r.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
        tail = failed or r.stdout.splitlines()[-5:] or r.stderr.splitlines()[-5:]
        print(f"the test suite failed after {seconds:.1f} s:", *tail, sep="\n  ", file=sys.stderr)
        return math.inf
    return seconds


def bench_compare() -> float:
    """`python -m simulator.compare` with five cascades at 128K tokens (every strategy
    tried on each, cycle engine), wall time including interpreter start."""
    cascades = ",".join(
        [
            "attention-1pass",
            "attention-causal-1pass",
            "attention-gqa-1pass",
            "attention-window-1pass",
            "attention-3pass",
        ]
    )
    cmd = [sys.executable, "-m", "simulator.compare", "--cascades", cascades]
    cmd += ["--model", "llama3-8b", "--seq", "128K"]
    return _best_of(3, lambda: subprocess.run(cmd, check=True, capture_output=True))


# Extreme inputs: each answers or stops with one line within 2 s of wall time.
EXTREME_INPUTS = (
    ["--seq", "10T"],
    ["--seq", "10T", "--engine", "analytic"],
    ["--seq", "2^40"],
    ["--seq", "64K", "--pe-dim", "65536"],
    ["--seq", "1M", "--buffer-bytes", "1T"],
    ["--model", "xlm", "--seq", "1M", "--pe-dim", "128", "--buffer-bytes", "4MiB"],
)


def bench_extreme_inputs() -> tuple[float, str]:
    """The slowest of EXTREME_INPUTS through `python -m simulator.run` (wall, incl. start)."""
    slowest, which = 0.0, ""
    for argv in EXTREME_INPUTS:
        cmd = [sys.executable, "-m", "simulator.run", *argv]
        seconds = _best_of(1, lambda cmd=cmd: subprocess.run(cmd, capture_output=True))
        if seconds > slowest:
            slowest, which = seconds, " ".join(argv)
    return slowest, which


# The mapper: one point with --mapping auto, searched from scratch (no cache).
MAPPER_POINTS = (
    ["--model", "llama3-8b", "--seq", "16K", "--mapping", "auto"],
    ["--model", "llama3-8b", "--seq", "16K", "--mapping", "auto", "--arch", "h100"],
    ["--seq", "16K", "--mapping", "auto", "--cascade", "sigmoid-attention"],
    ["--model", "llama3-8b", "--seq", "4K", "--batch", "8", "--mapping", "auto"]
    + ["--cascade", "rmsnorm-ffn", "--shape", "E=4096,F=14336,O=4096"],
)


def bench_search() -> tuple[float, str]:
    """The slowest of MAPPER_POINTS through `python -m simulator.run --engine analytic`
    with the mapper's cache off (wall, incl. interpreter start)."""
    env = {**os.environ, "FUSEMAX_SIM_CACHE": "off"}
    slowest, which = 0.0, ""
    for argv in MAPPER_POINTS:
        cmd = [sys.executable, "-m", "simulator.run", *argv, "--engine", "analytic"]
        seconds = _best_of(
            1, lambda cmd=cmd: subprocess.run(cmd, capture_output=True, check=True, env=env)
        )
        if seconds > slowest:
            slowest, which = seconds, " ".join(argv)
    return slowest, which


def long_cascade(n: int) -> str:
    """A cascade of `n` element-wise Einsums, each reading the two before it."""
    decl = [f"    X{i}: [E, P]" for i in range(n + 1)]
    exprs = [
        f"    - X{i}[e, p] = X{i - 1}[e, p] * 0.5 + X{max(0, i - 2)}[e, p]" for i in range(1, n + 1)
    ]
    return (
        "name: long\ndescription: a long chain\nshapes: {E: 64, P: 128}\neinsum:\n"
        "  declaration:\n" + "\n".join(decl) + "\n  expressions:\n" + "\n".join(exprs) + "\n"
    )


def bench_passes(n: int = 1000) -> float:
    """`python -m simulator.cascade passes` on a cascade of `n` Einsums (wall)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "long.yaml"
        path.write_text(long_cascade(n))
        cmd = [sys.executable, "-m", "simulator.cascade", "passes", str(path)]
        return _best_of(1, lambda: subprocess.run(cmd, capture_output=True, check=True))


def bench_rewrite() -> float:
    """`python -m simulator.cascade rewrite attention-3pass --target-passes 1` (wall)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable, "-m", "simulator.cascade", "rewrite", "attention-3pass",
            "--target-passes", "1", "-o", str(Path(tmp) / "a1.yaml"),
        ]  # fmt: skip
        return _best_of(1, lambda: subprocess.run(cmd, capture_output=True, check=True))


def main() -> int:
    short, long = _cycle_point("binding", "1K"), _cycle_point("binding", "1M")
    mid = _cycle_point("binding", "64K")
    cli_1k, cli_1m = bench_cli("1K"), bench_cli("1M")
    worst = max(_cycle_point(config, "1M") for config in STANDARD)
    extreme, which = bench_extreme_inputs()
    searched, point = bench_search()
    rows = [
        ("simulator.run --model bert --seq 1M (wall, incl. interpreter)", cli_1m, 0.5),
        ("5 configurations x 24 points, analytic engine", bench_sweep(), 5.0),
        ("simulator.run, cycle engine: BERT 1M wall / 1K wall (x)", cli_1m / cli_1k, 2.0),
        ("cycle engine alone, +Binding: BERT 1M / 64K (x, flat beyond 64K)", long / mid, 2.0),
        (
            "cycle engine alone, +Binding: BERT 1M / 1K (x, 1K blocks are 16 epochs)",
            long / short,
            2.0,
        ),
        ("cycle engine: slowest configuration, BERT 1M", worst, 1.0),
        ("functional 8x8 attention, +Binding and +Architecture", bench_functional(), 10.0),
        ("GEMM mapper: one GEMM (BERT FFN1, 1M tokens, FuseMax)", bench_mapper(), 1.0),
        ("python -m simulator.sweep: 100 points, cycle engine (wall)", bench_sweep_100(), 30.0),
        ("python -m experiments: all figures, CSVs, report (wall)", bench_experiments(), 10.0),
        ("python -m pytest: the whole suite (wall)", bench_tests(), 180.0),
        ("python -m simulator.compare: 5 cascades at 128K (wall)", bench_compare(), 5.0),
        (f"slowest extreme input: simulator.run {which} (wall)", extreme, 2.0),
        (f"mapper, slowest point searched afresh: simulator.run {point} (wall)", searched, 2.0),
        ("simulator.cascade passes, 1,000 Einsums (wall)", bench_passes(), 1.5),
        ("simulator.cascade passes, 100,000 Einsums (wall)", bench_passes(100_000), 60.0),
        (
            "simulator.cascade rewrite attention-3pass --target-passes 1 (wall)",
            bench_rewrite(),
            10.0,
        ),
    ]
    text, code = verdict(rows)
    print(text)
    return code


def verdict(rows: list[tuple[str, float, float]]) -> tuple[str, int]:
    """The table of every benchmark (time, target, ratio), then the ones over their target:
    exit status 1 if any is, after all are printed."""
    width = max(len(name) for name, _, _ in rows)
    lines = [f"{'benchmark'.ljust(width)}  {'time (s)':>9}  {'target':>7}  {'ratio':>6}"]
    # (the first cycle-engine row is itself a ratio of two times, printed in its column)
    over = []
    for name, seconds, target in rows:
        lines.append(f"{name.ljust(width)}  {seconds:9.3f}  {target:7.1f}  {seconds / target:6.2f}")
        if seconds > target:
            over.append(
                f"{name} ({'failed' if math.isinf(seconds) else f'{seconds / target:.2f}x'})"
            )
    if over:
        lines.append(f"over target: {'; '.join(over)}")
        return "\n".join(lines), 1
    lines.append("every benchmark within its target")
    return "\n".join(lines), 0


if __name__ == "__main__":
    sys.exit(main())
