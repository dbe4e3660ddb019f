"""The cycle engine's timing of a planned phase: its simulated cycles, busy time and stalls.

Two kinds of phase, both from the mapping file:

* a **pipelined** phase (`pipeline:` in the mapping, FuseMax's +Architecture and +Binding)
  runs as a waterfall of tiles (:mod:`simulator.timing.cycle.waterfall`): every Einsum of a tile
  is one operation on its array, with the dependencies, reduction and broadcast latencies,
  register-bounded tiles in flight and DRAM bandwidth simulated cycle by cycle;
* a **plain** phase (FLAT, +Cascade, unfused) runs each Einsum as a stream of its tiles on
  its array, the next tile's wavefront trailing the previous one (outputs leave the PEs as
  they complete), so each Einsum pays its array's fill and drain (the wavefront skew) once;
  the schedule tree combines Einsums (sequence adds, `par` overlaps arrays) and DRAM
  streams under the compute, double-buffered: the phase takes the longer of the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.cascade.ir import Cascade
from simulator.plan.costs import cycles_per_point
from simulator.plan.extents import workload_shapes
from simulator.plan.phases import PhasePlan
from simulator.plan.point import PlannedPhase, PointPlan
from simulator.spec.arch import Architecture
from simulator.spec.mapping import Mapping
from simulator.support.errors import CannotSimulate, SpecError
from simulator.timing.cycle.program import (
    OpSpec,
    Program,
    build_program,
    dense_points,
    padded_extents,
)
from simulator.timing.cycle.waterfall import Waterfall, WaterfallResult
from simulator.timing.interface import PhaseTiming, buffer_port_cycles, memory_seconds
from simulator.timing.options import UNLIMITED, TimingOptions
from simulator.timing.schedule import schedule_cycles


@dataclass(frozen=True)
class PhaseSim:
    phase: str
    cycles: int  # all (batch, head) instances
    busy: tuple[tuple[str, int], ...]  # einsum -> issue cycles on its array
    stalls: tuple[tuple[str, str, int], ...]  # (array, reason, cycles)
    epochs: int
    simulated_epochs: int


def phase_program(point: PointPlan, plan: PhasePlan, port_cycles: float = 0.0) -> Program:
    """The waterfall program of a pipelined phase (`port_cycles`: the global buffer's port
    time for the whole phase, see :func:`simulator.timing.interface.buffer_port_cycles`).

    A filter that skips whole epochs (:func:`epoch_share`) leaves the phase's DRAM traffic
    and port accesses to the epochs that run: each of those carries its share of them, so
    the run scaled to the active epochs moves all of the phase's traffic."""
    share = epoch_share(plan) if plan.activity else 1.0
    share = share or 1.0  # nothing runs: no traffic either
    traffic_values = plan.traffic_values * point.instances / share
    return build_program(point, plan, traffic_values, port_cycles / share)


def epoch_share(plan: PhasePlan) -> float:
    """The share of a pipelined phase's epochs that run under its filters: the largest share
    of tiles any Einsum that runs every epoch computes (an epoch runs if one of its
    operations has a kept point)."""
    loops = set(plan.phase.loops)
    every_epoch = [e for e in plan.nests if set(plan.nests[e].tile_loops) >= loops]
    return max((plan.active(e) for e in every_epoch), default=1.0)


def simulate_phase(
    point: PointPlan,
    phase: PlannedPhase,
    port_cycles: float = 0.0,
    options: TimingOptions = UNLIMITED,
) -> PhaseSim:
    plan = phase.plan
    if plan.phase.pipeline:
        program = phase_program(point, plan, port_cycles)
        r = Waterfall(program, options=options).run()
        if plan.activity:
            return _skipping(plan, r)
        return _phase_sim(plan.phase.name, r)
    if plan.gemm is not None:
        return _gemm_phase(plan, point.arch, point.instances, port_cycles, options)
    return _plain_phase(point, phase, port_cycles, options)


def time_phase(
    point: PointPlan, phase: PlannedPhase, options: TimingOptions = UNLIMITED
) -> PhaseTiming:
    """The cycle engine behind the timing interface: DRAM and the buffer's ports are part of
    the simulation, so the phase takes its simulated cycles; its compute is what the
    busiest array needs without the cycles it waited for memory (as in the analytic form,
    memory apart)."""
    arch, instances = point.arch, point.instances
    if arch.cores > 1:
        raise CannotSimulate(
            f"the cycle engine simulates one core, and architecture '{arch.name}' has "
            f"{arch.cores} (a fan-out of cores; --engine analytic times them)"
        )
    f = arch.frequency_hz
    port_cycles = buffer_port_cycles(phase, arch.buffer)
    sim = simulate_phase(point, phase, port_cycles, options)
    compute = _compute_cycles(sim, point.mapping)
    return PhaseTiming(
        phase.name,
        compute / instances,
        compute / f,
        memory_seconds(point, phase),
        port_cycles / f,
        sim.cycles / f,
        sim.stalls,
        sim.epochs,
        sim.simulated_epochs,
    )


