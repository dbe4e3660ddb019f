"""The analytic performance model: one function of (cascade, mapping, architecture, workload).

For every phase of the mapping:

* **traffic** -- each DRAM-homed tensor access crosses DRAM `size x transfer_factor` times
  (see :mod:`simulator.model.nest`); accesses with the same reuse signature share one
  buffered copy. Outputs refetched around a reduction loop are written and read back. A
  tensor with a spill fraction `s` sends `s` of its extra buffer accesses to DRAM: re-reads
  beyond the first fill of a DRAM-homed tensor, and every buffer write and read of a
  buffer-homed one (a consumer on the producer's array in the same pass takes the value
  directly, without the buffer).
* **capacity** -- the tiles kept on chip (times their copies) must fit the global buffer;
  tensors with `spill: auto` give up the fraction that does not fit.
* **cycles** -- an Einsum's points x cycles per point (from its operation counts and the
  PE's operation table, summed, or overlapped per functional unit when the array is
  `pipelined`), divided by the PEs its spatial components occupy.
* **latency** -- the phase's schedule tree combines Einsum cycles (sequence = sum,
  `par` = max, `stall` = expression); the phase takes max(traffic / bandwidth, cycles /
  clock); phases run one after another.

`search` factors are chosen among the divisors they can take: least DRAM traffic that fits
the buffer, then least latency, then the larger tile. The engine that evaluates schedules
is this module; the cycle-level engine replaces `schedule_cycles` with a simulation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping as TMapping
from dataclasses import dataclass

from simulator.cascade.ir import Cascade, Einsum, Read
from simulator.cascade.ops import count_points, ops_per_point
from simulator.cascade.passes import pass_index
from simulator.errors import Loc, SpecError
from simulator.model.accesses import analyze
from simulator.model.area import chip_area
from simulator.model.energy import action_counts, price
from simulator.model.mapper import GemmMapping, gemm_of, map_gemm
from simulator.model.nest import (
    Nest,
    build_nest,
    merged_partitions,
    resolve_extents,
    reuse_signature,
    tensor_components,
    tensor_size,
    tile_values,
    transfer_factor,
)
from simulator.model.result import EinsumCost, PhaseCost, Result, TensorTraffic
from simulator.model.timeloop_view import BATCH, HEADS, phase_views
from simulator.spec import expr
from simulator.spec.arch import Architecture, Array, Memory
from simulator.spec.mapping import Mapping, Phase, Placement, Schedule
from simulator.spec.tables import AreaTable, EnergyTable
from simulator.spec.workload import Workload

MAX_SEARCH_POINTS = 100_000
ENGINES = ("cycle", "analytic")


# --------------------------------------------------------------------------------------
# Static facts about the cascade used by every evaluation


@dataclass(frozen=True)
class CascadeFacts:
    cascade: Cascade
    aliases: dict[str, str]  # copy outputs -> the tensor they re-index (BK -> K)
    compute: tuple[Einsum, ...]
    passes: dict[str, int]
    producers: dict[str, str]  # canonical tensor -> producing compute Einsum


def cascade_facts(cascade: Cascade) -> CascadeFacts:
    aliases: dict[str, str] = {}
    for e in cascade.einsums:
        if e.kind == "copy" and isinstance(e.expr, Read):
            src = e.expr.access.tensor
            aliases[e.output.tensor] = aliases.get(src, src)
    compute = tuple(e for e in cascade.einsums if e.kind == "compute")
    producers = {}
    for e in compute:
        producers[aliases.get(e.output.tensor, e.output.tensor)] = e.name
    return CascadeFacts(cascade, aliases, compute, pass_index(cascade), producers)


def canonical(facts: CascadeFacts, tensor: str) -> str:
    """The tensor an alias (a partitioned view such as BK of K) stands for."""
    return facts.aliases.get(tensor, tensor)


# --------------------------------------------------------------------------------------
# Extents


def _factor_context(
    arch: Architecture, mapping: Mapping, known: TMapping[str, int]
) -> dict[str, float]:
    ctx: dict[str, float] = dict(arch.parameters())
    ctx.update(mapping.context())
    ctx.update(known)
    return ctx


def workload_shapes(mapping: Mapping, workload: Workload) -> dict[str, int]:
    """Rank extents the workload sets: the mapping's `shapes:` (evaluated for this
    workload), then the workload's explicit rank overrides."""
    return {**dict(mapping.shapes), **dict(workload.rank_overrides)}


