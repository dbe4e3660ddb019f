"""The search: the best mapping of the space a strategy admits, by an objective.

Every candidate (:mod:`simulator.mapper.space`) is planned and timed by the analytic engine
and priced when the objective needs energy -- the same path a hand-written mapping takes --
so the mapping found is the best the model knows of, not the best by a proxy. Templates
come in the strategy's order (its own rule first) and tile factors larger first, so the
rule's own choice is among the first evaluated.

* **Objective** -- `latency` (then DRAM traffic, then energy), `energy` (then latency),
  `edp` (energy x latency), `traffic` (then latency).
* **Bounded** -- at most `budget` evaluations (`--search-s` x :data:`EVALS_PER_S`: a count,
  not a clock, so the same inputs give the same mapping on any machine); the search stops
  early once the best latency is within `stop_within` of the least latency bound of the
  candidates evaluated (no mapping can do better than that bound).
* **Deterministic** -- no randomness, a fixed order, ties broken by the candidate's order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.cascade.ir import Cascade
from simulator.cascade.recompute import recomputed
from simulator.core.evaluate import evaluate_mapping
from simulator.core.result import Result, SearchStats
from simulator.mapper import cache
from simulator.mapper.resolve import resolved
from simulator.mapper.space import (
    Template,
    data_with_factors,
    needs_padding,
    padded,
    spread_order,
    templates,
    tile_choices,
    with_factors,
)
from simulator.spec.mapping import Mapping, MappingSpec, loads_mapping, mapping_from_data
from simulator.spec.tables import AreaTable, EnergyTable
from simulator.strategies.auto import mapping_yaml
from simulator.strategies.context import BindContext
from simulator.support.errors import BoundBreach, DoesNotFit, SpecError
from simulator.support.hashing import content_repr

OBJECTIVES = ("latency", "energy", "edp", "traffic")
DEFAULT_SEARCH_S = 2.0
# Evaluations per second of --search-s: the budget is a count (deterministic), sized so that
# the default takes about --search-s on one core of a laptop (an evaluation plans and times
# one mapping: 2-20 ms).
EVALS_PER_S = 150
STOP_WITHIN = 0.001
# Latencies within this of the least are a tie the latency objective breaks by DRAM traffic
# (a compute-bound point has many mappings equally fast; the one moving less data is better).
LATENCY_TIE = 0.002
# Candidates planned (fitting or not) per evaluation of the budget, at most.
PLANNED_PER_EVALUATION = 8


@dataclass(frozen=True)
class SearchOptions:
    strategy: str = "fused"
    pipelined: bool = True
    reuse: bool = True
    objective: str = "latency"
    search_s: float = DEFAULT_SEARCH_S
    stop_within: float = STOP_WITHIN
    # Every tile held whole in the buffer (no part of one spilled to DRAM): what a Timeloop
    # mapping can express (the export asks for it)
    whole_tiles: bool = False

    @property
    def budget(self) -> int:
        return max(1, math.ceil(self.search_s * EVALS_PER_S))

    def check(self) -> None:
        if self.objective not in OBJECTIVES:
            raise SpecError(
                f"unknown objective '{self.objective}' (choose from {', '.join(OBJECTIVES)})"
            )
        if not self.search_s > 0 or math.isinf(self.search_s):
            raise SpecError(f"--search-s must be a positive number of seconds, got {self.search_s}")


@dataclass(frozen=True)
class Found:
    """The search's answer: the mapping (data and loaded spec) and how it was found."""

    data: dict[str, Any]
    spec: MappingSpec
    stats: SearchStats


def _dominates(values: dict[str, int], smaller: dict[str, int]) -> bool:
    return all(values[k] >= v for k, v in smaller.items())


Candidate = tuple[tuple[int, int], Template, dict[str, int], Result, Mapping, Cascade]


def _best(results: list[Candidate], objective: str) -> Candidate | None:
    """The best candidate by the objective (latency: the least traffic among those within
    :data:`LATENCY_TIE` of the least latency); ties go to the earlier candidate."""
    if not results:
        return None
    if objective == "latency":
        fastest = min(x[3].latency_s for x in results)
        near = [x for x in results if x[3].latency_s <= fastest * (1 + LATENCY_TIE)]
        return min(near, key=lambda x: (x[3].traffic_bytes, x[3].latency_s, x[0]))
    return min(results, key=lambda x: (*objective_key(x[3], objective), x[0]))


def objective_key(result: Result, objective: str) -> tuple[float, ...]:
    energy = result.energy_pj if result.energy_pj is not None else 0.0
    if objective == "energy":
        return (energy, result.latency_s, result.traffic_bytes)
    if objective == "edp":
        return (energy * result.latency_s, result.latency_s, result.traffic_bytes)
    if objective == "traffic":
        return (result.traffic_bytes, result.latency_s, energy)
    return (result.latency_s, result.traffic_bytes, energy)


