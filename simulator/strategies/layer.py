"""A layer's rows in one block: the span FLAT fuses widened by the Einsums around it that
walk the same rows.

A pre-norm attention layer normalises each token, projects it to a query, attends, projects
the result back and adds the residual. The attention's span (:mod:`simulator.strategies.
segments`) walks blocks of query rows; the query's norm and projection before it, and the
output projection and residual after it, walk the same rows and reduce none of them (the
width `d`, the head's features `f`), so a block of rows can carry them too: each row's
token read once, its result written once, nothing between crossing DRAM. Run kernel by
kernel instead, each D x P tensor between them crosses DRAM twice.

* **before the span**: the Einsums that iterate every row rank and reduce none, need
  nothing the span makes, and whose result only the span or others of the set read (the
  largest such set: the query's norm, projection and rotation; not the keys' side, which
  walks the keys);
* **after it**: the Einsums that iterate every row rank and reduce none, reading what the
  span or the set makes (the output projection, the residual), whatever else they read
  made before (the cascade's inputs, a kernel's result).

The rows are the ranks every Einsum of the span iterates and none reduces (`P`; `G, P` for
grouped-query heads). A recurrence is no such Einsum. Nothing here depends on a name.
"""

from __future__ import annotations

from simulator.cascade.draft import readers
from simulator.cascade.ir import Cascade
from simulator.strategies.roles import einsum_ranks, reduced_ranks
from simulator.support.errors import SpecError


def span_rows(cascade: Cascade, span: tuple[str, ...]) -> frozenset[str]:
    """The ranks every Einsum of `span` iterates and none reduces."""
    common = set.intersection(*(set(einsum_ranks(cascade.einsum(n))) for n in span))
    reduced = {r for n in span for r in reduced_ranks(cascade.einsum(n))}
    return frozenset(common - reduced)


def widened(cascade: Cascade, compute: tuple[str, ...], span: tuple[str, ...]) -> tuple[str, ...]:
    """`span` with the Einsums before and after it that walk its rows (module docstring),
    in cascade order; the span itself where none does."""
    rows = span_rows(cascade, span)
    if not rows:
        return span

    def walks(n: str) -> bool:
        e = cascade.einsum(n)
        return (
            e.iterative is None
            and e.until is None
            and rows <= set(einsum_ranks(e))
            and not rows & set(reduced_ranks(e))
        )

    made = {n: cascade.einsum(n).output.tensor for n in compute}
    reads = {n: {a.tensor for a in cascade.einsum(n).reads()} for n in compute}
    readers = {t: {n for n in compute if t in reads[n]} for t in made.values()}
    inside = set(span)
    # after the span, in cascade order: what depends on the span (directly or through the
    # set) and walks its rows
    after: set[str] = set()
    downstream = {made[n] for n in inside}
    for n in compute:
        if n in inside:
            continue
        if reads[n] & downstream:
            downstream.add(made[n])
            if walks(n):
                after.add(n)
    # the rest of what depends on the span cannot come before it
    depends = {n for n in compute if made[n] in downstream and n not in inside}
    before = {n for n in compute if n not in inside and n not in depends and walks(n)}
    while True:
        both = inside | before | after
        keep = {n for n in before if readers[made[n]] and readers[made[n]] <= both}
        if keep == before:
            break
        before = keep
    # after: only what reads nothing made after the span outside the set (a kernel between
    # the two would need the span's result and make one the set needs)
    while True:
        outside = {made[n] for n in depends if n not in after}
        keep = {n for n in after if not reads[n] & outside}
        if keep == after:
            break
        after = keep
    grown = inside | before | after
    return tuple(n for n in compute if n in grown)


def layer_spans(
    cascade: Cascade, compute: tuple[str, ...], spans: list[tuple[str, ...]]
) -> list[tuple[str, ...]]:
    """Every span widened (:func:`widened`), in order, each keeping out what an earlier one
    took. A later span whose every reduced rank the widened span already walks (a
    post-attention LayerNorm over the width its projections walk) is no span of its own: its
    Einsums are the widening's to take, and what it leaves runs as any other. One that
    reduces a rank of its own (a cross-attention's keys) stays apart. One error where none
    grows: the template would be the plain one."""
    out: list[tuple[str, ...]] = []
    taken: set[str] = set()
    for i, span in enumerate(spans):
        if set(span) & taken:
            continue  # an earlier widening took part of it
        later = [s for s in spans[i + 1 :] if not set(s) & taken]
        pool = tuple(n for n in compute if n not in taken)
        apart = {n for s in later for n in s}
        first = widened(cascade, tuple(n for n in pool if n not in apart), span)
        walked = {r for n in first for r in einsum_ranks(cascade.einsum(n))}
        kept = {
            n
            for s in later
            if not {r for m in s for r in reduced_ranks(cascade.einsum(m))} <= walked
            for n in s
        }
        grown = widened(cascade, tuple(n for n in pool if n not in kept), span)
        out.append(grown)
        taken |= set(grown)
    if len(out) == len(spans) and [len(s) for s in out] == [len(s) for s in spans]:
        raise SpecError(f"'{cascade.name}': no Einsum around its spans walks their rows")
    return out


