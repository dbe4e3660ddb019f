"""The one-pass variance: a sum of squared deviations from the sums of A and A^2.

    sum_r (A[.., r, ..] - b[o])^2 = sum_r A^2 - 2 b sum_r A + n b^2      (n: points summed)

Holds for any b free of the contracted variables r (b is usually the mean, and then it is
E[x^2] - E[x]^2 times n). The deviations need b before A is read again -- a pass; the
sums of A and A^2 do not. It is UNSTABLE: when the mean is large against the spread, the
two large terms cancel and the variance loses most of its digits (catastrophic
cancellation; with float32 and |mean| / sd = 1e4 nothing is left). So the search uses it
only when asked (`--allow-unstable`) and says so in its report.

Conditions checked: V is a plain sum (no filters, not iterative) of `D * D`, optionally
divided or multiplied by a factor free of r; D is `A - b` (written in V or produced by a
plain map) with b free of r and A depending on r. n is the product of the contracted
ranks' extents, written as those extents (`E`) so `--shape` keeps it right.
"""

from __future__ import annotations

from collections.abc import Iterator

from simulator.cascade.draft import (
    edited,
    expr_vars,
    factors,
    fresh,
    inline,
    is_plain_map,
    is_plain_sum,
    names_in_use,
    product,
    read,
    statement,
)
from simulator.cascade.ir import Cascade, Einsum, Expr, Num, Op, Read, Size, rank_of
from simulator.cascade.rewrite.rules.base import Context, Rewrite
from simulator.cascade.write import expr_text

NAME = "one-pass-variance"
STABLE = False
AT_EVERY_SITE = False


def square_of(expr: Expr, contracted: set[str]) -> tuple[Expr, Expr | None, str] | None:
    """(the squared factor, the outer scale, 'div' | 'mul') for `D * D [/ s]`."""
    scale, how = None, "mul"
    if isinstance(expr, Op) and expr.name == "div" and not expr_vars(expr.args[1]) & contracted:
        expr, scale, how = expr.args[0], expr.args[1], "div"
    parts = factors(expr)
    free = [p for p in parts if not expr_vars(p) & contracted]
    bound = [p for p in parts if expr_vars(p) & contracted]
    if len(bound) != 2 or bound[0] != bound[1]:
        return None
    if free:
        if scale is not None:
            return None
        scale = product(free)
    return bound[0], scale, how


def squared_deviation(c: Cascade, v: Einsum) -> tuple[Expr, Expr, Expr | None, str] | None:
    """(A, b, the outer scale, 'div' | 'mul') when V sums `(A - b)^2 [/ s]` with b free of
    the contracted variables and A ranging over all of them; D = A - b may be written in V
    or produced by a plain map. Shared by the variance rules."""
    contracted = set(v.reduced)
    found = square_of(v.expr, contracted)
    if found is None:
        return None
    squared, scale, how = found
    body: Expr | None = squared
    if isinstance(squared, Read):
        producers = c.producers(squared.access.tensor)
        if len(producers) != 1 or not is_plain_map(producers[0]):
            return None
        body = inline(producers[0], squared.access)
    if not (isinstance(body, Op) and body.name == "sub"):
        return None
    a, b = body.args
    if expr_vars(b) & contracted or not contracted <= expr_vars(a):
        return None  # n counts every contracted point; A must range over all of them
    return a, b, scale, how


def candidates(context: Context) -> Iterator[Rewrite]:
    c = context.cascade
    for v in c.einsums:
        if is_plain_sum(v) and (found := squared_deviation(c, v)) is not None:
            yield _rewrite(context, v, *found)


def _rewrite(context, v, a, b, scale, how) -> Rewrite:
    c = context.cascade
    taken = names_in_use(c)
    a_name = a.access.tensor if isinstance(a, Read) else v.output.tensor
    s1, s2 = fresh(f"S{a_name}", taken), fresh(f"SQ{a_name}", taken)
    out = v.output
    r1, r2 = read(s1, out.indices), read(s2, out.indices)
    n: Expr = product([Size(rank_of(x)) for x in v.reduced])
    two = Num(2.0)
    total = Op(
        "add",
        (
            Op("sub", (r2, Op("mul", (Op("mul", (two, b)), r1)))),
            Op("mul", (n, Op("mul", (b, b)))),
        ),
    )
    if scale is not None:
        total = Op(how, (total, scale))
    ranks = c.tensor(out.tensor).ranks
    texts = [
        statement(r1, a),
        statement(r2, Op("mul", (a, a))),
        statement(out, total, label=v.name),
    ]
    detail = (
        f"{v.name} = sum ({expr_text(a)} - {expr_text(b)})^2 -> {s2} - 2 {expr_text(b, 2)} "
        f"{s1} + n {expr_text(b, 2)}^2 (UNSTABLE: cancellation when the mean is large)"
    )
    return Rewrite(
        NAME,
        v.name,
        detail,
        edited(c, {v.name: texts}, new_declarations=[(s1, ranks), (s2, ranks)]),
    )
