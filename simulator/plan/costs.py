"""Each Einsum's compute demand in a planned phase: points, PE cycles per point, PEs.

Planning step 3. An Einsum's cycles are its points x cycles per point (from its operation
counts and the PE's operation table, summed, or overlapped per functional unit when the
array is `pipelined`), divided by the PEs its spatial components occupy; a GEMM phase
takes the GEMM mapper's cycles. These are the work both timing engines schedule; the
spatial components must fit the array (an error names the Einsum otherwise).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from simulator.cascade.ir import Cascade, Einsum
from simulator.cascade.ops import count_points, iteration_extents, ops_per_point
from simulator.plan.facts import CascadeFacts
from simulator.plan.nest import Nest
from simulator.plan.phases import PhasePlan
from simulator.spec.arch import Architecture, Array, declare_hint
from simulator.spec.mapping import Mapping
from simulator.support.errors import SpecError


@dataclass(frozen=True)
class EinsumCost:
    einsum: str
    array: str
    phase: str
    points: int  # iteration-space points per (batch, head) instance the array computes
    cycles_per_point: float  # on one PE of its array
    parallelism: int  # PEs working on it at once
    cycles: float  # per instance
    # A filtered Einsum computes whole tiles: `points` counts every point of the tiles it
    # does not skip, `useful_points` the points its filters keep.
    useful_points: int | None = None  # None: unfiltered (= points)
    skipped: float = 0.0  # fraction of its tiles skipped (no kept point)


def cycles_per_point(
    cascade: Cascade, e: Einsum, array: Array, chaining: str, mapping: Mapping | None
) -> float:
    """PE cycles of one point: operations summed, or per functional unit when pipelined
    (`mapping`: where an error points; None for a question no mapping asks)."""
    counts = ops_per_point(cascade, e)
    per_unit: dict[str, float] = {}
    total = 0.0
    for kind, n in counts.items():
        if n <= 0:
            continue
        op = array.op(kind)
        if op is None:
            raise SpecError(
                f"Einsum '{e.name}' needs '{kind}', which the PEs of array "
                f"'{array.name}' do not declare (operations: "
                f"{', '.join(array.operation_names)}): {declare_hint(kind)}",
                mapping.binding_loc(e.name) if mapping is not None else e.loc,
            )
        total += n * op.cycles
        for unit, cycles in op.unit_cycles():  # a composite's steps, each on its unit
            per_unit[unit] = per_unit.get(unit, 0.0) + n * cycles
    if chaining == "pipelined":
        return max(per_unit.values(), default=0.0)
    return total


def plan_costs(
    plan: PhasePlan,
    mapping: Mapping,
    facts: CascadeFacts,
    arch: Architecture,
    extents: dict[str, int],
) -> list[EinsumCost]:
    """The Einsum costs of one phase: the GEMM mapper's for a mapped GEMM phase, else each
    Einsum's points x cycles per point over its PEs."""
    if plan.gemm is not None:
        cost = _gemm_cost(plan)
        e = facts.cascade.einsum(cost.einsum)
        if e.filters():  # a library's GEMM computes whole tiles: the kept points are fewer
            kept = count_points(facts.cascade, e, extents)
            if kept < cost.points:
                cost = dataclasses.replace(cost, useful_points=kept)
        return [cost]
    return einsum_costs(plan, mapping, facts, arch, extents)


def einsum_costs(
    plan: PhasePlan,
    mapping: Mapping,
    facts: CascadeFacts,
    arch: Architecture,
    extents: dict[str, int],
) -> list[EinsumCost]:
    by_name = {e.name: e for e in facts.cascade.einsums}
    out = []
    for em in plan.phase.einsums:
        e = by_name[em.einsum]
        array = arch.array(em.array)
        nest = plan.nests[em.einsum]
        _check_mesh(nest, array, extents, mapping)
        parallel = math.prod(extents[c] for c in nest.spatial)
        if parallel > array.pes:
            raise SpecError(
                f"Einsum '{e.name}' spreads {' x '.join(nest.spatial)} = {parallel} "
                f"over array {array.name}, which has only {array.pes} PEs",
                mapping.binding_loc(e.name),
            )
        points = count_points(facts.cascade, e, extents)
        useful, skipped = None, 0.0
        if e.name in dict(plan.activity):  # filtered: whole tiles, the empty ones skipped
            active = plan.active(e.name)
            full = math.prod(iteration_extents(facts.cascade, e, extents).values())
            useful, skipped = points, 1.0 - active
            points = round(full * active)
        cpp = cycles_per_point(facts.cascade, e, array, mapping.chaining_of(array.name), mapping)
        out.append(
            EinsumCost(
                e.name,
                array.name,
                plan.phase.name,
                points,
                cpp,
                parallel,
                points * cpp / parallel,
                useful,
                skipped,
            )
        )
    return out


def _check_mesh(nest: Nest, array: Array, extents: dict[str, int], mapping: Mapping) -> None:
    if array.mesh_y == 1 and len(nest.spatial) > 1:
        return  # a 1D array: its components share the one row (their product is checked)
    dims = [array.mesh_x, array.mesh_y]
    for i, comp in enumerate(nest.spatial[:2]):
        if extents[comp] > dims[i] and not (len(nest.spatial) == 1 and extents[comp] <= array.pes):
            raise SpecError(
                f"spatial {comp}={extents[comp]} of '{nest.einsum}' exceeds "
                f"{array.name}'s {'meshX' if i == 0 else 'meshY'}={dims[i]}",
                mapping.binding_loc(nest.einsum),
            )


def _gemm_cost(plan: PhasePlan) -> EinsumCost:
    m = plan.gemm
    assert m is not None
    copies = max(1, m.gemm.copies // m.gemm.per_instance)  # (batch, head) instances
    parallel = math.prod(f for _axis, _d, f in m.spatial)
    points = math.prod(m.gemm.extents) * m.gemm.per_instance
    cycles = m.cycles / copies
    return EinsumCost(
        m.gemm.einsum,
        m.array,
        plan.phase.name,
        points,
        cycles * parallel / points,
        parallel,
        cycles,
    )
