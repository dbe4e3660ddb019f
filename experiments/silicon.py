"""A real chip: results/silicon.csv, figure `silicon` and a report section.

Attention measured on an NVIDIA H100 (experiments/data/h100-attention.csv, written on the
device by experiments/silicon/measure_attention.py and committed: this experiment never
needs a GPU) against the predictions of `arch/h100.yaml` at the chip's three measured
ceilings -- `python -m simulator.validate`'s numbers, shape by shape. The report gives the
errors per group, the tensor-core utilisation per head dimension, the causal/full ratios
and the fused speedups, measured and predicted; docs/silicon.md says what they mean.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from experiments.compare import md_table
from experiments.experiment import Context, Experiment, Selection
from experiments.output import write_csv
from simulator.drivers.configs import Specs
from simulator.validate import (
    Measurement,
    Validation,
    causal_ratios,
    draw,
    read_measured,
    speedups,
    summaries,
    utilisation_by_head_dim,
    validate_one,
)

MEASURED = Path(__file__).resolve().parent / "data" / "h100-attention.csv"
ARCH = "h100"


def points(selection: Selection) -> list[tuple[Measurement, dict[str, float]]]:
    """Every measured shape (the selection of paper workloads does not apply)."""
    m = read_measured(MEASURED)
    return [(x, m.ceilings) for x in m.measurements]


def compute(specs: Specs, point: tuple[Measurement, dict[str, float]]) -> Validation:
    measurement, ceilings = point
    return validate_one(dataclasses.replace(specs, arch_override=ARCH), measurement, ARCH, ceilings)


def write(rows: Sequence[Validation], ctx: Context) -> list[Path]:
    if not rows:
        return []
    records = [r.record() for r in rows]
    columns = list(records[0])
    return [write_csv(ctx.results / "silicon.csv", columns, [list(x.values()) for x in records])]


def figures(rows: Sequence[Validation], ctx: Context) -> list[Path]:
    if not rows:
        return []
    device = read_measured(MEASURED).device
    return draw(
        rows, f"{device}: attention, predicted (arch/h100.yaml) vs measured", ctx.out / "silicon"
    )


def report(rows: Sequence[Validation], ctx: Context) -> str:
    title = "## Extra: a real chip (`silicon`, `results/silicon.csv`)"
    if not rows:
        return f"{title}\n\nNo measured shapes.\n"
    m = read_measured(MEASURED)
    c = m.ceilings
    groups = md_table(
        ["group", "shapes", "mean abs. error", "median", "largest"],
        [(s.group, s.shapes, f"{s.mean:.1%}", f"{s.median:.1%}", f"{s.largest:.1%}")
         for s in summaries(rows)],
    )  # fmt: skip
    util = md_table(
        ["head dim", "tensor-core utilisation, measured", "predicted"],
        [(d, f"{a:.0%}", f"{b:.0%}") for d, a, b in utilisation_by_head_dim(rows)],
    )
    ratios = causal_ratios(rows)
    pairs = speedups(rows)
    misses = [p for p in ratios if abs(p.error) > 0.05]
    worst = max(pairs, key=lambda p: abs(p.error))
    shapes = md_table(
        ["impl", "shape", "measured (ms)", "backend", "predicted (ms)", "by", "error", "bound by"],
        [(r.measurement.impl, r.measurement.shape.label, f"{r.measurement.time_s * 1e3:.4g}",
          r.measurement.backend, f"{r.predicted_s * 1e3:.4g}", r.config, f"{r.error:+.1%}",
          r.bound_by) for r in rows],
    )  # fmt: skip
    return "\n".join(
        [
            title,
            "",
            f"{len(rows)} measured shapes on an {m.device} (`experiments/data/h100-attention.csv`)"
            f" against `arch/h100.yaml` at the chip's measured ceilings (matrix "
            f"{2 * c['mac_per_s'] / 1e12:.4g} TFLOP/s, copy {c['dram_bytes_per_s'] / 1e12:.4g}"
            f" TB/s, exp2 {c['exp_per_s'] / 1e12:.4g} T/s); nothing fitted per shape. "
            "Fused: the best fused configuration against the fastest fused backend; unfused: "
            "the unfused strategy against QK, softmax and AV as separate kernels.",
            "",
            groups,
            "",
            util,
            "",
            f"Causal / full time from 8K tokens: {len(ratios) - len(misses)} of {len(ratios)} "
            "within 5% of the measured ratio"
            + (
                "; beyond it: " + ", ".join(f"{p.shape} ({p.error:+.1%})" for p in misses)
                if misses
                else ""
            )
            + f". Fused speedup over unfused: {len(pairs)} shapes, largest error "
            f"{worst.error:+.1%} ({worst.shape}). Why: docs/silicon.md.",
            "",
            shapes,
            "",
        ]
    )


EXPERIMENT = Experiment(
    name="silicon",
    title="Extra: a real chip (H100, measured vs predicted)",
    points=points,
    compute=compute,
    write=write,
    figures=figures,
    report=report,
    chunk=8,
    outputs=("silicon", "results/silicon.csv"),
)
