"""Filtered iteration spaces at tile granularity: which tiles a mapping computes.

A filter (`K[e, m : m <= p]`, causal; `p < m + W`, a sliding window) removes points of an
Einsum's iteration space. On an array a tile is computed whole or not at all: a tile whose
points are all filtered out is **skipped** (no compute, and no data fetched for it), a tile
with any kept point costs a **whole tile** (padding is honest). Here a tile is one
iteration of the Einsum's temporal tile loops; its other components (spatial, inner) span
their full ranges.

Each filter is an affine comparison of index expressions; over the mapping's components
(`p = p2*P1*P0 + p1*P0 + p0`) it is a linear constraint `h(x) <= c`. A box of components
(fixed loop values, full ranges for the rest) holds a kept point of one constraint iff the
constraint holds at the box's minimum of `h`. Several constraints are tested one by one:
exact for constraints on one linear form (causal, a window band), conservative otherwise
(a tile may count as computed when no single point meets all constraints at once).

Counting: the loops that appear in a constraint are enumerated (vectorised, at most
`MAX_ENUMERATED` combinations) except one axis counted in closed form (each constraint
bounds it to an interval): the widest loop, or the widest chain of a rank's tile loops,
which together index the rank's tiles in order; loops in no constraint multiply the count.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from simulator.cascade.ir import Einsum, IBin, IInt, Index, ISym, IVar, rank_of
from simulator.plan.nest import Partitions, leaf_components
from simulator.support.errors import SpecError

MAX_ENUMERATED = 1 << 22  # loop combinations enumerated per count (the rest in closed form)
FEW_COMBINATIONS = 32  # at most this many enumerated in Python, more with numpy


@dataclass(frozen=True)
class Constraint:
    """sum(coef[c] * c) + const <= 0 over rank components."""

    coef: tuple[tuple[str, int], ...]
    const: int


def _linear(
    ix: Index, partitions: Mapping[str, tuple[str, ...]], extents: Mapping[str, int]
) -> tuple[dict[str, int], int]:
    """An index expression as (component -> coefficient, constant)."""
    if isinstance(ix, IInt):
        return {}, ix.value
    if isinstance(ix, ISym):
        return {}, int(extents[ix.name])
    if isinstance(ix, IVar):
        comps = leaf_components(rank_of(ix.name), partitions)
        out, stride = {}, 1
        for c in reversed(comps):
            out[c] = stride
            stride *= int(extents[c])
        return out, 0
    assert isinstance(ix, IBin)
    (lc, lk), (rc, rk) = (
        _linear(ix.left, partitions, extents),
        _linear(ix.right, partitions, extents),
    )
    if ix.op in ("+", "-"):
        sign = 1 if ix.op == "+" else -1
        out = dict(lc)
        for c, a in rc.items():
            out[c] = out.get(c, 0) + sign * a
        return out, lk + sign * rk
    if lc and rc:
        raise ValueError("not affine")  # the cascade checker rejects this already
    if lc:
        return {c: a * rk for c, a in lc.items()}, lk * rk
    return {c: a * lk for c, a in rc.items()}, lk * rk


def constraints(
    e: Einsum, partitions: Mapping[str, tuple[str, ...]], extents: Mapping[str, int]
) -> tuple[Constraint, ...]:
    """The Einsum's filters as linear constraints over its components (`!=` keeps every
    tile: it removes single points only). Kept by the partitions for the extents they
    depend on (a search's candidates differ in a few)."""
    if not e.filters():
        return ()
    if not isinstance(partitions, Partitions):
        return _constraints(e, partitions, extents)
    frozen = partitions.kept(("frozen",), lambda: tuple(sorted(partitions.items())))
    names = _filter_extents_of(e, frozen)
    return _constraints_of(e, frozen, tuple((n, int(extents[n])) for n in names))


@functools.lru_cache(maxsize=1024)
def _filter_extents_of(
    e: Einsum, frozen: tuple[tuple[str, tuple[str, ...]], ...]
) -> tuple[str, ...]:
    """:func:`_filter_extents` of hashable partitions (kept across a search's candidates)."""
    return _filter_extents(e, dict(frozen))


@functools.lru_cache(maxsize=4096)
def _constraints_of(
    e: Einsum,
    frozen: tuple[tuple[str, tuple[str, ...]], ...],
    extents: tuple[tuple[str, int], ...],
) -> tuple[Constraint, ...]:
    """:func:`_constraints` of hashable partitions and the extents its filters read."""
    return _constraints(e, dict(frozen), dict(extents))


def _filter_extents(e: Einsum, partitions: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The extents an Einsum's filters read as linear constraints."""
    names: dict[str, None] = {}

    def walk(ix: Index) -> None:
        if isinstance(ix, ISym):
            names[ix.name] = None
        elif isinstance(ix, IVar):
            names.update(dict.fromkeys(leaf_components(rank_of(ix.name), partitions)))
        elif isinstance(ix, IBin):
            walk(ix.left)
            walk(ix.right)

    for f in e.filters():
        walk(f.left)
        walk(f.right)
    return tuple(names)


def _constraints(
    e: Einsum, partitions: Mapping[str, tuple[str, ...]], extents: Mapping[str, int]
) -> tuple[Constraint, ...]:
    out = []
    for f in e.filters():
        lc, lk = _linear(f.left, partitions, extents)
        rc, rk = _linear(f.right, partitions, extents)
        g = dict(lc)
        for c, a in rc.items():
            g[c] = g.get(c, 0) - a
        k = lk - rk
        forms = {
            "<=": [(g, k)],
            "<": [(g, k + 1)],
            ">=": [({c: -a for c, a in g.items()}, -k)],
            ">": [({c: -a for c, a in g.items()}, -k + 1)],
            "==": [(g, k), ({c: -a for c, a in g.items()}, -k)],
            "!=": [],
        }[f.op]
        for coef, const in forms:
            out.append(Constraint(tuple(sorted((c, a) for c, a in coef.items() if a)), const))
    return tuple(out)


def active_count(
    cons: tuple[Constraint, ...], loops: tuple[str, ...], extents: Mapping[str, int]
) -> int:
    """How many combinations of `loops` hold a kept point somewhere in their box (every
    other component over its full range); counted once per box."""
    box, read, free = _read_box(cons, loops, extents)
    return _active_count(cons, read, box) * free


def _read_box(
    cons: tuple[Constraint, ...], loops: tuple[str, ...], extents: Mapping[str, int]
) -> tuple[tuple[tuple[str, int], ...], tuple[str, ...], int]:
    """The extents the constraints read (a hashable box), the `loops` among them, and the
    combinations of the other loops: only the read loops are counted, each other one
    multiplies the count by its extent -- one count serves every nest that differs in loops
    no constraint reads."""
    used = {c for con in cons for c, _a in con.coef}
    box = tuple(sorted((c, int(extents[c])) for c in used if c in extents))
    free = math.prod(int(extents[lp]) for lp in loops if lp not in used)
    return box, tuple(lp for lp in loops if lp in used), free


@functools.lru_cache(maxsize=1 << 15)
def _active_count(
    cons: tuple[Constraint, ...], loops: tuple[str, ...], box: tuple[tuple[str, int], ...]
) -> int:
    """:func:`active_count` of a hashable box, over `loops` the constraints all read."""
    extents = dict(box)
    total = math.prod(int(extents[lp]) for lp in loops)
    if not cons or total == 0:
        return total
    rows = _rows(cons, loops, extents)
    if not loops:
        return 1 if all(base <= 0 for _r, base in rows) else 0
    axis = _axis(list(loops), rows, extents)
    others = [c for c in loops if c not in axis]
    combos = math.prod(int(extents[c]) for c in others)
    if combos > MAX_ENUMERATED:
        raise SpecError(
            f"a filter over {', '.join(loops)} spans {combos} tile combinations: too fine to "
            f"count (limit {MAX_ENUMERATED}); use larger tiles"
        )
    return int(_spans(rows, axis, others, extents).sum())


def _rows(
    cons: tuple[Constraint, ...], loops: tuple[str, ...], extents: Mapping[str, int]
) -> list[tuple[dict[str, int], int]]:
    """Each constraint over `loops`, every other component at the value that minimises it
    (a box holds a kept point of the constraint iff it holds there): a(loops) + base <= 0."""
    rows = []
    for con in cons:
        coef = dict(con.coef)
        base = con.const
        for c, a in coef.items():
            if c not in loops:
                base += min(0, a * (int(extents[c]) - 1))
        rows.append(({c: coef[c] for c in loops if c in coef}, base))
    return rows


def _spans(
    rows: list[tuple[dict[str, int], int]],
    axis: tuple[str, ...],
    others: list[str],
    extents: Mapping[str, int],
) -> np.ndarray:
    """Per combination of the `others` loops (enumerated, the first outermost), how many
    values of the `axis` (in closed form: every row bounds it to an interval) meet every
    row; with no axis, 1 where every row holds, else 0."""
    combos = math.prod(int(extents[c]) for c in others)
    n = math.prod(int(extents[c]) for c in axis)
    if combos <= FEW_COMBINATIONS:  # (numpy's fixed costs outweigh a few in Python)
        return np.array(_few_spans(rows, axis, others, extents, n), dtype=np.int64)
    shape = [int(extents[c]) for c in others]
    lo = np.zeros(combos, dtype=np.int64)
    hi = np.full(combos, n - 1, dtype=np.int64)
    for coef, base in rows:
        rest = np.full(shape, base, dtype=np.int64)  # broadcast over the enumerated loops
        for i, c in enumerate(others):
            if c in coef:
                along = [1] * len(others)
                along[i] = shape[i]
                rest = rest + coef[c] * np.arange(shape[i], dtype=np.int64).reshape(along)
        rest = rest.reshape(combos)
        a = coef.get(axis[0], 0) if axis else 0  # the axis's value x enters as a * x
        if a > 0:  # a*x <= -rest
            hi = np.minimum(hi, np.floor_divide(-rest, a))
        elif a < 0:  # x >= rest / -a
            lo = np.maximum(lo, -np.floor_divide(rest, a))
        else:
            hi = np.where(rest <= 0, hi, -1)
    return np.clip(hi - lo + 1, 0, None)


def _few_spans(
    rows: list[tuple[dict[str, int], int]],
    axis: tuple[str, ...],
    others: list[str],
    extents: Mapping[str, int],
    n: int,
) -> list[int]:
    """:func:`_spans` one combination at a time (the same integers, in the same order)."""
    out = []
    for values in itertools.product(*(range(int(extents[c])) for c in others)):
        lo, hi = 0, n - 1
        for coef, base in rows:
            rest = base
            for c, v in zip(others, values, strict=True):
                rest += coef.get(c, 0) * v
            a = coef.get(axis[0], 0) if axis else 0
            if a > 0:  # a*x <= -rest
                hi = min(hi, -rest // a)
            elif a < 0:  # x >= rest / -a
                lo = max(lo, -(rest // a))
            elif rest > 0:
                hi = -1
        out.append(hi - lo + 1 if hi >= lo else 0)
    return out


def _axis(
    used: list[str], rows: list[tuple[dict[str, int], int]], extents: Mapping[str, int]
) -> tuple[str, ...]:
    """The loops counted in closed form: the longest mixed-radix chain among `used`, each
    loop's coefficients (in every row) its predecessor's times the predecessor's extent --
    a rank's tile loops, innermost first (`m1*M0 + m0`). Together they take every value
    x in [0, product of extents) once, and each row reads a * x: one axis. A causal mask
    over two-level tiles enumerates one rank's tiles rather than all but one loop's."""

    def coefs(c: str) -> tuple[int, ...]:
        return tuple(coef.get(c, 0) for coef, _b in rows)

    wide = [c for c in used if int(extents[c]) > 1]  # a chain's coefficients grow strictly
    nxt: dict[str, str] = {}
    for c in wide:
        want = tuple(a * int(extents[c]) for a in coefs(c))
        for d in wide:
            if d != c and d not in nxt.values() and coefs(d) == want:
                nxt[c] = d
                break
    best: tuple[str, ...] = (max(used, key=lambda c: int(extents[c])),)
    for c in wide:
        if c in nxt.values():
            continue  # not a chain's start
        chain = [c]
        while chain[-1] in nxt:
            chain.append(nxt[chain[-1]])
        if math.prod(int(extents[x]) for x in chain) > math.prod(int(extents[x]) for x in best):
            best = tuple(chain)
    return best


def peak_fraction(
    cons: tuple[Constraint, ...],
    outer: tuple[str, ...],
    inner: tuple[str, ...],
    extents: Mapping[str, int],
    limit: int = MAX_ENUMERATED,
) -> float:
    """The most combinations of the `inner` loops holding a kept point under any one
    combination of the `outer` loops, as a share of all of them: what a tile kept across
    the inner loops holds at its fullest (a block of rows keeps only the tiles of keys its
    band computes). Conservative where :func:`active_count` is (never below the truth);
    1 where more than `limit` combinations would be enumerated."""
    total = math.prod(int(extents[lp]) for lp in inner)
    if not cons or not total or not inner:
        return 1.0
    box, counted, free = _read_box(cons, inner, extents)
    _box, reads, _free = _read_box(cons, outer, extents)
    return _peak_count(cons, reads, counted, box, limit) * free / total


@functools.lru_cache(maxsize=1 << 15)
def _peak_count(
    cons: tuple[Constraint, ...],
    outer: tuple[str, ...],
    inner: tuple[str, ...],
    box: tuple[tuple[str, int], ...],
    limit: int = MAX_ENUMERATED,
) -> int:
    """:func:`peak_fraction`'s count over a hashable box, of outer and inner loops the
    constraints all read: enumerated (but one inner axis, counted in closed form), the
    counts summed over the inner ones and the largest taken over the outer ones."""
    extents = dict(box)
    total = math.prod(int(extents[lp]) for lp in inner)
    rows = _rows(cons, (*outer, *inner), extents)
    axis = _axis(list(inner), rows, extents) if inner else ()
    rest = [c for c in inner if c not in axis]
    others = [*outer, *rest]
    if math.prod(int(extents[c]) for c in others) > limit:
        return total  # too fine to count: every tile (an upper bound)
    counts = _spans(rows, axis, others, extents)
    if rest:  # summed over the enumerated inner loops (the last axes)
        outer_combos = math.prod(int(extents[c]) for c in outer)
        counts = counts.reshape(outer_combos, -1).sum(axis=1)
    return int(counts.max())


def active_fraction(
    cons: tuple[Constraint, ...], loops: tuple[str, ...], extents: Mapping[str, int]
) -> float:
    total = math.prod(int(extents[lp]) for lp in loops)
    if not cons or not total:
        return 1.0
    return active_count(cons, loops, extents) / total