def _compute_cycles(sim: PhaseSim, mapping: Mapping) -> int:
    """A simulated phase's cycles less the memory stalls, for the array that has the most
    left (over the arrays that work in the phase)."""
    working = {mapping.array_of(e) for e, n in sim.busy if n > 0}
    if not working:
        return sim.cycles
    waited: dict[str, int] = {}
    for array, why, n in sim.stalls:
        if why == "memory":
            waited[array] = waited.get(array, 0) + n
    return max(sim.cycles - waited.get(a, 0) for a in working)


def _skipping(plan: PhasePlan, r: WaterfallResult) -> PhaseSim:
    """A waterfall whose filters skip whole epochs (a causal mask's empty tiles): the
    simulated run of every epoch, less the skipped ones at the run's own cycles per epoch.
    The skipped epochs' share is the largest share of tiles any of the phase's Einsums
    computes (an epoch runs if one of its operations has a kept point). Transitions around
    masked regions (the waterfall draining into a triangle of partial rows and filling
    again) are not simulated: exact in the steady state, optimistic at its edges."""
    share = epoch_share(plan)
    epochs = round(r.epochs * share)

    def part(n: int) -> int:
        return round(n * share)

    # Each operation keeps its own share of work (one that runs once per row, AV, all of
    # its own); the phase is no shorter than its busiest array's work.
    busy = {e: round(n * plan.active(e)) for e, n in r.busy.items()}
    per_array: dict[str, int] = {}
    for e, n in busy.items():
        array = next(em.array for em in plan.phase.einsums if em.einsum == e)
        per_array[array] = per_array.get(array, 0) + n
    cycles = max([part(r.cycles), *per_array.values()])
    return PhaseSim(
        plan.phase.name,
        cycles,
        tuple(sorted(busy.items())),
        tuple(sorted((a, why, part(n)) for (a, why), n in r.stalls.items() if part(n))),
        epochs,
        min(r.simulated_epochs, epochs),
    )


def _phase_sim(name: str, r: WaterfallResult) -> PhaseSim:
    return PhaseSim(
        name,
        r.cycles,
        tuple(sorted(r.busy.items())),
        tuple(sorted((a, why, n) for (a, why), n in r.stalls.items() if n)),
        r.epochs,
        r.simulated_epochs,
    )


