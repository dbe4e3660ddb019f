"""Access counts of one Einsum under a loop-nest mapping, with Timeloop's semantics (dense).

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
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from simulator.errors import Loc, SpecError


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


def analyze(problem: Problem, mapping: tuple[LevelMapping, ...]) -> AccessReport:
    """Timeloop-style access counts of `problem` under `mapping` (outermost level first)."""
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
                drains = tile * visits * inst if has_parent else 0
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


# --------------------------------------------------------------------------------------
# Energy from an energy-reference table


@dataclass(frozen=True)
class LevelEnergy:
    """Energy per action of one storage level (pJ per access of `block` scalars)."""

    read_pj: float
    write_pj: float
    update_pj: float
    block: int = 1
    leak_pj_per_cycle: float = 0.0


def energy_pj(
    report: AccessReport,
    levels: Mapping[str, LevelEnergy],
    compute_pj: float,
    compute_leak_pj_per_cycle: float = 0.0,
    compute_instances: int = 0,
) -> dict[str, float]:
    """Energy per level (and 'compute'), Timeloop's way: scalars / block x energy per access,
    plus leakage per instance-cycle."""
    out: dict[str, float] = {}
    for level, _ds, c in report.counts:
        e = levels[level]
        dyn = (c.reads * e.read_pj + c.fills * e.write_pj + c.updates * e.update_pj) / e.block
        out[level] = out.get(level, 0.0) + dyn
    for level, inst in report.level_instances:
        if level in levels and levels[level].leak_pj_per_cycle:
            out[level] = (
                out.get(level, 0.0) + levels[level].leak_pj_per_cycle * report.cycles * inst
            )
    out["compute"] = report.computes * compute_pj + (
        compute_leak_pj_per_cycle * report.cycles * compute_instances
    )
    return out


# --------------------------------------------------------------------------------------
# Reading Timeloop's formats


def mapping_from_timeloop(
    entries: list,
    level_order: list[str],
    source: str = "<mapping>",
    anchors: Mapping[str, str] | None = None,
) -> tuple[LevelMapping, ...]:
    """A Timeloop v0.4 `mapping:` list (targets with temporal/spatial/dataspace entries).

    `level_order` lists the storage levels outermost first; spatial entries target a
    container and attach to the storage level above it in the architecture (`anchors`:
    container -> that level; without them, the level of the temporal entry before it).
    Timeloop permutations list loops innermost first."""
    temporal: dict[str, tuple[Loop, ...]] = {}
    spatial: dict[str, list[Loop]] = {lv: [] for lv in level_order}
    keep: dict[str, frozenset[str]] = {lv: frozenset() for lv in level_order}
    last_storage = level_order[0]
    for entry in entries:
        target = str(entry.get("target"))
        kind = entry.get("type")
        factors = _factors(entry.get("factors", []), source)
        perm = [str(p) for p in entry.get("permutation", [])]
        if kind == "temporal":
            if target not in level_order:
                raise SpecError(
                    f"{source}: temporal mapping for unknown level '{target}'", Loc(source)
                )
            order = list(reversed(perm)) + [d for d in factors if d not in perm]
            temporal[target] = tuple(Loop(d, factors[d]) for d in order if d in factors)
            last_storage = target
        elif kind == "spatial":
            if anchors and target in anchors and target not in level_order:
                anchor = anchors[target]
            else:
                anchor = _storage_above(target, level_order, last_storage)
            axis_split = entry.get("split")
            order = perm + [d for d in factors if d not in perm]
            for k, d in enumerate(d for d in order if d in factors):
                axis = "X" if axis_split is None or k < int(axis_split) else "Y"
                spatial[anchor].append(Loop(d, factors[d], axis))
        elif kind in ("dataspace", "bypass"):
            if target in level_order:
                keep[target] = frozenset(str(x) for x in entry.get("keep", []))
        else:
            raise SpecError(f"{source}: unsupported mapping entry type '{kind}'", Loc(source))
    return tuple(
        LevelMapping(lv, temporal.get(lv, ()), tuple(spatial[lv]), keep[lv]) for lv in level_order
    )


def _storage_above(container: str, level_order: list[str], last_storage: str) -> str:
    return last_storage if container not in level_order else container


def _factors(raw: object, source: str) -> dict[str, int]:
    out: dict[str, int] = {}
    items = raw.split() if isinstance(raw, str) else list(raw or [])
    for item in items:
        match = re.fullmatch(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(\d+)\s*", str(item))
        if not match:
            raise SpecError(f"{source}: bad factor '{item}' (expected DIM=N)", Loc(source))
        out[match.group(1)] = int(match.group(2))
    return out


_MAP_LEVEL = re.compile(r"^(\w+) \[(.*)\]\s*$")
_MAP_LOOP = re.compile(r"^[|\s]*for (\w+) in \[0:(\d+)\)\s*(\(Spatial-([XY])\))?")


def mapping_from_map_text(text: str, storage_levels: list[str]) -> tuple[LevelMapping, ...]:
    """Timeloop's printed mapping (`timeloop-model.map.txt`). Loops under a dummy
    `inter_*_spatial` level are spatial fan-out of the storage level above it."""
    levels: list[LevelMapping] = []
    current: str | None = None
    temporal: list[Loop] = []
    spatial: list[Loop] = []
    keep: frozenset[str] = frozenset()

    def flush() -> None:
        if current is not None:
            levels.append(LevelMapping(current, tuple(temporal), tuple(spatial), keep))

    for line in text.splitlines():
        level = _MAP_LEVEL.match(line.strip())
        if level:
            name = level.group(1)
            if name in storage_levels:
                flush()
                current, temporal, spatial = name, [], []
                keep = frozenset(m.group(1) for m in re.finditer(r"(\w+):\d+", level.group(2)))
            continue
        loop = _MAP_LOOP.match(line)
        if loop and current is not None:
            lp = Loop(loop.group(1), int(loop.group(2)), loop.group(4) or "")
            (spatial if lp.spatial else temporal).append(lp)
    flush()
    return tuple(levels)
