"""Partitioning a rank into chunks: M becomes M1 chunks of M0, every reduction over m a
reduction over (m1, m0).

    sum_m f(m) = sum_{m1} sum_{m0} f(m1*M0 + m0)        (any associative reduction)

Holds for any reduction whose operator is associative and commutative (sum, max, min,
prod, the user operators with an identity), so it changes no value; it changes no pass
count either, but it is what lets a later rule (iterative reduction, running maximum)
work chunk by chunk. Inputs indexed by M get a partition view (`BK[e, m1, m0] = K[e,
m1*M0 + m0]`, the paper's names); computed tensors are declared over (M1, M0) directly.

Conditions checked: M is an unpartitioned rank with more than one pass (the only ranks a
split can help), every access at an M position is the plain variable `m` (no filters,
offsets or constants on it anywhere), no tensor has M twice, no result of the cascade is
indexed by M (results keep their shapes), no Einsum iterates over m,
the names M1, M0, m1, m0 are free, and the extent of M has a divisor to chunk by (the
largest one at most M/4, so the checks see several chunks).
"""

from __future__ import annotations

from collections.abc import Iterator

from simulator.cascade.draft import (
    edited,
    fresh,
    map_reads,
    names_in_use,
    statement,
)
from simulator.cascade.ir import Access, Cascade, IndexPos, IVar, Read, index_vars
from simulator.cascade.rewrite.rules.base import Context, Rewrite
from simulator.support.units import divisors

NAME = "partition-rank"
STABLE = True
AT_EVERY_SITE = False


def chunk(extent: int) -> int | None:
    """The chunk extent M0: the largest divisor of M at most M/4 (at least 2), else None."""
    options = [d for d in divisors(extent) if 2 <= d <= extent // 4]
    return max(options) if options else None


def _splittable(c: Cascade, rank: str) -> bool:
    if rank in dict(c.partitions) or any(rank in comps for _, comps in c.partitions):
        return False
    taken = names_in_use(c)
    low = rank.lower()
    if {f"{rank}1", f"{rank}0"} & taken or any(
        v in (f"{low}1", f"{low}0") for e in c.einsums for v in e.iteration
    ):
        return False
    for t in c.tensors:
        if t.ranks.count(rank) > 1:
            return False
    if any(rank in c.tensor(t).ranks for t in c.outputs):
        return False  # the results keep their shapes
    for e in c.einsums:
        if e.iterative == low:
            return False
        if any(low in index_vars(f.left) + index_vars(f.right) for f in e.filters()):
            return False
        for acc in (e.output, *e.reads()):
            ranks = c.tensor(acc.tensor).ranks
            for pos, r in zip(acc.indices, ranks, strict=True):
                if r == rank and not (
                    isinstance(pos.expr, IVar) and pos.expr.name == low and pos.filter is None
                ):
                    return False
    return True


def split_size(context: Context, rank: str) -> int | None:
    """The chunk extent this rule splits `rank` by, or None where it does not apply."""
    passes = dict((g, n) for g, n, _ in context.passes.per_rank).get(rank, 1)
    if passes <= 1 or rank not in context.shapes or not _splittable(context.cascade, rank):
        return None
    return chunk(context.shapes[rank])


def unchunkable(context: Context, var: str) -> str | None:
    """The rank of `var` when a rule may work on it one element at a time instead of one
    chunk at a time: an unpartitioned rank with more than one pass that this rule cannot
    split (a result is indexed by it, as a softmax's or a LayerNorm's output is, or its
    extent has no chunk size). Where the rank can be split, the per-chunk form is the one
    to find (one correction or merge per chunk instead of per element), so the
    per-element rules stay out of the way and the search stays small."""
    rank = var.upper()
    c = context.cascade
    if rank not in c.rank_groups() or rank in dict(c.partitions):
        return None
    if dict((g, n) for g, n, _ in context.passes.per_rank).get(rank, 1) <= 1:
        return None
    return rank if split_size(context, rank) is None else None


def candidates(context: Context) -> Iterator[Rewrite]:
    for group, _passes, _why in context.passes.per_rank:
        size = split_size(context, group)
        if size is not None:
            yield _rewrite(context.cascade, group, size)


def _split_access(c: Cascade, acc: Access, rank: str, views: dict[str, str]) -> Access:
    ranks = c.tensor(acc.tensor).ranks
    if rank not in ranks:
        return acc
    low = rank.lower()
    indices: list[IndexPos] = []
    for pos, r in zip(acc.indices, ranks, strict=True):
        if r == rank:
            indices += [IndexPos(IVar(f"{low}1")), IndexPos(IVar(f"{low}0"))]
        else:
            indices.append(pos)
    return Access(views.get(acc.tensor, acc.tensor), tuple(indices), acc.loc)


def _rewrite(c: Cascade, rank: str, size: int) -> Rewrite:
    low, outer, inner = rank.lower(), f"{rank}1", f"{rank}0"
    taken = names_in_use(c) | {outer, inner}
    inputs = [t for t in c.inputs if rank in c.tensor(t).ranks]
    views = {t: fresh(f"B{t}", taken) for t in inputs}

    def split_ranks(ranks: tuple[str, ...]) -> tuple[str, ...]:
        out: list[str] = []
        for r in ranks:
            out += [outer, inner] if r == rank else [r]
        return tuple(out)

    before = []
    for t in inputs:
        ranks = c.tensor(t).ranks
        view_idx = [f"{low}1*{inner}+{low}0" if r == rank else r.lower() for r in ranks]
        out_idx = split_ranks(ranks)
        before.append(
            f"{views[t]}[{', '.join(x.lower() for x in out_idx)}] = {t}[{', '.join(view_idx)}]"
        )
    replacements: dict[str, list[str]] = {}
    for e in c.einsums:
        if not any(rank in c.tensor(a.tensor).ranks for a in (e.output, *e.reads())):
            continue
        out = _split_access(c, e.output, rank, {})
        expr = map_reads(e.expr, lambda a: Read(_split_access(c, a, rank, views)))
        reduced: list[str] = []
        for v in e.reduced:
            reduced += [f"{low}1", f"{low}0"] if v == low else [v]
        until = str(e.until) if e.until is not None else None
        text = statement(
            out, expr, label=e.name, reduce_op=e.reduce_op, reduced=reduced, until=until
        )
        replacements[e.name] = [text]
    # Einsums not touched keep their text through `edited`.
    computed = {
        t.name: split_ranks(t.ranks) for t in c.tensors if rank in t.ranks and t.name not in inputs
    }
    draft = edited(
        c,
        replacements,
        declarations=computed,
        new_declarations=[(views[t], split_ranks(c.tensor(t).ranks)) for t in inputs],
        before=before,
        shapes=[(inner, size)],
    )
    detail = f"{rank} = {outer} x {inner} ({inner} = {size}); views " + (
        ", ".join(f"{views[t]} of {t}" for t in inputs) or "none"
    )
    return Rewrite(NAME, rank, detail, draft)
