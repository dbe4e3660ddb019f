"""Distance to the limit: results/bounds.csv, figure `roofline`, and a report section.

For the paper's points (four models x six lengths) and its five configurations: each
result's latency bound (:mod:`simulator.core.bounds` -- the least time the arrays need for the
useful work, split freely between the arrays able to run it, and the DRAM traffic no buffer
of this size avoids, over the bandwidth), the fraction of it attained, which bound binds,
and the point on the architecture's roofline (useful operations per DRAM byte against
operations per second). Analytic engine, as the paper's reproduction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from experiments.compare import md_table
from experiments.experiment import Context, Experiment, Selection
from experiments.output import write_csv
from simulator.core.result import Result
from simulator.drivers.configs import STANDARD, EvalOptions, Specs, evaluate
from simulator.roofline import draw, roofs
from simulator.spec.workload import make_workload
from simulator.support.units import format_count

COLUMNS = (
    "config",
    "model",
    "seq_len",
    "latency_s",
    "latency_bound_s",
    "fraction_of_bound",
    "bound_binds",
    "traffic_bytes",
    "traffic_bound_bytes",
    "ops_per_byte",
    "ops_per_s",
)


@dataclass(frozen=True)
class Point:
    """The numbers of one result the experiment keeps (plain values: they cross processes)."""

    latency_s: float
    latency_bound_s: float
    fraction_of_bound: float
    bound_binds: str
    traffic_bytes: float
    traffic_bound_bytes: float
    intensity: float
    throughput: float
    ops: float

    @classmethod
    def of(cls, r: Result) -> Point:
        return cls(
            r.latency_s,
            r.latency_bound_s,
            r.fraction_of_bound,
            str(r.bound_binds),
            r.traffic_bytes,
            r.traffic_bound_bytes,
            r.intensity,
            r.throughput,
            r.ops,
        )


@dataclass(frozen=True)
class BoundRow:
    config: str
    label: str
    model: str
    seq_len: int
    result: Point


def points(selection: Selection) -> list[tuple[str, str, int]]:
    return [(c, m, s) for c in STANDARD for m in selection.models for s in selection.seqs]


def compute(specs: Specs, point: tuple[str, str, int]) -> BoundRow:
    config, model, seq = point
    r = evaluate(specs, config, make_workload(model, seq), options=EvalOptions(engine="analytic"))
    return BoundRow(config, str(r.label), str(r.model), seq, Point.of(r))


def write(rows: Sequence[BoundRow], ctx: Context) -> list[Path]:
    table = [
        [
            r.config,
            r.model,
            r.seq_len,
            r.result.latency_s,
            r.result.latency_bound_s,
            r.result.fraction_of_bound,
            r.result.bound_binds,
            r.result.traffic_bytes,
            r.result.traffic_bound_bytes,
            r.result.intensity,
            r.result.throughput,
        ]
        for r in rows
    ]
    return [write_csv(ctx.results / "bounds.csv", COLUMNS, table)]


def figures(rows: Sequence[BoundRow], ctx: Context) -> list[Path]:
    specs = Specs()
    roof = roofs(specs.architecture(specs.mapping("binding")))
    points = [(r.label, r.result) for r in rows]
    title = "Attention of " + ", ".join(dict.fromkeys(r.model for r in rows)) + " on the roofline"
    groups = [r.model for r in rows]
    return draw(points, roof, title, ctx.out / "roofline", lines=False, groups=groups)


def report(rows: Sequence[BoundRow], ctx: Context) -> str:
    seqs = list(dict.fromkeys(r.seq_len for r in rows))
    models = list(dict.fromkeys(r.model for r in rows))
    labels = list(dict.fromkeys(r.label for r in rows))
    by = {(r.label, r.model, r.seq_len): r.result for r in rows}
    table = []
    for label in labels:
        for model in models:
            cells = [f"{100 * by[(label, model, s)].fraction_of_bound:.0f}%" for s in seqs]
            table.append((label, model, *cells))
    memory = [
        f"{label} {model} {format_count(s)}"
        for (label, model, s), r in by.items()
        if r.bound_binds == "DRAM"
    ]
    binds = {}
    for label in labels:
        kinds = sorted({by[(label, m, s)].bound_binds for m in models for s in seqs})
        binds[label] = ", ".join(kinds)
    near = {}
    for label in labels:
        within = [
            s for s in seqs if all(by[(label, m, s)].fraction_of_bound >= 0.95 for m in models)
        ]
        near[label] = (
            format_count(within[0]) if within and within == seqs[seqs.index(within[0]) :] else None
        )
    close = [f"{label} from {n}" for label, n in near.items() if n]
    return "\n".join(
        [
            "## Distance to the limit: fraction of the latency bound (`roofline`, "
            "`results/bounds.csv`)",
            "",
            "Each result's latency bound is the larger of the least time its arrays need for "
            "the useful work (split freely between the arrays able to run each Einsum) and "
            "the DRAM traffic no buffer of its size avoids over the bandwidth "
            "(`simulator/core/bounds.py`); the table gives bound / latency (100% = at the limit), "
            "analytic engine.",
            "",
            md_table(["configuration", "model", *[format_count(s) for s in seqs]], table),
            "",
            "What bounds each configuration: "
            + "; ".join(f"{label}: {kinds}" for label, kinds in binds.items())
            + ". Memory-bound points (the DRAM bound binds): "
            + (", ".join(memory) if memory else "none")
            + ". Within 5% of the bound at every model: "
            + (", ".join(close) if close else "no configuration")
            + ".",
            "",
        ]
    )


EXPERIMENT = Experiment(
    name="bounds",
    title="Distance to the limit: latency bounds and the roofline",
    points=points,
    compute=compute,
    write=write,
    figures=figures,
    report=report,
    chunk=6,
    outputs=("roofline", "results/bounds.csv"),
)
