"""The analytic timing engine: a phase's schedule tree in closed form.

Each Einsum takes its planned cycles (points x cycles per point / PEs); the phase's schedule
tree combines them (sequence adds, `par` overlaps arrays, `stall` adds an expression); the
phase takes max(compute, DRAM traffic / bandwidth, buffer port time): memory streams under
the compute, double-buffered.
"""

from __future__ import annotations

from simulator.plan.point import PlannedPhase, PointPlan
from simulator.timing.interface import PhaseTiming, buffer_port_cycles, memory_seconds
from simulator.timing.options import UNLIMITED, TimingOptions
from simulator.timing.schedule import schedule_cycles


def time_phase(
    point: PointPlan, phase: PlannedPhase, options: TimingOptions = UNLIMITED
) -> PhaseTiming:
    """Closed form: no search, no simulation -- `options` have nothing to bound."""
    f = point.arch.frequency_hz
    cycles = point.unit_cycles(phase)
    memory_s = memory_seconds(point, phase)
    buffer_s = buffer_port_cycles(phase, point.arch.buffer) / f
    phase_cycles = schedule_cycles(phase.plan.phase.schedule, cycles, phase.context)
    compute_s = phase_cycles * point.core_instances(phase) / f
    return PhaseTiming(
        phase.name,
        phase_cycles,
        compute_s,
        memory_s,
        buffer_s,
        max(compute_s, memory_s, buffer_s),
    )
