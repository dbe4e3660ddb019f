"""The fused strategy: any cascade in as few phases as its passes allow, on both arrays.

Rules read from the cascade's graph, in order:

* **a one-pass recurrence over the chunks of a partitioned rank** (`RM[m1+1, p] = ...` over
  `K[e, m1*M0 + m0]`) is interleaved over the two arrays as FuseMax binds 1-pass attention
  (:mod:`simulator.strategies.fusemax`: the waterfall of epochs, generalised to any such
  cascade);
* **two contractions with the Einsums between them normalising whole fibres** (the 3-pass
  softmax) run as FLAT runs them (:mod:`simulator.strategies.flat`: the fibres of a block of rows
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

import math
from typing import Any

from simulator.cascade.ir import Cascade, rank_of
from simulator.spec.arch import Architecture, Array
from simulator.strategies.context import BindContext, mapping_head
from simulator.strategies.flat import flat_mapping, soonest_arrays
from simulator.strategies.fusemax import applies as fusemax_applies
from simulator.strategies.fusemax import arrays_of, fusemax_mapping, supports
from simulator.strategies.roles import (
    Roles,
    apart_from,
    einsum_ranks,
    own_chunk,
    reduced_ranks,
    tile,
)
from simulator.strategies.unfused import chained, gemm_dims
from simulator.support.errors import SpecError

LABEL = "auto: fused"


def fused_mapping(
    ctx: BindContext,
    *,
    pipelined: bool = True,
    reuse: bool = True,
    rule: str = "first",
    reduction: str = "chunks",
    scale: int = 1,
    chunk_scale: int = 1,
) -> dict[str, Any]:
    """`rule`: `first` -- the first rule that applies (module docstring) -- or `blocks`
    (blocks of rows whatever the cascade); `reduction`, `scale`, `chunk_scale`: see
    :func:`_blocks_of_rows`."""
    cascade, roles = ctx.cascade, ctx.roles
    if rule == "blocks":
        return _blocks_of_rows(ctx, reduction, scale, chunk_scale)
    if fusemax_applies(roles) is None:
        data = fusemax_mapping(ctx, pipelined=pipelined, reuse=reuse)
        return _relabel(data, cascade, "a one-pass recurrence interleaved over both arrays")
    if roles.iterative is None:
        try:
            data = flat_mapping(ctx, reuse=reuse, soonest=True)
            return _relabel(data, cascade, "fibres of a block of rows kept on chip (FLAT)")
        except SpecError:
            pass  # not FLAT's shape: the general rule
    return _blocks_of_rows(ctx, reduction, 1)


def _relabel(data: dict[str, Any], cascade: Cascade, how: str) -> dict[str, Any]:
    body = data["mapping"]
    body["label"] = LABEL
    body["description"] = f"{cascade.name} bound by the fused strategy: {how}"
    return data


def _iterated_ranks(cascade: Cascade) -> set[str]:
    return {rank_of(v) for v in cascade.iterative_map}


def _row_rank(
    cascade: Cascade, roles: Roles, extents: dict[str, int]
) -> tuple[str | None, list[str]]:
    """The rank walked block by block -- of the ranks no Einsum reduces nor steps through,
    the one most Einsums iterate (the rows: `P`), widest on a tie -- and the others every
    Einsum iterating it also iterates (`G` of grouped-query attention), walked outside it.
    A rank only the contractions and their epilogue iterate (a matmul's output columns `F`)
    is not a row: the statistics of a row do not walk it."""
    steps = _iterated_ranks(cascade)
    reduced = {r for n in roles.compute for r in reduced_ranks(cascade.einsum(n))}
    count: dict[str, int] = {}
    for n in roles.compute:
        for r in einsum_ranks(cascade.einsum(n)):
            if r not in reduced and r not in steps and r in extents:
                count[r] = count.get(r, 0) + 1
    if not count:
        return None, []
    row = max(count, key=lambda r: (count[r], extents[r]))
    with_row = [
        set(einsum_ranks(cascade.einsum(n)))
        for n in roles.compute
        if row in einsum_ranks(cascade.einsum(n))
    ]
    outer = [r for r in count if r != row and all(r in s for s in with_row)]
    return row, sorted(outer, key=lambda r: -extents[r])


def _common_prefix(lists: list[list[str]]) -> list[str]:
    out: list[str] = []
    for level in zip(*lists, strict=False):
        if any(c != level[0] for c in level):
            break
        out.append(level[0])
    return out


def _blocks_of_rows(
    ctx: BindContext,
    reduction: str = "chunks",
    scale: int = 1,
    chunk_scale: int = 1,
) -> dict[str, Any]:
    """`reduction`: a contraction's reduction streams through
    its output tile in `chunks` (both operands fetched per tile of the other), or stays
    `whole` (the block's rows of the first operand held in the buffer, read once; the
    second streams per block); `scale`: the tiles span 1/scale of each side of the 2D
    array (a larger array may do what a smaller one does); `chunk_scale`: the fibre's
    chunk spans 1/chunk_scale of the 1D array (a chip twice as wide runs the blocks of
    one half its width at twice the scale and twice the chunk scale)."""
    cascade, arch, roles, extents = ctx.cascade, ctx.arch, ctx.roles, ctx.extents
    two, one = arrays_of(arch)
    steps = _iterated_ranks(cascade)
    row, outer = _row_rank(cascade, roles, extents)

    def ranks(n: str) -> tuple[str, ...]:
        return einsum_ranks(cascade.einsum(n))

    # Einsums that neither iterate the rows nor read anything that does (a weight's column
    # sums, a count): once, in a prologue before the blocks.
    prologue = apart_from(cascade, roles, row)
    main = [n for n in roles.compute if n not in prologue]
    contractions = [
        n for n in main if gemm_dims(cascade, n) is not None and not supports(two, cascade, n)
    ]
    others = [n for n in main if n not in contractions]
    # the array each Einsum runs on: contractions on the 2D array; the others where their
    # work finishes soonest given what is already placed (the arrays run side by side)
    binding = {n: two.name for n in contractions}
    binding.update(soonest_arrays(cascade, others, contractions, two, one, extents))
    binding.update(soonest_arrays(cascade, prologue, [], two, one, extents))
    # The fibre the other Einsums reduce; a reduction over a chunked rank (`E -> E1 x E0`)
    # walks its chunk (E0) across the PEs, the chunks (E1) in turn.
    outer_of = {comps[0]: comps[1] for _r, comps in cascade.partitions if len(comps) == 2}
    chunk_of = {comps[1]: comps[0] for _r, comps in cascade.partitions if len(comps) == 2}
    reduced = [
        outer_of.get(r, r)
        for n in others + prologue
        for r in reduced_ranks(cascade.einsum(n))
        if r not in steps and (r in extents or r in outer_of)
    ]
    fibre = next((r for r in reduced if r in chunk_of), None) or next(iter(reduced), None)
    factors: dict[str, Any] = {}
    partitions: dict[str, list[str]] = {}
    # The cascade's own chunked ranks (`K[e, m1*M0 + m0]`): the chunk the cascade names
    # (a rewrite's `E0`), else one spanning the 2D array's rows, as FuseMax's.
    for rank, comps in cascade.partitions:
        partitions[rank] = list(comps)
        if len(comps) == 2:
            factors[comps[1]] = own_chunk(two, rank, comps[1], extents, scale)
    r2 = r1 = r0 = None
    if row is not None:
        r2, r1, r0 = f"{row}2", f"{row}1", f"{row}0"
        partitions[row] = [r2, r1, r0]
        factors[r0] = tile(two.name, "meshX", two.mesh_x, row, extents, scale)
        factors[r1] = "search"
    f1 = f0 = None
    if fibre is not None and fibre in chunk_of:  # already the cascade's chunk: walk it so
        f1, f0 = chunk_of[fibre], fibre
    elif fibre is not None:
        f1, f0 = f"{fibre}1", f"{fibre}0"
        partitions[fibre] = [f1, f0]
        factors[f0] = tile(one.name, "meshX", one.mesh_x, fibre, extents, chunk_scale)
    # A contraction's output columns (`F` of `Z[f, p]`) across the 2D array's other side, in
    # blocks (`F -> F2 x F1 x F0`, F1 searched): a block of rows x a block of columns is the
    # output tile the buffer accumulates while the reduction streams through in chunks
    # (`E1`), so a chunk of the first operand serves a block of columns and one of the
    # second (a weight) a block of rows -- the GEMM's output-stationary tiling, with the
    # rows' other Einsums around it. Columns that are the fibre (attention's scores `M`)
    # stay whole for the block: the fibre Einsums read the whole row.
    columns: dict[str, tuple[str | None, str, str]] = {}
    for name in contractions:
        e = cascade.einsum(name)
        out = [rank_of(p.expr.name) for p in e.output.indices]  # type: ignore[union-attr]
        cols = [r for r in out if r != row and r not in outer and r not in steps]
        col = max(cols, key=lambda r: extents.get(r, 1), default=None)
        if col is None or col in columns:
            continue
        if col == fibre:
            columns[col] = (None, f1, f0)  # type: ignore[assignment]
        else:
            columns[col] = (f"{col}2", f"{col}1", f"{col}0")
            partitions[col] = [f"{col}2", f"{col}1", f"{col}0"]
            factors[f"{col}0"] = tile(two.name, "meshY", two.mesh_y, col, extents, scale)
            factors[f"{col}1"] = "search"
    # A contraction's reduction streams by in chunks: the cascade's own (`E1` of a rewrite's
    # `E -> E1 x E0`), the fibre's, an earlier contraction's column blocks (the second
    # matmul of an FFN reduces the first one's columns), else chunks of the 2D array's side.
    chunks: dict[str, tuple[list[str], str]] = {}  # reduced rank -> (chunk loops, inner)
    for name in contractions:
        for r in reduced_ranks(cascade.einsum(name)):
            if r in chunks:
                continue
            if r in outer_of:  # the chunks of the cascade's own partition
                chunks[r] = ([r], outer_of[r])
            elif r in steps:
                continue
            elif r in chunk_of:
                chunks[r] = ([], r)
            elif r in columns:
                c2, c1, c0 = columns[r]
                chunks[r] = ([c for c in (c2, c1) if c], c0)
            elif r == fibre:
                chunks[r] = ([f1], f0)  # type: ignore[list-item]
            elif r in extents:
                partitions[r] = [f"{r}1", f"{r}0"]
                factors[f"{r}0"] = tile(two.name, "meshY", two.mesh_y, r, extents, scale)
                chunks[r] = ([f"{r}1"], f"{r}0")
    sizes = _sizes(factors, two, one, extents, partitions)
    block = [*outer, *([r2] if r2 else [])]
    einsums: dict[str, Any] = {}
    streams: dict[str, str] = {}  # contraction -> the chunk loop its operands stream at
    accumulates: dict[str, str] = {}  # contraction -> the loop its output tile stays below

    def spread(name: str, candidates: list[str | None]) -> list[str]:
        """The components an Einsum spreads over its array's PEs, in order of preference:
        the 2D array one per side, the 1D array one; each no wider than its side."""
        mine = _einsum_comps(cascade, name, partitions)
        array = two if binding[name] == two.name else one
        sides = [array.mesh_x, array.mesh_y] if array.mesh_y > 1 else [array.pes]
        out: list[str] = []
        for c in dict.fromkeys(c for c in candidates if c and c in mine):
            if len(out) < len(sides) and sizes.get(c, 1) <= sides[len(out)]:
                out.append(c)
        return out

    for name in contractions:
        e = cascade.einsum(name)
        out = [rank_of(p.expr.name) for p in e.output.indices]  # type: ignore[union-attr]
        col = next((c for c in columns if c in out), None)
        other_loops = [
            r for r in out if r != row and r not in outer and r != col and r not in steps
        ]
        c2, c1, c0 = columns[col] if col else (None, None, None)
        reduced = [r for r in reduced_ranks(e) if r in chunks]
        inner = list(dict.fromkeys(chunks[r][1] for r in reduced))
        if c2 is None:  # the fibre's columns whole for the block, the reduction in the PEs
            loops = [*block, *other_loops, c1, r1]
            inner = [*dict.fromkeys(c for r in reduced for c in chunks[r][0]), *inner]
        elif reduction == "whole":  # the block's rows whole in the buffer, a weight streams
            loops = [*block, *other_loops, c2, r1, c1]
            inner = [*dict.fromkeys(c for r in reduced for c in chunks[r][0]), *inner]
        else:  # the output tile in the buffer, the reduction's chunks around it
            walked = list(dict.fromkeys(c for r in reduced for c in chunks[r][0]))
            loops = [*block, *other_loops, c2, *walked, r1, c1]
            if walked:
                streams[name] = walked[-1]  # its operands' chunks stream by
                accumulates[name] = c2  # its output tile stays while they do
        # columns narrower than the side (a head's 64 frequencies) leave room down it: its
        # other output ranks fill it while they fit (the rotary halves: 128 of 256 PEs, not 64)
        spatial = [c for c in (r0, c0) if c]
        room = two.mesh_y // scale // (sizes.get(c0, 1) if c0 else 1)
        for r in other_loops:
            if 1 < extents.get(r, 1) <= room and r not in partitions:
                spatial.append(r)
                room //= extents[r]
        # ... and where they leave it idle still, the reduction's chunk goes down it instead
        # where it fills more (the keys' K of a head's 128 outputs: its 4096-long reduction
        # summed down the PEs, as FLAT's query projection does), the outputs walked inside
        # the reduction's chunks (a chunk of the tokens stays in the PEs while they go by;
        # outside them, the tokens are read from the buffer again for every output)
        chunk = next((c for c in inner if c in sizes), None)
        side = two.mesh_y // scale
        if c0 and room > 1 and chunk is not None and side // room < sizes[chunk] <= side:
            spatial = [c for c in (r0, chunk) if c]
            inner = [*(x for x in inner if x != chunk), c0]
        einsums[name] = {
            "loops": [x for x in dict.fromkeys(loops) if x and x not in spatial],
            "inner": [x for x in dict.fromkeys(inner) if x not in loops],
            "spatial": spatial,
        }
    for name in others:
        e = cascade.einsum(name)
        mine = ranks(name)
        cols = [c for c in columns if c in mine and c != fibre]
        if fibre is not None and fibre in mine:
            # a fibre reduction: the block's rows one at a time, the fibre across the PEs
            spatial = spread(name, [f0, r0])
            rest = [
                r
                for r in mine
                if r not in (row, fibre, f1, *outer) and (r in extents or r in steps)
            ]
            loops = [*block, r1, r0, *rest, f1]
        else:
            # element-wise over the rows (and a contraction's output tile: its epilogue)
            spatial = spread(name, [r0, *(columns[c][2] for c in cols)])
            if binding[name] == two.name and len(spatial) == 1:  # no columns: the other
                # side holds its widest other rank that fits (a group norm's groups over
                # its tokens' block: 32 x 256 PEs, not 256)
                fill = [
                    r
                    for r in mine
                    if r not in (row, *outer, *partitions, *steps, *reduced_ranks(e))
                    and 1 < extents.get(r, 1) <= two.mesh_y // scale
                ]
                if fill:
                    spatial.append(max(fill, key=lambda r: (extents[r], r)))
            loops = [*block, *(columns[c][0] for c in cols), r1, *(columns[c][1] for c in cols)]
            loops += [r for r in mine if r in steps]
        loops = [x for x in dict.fromkeys(loops) if x and x not in spatial]
        einsums[name] = {"loops": loops, "spatial": spatial}
    for name in prologue:
        mine = ranks(name)
        red = [outer_of.get(r, r) for r in reduced_ranks(cascade.einsum(name)) if r not in steps]
        cands = [f0] if f0 and fibre in red else []
        cands += [columns[r][2] for r in mine if r in columns]
        # then the innermost part of each of its ranks that the array's tiles size: a map
        # over the keys and the rows (AFT-full's exp(w)) spreads over both sides, not down one
        inner = (_innermost(r, partitions) for r in mine if r not in steps)
        cands += [c for c in inner if c in sizes]
        einsums[name] = {"loops": [r for r in mine if r in steps], "spatial": spread(name, cands)}
    tile_loops = {
        n: [x for x in einsums[n]["loops"] if x in _einsum_comps(cascade, n, partitions)]
        for n in einsums
    }
    producer = {cascade.einsum(n).output.tensor: n for n in roles.compute}
    readers: dict[str, list[str]] = {}
    for n in roles.compute:
        for acc in cascade.einsum(n).reads():
            readers.setdefault(acc.tensor, []).append(n)
    for e in cascade.einsums:  # a view's readers read its source
        if e.kind == "copy" and e.reads():
            readers.setdefault(e.reads()[0].tensor, []).extend(readers.get(e.output.tensor, []))

    def keep(tensor: str, users: list[str], from_dram: bool = False) -> str:
        """Below the deepest loop every user's block walks alike (held until the last use);
        an operand a contraction fetches from DRAM around its reduction's chunks, below the
        chunk loop (a chunk of rows serves a block of columns, a chunk of a weight's a block
        of rows; refetched from DRAM for the next block). A tensor made on chip has no
        copy to refetch: it stays for the whole block."""
        streamed = [streams[u] for u in users if u in streams]
        if streamed and from_dram:
            return streamed[0]
        if reduction == "whole" and from_dram and row is not None:
            if row in cascade.tensor(tensor).ranks:
                return block[-1] if block else "top"  # the block's rows, read once
            cols = [tile_loops[u][-1] for u in users if u in contractions and tile_loops[u]]
            if cols:  # a weight: a block of its columns per block of rows
                return cols[0]
        if row is not None and row not in cascade.tensor(tensor).ranks:
            return "top"  # a vector of the columns or the fibre (LayerNorm's gain): once
        prefix = _common_prefix([tile_loops[u] for u in users]) if users else []
        made = [accumulates[u] for u in users if u in accumulates]
        if made and made[0] in prefix:  # a contraction's output accumulates in its tile
            prefix = prefix[: prefix.index(made[0]) + 1]
        return prefix[-1] if prefix else "top"

    # Segments: a contraction that reduces the columns of an earlier one of its segment
    # (an FFN's second matmul) starts another: it needs the whole row of the first one's
    # output, which a block of rows would have to hold -- or spill -- at every column
    # block. The first one's output goes through DRAM, as between kernels.
    segment_of: dict[str, int] = {}
    segment, made_cols = 0, set()
    for n in main:
        e = cascade.einsum(n)
        if n in contractions and set(reduced_ranks(e)) & made_cols:
            segment, made_cols = segment + 1, set()
        if n in contractions:
            made_cols |= {rank_of(p.expr.name) for p in e.output.indices} & set(columns)  # type: ignore[union-attr]
        segment_of[n] = segment
    # Tiles of the contractions' output-stationary tiling (an output tile, an epilogue's, an
    # operand's chunk) must fit: the search sizes the blocks so they do. What a block keeps
    # whole (its rows' fibres, an operand made on chip for every column block) gives up to
    # DRAM what does not fit.
    tiled = {c for cols in columns.values() for c in cols[:2] if c} | set(streams.values())

    def place(home: str, kept: str) -> dict[str, Any]:
        if kept in tiled:
            return {"home": home, "keep": kept}
        return {"home": home, "keep": kept, "spill": "auto"}

    tensors: dict[str, dict[str, Any]] = {}
    state = set(cascade.iterative_tensors())  # a recurrence's state stays in the PEs
    in_main = set(main)
    for t in cascade.inputs:
        users = [u for u in readers.get(t, []) if u in in_main] or readers.get(t, [])
        tensors[t] = place("DRAM", keep(t, users, True))
    for t, n in producer.items():
        if t in state:
            continue
        users = [u for u in readers.get(t, []) if u != n]
        later = [u for u in users if segment_of.get(u) != segment_of.get(n)]
        if n in prologue and _stays(cascade, t, users, segment_of, extents, arch):
            # made once and read only by the blocks right after it, and small beside the
            # buffer (XCiT's keys normalised over the tokens): it waits in the buffer
            tensors[t] = {"home": "buffer", "keep": "top", "spill": "auto"}
        elif n in prologue:  # read by the blocks like an input
            tensors[t] = place("DRAM", keep(t, users or [n], True))
        elif later:  # read by a later segment: through DRAM
            tensors[t] = place("DRAM", keep(t, later, True))
        elif any(u in streams for u in users):
            # an operand a contraction streams by in chunks for every column block (a
            # normalised input): written once, read back per column block -- held whole
            # for the block instead, it would crowd out the output tiles
            tensors[t] = place("DRAM", keep(t, users, True))
        elif t in cascade.outputs:
            tensors[t] = place("DRAM", keep(t, [n, *users]))
        else:
            tensors[t] = place("buffer", keep(t, [n, *users]))
    by_array: dict[str, list[str]] = {two.name: [], one.name: []}
    for n in main:
        by_array[binding[n]].append(n)
    spatial: dict[str, list[str]] = {}
    if r0:
        spatial[two.name] = [r0]
    if f0:
        spatial[one.name] = [f0]
    all_binding = {a.name: [n for n in roles.compute if binding[n] == a.name] for a in (two, one)}
    body = mapping_head(
        ctx,
        LABEL,
        f"{cascade.name} bound by the fused strategy: blocks of rows, fibres on chip while "
        "they fit",
        factors,
        partitions,
        spatial,
        {a: ns for a, ns in all_binding.items() if ns},
    )
    if chained(one):
        body["chaining"] = {one.name: "pipelined"}
    body["tensors"] = tensors
    phases: list[dict[str, Any]] = []
    if prologue:
        phases.append(
            {
                "name": "prologue",
                "loops": [],
                "einsums": {n: einsums[n] for n in prologue},
                "schedule": list(prologue),
            }
        )
    for i in range(segment + 1):
        names = [n for n in main if segment_of[n] == i]
        on = {a: [n for n in ns if segment_of[n] == i] for a, ns in by_array.items()}
        phases.append(
            {
                "name": "fused" if not segment else f"fused{i + 1}",
                "loops": block,
                "einsums": {n: einsums[n] for n in names},
                "schedule": [{"par": [on[two.name], on[one.name]]}]
                if on[two.name] and on[one.name]
                else names,
            }
        )
    body["phases"] = phases
    return {"mapping": body}


def _sizes(
    factors: dict[str, Any],
    two: Array,
    one: Array,
    extents: dict[str, int],
    partitions: dict[str, list[str]],
) -> dict[str, int]:
    """The extent of each array-sized tile component (`P0: PE2D.meshX` -> 256, or the whole
    rank when smaller), to check that what an Einsum spreads fits its array's side."""
    parent = {c: r for r, comps in partitions.items() for c in comps}
    dims = {
        f"{a.name}.{d}": getattr(a, d.replace("mesh", "mesh_").lower())
        for a in (two, one)
        for d in ("meshX", "meshY")
    }
    out: dict[str, int] = {}
    for comp, factor in factors.items():
        side, _slash, part = str(factor).partition(" / ")  # `PE2D.meshX / 2`: part of it
        if side in dims:
            size = dims[side] // (int(part) if part else 1)
            out[comp] = min(size, extents.get(parent.get(comp, ""), size))
        elif factor in extents:
            out[comp] = extents[factor]
    return out


def _innermost(rank: str, partitions: dict[str, list[str]]) -> str:
    """A rank's innermost component as the mapping splits it (the rank itself if whole)."""
    comps = partitions.get(rank)
    return _innermost(comps[-1], partitions) if comps else rank


def _einsum_comps(cascade: Cascade, name: str, partitions: dict[str, list[str]]) -> set[str]:
    """Every component an Einsum iterates (its ranks, split as the mapping splits them)."""

    def leaves(rank: str) -> list[str]:
        comps = partitions.get(rank)
        return [c for p in comps for c in leaves(p)] if comps else [rank]

    return {c for r in einsum_ranks(cascade.einsum(name)) for c in leaves(r)}


# A prologue's result waits in the buffer for the blocks when it takes at most this share of
# the buffer (the rest is the blocks' own)
PROLOGUE_SHARE = 4


def _stays(
    cascade: Cascade,
    tensor: str,
    users: list[str],
    segment_of: dict[str, int],
    extents: dict[str, int],
    arch: Architecture,
) -> bool:
    """A prologue's result read only by the first phase of blocks (the one right after the
    prologue), whose whole size is at most 1 / PROLOGUE_SHARE of the buffer."""
    if not users or any(segment_of.get(u) != 0 for u in users):
        return False
    ranks = cascade.tensor(tensor).ranks
    if any(r not in extents for r in ranks):
        return False
    values = math.prod(extents[r] for r in ranks)
    return values * arch.value_bytes * PROLOGUE_SHARE <= arch.buffer.capacity_bytes
