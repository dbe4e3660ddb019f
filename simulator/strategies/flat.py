"""The FLAT strategy: a multi-pass cascade fused per block of rows (FLAT's row granularity).

For a cascade whose Einsums between two GEMMs normalise whole fibres (the 3-pass softmax:
GM, SN, SD, A over M between QK and AV), as FLAT binds it on its 2D + 1D arrays:

* **binding** -- the GEMMs on the 2D array, output-stationary (QK accumulates over its
  reduction in the PEs, AV over the whole fibre); the fibre Einsums on the 1D array, its
  units chained when each operation has its own (FLAT's softmax unit);
* **spatial and loops** -- rows across the 2D array's columns (`P -> P2 x P1 x P0`, P0 =
  meshX, P1 searched), the fibre down its rows and across the 1D PEs (`M -> M1 x M0`);
  the phase walks `P2, M1, P1`, the fibre Einsums one row at a time;
* **tensors** -- the GEMM and fibre outputs the passes hand each other (QK, SN, A) stay in
  the buffer for the block of rows, spilling what does not fit (FLAT's row granularity keeps
  whole fibres on chip); Q, K, V and the output stream from and to DRAM.

FLAT itself picks per point among more dataflows (weight stationarity, which operands stay
on chip; `mappings/flat.yaml` reads its published choices); this strategy is the one rule
above, so it differs from the published FLAT where FLAT chose otherwise.

Beyond FLAT's designs (`soonest`, the fused strategy's variants), two more: a block of rows
narrower than the array's side walks the fibre's chunks side by side beside it
(:func:`_keys_beside_rows`), and several sets of keys in one softmax (the Compressive
Transformer's) are each a fibre of its own, walked in its own chunks in the same block.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from simulator.cascade.ir import Cascade, rank_of
from simulator.cascade.ops import ops_per_point
from simulator.spec.arch import Array, missing_operations
from simulator.strategies.context import BindContext, mapping_head
from simulator.strategies.fusemax import arrays_of, supports
from simulator.strategies.regions import block_values, kept_extent
from simulator.strategies.roles import (
    einsum_ranks,
    in_place,
    is_gemm,
    own_chunk,
    reduced_ranks,
    tile,
)
from simulator.strategies.spatial import einsum_time, filling, registers_hold
from simulator.strategies.subtiles import inner_name, split_factor, split_lists
from simulator.strategies.unfused import _fibre_array, chained, indexed_vars
from simulator.support.errors import SpecError

# How the inputs the rows do not index cross from DRAM (see flat_mapping).
HOLDS = ("stream", "whole")


def _makes(cascade: Cascade, name: str, fibre: str | None) -> bool:
    """The Einsum's result carries the fibre (or a part of it)."""
    vs = cascade.einsum(name).output.vars()
    return fibre in {rank_of(v) for v in vs} | {cascade.rank_group(rank_of(v)) for v in vs}


def _reduces(cascade: Cascade, name: str, fibre: str | None) -> bool:
    """The Einsum reduces the fibre (or a part of it)."""
    return any(
        fibre in (rank_of(v), cascade.rank_group(rank_of(v))) for v in cascade.einsum(name).reduced
    )


def _shaped(
    cascade: Cascade, contractions: list[str], compute: tuple[str, ...], fibre: str | None
) -> bool:
    """FLAT's shape over `fibre`: contractions making it (the scores), at least one
    reducing it (A V) last, none doing both, and Einsums besides them (the softmax)."""
    makes = [_makes(cascade, n, fibre) for n in contractions]
    reduces = [_reduces(cascade, n, fibre) for n in contractions]
    gemms = [i for i, (m, r) in enumerate(zip(makes, reduces, strict=True)) if m or r]
    return (
        len(gemms) >= 2
        and len(gemms) < len(compute)
        and makes[gemms[0]]
        and reduces[gemms[-1]]
        and all(makes[i] != reduces[i] for i in gemms)
    )


