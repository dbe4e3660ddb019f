"""The program a pipelined (waterfall) phase runs: per-tile operations and their dependencies.

Pipeline: timing, cycle engine -- built from a phase plan, run by
:mod:`simulator.timing.cycle.waterfall`.

A phase with `pipeline:` iterates its temporal tile loops (e.g. P2, M1, P1 for FuseMax's
Mapping 1) over every (batch, head) instance; one iteration is an *epoch*. In each epoch
every Einsum of the phase that iterates the epoch's loops runs one operation on its array
(an Einsum that does not iterate a loop runs once per value of the others: AV, which has no
m1, runs in the last m1 round, because it reads RNV[M1]). An operation's work is its share
of the Einsum's points, at the PE cost of its operations, spread over the PEs its spatial
components occupy (`steps` cycles at the first PE).

Dependencies follow the data: an operation depends on the operation that produced each
tensor it reads -- the same epoch, or the previous step of an iterative rank (RD[m1] is the
RD of the previous m1 round), or the last epoch of a loop it reads the final value of. The
latency of a dependency follows the arrays (`DepKind`): on the same array a consumer trails
its producer's wavefront; from the 2D to the 1D array a value is reduced down the columns;
from the 1D to the 2D array it is broadcast back into them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from simulator.cascade.ir import ISym, IVar, rank_of
from simulator.cascade.ops import count_points, iteration_extents
from simulator.plan.costs import cycles_per_point
from simulator.plan.facts import CascadeFacts, canonical
from simulator.plan.nest import leaf_components
from simulator.plan.phases import PhasePlan
from simulator.plan.point import PointPlan
from simulator.spec.arch import Architecture
from simulator.support.errors import SpecError


class DepKind(Enum):
    CHAIN = "chain"  # same array: the consumer's wavefront trails the producer's
    REDUCE = "reduce"  # 2D -> 1D: reduced down the columns into the 1D array
    BROADCAST = "broadcast"  # 1D -> 2D: broadcast back into the columns


@dataclass(frozen=True)
class DepSpec:
    source: str  # producing Einsum
    rule: tuple[tuple[str, str], ...]  # epoch loop -> same | prev | last | first
    kind: DepKind


@dataclass(frozen=True)
class OpSpec:
    einsum: str
    array: str
    order: int  # program order within an epoch (from the schedule)
    steps: int  # cycles at the first PE
    points: int  # iteration points per operation (for utilisation)
    presence: tuple[tuple[str, str], ...]  # epoch loop the Einsum does not iterate -> last|first
    deps: tuple[DepSpec, ...]
    two_d: bool  # runs on a 2D array (a wavefront; holds registers while its tile is open)


@dataclass(frozen=True)
class Program:
    phase: str
    loops: tuple[tuple[str, int], ...]  # epoch loops, outermost first, with extents
    instances: int  # (batch, head) repetitions of the whole loop nest
    ops: tuple[OpSpec, ...]
    tiles_in_flight: int  # tiles the 2D array may hold at once
    live_registers: int  # registers one open tile holds in every 2D PE
    skew: dict[str, int]  # array -> wavefront skew
    reduce_cycles: int  # 2D -> 1D
    broadcast_cycles: int  # 1D -> 2D
    dram_cycles_per_epoch: float
    drain_cycles: int = 0  # cycles to shift a tile's outputs out of the 2D array
    port_cycles_per_epoch: float = 0.0  # the global buffer's ports (0: unlimited bandwidth)

    @property
    def epochs_per_instance(self) -> int:
        return math.prod(n for _, n in self.loops)

    @property
    def total_epochs(self) -> int:
        return self.instances * self.epochs_per_instance

    def coords(self, epoch: int) -> dict[str, int]:
        out: dict[str, int] = {}
        rest = epoch
        for name, n in reversed(self.loops):
            out[name] = rest % n
            rest //= n
        out["_instance"] = rest
        return out

    def index(self, coords: dict[str, int]) -> int:
        idx = coords["_instance"]
        for name, n in self.loops:
            idx = idx * n + coords[name]
        return idx


def _read_rule(
    facts: CascadeFacts,
    consumer_loops: tuple[str, ...],
    producer_loops: tuple[str, ...],
    access,
    loops: tuple[tuple[str, int], ...],
    partitions,
) -> tuple[tuple[str, str], ...]:
    """Which epoch of the producer a read refers to, loop by loop."""
    cascade = facts.cascade
    info = cascade.iterative_tensors().get(access.tensor)
    carried_comps: set[str] = set()
    if info is not None:
        pos, var = info
        ix = access.indices[pos].expr
        if isinstance(ix, IVar) and ix.name == var:  # RM[m1]: the previous step
            carried_comps.update(leaf_components(rank_of(var), partitions))
    rule = []
    for name, _n in loops:
        if name not in producer_loops:
            continue  # resolved by the producer's own presence
        if name in consumer_loops:
            rule.append((name, "prev" if name in carried_comps else "same"))
        else:
            rule.append((name, "last"))  # outside the loop: its final value (RNV[M1] for AV)
    return tuple(rule)


def dense_points(cascade, e, extents: dict[str, int]) -> int:
    """Points of an Einsum's iteration space, every point of a filtered one counted (a tile
    on the array computes all its points)."""
    if e.filters():
        return math.prod(iteration_extents(cascade, e, extents).values())
    return count_points(cascade, e, extents)


def build_program(
    point: PointPlan, plan: PhasePlan, phase_traffic_values: float, port_cycles: float = 0.0
) -> Program:
    """The waterfall program of one planned phase of a point: every Einsum of a tile one
    operation on its array, with its dependencies; `phase_traffic_values`, `port_cycles`:
    the phase's DRAM traffic (values, all instances) and buffer-port time, spread over its
    epochs."""
    phase, nests = plan.phase, plan.nests
    mapping, facts, arch = point.mapping, point.facts, point.arch
    extents, partitions, instances = point.extents, point.partitions, point.instances
    cascade = facts.cascade
    loops = tuple((name, extents[name]) for name in phase.loops)
    loop_names = [name for name, _ in loops]
    order = phase.schedule.einsums()
    by_name = {e.name: e for e in cascade.einsums}
    specs: list[OpSpec] = []
    for em in phase.einsums:
        e = by_name[em.einsum]
        nest = nests[em.einsum]
        array = arch.array(em.array)
        tile_loops = tuple(c for c in nest.tile_loops if c in loop_names)
        tiles = math.prod(extents[c] for c in tile_loops)
        points = dense_points(cascade, e, extents)
        per_tile = points // tiles if tiles else points
        # A padded rank's last tile is partly empty but takes a whole tile's time; so does a
        # tile that a filter (a causal mask) leaves partly empty (the empty ones are skipped
        # by the caller).
        padded_points = dense_points(cascade, e, padded_extents(extents, partitions))
        work = padded_points // tiles if tiles else padded_points
        parallel = math.prod(extents[c] for c in nest.spatial)
        cpp = cycles_per_point(cascade, e, array, mapping.chaining_of(array.name), mapping)
        steps = max(1, math.ceil(work * cpp / parallel))
        presence = []
        for name in loop_names:
            if name not in tile_loops:
                presence.append((name, _presence(e, name, facts)))
        deps = []
        for acc in e.reads():
            canon = canonical(facts, acc.tensor)
            source = facts.producers.get(canon)
            if source is None or source == e.name:
                if source == e.name:
                    deps.append(
                        DepSpec(
                            source,
                            _read_rule(facts, tile_loops, tile_loops, acc, loops, partitions),
                            DepKind.CHAIN,
                        )
                    )
                continue
            src_array = mapping.array_of(source)
            src_loops = (
                tuple(c for c in nests[source].tile_loops if c in loop_names)
                if (source in nests)
                else ()
            )
            if source not in nests:
                continue  # produced in another phase: already in memory
            kind = _dep_kind(arch, src_array, em.array)
            deps.append(
                DepSpec(
                    source, _read_rule(facts, tile_loops, src_loops, acc, loops, partitions), kind
                )
            )
        specs.append(
            OpSpec(
                em.einsum,
                em.array,
                order.index(em.einsum),
                steps,
                per_tile,
                tuple(presence),
                tuple(dict.fromkeys(deps)),
                array.mesh_y > 1,
            )
        )
    specs.sort(key=lambda s: s.order)
    two_d = [a for a in arch.arrays if a.mesh_y > 1]
    live = _live_registers(specs, facts)
    capacity = None
    if two_d and live:
        array = two_d[0]
        capacity = (array.register_words - array.operand_latches) // live
        if capacity < 1:
            raise SpecError(
                f"binding of phase '{phase.name}' keeps {live} values per PE for "
                f"one tile, plus {array.operand_latches} operand latches; the PEs of "
                f"{array.name} have {array.register_words} registers",
                phase.loc,
            )
        if phase.tiles_in_flight is not None and phase.tiles_in_flight > capacity:
            raise SpecError(
                f"phase '{phase.name}' asks for {phase.tiles_in_flight} tiles in "
                f"flight, needing {phase.tiles_in_flight * live + array.operand_latches}"
                f" registers per PE; {array.name} has {array.register_words}",
                phase.loc,
            )
    tiles = phase.tiles_in_flight or capacity or 1
    skew = {a.name: (a.skew if a.mesh_y > 1 else 0) for a in arch.arrays}
    reduce_cycles = two_d[0].reduce_cycles if two_d else 0
    broadcast_cycles = two_d[0].broadcast_cycles if two_d else 0
    epochs = math.prod(n for _, n in loops) * instances
    bytes_per_cycle = arch.dram.bandwidth_bytes_per_s / arch.frequency_hz
    dram_cycles = (
        phase_traffic_values * arch.value_bytes / bytes_per_cycle / epochs if epochs else 0.0
    )
    # A tile whose last 2D result nobody in the phase reads leaves the array: its outputs
    # shift out behind the wavefront, so the next tile enters once the last PE is done.
    last_2d = next((s for s in reversed(specs) if s.two_d), None)
    drain = 0
    if last_2d is not None:
        out = canonical(facts, by_name[last_2d.einsum].output.tensor)
        read = any(
            canonical(facts, a.tensor) == out for s in specs for a in by_name[s.einsum].reads()
        )
        drain = 0 if read else skew.get(last_2d.array, 0)
    return Program(
        phase.name,
        loops,
        instances,
        tuple(specs),
        tiles,
        live,
        skew,
        reduce_cycles,
        broadcast_cycles,
        dram_cycles,
        drain,
        port_cycles / epochs if epochs else 0.0,
    )


def padded_extents(
    extents: dict[str, int], partitions: dict[str, tuple[str, ...]]
) -> dict[str, int]:
    """Extents with every partitioned rank rounded up to its whole tiles."""
    out = dict(extents)
    for rank, comps in partitions.items():
        if all(c in extents for c in comps):
            out[rank] = max(extents.get(rank, 0), math.prod(extents[c] for c in comps))
    return out


def _presence(e, loop: str, facts: CascadeFacts) -> str:
    """When an Einsum without `loop` runs: with the last value if it reads a final step."""
    cascade = facts.cascade
    for acc in e.reads():
        info = cascade.iterative_tensors().get(acc.tensor)
        if info is None:
            continue
        pos, var = info
        ix = acc.indices[pos].expr
        if isinstance(ix, ISym) and ix.name == cascade.iterative_map.get(var):
            return "last"
    return "first"


def _dep_kind(arch: Architecture, source: str, target: str) -> DepKind:
    if source == target:
        return DepKind.CHAIN
    if arch.array(source).mesh_y > 1 and arch.array(target).mesh_y == 1:
        return DepKind.REDUCE
    if arch.array(source).mesh_y == 1 and arch.array(target).mesh_y > 1:
        return DepKind.BROADCAST
    return DepKind.CHAIN


def _live_registers(specs: list[OpSpec], facts: CascadeFacts) -> int:
    """Values one open tile keeps in every 2D PE: tensors made and used on the 2D array
    between its operations, plus values broadcast in; an output may reuse the register of
    an input that dies in the same operation."""
    cascade = facts.cascade
    two_d = [s for s in specs if s.two_d]
    names = [s.einsum for s in two_d]
    born: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, s in enumerate(two_d):
        e = cascade.einsum(s.einsum)
        out = canonical(facts, e.output.tensor)
        born[out] = i
        for acc in e.reads():
            t = canonical(facts, acc.tensor)
            if t in born and facts.producers.get(t) in names:
                last[t] = max(last.get(t, i), i)
    live_max = 0
    for i, s in enumerate(two_d):
        e = cascade.einsum(s.einsum)
        carried = [t for t in born if born[t] < i and last.get(t, -1) >= i]
        dies_here = [t for t in carried if last.get(t) == i]
        broadcast = [d for d in s.deps if d.kind is DepKind.BROADCAST]
        out = canonical(facts, e.output.tensor)
        held_out = 1 if (out in last and not dies_here) else 0
        live_max = max(live_max, len(carried) + len(broadcast) + held_out, 1)
    return live_max
