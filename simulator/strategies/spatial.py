"""Which of an Einsum's components spread over an array's PEs: the ones that fill the most.

An Einsum's cycles are its points x cycles per point over the PEs it occupies, so the
components spread across a 1D array should multiply to as many PEs as there are, without
exceeding them: a block's 16 rows leave 112 of a GPU core's 128 lanes idle, its chunk of
128 keys fills them.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Mapping

from simulator.cascade.ir import Cascade, rank_of
from simulator.cascade.ops import count_points, ops_per_point
from simulator.spec.arch import Array


def filling(
    components: Iterable[str],
    sizes: Mapping[str, int],
    pes: int,
    exclude: Iterable[str] = (),
) -> list[str]:
    """The subset of `components` (each with a known size above one, none excluded) whose
    product of sizes is the largest not above `pes`; on a tie the fewest components, then
    the earliest. In the components' order."""
    skip = set(exclude)
    cands = [c for c in dict.fromkeys(components) if c not in skip and sizes.get(c, 1) > 1]
    best: tuple[int, int, tuple[int, ...]] | None = None
    chosen: tuple[str, ...] = ()
    for k in range(len(cands) + 1):
        for subset in itertools.combinations(range(len(cands)), k):
            size = math.prod(sizes[cands[i]] for i in subset)
            if size > pes:
                continue
            key = (-size, k, subset)
            if best is None or key < best:
                best, chosen = key, tuple(cands[i] for i in subset)
    return list(chosen)


def einsum_time(cascade: Cascade, name: str, array: Array, extents: dict[str, int]) -> float:
    """Cycles of an Einsum's points spread over all the array's PEs (to compare arrays):
    the points its filters keep (a window's band, StreamingLLM's 4 sink keys), where every
    rank is sized."""
    return _einsum_time(cascade, name, array, tuple(sorted(extents.items())))


@functools.lru_cache(maxsize=4096)
def _einsum_time(
    cascade: Cascade, name: str, array: Array, box: tuple[tuple[str, int], ...]
) -> float:
    """:func:`einsum_time` of hashable extents (the templates ask at every candidate)."""
    extents = dict(box)
    e = cascade.einsum(name)
    points = math.prod(extents.get(rank_of(v), 1) for v in e.iteration)
    if e.filters() and all(rank_of(v) in extents for v in e.iteration):
        points = count_points(cascade, e, extents)
    cycles = sum(
        n * (array.op(k).cycles if array.op(k) else math.inf)
        for k, n in ops_per_point(cascade, e).items()
        if n
    )
    return points * cycles / array.pes


def registers_hold(cascade: Cascade, name: str, array: Array) -> bool:
    """The array's PE registers hold the Einsum's operands and result (see plan.point)."""
    need = len(dict.fromkeys(a.tensor for a in cascade.einsum(name).reads())) + 1
    return not array.register_component or need <= array.register_words