def example_shape_notes(cascade: Cascade, mapping: Mapping, workload: Workload) -> tuple[str, ...]:
    """A rank that neither the workload (the mapping's `shapes:`) nor a factor sizes keeps
    the cascade's example extent whatever `--seq` says: said in the output, not silent."""
    sized = set(workload_shapes(mapping, workload)) | {name for name, _ in mapping.factors}
    partitioned = {c for _r, comps in mapping.partitions for c in comps}
    partitioned |= {c for _r, comps in cascade.partitions for c in comps}
    ranks = {r for t in cascade.tensors for r in t.ranks}
    return tuple(
        f"{mapping.name}: rank {rank} = {value} is the cascade's example shape; the mapping's "
        "'shapes:' does not size it from the workload"
        for rank, value in cascade.shapes
        if rank in ranks and rank not in sized and rank not in partitioned
    )


def fixed_extents(
    cascade: Cascade, mapping: Mapping, arch: Architecture, workload: Workload
) -> tuple[dict[str, int], list[str], dict[str, tuple[str, ...]]]:
    """Extents known without search, the names of `search` factors, the partitions."""
    partitions = merged_partitions(cascade, mapping.partitions, Loc(mapping.path))
    ranks = {r for t in cascade.tensors for r in t.ranks}
    known: dict[str, int] = {}
    for rank, value in cascade.shapes:
        if rank in ranks and not any(rank in comps for comps in partitions.values()):
            known[rank] = value
    for rank, value in workload_shapes(mapping, workload).items():
        if rank in ranks:
            known[rank] = value
    locs = dict(mapping.factor_locs)
    pending = {name: raw for name, raw in mapping.factors if str(raw) != "search"}
    search = [name for name, raw in mapping.factors if str(raw) == "search"]
    for _ in range(len(pending) + 1):
        progressed = False
        for name in list(pending):
            ctx = _factor_context(arch, mapping, known)
            raw = pending[name]
            needed = expr.names_in(str(raw)) if isinstance(raw, str) else set()
            if any(n not in ctx for n in needed):
                continue
            value = expr.evaluate(raw, ctx, locs.get(name))
            known[name] = expr.as_int(value, f"factor {name}", locs.get(name))
            if known[name] <= 0:
                raise SpecError(
                    f"factor {name} must be positive, got {known[name]}", locs.get(name)
                )
            del pending[name]
            progressed = True
        if not pending:
            break
        if not progressed:
            known = resolve_extents(
                known, partitions, mapping.name, Loc(mapping.path), frozenset(mapping.padded)
            )
    if pending:
        name = next(iter(pending))
        expr.evaluate(pending[name], _factor_context(arch, mapping, known), locs.get(name))
    return known, search, partitions


def _search_candidates(
    name: str, known: dict[str, int], partitions: dict[str, tuple[str, ...]], loc: Loc | None
) -> list[int]:
    for rank, comps in partitions.items():
        if name in comps and rank in known:
            rest = math.prod(known[c] for c in comps if c in known and c != name)
            total = known[rank]
            if total % rest:
                raise SpecError(f"{rank}={total} is not divisible by {rest}", loc)
            span = total // rest
            return [d for d in range(1, span + 1) if span % d == 0]
    raise SpecError(
        f"'search' factor {name} must be a component of a partitioned rank whose extent is known",
        loc,
    )


# --------------------------------------------------------------------------------------
# One phase: nests, traffic, capacity


@dataclass
class _TensorTally:
    read: float = 0.0
    write: float = 0.0
    spill: float = 0.0


@dataclass(frozen=True)
class PhasePlan:
    phase: Phase
    nests: dict[str, Nest]
    tallies: dict[str, tuple[float, float, float]]  # tensor -> (read, write, spill) values
    buffer_values: float
    fits: bool
    gemm: GemmMapping | None = None  # a `mapper:` phase: the GEMM mapper's choice

    @property
    def traffic_values(self) -> float:
        return sum(r + w + s for r, w, s in self.tallies.values())


