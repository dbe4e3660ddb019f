"""How far from the limit: lower bounds on the compute time and the DRAM traffic of a point.

Pipeline: beside pricing -- it reads a plan (the cascade, its binding and extents, the
architecture, the workload) and nothing timed, so a result can be set against what any
schedule on the same arrays, buffer and bandwidth must spend:

* **compute bound** -- the arrays busy only with useful work: an Einsum's kept points (a
  filter's masked points are free) times the PE cycles of its operations on an array (the
  architecture's operation table), over that array's PEs. Any binding may split an Einsum
  between the arrays whose PEs can run it: the bound is the least time in which the arrays
  finish all the work so split (two arrays: exact, by the ratio of the Einsums' times on
  each; more: the binding's own split);
* **DRAM bound** (values, one (batch, head) instance, times the instances) -- every input
  value some kept point reads, read once (a filter that no point of a value passes -- the
  keys before a decode step's window -- leaves it unread), and every output written once,
  plus the re-reads no on-chip storage of M values avoids (M: the global buffer and every
  PE's registers together, all the fast memory a schedule may reuse data in):
  - a GEMM-shaped Einsum on inputs, `a x b` by `b x c`: `2abc / sqrt(M) - 2M + ac` (the
    tight bound of Smith et al., after Hong and Kung) in place of the compulsory
    `ab + bc + ac` when larger;
  - an attention-shaped pair -- a contraction of inputs (Q, K over `d`) whose key rank a
    later contraction reduces, reading what the first made and an input no row indexes
    (V: every row needs it, so every block of rows reads it again):
    `q(d + f) + x(d + f) q / g` with the rows
    held on chip `g = M / (d + f)` (each holds its Q row and its output row), at least one
    pass over K and V; for one head and d = f this is FlashAttention's `2qd + 4xqd^2 / M`.
    K and V that fit in M whole are read once (no re-reads, however many rows);
    A filter scales the re-reads by the share of points it keeps (a causal block needs the
    keys up to its diagonal); one tensor read as both K and V (a latent cache) is re-read
    once per block. A schedule may instead send the `q x` scores through DRAM once (an
    FFN's hidden activations, kernel by kernel): the bound takes the cheaper of the two;
  - a multi-pass cascade whose per-row live footprint (a whole fibre of `L` values) exceeds
    the buffer writes and reads back the excess at every pass boundary:
    `rows x (passes - 1) x 2 x (L - M)` for its largest such fibre;
* **latency bound** = max(compute bound, DRAM bound x bytes per value / bandwidth).

Which form applies is read from the cascade's Einsums and ranks (contractions, reductions,
which operands are inputs) and its passes, never from its name.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

from simulator.cascade.ir import Cascade, Einsum, Op, Read, index_vars, rank_of
from simulator.cascade.ops import ops_per_point
from simulator.cascade.passes import analyze_passes
from simulator.plan.costs import EinsumCost, cycles_per_point
from simulator.plan.masks import active_fraction, constraints
from simulator.plan.nest import leaf_components
from simulator.plan.point import PointPlan


@dataclass(frozen=True)
class Bounds:
    compute_s: float  # the busiest array with only useful work
    compute_array: str  # which array that is
    traffic_values: float  # DRAM values, all instances
    traffic_bytes: float
    memory_s: float  # traffic_bytes / bandwidth
    latency_s: float  # max(compute_s, memory_s)
    binding: str  # "compute (ARRAY)" or "DRAM"
    parts: tuple[tuple[str, float], ...]  # (what, values per instance) of the DRAM bound


def _indexed(access) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v for pos in access.indices for v in index_vars(pos.expr)))


def _contraction(e: Einsum) -> bool:
    return (
        e.kind == "compute"
        and isinstance(e.expr, Op)
        and e.expr.name == "mul"
        and len(e.expr.args) == 2
        and all(isinstance(a, Read) for a in e.expr.args)
        and e.reduce_op == "sum"
        and bool(e.reduced)
        and e.iterative is None
    )


@functools.lru_cache(maxsize=64)
def _aliases(cascade: Cascade) -> dict[str, str]:
    """Each copy's source input (copies of copies followed); read, never changed."""
    out = dict(cascade.input_views)  # an input the mapper's view reads under another name
    for e in cascade.einsums:
        if e.kind == "copy" and isinstance(e.expr, Read):
            src = e.expr.access.tensor
            out[e.output.tensor] = out.get(src, src)
    return out


