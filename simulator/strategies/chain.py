"""The chain template: a cascade that makes one pass over a rank, fused over its chunks.

For a cascade without a recurrence in which contractions hand each other a rank (`X`:
`QK[m, p] = Q K` then `AV[f, p] = QK[m, p] V`; sigmoid attention's `S = sigmoid(QK ...)`
between them) and the passes analysis finds one pass over it, every Einsum can walk `X`
chunk by chunk: reductions over it accumulate across the chunks, nothing waits for a whole
fibre. As FuseMax's Mapping 1 without the running corrections:

* **spatial** -- a chunk of `X` down the 2D array's rows (`X -> X1 x X0`, X0 = meshY), the
  widest row rank across its columns (`R -> R2 x R1 x R0`, R0 = meshX, R1 searched); a
  contraction without the row rank takes across the columns another of its ranks that fits
  them, else part of one wider (the rest walked); an Einsum on the 1D array spreads the
  components that fill its PEs;
* **binding** -- contractions on the 2D array; any other Einsum on the array where the
  block finishes soonest given those placed (`arrays: soonest`, the arrays side by side),
  or on the array that runs it fastest (`arrays: fastest`: where the arrays take turns --
  they hand each other nothing through the buffer -- the block takes the sum of both
  arrays' work, and a reduction the 2D array does in 16 cycles is no work to hand to the
  1D array's 256 PEs);
* **loops** -- `R2, X1, [other rows], R1`: a chunk of `X` is fetched once per block of rows
  and serves all of them; an output reduced over `X` accumulates in the buffer over the
  chunks and is written once per block;
* **tensors** -- inputs kept where they are reused, an accumulating output for its block; a
  whole tile handed between the arrays through the buffer, double-buffered (the arrays then
  overlap whole); a reduction over `X` read by an Einsum that walks no chunk (a
  normaliser), and what an Einsum walking no chunk makes for one that does (a norm's rows
  for an FFN's hidden chunks), in the buffer for the block; everything else moves between
  PEs.

The template applies where those conditions hold; otherwise it says which one fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulator.cascade.ir import Cascade
from simulator.cascade.passes import analyze_passes
from simulator.strategies.context import BindContext, mapping_head
from simulator.strategies.flat import fastest_arrays, soonest_arrays
from simulator.strategies.fusemax import arrays_of, keep_point, supports
from simulator.strategies.roles import (
    Roles,
    apart_from,
    einsum_ranks,
    own_chunk,
    reduced_ranks,
    tile,
)
from simulator.strategies.schedule_tree import decoupled_schedule
from simulator.strategies.spatial import filling
from simulator.strategies.unfused import chained, gemm_dims
from simulator.support.errors import SpecError

LABEL = "auto: chain"
ARRAYS = ("soonest", "fastest")  # how the Einsums other than the contractions are bound
KEYS = ("blocks", "split")  # where the Einsums that walk no row run


def streamed_rank(cascade: Cascade, roles: Roles, extents: dict[str, int]) -> str | None:
    """The rank the chain walks in chunks: reduced by a contraction, made by an earlier
    Einsum, one pass over it (every fibre of it); the widest such. None: no such rank."""
    if roles.iterative is not None:
        return None
    report = analyze_passes(cascade)
    multi = {f.rank for f in report.fibers if f.passes > 1}
    made = set()
    found: list[str] = []
    for name in roles.compute:
        e = cascade.einsum(name)
        if gemm_dims(cascade, name) is not None:
            for r in reduced_ranks(e):
                group = cascade.rank_group(r)
                if r in made and group not in multi and r in extents:
                    found.append(r)
        made |= set(einsum_ranks(e)) - set(reduced_ranks(e))
    return max(found, key=lambda r: extents[r], default=None)


def chain_mapping(
    ctx: BindContext,
    *,
    reuse: bool = True,
    scale: int = 1,
    spill: bool = True,
    arrays: str = "soonest",
    keys: str = "blocks",
) -> dict[str, Any]:
    """The mapping data (module docstring); `spill`: the inputs held for a block (the
    rows a residual reads again at its end) may spill what the buffer cannot hold, fetched
    again where read -- larger blocks of rows, fewer passes over the weights; `arrays`: how
    the Einsums other than the contractions are bound (:data:`ARRAYS`); `keys`: the
    Einsums that walk no row (linear attention's key-value summary) done in every block
    (`blocks`), or once in a phase of their own before the blocks, the streamed rank split
    over a chip's cores (`split`: :data:`KEYS`)."""
    cascade, arch, roles, extents = ctx.cascade, ctx.arch, ctx.roles, ctx.extents
    if arrays not in ARRAYS:
        raise SpecError(f"chain template: arrays '{arrays}' (choose from {', '.join(ARRAYS)})")
    if keys not in KEYS:
        raise SpecError(f"chain template: keys '{keys}' (choose from {', '.join(KEYS)})")
    x = streamed_rank(cascade, roles, extents)
    if x is None:
        raise SpecError(
            f"cannot bind '{cascade.name}' with the chain template: it needs a rank that a "
            "contraction reduces after an earlier Einsum made it, walked in one pass"
        )
    two, one = arrays_of(arch)
    reduced_anywhere = {r for n in roles.compute for r in reduced_ranks(cascade.einsum(n))}
    last = cascade.einsum(roles.compute[-1])
    rows = [r for r in einsum_ranks(last) if r not in reduced_anywhere and r != x]
    rows = [r for r in rows if r in extents]
    if not rows:
        raise SpecError(
            f"cannot bind '{cascade.name}' with the chain template: its last Einsum has no "
            "row rank (one no Einsum reduces)"
        )
    row = max(rows, key=lambda r: (extents[r], -rows.index(r)))
    # the other rows every Einsum walking `row` walks too (a group's query heads), outer
    # loops; a rank only the last contraction has (its output columns) stays inside it
    walking = [set(einsum_ranks(cascade.einsum(n))) for n in roles.compute]
    walking = [s for s in walking if row in s]
    others = [r for r in rows if r != row and all(r in s for s in walking)]
    r2, r1, r0 = f"{row}2", f"{row}1", f"{row}0"
    x1, x0 = f"{x}1", f"{x}0"
    partitions: dict[str, list[str]] = {rank: list(c) for rank, c in cascade.partitions}
    partitions[row] = [r2, r1, r0]
    partitions[x] = [x1, x0]
    factors: dict[str, Any] = {
        r0: tile(two.name, "meshX", two.mesh_x, row, extents, scale),
        x0: tile(two.name, "meshY", two.mesh_y, x, extents, scale),
        r1: "search",
    }
    for rank, comps in cascade.partitions:
        if len(comps) == 2 and rank not in (row, x):
            factors[comps[1]] = own_chunk(two, rank, comps[1], extents, scale)
    leaves = {row: [r2, r1, r0], x: [x1, x0]}
    for rank, comps in cascade.partitions:
        leaves.setdefault(rank, list(comps))

    def comps(rank: str) -> list[str]:
        return leaves.get(rank, [rank])

    def tensor_leaves(t: str) -> set[str]:
        return {c for r in cascade.tensor(t).ranks for c in comps(r)}

    contractions = [
        n
        for n in roles.compute
        if gemm_dims(cascade, n) is not None and not supports(two, cascade, n)
    ]
    binding = {n: two.name for n in contractions}
    rest = [n for n in roles.compute if n not in binding]
    if arrays == "fastest":
        binding.update(fastest_arrays(cascade, rest, two, one, extents))
    else:
        binding.update(soonest_arrays(cascade, rest, contractions, two, one, extents))
    loops = [r2, x1, *others, r1] if reuse else [*others, r2, x1, r1]
    sizes = {
        r0: min(two.mesh_x // scale, extents[row]),
        x0: min(two.mesh_y // scale, extents[x]),
        **{c: int(v) for c, v in factors.items() if isinstance(v, int)},
        **extents,
    }
    einsums: dict[str, Any] = {}
    splits: dict[tuple[str, str, str], int] = {}  # (rank, outer, part) -> the part's width
    widened: dict[str, str] = {}  # Einsum -> the part it spreads
    for n in roles.compute:
        mine = [c for r in einsum_ranks(cascade.einsum(n)) for c in comps(r)]
        if binding[n] == two.name:
            spatial = [c for c in (r0, x0) if c in mine]
            if len(spatial) < 2:  # the other side: the widest component that fits it
                side = (two.mesh_y if r0 in spatial else two.mesh_x) // scale
                spare = [
                    c
                    for c in mine
                    if c not in spatial and c not in loops and 1 < sizes.get(c, 1) <= side
                ]
                spatial = _beside(spatial, sorted(spare, key=lambda c: -sizes[c])[:1], r0)
            if len(spatial) < 2:  # else part of a rank wider than the side (a cumulative
                # sum's tokens, Mamba-2's `CP[p] = AT[t : t <= p]`), the rest walked
                wide = _split_wide(cascade, n, mine, spatial, loops, sizes, side, leaves)
                if wide is not None:
                    splits.setdefault(wide, side)
                    widened[n] = wide[2]
        else:
            spatial = filling(mine, sizes, one.pes, exclude={*loops, x1})
        einsums[n] = {"spatial": spatial}
    # (split after every Einsum is placed, so that none sees another's split: the order
    # the cascade lists them in plays no part)
    for (rank, outer_, part), side in splits.items():
        leaves[rank] = partitions[rank] = [outer_, part]
        factors[part] = side
    split = {rank: [outer_, part] for (rank, outer_, part) in splits}
    for n in roles.compute:  # another Einsum spreading a split rank spreads both its parts
        einsums[n]["spatial"] = [c for r in einsums[n]["spatial"] for c in split.get(r, [r])]
    for n, part in widened.items():
        einsums[n]["spatial"] = _beside(einsums[n]["spatial"], [part], r0)
    tensors: dict[str, dict[str, Any]] = {}
    aliases = {
        e.output.tensor: e.reads()[0].tensor
        for e in cascade.einsums
        if e.kind == "copy" and e.reads()
    }
    producer = {cascade.einsum(n).output.tensor: n for n in roles.compute}
    for t in cascade.inputs:
        tensors[t] = {"home": "DRAM", "keep": keep_point(loops, tensor_leaves(t))}
        if spill:  # what the buffer cannot hold is fetched again where read
            tensors[t]["spill"] = "auto"
    for t in cascade.outputs:
        n = producer.get(t)
        accumulates = n is not None and x in reduced_ranks(cascade.einsum(n))
        keep = keep_point(loops, tensor_leaves(t)) if accumulates else "stream"
        tensors[t] = {"home": "DRAM", "keep": keep}
    whole_tile = {r0, x0}
    for n in roles.compute:
        for acc in cascade.einsum(n).reads():
            t = aliases.get(acc.tensor, acc.tensor)
            made = producer.get(t)
            if made is None or t in tensors:
                continue
            over_x = x in reduced_ranks(cascade.einsum(made))
            walks_x = x in einsum_ranks(cascade.einsum(n))
            if over_x and not walks_x:
                # a reduction over the chunks read once they are done: held for the block
                tensors[t] = {"home": "buffer", "keep": keep_point(loops, tensor_leaves(t))}
            elif walks_x and x not in einsum_ranks(cascade.einsum(made)):
                # made once for the block and read with every chunk (a norm's rows, read by
                # each chunk of an FFN's hidden units): held for the block, not in registers
                tensors[t] = {"home": "buffer", "keep": keep_point(loops, tensor_leaves(t))}
            elif binding[made] != binding[n] and whole_tile <= tensor_leaves(t):
                tensors[t] = {"home": "buffer", "keep": x1, "copies": 2}
    on = {a: [n for n in roles.compute if binding[n] == a] for a in (two.name, one.name)}
    if on[one.name] and any(v.get("copies") == 2 for v in tensors.values()):
        schedule = decoupled_schedule(list(roles.compute), binding, two.name)
    else:
        schedule = list(roles.compute)
    body = mapping_head(
        ctx,
        LABEL,
        f"{cascade.name} bound by the chain template (one pass over {x})",
        factors,
        partitions,
        {two.name: [r0, x0], one.name: filling([r0, x0], sizes, one.pes) or [r0]},
        {a: ns for a, ns in on.items() if ns},
    )
    if chained(one):
        body["chaining"] = {one.name: "pipelined"}
    body["tensors"] = tensors
    body["phases"] = [{"name": "chain", "loops": loops, "einsums": einsums, "schedule": schedule}]
    if keys == "split":
        _split_keys(ctx, body, row, x, others, r2, r1, tensor_leaves)
    return {"mapping": body}


def _split_keys(
    ctx: BindContext,
    body: dict[str, Any],
    row: str,
    x: str,
    others: list[str],
    r2: str,
    r1: str,
    tensor_leaves: Callable[[str], set[str]],
) -> None:
    """`keys: split`: the Einsums that walk no row and read nothing that does (linear
    attention's phi(K), its key sum and its key-value summary) in a phase of their own
    before the blocks of rows, walking the streamed rank's chunks, the chunks dealt to the
    cores in parts (`X -> X2 x X1 x X0`, X2 searched; the phase's `split:`): each core
    reduces its part and the parts accumulate in the shared cache (a GPU's atomics into
    L2). Done in every block, that work holds each block's core the whole rank long (one
    instance's keys on one SM, the other SMs idle when the instances are few)."""
    cascade, arch, roles = ctx.cascade, ctx.arch, ctx.roles
    if arch.cores <= 1 or not arch.buffer.cache:
        raise SpecError(
            "chain template, keys split: the architecture has no cores sharing a cache to "
            "split over"
        )

    def ranks(n: str) -> tuple[str, ...]:
        return einsum_ranks(cascade.einsum(n))

    side = apart_from(cascade, roles, row)
    if not side or any(x not in ranks(n) for n in side):
        raise SpecError(
            f"chain template, keys split: no Einsum of '{cascade.name}' walks {x} without "
            f"walking {row}"
        )
    rest = [n for n in roles.compute if n not in side]
    if any(x in ranks(n) for n in rest):
        raise SpecError(
            f"chain template, keys split: Einsums of '{cascade.name}' walk {x} and {row} both "
            "(the blocks of rows walk the chunks themselves)"
        )
    x2, x1, x0 = f"{x}2", f"{x}1", f"{x}0"
    body["partitions"][x] = [x2, x1, x0]
    body["factors"][x2] = "search"
    einsums = body["phases"][0]["einsums"]
    reads = {n: {a.tensor for a in cascade.einsum(n).reads()} for n in roles.compute}
    handed = {cascade.einsum(n).output.tensor for n in side} & {t for n in rest for t in reads[n]}
    tensors = body["tensors"]
    for t in handed:  # to the blocks through DRAM, written once
        tensors[t] = {"home": "DRAM", "keep": "top"}
    keys_loops = [x2, x1]
    rows_loops = [r2, *others, r1]
    for t, place in tensors.items():  # keep points in the loops of the phase reading it
        if place["keep"] in ("top", "stream") or t in handed:
            continue
        users = [n for n in roles.compute if t in reads[n]]
        if not users:  # an output: the phase that makes it
            users = [n for n in roles.compute if cascade.einsum(n).output.tensor == t]
        loops = keys_loops if users and all(n in side for n in users) else rows_loops
        place["keep"] = keep_point(loops, tensor_leaves(t))
    body["phases"] = [
        {
            "name": "keys",
            "loops": keys_loops,
            "split": [x2],
            "einsums": {n: einsums[n] for n in side},
            "schedule": side,
        },
        {
            "name": "chain",
            "loops": rows_loops,
            "einsums": {n: einsums[n] for n in rest},
            "schedule": rest,
        },
    ]


def _beside(spatial: list[str], more: list[str], r0: str) -> list[str]:
    """An Einsum's spatial components with `more` on the side its own leave free: the
    array's columns (meshX, first) where the rows' component is not among them -- a chunk
    of the streamed rank alone down the rows (meshY) -- else after them."""
    if spatial and r0 not in spatial:
        return [*more, *spatial]
    return [*spatial, *more]


def _split_wide(
    cascade: Cascade,
    name: str,
    mine: list[str],
    spatial: list[str],
    loops: list[str],
    sizes: dict[str, int],
    side: int,
    leaves: dict[str, list[str]],
) -> tuple[str, str, str] | None:
    """(rank, its outer part, its part of the side's width) for the widest whole rank of an
    Einsum -- one the mapping does not split yet, wider than the side and a multiple of it
    -- that the Einsum reduces (a cumulative sum's tokens), else the widest it does not (a
    contraction's small output over a long reduction: linear attention's KV, 64 x 64
    outputs, across 16 columns); None if it has none."""
    reduced = set(reduced_ranks(cascade.einsum(name)))
    taken = set(sizes) | {c for comps in leaves.values() for c in comps}
    whole = [
        c
        for c in mine
        if c not in leaves
        and c not in spatial
        and c not in loops
        and sizes.get(c, 1) > side
        and sizes[c] % side == 0
        and not {f"{c}1", f"{c}0"} & taken
    ]
    if not whole:
        return None
    rank = max(whole, key=lambda c: (c in reduced, sizes[c]))
    return rank, f"{rank}1", f"{rank}0"
