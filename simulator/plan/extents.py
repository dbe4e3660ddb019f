"""Rank extents of a point: the workload's shapes, the mapping's factors, and the `search`
factors chosen.

Planning step 1. Extents the workload sizes (the mapping's `shapes:`) and factor
expressions are evaluated first; `search` factors are chosen among the divisors they can
take by planning every phase for each candidate (:mod:`simulator.plan.phases`): least DRAM
traffic that fits the buffer, then the larger tile. At most `MAX_SEARCH_POINTS` candidates
are tried.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping as TMapping

from simulator.cascade.ir import Cascade
from simulator.plan.facts import CascadeFacts
from simulator.plan.nest import merged_partitions, resolve_extents
from simulator.plan.phases import PhasePlan, plan_phase
from simulator.plan.views import BATCH, HEADS
from simulator.spec import expr
from simulator.spec.arch import Architecture
from simulator.spec.mapping import Mapping
from simulator.spec.workload import Workload
from simulator.support.errors import DoesNotFit, Loc, NotDivisible, SpecError
from simulator.support.units import divisors

MAX_SEARCH_POINTS = 100_000


def factor_context(
    arch: Architecture, mapping: Mapping, known: TMapping[str, int]
) -> dict[str, float]:
    """The names a factor or `stall:` expression may use: the architecture's parameters,
    the mapping's own, and the extents known so far."""
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
    ranks = {r for t in cascade.tensors for r in t.ranks} | set(cascade.params)
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
    ranks = {r for t in cascade.tensors for r in t.ranks} | set(cascade.params)
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
    given = factor_context(arch, mapping, {})  # the architecture's and mapping's names
    for _ in range(len(pending) + 1):
        progressed = False
        ctx = {**given, **known}
        for name in list(pending):
            raw = pending[name]
            needed = expr.names_in(str(raw)) if isinstance(raw, str) else set()
            if any(n not in ctx for n in needed):
                continue
            value = expr.evaluate(raw, ctx, locs.get(name))
            known[name] = ctx[name] = expr.as_int(value, f"factor {name}", locs.get(name))
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
        expr.evaluate(pending[name], factor_context(arch, mapping, known), locs.get(name))
    return known, search, partitions


def search_candidates(
    name: str,
    known: dict[str, int],
    partitions: dict[str, tuple[str, ...]],
    loc: Loc | None,
    padded: frozenset[str] = frozenset(),
) -> list[int]:
    """The values a `search` factor may take: the divisors of what its rank's other
    components leave (of that rounded up to whole tiles, for a `padded` rank)."""
    for rank, comps in partitions.items():
        if name in comps and rank in known:
            rest = math.prod(known[c] for c in comps if c in known and c != name)
            total = known[rank]
            if total % rest and rank not in padded:
                raise NotDivisible(f"{rank}={total} is not divisible by {rest}", loc)
            span = -(-total // rest)
            return divisors(span)
    raise SpecError(
        f"'search' factor {name} must be a component of a partitioned rank whose extent is known",
        loc,
    )


def _plans(
    mapping: Mapping,
    facts: CascadeFacts,
    arch: Architecture,
    extents: dict[str, int],
    partitions: dict[str, tuple[str, ...]],
    instances: tuple[tuple[str, int], ...] = (),
    mapped: dict | None = None,
    until_unfit: bool = False,
) -> list[PhasePlan]:
    """Every phase planned; `mapped` keeps GEMM-mapper plans across the search's trials (they
    depend on the Einsum's own extents only). `until_unfit`: stop after the first phase that
    does not fit (the point cannot run; that phase is what the error names)."""
    out = []
    for ph in mapping.phases:
        if ph.mapper is not None and mapped is not None:
            e = facts.cascade.einsum(ph.einsums[0].einsum)
            key = (ph.name, tuple(sorted((v, extents.get(v.upper())) for v in e.iteration)))
            if key not in mapped:
                mapped[key] = plan_phase(ph, mapping, facts, arch, extents, partitions, instances)
            out.append(mapped[key])
        else:
            out.append(plan_phase(ph, mapping, facts, arch, extents, partitions, instances))
        if until_unfit and not out[-1].fits:
            break
    return out


def choose_extents(
    cascade: Cascade, mapping: Mapping, facts: CascadeFacts, arch: Architecture, workload: Workload
) -> tuple[dict[str, int], dict[str, tuple[str, ...]], list[PhasePlan]]:
    known, search, partitions = fixed_extents(cascade, mapping, arch, workload)
    known = resolve_extents(
        known, partitions, mapping.name, Loc(mapping.path), frozenset(mapping.padded)
    )
    locs = dict(mapping.factor_locs)
    instances = ((BATCH, mapping.batch), (HEADS, mapping.heads))
    mapped: dict = {}
    if not search:
        extents = _complete(known, partitions, cascade, mapping)
        plans = _plans(mapping, facts, arch, extents, partitions, instances, mapped, True)
        _require_fit(plans, arch, mapping)
        return extents, partitions, plans
    padded = frozenset(mapping.padded)
    choices = [search_candidates(n, known, partitions, locs.get(n), padded) for n in search]
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
        plans = _plans(mapping, facts, arch, extents, partitions, instances, mapped, True)
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
    ranks = {r for t in cascade.tensors for r in t.ranks} | set(cascade.params)
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
            need = max(plan.buffer_values, plan.resident_values) * arch.value_bytes
            raise DoesNotFit(
                f"mapping '{mapping.name}' does not fit: phase '{plan.phase.name}' "
                f"keeps {need:.0f} bytes of tiles in a "
                f"{arch.buffer.capacity_bytes} byte buffer",
                Loc(mapping.path),
            )
