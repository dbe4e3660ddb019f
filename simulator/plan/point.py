"""A whole configuration at one workload point, planned: what timing and pricing read.

Planning's product. :func:`plan_point` chooses the extents (:mod:`simulator.plan.extents`),
plans every phase (:mod:`simulator.plan.phases`), and for each phase derives its Einsums'
compute demand (:mod:`simulator.plan.costs`), their Timeloop views
(:mod:`simulator.plan.views`) and the names its schedule's `stall:` expressions may use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.cascade.ir import Cascade
from simulator.plan.costs import EinsumCost, plan_costs
from simulator.plan.extents import choose_extents, example_shape_notes, factor_context
from simulator.plan.facts import CascadeFacts, cascade_facts
from simulator.plan.phases import PhasePlan
from simulator.plan.views import EinsumView, phase_views
from simulator.spec.arch import Architecture
from simulator.spec.mapping import Mapping
from simulator.spec.workload import Workload


@dataclass(frozen=True)
class PlannedPhase:
    plan: PhasePlan
    costs: tuple[EinsumCost, ...]  # per Einsum of the phase, per (batch, head) instance
    views: tuple[EinsumView, ...]  # per Einsum, all instances (Timeloop's view)
    context: dict[str, float]  # names the schedule's expressions may use (`tiles` too)

    @property
    def name(self) -> str:
        return self.plan.phase.name


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
    facts = cascade_facts(cascade)
    extents, partitions, plans = choose_extents(cascade, mapping, facts, arch, workload)
    views = [
        tuple(phase_views(plan, mapping, facts, arch, extents, partitions, workload))
        for plan in plans
    ]
    phases = []
    for plan, plan_views in zip(plans, views, strict=True):
        costs = tuple(plan_costs(plan, mapping, facts, arch, extents))
        context = factor_context(arch, mapping, extents)
        context["tiles"] = math.prod(extents[lp] for lp in plan.phase.loops if lp in extents)
        phases.append(PlannedPhase(plan, costs, plan_views, context))
    notes = mapping.notes + example_shape_notes(cascade, mapping, workload)
    return PointPlan(
        cascade, mapping, arch, workload, facts, extents, partitions, tuple(phases), notes
    )
