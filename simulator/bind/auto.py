"""Automatic binding: (cascade, architecture, workload, strategy) -> an ordinary mapping file.

The strategies read the cascade's graph (:mod:`simulator.bind.roles`) and the
architecture's arrays and operation tables:

* `fusemax` (:mod:`simulator.bind.fusemax`) -- one-pass cascades, fused on a 2D and a 1D
  array, the pipelined waterfall where the arrays are coupled;
* `flat` (:mod:`simulator.bind.flat`) -- FLAT's fused, row-granular dataflow for cascades
  that normalise whole fibres (3-pass softmax): the contractions on the 2D array, the
  fibre-wide Einsums on the 1D array, fibres kept on chip while they fit;
* `unfused` (:mod:`simulator.bind.unfused`) -- every GEMM its own phase through the GEMM
  mapper, the Einsums between them a phase walking one fibre at a time, all through DRAM;
* `fused` (:mod:`simulator.bind.fused`) -- any cascade in as few phases as its passes
  allow: a one-pass recurrence as FuseMax binds it, FLAT's shape as FLAT binds it, anything
  else over blocks of rows with its fibres on chip while they fit.

The result is the data of a mapping file (the shapes the workload sizes come from the
binder's facts, `mappings/auto/binder.yaml`); :func:`mapping_yaml` writes it, and the
tools load it like a hand-written one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from simulator.bind.facts import BinderFacts, load_facts
from simulator.bind.flat import flat_mapping
from simulator.bind.fused import fused_mapping
from simulator.bind.fusemax import fusemax_mapping
from simulator.bind.roles import cascade_roles
from simulator.bind.unfused import unfused_mapping
from simulator.cascade.ir import Cascade, rank_of
from simulator.errors import SpecError
from simulator.spec.arch import Architecture
from simulator.spec.workload import Workload

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
    facts name, then the cascade's example shape (for a chunk a mapping factor replaces)."""
    ranks = {r for t in cascade.tensors for r in t.ranks} | set(cascade.params)
    ranks |= {c for _r, comps in cascade.partitions for c in comps}
    fields = workload.fields()
    given = dict(workload.rank_overrides)
    shapes = {r: q for r, q in facts.shapes if r in ranks and r not in given}
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
    """Every rank an Einsum iterates has an extent from the workload: `--shape`, or the
    workload quantity the binder's facts name; a chunk (the inner component of a
    partitioned rank) is the mapping's to choose. A rank sized by nothing else would run at
    the cascade's example shape whatever the workload says: one line naming it instead."""
    given = set(dict(workload.rank_overrides)) if workload is not None else set()
    sized = {r for r, _q in facts.shapes} | given
    parts = dict(cascade.partitions)
    for rank, comps in parts.items():
        if rank in sized:
            sized |= set(comps)
    for e in cascade.einsums:
        for var in e.iteration:
            rank = rank_of(var)
            if rank in sized:
                continue
            if rank not in extents:
                known = ", ".join(f"{r} ({q})" for r, q in facts.shapes)
                raise SpecError(
                    f"cannot bind Einsum '{e.name}': no workload sizes its rank '{rank}' "
                    f"(the binder sizes {known}; {facts.path}): give --shape {rank}=N",
                    e.loc,
                )
            raise SpecError(
                f"cannot bind '{cascade.name}': no workload field sizes its rank {rank} "
                f"(Einsum {e.name}): give its extent, --shape {rank}=N",
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
    """The mapping data `strategy` generates (see module docstring); `cascade_ref` and
    `arch_ref` are how the mapping names its cascade and architecture."""
    if strategy not in STRATEGIES:
        raise SpecError(f"unknown strategy '{strategy}' (choose from {', '.join(STRATEGIES)})")
    facts = facts or load_facts()
    roles = cascade_roles(cascade)
    shapes, extents = workload_extents(cascade, workload, facts)
    check_sized(cascade, extents, facts, workload)
    instances = instances_of(shapes, facts)
    if strategy == "fusemax":
        return fusemax_mapping(
            cascade,
            arch,
            roles,
            extents,
            shapes,
            instances,
            cascade_ref,
            arch_ref,
            pipelined=pipelined,
            reuse=reuse,
        )
    if strategy == "fused":
        return fused_mapping(
            cascade,
            arch,
            roles,
            extents,
            shapes,
            instances,
            cascade_ref,
            arch_ref,
            pipelined=pipelined,
            reuse=reuse,
        )
    if strategy == "flat":
        return flat_mapping(
            cascade, arch, roles, extents, shapes, instances, cascade_ref, arch_ref, reuse=reuse
        )
    # The unfused strategy's library calls get operands sliced to what is attended.
    fields = workload.fields()
    for role, quantity in facts.unfused_sizes:
        for rank in [r for r, q in shapes.items() if q == role]:
            shapes[rank] = quantity
            extents[rank] = int(fields[quantity])  # type: ignore[call-overload]
    return unfused_mapping(
        cascade, arch, roles, extents, shapes, instances, cascade_ref, arch_ref, facts, reuse
    )


def bind_candidates(
    cascade: Cascade,
    arch: Architecture,
    workload: Workload,
    strategy: str,
    cascade_ref: str,
    arch_ref: str,
    *,
    pipelined: bool = True,
    reuse: bool = True,
) -> list[dict[str, Any]]:
    """The mappings a strategy offers for a point, best first by its rule. The fused
    strategy offers its rule's fusion and, beside it, the cascade kernel by kernel on the
    same chip (the unfused strategy's phases): fusing that must re-read a large operand per
    block of rows (a weight matrix) can move more data than handing one intermediate over
    through DRAM, and the caller keeps the faster. Other strategies offer one."""
    first = bind(
        cascade, arch, workload, strategy, cascade_ref, arch_ref, pipelined=pipelined, reuse=reuse
    )
    if strategy != "fused":
        return [first]
    try:
        kernels = bind(cascade, arch, workload, "unfused", cascade_ref, arch_ref)
    except SpecError:
        return [first]
    body = kernels["mapping"]
    body["label"] = first["mapping"]["label"]
    body["description"] = (
        f"{cascade.name} bound by the fused strategy: kernel by kernel (fusing it would move "
        "more data than handing the intermediates over)"
    )
    return [first, kernels]


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


class _Dumper(yaml.SafeDumper):
    pass


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
