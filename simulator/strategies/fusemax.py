"""The FuseMax strategy: a one-pass cascade fused into one phase on a 2D and a 1D array.

For a cascade with a recurrence over a chunked rank (`M -> M1 x M0`, state `RM, RD, RNV`
over rows `P`), as FuseMax's Mapping 1 binds 1-pass attention:

* **spatial** -- the chunk goes down the 2D array's rows (M0 = meshY: a reduction over it is
  a reduction down the columns into the 1D array); the largest row rank goes across its
  columns, split `P -> P2 x P1 x P0` with P0 = meshX and P1 searched (tiles of rows kept on
  chip); the 1D array takes the same columns;
* **binding** -- an Einsum that walks the chunk (iterates M0) runs on the 2D array when its
  PEs support every operation it needs, otherwise on the 1D array; one the 1D array cannot
  run either is an error naming it;
* **loops** -- `P2, M1, [other row ranks], P1`: each chunk of keys is fetched once per block
  of P1 x P0 rows and reused by them (and by every query head of a group); with
  `reuse=False` the other row ranks run outermost instead (no reuse across them). P1
  divides P / P0 (no padded block): at power-of-two lengths the blocks are powers of two, so
  a group whose rows do not all fit (Llama-3-8B at 16K: 126 tiles of rows fit, a head has
  64, the group 256) re-reads K and V per head -- 1/0.75 of the traffic bound, which blocks
  of 22-31 tiles with a padded last one would reach. Not taken: those points are
  compute-bound by far (the DRAM time is under 5% of the latency) and a padded block's
  empty rows cost whole tiles of compute;
* **tensors** -- inputs in DRAM, kept where they are reused (Q for its row block, K and V for
  their chunk); outputs streamed; the recurrence's state in the buffer for the row block;
  a whole 2D tile handed between the arrays goes through the buffer, double-buffered; every
  other value moves between PEs (registers, the reduction and broadcast paths);
* **schedule** -- coupled arrays (a reduction into the 1D array and a broadcast back) run
  the pipelined waterfall (`pipeline: {}`, or one tile in flight with `pipelined=False`);
  arrays that only exchange tiles through the buffer overlap whole
  (:mod:`simulator.strategies.schedule_tree`).
"""

from __future__ import annotations

import math
from typing import Any

from simulator.cascade.ir import Cascade
from simulator.cascade.ops import ops_per_point
from simulator.spec.arch import Architecture, Array, missing_operations
from simulator.strategies.context import BindContext, mapping_head
from simulator.strategies.roles import Roles, einsum_ranks, reduced_ranks, tile
from simulator.strategies.schedule_tree import (
    decoupled_schedule,
    two_stage_schedule,
    waterfall_schedule,
)
from simulator.strategies.spatial import filling
from simulator.support.errors import Loc, SpecError


def applies(roles: Roles) -> str | None:
    """Why the strategy cannot bind the cascade (None: it can)."""
    if roles.iterative is None or roles.chunk is None:
        return (
            "the FuseMax strategy binds one-pass cascades: it needs a recurrence over the outer "
            "component of a partitioned rank (`RM[m1+1, p] = ...` with `K[e, m1*M0 + m0]`)"
        )
    if not roles.rows:
        return "the recurrence's state tensors share no rank besides the iterative one"
    return None


def arrays_of(arch: Architecture) -> tuple[Array, Array]:
    two = next((a for a in arch.arrays if a.mesh_y > 1), None)
    one = next((a for a in arch.arrays if a.mesh_y == 1), None)
    if two is None or one is None:
        raise SpecError(
            f"architecture '{arch.name}' needs a 2D and a 1D PE array for the FuseMax strategy",
            arch_loc(arch),
        )
    return two, one


def arch_loc(arch: Architecture) -> Loc:
    return Loc(arch.path or arch.name)


def supports(array: Array, cascade: Cascade, einsum: str) -> list[str]:
    """The operations of an Einsum its array's PEs lack."""
    needs = ops_per_point(cascade, cascade.einsum(einsum))
    return [k for k, n in needs.items() if n > 0 and array.op(k) is None]


def bind_arrays(
    cascade: Cascade, roles: Roles, two: Array, one: Array, wide: str
) -> dict[str, str]:
    """Einsum -> array. An Einsum walking the chunk across the wide row rank may run on the
    2D array when its PEs can: a contraction (multiply-accumulate) always does; any other
    only when the tiles it reads are already there (no tile leaves the array for it). The
    rest run on the 1D array when its PEs can; else the Einsum cannot be bound."""
    out: dict[str, str] = {}
    for name in roles.compute:
        e = cascade.einsum(name)
        ranks = einsum_ranks(e)
        if roles.chunk in ranks and wide in ranks and not supports(two, cascade, name):
            tiles_from = [
                p for p in roles.preds[name] if roles.chunk in einsum_ranks(cascade.einsum(p))
            ]
            contraction = ops_per_point(cascade, e).get("mac", 0) > 0
            if contraction or all(out[p] == two.name for p in tiles_from):
                out[name] = two.name
                continue
        lacking = supports(one, cascade, name)
        if lacking:
            also = supports(two, cascade, name)
            why = missing_operations(lacking, (two, one)) or (
                f"it needs {', '.join(lacking)}, which the PEs of array '{one.name}' lack"
                + (f" (and '{two.name}' lacks {', '.join(also)})" if also else "")
            )
            raise SpecError(f"cannot bind Einsum '{name}': {why}", e.loc)
        out[name] = one.name
    return out


