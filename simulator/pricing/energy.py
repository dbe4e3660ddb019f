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
* `published`: the FuseMax artifact's accounting, to reproduce its numbers -- register
  accesses priced for one PE instance only, no leakage, and the components a mapping lists
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


@dataclass(frozen=True)
class EnergyReport:
    accounting: str
    total_pj: float
    per_component: tuple[tuple[str, float], ...]  # component -> pJ
    actions: tuple[tuple[str, str, float], ...]  # (component, action, count)

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
        for level, ds, c in report.counts:
            # A filtered Einsum's skipped tiles make no accesses (simulator.plan.masks).
            k = view.scale(level, ds)
            reads, fills, updates = (
                (c.reads, c.fills, c.updates)
                if k == 1.0
                else (c.reads * k, c.fills * k, c.updates * k)
            )
            # Timeloop's pricing: reads as `read`, fills as `write`, updates (a partial sum
            # written back) as `update`.
            if level == "DRAM":
                counts[(dram.name, "read")] += reads / dram_width
                counts[(dram.name, "write")] += fills / dram_width
                counts[(dram.name, "update")] += updates / dram_width
            elif level == "buffer":
                counts[(buffer.name, "read")] += reads / row
                counts[(buffer.name, "write")] += fills / row
                counts[(buffer.name, "update")] += updates / row
            elif array.register_component:  # an array without registers prices none
                scale = 1.0 if accounting == "corrected" else 1.0 / max(1, c.instances)
                reg = array.register_component
                counts[(reg, "read")] += reads * scale
                counts[(reg, "write")] += fills * scale
                counts[(reg, "update")] += updates * scale
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
            counts[(component, "leak")] += cycles * n
    return dict(counts)


def price(
    counts: dict[tuple[str, str], float],
    table: EnergyTable,
    accounting: str,
    unpriced: frozenset[str] = frozenset(),
) -> EnergyReport:
    per: dict[str, float] = defaultdict(float)
    for (component, action), n in counts.items():
        if accounting == "published" and component in unpriced:
            continue
        per[component] += n * table.energy(component, action)
    total = sum(per.values())
    return EnergyReport(
        accounting,
        total,
        tuple(sorted(per.items())),
        tuple((c, a, n) for (c, a), n in sorted(counts.items())),
    )