def search(
    ctx: BindContext,
    options: SearchOptions,
    name: str,
    tables: tuple[EnergyTable, AreaTable] | None = None,
    progress: Callable[[int, int], None] | None = None,
    log: list[tuple[str, Result | SpecError]] | None = None,
) -> Found:
    """The best mapping of the space `options.strategy` admits at the context's point;
    `name` names the configuration in messages and results (`auto-fused`)."""
    options.check()
    priced = options.objective in ("energy", "edp")
    if priced and tables is None:
        raise SpecError(
            f"--objective {options.objective} needs the architecture's energy tables; "
            f"'{ctx.arch.name}' names none"
        )
    # The cascade by its content: the same cascade read from another file, or written at
    # other lines, is the same search (its file is named only in the mapping's `cascade:`)
    key = cache.digest(
        content_repr(ctx.cascade, skip=frozenset({"path", "description"})),
        ctx.arch,
        ctx.workload,
        ctx.arch_ref,
        options,
        name,
        tables,
    )
    kept = cache.load(key)
    if kept is not None:
        data, stats = kept
        data["mapping"]["cascade"] = ctx.cascade_ref
        spec = loads_mapping(mapping_yaml(data), f"<{name} mapping of {ctx.cascade.name}>", name)
        return Found(data, _with_notes(spec, _notes(name, stats)), stats)
    found = _search(ctx, options, name, tables, progress, log)
    cache.save(key, found.data, found.stats)
    return found


def _notes(name: str, stats: SearchStats) -> tuple[str, ...]:
    """What a search says with its results, reused or not."""
    if not stats.breaches:
        return ()
    return (
        f"{name}: {stats.breaches} candidate mapping(s) came out below their own lower bound "
        "(a model bug) and were set aside",
    )