def _extent(ranks, cascade: Cascade, extents: dict[str, int]) -> int:
    """Values spanned by rank components (a partition's components each once)."""
    return math.prod(int(extents[r]) for r in dict.fromkeys(ranks))


@dataclass(frozen=True)
class _Attention:
    q: int
    x: int
    d: int
    f: int
    kept: float  # share of the score points a filter keeps
    shared: bool = False  # the keys and the values are one tensor (a latent cache)


def _components(cascade: Cascade, ranks: Iterable[str]) -> set[str]:
    """The components ranks span: a split rank's parts (M1, M0 of M), each part once. A
    tensor over one part of a split rank (a convolution's taps S of M = N x S) spans that
    part, not the whole rank."""
    return {c for r in ranks for c in cascade.group_components(r)}


def _parts(cascade: Cascade, variables: Iterable[str]) -> set[str]:
    """The components the variables walk (:func:`_components` of their ranks)."""
    return _components(cascade, (rank_of(v) for v in variables))


def _attention_parts(
    cascade: Cascade, extents: dict[str, int], kept: dict[str, float]
) -> tuple[list[_Attention], set[str]]:
    """Contraction pairs shaped like attention (see module docstring); the Einsums used.
    `extents`: every component's."""
    aliases = _aliases(cascade)
    inputs = set(cascade.inputs)
    contractions = [e for e in cascade.einsums if _contraction(e)]
    parts, used = [], set()
    for c1 in contractions:
        left, right = (a.access for a in c1.expr.args)  # type: ignore[union-attr]
        if not all(aliases.get(a.tensor, a.tensor) in inputs for a in (left, right)):
            continue
        out_groups = _parts(cascade, _indexed(c1.output))
        for key_side, row_side in ((right, left), (left, right)):
            key_groups = _parts(cascade, _indexed(key_side))
            row_groups = _parts(cascade, _indexed(row_side))
            keys = (key_groups - row_groups) & out_groups
            if not keys:
                continue
            rows = (row_groups & out_groups) - keys
            after = _derived_from(cascade, c1.output.tensor)

            c2 = next(
                (e for e in contractions if _shares_a_value(cascade, c1, e, keys, rows, after)),
                None,
            )
            if c2 is None:
                continue
            value = next(
                a.access
                for a in c2.expr.args  # type: ignore[union-attr]
                if aliases.get(a.access.tensor, a.access.tensor) in inputs
            )
            value_groups = _parts(cascade, _indexed(value)) - keys
            contracted = _parts(cascade, c1.reduced)
            q, x, d, f = (
                math.prod(extents[c] for c in part)
                for part in (rows, keys, contracted, value_groups)
            )
            keyed = aliases.get(key_side.tensor, key_side.tensor)
            same = aliases.get(value.tensor, value.tensor) == keyed
            parts.append(_Attention(q, x, d, f, kept.get(c1.name, 1.0), same))
            used |= {c1.name, c2.name}
            break
    return parts, used


def _shares_a_value(
    cascade: Cascade, c1: Einsum, e: Einsum, keys: set[str], rows: set[str], after: set[str]
) -> bool:
    """Is `e` the second contraction of an attention-shaped pair with `c1`: it reduces the
    keys (and nothing else), reads what `c1` made (through any Einsums between), and its
    other operand is an input no row indexes -- a value every row needs (V), the reason each
    block of rows reads it again? A per-row operand (a one-hot target `Y[c, p]`) is read
    once whatever the blocks."""
    reduced = _parts(cascade, e.reduced)
    if e is c1 or not reduced & keys or reduced - keys:
        # (a contraction reducing more than the keys -- a mixture's output projection over
        # the heads and their values, `Y[o, p] = GA[f, h, p] WO[f, h, o]` -- is no A V: the
        # rows need no whole value row per key)
        return False
    aliases, inputs = _aliases(cascade), set(cascade.inputs)
    reads = [a.access for a in e.expr.args]  # type: ignore[union-attr]
    if not any(aliases.get(a.tensor, a.tensor) in after for a in reads):
        return False
    value = next((a for a in reads if aliases.get(a.tensor, a.tensor) in inputs), None)
    if value is None:
        return False
    return not _parts(cascade, _indexed(value)) & rows


