"""A fan-out of cores: the units a phase deals to them in waves, and what a shared cache
saves while a wave runs.

A chip of many cores (a GPU's SMs: `Architecture.cores`) runs a tiled phase as a grid of
independent **units** -- an instance's iterations of its outer loops up to the first loop
whose rank one of its Einsums reduces or steps through (FlashAttention's blocks of query
rows of one head) -- dealt to the cores in **waves** of `cores` units, in order: the
(batch, head) instances outermost, then the unit loops, the last fastest (as a GPU's grid
with its x index fastest). A grid that does not divide into waves leaves cores idle in its
last one.

Where the global buffer is a **cache shared by the cores** (`cache: true`, a GPU's L2),
the units of one wave that read the same data fetch it from DRAM once: a tensor a unit
loop does not index (K and V under the blocks of query rows) is read by every unit of its
instance, and the units of one instance in one wave share that read. What the wave's
readers hold in flight must fit the cache; the share that does not is read again, as
without the cache:

* units that make the same steps (no mask) walk the shared tensor in step: in flight is
  each group's current tile, double-buffered;
* under a mask the units make different numbers of steps, fall out of step after the
  first wave and spread over the whole tensor: in flight is each group's whole data.

Under a mask the units do unequal work (causal: block i of query rows computes i + 1
chunks of keys): with few waves the order matters, and the units are dealt in order to the
first core that is free (:func:`makespan`).

Left out: hits between waves and between instances (a weight every instance reads is read
per instance), and the order in which a real scheduler issues units beyond "in order".
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from simulator.cascade.ir import Cascade, rank_of
from simulator.plan.masks import Constraint, active_count
from simulator.spec.mapping import Phase
from simulator.support.errors import SpecError


def unit_loops(
    cascade: Cascade,
    phase: Phase,
    partitions: dict[str, tuple[str, ...]],
) -> tuple[str, ...]:
    """The phase's outer loops that make independent units: up to the first whose rank one
    of its Einsums reduces or steps through (a recurrence's chunks run in order) -- but for
    the loops the phase splits over the cores (`split:`, split-K), units all the same: each
    reduces its part of the rank and the parts accumulate in the cores' shared cache. A
    recurrence's steps cannot be split (each needs the one before)."""
    names = {em.einsum for em in phase.einsums}
    ordered: set[str] = set()
    stepped: dict[str, tuple[str, str]] = {}  # a recurrence's rank -> (Einsum, the rank)
    for e in cascade.einsums:
        if e.name in names:
            ordered.update(r.lower() for r in e.reduced)
            if e.iterative:
                ordered.add(e.iterative.lower())
                stepped.setdefault(e.iterative.lower(), (e.name, rank_of(e.iterative)))
    out: list[str] = []
    for loop in phase.loops:
        rank = _rank_of_loop(loop, partitions)
        if loop in phase.split:
            step = stepped.get(loop.lower()) or stepped.get(rank.lower())
            if step is not None:
                raise SpecError(
                    f"phase '{phase.name}' splits {loop} over the cores, but Einsum "
                    f"'{step[0]}' steps through {step[1]} in order (a recurrence)",
                    phase.loc,
                )
            out.append(loop)
            continue
        if rank.lower() in ordered or loop.lower() in ordered:
            break
        out.append(loop)
    return tuple(out)


def _rank_of_loop(loop: str, partitions: dict[str, tuple[str, ...]]) -> str:
    """The rank a loop walks: the one the mapping partitions it from, else its own."""
    return next((r for r, comps in partitions.items() if loop in comps), loop)


def shared_einsums(
    cascade: Cascade,
    phase: Phase,
    partitions: dict[str, tuple[str, ...]],
    units: tuple[str, ...],
) -> frozenset[str]:
    """The phase's Einsums that none of its unit loops (:func:`unit_loops`) indexes: work an
    instance does once and every unit needs (a linear attention's key-value summary,
    reduced over the keys, under blocks of query rows). The units are independent: each
    does that work itself, or waits for the one that does -- either way a unit's time holds
    all of it. Empty where the phase has no unit loop."""
    if not units:
        return frozenset()
    ranks = {_rank_of_loop(u, partitions) for u in units}
    return frozenset(
        em.einsum
        for em in phase.einsums
        if not ranks & set(cascade.einsum(em.einsum).iteration_ranks)
    )


def sharing_group(
    units: tuple[str, ...],
    signature: tuple[tuple[str, int], ...],
    tensor_comps: tuple[str, ...],
) -> int:
    """How many consecutive units read the same data of a tensor: the innermost unit loops
    that refetch it (in its reuse signature) without indexing it. A unit loop that indexes
    it ends the run (units further apart read other data)."""
    refetch = dict(signature)
    group = 1
    for loop in reversed(units):
        if loop in tensor_comps:
            break
        extent = refetch.get(loop)
        if extent is None:
            continue  # extent 1, or the tensor is kept above it: no refetch here
        group *= extent
    return group


def spans(group: int, cores: int) -> float:
    """Waves a run of `group` consecutive units spans, on average over where it starts in
    a wave of `cores`: 1 + (group - 1) / cores."""
    return 1.0 + (group - 1) / cores


def groups_in_flight(group: int, items: int, cores: int) -> float:
    """Distinct groups of readers in one wave (on average)."""
    if group <= 1:
        return float(min(items, cores))
    return min(math.ceil(items / group), cores / group + 1.0)


@dataclass(frozen=True)
class SharedRead:
    """One DRAM read of a phase that the cores of a wave may share through the cache."""

    tensor: str
    values: float  # per instance, as fetched without the cache (one fetch per unit)
    group: int  # consecutive units reading the same data
    union: float  # per instance, the data one group reads together (once per wave it spans)
    in_flight: float  # values one group holds in the cache while it reads


def hit_share(reads: list[SharedRead], items: int, cores: int, capacity_values: float) -> float:
    """The share of the sharing the cache delivers: 1 where the wave's groups' data in
    flight fits it, else the part that fits."""
    working = sum(groups_in_flight(r.group, items, cores) * r.in_flight for r in reads)
    if working <= 0:
        return 1.0
    return max(0.0, min(1.0, capacity_values / working))


def cached_values(read: SharedRead, cores: int, hits: float) -> float:
    """DRAM values of one shared read with the cache: each group's data once per wave it
    spans where the cache holds it, each unit's own fetches where it does not -- never
    more than without the cache."""
    shared = read.union * spans(read.group, cores)
    return min(read.values, hits * shared + (1.0 - hits) * read.values)


# --------------------------------------------------------------------------------------
# Units of unequal work (a mask): dealt in order to the first free core

MAX_SCHEDULED_WAVES = 64  # more waves than this: the tail is under 2% -- the average holds


def unit_weights(
    cons: tuple[Constraint, ...],
    units: tuple[str, ...],
    inner: tuple[str, ...],
    extents: dict[str, int],
) -> tuple[float, ...]:
    """Each unit's work in tiles (units in order, the last unit loop fastest): the tiles of
    the `inner` tile loops that hold a kept point with the unit loops fixed. Under a causal
    mask block i of query rows computes i + 1 chunks of keys."""
    shape = [int(extents.get(u, 1)) for u in units]
    constrained = [
        i for i, u in enumerate(units) if any(u == c for con in cons for c, _ in con.coef)
    ]
    if not constrained:
        count = active_count(cons, inner, extents) if inner else 1
        return (float(count),) * math.prod(shape)
    out = np.empty(shape, dtype=np.float64)
    for index in np.ndindex(*shape):
        fixed = {units[i]: index[i] for i in constrained}
        sub = tuple(
            Constraint(
                tuple((c, a) for c, a in con.coef if c not in fixed),
                con.const + sum(a * fixed[c] for c, a in con.coef if c in fixed),
            )
            for con in cons
        )
        out[index] = active_count(sub, inner, extents)
    return tuple(out.ravel().tolist())


def makespan(weights: tuple[float, ...], instances: int, cores: int) -> float | None:
    """The time to run `instances` copies of the units (in order, each to the first core
    that is free, as a GPU deals its grid's blocks), in units of work; None past
    `MAX_SCHEDULED_WAVES` waves (the average then holds)."""
    items = instances * len(weights)
    if items > MAX_SCHEDULED_WAVES * cores:
        return None
    free = [0.0] * min(cores, items)
    heapq.heapify(free)
    for _ in range(instances):
        for w in weights:
            heapq.heappush(free, heapq.heappop(free) + w)
    return max(free)
