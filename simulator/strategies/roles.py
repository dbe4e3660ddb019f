"""What a cascade's graph says about how to bind it: the roles of its ranks and Einsums.

* the **recurrence** -- an iterative variable (`m1`) whose rank is the outer component of a
  partitioned rank (`M -> M1 x M0`): the cascade walks M chunk by chunk, one pass, and the
  tensors it iterates (`RM`, `RD`, `RNV`) are the running **state**;
* the **row ranks** -- the ranks every state tensor carries besides the iterative one
  (`P`; `G, P` for grouped-query attention): independent rows whose state stays on chip;
* the same-step **dependencies** between compute Einsums (copies are views of their source;
  loop-carried reads of the previous step are not same-step dependencies);
* **GEMM-shaped** Einsums (`OUT = L * R` summed over one rank) and the ranks each Einsum
  iterates and reduces.

Nothing here depends on a name: only on the cascade's declarations and Einsums.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from simulator.cascade.graph import dependency_graph
from simulator.cascade.ir import Cascade, Einsum, Op, Read, index_vars, rank_of
from simulator.cascade.passes import group_pass_index, pass_index
from simulator.spec.arch import Array


@dataclass(frozen=True)
class Roles:
    compute: tuple[str, ...]  # compute Einsums, cascade order
    preds: dict[str, frozenset[str]]  # same-step predecessors among compute Einsums
    iterative: str | None  # the iterative variable (`m1`)
    outer: str | None  # its rank, the outer component of the chunked rank (`M1`)
    chunked: str | None  # the rank walked chunk by chunk (`M`)
    chunk: str | None  # the inner component: one chunk (`M0`)
    state: tuple[str, ...]  # tensors the recurrence iterates (`RM`, `RD`, `RNV`)
    rows: tuple[str, ...]  # ranks every state tensor carries besides the iterative one

    def ancestors(self, einsum: str) -> frozenset[str]:
        seen: set[str] = set()
        todo = list(self.preds[einsum])
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += self.preds[n]
        return frozenset(seen)

    def descendants(self, einsum: str) -> frozenset[str]:
        return frozenset(n for n in self.compute if einsum in self.ancestors(n))


def tile(
    array: str, dim: str, size: int, rank: str, extents: dict[str, int], scale: int = 1
) -> str:
    """A tile factor spanning an array dimension (`PE2D.meshX`) -- or `1 / scale` of it
    (`PE2D.meshX / 2`: part of the array, the rest idle) --, or the whole rank when it is
    smaller than that (decode's single query: the array is partly idle)."""
    extent = extents.get(rank)
    if extent is not None and extent < size // scale:
        return rank
    return f"{array}.{dim}" if scale == 1 else f"{array}.{dim} / {scale}"


def own_chunk(
    array: Array, rank: str, chunk: str, extents: dict[str, int], scale: int = 1
) -> str | int:
    """The tile factor of a chunk the cascade itself names (`K[e, m1*M0 + m0]`, agent
    attention's segments `Q[e, l*S + s]`): the size the cascade or the workload gives it,
    else one spanning the array's rows (:func:`tile`), as FuseMax's."""
    return extents.get(chunk) or tile(array.name, "meshY", array.mesh_y, rank, extents, scale)


def scales(size: int, most: int = 4) -> list[int]:
    """The divisors of an array side a template may use part of it by: 1, 2, 4, ... up to
    `most` (those that divide it, leaving at least 16 PEs a side: a narrower array -- a GPU
    core's 16-row tensor tiles -- is used whole)."""
    out, s = [1], 2
    while s <= most:
        if size % s == 0 and size // s >= 16:
            out.append(s)
        s *= 2
    return out


def einsum_ranks(e: Einsum) -> tuple[str, ...]:
    """The ranks an Einsum iterates (its variables' ranks), in order of appearance."""
    return e.iteration_ranks


def apart_from(cascade: Cascade, roles: Roles, row: str | None) -> list[str]:
    """The compute Einsums that neither walk `row` nor read anything that does (a weight's
    column sums, linear attention's key-value summary under blocks of query rows): work done
    once, before or beside the blocks of rows. None when there is no row rank."""
    if row is None:
        return []

    def walks(n: str) -> bool:
        return row in einsum_ranks(cascade.einsum(n))

    return [
        n for n in roles.compute if not walks(n) and not any(walks(a) for a in roles.ancestors(n))
    ]


def reduced_ranks(e: Einsum) -> tuple[str, ...]:
    return tuple(rank_of(v) for v in e.reduced)


def is_gemm(e: Einsum) -> bool:
    """`OUT[..] = L[..] * R[..]` summed over one or more variables (the components of a
    chunked rank: `AV[f, p] = A[m1, m0, p] * BV[f, m1, m0]`), plain indices."""
    if e.kind != "compute" or not isinstance(e.expr, Op) or e.expr.name != "mul":
        return False
    if len(e.expr.args) != 2 or not all(isinstance(a, Read) for a in e.expr.args):
        return False
    if e.reduce_op != "sum" or not e.reduced:
        return False
    return e.iterative is None


def cascade_roles(cascade: Cascade) -> Roles:
    compute = tuple(e.name for e in cascade.einsums if e.kind == "compute")
    graph = dependency_graph(cascade)
    kinds = {e.name: e.kind for e in cascade.einsums}
    # copies are views: a reader of BK depends on whatever produced K (nothing: an input)
    preds: dict[str, set[str]] = {n: set() for n in compute}
    for edge in graph.edges:
        if edge.carried_by is not None or edge.dst not in preds:
            continue
        if kinds.get(edge.src) == "compute":
            preds[edge.dst].add(edge.src)
    iterative = next(iter(cascade.iterative_map), None)
    outer = rank_of(iterative) if iterative else None
    chunked = chunk = None
    if outer is not None:
        for rank, comps in cascade.partitions:
            if comps and comps[0] == outer and len(comps) == 2:
                chunked, chunk = rank, comps[1]
    state = tuple(cascade.iterative_tensors())
    rows: tuple[str, ...] = ()
    if state:
        common = None
        for t in state:
            ranks = [r for r in cascade.tensor(t).ranks if r != outer]
            common = ranks if common is None else [r for r in common if r in ranks]
        rows = tuple(common or ())
    return Roles(
        compute,
        {n: frozenset(p) for n, p in preds.items()},
        iterative,
        outer,
        chunked,
        chunk,
        state,
        rows,
    )


def _indexed(acc: Read) -> tuple[str, ...]:
    """The variables an access indexes by, in order (its filters' left out)."""
    return tuple(dict.fromkeys(v for pos in acc.indices for v in index_vars(pos.expr)))


def in_place(cascade: Cascade, on_chip: set[str]) -> dict[str, str]:
    """:func:`_in_place` (kept per cascade and tensor set: every template of a search asks)."""
    return dict(_in_place(cascade, frozenset(on_chip)))


@functools.lru_cache(maxsize=1024)
def _in_place(cascade: Cascade, on_chip: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """Tensor -> the tensor it may be computed over, in place (a mapping's `over`): an
    element-wise Einsum (no reduction, nothing iterated) whose result has the ranks of a
    tensor it reads at the same indices, where every other reader of that tensor runs in an
    earlier pass -- the source is dead once overwritten (the softmax's SN over its scores,
    A over SN). Both must be on chip (`on_chip`); a source takes one such tensor."""
    passes = pass_index(cascade)
    by_group = group_pass_index(cascade)

    def _earlier(reader: str, writer: str, src: str) -> bool:
        """`reader` has read all of `src` when `writer` starts: in no rank group later,
        and in a group of `src`'s ranks a pass earlier (a row's maximum over the scores
        before the exponentials that overwrite them)."""
        groups = {cascade.rank_group(r) for r in cascade.tensor(src).ranks}
        return all(lv[reader] <= lv[writer] for lv in by_group.values()) and any(
            by_group[g][reader] < by_group[g][writer] for g in groups if g in by_group
        )

    def _read_as_written(t: str, acc: Read) -> bool:
        """A filtered read writes the result only where its filters hold: in place, the
        rest of the slot still holds the source. Safe where every reader of the result
        reads it under the same filters (a causal softmax's SD, A and A V)."""
        filters = [pos.filter for pos in acc.indices]
        return all(
            [pos.filter for pos in r_acc.indices] == filters
            for reader in cascade.readers(t)
            for r_acc in reader.reads()
            if r_acc.tensor == t
        )

    out: dict[str, str] = {}
    taken: set[str] = set()
    for e in cascade.einsums:
        t = e.output.tensor
        if e.kind != "compute" or e.reduced or e.iterative or t not in on_chip:
            continue
        ranks = cascade.tensor(t).ranks
        for acc in e.reads():
            src = acc.tensor
            if src in taken or src not in on_chip or src == t:
                continue
            if cascade.tensor(src).ranks != ranks or _indexed(acc) != _indexed(e.output):
                continue
            if any(pos.filter for pos in acc.indices) and not _read_as_written(t, acc):
                continue  # a reader of the result would find the source where none was written
            others = [r for r in cascade.readers(src) if r.name != e.name]
            if all(
                passes[r.name] < passes[e.name] or _earlier(r.name, e.name, src) for r in others
            ):
                out[t] = src
                taken.add(src)
                break
    return tuple(out.items())