def einsum_stream(point: PointPlan, plan: PhasePlan, einsum: str) -> Program:
    """One Einsum of a plain phase as a stream of identical tiles on its array."""
    mapping, arch, instances = point.mapping, point.arch, point.instances
    extents, partitions = point.extents, point.partitions
    cascade = point.facts.cascade
    e = cascade.einsum(einsum)
    nest = plan.nests[einsum]
    array = arch.array(mapping.array_of(einsum))
    tiles = math.prod(extents[c] for c in nest.tile_loops)
    points = dense_points(cascade, e, extents)
    work = dense_points(cascade, e, padded_extents(extents, partitions))
    parallel = math.prod(extents[c] for c in nest.spatial)
    cpp = cycles_per_point(cascade, e, array, mapping.chaining_of(array.name), mapping)
    steps = max(1, math.ceil(work / tiles * cpp / parallel)) if points else 0
    op = OpSpec(einsum, array.name, 0, steps, points // tiles, (), (), array.mesh_y > 1)
    if einsum in dict(plan.activity):  # a filter skips the tiles with no kept point
        tiles = max(1, round(tiles * plan.active(einsum)))
    skew = array.skew if array.mesh_y > 1 else 0
    return Program(
        plan.phase.name,
        (("tiles", tiles),),
        instances,
        (op,),
        tiles_in_flight=2,  # the next tile trails the one finishing
        live_registers=1,
        skew={array.name: skew},
        reduce_cycles=0,
        broadcast_cycles=0,
        dram_cycles_per_epoch=0.0,
    )


def _plain_phase(
    point: PointPlan,
    phase: PlannedPhase,
    port_cycles: float = 0.0,
    options: TimingOptions = UNLIMITED,
) -> PhaseSim:
    plan, ctx = phase.plan, phase.context
    mapping, arch, instances = point.mapping, point.arch, point.instances
    busy: dict[str, int] = {}
    span: dict[str, float] = {}
    epochs = simulated = 0
    for em in plan.phase.einsums:
        program = einsum_stream(point, plan, em.einsum)
        if not program.ops[0].steps:
            span[em.einsum] = 0.0
            continue
        r = Waterfall(program, options=options).run()
        busy[em.einsum] = r.busy.get(em.einsum, 0)
        span[em.einsum] = float(r.cycles)
        epochs += r.epochs
        simulated += r.simulated_epochs
    compute = math.ceil(schedule_cycles(plan.phase.schedule, span, _totals(ctx, instances)))
    bytes_per_cycle = arch.dram.bandwidth_bytes_per_s / arch.frequency_hz
    dram = plan.traffic_values * instances * arch.value_bytes / bytes_per_cycle
    memory = math.ceil(max(dram, port_cycles))  # DRAM and the buffer's ports stream alike
    cycles = max(compute, memory)
    stalls = []
    for array in sorted({mapping.array_of(n) for n in busy}):
        mine = [n for n in busy if mapping.array_of(n) == array]
        work = sum(busy[n] for n in mine)
        fill = sum(int(span[n]) - busy[n] for n in mine)
        waiting = cycles - compute
        idle = cycles - work - fill - waiting
        stalls += [(array, "fill/drain", fill), (array, "memory", waiting), (array, "idle", idle)]
    return PhaseSim(
        plan.phase.name,
        cycles,
        tuple(sorted(busy.items())),
        tuple(s for s in stalls if s[2] > 0),
        epochs,
        simulated,
    )


def gemm_stream(plan: PhasePlan, arch: Architecture, instances: int) -> Program:
    """A phase mapped by the GEMM mapper as a stream of its tiles: one tile per iteration of
    the DRAM and buffer loops, each the register loops' work on every PE at once."""
    m = plan.gemm
    assert m is not None
    array = arch.array(m.array)
    mac = array.op("mac")
    tiles = math.prod(f0 * f1 for f0, f1, _f2 in m.factors) * m.gemm.per_instance
    per_pe = math.prod(f2 for _f0, _f1, f2 in m.factors)
    spatial = math.prod(f for _axis, _d, f in m.spatial)
    steps = max(1, math.ceil(per_pe * (mac.cycles if mac else 1)))
    op = OpSpec(m.gemm.einsum, array.name, 0, steps, per_pe * spatial, (), (), array.mesh_y > 1)
    return Program(
        plan.phase.name,
        (("tiles", tiles),),
        instances,
        (op,),
        tiles_in_flight=2,  # the next tile trails the one finishing
        live_registers=1,
        skew={array.name: array.skew if array.mesh_y > 1 else 0},
        reduce_cycles=0,
        broadcast_cycles=0,
        dram_cycles_per_epoch=0.0,
    )


def _gemm_phase(
    plan: PhasePlan,
    arch: Architecture,
    instances: int,
    port_cycles: float = 0.0,
    options: TimingOptions = UNLIMITED,
) -> PhaseSim:
    """A mapped GEMM phase: its tile stream (fill and drain once) under the DRAM stream and
    the buffer's ports."""
    m = plan.gemm
    assert m is not None
    r = Waterfall(gemm_stream(plan, arch, instances), options=options).run()
    busy = r.busy.get(m.gemm.einsum, 0)
    bytes_per_cycle = arch.dram.bandwidth_bytes_per_s / arch.frequency_hz
    memory = math.ceil(plan.traffic_values * instances * arch.value_bytes / bytes_per_cycle)
    memory = max(memory, math.ceil(port_cycles))
    cycles = max(r.cycles, memory)
    stalls = ((m.array, "fill/drain", r.cycles - busy), (m.array, "memory", cycles - r.cycles))
    return PhaseSim(
        plan.phase.name,
        cycles,
        ((m.gemm.einsum, busy),),
        tuple(s for s in stalls if s[2] > 0),
        r.epochs,
        r.simulated_epochs,
    )


def _totals(ctx: dict[str, float], instances: int) -> dict[str, float]:
    """The schedule's `stall:` expressions count per instance; the streams count all."""
    return {**ctx, "tiles": ctx.get("tiles", 1) * instances}


@dataclass(frozen=True)
class PipelinedPoint:
    """A configuration's pipelined phase at a point, ready to simulate (trace, functional)."""

    cascade: Cascade
    arch: Architecture
    program: Program
    shapes: dict[str, int]
    extents: dict[str, int]
    partitions: dict[str, tuple[str, ...]]


def pipelined_point(point: PointPlan) -> PipelinedPoint:
    """The waterfall program of the (first) pipelined phase of a planned point."""
    phase = next((p for p in point.phases if p.plan.phase.pipeline), None)
    if phase is None:
        raise SpecError(
            f"mapping '{point.mapping.name}' has no pipelined phase (add `pipeline:` to a phase)"
        )
    program = phase_program(point, phase.plan, buffer_port_cycles(phase, point.arch.buffer))
    shapes = {**point.extents, **workload_shapes(point.mapping, point.workload)}
    return PipelinedPoint(
        point.cascade, point.arch, program, shapes, point.extents, point.partitions
    )