def placement_of(phase: Phase, facts: CascadeFacts, tensor: str) -> Placement:
    """Where a tensor lives in a phase: its placement, an alias's, or the default."""
    canon = canonical(facts, tensor)
    for name in (tensor, canon):
        p = phase.placement(name)
        if p is not None:
            return p
    for alias, target in facts.aliases.items():
        if target == canon:
            p = phase.placement(alias)
            if p is not None:
                return p
    cascade = facts.cascade
    if canon in cascade.inputs or canon in cascade.outputs:
        return Placement(canon, "DRAM", "stream")
    return Placement(canon, "register", None)


def plan_phase(
    phase: Phase,
    mapping: Mapping,
    facts: CascadeFacts,
    arch: Architecture,
    extents: dict[str, int],
    partitions: dict[str, tuple[str, ...]],
    instances: tuple[tuple[str, int], ...] = (),
) -> PhasePlan:
    if phase.mapper is not None:
        return _mapped_phase(phase, mapping, facts, arch, extents, instances)
    cascade = facts.cascade
    by_name = {e.name: e for e in cascade.einsums}
    nests = {
        em.einsum: build_nest(
            by_name[em.einsum], phase.loops, em.loops, em.inner, em.spatial, partitions
        )
        for em in phase.einsums
    }
    tallies: dict[str, _TensorTally] = {}
    shared: set[tuple] = set()
    buffer_tiles: dict[str, float] = {}
    auto_tiles: dict[str, float] = {}
    # Accesses of each tensor: (einsum, is_write)
    accesses: dict[str, list[tuple[str, bool]]] = {}
    for em in phase.einsums:
        e = by_name[em.einsum]
        for acc in e.reads():
            accesses.setdefault(canonical(facts, acc.tensor), []).append((e.name, False))
        accesses.setdefault(canonical(facts, e.output.tensor), []).append((e.name, True))
    for tensor, uses in accesses.items():
        place = placement_of(phase, facts, tensor)
        if place.home == "register":
            continue
        comps, iterative = tensor_components(cascade, tensor, partitions)
        size = tensor_size(comps, extents)
        tally = tallies.setdefault(tensor, _TensorTally())
        keep = place.keep if place.keep is not None else "top"
        if place.home == "buffer":
            tile = max(tile_values(nests[n], comps, iterative, keep, extents) for n, _ in uses)
            if place.spill == "auto":
                auto_tiles[tensor] = tile * place.copies
            elif place.spill is None:
                buffer_tiles[tensor] = tile * place.copies
            continue
        # DRAM-homed
        if keep != "stream":
            tile = max(tile_values(nests[n], comps, iterative, keep, extents) for n, _ in uses)
            if place.spill == "auto":
                auto_tiles[tensor] = tile * place.copies
            elif place.spill is None:
                buffer_tiles[tensor] = tile * place.copies
        for name, is_write in uses:
            nest = nests[name]
            factor = transfer_factor(nest, comps, keep, extents)
            key = (tensor, is_write, reuse_signature(nest, comps, keep, extents))
            if key in shared:
                continue
            shared.add(key)
            if is_write:
                tally.write += size * factor
                tally.read += size * (factor - 1)  # partial results read back
            else:
                tally.read += size * factor
    capacity = arch.buffer_values
    fixed = sum(buffer_tiles.values())
    fits = fixed <= capacity
    auto_fraction = 0.0
    if auto_tiles:
        room = max(0.0, capacity - fixed)
        total_auto = sum(auto_tiles.values())
        auto_fraction = max(0.0, 1.0 - room / total_auto) if total_auto else 0.0
    # Spills: the fraction of buffer accesses that go to DRAM.
    for tensor, uses in accesses.items():
        place = placement_of(phase, facts, tensor)
        if place.home == "register" or place.spill is None:
            continue
        fraction = auto_fraction if place.spill == "auto" else float(place.spill)
        if fraction == 0:
            continue
        comps, _ = tensor_components(cascade, tensor, partitions)
        size = tensor_size(comps, extents)
        keep = place.keep if place.keep is not None else "top"
        if place.home == "DRAM":
            extra = 0.0
            for name, _is_write in uses:
                nest = nests[name]
                extra += transfer_factor(nest, comps, "stream", extents) - transfer_factor(
                    nest, comps, keep, extents
                )
            tallies[tensor].spill += fraction * size * extra
        else:
            tallies[tensor].spill += (
                fraction * size * _buffer_accesses(tensor, uses, facts, mapping)
            )
    used = fixed + (
        min(sum(auto_tiles.values()), max(0.0, capacity - fixed)) if auto_tiles else 0.0
    )
    return PhasePlan(
        phase, nests, {t: (v.read, v.write, v.spill) for t, v in tallies.items()}, used, fits
    )