def _derived_from(cascade: Cascade, tensor: str) -> set[str]:
    """Every tensor computed from `tensor` (itself included, views followed)."""
    out = {tensor}
    changed = True
    while changed:
        changed = False
        for e in cascade.einsums:
            if e.output.tensor not in out and any(a.tensor in out for a in e.reads()):
                out.add(e.output.tensor)
                changed = True
    return out


@functools.lru_cache(maxsize=64)
def _whole_fibres(cascade: Cascade) -> tuple[tuple[str, str, int], ...]:
    """(tensor, rank, passes) of the intermediates whose whole fibre lives across passes
    (the passes analysis of the cascade, computed once per cascade)."""
    outside = set(cascade.inputs) | set(cascade.outputs)
    return tuple(
        (f.tensor, f.rank, f.passes)
        for f in analyze_passes(cascade).fibers
        if f.passes > 1 and f.tensor not in outside and f.live_footprint == f.rank
    )


def dram_bound_values(
    cascade: Cascade,
    extents: dict[str, int],
    buffer_values: float,
    kept: dict[str, float] | None = None,
    inputs_read: dict[str, float] | None = None,
) -> list[tuple[str, float]]:
    """The DRAM bound of one instance as named parts (values); see module docstring.
    `kept`: the share of an Einsum's points its filters keep; `inputs_read`: the share of
    an input's values some kept point reads (:func:`input_shares`; default all)."""
    groups = _groups(cascade)
    full = {g: _extent(cascade.group_components(g), cascade, extents) for g in set(groups.values())}
    return list(
        _dram_parts(
            cascade,
            tuple(sorted(full.items())),
            buffer_values,
            tuple(sorted((kept or {}).items())),
            tuple(sorted((inputs_read or {}).items())),
            tuple(sorted(_component_extents(cascade, extents, full).items())),
        )
    )


def _component_extents(
    cascade: Cascade, extents: dict[str, int], full: dict[str, int]
) -> dict[str, int]:
    """Every component's extent. A split rank whose parts are not all sized counts as
    unsplit: its whole extent on its first part, 1 on the others (what the rank spans,
    never more than its values)."""
    out: dict[str, int] = {}
    for group, whole in full.items():
        comps = cascade.group_components(group)
        if all(c in extents for c in comps):
            out.update((c, int(extents[c])) for c in comps)
        else:
            out.update((c, whole if i == 0 else 1) for i, c in enumerate(comps))
    return out


@functools.lru_cache(maxsize=64)
def _groups(cascade: Cascade) -> dict[str, str]:
    """Each rank's group (read, never changed, by the callers)."""
    return {r: cascade.rank_group(r) for t in cascade.tensors for r in t.ranks}


