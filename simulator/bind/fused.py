"""The fused strategy: any cascade in as few phases as its passes allow, on both arrays.

Rules read from the cascade's graph, in order:

* **a one-pass recurrence over the chunks of a partitioned rank** (`RM[m1+1, p] = ...` over
  `K[e, m1*M0 + m0]`) is interleaved over the two arrays as FuseMax binds 1-pass attention
  (:mod:`simulator.bind.fusemax`: the waterfall of epochs, generalised to any such
  cascade);
* **two contractions with the Einsums between them normalising whole fibres** (the 3-pass
  softmax) run as FLAT runs them (:mod:`simulator.bind.flat`: the fibres of a block of rows
  kept on chip while they fit);
* **anything else** -- one phase over blocks of rows (FLAT's rule, generalised): the rows
  (the ranks every Einsum iterates and none reduces; the widest across the 2D array's
  columns, `R -> R2 x R1 x R0`) are walked block by block, every Einsum of a block runs
  before the next block starts (passes over a fibre repeat within the block, never across
  the whole input), contractions on the 2D array output-stationary (rows x their widest
  other output rank across the array, the reduction streaming through the PEs), every
  other Einsum on the array where its work finishes soonest given those already placed,
  a fibre (the rank they reduce) across that array's PEs. Tensors the block hands from one
  Einsum to another stay in the buffer while they fit and spill to DRAM what does not;
  inputs and outputs with rows stay on chip for their block; the rest stream.

A cascade no rule can bind is one line naming the rule it breaks.
"""

from __future__ import annotations

from typing import Any

from simulator.bind.flat import flat_mapping, soonest_arrays
from simulator.bind.fusemax import applies as fusemax_applies
from simulator.bind.fusemax import arrays_of, fusemax_mapping, supports
from simulator.bind.roles import Roles, einsum_ranks, reduced_ranks, tile
from simulator.bind.unfused import chained, gemm_dims
from simulator.cascade.ir import Cascade, rank_of
from simulator.errors import SpecError
from simulator.spec.arch import Architecture

LABEL = "auto: fused"