def _mapped_phase(
    phase: Phase,
    mapping: Mapping,
    facts: CascadeFacts,
    arch: Architecture,
    extents: dict[str, int],
    instances: tuple[tuple[str, int], ...],
) -> PhasePlan:
    """A GEMM phase planned by the GEMM mapper: its DRAM traffic per tensor (per instance)
    from the chosen mapping's access counts."""
    (em,) = phase.einsums
    gemm = gemm_of(facts.cascade, em.einsum, extents, instances)
    m = map_gemm(gemm, arch, phase.mapper, None, em.array)
    copies = max(1, gemm.copies)
    tallies: dict[str, tuple[float, float, float]] = {}
    used = 0.0
    for level, ds, c in m.report.counts:
        if level == "buffer":
            used += c.capacity
        if level != "DRAM":
            continue
        tensor = canonical(facts, ds)
        r, w, sp = tallies.get(tensor, (0.0, 0.0, 0.0))
        tallies[tensor] = (r + c.reads / copies, w + (c.fills + c.updates) / copies, sp)
    return PhasePlan(phase, {}, tallies, used, True, m)


def _buffer_accesses(
    tensor: str, uses: list[tuple[str, bool]], facts: CascadeFacts, mapping: Mapping
) -> int:
    """Writes + reads of a buffer-homed tensor (values, in units of its size)."""
    producer = facts.producers.get(tensor)
    readers = [n for n, is_write in uses if not is_write]
    if producer is None:
        return len(readers)
    p_array, p_pass = mapping.array_of(producer), facts.passes[producer]
    buffered = [n for n in readers if mapping.array_of(n) != p_array or facts.passes[n] != p_pass]
    writes = 1 if buffered else 0
    return writes + len(buffered)


# --------------------------------------------------------------------------------------
# Cycles


def cycles_per_point(
    cascade: Cascade, e: Einsum, array: Array, chaining: str, mapping: Mapping
) -> float:
    """PE cycles of one point: operations summed, or per functional unit when pipelined."""
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
                f"'{array.name}' do not support (operations: "
                f"{', '.join(o.name for o in array.operations)})",
                mapping.binding_loc(e.name),
            )
        total += n * op.cycles
        per_unit[op.unit] = per_unit.get(op.unit, 0.0) + n * op.cycles
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
        return [_gemm_cost(plan)]
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
        cpp = cycles_per_point(facts.cascade, e, array, mapping.chaining_of(array.name), mapping)
        out.append(
            EinsumCost(
                e.name, array.name, plan.phase.name, points, cpp, parallel, points * cpp / parallel
            )
        )
    return out


def _check_mesh(nest: Nest, array: Array, extents: dict[str, int], mapping: Mapping) -> None:
    dims = [array.mesh_x, array.mesh_y]
    for i, comp in enumerate(nest.spatial[:2]):
        if extents[comp] > dims[i] and not (len(nest.spatial) == 1 and extents[comp] <= array.pes):
            raise SpecError(
                f"spatial {comp}={extents[comp]} of '{nest.einsum}' exceeds "
                f"{array.name}'s {'meshX' if i == 0 else 'meshY'}={dims[i]}",
                mapping.binding_loc(nest.einsum),
            )


def schedule_cycles(node: Schedule, cycles: dict[str, float], ctx: dict[str, float]) -> float:
    if node.kind == "einsum":
        return cycles[node.name]
    if node.kind == "stall":
        return float(expr.evaluate(node.name, ctx, node.loc))
    values = [schedule_cycles(c, cycles, ctx) for c in node.children]
    return max(values) if node.kind == "par" else sum(values)


