"""Loop nests and data reuse: the shared vocabulary of the performance and energy models.

Pipeline: planning. Phase plans, Timeloop views and the cycle engine's programs read these
nests.

Ranks split into components (P -> P2, P1, P0) by the cascade (`m1*M0 + m0`) and the mapping
(`partitions:`). An Einsum iterates components; a mapping orders some of them as temporal
tile loops, spreads some over the PEs (spatial) and leaves the rest as inner temporal loops.

Reuse follows Timeloop's rule for a buffer between DRAM and the arrays: a tensor kept below
loop X is refetched for every iteration of the loops at or above X, except the innermost
run of loops that do not index it (its tile is unchanged across them). Hence

    transfers = size x product(extents of the non-indexing loops above the keep point that
                               are outside some indexing loop)

Loops of extent 1 are ignored. `keep: stream` means no buffer reuse (every loop counts);
`keep: top` means the whole tensor stays on chip (fetched once).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from simulator.cascade.ir import Cascade, Einsum, rank_of
from simulator.support.errors import Loc, NotDivisible, SpecError


@dataclass(frozen=True)
class Nest:
    """The loop nest of one Einsum under a mapping."""

    einsum: str
    tile_loops: tuple[str, ...]  # temporal loops above the arrays, outermost first
    inner: tuple[str, ...]  # temporal loops at the PEs, outermost first
    spatial: tuple[str, ...]  # components spread over the PEs
    comps: tuple[str, ...]  # every component the Einsum iterates

    @property
    def loops(self) -> tuple[str, ...]:
        return self.tile_loops + self.inner


class Partitions(dict):
    """Rank -> components, only read once built: planning a point asks for the leaf
    components of the same ranks and tensors thousands of times, so they are kept here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._leaves: dict[str, tuple[str, ...]] = {}
        self._kept: dict[tuple, Any] = {}

    def leaves(self, rank: str) -> tuple[str, ...]:
        found = self._leaves.get(rank)
        if found is None:
            found = self._leaves[rank] = _leaf_components(rank, self)
        return found

    def kept(self, key: tuple, work: Callable[[], Any]) -> Any:
        """`work()`'s answer for `key`, worked out once for these partitions."""
        found = self._kept.get(key, _MISSING)
        if found is _MISSING:
            found = self._kept[key] = work()
        return found


_MISSING = object()


def kept_by_partitions(work: Callable[..., Any]) -> Callable[..., Any]:
    """`work(*args, partitions)`'s answers kept by the Partitions it is given (its last
    argument; the other arguments hashable, the answer never changed): planning asks for
    them per candidate mapping and phase, and they do not depend on the tile sizes."""
    name = work.__name__

    @functools.wraps(work)
    def kept(*args: Any) -> Any:
        partitions = args[-1]
        if not isinstance(partitions, Partitions):
            return work(*args)
        key = (name, *args[:-1])
        found = partitions._kept.get(key, _MISSING)
        if found is _MISSING:
            found = partitions._kept[key] = work(*args)
        return found

    return kept


@functools.lru_cache(maxsize=64)
def merged_partitions(
    cascade: Cascade,
    mapping_partitions: tuple[tuple[str, tuple[str, ...]], ...],
    loc: Loc | None = None,
) -> Partitions:
    """The cascade's partitions with the mapping's. The same object for every candidate
    mapping of a search (kept for the last 64 questions; never changed once built), so what
    it keeps serves them all."""
    parts = Partitions(cascade.partitions)
    for rank, comps in mapping_partitions:
        if rank in parts and parts[rank] != comps:
            raise SpecError(
                f"the mapping splits {rank} into {' x '.join(comps)} but the cascade "
                f"splits it into {' x '.join(parts[rank])}",
                loc,
            )
        parts[rank] = comps
    return parts


