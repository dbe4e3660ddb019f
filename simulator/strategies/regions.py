"""How much of a rank an Einsum's filters keep, whatever its other indices: a region.

StreamingLLM's sink keys (`K[e, m : m < SINK]`) are 4 of 4096 keys for every query: an
Einsum over them computed in the tiles that span a whole chunk of keys pads 4 keys to 256.
A filter that bounds one rank's index by numbers and extents alone (`m < SINK`, `m >= 2`)
makes such a region; one that relates it to another index (`m <= p`, a causal or window
band) keeps every value of the rank for some query, and bounds nothing in
:func:`kept_extent` -- but a block of rows keeps only its band of keys
(:func:`block_values`).
"""

from __future__ import annotations

import functools

import numpy as np

from simulator.cascade.ir import Cond, Einsum, index_syms, index_vars, rank_of
from simulator.cascade.ops import condition_form

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "=="}  # both sides negated


def _bound(cond: Cond, var: str, extents: dict[str, int]) -> tuple[int, int] | None:
    """The interval of `var` a filter on it alone keeps (inclusive); None: not such a
    filter."""
    if cond.op not in ("<", "<=", ">", ">=", "=="):
        return None
    if any(sym not in extents for side in (cond.left, cond.right) for sym in index_syms(side)):
        return None
    form = condition_form(cond, extents)  # a * var + c  op  0
    if form is None or [v for v, _c in form.coefs] != [var]:
        return None
    a, k, op = form.coef(var), -form.const, form.op
    if a < 0:
        a, k = -a, -k
        op = _FLIP[op]
    lo, hi = -(2**62), 2**62
    if op in ("<", "<="):
        hi = (k - (1 if op == "<" else 0)) // a
    elif op in (">", ">="):
        lo = -((-(k + (1 if op == ">" else 0))) // a)
    else:
        if k % a:
            return 1, 0  # no integer keeps it
        lo = hi = k // a
    return lo, hi


def kept_extent(e: Einsum, rank: str, extents: dict[str, int]) -> int:
    """How many values of `rank` the Einsum's filters on its index alone keep (the rank's
    extent where none bounds it)."""
    if not e.filters():
        return max(0, int(extents.get(rank, 0)))
    return _kept_extent(e, rank, tuple(sorted(extents.items())))


@functools.lru_cache(maxsize=4096)
def _kept_extent(e: Einsum, rank: str, box: tuple[tuple[str, int], ...]) -> int:
    """:func:`kept_extent` of hashable extents (a search asks at every template)."""
    extents = dict(box)
    full = int(extents.get(rank, 0))
    lo, hi = 0, full - 1
    for acc in e.reads():
        for pos in acc.indices:
            cond = pos.filter
            if cond is None:
                continue
            for var in sorted(set(index_vars(cond.left)) | set(index_vars(cond.right))):
                if rank_of(var) != rank:
                    continue
                bound = _bound(cond, var, extents)
                if bound is not None:
                    lo, hi = max(lo, bound[0]), min(hi, bound[1])
    return max(0, hi - lo + 1)


def block_values(e: Einsum, fibre: str, row: str, block: int, extents: dict[str, int]) -> int:
    """The most (row, fibre) points the Einsum's filters keep in any `block` consecutive
    rows: a window of 2 HW + 1 keys keeps (2 HW + 1) x 256 in a block of 256 rows, 16
    global query rows keep 16 x M. Filters over other ranks keep more, never less."""
    rows, full = int(extents.get(row, 0)), int(extents.get(fibre, 0))
    block = max(1, min(block, rows))
    if not e.filters() or not rows or not full:
        return block * max(0, full)
    return _block_values(e, fibre, row, block, tuple(sorted(extents.items())))


@functools.lru_cache(maxsize=4096)
def _block_values(
    e: Einsum, fibre: str, row: str, block: int, box: tuple[tuple[str, int], ...]
) -> int:
    """:func:`block_values` over hashable extents: each row's interval of the fibre, by
    numpy over every row, summed per block."""
    extents = dict(box)
    rows, full = int(extents[row]), int(extents[fibre])
    at = np.arange(rows, dtype=np.int64)
    lo = np.zeros(rows, dtype=np.int64)
    hi = np.full(rows, full - 1, dtype=np.int64)
    for acc in e.reads():
        for pos in acc.indices:
            cond = pos.filter
            if cond is None:
                continue
            sides = (cond.left, cond.right)
            if any(sym not in extents for side in sides for sym in index_syms(side)):
                continue
            form = condition_form(cond, extents)  # sum(a * var) + c  op  0
            if form is None or form.op not in ("<", "<=", ">", ">=", "=="):
                continue
            by_rank = {rank_of(v): c for v, c in form.coefs}
            if len(by_rank) != len(form.coefs) or not set(by_rank) <= {fibre, row}:
                continue  # another rank's index: keeps more here, never less
            a, b = by_rank.get(fibre, 0), by_rank.get(row, 0)
            rest = b * at + form.const  # a * m + rest  op  0
            if a == 0:  # the rows alone: a row the filter drops keeps nothing
                drop = ~_holds(rest, form.op)
                hi[drop], lo[drop] = -1, 0
                continue
            k, op = -rest, form.op  # a * m  op  k
            if a < 0:
                a, k = -a, -k
                op = _FLIP[op]
            if op in ("<", "<=", "=="):
                hi = np.minimum(hi, (k - (1 if op == "<" else 0)) // a)
            if op in (">", ">=", "=="):
                lo = np.maximum(lo, -((-(k + (1 if op == ">" else 0))) // a))
    widths = np.maximum(0, hi - lo + 1)
    padded = np.zeros(-(-rows // block) * block, dtype=np.int64)
    padded[:rows] = widths
    return int(padded.reshape(-1, block).sum(axis=1).max())  # tiles of rows start at 0


def _holds(value: np.ndarray, op: str) -> np.ndarray:
    return {
        "<": value < 0,
        "<=": value <= 0,
        ">": value > 0,
        ">=": value >= 0,
        "==": value == 0,
    }[op]