def _search(
    ctx: BindContext,
    options: SearchOptions,
    name: str,
    tables: tuple[EnergyTable, AreaTable] | None,
    progress: Callable[[int, int], None] | None,
    log: list[tuple[str, Result | SpecError]] | None,
) -> Found:
    start = time.perf_counter()
    priced = options.objective in ("energy", "edp")
    candidate_tables = tables if priced else None  # pricing only where the objective needs it
    cascade, arch, workload = ctx.cascade, ctx.arch, ctx.workload
    offered = templates(ctx, options.strategy, options.pipelined, options.reuse)
    candidates = [(t, _spec(t, {}, name)) for t in offered]
    space = 0
    plans: list[tuple[Template, Mapping, list[dict[str, int]], Cascade]] = []
    first_error: SpecError | None = None
    for tmpl, spec in candidates:
        try:
            # the cascade the template binds: the point's, with what it makes again
            bound = recomputed(cascade, spec.recompute, spec.data.loc_of("recompute"))
            mapping = resolved(spec, bound, arch, workload)
            pad = needs_padding(bound, mapping, arch, workload)
            if pad:  # a length the tiles do not divide: whole tiles, the last partly empty
                tmpl = padded(tmpl, pad)
                spec = _spec(tmpl, {}, name)
                mapping = resolved(spec, bound, arch, workload)
            choices = list(tile_choices(bound, mapping, arch, workload))
        except SpecError as err:
            first_error = first_error or err
            continue
        space += len(choices)
        plans.append((tmpl, mapping, choices, bound))
    budget = options.budget
    evaluated = infeasible = breaches = skipped = 0
    first_breach: BoundBreach | None = None
    results: list[Candidate] = []
    bound = math.inf
    fastest = math.inf  # the least latency of the results so far
    # Round robin over the templates (each gets its share of the budget), each template's
    # tile choices larger first; a choice whose every factor is at least that of a choice
    # that did not fit is skipped unplanned (larger tiles need more buffer). A template
    # over 1/s of the array (`scale` s: what a chip s times smaller does) takes a turn
    # every s rounds: it wins only where the whole array's tiles do not fit.
    # (each template's choices in spread order: the largest, the smallest, the middle ...;
    # a tie goes to the larger tiles, then the earlier template, whatever order ran them)
    queues = [
        (tmpl, mapping, iter([(k, i, choices[i]) for i in spread_order(len(choices))]), [], bound)
        for k, (tmpl, mapping, choices, bound) in enumerate(plans)
    ]
    planned = 0
    within_bound = False  # stopped: the best is within `stop_within` of the bound
    rounds = 0
    if progress is not None:
        progress(0, space)
    while queues and evaluated < budget and planned < PLANNED_PER_EVALUATION * budget:
        rounds += 1
        for entry in list(queues):
            tmpl, mapping, choices, too_big, bound_cascade = entry
            if (rounds - 1) % _turn(tmpl) and len(queues) > 1:
                continue
            item = next(choices, None)
            while item is not None and any(_dominates(item[2], t) for t in too_big):
                skipped += 1
                item = next(choices, None)
            if item is None:
                queues.remove(entry)
                continue
            k, i, values = item
            planned += 1
            if progress is not None:
                progress(planned, min(space, PLANNED_PER_EVALUATION * budget))
            try:
                r = evaluate_mapping(
                    bound_cascade, with_factors(mapping, values), arch, workload, candidate_tables
                )
                if options.whole_tiles and any(t.spill_bytes > 0 for t in r.tensors):
                    raise DoesNotFit(f"{_described(tmpl, values)} spills part of a tile")
            except BoundBreach as breach:
                breaches += 1  # a model bug: set aside (counted, said), never chosen
                first_breach = first_breach or breach
                continue
            except SpecError as err:
                infeasible += 1
                if isinstance(err, DoesNotFit):
                    too_big.append(values)
                first_error = first_error or err
                if log is not None:
                    log.append((_described(tmpl, values), err))
                continue
            evaluated += 1
            if log is not None:
                log.append((_described(tmpl, values), r))
            bound = min(bound, r.latency_bound_s or math.inf)
            fastest = min(fastest, r.latency_s)
            results.append(((i, k), tmpl, values, r, mapping, bound_cascade))
            if evaluated >= budget:
                break
        near = fastest <= bound * (1 + options.stop_within)
        if options.objective == "latency" and results and near:
            within_bound = True
            break
    if progress is not None:
        progress(space, space)
    best = _best(results, options.objective)
    while best is not None and tables is not None and not priced:
        # the winner is also priced (the energy tables count every access): a mapping the
        # pricing cannot take is set aside for the next best
        try:
            evaluate_mapping(best[5], with_factors(best[4], best[2]), arch, workload, tables)
            break
        except SpecError as err:
            first_error = first_error or err
            results = [x for x in results if x[0] != best[0]]
            best = _best(results, options.objective)
    if best is None:
        if first_breach is not None:
            raise first_breach  # every candidate that ran came out below its bound: a bug
        if first_error is not None:
            raise first_error
        raise SpecError(f"{name}: no mapping of the {options.strategy} strategy runs the point")
    _order, tmpl, values, r, _mapping, _bound = best
    left = space - evaluated - infeasible - breaches - skipped
    data = data_with_factors(tmpl.data, values)
    first = offered[0]
    body = data["mapping"]
    body["label"] = first.data["mapping"]["label"]
    found = _described(tmpl, values)
    body["description"] = (
        f"{cascade.name} found by the mapper ({options.strategy} strategy, "
        f"{options.objective}): {found}"
    )
    stats = SearchStats(
        strategy=options.strategy,
        objective=options.objective,
        found=found,
        space=space,
        evaluated=evaluated + infeasible,
        infeasible=infeasible,
        # what was never evaluated: pruned where no need (the bound reached, larger tiles
        # than one that did not fit), else left when the budget ran out
        pruned=skipped + breaches + (left if within_bound or not queues else 0),
        unevaluated=0 if within_bound or not queues else left,
        budget=budget,
        bound_s=0.0 if math.isinf(bound) else bound,
        distance=r.latency_s / bound - 1 if bound and not math.isinf(bound) else 0.0,
        seconds=time.perf_counter() - start,
        breaches=breaches,
    )
    spec = loads_mapping(mapping_yaml(data), f"<{name} mapping of {cascade.name}>", name)
    return Found(data, _with_notes(spec, _notes(name, stats)), stats)


def _turn(tmpl: Template) -> int:
    """Every how many rounds a template takes a turn (its own, else its `scale`)."""
    if tmpl.turn > 0:
        return tmpl.turn
    scale = dict(tmpl.knobs).get("scale", 1)
    return scale if isinstance(scale, int) and scale > 0 else 1


def _described(tmpl: Template, values: dict[str, int]) -> str:
    return tmpl.label + "".join(f", {k}={v}" for k, v in values.items())


def _spec(tmpl: Template, values: dict[str, int], name: str) -> MappingSpec:
    data = data_with_factors(tmpl.data, values)
    return mapping_from_data(data, f"<{name} mapping ({tmpl.label})>", name)


def _with_notes(spec: MappingSpec, notes: tuple[str, ...]) -> MappingSpec:
    if not notes:
        return spec
    return MappingSpec(
        spec.name, spec.path, spec.data, spec.table, spec.table_path, (*spec.notes, *notes)
    )
