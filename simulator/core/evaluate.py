"""The orchestrator: one configuration at one workload point, plan -> time -> price -> Result.

The one path every number takes (`simulator.run`, sweeps, end-to-end layers, experiments):

1. plan (:mod:`simulator.plan`): extents, phase plans, Einsum costs, Timeloop views;
2. time (:mod:`simulator.timing`): each phase by the chosen engine (`ENGINES`);
3. price (:mod:`simulator.pricing`): energy over the timed cycles, area, when the
   architecture names its tables;
4. the :class:`~simulator.core.result.Result`: latency and traffic summed over the phases (they
   run one after another; each phase also pays the architecture's measured fixed costs,
   a launch and one DRAM latency, where a measured file gave them), utilisation per array
   and per Einsum.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from simulator.cascade.ir import Cascade
from simulator.cascade.ops import ops_per_point
from simulator.core.bounds import point_bounds
from simulator.core.floors import WorkloadFloor
from simulator.core.result import LevelAccess, PhaseCost, Result, TensorTraffic
from simulator.plan.costs import EinsumCost
from simulator.plan.point import PointPlan, plan_point
from simulator.pricing.level_accesses import level_accesses
from simulator.pricing.point_price import price_point
from simulator.spec.arch import Architecture
from simulator.spec.mapping import Mapping
from simulator.spec.tables import AreaTable, EnergyTable
from simulator.spec.workload import Workload
from simulator.support.errors import BoundBreach, SpecError
from simulator.timing import analytic
from simulator.timing.cycle import simulate
from simulator.timing.interface import PhaseTiming, TimingEngine, traffic_bytes
from simulator.timing.options import UNLIMITED, TimingOptions

# Timing engines by name; the first is the default of the command-line tools.
ENGINES: dict[str, TimingEngine] = {"cycle": simulate.time_phase, "analytic": analytic.time_phase}


def evaluate_mapping(
    cascade: Cascade,
    mapping: Mapping,
    arch: Architecture,
    workload: Workload,
    tables: tuple[EnergyTable, AreaTable] | None = None,
    accounting: str = "corrected",
    engine: str = "analytic",
    timing: TimingOptions = UNLIMITED,
) -> Result:
    """Performance (and, given the architecture's ERT/ART, energy and area) of one point.

    `engine="cycle"` times each phase with the cycle-level simulator
    (:mod:`simulator.timing.cycle`) instead of the schedule tree's closed form; `timing`
    bounds its wall-clock time and reports its progress."""
    variant = (engine, accounting, tables)
    return evaluate_mapping_variants(cascade, mapping, arch, workload, [variant], timing)[0]


def evaluate_mapping_variants(
    cascade: Cascade,
    mapping: Mapping,
    arch: Architecture,
    workload: Workload,
    variants: Sequence[tuple[str, str, tuple[EnergyTable, AreaTable] | None]],
    timing: TimingOptions = UNLIMITED,
) -> list[Result]:
    """One point under several (engine, accounting, tables): planned once, timed once per
    engine, priced per accounting -- each result the one :func:`evaluate_mapping` gives."""
    for engine, _accounting, _tables in variants:
        if engine not in ENGINES:
            raise SpecError(f"unknown engine '{engine}' (choose from {', '.join(ENGINES)})")
    point = plan_point(cascade, mapping, arch, workload)
    timed: dict[str, list[PhaseTiming]] = {}
    results = []
    for engine, accounting, tables in variants:
        if engine not in timed:
            timed[engine] = [ENGINES[engine](point, phase, timing) for phase in point.phases]
        results.append(build_result(point, timed[engine], engine, tables, accounting))
    return results


def build_result(
    point: PointPlan,
    timings: list[PhaseTiming],
    engine: str,
    tables: tuple[EnergyTable, AreaTable] | None,
    accounting: str,
) -> Result:
    arch, mapping, workload = point.arch, point.mapping, point.workload
    value_bytes = arch.value_bytes
    instances = point.instances
    phases = []
    tensor_totals: dict[str, list[float]] = {}
    fixed = arch.phase_fixed_s  # a measured launch and DRAM latency per phase (else 0)
    for phase, timing in zip(point.phases, timings, strict=True):
        phases.append(
            PhaseCost(
                phase.name,
                timing.compute_cycles,
                timing.compute_s,
                timing.memory_s,
                timing.latency_s + fixed,
                traffic_bytes(point, phase),
                phase.plan.buffer_values * value_bytes,
                timing.buffer_s,
            )
        )
        for tensor, (r, w, s) in phase.plan.tallies.items():
            acc = tensor_totals.setdefault(tensor, [0.0, 0.0, 0.0])
            acc[0] += r * value_bytes * instances
            acc[1] += w * value_bytes * instances
            acc[2] += s * value_bytes * instances
    latency = sum(p.latency_s for p in phases)
    traffic = sum(p.traffic_bytes for p in phases)
    total_cycles = latency * arch.frequency_hz

    # Utilisation = useful PE-cycles / available PE-cycles: an Einsum that occupies only part
    # of its array (FLAT's 64-row AV) keeps it busy longer but not fully utilised.
    def share(c: EinsumCost) -> float:
        if not total_cycles:
            return 0.0
        useful = c.cycles * c.parallelism / arch.array(c.array).pes
        if arch.cores > 1:  # every core's copy of the array is available
            return useful * instances / total_cycles / arch.cores
        return useful * instances / total_cycles

    per_einsum = tuple((c.einsum, c.array, share(c)) for c in point.costs)
    util = [
        (array.name, sum(u for _e, a, u in per_einsum if a == array.name)) for array in arch.arrays
    ]
    two, one = array_roles(arch)
    util_map = dict(util)
    factor_names = [name for name, _ in mapping.factors]
    for comps in point.partitions.values():
        factor_names += [c for c in comps if c not in factor_names]
    bounds = point_bounds(point)
    per_point = {
        c.einsum: sum(ops_per_point(point.cascade, point.cascade.einsum(c.einsum)).values())
        for c in point.costs
    }
    ops = instances * sum(
        (c.useful_points if c.useful_points is not None else c.points) * per_point[c.einsum]
        for c in point.costs
    )
    executed = instances * sum(c.points * per_point[c.einsum] for c in point.costs)
    priced = {}
    if tables is not None:
        price = price_point(point, total_cycles, tables, accounting)
        priced = {f.name: getattr(price, f.name) for f in dataclasses.fields(price)}
        priced["accesses"] = tuple(LevelAccess(*a) for a in level_accesses(point))
    result = Result(
        accelerator=mapping.name,
        label=mapping.label,
        model=workload.label,
        seq_len=workload.seq_len,
        instances=instances,
        cores=arch.cores,
        latency_s=latency,
        traffic_bytes=traffic,
        cycles=total_cycles,
        util=tuple(util),
        util_2d=util_map.get(two, 0.0) if two else 0.0,
        util_1d=util_map.get(one, 0.0) if one else 0.0,
        util_per_einsum=per_einsum,
        phases=tuple(phases),
        einsums=point.costs,
        tensors=tuple(TensorTraffic(t, *v) for t, v in sorted(tensor_totals.items())),
        factors=tuple((n, point.extents[n]) for n in factor_names if n in point.extents),
        array_2d=two,
        array_1d=one,
        notes=point.notes,
        engine=engine,
        stalls=_stall_totals(timings),
        epochs=sum(t.epochs for t in timings),
        simulated_epochs=sum(t.simulated_epochs for t in timings),
        ops=ops,
        executed_ops=executed,
        latency_bound_s=bounds.latency_s,
        traffic_bound_bytes=bounds.traffic_bytes,
        compute_bound_s=bounds.compute_s,
        bound_binds=bounds.binding,
        cascade=point.cascade.name,
        **priced,
    )
    check_bounds(result, workload)
    return result


# Relative slack of the guard: rounding of sums over phases and epochs, nothing more.
BOUND_SLACK = 1e-9


def check_bounds(result: Result, workload: Workload) -> None:
    """The guard every result passes before anyone sees it: latency at or above its latency
    bound, DRAM traffic at or above its traffic bound (relative 1e-9). A breach is a bug of
    the model, raised as :class:`BoundBreach` (never printed as a result)."""
    breaches = []
    if result.latency_s < result.latency_bound_s * (1 - BOUND_SLACK):
        breaches.append(
            f"latency {result.latency_s:.6g} s below its bound {result.latency_bound_s:.6g} s"
        )
    if result.traffic_bytes < result.traffic_bound_bytes * (1 - BOUND_SLACK):
        breaches.append(
            f"DRAM traffic {result.traffic_bytes:.6g} B below its bound "
            f"{result.traffic_bound_bytes:.6g} B"
        )
    if breaches:
        raise BoundBreach(
            f"{result.label} ({result.accelerator}, {result.cascade}, {result.engine} engine) "
            f"on {workload.describe()}: {'; '.join(breaches)} -- a bug of the tool, not a "
            "result; please report it with this command line"
        )


def check_floor(result: Result, floor: WorkloadFloor, workload: Workload) -> None:
    """The guard that trusts no cascade or mapping: latency at or above the workload's own
    floor (:mod:`simulator.core.floors`: its MACs at the chip's peak, its compulsory bytes at
    the bandwidth), DRAM traffic at or above its compulsory bytes. A breach is a bug of
    the model, raised as :class:`BoundBreach`."""
    breaches = []
    if result.latency_s < floor.latency_s * (1 - BOUND_SLACK):
        breaches.append(
            f"latency {result.latency_s:.6g} s below the {floor.what}' floor "
            f"{floor.latency_s:.6g} s ({floor.macs:.6g} MACs at the chip's peak, "
            f"{floor.compulsory_bytes:.6g} compulsory bytes at its bandwidth)"
        )
    if result.traffic_bytes < floor.compulsory_bytes * (1 - BOUND_SLACK):
        breaches.append(
            f"DRAM traffic {result.traffic_bytes:.6g} B below the {floor.what}' compulsory "
            f"{floor.compulsory_bytes:.6g} B"
        )
    if breaches:
        raise BoundBreach(
            f"{result.label} ({result.accelerator}, {result.cascade}, {result.engine} engine) "
            f"on {workload.describe()}: {'; '.join(breaches)} -- a bug of the tool, not a "
            "result; please report it with this command line"
        )


def array_roles(arch: Architecture) -> tuple[str | None, str | None]:
    """The 2D array (meshY > 1) and the 1D array, by shape."""
    two = next((a.name for a in arch.arrays if a.mesh_y > 1), None)
    one = next((a.name for a in arch.arrays if a.mesh_y == 1), None)
    return two, one


def _stall_totals(timings: list[PhaseTiming]) -> tuple[tuple[str, str, int], ...]:
    totals: dict[tuple[str, str], int] = {}
    for t in timings:
        for array, reason, n in t.stalls:
            totals[(array, reason)] = totals.get((array, reason), 0) + n
    return tuple((a, why, n) for (a, why), n in sorted(totals.items()))