def fused_mapping(
    cascade: Cascade,
    arch: Architecture,
    roles: Roles,
    extents: dict[str, int],
    shapes: dict[str, str],
    instances: dict[str, str],
    cascade_ref: str,
    arch_ref: str,
    *,
    pipelined: bool = True,
    reuse: bool = True,
) -> dict[str, Any]:
    if fusemax_applies(roles) is None:
        data = fusemax_mapping(
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
        return _relabel(data, cascade, "a one-pass recurrence interleaved over both arrays")
    if roles.iterative is None:
        try:
            data = flat_mapping(
                cascade,
                arch,
                roles,
                extents,
                shapes,
                instances,
                cascade_ref,
                arch_ref,
                reuse=reuse,
                soonest=True,
            )
            return _relabel(data, cascade, "fibres of a block of rows kept on chip (FLAT)")
        except SpecError:
            pass  # not FLAT's shape: the general rule
    return _blocks_of_rows(cascade, arch, roles, extents, shapes, instances, cascade_ref, arch_ref)


def _relabel(data: dict[str, Any], cascade: Cascade, how: str) -> dict[str, Any]:
    body = data["mapping"]
    body["label"] = LABEL
    body["description"] = f"{cascade.name} bound by the fused strategy: {how}"
    return data


def _iterated_ranks(cascade: Cascade) -> set[str]:
    return {rank_of(v) for v in cascade.iterative_map}


def row_ranks(cascade: Cascade, roles: Roles, extents: dict[str, int]) -> list[str]:
    """Ranks every compute Einsum iterates and none reduces nor steps through: independent
    rows, widest first."""
    common: list[str] | None = None
    reduced: set[str] = set()
    for name in roles.compute:
        e = cascade.einsum(name)
        ranks = einsum_ranks(e)
        common = list(ranks) if common is None else [r for r in common if r in ranks]
        reduced |= set(reduced_ranks(e))
    steps = _iterated_ranks(cascade)
    rows = [r for r in common or [] if r not in reduced and r not in steps and r in extents]
    return sorted(rows, key=lambda r: -extents[r])


def _blocks_of_rows(
    cascade: Cascade,
    arch: Architecture,
    roles: Roles,
    extents: dict[str, int],
    shapes: dict[str, str],
    instances: dict[str, str],
    cascade_ref: str,
    arch_ref: str,
) -> dict[str, Any]:
    two, one = arrays_of(arch)
    rows = row_ranks(cascade, roles, extents)
    steps = _iterated_ranks(cascade)
    contractions = [
        n
        for n in roles.compute
        if gemm_dims(cascade, n) is not None and not supports(two, cascade, n)
    ]
    others = [n for n in roles.compute if n not in contractions]
    # the array each Einsum runs on: contractions on the 2D array; the others where their
    # work finishes soonest given what is already placed (the arrays run side by side)
    binding = {n: two.name for n in contractions}
    binding.update(soonest_arrays(cascade, others, contractions, two, one, extents))
    row = rows[0] if rows else None
    outer = rows[1:]
    # The fibre the other Einsums reduce; a reduction over a chunked rank (`E -> E1 x E0`)
    # walks its chunk (E0) across the PEs, the chunks (E1) in turn.
    outer_of = {comps[0]: comps[1] for _r, comps in cascade.partitions if len(comps) == 2}
    reduced = [
        outer_of.get(r, r)
        for n in others
        for r in reduced_ranks(cascade.einsum(n))
        if r not in steps and (r in extents or r in outer_of)
    ]
    inner_comps = set(outer_of.values())
    fibre = next((r for r in reduced if r in inner_comps), None) or next(iter(reduced), None)
    factors: dict[str, Any] = {}
    partitions: dict[str, list[str]] = {}
    # The cascade's own chunked ranks (`K[e, m1*M0 + m0]`): a chunk spans the 2D array's
    # rows, as FuseMax's.
    for rank, comps in cascade.partitions:
        partitions[rank] = list(comps)
        if len(comps) == 2:
            factors[comps[1]] = tile(two.name, "meshY", two.mesh_y, rank, extents)
    loops: list[str] = list(outer)
    r0 = r1 = r2 = None
    if row is not None:
        r2, r1, r0 = f"{row}2", f"{row}1", f"{row}0"
        partitions[row] = [r2, r1, r0]
        factors[r0] = tile(two.name, "meshX", two.mesh_x, row, extents)
        factors[r1] = "search"
        loops += [r2, r1]
    f1 = f0 = None
    chunk_of = {comps[1]: comps[0] for _r, comps in cascade.partitions if len(comps) == 2}
    if fibre is not None and fibre in chunk_of:  # already the cascade's chunk: walk it so
        f1, f0 = chunk_of[fibre], fibre
    elif fibre is not None:
        f1, f0 = f"{fibre}1", f"{fibre}0"
        partitions[fibre] = [f1, f0]
        factors[f0] = tile(one.name, "meshX", one.mesh_x, fibre, extents)
    einsums: dict[str, Any] = {}
    spatial_2d: list[str] = [r0] if r0 else []
    for name in contractions:
        e = cascade.einsum(name)
        out = [rank_of(p.expr.name) for p in e.output.indices]  # type: ignore[union-attr]
        cols = [r for r in out if r not in rows and r not in steps]
        col = max(cols, key=lambda r: extents.get(r, 1), default=None)
        mine: dict[str, Any] = {"inner": list(reduced_ranks(e))}
        other_loops = [r for r in out if r not in rows and r != col]
        if col is not None and col != fibre:
            c1, c0 = f"{col}1", f"{col}0"
            partitions[col] = [c1, c0]
            factors[c0] = tile(two.name, "meshY", two.mesh_y, col, extents)
            mine["loops"] = [*loops, *other_loops, c1]
            mine["spatial"] = [c for c in (r0, c0) if c]
        elif col is not None:
            mine["loops"] = [*loops, *other_loops, f1]
            mine["spatial"] = [c for c in (r0, f0) if c]
        elif other_loops:
            mine["loops"] = [*loops, *other_loops]
        einsums[name] = mine
    for name in others:
        e = cascade.einsum(name)
        ranks = einsum_ranks(e)
        rest = [
            r
            for r in ranks
            if r not in rows and r != fibre and r not in reduced_ranks(e) or r in steps
        ]
        rest = [r for r in dict.fromkeys(rest) if r in extents or r in steps]
        mine = {"loops": [*loops, *([r0] if r0 else []), *rest]}
        if fibre is not None and fibre in ranks:
            mine["loops"].append(f1)
            mine["spatial"] = [f0]
        else:
            mine["spatial"] = []
        einsums[name] = mine
    tensors: dict[str, dict[str, Any]] = {}
    made = {cascade.einsum(n).output.tensor for n in roles.compute}
    # (an output that is a view of a recurrence's state -- `Y = RY[K]` -- leaves the chip
    # from the state's last step: the planner writes it)
    for t in (*cascade.inputs, *(o for o in cascade.outputs if o in made)):
        if row is not None and row in cascade.tensor(t).ranks:
            tensors[t] = {"home": "DRAM", "keep": r2, "spill": "auto"}
        else:
            tensors[t] = {"home": "DRAM", "keep": "stream"}
    state = set(cascade.iterative_tensors())  # a recurrence's state stays in the PEs
    for t in made - set(cascade.outputs) - state:
        keep = r2 if row is not None and row in cascade.tensor(t).ranks else "top"
        tensors[t] = {"home": "buffer", "keep": keep, "spill": "auto"}
    by_array: dict[str, list[str]] = {two.name: [], one.name: []}
    for n in roles.compute:
        by_array[binding[n]].append(n)
    spatial: dict[str, list[str]] = {}
    if spatial_2d:
        spatial[two.name] = spatial_2d
    if f0:
        spatial[one.name] = [f0]
    body: dict[str, Any] = {
        "label": LABEL,
        "description": f"{cascade.name} bound by the fused strategy: blocks of rows, "
        "fibres on chip while they fit",
        "cascade": cascade_ref,
        "architecture": arch_ref,
        "shapes": shapes,
        "instances": instances,
        "factors": factors,
        "partitions": partitions,
        "spatial": spatial,
        "binding": {a: ns for a, ns in by_array.items() if ns},
    }
    if chained(one):
        body["chaining"] = {one.name: "pipelined"}
    body["tensors"] = tensors
    body["phases"] = [
        {
            "name": "fused",
            "loops": loops,
            "einsums": einsums,
            "schedule": [{"par": [by_array[two.name], by_array[one.name]]}]
            if by_array[two.name] and by_array[one.name]
            else list(roles.compute),
        }
    ]
    return {"mapping": body}