def _able_arrays(
    cascade: Cascade, names: list[str], two: Array, one: Array
) -> dict[str, list[Array]]:
    """The arrays that can run each Einsum (its operations, its operands in the PEs'
    registers), the 1D array first; an Einsum no array can run is one line naming its
    operations."""
    ables: dict[str, list[Array]] = {}
    for name in names:
        able = [
            a
            for a in (one, two)
            if not supports(a, cascade, name) and registers_hold(cascade, name, a)
        ]
        if not able:
            lacking = supports(one, cascade, name)
            why = missing_operations(lacking, (two, one)) or (
                f"it needs {', '.join(lacking)}, which no array's PEs support"
            )
            raise SpecError(f"cannot bind Einsum '{name}': {why}", cascade.einsum(name).loc)
        ables[name] = able
    return ables


def soonest_arrays(
    cascade: Cascade,
    names: list[str],
    placed_2d: list[str],
    two: Array,
    one: Array,
    extents: dict[str, int],
) -> dict[str, str]:
    """Each Einsum on the array where the phase finishes soonest given those already placed
    (the arrays run side by side: the phase takes the busier one); ties go to the 1D
    array. The Einsums only one array can run are placed first, then the others, the
    longest first (so a short one never takes the room a long one needed): the order the
    cascade lists them in plays no part. An Einsum no array can run is one line naming its
    operations."""
    box = tuple(sorted(extents.items()))
    return dict(_soonest(cascade, tuple(names), tuple(placed_2d), two, one, box))


@functools.lru_cache(maxsize=1024)
def _soonest(
    cascade: Cascade,
    names: tuple[str, ...],
    placed_2d: tuple[str, ...],
    two: Array,
    one: Array,
    box: tuple[tuple[str, int], ...],
) -> tuple[tuple[str, str], ...]:
    """:func:`soonest_arrays` of hashable arguments (a search's templates ask it for every
    combination of their knobs)."""
    extents = dict(box)
    load = {two.name: sum(einsum_time(cascade, n, two, extents) for n in placed_2d)}
    load[one.name] = 0.0
    out: dict[str, str] = {}
    ables = _able_arrays(cascade, names, two, one)

    def work(name: str) -> float:
        return min(einsum_time(cascade, name, a, extents) for a in ables[name])

    order = sorted(names, key=lambda n: (len(ables[n]), -work(n)))  # stable: ties as given
    for name in order:
        able = ables[name]
        best = min(
            able,
            key=lambda a: (
                max(
                    load[a.name] + einsum_time(cascade, name, a, extents),
                    *(v for k, v in load.items() if k != a.name),
                ),
                a is not one,
            ),
        )
        out[name] = best.name
        load[best.name] += einsum_time(cascade, name, best, extents)
    return tuple((n, out[n]) for n in names)


def fastest_arrays(
    cascade: Cascade, names: list[str], two: Array, one: Array, extents: dict[str, int]
) -> dict[str, str]:
    """Each Einsum on the array that runs it in the fewest cycles (ties to the 1D array):
    the binding of a phase whose arrays take turns, where the phase takes the sum of both
    arrays' work (:func:`soonest_arrays` is the one of arrays side by side)."""
    ables = _able_arrays(cascade, names, two, one)
    return {
        n: min(ables[n], key=lambda a: (einsum_time(cascade, n, a, extents), a is not one)).name
        for n in names
    }


def _block_footprint(
    cascade: Cascade,
    handed: list[str],
    over: dict[str, str],
    row: str,
    fibre: str,
    rows: int,
    extents: dict[str, int],
) -> int:
    """Values a block of `rows` rows holds of the fibres handed between its Einsums: each
    tensor the points its producer's filters keep (a window's band, a few global rows),
    a chain computed in place (`over`) one slot, as large as its largest."""
    slots: dict[str, int] = {}
    for t in handed:
        root = t
        while root in over:
            root = over[root]
        kept = max(block_values(e, fibre, row, rows, extents) for e in cascade.producers(t))
        slots[root] = max(slots.get(root, 0), kept)
    return sum(slots.values())


def _filled(down: list[str], extents: dict[str, int], split: dict[str, Any]) -> int:
    """The PEs a spread down the side fills: each rank's extent, a split rank's part's."""
    width = {part: w for _outer, part, w in split.values()}
    return math.prod(width.get(r) or extents.get(r, 1) for r in down)


def _contraction(cascade: Cascade, name: str) -> bool:
    """`OUT = L * R` summed over one rank, multiply-accumulates only (rows may be several
    ranks: a group's query heads and the queries)."""
    e = cascade.einsum(name)
    return is_gemm(e) and dict(ops_per_point(cascade, e)) == {"mac": 1}


