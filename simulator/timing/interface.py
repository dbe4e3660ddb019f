"""What a timing engine is: a planned phase in, a :class:`PhaseTiming` out.

Both engines (:mod:`simulator.timing.analytic`, :mod:`simulator.timing.cycle`) implement
:class:`TimingEngine`; the orchestrator (:mod:`simulator.core.evaluate`) picks one by name. A
new engine is a new module with a `time_phase` function and one entry in the
orchestrator's table. The memory times every engine charges the same way -- DRAM traffic
over bandwidth, the global buffer's port accesses over its port bandwidth -- are here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from simulator.plan.accesses import analyze
from simulator.plan.point import PlannedPhase, PointPlan
from simulator.spec.arch import Memory
from simulator.timing.options import UNLIMITED, TimingOptions


@dataclass(frozen=True)
class PhaseTiming:
    """How long one phase takes, over all (batch, head) instances."""

    phase: str
    compute_cycles: float  # per instance: the busiest array's work, memory waits apart
    compute_s: float  # all instances
    memory_s: float  # DRAM traffic / bandwidth
    buffer_s: float  # the global buffer's ports (0: unlimited bandwidth)
    latency_s: float
    stalls: tuple[tuple[str, str, int], ...] = ()  # (array, reason, cycles); cycle engine
    epochs: int = 0  # tiles (epochs) the phase runs; cycle engine
    simulated_epochs: int = 0  # of which simulated one by one (the rest extrapolated)


class TimingEngine(Protocol):
    def __call__(
        self, point: PointPlan, phase: PlannedPhase, options: TimingOptions = UNLIMITED
    ) -> PhaseTiming: ...


def traffic_bytes(point: PointPlan, phase: PlannedPhase) -> float:
    """The phase's DRAM traffic over all instances."""
    return phase.plan.traffic_values * point.arch.value_bytes * point.instances


def memory_seconds(point: PointPlan, phase: PlannedPhase) -> float:
    """The time the phase's DRAM traffic needs at the architecture's bandwidth -- or, on a
    fan-out of cores, at what the busy cores' ports take, if less: a core takes at most
    one access of its own memory's width per clock (a GPU's SM 128 bytes per clock), and
    a grid of fewer units than cores leaves the others' ports idle (decode of one request
    on a few SMs)."""
    return traffic_bytes(point, phase) / dram_bandwidth(point, phase)


def dram_bandwidth(point: PointPlan, phase: PlannedPhase) -> float:
    """Bytes per second the phase can move to and from DRAM (see :func:`memory_seconds`)."""
    arch = point.arch
    bandwidth = arch.dram.bandwidth_bytes_per_s
    port = arch.core_memory
    if arch.cores <= 1 or port is None:
        return bandwidth
    busy = arch.cores
    if phase.plan.phase.loops and phase.plan.gemm is None:
        busy = min(arch.cores, point.instances * point.parallel_units(phase))
    return min(bandwidth, busy * port.width_bits / 8 * arch.frequency_hz)


def buffer_port_cycles(phase: PlannedPhase, buffer: Memory) -> float:
    """Cycles the global buffer's ports need for one phase (all instances): its reads
    (operands to the PEs, data back to DRAM) and writes (fills from DRAM, updates from the
    PEs), counted over its Einsums' views with Timeloop's semantics, over the port
    bandwidths of the architecture. Zero when the buffer declares none (unlimited, as in
    Timeloop): the views are then not built."""
    if not (buffer.read_bandwidth or buffer.write_bandwidth or buffer.shared_bandwidth):
        return 0.0
    reads = writes = 0.0
    for view in phase.views:
        for level, ds, c in analyze(view.problem, view.mapping, drain_reads=True).counts:
            if level == "buffer":
                k = view.scale(level, ds)
                reads += c.reads * k if k != 1.0 else c.reads
                writes += (c.fills + c.updates) * k if k != 1.0 else c.fills + c.updates
    if buffer.shared_bandwidth:
        return (reads + writes) / buffer.shared_bandwidth
    return max(
        reads / buffer.read_bandwidth if buffer.read_bandwidth else 0.0,
        writes / buffer.write_bandwidth if buffer.write_bandwidth else 0.0,
    )
