"""Pareto experiment: results/pareto.csv and figure 12 (attention latency vs chip area).

FuseMax at 256K tokens with square PE arrays of 16..512 PEs a side, per model. The rows come
from the sweep's pareto mode (`python -m simulator.sweep`); this module only adapts them.
Until that is merged the experiment is reported as pending.

Contract assumed for the sweep (adapt `compute` if the merged function differs):
`simulator.sweep.pareto_point(specs, model, pe_dim)` returns a mapping with (at least)
`latency` (s) and `area` (um^2), and any other column of the reference's `pareto.csv`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from experiments import plots
from experiments.compare import fmt, md_table, pct, rel_error
from experiments.output import write_csv
from experiments.published import Published
from experiments.registry import Context, Experiment, Selection
from simulator.configs import Specs
from simulator.spec.workload import make_workload

# The reference's columns, in order; `accel` is the artifact's name for FuseMax.
COLUMNS = (
    "accel",
    "model",
    "PE_dim",
    "traffic",
    "mem_lat",
    "comp_2d_lat",
    "comp_1d_lat",
    "latency",
    "array_2d_area",
    "area",
)
ACCEL = "proposal"
PE_DIMS = (16, 32, 64, 128, 256, 512)  # the paper's sweep
UM2_PER_CM2 = 1e8
SWEEP_FUNCTION = ("simulator.sweep", "pareto_point")


@dataclass(frozen=True)
class ParetoRow:
    model: str  # label, "BERT"
    pe_dim: int
    values: tuple[tuple[str, float], ...]  # reference columns after PE_dim

    def get(self, column: str) -> float | None:
        return dict(self.values).get(column)


def _sweep_function():
    module, name = SWEEP_FUNCTION
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def pending() -> str | None:
    if _sweep_function() is None:
        return f"the sweep's pareto mode ({'.'.join(SWEEP_FUNCTION)}) is not in this build yet"
    return None


def points(selection: Selection) -> list[tuple[str, int]]:
    return [(m, n) for m in selection.models for n in PE_DIMS]


def compute(specs: Specs, point: tuple[str, int]) -> ParetoRow:
    model, pe_dim = point
    fn = _sweep_function()
    values: Mapping[str, float] = fn(specs, model, pe_dim)
    label = make_workload(model, 1).label
    return ParetoRow(
        label,
        pe_dim,
        tuple((c, float(values[c])) for c in COLUMNS[3:] if c in values),
    )


def write(rows: Sequence[ParetoRow], ctx: Context) -> list[Path]:
    present = [c for c in COLUMNS[3:] if any(r.get(c) is not None for r in rows)]
    table = [[ACCEL, r.model, r.pe_dim, *[r.get(c) for c in present]] for r in rows]
    return [write_csv(ctx.results / "pareto.csv", [*COLUMNS[:3], *present], table)]


def curves(rows: Sequence[Mapping[str, object]]) -> dict[str, list[tuple[float, float]]]:
    """Per model, (area in cm^2, latency in s) from rows shaped like pareto.csv."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        out.setdefault(str(r["model"]), []).append(
            (float(r["area"]) / UM2_PER_CM2, float(r["latency"]))  # type: ignore[arg-type]
        )
    return out


def as_records(rows: Sequence[ParetoRow]) -> list[dict[str, object]]:
    return [{"model": r.model, "PE_dim": r.pe_dim, **dict(r.values)} for r in rows]


def draw(
    ours: Sequence[Mapping[str, object]],
    published: Published,
    out: Path,
    compare: bool,
) -> list[Path]:
    """Figure 12 from pareto.csv-shaped rows (ours; the published ones as markers)."""
    return plots.pareto_lines(
        curves(ours),
        curves(published.rows("pareto")),
        "Area (cm$^2$)",
        "Attention Latency (s)",
        out / "fig12",
        compare,
    )


def figures(rows: Sequence[ParetoRow], ctx: Context) -> list[Path]:
    return draw(as_records(rows), ctx.published, ctx.out, ctx.compare)


def render(ours: Sequence[Mapping[str, object]], published: Published) -> str:
    ref = {(r["model"], int(r["PE_dim"])): r for r in published.rows("pareto")}
    table = []
    worst = None
    for r in ours:
        key = (str(r["model"]), int(r["PE_dim"]))  # type: ignore[call-overload]
        cells: list[object] = [key[0], key[1]]
        for column in ("latency", "area"):
            value = float(r[column])  # type: ignore[arg-type]
            if key in ref:
                theirs = float(ref[key][column])
                err = rel_error(value, theirs)
                cells.append(f"{fmt(value, 4)} / {fmt(theirs, 4)} ({pct(err)})")
                if worst is None or abs(err) > abs(worst[0]):
                    worst = (err, f"{column} {key[0]} PE_dim {key[1]}", value, theirs)
            else:
                cells.append(f"{fmt(value, 4)} / -")
        table.append(cells)
    lines = [
        "## Pareto (figure 12)",
        "",
        "FuseMax at 256K tokens, PE arrays 16..512 a side. Each cell: ours / published "
        "(relative error); latency in s, area in um^2.",
        "",
        md_table(["model", "PE_dim", "latency (s)", "area (um^2)"], table),
        "",
    ]
    if worst:
        lines.append(
            f"Worst point: {worst[1]}: ours {fmt(worst[2], 4)}, published {fmt(worst[3], 4)} "
            f"({pct(worst[0])})."
        )
    return "\n".join(lines) + "\n"


def report(rows: Sequence[ParetoRow], ctx: Context) -> str:
    return render(as_records(rows), ctx.published)


EXPERIMENT = Experiment(
    name="pareto",
    title="Pareto: figure 12",
    points=points,
    compute=compute,
    write=write,
    figures=figures,
    report=report,
    pending=pending,
    pending_report=(
        "## Pareto (figure 12)\n\n**Pending**: {reason}. When it is merged, this section "
        "compares latency and area of every point of figure 12 with the published pareto.csv; "
        "`results/pareto.csv` and `fig12` are not written.\n"
    ),
    outputs=("results/pareto.csv", "fig12"),
)
