"""How much of a rank an Einsum's filters keep, whatever its other indices: a region.

StreamingLLM's sink keys (`K[e, m : m < SINK]`) are 4 of 4096 keys for every query: an
Einsum over them computed in the tiles that span a whole chunk of keys pads 4 keys to 256.
A filter that bounds one rank's index by numbers and extents alone (`m < SINK`, `m >= 2`)
makes such a region; one that relates it to another index (`m <= p`, a causal or window
band) keeps every value of the rank for some query, and bounds nothing here.
"""

from __future__ import annotations

import functools

from simulator.cascade.ir import Cond, Einsum, index_syms, index_vars, rank_of
from simulator.cascade.ops import condition_form


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
        op = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "=="}[op]
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