@functools.lru_cache(maxsize=1024)
def _dram_parts(
    cascade: Cascade,
    full_extents: tuple[tuple[str, int], ...],
    buffer_values: float,
    kept_shares: tuple[tuple[str, float], ...],
    read_shares: tuple[tuple[str, float], ...],
    leaf_extents: tuple[tuple[str, int], ...],
) -> tuple[tuple[str, float], ...]:
    """:func:`dram_bound_values` over the full extent of each rank group: the same for every
    tiling of a point (kept: a search's candidates ask it each)."""
    kept, inputs_read, full = dict(kept_shares), dict(read_shares), dict(full_extents)
    leaf = dict(leaf_extents)

    def size(tensor: str) -> int:
        return math.prod(leaf[c] for c in _components(cascade, cascade.tensor(tensor).ranks))

    def side(variables: set[str]) -> int:
        return math.prod(leaf[c] for c in _parts(cascade, variables))

    parts: list[tuple[str, float]] = []
    views = dict(cascade.input_views)  # another input's data: read once, under its name
    for t in cascade.inputs:
        if t not in views:
            parts.append((f"read {t}", float(size(t)) * inputs_read.get(t, 1.0)))
    for t in cascade.outputs:
        parts.append((f"write {t}", float(size(t))))
    m = max(1.0, float(buffer_values))
    attention, used = _attention_parts(cascade, leaf, kept)
    for a in attention:
        rows_on_chip = m / (a.d + a.f)
        blocks = a.q / rows_on_chip if rows_on_chip > 0 else math.inf
        per_key = a.d if a.shared else a.d + a.f  # one tensor serving as K and V: once
        # keys and values that fit on chip whole are read once, however many blocks of rows
        # pass them (a mixture of heads' 32 heads of rows over one shared K and V)
        fits = a.x * per_key <= m
        reread = 0.0 if fits else (a.x * per_key) * max(0.0, blocks * a.kept - 1.0)
        # ... or the scores leave the chip once and come back once (kernel by kernel): a
        # schedule takes the cheaper, so the bound may ask no more than that
        through_dram = 2.0 * a.q * a.x * a.kept
        parts.append(("attention: K and V re-read per block of rows", min(reread, through_dram)))
    aliases = _aliases(cascade)
    inputs = set(cascade.inputs)
    for e in cascade.einsums:
        if not _contraction(e) or e.name in used:
            continue
        left, right = (a.access for a in e.expr.args)  # type: ignore[union-attr]
        if not all(aliases.get(x.tensor, x.tensor) in inputs for x in (left, right)):
            continue
        lv, rv, ov = (set(_indexed(acc)) for acc in (left, right, e.output))
        if lv & rv & ov:
            continue  # batched: not one GEMM
        a, b, c = (side(vs) for vs in ((ov & lv) - rv, (lv & rv) - ov, (ov & rv) - lv))
        # Smith et al.'s tight bound on a GEMM's reads (arXiv 1702.02017): 2abc / sqrt(M)
        # less its lower-order 2M, beyond the compulsory reads of both operands
        extra = max(0.0, 2 * a * b * c / math.sqrt(m) - 2 * m - (a * b + b * c))
        parts.append((f"GEMM {e.name}: re-reads", extra * kept.get(e.name, 1.0)))
    spill = 0.0
    for tensor, rank, passes in _whole_fibres(cascade):
        length = full[rank]
        others = size(tensor) / length
        spill = max(spill, others * (passes - 1) * 2 * max(0.0, length - m))
    if spill:
        parts.append(("multi-pass fibres beyond the buffer", spill))
    return tuple(parts)


def _times(point: PointPlan, c: EinsumCost) -> dict[str, float]:
    """An Einsum's useful work on each array that can run it (cycles, one instance), its
    operations chained through their units wherever the array allows it (any mapping may
    say `chaining: pipelined` there), else as the mapping runs them."""
    useful = c.useful_points if c.useful_points is not None else c.points
    out = {}
    rows = _array_cycles(point.cascade, c.einsum, point.arch, point.mapping.chaining)
    for name, pes, cpp in rows:
        if cpp is None:  # an op the array lacks
            if name == c.array:  # (a composite the mapping's own file declares)
                out[name] = useful * c.cycles_per_point / pes
            continue
        if name == c.array:
            cpp = min(cpp, c.cycles_per_point)
        out[name] = useful * cpp / pes
    return out


@functools.lru_cache(maxsize=4096)
def _array_cycles(
    cascade: Cascade, einsum: str, arch, chaining: tuple
) -> tuple[tuple[str, int, float | None], ...]:
    """Per array (name, PEs, cycles per point of the Einsum; None where the array lacks
    one of its ops), chained wherever the array allows it, else as the mapping's
    `chaining` says (asked for every candidate of a search: kept)."""
    e = cascade.einsum(einsum)
    ops = ops_per_point(cascade, e)
    rows = []
    for array in arch.arrays:
        if any(array.op(k) is None for k, n in ops.items() if n):
            rows.append((array.name, array.pes, None))
            continue
        mode = "pipelined" if array.chains else dict(chaining).get(array.name, "sequential")
        rows.append((array.name, array.pes, cycles_per_point(cascade, e, array, mode, None)))
    return tuple(rows)