# --------------------------------------------------------------------------------------
# Evaluation of a point


def _plans(
    mapping: Mapping,
    facts: CascadeFacts,
    arch: Architecture,
    extents: dict[str, int],
    partitions: dict[str, tuple[str, ...]],
    instances: tuple[tuple[str, int], ...] = (),
    mapped: dict | None = None,
) -> list[PhasePlan]:
    """Every phase planned; `mapped` keeps GEMM-mapper plans across the search's trials (they
    depend on the Einsum's own extents only)."""
    out = []
    for ph in mapping.phases:
        if ph.mapper is not None and mapped is not None:
            e = facts.cascade.einsum(ph.einsums[0].einsum)
            key = (ph.name, tuple(sorted((v, extents.get(v.upper())) for v in e.iteration)))
            if key not in mapped:
                mapped[key] = plan_phase(ph, mapping, facts, arch, extents, partitions, instances)
            out.append(mapped[key])
            continue
        out.append(plan_phase(ph, mapping, facts, arch, extents, partitions, instances))
    return out


def choose_extents(
    cascade: Cascade, mapping: Mapping, facts: CascadeFacts, arch: Architecture, workload: Workload
) -> tuple[dict[str, int], dict[str, tuple[str, ...]], list[PhasePlan]]:
    known, search, partitions = fixed_extents(cascade, mapping, arch, workload)
    known = resolve_extents(
        known, partitions, mapping.name, Loc(mapping.path), frozenset(mapping.padded)
    )
    locs = dict(mapping.factor_locs)
    instances = ((BATCH, workload.batch), (HEADS, workload.heads))
    mapped: dict = {}
    if not search:
        extents = _complete(known, partitions, cascade, mapping)
        plans = _plans(mapping, facts, arch, extents, partitions, instances, mapped)
        _require_fit(plans, arch, mapping)
        return extents, partitions, plans
    choices = [_search_candidates(n, known, partitions, locs.get(n)) for n in search]
    if math.prod(len(c) for c in choices) > MAX_SEARCH_POINTS:
        raise SpecError(
            f"search over {', '.join(search)} has too many candidates", locs.get(search[0])
        )
    best = None
    for combo in itertools.product(*choices):
        trial = dict(known)
        trial.update(zip(search, combo, strict=True))
        try:
            extents = _complete(
                resolve_extents(trial, partitions, mapping.name, None, frozenset(mapping.padded)),
                partitions,
                cascade,
                mapping,
            )
        except SpecError:
            continue
        plans = _plans(mapping, facts, arch, extents, partitions, instances, mapped)
        if not all(p.fits for p in plans):
            continue
        traffic = sum(p.traffic_values for p in plans)
        key = (traffic, tuple(-v for v in combo))
        if best is None or key < best[0]:
            best = (key, extents, plans)
    if best is None:
        extents = _complete(
            resolve_extents(
                {**known, **{n: 1 for n in search}},
                partitions,
                mapping.name,
                None,
                frozenset(mapping.padded),
            ),
            partitions,
            cascade,
            mapping,
        )
        _require_fit(
            _plans(mapping, facts, arch, extents, partitions, instances, mapped), arch, mapping
        )
        raise SpecError(f"no value of {', '.join(search)} fits the buffer", Loc(mapping.path))
    return best[1], partitions, best[2]


def _complete(
    extents: dict[str, int],
    partitions: dict[str, tuple[str, ...]],
    cascade: Cascade,
    mapping: Mapping,
) -> dict[str, int]:
    ranks = {r for t in cascade.tensors for r in t.ranks}
    for comps in partitions.values():
        ranks.update(comps)
    missing = sorted(r for r in ranks if r not in extents)
    if missing:
        raise SpecError(
            f"mapping '{mapping.name}' leaves the extent of {', '.join(missing)} "
            "unknown: give it in 'factors:' or a partition",
            Loc(mapping.path),
        )
    return extents


def _require_fit(plans: list[PhasePlan], arch: Architecture, mapping: Mapping) -> None:
    for plan in plans:
        if not plan.fits:
            need = plan.buffer_values * arch.value_bytes
            raise SpecError(
                f"mapping '{mapping.name}' does not fit: phase '{plan.phase.name}' "
                f"keeps {need:.0f} bytes of tiles in a "
                f"{arch.buffer.capacity_bytes} byte buffer",
                Loc(mapping.path),
            )


