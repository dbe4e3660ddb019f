"""Automatic binding: (cascade, architecture, workload, strategy) -> an ordinary mapping file.

The strategies read the cascade's graph (:mod:`simulator.strategies.roles`) and the
architecture's arrays and operation tables:

* `fusemax` (:mod:`simulator.strategies.fusemax`) -- one-pass cascades, fused on a 2D and a 1D
  array, the pipelined waterfall where the arrays are coupled;
* `flat` (:mod:`simulator.strategies.flat`) -- FLAT's fused, row-granular dataflow for cascades
  that normalise whole fibres (3-pass softmax): the contractions on the 2D array, the
  fibre-wide Einsums on the 1D array, fibres kept on chip while they fit;
* `unfused` (:mod:`simulator.strategies.unfused`) -- every GEMM its own phase through the GEMM
  mapper, the Einsums between them a phase walking one fibre at a time, all through DRAM;
* `fused` (:mod:`simulator.strategies.fused`) -- any cascade in as few phases as its passes
  allow: a one-pass recurrence as FuseMax binds it, FLAT's shape as FLAT binds it, anything
  else over blocks of rows with its fibres on chip while they fit.

The result is the data of a mapping file (the shapes the workload sizes come from the
binder's facts, `mappings/auto/binder.yaml`); :func:`mapping_yaml` writes it, and the
tools load it like a hand-written one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from simulator.cascade.ir import Cascade, rank_of
from simulator.cascade.normal import mapping_view
from simulator.spec.arch import Architecture
from simulator.spec.workload import Workload
from simulator.strategies.binder_facts import BinderFacts, load_facts
from simulator.strategies.chain import chain_mapping
from simulator.strategies.flat import flat_mapping
from simulator.strategies.fused import fused_mapping
from simulator.strategies.fusemax import fusemax_mapping
from simulator.strategies.roles import Roles, cascade_roles
from simulator.strategies.unfused import unfused_mapping
from simulator.support.errors import SpecError

STRATEGIES = ("fusemax", "flat", "unfused", "fused")
# The architecture each strategy binds to when none is given: FuseMax's for its own
# strategy and the general fused one, FLAT's for the baselines (as in the paper's
# evaluation).
DEFAULT_ARCH = {"fusemax": "fusemax", "flat": "flat", "unfused": "flat", "fused": "fusemax"}


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
    normalised = {e.name for e in view.einsums} != {e.name for e in cascade.einsums}
    if normalised:
        shapes, extents = workload_extents(view, workload, facts)
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


def _rule(rule: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A rule called with the point's context (each gets its own copies of the shapes and
    extents it may adjust) and its knobs."""

    def call(ctx: BindContext, **knobs: Any) -> dict[str, Any]:
        return rule(
            ctx.cascade,
            ctx.arch,
            ctx.roles,
            dict(ctx.extents),
            dict(ctx.shapes),
            ctx.instances,
            ctx.cascade_ref,
            ctx.arch_ref,
            **knobs,
        )

    return call


def _unfused(ctx: BindContext, reuse: bool = True) -> dict[str, Any]:
    # The unfused strategy's library calls get operands sliced to what is attended.
    shapes, extents = dict(ctx.shapes), dict(ctx.extents)
    fields = ctx.workload.fields()
    for role, quantity in ctx.facts.unfused_sizes:
        for rank in [r for r, q in shapes.items() if q == role]:
            shapes[rank] = quantity
            extents[rank] = int(fields[quantity])  # type: ignore[call-overload]
    return unfused_mapping(
        ctx.cascade,
        ctx.arch,
        ctx.roles,
        extents,
        shapes,
        ctx.instances,
        ctx.cascade_ref,
        ctx.arch_ref,
        ctx.facts,
        reuse,
    )


# A template: a rule writing the mapping data of one structural choice, given its knobs.
TEMPLATES: dict[str, Callable[..., dict[str, Any]]] = {
    "fusemax": _rule(fusemax_mapping),
    "flat": _rule(flat_mapping),
    "unfused": _unfused,
    "fused": _rule(fused_mapping),
    "chain": _rule(chain_mapping),
}


def template(ctx: BindContext, name: str, **knobs: Any) -> dict[str, Any]:
    """The mapping data a template writes for the point (tile factors may be `search`)."""
    data = TEMPLATES[name](ctx, **knobs)
    if ctx.normalised:
        data["mapping"]["normalised"] = True
    return data


def bind(
    cascade: Cascade,
    arch: Architecture,
    workload: Workload,
    strategy: str,
    cascade_ref: str,
    arch_ref: str,
    *,
    pipelined: bool = True,
    reuse: bool = True,
    facts: BinderFacts | None = None,
) -> dict[str, Any]:
    """The mapping data `strategy`'s rule generates (see module docstring); `cascade_ref`
    and `arch_ref` are how the mapping names its cascade and architecture."""
    if strategy not in STRATEGIES:
        raise SpecError(f"unknown strategy '{strategy}' (choose from {', '.join(STRATEGIES)})")
    ctx = bind_context(cascade, arch, workload, cascade_ref, arch_ref, facts)
    if strategy == "flat":
        return template(ctx, "flat", reuse=reuse)
    if strategy == "unfused":
        return template(ctx, "unfused", reuse=reuse)
    return template(ctx, strategy, pipelined=pipelined, reuse=reuse)


class _Flow(list):
    """A list written in flow style (`[QK, LM]`)."""


class _FlowDict(dict):
    """A mapping of plain values written in flow style (`{home: DRAM, keep: P2}`)."""


def _flows(node: Any, depth: int = 0) -> Any:
    if isinstance(node, str):
        return str(node)  # LocStr names from the specs: plain text
    if isinstance(node, dict):
        items = {str(k): _flows(v, depth + 1) for k, v in node.items()}
        if depth >= 2 and all(isinstance(v, str | int | float) for v in items.values()):
            return _FlowDict(items)
        return items
    if isinstance(node, list):
        items = [_flows(v, depth + 1) for v in node]
        if all(isinstance(v, str | int | float) or isinstance(v, _Flow) for v in items):
            return _Flow(items)
        return items
    return node


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # libyaml's emitter where present
    """The writer of generated mappings (the same text as PyYAML's own emitter, 4x faster:
    the mapper writes every candidate)."""


_Dumper.add_representer(
    _Flow, lambda d, data: d.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)
)
_Dumper.add_representer(
    _FlowDict,
    lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True),
)


def mapping_yaml(data: dict[str, Any], header: str = "") -> str:
    """The mapping as YAML text, laid out like the hand-written files (short lists inline)."""
    body = yaml.dump(
        _flows(data), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100
    )
    return header + body


def reference(path: Path, shipped_folder: Path, relative_to: Path | None = None) -> str:
    """How a generated mapping names a spec file: a shipped spec by its name; another file
    by its path (relative to the mapping's folder when written to a file)."""
    try:
        if path.resolve().parent == shipped_folder.resolve():
            return path.stem
    except OSError:
        pass
    if relative_to is not None:
        return os.path.relpath(path.resolve(), relative_to.resolve())
    return str(path.resolve())