def _ahead(
    cascade: Cascade,
    compute: tuple[str, ...],
    spans: list[tuple[str, ...]],
    extents: dict[str, int],
) -> tuple[tuple[str, ...], set[str], set[str]]:
    """What the spans need (:func:`ahead_of`), the part of it that walks the keys' rows
    reducing none, and the part of that one block makes."""
    inside = {n for span in spans for n in span}
    producer = {cascade.einsum(n).output.tensor: n for n in compute}
    needed: set[str] = set()
    todo = [a.tensor for n in inside for a in cascade.einsum(n).reads()]
    while todo:
        n = producer.get(todo.pop())
        if n is not None and n not in inside and n not in needed:
            needed.add(n)
            todo += [a.tensor for a in cascade.einsum(n).reads()]
    ahead = tuple(n for n in compute if n in needed)
    # the part a block of rows makes: what walks the rows every result the spans read
    # walks (the keys), reducing none, and that nothing else of it reads (a group norm's
    # statistics over every key, and what they read, stay kernels before the block)
    reads = {n: {a.tensor for a in cascade.einsum(n).reads()} for n in ahead}
    made = {n: cascade.einsum(n).output.tensor for n in ahead}
    span_reads = {a.tensor for n in inside for a in cascade.einsum(n).reads()}
    sinks = [n for n in ahead if made[n] in span_reads]
    if not sinks:
        return ahead, set(), set()
    # the rows: the rank most of those results carry, the widest on a tie (the keys `M` of
    # K and V, not the groups `N` of a group norm's statistics the queries' side reads too)
    count: dict[str, int] = {}
    for n in sinks:
        for r in cascade.tensor(made[n]).ranks:
            count[r] = count.get(r, 0) + 1
    if not count:
        return ahead, set(), set()  # scalars only
    row = max(count, key=lambda r: (count[r], extents.get(r, 1), r))
    block = {
        n
        for n in ahead
        if cascade.einsum(n).iterative is None
        and row in einsum_ranks(cascade.einsum(n))
        and row not in reduced_ranks(cascade.einsum(n))
    }
    return ahead, block, _kept(block, ahead, made, reads)


def _kept(
    block: set[str], ahead: tuple[str, ...], made: dict[str, str], reads: dict[str, set[str]]
) -> set[str]:
    """Of `block`, what no Einsum of `ahead` outside it reads (to a fixpoint)."""
    while True:
        keep = {n for n in block if not any(made[n] in reads[m] for m in ahead if m not in block)}
        if keep == block:
            return block
        block = keep


def ahead_of(
    cascade: Cascade,
    compute: tuple[str, ...],
    spans: list[tuple[str, ...]],
    extents: dict[str, int],
) -> tuple[str, ...]:
    """Of the Einsums outside the spans that the spans need (a layer's keys' side: their
    norm, projections and rotation), those one block of the keys' rows can make, each token
    read once, in cascade order (none: empty)."""
    ahead, _rows, block = _ahead(cascade, compute, spans, extents)
    return tuple(n for n in ahead if n in block)


def remade_ahead(
    cascade: Cascade,
    compute: tuple[str, ...],
    spans: list[tuple[str, ...]],
    extents: dict[str, int],
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The element-wise Einsums a block of the keys' rows would make but for a reader
    outside it (a group norm's centred features, which the variance over every key reads
    too), each with the readers of the block's that would read it made again there
    (:mod:`simulator.cascade.recompute`), in cascade order; none: empty."""
    ahead, rows, block = _ahead(cascade, compute, spans, extents)
    out = []
    for n in ahead:
        e = cascade.einsum(n)
        if n not in rows or n in block or e.reduced:
            continue
        within = tuple(r.name for r in readers(cascade, e.output.tensor) if r.name in rows)
        if within:
            out.append((n, within))
    return tuple(out)
