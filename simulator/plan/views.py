"""Each Einsum of a planned phase as a Timeloop problem + mapping (the per-Einsum view).

Planning step 4. A phase plan reasons about a whole phase; the global buffer's port time
(timing), energy (pricing) and the Timeloop export need each Einsum on its own, as
Timeloop sees it: a problem (its rank components as dimensions,
each tensor it touches as a data space) and a mapping over the storage hierarchy

    DRAM  ->  global buffer  ->  (spatial fan-out over the array)  ->  PE registers

* DRAM: the batch and head loops, then the tile loops down to the innermost keep point of
  the Einsum's buffered tensors; it keeps the DRAM-homed tensors;
* global buffer: the remaining tile loops, then the Einsum's inner temporal loops (operands
  stream from the buffer to the PEs every step); it keeps tensors with a keep point (tiles)
  and buffer-homed tensors; `stream` tensors bypass it;
* spatial fan-out: the mapping's spatial components for the Einsum's array, plus any
  component the mapping leaves out of the loops (held inside the array, e.g. E when K is
  stationary in the PEs);
* PE registers: no loops; they keep every tensor the Einsum touches (one value at a time).

A tensor read twice by one Einsum (PRM reads RM[m1] and RM[m1+1]) is two data spaces. A
buffer-homed value read on its producer's array in the producer's pass (SD reading SN) is
`forwarded`: the PEs pass it on without the buffer. A
DRAM-homed tile that an earlier Einsum of the same phase already brought on chip (`shared`)
is kept by the buffer only: its data is not fetched twice.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from simulator.cascade.ir import Einsum
from simulator.plan.accesses import DataSpace, LevelMapping, Loop, Problem
from simulator.plan.facts import CascadeFacts, placement_of
from simulator.plan.masks import active_fraction, constraints
from simulator.plan.nest import Nest, Partitions, reuse_signature, tensor_components
from simulator.plan.phases import PhasePlan, dense_reads
from simulator.spec.arch import Architecture, Array
from simulator.spec.mapping import Mapping, Placement
from simulator.spec.workload import Workload

# The batch and head loops every Einsum runs under. Lower-case names, so they cannot clash
# with a cascade's ranks (upper-case by the language's rule): a cascade may have a rank B or
# H. The Timeloop export gives them the letters B and H when the cascade leaves them free.
BATCH, HEADS = "batch", "heads"
BATCH_DIMS = ((BATCH, "batch"), (HEADS, "heads"))
LEVELS = ("DRAM", "buffer", "registers")


@dataclass(frozen=True)
class EinsumView:
    einsum: str
    array: str
    problem: Problem
    mapping: tuple[LevelMapping, ...]
    dataspace_tensor: tuple[tuple[str, str], ...]  # data space -> canonical tensor
    # A filtered Einsum computes only some tiles (simulator.plan.masks): the fraction of its
    # accesses that happen -- per DRAM-kept data space, else the tiles' fraction.
    active: float = 1.0
    dram_active: tuple[tuple[str, float], ...] = ()

    def scale(self, level: str, dataspace: str) -> float:
        if level == "DRAM":
            return dict(self.dram_active).get(dataspace, self.active)
        return self.active


@dataclass(frozen=True)
class ViewScope:
    """What every Einsum view of a phase reads: the cascade's facts (its Einsums, each
    tensor's canonical name), where each canonical tensor lives in the phase, the mapping's
    partitions and the point's extents, and the batch and head loops every Einsum runs
    under."""

    facts: CascadeFacts
    placements: dict[str, Placement]
    partitions: dict[str, tuple[str, ...]]
    extents: dict[str, int]
    batch: int
    heads: int
    # tensors a library GEMM of the mapping reads whole: their writers write them whole
    # (simulator.plan.phases.dense_reads)
    whole: frozenset[str] = frozenset()


def einsum_view(
    scope: ViewScope,
    e: Einsum,
    nest: Nest,
    array: Array,
    shared: frozenset[str] = frozenset(),
    forwarded: frozenset[str] = frozenset(),
) -> EinsumView:
    canonical, partitions, extents = scope.facts.aliases, scope.partitions, scope.extents
    batch, heads = scope.batch, scope.heads
    tensors = [(a.tensor, False) for a in e.reads()] + [(e.output.tensor, True)]
    accesses = tuple(
        (tensor, is_output, scope.placements[canonical.get(tensor, tensor)])
        for tensor, is_output in tensors
    )
    two_d = array.mesh_y > 1
    args = (scope, e, nest, accesses, shared, forwarded, two_d)
    if isinstance(partitions, Partitions):  # the same for every tile size: kept
        key = ("einsum view", e, nest, accesses, shared, forwarded, two_d)
        shape = partitions.kept(key, lambda: _view_shape(*args))
    else:
        shape = _view_shape(*args)
    dram_loops = tuple(Loop(d, v) for d, v in ((BATCH, batch), (HEADS, heads))) + tuple(
        Loop(c, extents[c]) for c in shape.dram_loops
    )
    buffer_loops = tuple(Loop(c, extents[c]) for c in shape.buffer_loops)
    spatial = tuple(Loop(c, extents[c], axis) for c, axis in shape.spatial)
    instance = ((BATCH, batch), (HEADS, heads)) + tuple((c, extents[c]) for c in nest.comps)
    mapping = (
        LevelMapping("DRAM", dram_loops, (), shape.keep_dram),
        LevelMapping("buffer", buffer_loops, spatial, shape.keep_buffer),
        LevelMapping("registers", (), (), shape.every),
    )
    return EinsumView(
        e.name, array.name, Problem(e.name, instance, shape.dataspaces), mapping, shape.names
    )


@dataclass(frozen=True)
class _ViewShape:
    """An Einsum view without its extents: what its tile sizes do not change."""

    dataspaces: tuple[DataSpace, ...]
    names: tuple[tuple[str, str], ...]  # data space -> canonical tensor
    keep_dram: frozenset[str]
    keep_buffer: frozenset[str]
    every: frozenset[str]
    dram_loops: tuple[str, ...]
    buffer_loops: tuple[str, ...]
    spatial: tuple[tuple[str, str], ...]  # (component, axis)


def _view_shape(
    scope: ViewScope,
    e: Einsum,
    nest: Nest,
    accesses: tuple[tuple[str, bool, Placement], ...],
    shared: frozenset[str],
    forwarded: frozenset[str],
    two_d: bool,
) -> _ViewShape:
    cascade, canonical, partitions = scope.facts.cascade, scope.facts.aliases, scope.partitions
    dataspaces: list[DataSpace] = []
    names: list[tuple[str, str]] = []
    keep_dram: set[str] = set()
    keep_buffer: set[str] = set()
    keep_points: list[int] = []
    for tensor, is_output, place in accesses:
        canon = canonical.get(tensor, tensor)
        base = canon if not any(n == canon for n, _ in names) else f"{canon}_{len(names)}"
        comps, _ = tensor_components(cascade, tensor, partitions)
        dims = (BATCH, HEADS) + tuple(c for c in comps if c in nest.comps)
        dataspaces.append(DataSpace(base, dims, read_write=is_output))
        names.append((base, canon))
        if place.home == "DRAM" and canon in shared and not is_output:
            keep_buffer.add(base)  # fetched by an earlier Einsum: its tile as that one's
            if place.keep in nest.tile_loops:
                keep_points.append(nest.tile_loops.index(place.keep))
        elif place.home == "DRAM":
            keep_dram.add(base)
            # A keep point this Einsum does not loop over means it streams the tensor (the
            # traffic model's rule): only `top` and its own tile loops buffer it.
            if place.keep == "top":
                keep_buffer.add(base)
            elif place.keep in nest.tile_loops:
                keep_buffer.add(base)
                keep_points.append(nest.tile_loops.index(place.keep))
        elif place.home == "buffer" and canon not in forwarded:
            keep_buffer.add(base)
    boundary = max(keep_points) + 1 if keep_points else len(nest.tile_loops)
    covered = set(nest.tile_loops) | set(nest.spatial) | set(nest.inner)
    leftover = tuple(c for c in nest.comps if c not in covered)  # inside the array, unordered
    axes = ("X", "Y")
    spatial = tuple(
        (c, axes[min(i, 1)] if two_d else "X") for i, c in enumerate(nest.spatial + leftover)
    )
    return _ViewShape(
        tuple(dataspaces),
        tuple(names),
        frozenset(keep_dram),
        frozenset(keep_buffer),
        frozenset(n for n, _ in names),
        nest.tile_loops[:boundary],
        nest.tile_loops[boundary:] + nest.inner,
        spatial,
    )


def phase_views(
    plan: PhasePlan,
    mapping: Mapping,
    facts: CascadeFacts,
    arch: Architecture,
    extents: dict[str, int],
    partitions: dict[str, tuple[str, ...]],
    workload: Workload,
) -> list[EinsumView]:
    """The Timeloop view of every Einsum of one planned phase (see module docstring)."""
    if plan.gemm is not None:  # a mapped GEMM: the mapper's own loop nest
        m = plan.gemm
        return [
            EinsumView(
                m.gemm.einsum,
                m.array,
                m.problem,
                m.levels,
                tuple(
                    (ds.name, facts.aliases.get(ds.name, ds.name)) for ds in m.problem.dataspaces
                ),
            )
        ]
    cascade = facts.cascade
    places: dict[str, Placement] = {}
    for em in plan.phase.einsums:
        e = cascade.einsum(em.einsum)
        for tensor in [a.tensor for a in e.reads()] + [e.output.tensor]:
            places[facts.aliases.get(tensor, tensor)] = placement_of(plan.phase, facts, tensor)
    scope = ViewScope(
        facts,
        places,
        partitions,
        extents,
        mapping.batch,
        mapping.heads,
        dense_reads(mapping, facts),
    )
    seen: set[tuple] = set()
    views = []
    for em in plan.phase.einsums:
        e = cascade.einsum(em.einsum)
        nest = plan.nests[em.einsum]
        shared = set()
        for acc in e.reads():
            canon = facts.aliases.get(acc.tensor, acc.tensor)
            place = places[canon]
            if place.home != "DRAM" or place.keep in (None, "stream"):
                continue
            comps, _ = tensor_components(cascade, acc.tensor, partitions)
            signature = (canon, reuse_signature(nest, comps, place.keep, extents))
            if signature in seen:
                shared.add(canon)
            seen.add(signature)
        forwarded = set()
        for acc in e.reads():
            canon = facts.aliases.get(acc.tensor, acc.tensor)
            producer = facts.producers.get(canon)
            if (
                places[canon].home == "buffer"
                and producer is not None
                and mapping.array_of(producer) == em.array
                and facts.passes[producer] == facts.passes[e.name]
            ):
                forwarded.add(canon)
        array = arch.array(em.array)
        view = einsum_view(scope, e, nest, array, frozenset(shared), frozenset(forwarded))
        if em.einsum in dict(plan.activity):
            view = _masked(view, plan, e, nest, scope)
        views.append(view)
    return views


def _masked(
    view: EinsumView, plan: PhasePlan, e: Einsum, nest: Nest, scope: ViewScope
) -> EinsumView:
    """The view of a filtered Einsum with the share of its accesses that happen: its tiles'
    fraction, and for DRAM-kept data the fraction of fetches with a kept point (as the
    phase's traffic counts them)."""
    places, facts = scope.placements, scope.facts
    partitions, extents = scope.partitions, scope.extents
    cons = constraints(e, partitions, extents)
    dram = []
    for ds, canon in view.dataspace_tensor:
        place = places[canon]
        if place.home != "DRAM":
            continue
        tensor = next(
            (
                a.tensor
                for a in [*e.reads(), e.output]
                if facts.aliases.get(a.tensor, a.tensor) == canon
            ),
            canon,
        )
        if tensor == e.output.tensor and canon in scope.whole:
            dram.append((ds, 1.0))  # written whole: a library GEMM reads every value
            continue
        comps, _ = tensor_components(facts.cascade, tensor, partitions)
        keep = place.keep if place.keep is not None else "top"
        levels = tuple(lv for lv, _ in reuse_signature(nest, comps, keep, extents))
        dram.append((ds, active_fraction(cons, levels, extents)))
    return dataclasses.replace(view, active=plan.active(e.name), dram_active=tuple(dram))
