"""A whole configuration at one workload point, planned: what timing and pricing read.

Planning's product. :func:`plan_point` chooses the extents (:mod:`simulator.plan.extents`),
plans every phase (:mod:`simulator.plan.phases`), and for each phase derives its Einsums'
compute demand (:mod:`simulator.plan.costs`), their Timeloop views
(:mod:`simulator.plan.views`) and the names its schedule's `stall:` expressions may use.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.cascade.ir import Cascade
from simulator.plan.costs import EinsumCost, plan_costs
from simulator.plan.extents import choose_extents, example_shape_notes, factor_context
from simulator.plan.facts import CascadeFacts, cascade_facts
from simulator.plan.masks import constraints
from simulator.plan.phases import PhasePlan
from simulator.plan.views import EinsumView, phase_views
from simulator.plan.waves import (
    MAX_SCHEDULED_WAVES,
    makespan,
    shared_einsums,
    unit_loops,
    unit_weights,
)
from simulator.spec.arch import Architecture
from simulator.spec.mapping import Mapping
from simulator.spec.workload import Workload
from simulator.support.errors import Loc, SpecError


@dataclass(frozen=True)
class PlannedPhase:
    plan: PhasePlan
    costs: tuple[EinsumCost, ...]  # per Einsum of the phase, per (batch, head) instance
    context: dict[str, float]  # names the schedule's expressions may use (`tiles` too)
    # The phase's Timeloop views, built when first asked for: pricing, a buffer with
    # port bandwidths and the Timeloop export read them; a search's unpriced candidates
    # on a chip whose buffer declares no ports never do.
    make_views: Callable[[], tuple[EinsumView, ...]] = field(repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.plan.phase.name

    @functools.cached_property
    def views(self) -> tuple[EinsumView, ...]:
        """Per Einsum, all instances (Timeloop's view)."""
        return self.make_views()


@dataclass(frozen=True)
class PointPlan:
    cascade: Cascade
    mapping: Mapping
    arch: Architecture
    workload: Workload
    facts: CascadeFacts
    extents: dict[str, int]
    partitions: dict[str, tuple[str, ...]]
    phases: tuple[PlannedPhase, ...]
    notes: tuple[str, ...]  # said in the output (ranks left to the cascade's example shape)

    @property
    def instances(self) -> int:
        return self.mapping.instances

    def core_instances(self, phase: PlannedPhase) -> float:
        """The instances' worth of a phase's work the busiest core does. One core: all of
        them. Several (`Architecture.cores`): a tiled phase deals whole units -- an
        instance's block of its outermost loop (independent: FlashAttention's blocks of
        query rows) -- to the cores in waves; a mapped GEMM spreads its tiles over every
        core (a library's GEMM), an even share."""
        cores = self.arch.cores
        if cores == 1:
            return self.instances
        if not self._dealt_in_units(phase):
            return self.instances / cores
        units = self.parallel_units(phase)
        uneven = self._uneven_makespan(phase)
        if uneven is not None:
            return uneven / units
        return math.ceil(self.instances * units / cores) / units

    def unit_cycles(self, phase: PlannedPhase) -> dict[str, float]:
        """Each Einsum's cycles per instance as the phase's units run it: on a fan-out of
        cores, the work no unit loop indexes (:func:`simulator.plan.waves.shared_einsums`)
        counted once per unit -- every unit holds it -- so that over
        :meth:`core_instances` the busiest core does all of it."""
        cycles = {c.einsum: c.cycles for c in phase.costs}
        if self.arch.cores == 1 or not self._dealt_in_units(phase):
            return cycles
        loops = unit_loops(self.cascade, phase.plan.phase, self.partitions)
        shared = shared_einsums(self.cascade, phase.plan.phase, self.partitions, loops)
        units = math.prod(self.extents.get(loop, 1) for loop in loops)
        return {n: c * units if n in shared else c for n, c in cycles.items()}

    @staticmethod
    def _dealt_in_units(phase: PlannedPhase) -> bool:
        """A tiled phase deals its units to the cores; a mapped GEMM (a library's) and a
        phase without loops spread evenly over them."""
        return bool(phase.plan.phase.loops) and phase.plan.gemm is None

    def _uneven_makespan(self, phase: PlannedPhase) -> float | None:
        """Under a mask the units do unequal work: the in-order deal's time in units of the
        average unit (None: no mask, or so many waves that the average holds)."""
        filtered = [name for name, _ in phase.plan.activity]
        if not filtered:
            return None
        einsum = self.cascade.einsum(filtered[0])
        cons = constraints(einsum, self.partitions, self.extents)
        loops = unit_loops(self.cascade, phase.plan.phase, self.partitions)
        count = math.prod(self.extents.get(lp, 1) for lp in loops)
        if count * self.instances > MAX_SCHEDULED_WAVES * self.arch.cores:
            return None
        inner = tuple(lp for lp in phase.plan.nests[einsum.name].tile_loops if lp not in loops)
        weights = unit_weights(cons, loops, inner, self.extents)
        span = makespan(weights, self.instances, self.arch.cores)
        mean = sum(weights) / len(weights)
        return None if span is None or mean <= 0 else span / mean

    def parallel_units(self, phase: PlannedPhase) -> int:
        """Independent units of work in one instance of a phase
        (:func:`simulator.plan.waves.unit_loops`)."""
        loops = unit_loops(self.cascade, phase.plan.phase, self.partitions)
        return math.prod(self.extents.get(loop, 1) for loop in loops)

    @property
    def costs(self) -> tuple[EinsumCost, ...]:
        return tuple(c for p in self.phases for c in p.costs)

    @property
    def views(self) -> tuple[EinsumView, ...]:
        return tuple(v for p in self.phases for v in p.views)


def plan_point(
    cascade: Cascade, mapping: Mapping, arch: Architecture, workload: Workload
) -> PointPlan:
    """Plan one configuration (cascade + resolved mapping + architecture) at a workload."""
    check_registers(cascade, mapping, arch)
    facts = cascade_facts(cascade)
    extents, partitions, plans = choose_extents(cascade, mapping, facts, arch, workload)
    phases = []
    for plan in plans:
        costs = tuple(plan_costs(plan, mapping, facts, arch, extents))
        context = factor_context(arch, mapping, extents)
        context["tiles"] = math.prod(extents[lp] for lp in plan.phase.loops if lp in extents)
        views = functools.partial(_views, plan, mapping, facts, arch, extents, partitions, workload)
        phases.append(PlannedPhase(plan, costs, context, views))
    notes = mapping.notes + example_shape_notes(cascade, mapping, workload)
    return PointPlan(
        cascade, mapping, arch, workload, facts, extents, partitions, tuple(phases), notes
    )


def _views(
    plan: PhasePlan,
    mapping: Mapping,
    facts: CascadeFacts,
    arch: Architecture,
    extents: dict[str, int],
    partitions: dict[str, tuple[str, ...]],
    workload: Workload,
) -> tuple[EinsumView, ...]:
    return tuple(phase_views(plan, mapping, facts, arch, extents, partitions, workload))


def check_registers(cascade: Cascade, mapping: Mapping, arch: Architecture) -> None:
    """Every PE computing an Einsum holds its operands and its result: one register word each
    (distinct tensors read, plus the output). The same rule for every design and value
    format: registers keep their bits at another precision (fewer words of wider values), so
    a design whose registers cannot hold an Einsum's values at this width cannot run it."""
    for e in cascade.einsums:
        if e.kind != "compute":
            continue
        array = arch.array(mapping.array_of(e.name))
        if not array.register_component:
            continue  # no register file described: the design leaves them out of the model
        operands = list(dict.fromkeys(a.tensor for a in e.reads()))
        need = len(operands) + 1
        if need <= array.register_words:
            continue
        width = f"{arch.precision} " if arch.precision else ""
        raise SpecError(
            f"mapping '{mapping.name}': Einsum '{e.name}' holds {need} values in each PE of "
            f"{array.name} (operands {', '.join(operands)} and its result), whose registers "
            f"hold {array.register_words} {width}value(s) of {arch.datawidth_bits} bits "
            "(registers keep their bits at another precision)",
            Loc(mapping.path),
        )
