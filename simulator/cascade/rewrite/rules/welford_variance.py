"""Welford's variance: a sum of squared deviations from the mean, updated element by
element with the running count, mean and sum of squared deviations.

    V[o] = sum_r (A[.., r, ..] - MU[o])^2,   MU[o] = sum_r A / R

Over the elements r in order, with N the values seen so far (N[r+1] = N[r] + 1), RM the
running mean and RQ the running sum of squared deviations from it (all from 0), and DL =
A[r] - RM[r] the new value against the mean before it:

    RM[r+1] = RM[r] + DL / N[r+1]
    RQ[r+1] = RQ[r] + DL * (A[r] - RM[r+1])

and V = RQ[R]. By induction RM[k] is the mean of the first k values and RQ[k] their sum
of squared deviations from it: adding x to k-1 values moves the mean by (x - RM)/k and
adds (x - RM[k-1]) (x - RM[k]) to the squares (Welford 1962). Both statistics come out of
one traversal of the rank. Every update is a difference of a value and a mean of values
like it, never of two large sums, so its relative error grows like the machine epsilon
times mean / spread (the rounding of the running mean), not its square as the one-pass
sum A^2 - n MU^2 does: at a mean of 1e6 with unit spread about 1e-10, where the one-pass
variance is off by 5e-4 -- it is STABLE (the two-pass original, which needs the extra
pass, is exact to about 1e-16 there). It is the per-element case of
:mod:`.chunked_variance` (Chan's merge with chunks of one value).

Conditions checked: V is a plain sum (no filters, not iterative) over exactly one
variable r of `D * D`, optionally divided or multiplied by a factor free of r; D is
`A - b` (written in V or produced by a plain map) with A depending on r; b reads a tensor
whose only producer is the mean of the same A over r -- a plain sum of A divided by the
extent R, or R divided into a plain sum of A made by another Einsum (`S = sum_r A; MU = S
/ R`). The rank R is unpartitioned, has more than one pass and cannot be split by
partition-rank (a result is indexed by it, as LayerNorm's normalised output is); where it
can be split, partition-rank then chunked-variance merges chunks instead, one division
per chunk rather than per element.
"""

from __future__ import annotations

from collections.abc import Iterator

from simulator.cascade.draft import (
    at_int,
    at_next,
    at_sym,
    at_var,
    edited,
    fresh,
    inline,
    is_plain_map,
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
from simulator.cascade.rewrite.rules.partition_rank import unchunkable
from simulator.cascade.write import expr_text

NAME = "welford-variance"
STABLE = True
AT_EVERY_SITE = False


def candidates(context: Context) -> Iterator[Rewrite]:
    c = context.cascade
    for v in c.einsums:
        if not is_plain_sum(v) or len(v.reduced) != 1:
            continue
        rank = unchunkable(context, v.reduced[0])
        if rank is None:
            continue
        found = squared_deviation(c, v)
        if found is None:
            continue
        a, b, scale, how = found
        if _is_mean(c, b, a, v.reduced[0], rank):
            yield _rewrite(c, v, a, scale, how, rank)


def _sum_of(c: Cascade, expr: Expr, a: Expr, var: str) -> bool:
    """Is `expr` a read of the plain sum of A over `var` (`S[p]` with `S[p] = A[e, p]`)?"""
    if not isinstance(expr, Read):
        return False
    producers = c.producers(expr.access.tensor)
    if len(producers) != 1 or not is_plain_sum(producers[0]) or len(producers[0].reduced) != 1:
        return False
    total = producers[0]
    got, want = plain_vars(expr.access), plain_vars(total.output)
    if got is None or want is None or len(got) != len(want):
        return False
    names = dict(zip(want, got, strict=True)) | {total.reduced[0]: var}
    return rename_vars(total.expr, names) == a


def _is_mean(c: Cascade, b: Expr, a: Expr, var: str, rank: str) -> bool:
    """Does b read the mean of A over `var` (the rank's extent dividing its sum)?"""
    if not isinstance(b, Read):
        return False
    producers = c.producers(b.access.tensor)
    if len(producers) != 1:
        return False
    mu: Einsum = producers[0]
    if not isinstance(mu.expr, Op) or mu.expr.name != "div" or mu.expr.args[1] != Size(rank):
        return False
    if is_plain_sum(mu) and len(mu.reduced) == 1:
        got, want = plain_vars(b.access), plain_vars(mu.output)
        if got is None or want is None:
            return False
        names = dict(zip(want, got, strict=True)) | {mu.reduced[0]: var}
        return rename_vars(mu.expr.args[0], names) == a
    if not is_plain_map(mu):
        return False
    body = inline(mu, b.access)  # MU = S / R at the reader's variables
    return isinstance(body, Op) and _sum_of(c, body.args[0], a, var)


def _rewrite(c: Cascade, v: Einsum, a: Expr, scale: Expr | None, how: str, rank: str) -> Rewrite:
    r = v.reduced[0]
    taken = names_in_use(c)
    s = v.output.tensor
    n, rm, rq = fresh(f"N{s}", taken), fresh(f"R{s}M", taken), fresh(f"R{s}", taken)
    dl = fresh(f"D{s}M", taken)
    ranks = c.tensor(s).ranks
    at = step_position(ranks)
    step_ranks = ranks[:at] + (rank,) + ranks[at:]
    out = v.output.indices
    here, first = with_step(out, at, at_var(r)), with_step(out, at, at_int(0))
    nxt, final = with_step(out, at, at_next(r)), with_step(out, at, at_sym(rank))
    until = f"{r} == {rank}"
    count = read(n, (at_next(r),))
    total: Expr = read(rq, final)
    if scale is not None:
        total = Op(how, (total, scale))
    texts = [
        statement(read(n, (at_int(0),)), Num(0.0)),
        statement(read(rm, first), Num(0.0)),
        statement(read(rq, first), Num(0.0)),
        statement(count, Op("add", (read(n, (at_var(r),)), Num(1.0))), until=until),
        statement(read(dl, here), Op("sub", (a, read(rm, here)))),
        statement(
            read(rm, nxt),
            Op("add", (read(rm, here), Op("div", (read(dl, here), count)))),
            until=until,
        ),
        statement(
            read(rq, nxt),
            Op("add", (read(rq, here), Op("mul", (read(dl, here), Op("sub", (a, read(rm, nxt))))))),
            until=until,
        ),
        statement(v.output, total, label=v.name),
    ]
    detail = (
        f"{v.name} = sum ({expr_text(a)} - mean)^2 over {rank} -> running count {n}, mean "
        f"{rm} and squared deviations {rq}, element by element (Welford's update; stable)"
    )
    declarations = [(n, (rank,)), (dl, step_ranks), (rm, step_ranks), (rq, step_ranks)]
    return Rewrite(NAME, v.name, detail, edited(c, {v.name: texts}, new_declarations=declarations))