def leaf_components(rank: str, partitions: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    if isinstance(partitions, Partitions):
        return partitions.leaves(rank)
    return _leaf_components(rank, partitions)


def _leaf_components(rank: str, partitions: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    comps = partitions.get(rank)
    if not comps:
        return (rank,)
    out: list[str] = []
    for c in comps:
        out += _leaf_components(c, partitions)
    return tuple(out)


def einsum_components(e: Einsum, partitions: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    out: list[str] = []
    for v in e.iteration:
        for c in leaf_components(rank_of(v), partitions):
            if c not in out:
                out.append(c)
    return tuple(out)


@kept_by_partitions
def tensor_components(
    cascade: Cascade, tensor: str, partitions: Mapping[str, tuple[str, ...]]
) -> tuple[tuple[str, ...], frozenset[str]]:
    """Leaf components of a tensor, and those of its iterative rank (only one step is live)."""
    decl = cascade.tensor(tensor)
    comps: list[str] = []
    for r in decl.ranks:
        comps += [c for c in leaf_components(r, partitions) if c not in comps]
    iterative: set[str] = set()
    info = cascade.iterative_tensors().get(tensor)
    if info is not None:
        iterative.update(leaf_components(decl.ranks[info[0]], partitions))
    return tuple(comps), frozenset(iterative)


def resolve_extents(
    known: dict[str, int],
    partitions: Mapping[str, tuple[str, ...]],
    where: str,
    loc: Loc | None = None,
    padded: frozenset[str] = frozenset(),
) -> dict[str, int]:
    """Fill in partition components (one unknown per partition) and check divisibility.

    A rank listed in `padded` may be rounded up to a whole number of tiles (its last tile
    partly empty); any other rank the tiles do not divide is an error, never truncated."""
    out = dict(known)
    changed = True
    while changed:
        changed = False
        for rank, comps in partitions.items():
            missing = [c for c in comps if c not in out]
            if rank in out and len(missing) == 1:
                rest = math.prod(out[c] for c in comps if c != missing[0])
                if rest > 0 and rank in padded and out[rank] % rest:
                    out[missing[0]] = -(-out[rank] // rest)
                    changed = True
                    continue
                if rest <= 0 or out[rank] % rest:
                    raise NotDivisible(
                        f"{where}: {rank}={out[rank]} is not divisible by "
                        f"{' x '.join(c for c in comps if c != missing[0])} = {rest};"
                        " the tiles come from the mapping's factors (an array's size: --pe-dim)"
                        " -- choose sizes that divide it, or a sequence length they divide",
                        loc,
                    )
                out[missing[0]] = out[rank] // rest
                changed = True
            elif rank not in out and not missing:
                out[rank] = math.prod(out[c] for c in comps)
                changed = True
    for rank, comps in partitions.items():
        if rank in out and all(c in out for c in comps):
            product = math.prod(out[c] for c in comps)
            if rank in padded and product >= out[rank]:
                continue
            if product != out[rank]:
                raise SpecError(
                    f"{where}: {rank}={out[rank]} but "
                    f"{' x '.join(f'{c}={out[c]}' for c in comps)} = "
                    f"{math.prod(out[c] for c in comps)}",
                    loc,
                )
    return out


@kept_by_partitions
def build_nest(
    e: Einsum,
    phase_loops: tuple[str, ...],
    loops: tuple[str, ...] | None,
    inner: tuple[str, ...] | None,
    spatial: tuple[str, ...],
    partitions: Mapping[str, tuple[str, ...]],
) -> Nest:
    comps = einsum_components(e, partitions)
    tile = tuple(c for c in (loops if loops is not None else phase_loops) if c in comps)
    spat = tuple(c for c in spatial if c in comps and c not in tile)
    if inner is None:
        inner_loops = tuple(c for c in comps if c not in tile and c not in spat)
    else:
        inner_loops = tuple(c for c in inner if c in comps and c not in tile and c not in spat)
    return Nest(e.name, tile, inner_loops, spat, comps)


def _levels(nest: Nest, keep: str | None) -> tuple[str, ...]:
    """Loops at or above the keep point (whose iterations can refetch the tile)."""
    if keep == "top":
        return ()
    if keep in nest.tile_loops:
        return nest.tile_loops[: nest.tile_loops.index(keep) + 1]
    return nest.loops  # stream, or a keep point this Einsum does not iterate


def transfer_factor(
    nest: Nest, tensor_comps: tuple[str, ...], keep: str | None, extents: Mapping[str, int]
) -> int:
    """How many times the tensor's data crosses into the keep level (1 = once)."""
    levels = [lv for lv in _levels(nest, keep) if extents[lv] > 1]
    while levels and levels[-1] not in tensor_comps:
        levels.pop()  # innermost non-indexing loops: the tile is reused across them
    return math.prod(extents[lv] for lv in levels if lv not in tensor_comps)


def reuse_signature(
    nest: Nest, tensor_comps: tuple[str, ...], keep: str | None, extents: Mapping[str, int]
) -> tuple[tuple[str, int], ...]:
    """Two accesses with the same signature share one buffered copy of the tensor."""
    levels = [lv for lv in _levels(nest, keep) if extents[lv] > 1]
    while levels and levels[-1] not in tensor_comps:
        levels.pop()
    return tuple((lv, extents[lv]) for lv in levels)


def tile_values(
    nest: Nest,
    tensor_comps: tuple[str, ...],
    iterative: frozenset[str],
    keep: str | None,
    extents: Mapping[str, int],
) -> int:
    """Values of the tensor held on chip at the keep point (an iterative rank keeps 1 step)."""
    outside = set(_levels(nest, keep))
    return math.prod(extents[c] for c in tensor_comps if c not in outside and c not in iterative)


def held_loops(
    nest: Nest, tensor_comps: tuple[str, ...], iterative: frozenset[str], keep: str | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the loops at or above the keep point, the tile loops below it that the held tile
    spans): a tile kept at `keep` holds the values of every iteration of the second."""
    outside = _levels(nest, keep)
    spanned = tuple(
        c for c in nest.tile_loops if c in tensor_comps and c not in outside and c not in iterative
    )
    return outside, spanned


def tensor_size(tensor_comps: tuple[str, ...], extents: Mapping[str, int]) -> int:
    return math.prod(extents[c] for c in tensor_comps)