def array_roles(arch: Architecture) -> tuple[str | None, str | None]:
    """The 2D array (meshY > 1) and the 1D array, by shape."""
    two = next((a.name for a in arch.arrays if a.mesh_y > 1), None)
    one = next((a.name for a in arch.arrays if a.mesh_y == 1), None)
    return two, one


def evaluate_mapping(
    cascade: Cascade,
    mapping: Mapping,
    arch: Architecture,
    workload: Workload,
    tables: tuple[EnergyTable, AreaTable] | None = None,
    accounting: str = "corrected",
    engine: str = "analytic",
) -> Result:
    """Performance (and, given the architecture's ERT/ART, energy and area) of one point.

    `engine="cycle"` times each phase with the cycle-level simulator
    (:mod:`simulator.engine`) instead of the schedule tree's closed form."""
    if engine not in ENGINES:
        raise SpecError(f"unknown engine '{engine}' (choose from {', '.join(ENGINES)})")
    facts = cascade_facts(cascade)
    extents, partitions, plans = choose_extents(cascade, mapping, facts, arch, workload)
    value_bytes = arch.value_bytes
    instances = workload.instances
    f = arch.frequency_hz
    bandwidth = arch.dram.bandwidth_bytes_per_s
    phases: list[PhaseCost] = []
    costs: list[EinsumCost] = []
    tensor_totals: dict[str, list[float]] = {}
    sims = []
    # Per-Einsum Timeloop views: one source for the buffer's port traffic and for energy.
    views = [
        phase_views(plan, mapping, facts, arch, extents, partitions, workload) for plan in plans
    ]
    for plan, plan_views in zip(plans, views, strict=True):
        einsums = plan_costs(plan, mapping, facts, arch, extents)
        costs += einsums
        cycles = {c.einsum: c.cycles for c in einsums}
        ctx = _factor_context(arch, mapping, extents)
        ctx["tiles"] = math.prod(extents[lp] for lp in plan.phase.loops if lp in extents)
        traffic = plan.traffic_values * value_bytes * instances
        memory_s = traffic / bandwidth
        port_cycles = buffer_port_cycles(plan_views, arch.buffer)
        buffer_s = port_cycles / f
        if engine == "cycle":
            from simulator.engine.simulate import simulate_phase  # the engine builds on this

            sim = simulate_phase(
                plan, mapping, facts, arch, extents, partitions, instances, ctx, port_cycles
            )
            sims.append(sim)
            # DRAM and the buffer's ports are part of the simulation: the phase takes its
            # simulated cycles; its compute is what the busiest array needs without the
            # cycles it waited for memory (as in the analytic form, memory apart).
            compute = _simulated_compute_cycles(sim, mapping)
            phase_cycles = compute / instances
            compute_s = compute / f
            phase_latency = sim.cycles / f
        else:
            phase_cycles = schedule_cycles(plan.phase.schedule, cycles, ctx)
            compute_s = phase_cycles * instances / f
            phase_latency = max(compute_s, memory_s, buffer_s)
        phases.append(
            PhaseCost(
                plan.phase.name,
                phase_cycles,
                compute_s,
                memory_s,
                phase_latency,
                traffic,
                plan.buffer_values * value_bytes,
                buffer_s,
            )
        )
        for tensor, (r, w, s) in plan.tallies.items():
            acc = tensor_totals.setdefault(tensor, [0.0, 0.0, 0.0])
            acc[0] += r * value_bytes * instances
            acc[1] += w * value_bytes * instances
            acc[2] += s * value_bytes * instances
    latency = sum(p.latency_s for p in phases)
    traffic = sum(p.traffic_bytes for p in phases)
    total_cycles = latency * f

    # Utilisation = useful PE-cycles / available PE-cycles: an Einsum that occupies only part
    # of its array (FLAT's 64-row AV) keeps it busy longer but not fully utilised.
    def share(c: EinsumCost) -> float:
        if not total_cycles:
            return 0.0
        useful = c.cycles * c.parallelism / arch.array(c.array).pes
        return useful * instances / total_cycles

    per_einsum = tuple((c.einsum, c.array, share(c)) for c in costs)
    util = [
        (array.name, sum(u for _e, a, u in per_einsum if a == array.name)) for array in arch.arrays
    ]
    two, one = array_roles(arch)
    util_map = dict(util)
    factor_names = [name for name, _ in mapping.factors]
    for comps in partitions.values():
        factor_names += [c for c in comps if c not in factor_names]
    return Result(
        accelerator=mapping.name,
        label=mapping.label,
        model=workload.label,
        seq_len=workload.seq_len,
        instances=instances,
        latency_s=latency,
        traffic_bytes=traffic,
        cycles=total_cycles,
        util=tuple(util),
        util_2d=util_map.get(two, 0.0) if two else 0.0,
        util_1d=util_map.get(one, 0.0) if one else 0.0,
        util_per_einsum=per_einsum,
        phases=tuple(phases),
        einsums=tuple(costs),
        tensors=tuple(TensorTraffic(t, *v) for t, v in sorted(tensor_totals.items())),
        factors=tuple((n, extents[n]) for n in factor_names if n in extents),
        array_2d=two,
        array_1d=one,
        notes=mapping.notes + example_shape_notes(cascade, mapping, workload),
        engine=engine,
        stalls=_stall_totals(sims),
        epochs=sum(s.epochs for s in sims),
        simulated_epochs=sum(s.simulated_epochs for s in sims),
        **_energy_and_area(
            cascade,
            mapping,
            arch,
            workload,
            [v for plan_views in views for v in plan_views],
            plans,
            costs,
            total_cycles,
            tables,
            accounting,
        ),
    )