def compute_bound_cycles(point: PointPlan) -> tuple[float, str]:
    """The least cycles (one instance) in which the arrays finish the useful work, each
    Einsum split freely between the arrays able to run it; and what sets it."""
    names = [a.name for a in point.arch.arrays]
    times = [_times(point, c) for c in point.costs if c.array in names]
    if len(names) != 2:
        loads = dict.fromkeys(names, 0.0)
        for c, t in zip((c for c in point.costs if c.array in names), times, strict=True):
            loads[c.array] += t[c.array]
        busiest = max(loads, key=loads.__getitem__)
        return loads[busiest], busiest
    a, b = names
    load_a = sum(t[a] for t in times if b not in t)
    load_b = sum(t[b] for t in times if a not in t)
    # cheapest on `a` first; an Einsum with no useful work (a region its filters empty) last
    flexible = sorted(
        (t for t in times if a in t and b in t),
        key=lambda t: t[a] / t[b] if t[b] else math.inf,
    )
    load_b += sum(t[b] for t in flexible)
    for t in flexible:  # move work to `a` where it is cheapest there, until balanced
        if load_a + t[a] <= load_b - t[b]:
            load_a, load_b = load_a + t[a], load_b - t[b]
            continue
        if load_a < load_b:
            share = (load_b - load_a) / (t[a] + t[b])
            load_a, load_b = load_a + share * t[a], load_b - share * t[b]
        break
    if abs(load_a - load_b) <= 1e-9 * max(load_a, load_b):
        return max(load_a, load_b), f"{a}+{b}"
    return (load_a, a) if load_a > load_b else (load_b, b)


def input_shares(point: PointPlan) -> dict[str, float]:
    """The share of each filtered input's values that some kept point reads: over the
    Einsums reading it (directly or through a copy such as `BK = K[e, m1*M0 + m0]`), the
    largest share of the read positions a filter keeps. The largest, not the union, so never
    more than the values truly read: a lower bound stays one."""
    cascade = point.cascade
    if not any(e.filters() for e in cascade.einsums):
        return {}  # every value of every input is read
    aliases = _aliases(cascade)
    inputs = set(cascade.inputs)
    shares: dict[str, float] = {}
    for e in cascade.einsums:
        if e.output.tensor in aliases:
            continue  # a copy (BK of K): its readers read the input
        cons = constraints(e, point.partitions, point.extents)
        for acc in e.reads():
            source = aliases.get(acc.tensor, acc.tensor)
            if source not in inputs:
                continue
            share = 1.0
            if cons:
                loops = tuple(
                    dict.fromkeys(
                        c
                        for v in _indexed(acc)
                        for c in leaf_components(rank_of(v), point.partitions)
                    )
                )
                share = active_fraction(cons, loops, point.extents)
            shares[source] = max(shares.get(source, 0.0), share)
    return {t: s for t, s in shares.items() if s < 1.0}


def onchip_values(arch) -> float:
    """All the fast memory a schedule may keep data in: the global buffer and the
    registers of every PE of every array (values)."""
    per_core = sum(a.pes * a.register_words for a in arch.arrays)
    if arch.core_memory is not None:
        per_core += arch.core_memory.capacity_bytes / arch.value_bytes
    return arch.buffer_values + arch.cores * per_core


def point_bounds(point: PointPlan) -> Bounds:
    """The bounds of a planned point (all instances)."""
    arch = point.arch
    cycles, busiest = compute_bound_cycles(point)
    compute_s = cycles * point.instances / arch.frequency_hz
    if arch.cores > 1:  # the cores share the work at best evenly
        compute_s /= arch.cores
    kept = {c.einsum: _kept(c) for c in point.costs if c.useful_points is not None}
    parts = dram_bound_values(
        point.cascade, point.extents, onchip_values(arch), kept, input_shares(point)
    )
    values = sum(v for _w, v in parts) * point.instances
    traffic = values * arch.value_bytes
    memory_s = traffic / arch.dram.bandwidth_bytes_per_s
    latency = max(compute_s, memory_s)
    binds = f"compute ({busiest})" if compute_s >= memory_s else "DRAM"
    return Bounds(compute_s, busiest, values, traffic, memory_s, latency, binds, tuple(parts))


def _kept(c: EinsumCost) -> float:
    """The share of an Einsum's points its filters keep."""
    if c.useful_points is None or not c.points:
        return 1.0
    dense = c.points / (1 - c.skipped) if c.skipped < 1 else c.points
    return c.useful_points / dense if dense else 1.0
