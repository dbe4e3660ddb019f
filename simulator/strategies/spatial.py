"""Which of an Einsum's components spread over an array's PEs: the ones that fill the most.

An Einsum's cycles are its points x cycles per point over the PEs it occupies, so the
components spread across a 1D array should multiply to as many PEs as there are, without
exceeding them: a block's 16 rows leave 112 of a GPU core's 128 lanes idle, its chunk of
128 keys fills them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping


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