def _gemm_cost(plan: PhasePlan) -> EinsumCost:
    m = plan.gemm
    assert m is not None
    copies = max(1, m.gemm.copies)
    parallel = math.prod(f for _axis, _d, f in m.spatial)
    points = math.prod(m.gemm.extents)
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


def _simulated_compute_cycles(sim, mapping: Mapping) -> int:
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


def _stall_totals(sims: list) -> tuple[tuple[str, str, int], ...]:
    totals: dict[tuple[str, str], int] = {}
    for sim in sims:
        for array, reason, n in sim.stalls:
            totals[(array, reason)] = totals.get((array, reason), 0) + n
    return tuple((a, why, n) for (a, why), n in sorted(totals.items()))


def buffer_port_cycles(views: list, buffer: Memory) -> float:
    """Cycles the global buffer's ports need for one phase (all instances): its reads
    (operands to the PEs, data back to DRAM) and writes (fills from DRAM, updates from the
    PEs), counted with Timeloop's semantics, over the port bandwidths of the architecture.
    Zero when the buffer declares none (unlimited, as in Timeloop)."""
    if not (buffer.read_bandwidth or buffer.write_bandwidth or buffer.shared_bandwidth):
        return 0.0
    reads = writes = 0.0
    for view in views:
        for level, _ds, c in analyze(view.problem, view.mapping).counts:
            if level == "buffer":
                reads += c.reads
                writes += c.fills + c.updates
    if buffer.shared_bandwidth:
        return (reads + writes) / buffer.shared_bandwidth
    return max(
        reads / buffer.read_bandwidth if buffer.read_bandwidth else 0.0,
        writes / buffer.write_bandwidth if buffer.write_bandwidth else 0.0,
    )


def _energy_and_area(
    cascade,
    mapping,
    arch,
    workload,
    views,
    plans,
    costs,
    total_cycles,
    tables,
    accounting,
) -> dict:
    if tables is None:
        return {}
    ert, art = tables
    spill = sum(s for plan in plans for _r, _w, s in plan.tallies.values())
    points = {c.einsum: c.points for c in costs}
    counts = action_counts(
        views, arch, cascade, points, workload.instances, spill, accounting, total_cycles
    )
    report = price(counts, ert, accounting, frozenset(mapping.unpriced))
    area = chip_area(arch, art)
    return {
        "energy_pj": report.total_pj,
        "energy_accounting": accounting,
        "energy_per_component": report.per_component,
        "area_um2": area.total_um2,
        "area_per_component": tuple((name, um2) for name, _n, um2 in area.per_component),
    }