def keep_point(loops: list[str], indexing: set[str]) -> str:
    """Where a tensor's tile stays in the buffer: the outermost loop indexing it that has a
    loop not indexing it below (the tile is reused across that loop); else its innermost
    indexing loop; `top` when no loop indexes it."""
    idx = [i for i, lp in enumerate(loops) if lp in indexing]
    if not idx:
        return "top"
    for i in idx:
        if any(lp not in indexing for lp in loops[i + 1 :]):
            return loops[i]
    return loops[idx[-1]]


def fusemax_mapping(
    ctx: BindContext,
    *,
    pipelined: bool = True,
    reuse: bool = True,
    lanes: str = "rows",
    scale: int = 1,
    handoff: str = "buffer",
) -> dict[str, Any]:
    """`lanes`: what the 1D array's PEs spread -- `rows` (the rows across the 2D array's
    columns, and a spare rank when they are fewer than the PEs), or `fill` (per Einsum, the
    components that fill the most PEs: a chunk's keys where the rows are few, as a GPU's
    lanes take a block's scores). `scale`: the tiles span 1/scale of each side of the 2D
    array (smaller tiles of rows fit where whole sides do not). `handoff`: a whole tile one
    array hands the other goes through the `buffer`, double-buffered (the arrays overlap
    whole), or stays in the PEs' `registers` (FlashAttention-3's two stages: the 1D work of
    a chunk beside the 2D Einsums that need none of it, then the rest; the 1D PEs' units
    overlapped within an Einsum)."""
    cascade, arch, roles, extents = ctx.cascade, ctx.arch, ctx.roles, ctx.extents
    why = applies(roles)
    if why:
        raise SpecError(f"cannot bind '{cascade.name}' with the FuseMax strategy: {why}")
    two, one = arrays_of(arch)
    assert roles.chunk is not None and roles.outer is not None
    # The widest row rank goes across the columns; the others are temporal loops.
    # Row ranks every Einsum walking the chunk walks (a group's query heads); a rank only
    # the state and its updates carry (the value embedding of a running sum) stays inside
    # the Einsums that have it, not an outer loop the chunk's Einsums would skip.
    walking = [
        set(einsum_ranks(cascade.einsum(n)))
        for n in roles.compute
        if roles.chunk in einsum_ranks(cascade.einsum(n))
    ]
    rows = [r for r in roles.rows if all(r in s for s in walking)] or list(roles.rows)
    wide = max(rows, key=lambda r: (extents.get(r, 1), rows.index(r)))
    others = [r for r in rows if r != wide]
    w2, w1, w0 = f"{wide}2", f"{wide}1", f"{wide}0"
    binding = bind_arrays(cascade, roles, two, one, wide)
    loops = [w2, roles.outer, *others, w1] if reuse else [*others, w2, roles.outer, w1]
    factors: dict[str, Any] = {
        w0: tile(two.name, "meshX", two.mesh_x, wide, extents, scale),
        roles.chunk: tile(two.name, "meshY", two.mesh_y, roles.chunked or "", extents, scale),
        w1: "search",
    }
    spatial = {two.name: [w0, roles.chunk], one.name: [w0]}
    comps_of = {wide: [w2, w1, w0]}
    partitions = {wide: [w2, w1, w0]}
    # Few rows (decode's single query) leave most 1D PEs idle: spread the 1D Einsums' widest
    # other rank (the value embedding of the running numerator) over them too.
    x0 = min(two.mesh_x // scale, extents.get(wide, two.mesh_x))
    if x0 < one.mesh_x:
        taken = {wide, *roles.rows, roles.outer, roles.chunk, roles.chunked}
        spare = [
            r
            for n in roles.compute
            if binding[n] == one.name
            for r in einsum_ranks(cascade.einsum(n))
            if r not in taken and extents.get(r, 1) > 1
        ]
        if spare:
            extra = max(dict.fromkeys(spare), key=lambda r: extents[r])
            room = one.mesh_x // x0
            if extents[extra] <= room:
                spatial[one.name].append(extra)
            else:
                inner = math.gcd(room, extents[extra])
                e1, e0 = f"{extra}1", f"{extra}0"
                partitions[extra] = [e1, e0]
                factors[e0] = inner
                comps_of[extra] = [e1, e0]
                spatial[one.name].append(e0)

    def leaves(rank: str) -> list[str]:
        if rank == roles.chunked:
            return [roles.outer, roles.chunk]  # type: ignore[list-item]
        return comps_of.get(rank, [rank])

    def tensor_leaves(t: str) -> set[str]:
        return {c for r in cascade.tensor(t).ranks for c in leaves(r)}

    tensors: dict[str, dict[str, Any]] = {}
    aliases = {
        e.output.tensor: e.reads()[0].tensor
        for e in cascade.einsums
        if e.kind == "copy" and e.reads()
    }
    # A prologue: Einsums before the recurrence that walk no chunk (`QS = Q / CAP`) run once
    # per row, in a phase of their own before the waterfall, their results read like inputs.
    chunk_ranks = {roles.outer, roles.chunk, roles.chunked}
    prologue = [
        n
        for n in roles.compute
        if not chunk_ranks & set(einsum_ranks(cascade.einsum(n)))
        and not roles.ancestors(n)
        and any(n in roles.ancestors(m) for m in roles.compute)
    ]
    for t in cascade.inputs:
        tensors[t] = {"home": "DRAM", "keep": keep_point(loops, tensor_leaves(t))}
    for n in prologue:
        t = cascade.einsum(n).output.tensor
        tensors[t] = {"home": "DRAM", "keep": keep_point(loops, tensor_leaves(t))}
    for t in cascade.outputs:
        tensors[t] = {"home": "DRAM", "keep": "stream"}
    for t in roles.state:
        indexing = tensor_leaves(t) - {roles.outer}
        tensors[t] = {"home": "buffer", "keep": keep_point(loops, indexing)}
    whole_tile = {w0, roles.chunk}
    handed: list[str] = []
    overlapped = False
    for name in roles.compute:
        e = cascade.einsum(name)
        for acc in e.reads():
            t = aliases.get(acc.tensor, acc.tensor)
            producer = next(
                (p for p in roles.compute if cascade.einsum(p).output.tensor == t), None
            )
            if producer is None or binding[producer] == binding[name] or t in tensors:
                continue
            if whole_tile <= tensor_leaves(t):  # a whole 2D tile: through the buffer
                handed.append(t)
                if handoff == "buffer":
                    tensors[t] = {"home": "buffer", "keep": roles.outer, "copies": 2}
    einsums = [n for n in roles.compute if n not in prologue]
    down = {
        n for n in einsums if binding[n] == two.name and roles.chunk in reduced_ranks_of(cascade, n)
    }
    coupled = any(binding[n] != two.name for n in einsums) and not handed
    phase: dict[str, Any] = {"name": "fused", "loops": loops}
    if lanes == "fill":
        y0 = min(two.mesh_y // scale, extents.get(roles.chunked or "", two.mesh_y))
        sizes = {w0: x0, roles.chunk: y0}
        sizes.update({c: int(v) for c, v in factors.items() if isinstance(v, int)})
        spread = {
            n: filling(
                [c for r in einsum_ranks(cascade.einsum(n)) for c in leaves(r)],
                {**extents, **sizes},
                one.pes,
                exclude={*loops, roles.outer},
            )
            for n in roles.compute
            if binding[n] == one.name and n not in prologue
        }
        phase["einsums"] = {n: {"spatial": s} for n, s in spread.items()}
    if coupled:
        schedule = waterfall_schedule(roles, einsums, binding, two.name, pipelined, down)
        if schedule is None:
            schedule = list(einsums)
        phase["pipeline"] = {} if pipelined else {"tiles_in_flight": 1}
    elif handoff == "registers" and handed:
        schedule = two_stage_schedule(roles, einsums, binding, two.name)
        # and the 1D PEs' units work side by side within an Einsum (a GPU lane's FMA pipe
        # beside its special-function unit)
        overlapped = len({op.unit for op in one.operations}) > 1
    else:
        schedule = decoupled_schedule(einsums, binding, two.name)
    phase["schedule"] = schedule
    phases = [phase]
    if prologue:
        first = {
            "name": "prologue",
            "loops": [w2, *others, w1],
            "einsums": {n: {"loops": [w2, *others, w1]} for n in prologue},
            "schedule": list(prologue),
        }
        phases = [first, phase]
    by_array: dict[str, list[str]] = {two.name: [], one.name: []}
    for n in roles.compute:
        by_array[binding[n]].append(n)
    head = mapping_head(
        ctx,
        "auto: FuseMax" + ("" if pipelined else " (tiles in sequence)"),
        f"{cascade.name} bound by the FuseMax strategy "
        f"({'pipelined waterfall' if coupled and pipelined else 'one phase'})",
        factors,
        partitions,
        spatial,
        {a: ns for a, ns in by_array.items() if ns},
    )
    return {
        "mapping": {
            **head,
            **({"chaining": {one.name: "pipelined"}} if overlapped else {}),
            "tensors": tensors,
            "phases": phases,
        }
    }


def reduced_ranks_of(cascade: Cascade, einsum: str) -> tuple[str, ...]:
    return reduced_ranks(cascade.einsum(einsum))
