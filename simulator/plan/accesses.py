"""Access counts of one Einsum under a loop-nest mapping, with Timeloop's semantics (dense).

Pipeline: the base of planning. The GEMM mapper, the per-Einsum views' buffer port time
(timing) and their energy (pricing) are all counted with it.

Given a problem (dimensions; data spaces and the dimensions that index them), storage levels
from the outermost (DRAM) to the innermost (PE registers), and a mapping (per level:
temporal loops, spatial fan-out below it, which data spaces it keeps), this computes for
every level and data space the scalar reads, fills and updates and the utilised capacity,
plus the number of computes -- the quantities Timeloop reports, which an energy table
(ERT) turns into energy.

The rules (perfectly factorised, dense, no sliding windows):

* a level's tile of a data space spans its own temporal loops and every loop below it;
* the tile is refilled on every iteration of the temporal loops above the level, except the
  innermost run of loops that do not index it (the tile stays) -- *visits*;
* a level is filled from the nearest outer level keeping the data space and read by the
  nearest inner one (or by the compute units); spatial loops in between that do not index
  the data space multicast one read to several children (inputs) or reduce several
  children's results into one update (outputs);
* an output's first write of each distinct tile needs no read; every later update reads the
  partial result (temporal reduction); revisited tiles are filled back from the parent and
  every visit drains to it.

Timeloop counts an output's reads at a level as its updates less its first writes and
charges nothing for draining a tile to its parent (v3.0.3 and master alike, checked against
real runs: `tests/test_timeloop_real.py`). Physically the drained values are read out of the
level once more; `drain_reads=True` counts those reads too (the corrected energy accounting
and the timing of the buffer's ports do; the published accounting, the Timeloop backend and
the exports do not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from simulator.support.errors import SpecError


@dataclass(frozen=True)
class DataSpace:
    name: str
    dims: tuple[str, ...]  # dimensions indexing it (a simple projection)
    read_write: bool = False  # the output


@dataclass(frozen=True)
class Problem:
    name: str
    instance: tuple[tuple[str, int], ...]  # dimension -> extent
    dataspaces: tuple[DataSpace, ...]

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.instance)

    def extent(self, dim: str) -> int:
        return dict(self.instance)[dim]


@dataclass(frozen=True)
class Loop:
    dim: str
    factor: int
    spatial: str = ""  # "", "X" or "Y"


@dataclass(frozen=True)
class LevelMapping:
    """One storage level: its temporal loops (outermost first), the spatial fan-out below
    it, and the data spaces it keeps."""

    level: str
    temporal: tuple[Loop, ...] = ()
    spatial: tuple[Loop, ...] = ()
    keep: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Counts:
    reads: int = 0
    fills: int = 0
    updates: int = 0
    capacity: int = 0  # utilised capacity per instance (scalars)
    instances: int = 1  # utilised instances


@dataclass(frozen=True)
class AccessReport:
    problem: str
    levels: tuple[str, ...]
    counts: tuple[tuple[str, str, Counts], ...]  # (level, data space, counts) for kept ones
    computes: int
    cycles: int
    level_instances: tuple[tuple[str, int], ...] = field(default=())

    def of(self, level: str, dataspace: str) -> Counts:
        for lv, ds, c in self.counts:
            if lv == level and ds == dataspace:
                return c
        return Counts()


def analyze(
    problem: Problem, mapping: tuple[LevelMapping, ...], drain_reads: bool = False
) -> AccessReport:
    """Timeloop-style access counts of `problem` under `mapping` (outermost level first);
    `drain_reads`: also count the read of every value drained to the parent level."""
    _validate(problem, mapping)
    n = len(mapping)
    computes = math.prod(e for _, e in problem.instance)
    cycles = math.prod(lp.factor for lm in mapping for lp in lm.temporal)
    instances = []
    count = 1
    for lm in mapping:
        instances.append(count)
        count *= math.prod(lp.factor for lp in lm.spatial)
    results: list[tuple[str, str, Counts]] = []
    for ds in problem.dataspaces:
        rel = set(ds.dims)
        keepers = [i for i in range(n) if ds.name in mapping[i].keep]
        info = {}
        for i in keepers:
            tile = 1
            for lm in mapping[i:]:
                for lp in lm.temporal + lm.spatial:
                    if lp.dim in rel:
                        tile *= lp.factor
            above = [lp for lm in mapping[:i] for lp in lm.temporal if lp.factor > 1]
            trailing = list(above)
            while trailing and trailing[-1].dim not in rel:
                trailing.pop()
            visits = math.prod(lp.factor for lp in trailing)
            distinct = math.prod(lp.factor for lp in above if lp.dim in rel)
            info[i] = (tile, visits, distinct, instances[i])

        def between(i: int, j: int | None, rel: set[str] = rel) -> int:
            """Product of spatial factors between level i and child j not indexing ds."""
            stop = n if j is None else j
            return math.prod(
                lp.factor for lm in mapping[i:stop] for lp in lm.spatial if lp.dim not in rel
            )

        for pos, i in enumerate(keepers):
            tile, visits, distinct, inst = info[i]
            has_parent = pos > 0
            child = keepers[pos + 1] if pos + 1 < len(keepers) else None
            fan = between(i, child)
            if child is None:
                # the compute units: one operand per compute, multicast across the fan-out
                child_traffic = computes
            else:
                ctile, cvisits, _, cinst = info[child]
                child_traffic = ctile * cvisits * cinst
            if not ds.read_write:
                fills = tile * visits * inst if has_parent else 0
                reads = child_traffic // fan
                results.append((mapping[i].level, ds.name, Counts(reads, fills, 0, tile, inst)))
            else:
                updates = child_traffic // fan
                first = tile * distinct * inst
                refills = tile * (visits - distinct) * inst if has_parent else 0
                drains = tile * visits * inst if has_parent and drain_reads else 0
                reads = max(0, updates - first) + drains
                results.append(
                    (mapping[i].level, ds.name, Counts(reads, refills, updates, tile, inst))
                )
    return AccessReport(
        problem.name,
        tuple(lm.level for lm in mapping),
        tuple(results),
        computes,
        cycles,
        tuple((lm.level, instances[i]) for i, lm in enumerate(mapping)),
    )


def _validate(problem: Problem, mapping: tuple[LevelMapping, ...]) -> None:
    product: dict[str, int] = {d: 1 for d in problem.dims}
    names = {ds.name for ds in problem.dataspaces}
    for lm in mapping:
        for lp in lm.temporal + lm.spatial:
            if lp.dim not in product:
                raise SpecError(
                    f"mapping of {problem.name}: level {lm.level} loops over unknown "
                    f"dimension {lp.dim}"
                )
            if lp.factor <= 0:
                raise SpecError(
                    f"mapping of {problem.name}: factor {lp.dim}={lp.factor} at "
                    f"{lm.level} must be positive"
                )
            product[lp.dim] *= lp.factor
        unknown = lm.keep - names
        if unknown:
            raise SpecError(
                f"mapping of {problem.name}: level {lm.level} keeps unknown data "
                f"space(s) {', '.join(sorted(unknown))}"
            )
    for dim, extent in problem.instance:
        if product[dim] != extent:
            raise SpecError(
                f"mapping of {problem.name}: factors of {dim} multiply to "
                f"{product[dim]}, but the problem's {dim} is {extent}"
            )