def flat_mapping(
    ctx: BindContext,
    *,
    reuse: bool = True,
    soonest: bool = False,
    scale: int = 1,
    fibres: str = "fit",
    chunk_scale: int = 1,
    spread: str = "columns",
    hold: str = "stream",
) -> dict[str, Any]:
    """FLAT's rule (module docstring); `soonest` (the fused strategy): a fibre Einsum runs on
    the array where the block finishes soonest given the Einsums already placed (FuseMax's
    2D PEs can run a softmax's max and exp), not on the 1D array because it can. `scale`:
    blocks of 1/scale of the 2D array's columns of rows; `chunk_scale`: chunks of the fibre
    of 1/chunk_scale of its rows; `fibres`: `fit` (on chip when a block's
    fit, the rule) or `dram` (through DRAM, weight-stationary GEMMs, whatever fits);
    `spread`: what the last contraction spreads across the 2D array's other side besides
    the rows -- its output's `columns` (FLAT's output-stationary AV, the whole fibre reduced
    in each PE), or the `fibre`'s chunks, reduced down the PEs (where the output's columns
    are fewer than the PEs: AV of 128-wide heads on 256 PEs); `hold`: the inputs the rows
    do not index (K, V) `stream` by per block of rows (FLAT's), or are held `whole` on chip
    for the instance, each fetched once, what does not fit spilled (a window's band of keys
    then crosses from DRAM once, not once per block of rows). Tensors a block hands on are
    computed in place over the one they replace where that one is dead
    (:func:`simulator.strategies.roles.in_place`)."""
    cascade, arch, roles, extents = ctx.cascade, ctx.arch, ctx.roles, ctx.extents
    two, one = arrays_of(arch)
    contractions = [n for n in roles.compute if _contraction(cascade, n)]
    # the fibre: a rank an Einsum other than the contractions reduces -- the first for
    # which the cascade has FLAT's shape (Performer's keys' stabiliser reduces its features
    # and its keys at once: the keys are the fibre, the features the rows)
    reduced_fibres = list(
        dict.fromkeys(
            r
            for n in roles.compute
            if n not in contractions
            for r in reduced_ranks(cascade.einsum(n))
        )
    )
    fibre = next(
        (r for r in reduced_fibres if _shaped(cascade, contractions, roles.compute, r)),
        reduced_fibres[0] if reduced_fibres else None,
    )
    if roles.iterative is not None:
        raise SpecError(
            f"cannot bind '{cascade.name}' with the FLAT strategy: FLAT normalises whole "
            "fibres; this cascade runs a recurrence over chunks (one pass: the FuseMax "
            "strategy binds it)"
        )

    # Beyond FLAT's designs (`soonest`), one softmax over several sets of keys (the
    # Compressive Transformer's compressed memories, memories and segment): each set a fibre
    # of its own with FLAT's shape, no Einsum iterating two of them, each walked in its own
    # chunks within the same block of rows.
    chunk_of = {comps[1]: comps[0] for _r, comps in cascade.partitions if len(comps) == 2}
    taken_names = set(extents) | {c for _r, comps in cascade.partitions for c in comps}
    secondary = [
        r
        for r in reduced_fibres
        if soonest
        and r != fibre
        and r not in chunk_of
        and not {f"{r}1", f"{r}0"} & taken_names
        and _shaped(cascade, contractions, roles.compute, r)
        and not any({fibre, r} <= set(einsum_ranks(cascade.einsum(n))) for n in roles.compute)
    ]
    every_fibre = [fibre, *secondary]

    def fibre_of(n: str) -> str:
        """The fibre an Einsum walks: the set of keys it iterates (the first fibre if none)."""
        mine = einsum_ranks(cascade.einsum(n))
        return next((x for x in secondary if x in mine), fibre)

    def produces_fibre(n: str) -> bool:
        return _makes(cascade, n, fibre_of(n))

    def reduces_fibre(n: str) -> bool:
        return _reduces(cascade, n, fibre_of(n))

    # The GEMMs: contractions making the fibre (scores: QK, or several of them) and those
    # reducing it (A V); a contraction touching neither (a dot product of two vectors that
    # scales the result) is a small Einsum like the fibre Einsums.
    gemms = [n for n in contractions if produces_fibre(n) or reduces_fibre(n)]
    fibre_einsums = [n for n in roles.compute if n not in gemms]
    if not fibre_einsums or not _shaped(cascade, contractions, roles.compute, fibre):
        raise SpecError(
            f"cannot bind '{cascade.name}' with the FLAT strategy: it fuses GEMMs with "
            "the Einsums between them normalising whole fibres (3-pass softmax); this cascade "
            "has no such shape"
        )
    # the rows from the first GEMM whose result has ranks besides the fibre (a key's norm
    # `NK[m] = K[e, m] * K[e, m]` has none: the keys' projection `WK[r, m]` names them),
    # the scores first: a GEMM whose result the fibre Einsums read (a convolution making
    # compressed keys and values over the fibre feeds the scores and A V, not the softmax)
    read_by_fibre = {a.tensor for n in fibre_einsums for a in cascade.einsum(n).reads()}
    scores = [g for g in gemms if cascade.einsum(g).output.tensor in read_by_fibre]
    first = cascade.einsum(
        next(
            (
                g
                for g in (*scores, *gemms)
                if {rank_of(v) for v in cascade.einsum(g).output.vars()} - {fibre}
            ),
            gemms[0],
        )
    )
    left, right = first.reads()
    lv, rv = indexed_vars(left), indexed_vars(right)
    # The rows: what one operand indexes and the other not, besides the fibre and its
    # chunks (either side: `Q * K` and `K * Q` are the same contraction; Rabe and Staats'
    # scores `S[c, j, p]` over chunks of the keys have the rows p).
    fibre_ranks = set(every_fibre) | {
        c for _r, comps in cascade.partitions if set(every_fibre) & set(comps) for c in comps
    }
    rows = (
        [
            rank_of(v)
            for v in first.output.vars()
            if (v in lv) != (v in rv) and rank_of(v) not in fibre_ranks
        ]
        or [  # else its result's (a reduced rank is no row: memories retrieved per query,
            # `QKM[r, p] = Q[e, p] * KM[e, r, p]`, reduce e for the rows p)
            rank_of(v)
            for v in first.output.vars()
            if rank_of(v) not in fibre_ranks and rank_of(v) in extents
        ]
        or [r for r in einsum_ranks(first) if r not in fibre_ranks and r in extents]
    )
    # The widest row rank goes across the columns; the others (a group's query heads) are
    # outer loops: FLAT fuses per head.
    row = max(rows, key=lambda r: (extents.get(r, 1), rows.index(r)))
    outer = [r for r in rows if r != row]
    # a rank both operands and the result carry (the heads of a layer written with its
    # head rank): independent instances, walked outermost as well
    outer += [
        rank_of(v)
        for v in first.output.vars()
        if v in lv and v in rv and rank_of(v) not in (*fibre_ranks, row, *outer)
    ]
    whole_rows = any(
        row in reduced_ranks(cascade.einsum(n)) for n in fibre_einsums
    )  # a statistic over the rows too (Performer's keys' maximum): one block holds them all
    if whole_rows and extents.get(row, 1) > two.mesh_x // scale:
        raise SpecError(
            f"cannot bind '{cascade.name}' with the FLAT strategy: a fibre Einsum reduces "
            f"the rows ({row}) as well, and {extents.get(row)} of them are more than one "
            f"block's {two.mesh_x // scale}"
        )
    r2, r1, r0 = f"{row}2", f"{row}1", f"{row}0"
    f1, f0 = f"{fibre}1", f"{fibre}0"
    # a fibre that is already the cascade's chunk (`m0` of `K[e, m1*M0 + m0]`) is walked
    # chunk by chunk as it stands: M1 the loop, M0 the chunk
    own_partition = fibre not in chunk_of
    if not own_partition:
        f1, f0 = chunk_of[fibre], fibre
    parts = {fibre: (f1, f0), **{x: (f"{x}1", f"{x}0") for x in secondary}}

    def own(n: str) -> tuple[str, str, str]:
        """(the Einsum's fibre, its walked part, its chunk)."""
        x = fibre_of(n)
        return (x, *parts[x])

    binding = {n: two.name for n in gemms}
    for n in fibre_einsums:
        binding[n] = _fibre_array(cascade, n, two, one)
    if soonest:
        binding.update(soonest_arrays(cascade, fibre_einsums, gemms, two, one, extents))
    # Whole fibres of a block of rows (one P0 tile) stay on chip while they fit: then the
    # GEMMs are output-stationary; otherwise the fibres go through DRAM and the GEMMs keep
    # K and V in the PEs (weight-stationary), as FLAT does for long sequences.
    handed = [
        cascade.einsum(n).output.tensor
        for n in roles.compute
        if cascade.einsum(n).output.tensor not in cascade.outputs
        and set(every_fibre) & set(cascade.tensor(cascade.einsum(n).output.tensor).ranks)
    ]
    over = in_place(cascade, set(handed))  # computed in place: one slot for the chain
    onchip = (
        fibres != "dram"
        and sum(
            _block_footprint(
                cascade,
                [t for t in handed if x in cascade.tensor(t).ranks],
                over,
                row,
                x,
                two.mesh_x // scale,
                extents,
            )
            for x in every_fibre
        )
        * arch.value_bytes
        <= arch.buffer.capacity_bytes
    )
    # Output-stationary GEMMs hold a tile of rows in the PEs: they need rows to fill the
    # columns (one decoding query does not), else the operand without rows stays put.
    output_stationary = onchip and extents.get(row, 0) >= two.mesh_x // scale
    einsums: dict[str, Any] = {}
    split: dict[str, tuple[str, str, int]] = {}  # rank -> (outer, inner part, its extent)
    taken_names |= {c for x in secondary for c in parts[x]}

    def down_the_side(ranks: list[str], room: int = two.mesh_y) -> tuple[list[str], list[str]]:
        """The ranks spread down the 2D array's side (`room` PEs), in order while they fit,
        and the parts walked: a rank wider than the room left (a 512-wide latent) is split,
        its part of the room's width down the side, the rest walked (else one column
        works)."""
        down, walked = [], []
        for r in ranks:
            size = extents.get(r, 1)
            if r in split and split[r][2] > room:
                continue  # its part is wider than the room left
            if r in split:
                down.append(split[r][1])
                walked.append(split[r][0])
                room //= split[r][2]
            elif size <= room:
                down.append(r)
                room //= size
            elif room > 1 and size % room == 0 and not {f"{r}1", f"{r}0"} & taken_names:
                split[r] = (f"{r}1", f"{r}0", room)
                down.append(f"{r}0")
                walked.append(f"{r}1")
                room = 1
        return down, walked

    for n in gemms:
        e = cascade.einsum(n)
        x, x1, x0 = own(n)
        other = [r for r in einsum_ranks(e) if r not in (row, x, x1, x0, *outer)]
        if not output_stationary:  # weight-stationary: the operand without rows stays put
            down, walked = down_the_side(other)  # the other ranks down the array's side
            einsums[n] = {"spatial": [x0, *down], "inner": [*walked, r0]}
        elif reduces_fibre(n) and spread == "fibre":  # the fibre's chunks reduced in the PEs
            # (a fibre shorter than its chunk -- a mixture's 32 heads -- leaves room down the
            # side: the other ranks fill it, as they would the whole side)
            chunk = two.mesh_y // chunk_scale
            short = extents.get(x, chunk) < chunk and (own_partition or x != fibre)
            down, walked = down_the_side(other, chunk // extents[x]) if short else ([], [])
            einsums[n] = {"loops": [*outer, r2, r1, x1, *walked], "spatial": [r0, x0, *down]}
        elif reduces_fibre(n):  # accumulates over the whole fibre in the PEs: rows stay put
            # (its other ranks down the side while they fit: a mixture's output projection,
            # 4096 columns, walks 16 blocks of 256)
            down, walked = down_the_side(other)
            einsums[n] = {"loops": [*outer, r2, r1, *walked], "spatial": [r0, *down]}
        else:
            einsums[n] = {"inner": list(reduced_ranks(e))}
    rows_here = min(two.mesh_x // scale, extents.get(row, two.mesh_x))
    free = two.mesh_x // rows_here  # the columns a narrow block of rows leaves idle
    beside_rows: dict[str, str] = {}  # an Einsum -> the split rank it spreads beside them
    for n in fibre_einsums:
        mine = einsum_ranks(cascade.einsum(n))
        x, x1, x0 = own(n)
        if binding[n] == two.name and (x in mine or x0 in mine):
            # rows across the columns, the chunk down the rows
            einsums[n] = {"loops": [*outer, r2, r1, x1], "spatial": [r0, x0]}
        elif binding[n] == two.name:  # no fibre (a gate's GEMM over the rows' inputs): rows
            # across the columns, down the rows what fills them -- its other ranks, then
            # part of one wider than the room left (a reduction: summed down the PEs) -- or,
            # where that leaves PEs idle, a rank an earlier Einsum split, its part down the
            # side (a layer's width, split by its norm: the output projection's columns,
            # the query projection's reduction of 128-wide heads)
            ranked = sorted(
                (r for r in mine if r not in (row, *outer, *split) and extents.get(r, 1) > 1),
                key=lambda r: (r in reduced_ranks(cascade.einsum(n)), -extents[r], r),
            )
            down, _walked = down_the_side(ranked)
            ready = [r for r in mine if r in split and r not in (row, *outer)]
            if ready and _filled(down, extents, split) < two.mesh_y:
                beside, _walked = down_the_side([ready[0], *ranked])
                if _filled(beside, extents, split) > _filled(down, extents, split):
                    down = beside
            einsums[n] = {"loops": [*outer, r2, r1], "spatial": [r0, *down]}
            # a narrow block of rows leaves columns idle beside them: part of the walked
            # outer part of a rank split down the side fills them (beyond FLAT's designs: a
            # layer's projections over 128 rows, two chunks of their width side by side)
            wide = next((r for r in mine if r in split and split[r][1] in down), None)
            if soonest and free > 1 and wide is not None:
                if (extents[wide] // split[wide][2]) % free == 0:
                    beside_rows[n] = wide
        elif x in mine or x0 in mine:  # the fibre's chunk across the 1D PEs, a row at a time
            einsums[n] = {"loops": [*outer, r2, r1, r0, x1]}
        else:  # no fibre (a division after the contraction): what fills the 1D PEs
            sizes = {r0: rows_here, **{r: extents[r] for r in mine if r in extents}}
            cands = [r0, *(r for r in mine if r not in (row, *outer))]
            spread_1d = filling(cands, sizes, one.pes)
            loops = [*outer, r2, r1, r0, f1]
            einsums[n] = {"loops": [x for x in loops if x not in spread_1d], "spatial": spread_1d}
    across: dict[str, str] = {}  # the rank -> the name of its outer part's inner part
    for r in dict.fromkeys(beside_rows.values()):
        across[r] = inner_name(split[r][0], taken_names)
        taken_names.add(across[r])
        split_lists(einsums, split[r][0], across[r])
    for n, r in beside_rows.items():
        einsums[n]["loops"] = [c for c in einsums[n]["loops"] if c != across[r]]
        einsums[n]["spatial"].append(across[r])
    # A region of the fibre or of the rows (StreamingLLM's 4 sink keys of 4096, Longformer's
    # 16 global query rows): an Einsum whose filters keep under a quarter of a tile of it
    # walks that tile's values as tiles, so that only the region's are computed, and spreads
    # its other ranks (a contraction's) down the side instead -- a whole chunk of 256 keys
    # for 4 wasted 3,072 of a block's 23,060 cycles. An Einsum with no other rank to spread
    # keeps its whole tiles (one step of the tile beats a step per value); on the 1D array
    # the rows spread over the PEs while the fibre's region is walked.
    chunk = min(extents.get(fibre, two.mesh_y), two.mesh_y // chunk_scale)
    regions: dict[str, list[str]] = {}  # a walked tile component -> the regions walking it
    widths: dict[str, int] = {}  # -> the part of it spread beside their other ranks
    sub_tiles: dict[str, tuple[str, int]] = {}  # -> (its inner part, that part's width)
    for n in [*gemms, *fibre_einsums] if own_partition and not secondary else []:
        e = cascade.einsum(n)
        mine = einsum_ranks(e)
        if fibre not in mine:
            continue
        others = [r for r in mine if r not in (row, fibre, *outer) and extents.get(r, 1) > 1]
        few_keys = 4 * kept_extent(e, fibre, extents) <= chunk
        few_rows = row in mine and 4 * kept_extent(e, row, extents) <= rows_here
        if binding[n] != two.name:
            if few_keys:
                spread_1d = filling([r0], {r0: rows_here}, one.pes)
                einsums[n] = {"loops": [*outer, r2, r1, f1, f0], "spatial": spread_1d}
            continue
        if not others or not (few_keys or few_rows):
            continue
        down, walked = down_the_side(others)
        if few_keys:
            einsums[n] = {"loops": [*outer, r2, r1, f1, f0, *walked], "spatial": [r0, *down]}
        else:  # the fibre's chunk across the columns, the region's rows walked
            einsums[n] = {"loops": [*outer, r2, r1, r0, f1, *walked], "spatial": [f0, *down]}
        # what the other ranks leave of the side: part of the walked tile spread there
        # (Longformer's 16 global keys, two at a time beside 128 embedding values)
        room = two.mesh_y // math.prod(
            next((w for _o, part, w in split.values() if part == d), extents.get(d, 1))
            for d in down
        )
        comp, size = (f0, chunk) if few_keys else (r0, rows_here)
        mesh = two.mesh_y // chunk_scale if few_keys else two.mesh_x // scale
        if room > 1 and size == mesh and size % room == 0:
            regions.setdefault(comp, []).append(n)
            widths[comp] = min(widths.get(comp, room), room)
    for comp, width in widths.items():
        inner = inner_name(comp, taken_names)
        taken_names.add(inner)
        split_lists(einsums, comp, inner)
        for n in regions[comp]:  # the region's Einsums spread the inner part
            einsums[n]["loops"].remove(inner)
            einsums[n]["spatial"].append(inner)
        sub_tiles[comp] = (inner, width)
    beside = (
        _keys_beside_rows(
            einsums,
            (f1, f0, r0),
            [*outer, r2, f1, r1],
            two.mesh_x // rows_here,
            chunk,
            taken_names,
        )
        if soonest  # (beyond FLAT's designs, as the soonest arrays are)
        and own_partition
        and not secondary
        and not sub_tiles
        and scale > 1
        and rows_here == two.mesh_x // scale
        and extents.get(fibre, 0) % (chunk * (two.mesh_x // rows_here)) == 0
        else None
    )
    tensors: dict[str, dict[str, Any]] = {}
    local: dict[str, dict[str, Any]] = {}
    # Operands of the rows (Q, the output) stay on chip for their block of rows, spilling
    # what does not fit; the others (K, V) stream by.
    if hold not in HOLDS:
        raise ValueError(f"hold must be one of {HOLDS}, got {hold!r}")
    for t in (*cascade.inputs, *cascade.outputs):
        if row in cascade.tensor(t).ranks:
            tensors[t] = {"home": "DRAM", "keep": r2, "spill": "auto"}
        elif hold == "whole" and t in cascade.inputs:
            tensors[t] = {"home": "DRAM", "keep": "top", "spill": "auto"}
        else:
            tensors[t] = {"home": "DRAM", "keep": "stream"}
    producer = {cascade.einsum(n).output.tensor: n for n in roles.compute}
    for t in handed:
        made_by_gemm = producer[t] in gemms
        read_by_gemm = any(any(a.tensor == t for a in cascade.einsum(g).reads()) for g in gemms)
        if onchip:
            tensors[t] = {"home": "buffer", "keep": r2, "spill": "auto"}
        elif made_by_gemm:  # written to DRAM, each fibre loaded once by the fibre Einsums
            tensors[t] = {"home": "DRAM", "keep": "stream"}
            local[t] = {"home": "DRAM", "keep": r0}
        elif read_by_gemm:
            tensors[t] = {"home": "DRAM", "keep": "stream"}
        else:  # made and read by the fibre Einsums: one fibre on chip
            tensors[t] = {"home": "buffer", "keep": r0, "spill": "auto"}
    if onchip:
        for t, src in over.items():
            tensors[t]["over"] = src
    by_array: dict[str, list[str]] = {two.name: [], one.name: []}
    for n in roles.compute:
        by_array[binding[n]].append(n)
    factors = {
        # the cascade's own chunks (`K[e, m1*M0 + m0]`): the size given, else the 2D
        # array's rows
        **{
            comps[1]: own_chunk(two, rank, comps[1], extents, chunk_scale)
            for rank, comps in cascade.partitions
            if len(comps) == 2 and comps[1] != fibre
        },
        r0: tile(two.name, "meshX", two.mesh_x, row, extents, scale),
        f0: tile(two.name, "meshY", two.mesh_y, fibre, extents, chunk_scale),
        **{
            parts[x][1]: tile(two.name, "meshY", two.mesh_y, x, extents, chunk_scale)
            for x in secondary
        },
        r1: 1 if whole_rows else "search",
        **{part: width for _outer, part, width in split.values()},
        **{name: free for name in across.values()},
    }
    partitions = {
        **{rank: list(comps) for rank, comps in cascade.partitions},
        row: [r2, r1, r0],
        **({fibre: [f1, f0]} if own_partition else {}),
        **{x: list(parts[x]) for x in secondary},
        **{
            r: [outer_, *([across[r]] if r in across else []), part]
            for r, (outer_, part, _w) in split.items()
        },
    }
    chunks = [parts[x][1] for x in secondary]
    spatial = {two.name: [r0, f0, *chunks], one.name: [f0, *chunks]}
    if beside is not None:  # the fibre's chunks walked in steps of `width` side by side
        part, width = beside
        partitions[fibre] = [f1, part, f0]
        factors[part] = width
        spatial[two.name].append(part)
    for comp, (inner, width) in sub_tiles.items():  # both parts where the tile was
        factors[comp], factors[inner] = split_factor(factors[comp], width), width
        for names in (*partitions.values(), *spatial.values()):
            if comp in names:
                names.insert(names.index(comp) + 1, inner)
    body = mapping_head(
        ctx,
        "auto: FLAT",
        f"{cascade.name} bound by the FLAT strategy (fused, row granularity)",
        factors,
        partitions,
        spatial,
        {a: ns for a, ns in by_array.items() if ns},
    )
    if chained(one):
        body["chaining"] = {one.name: "pipelined"}
    body["tensors"] = tensors
    body["phases"] = [
        {
            "name": "fused",
            "loops": [
                *outer,
                r2,
                f1,
                *([beside[0]] if beside else []),
                *(parts[x][0] for x in secondary),
                r1,
            ],
            "einsums": einsums,
            **({"tensors": local} if local else {}),
            "schedule": [{"par": [by_array[two.name], by_array[one.name]]}],
        }
    ]
    return {"mapping": body}


def _keys_beside_rows(
    einsums: dict[str, dict[str, Any]],
    comps: tuple[str, str, str],
    phase_loops: list[str],
    width: int,
    chunk: int,
    taken: set[str],
) -> tuple[str, int] | None:
    """A block of rows narrower than the 2D array's side (`scale` 2: 128 rows of 256)
    leaves part of the side idle: the fibre's chunks are walked `width` at a time, side by
    side -- each Einsum that spreads the rows and a chunk spreads that part beside the
    rows, the others walk it. T5's biased scores at 16K hold K and V whole and take blocks
    of 128 rows so that the scores fit; before, half the array idled.
    Returns (the part, its width), `einsums` edited in place; None where no Einsum spreads
    both (or `width` is 1)."""
    f1, f0, r0 = comps
    if width <= 1 or chunk <= 1:
        return None

    def written(entry: dict[str, Any]) -> dict[str, Any]:  # the phase's loops and spread
        if "loops" in entry or "spatial" in entry:
            return entry
        return {**entry, "loops": list(phase_loops), "spatial": [r0, f0]}

    spreading = [
        n
        for n, entry in einsums.items()
        if {r0, f0} <= set(written(entry).get("spatial", ()))
        and f1 in written(entry).get("loops", ())
    ]
    if not spreading:
        return None
    for n, entry in einsums.items():  # (written out: the part joins the phase's loops)
        einsums[n] = written(entry)
    part = inner_name(f1, taken)
    taken.add(part)
    split_lists(einsums, f1, part)
    for n in spreading:
        einsums[n]["loops"].remove(part)
        einsums[n]["spatial"].append(part)
    return part, width
