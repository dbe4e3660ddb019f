"""Chip area from an architecture and its area table: sum over components of instances x
um^2 per instance (DRAM is off chip and has no area). Pipeline: pricing; needs only the
architecture."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.spec.arch import Architecture
from simulator.spec.tables import AreaTable


@dataclass(frozen=True)
class AreaReport:
    total_um2: float
    per_component: tuple[tuple[str, int, float], ...]  # (component, instances, um^2 total)

    def of_array(self, array: str) -> float:
        """Area of one PE array: its register file and functional units."""
        return sum(
            a
            for name, _n, a in self.per_component
            if name.startswith(f"{array}.") or name.startswith(f"{array}:")
        )


def chip_area(arch: Architecture, table: AreaTable) -> AreaReport:
    rows = []
    for component, instances in arch.priced_components().items():
        if component == arch.dram.name:
            continue
        label = component
        for a in arch.arrays:
            if component == a.register_component:
                label = f"{a.name}:{component}"
        rows.append((label, instances, instances * table.area(component)))
    return AreaReport(sum(r[2] for r in rows), tuple(rows))
