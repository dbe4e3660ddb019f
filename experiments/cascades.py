"""Extra table: passes and minimum live footprint of every cascade in `cascades/`.

Properties of the cascade alone (`simulator.cascade.passes`), true for every mapping: how
many passes each rank needs, which full reductions separate them, and which fibres must stay
live whole (M), by chunk (M0) or streamed (1). Where the paper states the count, the report
shows it beside ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from experiments.compare import md_table
from experiments.experiment import Context, Experiment, Selection
from experiments.output import write_csv
from experiments.published import PAPER_PASSES
from simulator.cascade.parse import load_cascade
from simulator.cascade.passes import FiberPasses, analyze_passes
from simulator.drivers.configs import Specs
from simulator.support.paths import data_dir


@dataclass(frozen=True)
class CascadeRow:
    name: str
    description: str
    einsums: int
    max_passes: int
    per_rank: tuple[tuple[str, int, tuple[str, ...]], ...]
    fibers: tuple[FiberPasses, ...]

    def fiber(self, tensor: str, rank: str) -> FiberPasses | None:
        for f in self.fibers:
            if (f.tensor, f.rank) == (tensor, rank):
                return f
        return None


def points(selection: Selection) -> list[str]:
    return sorted(p.stem for p in data_dir("cascades").glob("*.yaml"))


def compute(specs: Specs, name: str) -> CascadeRow:
    cascade = load_cascade(data_dir("cascades") / f"{name}.yaml")
    report = analyze_passes(cascade)
    return CascadeRow(
        name,
        " ".join(cascade.description.split()),
        len([e for e in cascade.einsums if e.kind == "compute"]),
        report.max_passes,
        report.per_rank,
        report.fibers,
    )


def write(rows: Sequence[CascadeRow], ctx: Context) -> list[Path]:
    table = [
        [r.name, f.tensor, f.rank, "x".join(f.components), f.passes, f.live_footprint]
        for r in rows
        for f in r.fibers
    ]
    header = ["cascade", "tensor", "rank", "indexed_as", "passes", "live_footprint"]
    return [write_csv(ctx.results / "cascade-passes.csv", header, table)]


def _live(r: CascadeRow) -> str:
    """Fibres that are not streamed, grouped by footprint: `M: K, V, QK; M0: BQK`."""
    groups: dict[str, list[str]] = {}
    for f in r.fibers:
        if f.live_footprint != "1":
            groups.setdefault(f"{f.live_footprint} (of {f.rank})", []).append(f.tensor)
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in groups.items()) or "all streamed (1)"


def report(rows: Sequence[CascadeRow], ctx: Context) -> str:
    table = []
    for r in rows:
        ranks = ", ".join(
            f"{g} {n}" + (f" ({', '.join(why)})" if why else "") for g, n, why in r.per_rank
        )
        paper = "-"
        if r.name in PAPER_PASSES:
            rank, tensor, passes, footprint = PAPER_PASSES[r.name]
            f = r.fiber(tensor, rank)
            ours_rank = dict((g, n) for g, n, _ in r.per_rank).get(rank)
            agree = f is not None and ours_rank == passes and f.live_footprint == footprint
            paper = f"{passes} over {rank}, {tensor} live {footprint}: " + (
                "agrees" if agree else "DIFFERS"
            )
        table.append((r.name, r.einsums, r.max_passes, ranks, _live(r), paper))
    return "\n".join(
        [
            "## Extra: passes and live footprint of every cascade (`cascades/`)",
            "",
            "From `simulator.cascade.passes` (no mapping involved); per rank the passes and, in "
            "brackets, the full reductions that separate them; live footprint of the fibres "
            "that are not streamed. Full per-fibre table: `results/cascade-passes.csv`.",
            "",
            md_table(
                [
                    "cascade",
                    "einsums",
                    "passes",
                    "passes per rank (boundaries)",
                    "live footprint",
                    "paper (section III)",
                ],
                table,
                "lrrlll",
            ),
            "",
        ]
    )


EXPERIMENT = Experiment(
    name="cascades",
    title="Extra: passes and live footprint of every cascade",
    points=points,
    compute=compute,
    write=write,
    report=report,
    chunk=20,
    outputs=("results/cascade-passes.csv",),
)
