"""Energy: action counts per component from the per-Einsum access counts, priced by the ERT.

For every Einsum of a configuration, its Timeloop view (`plan/views.py`) is counted with
Timeloop's semantics (`accesses.py`): reads, fills and updates at DRAM, the global buffer
and the PE registers. Accelergy prices one access of a component's full width, so a
level's actions are its value accesses divided by the values one access carries (DRAM: its
width / datawidth, the buffer: a row, registers: one value); reads are `read` actions,
fills and updates `write`/`update` actions. Compute actions come from the cascade's
operation counts and the PE operation table (`exp` on FuseMax = 6 `mac` actions of the
array's MAC units). Spilled buffer accesses are DRAM accesses. Energy = sum of counts x ERT.

Two accountings:

* `corrected` (default): every PE's registers are priced, every operation is priced, and
  leakage (pJ per cycle per instance) is added over the run;
* `published`: the FuseMax artifact's accounting, to reproduce its numbers -- Timeloop's
  access counts (no read for a value drained to its parent level; the corrected accounting
  counts one), register accesses priced for one PE instance only, no leakage, and the
  components a mapping lists
  under `published: {unpriced: [...]}` left unpriced (the artifact never priced +Cascade's
  exp units, filed under a misspelled component name).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from simulator.cascade.ops import ops_per_point
from simulator.plan.accesses import analyze
from simulator.plan.views import EinsumView
from simulator.spec.arch import Architecture
from simulator.spec.tables import EnergyTable

ACCOUNTINGS = ("corrected", "published")


# Action names of the terms the corrected accounting adds to Timeloop's dynamic energy: the
# reads of values drained to a parent level (priced as reads) and leakage.
DRAIN = "read:drain"
LEAK = "leak"


@dataclass(frozen=True)
class EnergyReport:
    accounting: str
    total_pj: float
    per_component: tuple[tuple[str, float], ...]  # component -> pJ
    actions: tuple[tuple[str, str, float], ...]  # (component, action, count)
    # component -> (dynamic as Timeloop counts it, drain reads, leakage), pJ
    parts: tuple[tuple[str, float, float, float], ...] = ()

    def of(self, component: str) -> float:
        return dict(self.per_component).get(component, 0.0)


def action_counts(
    views: list[EinsumView],
    arch: Architecture,
    cascade,
    points: dict[str, int],
    instances: int,
    spill_values: float,
    accounting: str,
    cycles: float,
) -> dict[tuple[str, str], float]:
    """Action counts per (component, action) for a whole configuration run."""
    counts: dict[tuple[str, str], float] = defaultdict(float)
    dram, buffer = arch.dram, arch.buffer
    dram_width = dram.values_per_access
    row = buffer.values_per_access
    for view in views:
        array = arch.array(view.array)
        report = analyze(view.problem, view.mapping)
        # Drained values are read out of their level once more: the corrected accounting
        # counts those reads (as DRAIN actions), Timeloop -- and so the published
        # accounting, whose numbers came from it -- does not.
        drained = (
            analyze(view.problem, view.mapping, drain_reads=True)
            if accounting == "corrected"
            else report
        )
        for (level, ds, c), (_l, _d, cd) in zip(report.counts, drained.counts, strict=True):
            # A filtered Einsum's skipped tiles make no accesses (simulator.plan.masks).
            k = view.scale(level, ds)
            reads, fills, updates, drains = (
                c.reads * k,
                c.fills * k,
                c.updates * k,
                (cd.reads - c.reads) * k,
            )
            # Timeloop's pricing: reads as `read`, fills as `write`, updates (a partial sum
            # written back) as `update`.
            if level == "DRAM":
                component, per = dram.name, 1.0 / dram_width
            elif level == "buffer":
                component, per = buffer.name, 1.0 / row
            elif array.register_component:  # an array without registers prices none
                component = array.register_component
                per = 1.0 if accounting == "corrected" else 1.0 / max(1, c.instances)
            else:
                continue
            counts[(component, "read")] += reads * per
            counts[(component, "write")] += fills * per
            counts[(component, "update")] += updates * per
            if drains:
                counts[(component, DRAIN)] += drains * per
        e = cascade.einsum(view.einsum)
        per_point = ops_per_point(cascade, e)
        total_points = points[view.einsum] * instances
        for kind, n in per_point.items():
            op = array.op(kind)
            if op is None or n <= 0:
                continue
            for unit, k in op.actions:
                counts[(f"{array.name}.{unit}", "compute")] += n * k * total_points
    counts[(dram.name, "read")] += spill_values * instances / dram_width
    if accounting == "corrected":
        for component, n in arch.priced_components().items():
            counts[(component, LEAK)] += cycles * n
    return dict(counts)


def price(
    counts: dict[tuple[str, str], float],
    table: EnergyTable,
    accounting: str,
    unpriced: frozenset[str] = frozenset(),
) -> EnergyReport:
    per: dict[str, float] = defaultdict(float)
    parts: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for (component, action), n in counts.items():
        if accounting == "published" and component in unpriced:
            continue
        pj = n * table.energy(component, "read" if action == DRAIN else action)
        per[component] += pj
        parts[component][{DRAIN: 1, LEAK: 2}.get(action, 0)] += pj
    total = sum(per.values())
    return EnergyReport(
        accounting,
        total,
        tuple(sorted(per.items())),
        tuple((c, a, n) for (c, a), n in sorted(counts.items())),
        tuple((c, *v) for c, v in sorted(parts.items())),  # type: ignore[misc]
    )
