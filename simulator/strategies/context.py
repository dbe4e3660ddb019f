"""The point's context every template reads: the cascade (as the mapper views it), its
roles, the architecture, the workload, the ranks the workload sizes and their extents, how
often the cascade repeats, how the mapping names its cascade and architecture, and the
binder's facts (`mappings/auto/binder.yaml`).

Built once per point (:func:`bind_context`); every strategy's template
(:mod:`simulator.strategies.auto`) takes it whole, with its own knobs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simulator.cascade.ir import Cascade, rank_of
from simulator.cascade.normal import mapping_view
from simulator.spec.arch import Architecture
from simulator.spec.workload import Workload
from simulator.strategies.binder_facts import BinderFacts, load_facts
from simulator.strategies.roles import Roles, cascade_roles
from simulator.support.errors import Loc, SpecError


def workload_extents(
    cascade: Cascade, workload: Workload, facts: BinderFacts
) -> tuple[dict[str, str], dict[str, int]]:
    """The ranks the workload sizes (rank -> workload quantity) and every rank's extent:
    `--shape` first (the workload's rank overrides), then the workload quantity the binder's
    facts name, then the cascade's example shape (for a chunk a mapping factor replaces).
    A rank `--shape` sizes as the workload does stays sized by the workload."""
    ranks = {r for t in cascade.tensors for r in t.ranks} | set(cascade.params)
    ranks |= {c for _r, comps in cascade.partitions for c in comps}
    fields = workload.fields()
    given = dict(workload.rank_overrides)
    # A rank `--shape` gives the workload's own extent is still the workload's (the same
    # workload stated two ways): only one it resizes is the user's.
    shapes = {
        r: q
        for r, q in facts.shapes
        if r in ranks and given.get(r, fields[q]) == fields[q]  # type: ignore[index]
    }
    extents = {r: v for r, v in cascade.shapes}
    for rank, quantity in shapes.items():
        extents[rank] = int(fields[quantity])  # type: ignore[call-overload]
    for rank, value in given.items():
        if rank in ranks:  # (a rank the cascade lacks sizes another cascade of the run)
            extents[rank] = value
    for rank, same in cascade.tied_ranks:  # a rank the mapper's view added: as its original
        if same in shapes:
            shapes[rank] = shapes[same]
        if same in extents:
            extents[rank] = extents[same]
    return shapes, extents


def check_sized(
    cascade: Cascade,
    extents: dict[str, int],
    facts: BinderFacts,
    workload: Workload | None = None,
) -> None:
    """Every rank an Einsum iterates has an extent: `--shape`, the workload quantity the
    binder's facts name, or else the cascade's own `shapes:` (an FFN's output width); a
    chunk (the inner component of a partitioned rank) is the mapping's to choose. A rank
    sized by none of them is one line naming it."""
    given = set(dict(workload.rank_overrides)) if workload is not None else set()
    sized = {r for r, _q in facts.shapes} | given | {r for r, _v in cascade.shapes}
    parts = dict(cascade.partitions)
    for rank, comps in parts.items():
        if rank in sized:
            sized |= set(comps)
    for e in cascade.einsums:
        for var in e.iteration:
            rank = rank_of(var)
            if rank in sized or rank in extents:
                continue
            known = ", ".join(f"{r} ({q})" for r, q in facts.shapes)
            raise SpecError(
                f"cannot bind Einsum '{e.name}': no workload sizes its rank '{rank}' "
                f"(the binder sizes {known}; {facts.path}), nor does the cascade's shapes: "
                f"give --shape {rank}=N",
                e.loc,
            )


def instances_of(shapes: dict[str, str], facts: BinderFacts) -> dict[str, str]:
    """How often the cascade repeats (the facts' `instances:`): per K/V head with a rank
    sized by `group`, per query head with one sized by `keys`, else per request."""
    if "group" in shapes.values():
        return dict(facts.grouped_instances)
    if "keys" not in shapes.values() and facts.keyless_instances:
        return dict(facts.keyless_instances)
    return dict(facts.default_instances)


@dataclass(frozen=True)
class BindContext:
    """What every template of a point reads: the cascade's roles, the ranks the workload
    sizes and their extents, how often the cascade repeats, how the mapping names its
    cascade and architecture."""

    cascade: Cascade
    arch: Architecture
    workload: Workload
    roles: Roles
    shapes: dict[str, str]
    extents: dict[str, int]
    instances: dict[str, str]
    cascade_ref: str
    arch_ref: str
    facts: BinderFacts
    # The cascade is the mapper's view with Einsums the written one lacks (a scaled sum
    # split): the mappings say `normalised: yes`.
    normalised: bool = False


def bind_context(
    cascade: Cascade,
    arch: Architecture,
    workload: Workload,
    cascade_ref: str,
    arch_ref: str,
    facts: BinderFacts | None = None,
) -> BindContext:
    """The point's context, every rank an Einsum iterates sized (else one line). The
    templates read the cascade as :func:`mapping_view` orders it, so how it is written --
    operand order, Einsum order -- does not change what they write."""
    facts = facts or load_facts()
    shapes, extents = workload_extents(cascade, workload, facts)
    check_sized(cascade, extents, facts, workload)
    view = mapping_view(cascade)
    normalised = {e.name for e in view.einsums} != {e.name for e in cascade.einsums} or {
        t.name for t in view.tensors
    } != {t.name for t in cascade.tensors}
    if normalised:
        shapes, extents = workload_extents(view, workload, facts)
        check_tied_splits(view, extents)
    cascade = view
    return BindContext(
        cascade,
        arch,
        workload,
        cascade_roles(cascade),
        shapes,
        extents,
        instances_of(shapes, facts),
        cascade_ref,
        arch_ref,
        facts,
        normalised,
    )


def check_tied_splits(view: Cascade, extents: dict[str, int]) -> None:
    """A split the mapper's view moved onto a rank of its own (`PV`, sized as `P`) spans its
    original rank, said in the cascade's own names (one line)."""
    parts = dict(view.partitions)
    for rank, same in view.tied_ranks:
        comps = parts.get(rank, ())
        if same not in extents or not comps or any(c not in extents for c in comps):
            continue
        product = math.prod(extents[c] for c in comps)
        if product != extents[same]:
            sizes = " x ".join(f"{c}={extents[c]}" for c in comps)
            raise SpecError(
                f"the cascade splits {same} into {' x '.join(comps)}, but {same}="
                f"{extents[same]} and {sizes} = {product}: give sizes that multiply to "
                f"{same} (--shape)",
                Loc(view.path),
            )


def mapping_head(
    ctx: BindContext,
    label: str,
    description: str,
    factors: dict[str, Any],
    partitions: dict[str, Any],
    spatial: dict[str, Any],
    binding: dict[str, list[str]],
) -> dict[str, Any]:
    """What every template's mapping data opens with, in the mapping file's order: its
    label and description, the cascade and architecture it binds as the context names
    them, the workload's shapes and instances, then the template's tiling, spread and
    binding (the chaining, tensors and phases follow)."""
    return {
        "label": label,
        "description": description,
        "cascade": ctx.cascade_ref,
        "architecture": ctx.arch_ref,
        "shapes": ctx.shapes,
        "instances": ctx.instances,
        "factors": factors,
        "partitions": partitions,
        "spatial": spatial,
        "binding": binding,
    }
