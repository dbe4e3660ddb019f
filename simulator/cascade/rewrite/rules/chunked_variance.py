"""The chunked variance: a sum of squared deviations from the mean, merged chunk by chunk
(Chan, Golub and LeVeque's pairwise update; Welford's when a chunk is one value).

    V[o] = sum_{r1, r0} (A[.., r1, r0, ..] - MU[o])^2,   MU[o] = sum_{r1, r0} A / n

Per chunk r1 of R0 values: its mean CM and its own sum of squared deviations CQ (read twice
within the chunk, which stays on chip). Running over the chunks, with N the values merged
so far (N[r1+1] = N[r1] + R0) and DL = CM - RM the new chunk's mean against the running
mean RM:

    RM[r1+1] = RM[r1] + DL * R0 / N[r1+1]
    RQ[r1+1] = RQ[r1] + CQ + DL^2 * N[r1] * R0 / N[r1+1]

and V = RQ[R1]. Exact in real arithmetic; unlike the one-pass variance (sum A^2 - n MU^2)
it never subtracts two large sums, so it keeps its digits when the mean is large against
the spread -- it is STABLE. The deviations no longer wait for the mean of the whole rank:
the rank is read once.

Conditions checked: V is a plain sum (no filters, not iterative) over exactly the two
components r1, r0 of one partitioned rank of `D * D`, optionally divided or multiplied by a
factor free of them; D is `A - b` (written in V or produced by a plain map); b reads a
tensor whose only producer is a plain sum of the same A over the same two variables
divided by their count (the partitioned rank's extent, or the components' product) -- the
mean the merge reproduces. Run `partition-rank` first: this rule works on chunks.
"""

from __future__ import annotations

from collections.abc import Iterator

from simulator.cascade.draft import (
    at_int,
    at_next,
    at_sym,
    at_var,
    edited,
    factors,
    fresh,
    is_plain_sum,
    names_in_use,
    plain_vars,
    read,
    rename_vars,
    statement,
    step_position,
    with_step,
)
from simulator.cascade.ir import Cascade, Einsum, Expr, Num, Op, Read, Size
from simulator.cascade.rewrite.rules.base import Context, Rewrite
from simulator.cascade.rewrite.rules.one_pass_variance import squared_deviation
from simulator.cascade.write import expr_text

NAME = "chunked-variance"
STABLE = True
AT_EVERY_SITE = False


def candidates(context: Context) -> Iterator[Rewrite]:
    c = context.cascade
    for v in c.einsums:
        if not is_plain_sum(v) or len(v.reduced) != 2:
            continue
        split = _partition(c, v.reduced)
        if split is None:
            continue
        found = squared_deviation(c, v)
        if found is None:
            continue
        a, b, scale, how = found
        if not _is_mean(c, b, a, v.reduced, split):
            continue
        yield _rewrite(c, v, a, scale, how, split)


def _partition(c: Cascade, reduced: tuple[str, ...]) -> tuple[str, str, str] | None:
    """(parent, outer, inner) when the reduced variables are the two components of a
    partitioned rank (outer first)."""
    for parent, comps in c.partitions:
        if len(comps) == 2 and {x.lower() for x in comps} == set(reduced):
            return parent, comps[0], comps[1]
    return None


def _is_mean(c: Cascade, b: Expr, a: Expr, reduced: tuple[str, ...], split) -> bool:
    """Does b read the mean of A over the reduced variables?"""
    if not isinstance(b, Read):
        return False
    producers = c.producers(b.access.tensor)
    if len(producers) != 1:
        return False
    mu: Einsum = producers[0]
    if not is_plain_sum(mu) or len(mu.reduced) != 2:
        return False
    if not (isinstance(mu.expr, Op) and mu.expr.name == "div"):
        return False
    inner, count = mu.expr.args
    parent, outer, chunk = split
    sizes = [f.name if isinstance(f, Size) else None for f in factors(count)]
    if sorted(map(str, sizes)) not in ([parent], sorted([outer, chunk])):
        return False
    got, want = plain_vars(b.access), plain_vars(mu.output)
    if got is None or want is None:
        return False
    names = dict(zip(want, got, strict=True))
    for order in (reduced, reduced[::-1]):
        renamed = rename_vars(inner, {**names, **dict(zip(mu.reduced, order, strict=True))})
        if renamed == a:
            return True
    return False


def _rewrite(c: Cascade, v: Einsum, a: Expr, scale, how, split) -> Rewrite:
    _parent, outer, chunk = split
    r1 = outer.lower()
    taken = names_in_use(c)
    s = v.output.tensor
    cm, cq, dl = fresh(f"C{s}M", taken), fresh(f"C{s}", taken), fresh(f"D{s}M", taken)
    n, rm, rq = fresh(f"N{s}", taken), fresh(f"R{s}M", taken), fresh(f"R{s}", taken)
    ranks = c.tensor(s).ranks
    at = step_position(ranks)
    step_ranks = ranks[:at] + (outer,) + ranks[at:]
    out = v.output.indices
    here, first = with_step(out, at, at_var(r1)), with_step(out, at, at_int(0))
    nxt, final = with_step(out, at, at_next(r1)), with_step(out, at, at_sym(outer))
    size = Size(chunk)
    until = f"{r1} == {outer}"
    deviation = Op("sub", (a, read(cm, here)))
    delta = read(dl, here)
    merged = Op(
        "div",
        (
            Op("mul", (Op("mul", (Op("mul", (delta, delta)), read(n, (at_var(r1),)))), size)),
            read(n, (at_next(r1),)),
        ),
    )
    total: Expr = read(rq, final)
    if scale is not None:
        total = Op(how, (total, scale))
    texts = [
        statement(read(n, (at_int(0),)), Num(0.0)),
        statement(read(rm, first), Num(0.0)),
        statement(read(rq, first), Num(0.0)),
        statement(read(cm, here), Op("div", (a, size))),
        statement(read(cq, here), Op("mul", (deviation, deviation))),
        statement(read(n, (at_next(r1),)), Op("add", (read(n, (at_var(r1),)), size)), until=until),
        statement(read(dl, here), Op("sub", (read(cm, here), read(rm, here)))),
        statement(
            read(rm, nxt),
            Op(
                "add",
                (
                    read(rm, here),
                    Op("div", (Op("mul", (delta, size)), read(n, (at_next(r1),)))),
                ),
            ),
            until=until,
        ),
        statement(
            read(rq, nxt),
            Op("add", (Op("add", (read(rq, here), read(cq, here))), merged)),
            until=until,
        ),
        statement(v.output, total, label=v.name),
    ]
    detail = (
        f"{v.name} = sum ({expr_text(a)} - mean)^2 over {outer} x {chunk} -> per-chunk mean "
        f"{cm} and squares {cq}, merged into running {rm}, {rq} (Chan's update; stable)"
    )
    return Rewrite(
        NAME,
        v.name,
        detail,
        edited(
            c,
            {v.name: texts},
            new_declarations=[
                (n, (outer,)),
                (cm, step_ranks),
                (cq, step_ranks),
                (dl, step_ranks),
                (rm, step_ranks),
                (rq, step_ranks),
            ],
        ),
    )
