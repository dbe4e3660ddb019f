"""Energy and area of one planned and timed point.

Energy: every Einsum's Timeloop view counted and priced by the architecture's energy table
(:mod:`simulator.pricing.energy`), spilled buffer accesses as DRAM reads, leakage over the
timed cycles (corrected accounting). Area: the chip's components from the area table
(:mod:`simulator.pricing.area`).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.plan.point import PointPlan
from simulator.pricing.area import chip_area
from simulator.pricing.energy import action_counts, price
from simulator.spec.tables import AreaTable, EnergyTable


@dataclass(frozen=True)
class PointPrice:
    energy_pj: float
    energy_accounting: str
    energy_per_component: tuple[tuple[str, float], ...]  # component -> pJ
    area_um2: float
    area_per_component: tuple[tuple[str, float], ...]  # component -> um^2
    # component -> (dynamic as Timeloop counts it, drain reads, leakage), pJ
    energy_parts: tuple[tuple[str, float, float, float], ...] = ()


def price_point(
    point: PointPlan,
    total_cycles: float,
    tables: tuple[EnergyTable, AreaTable],
    accounting: str,
) -> PointPrice:
    """`total_cycles`: the point's timed cycles at the architecture's clock (leakage)."""
    ert, art = tables
    spill = sum(s for p in point.phases for _r, _w, s in p.plan.tallies.values())
    points = {c.einsum: c.points for c in point.costs}
    counts = action_counts(
        list(point.views),
        point.arch,
        point.cascade,
        points,
        point.instances,
        spill,
        accounting,
        total_cycles,
    )
    report = price(counts, ert, accounting, frozenset(point.mapping.unpriced))
    area = chip_area(point.arch, art)
    return PointPrice(
        report.total_pj,
        accounting,
        report.per_component,
        area.total_um2,
        tuple((name, um2) for name, _n, um2 in area.per_component),
        report.parts,
    )
