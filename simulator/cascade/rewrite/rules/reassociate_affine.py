"""Reassociating a contraction with a per-row shift: the shift leaves the contraction.

    C[o] = sum_r (A[.., r, ..] - b[o']) * W[.., r, ..]
         = sum_r A[.., r, ..] * W[.., r, ..]  -  b[o'] * sum_r W[.., r, ..]

Holds when b reads none of the contracted variables r (it is constant along the sum).
LayerNorm followed by a matmul, `Z = sum_e ((X - MU) / SD) W`, becomes, after deferring
the division (:mod:`.defer_normalization`), `Z = (sum_e X W - MU * sum_e W) / SD`: the
matmul reads X in the same pass as the statistics, not after them. The shifted operand
may be written in C (`(A - b) * W`) or be a tensor a plain map produces (`D = A - b`).
It subtracts two sums that can be close (xW and mean * 1W), so it loses precision when
the shift is large against the spread; the numerical checks of every candidate include
inputs of large magnitude.

Conditions checked: C is a plain sum (no filters, not iterative) of a product; the
shifted factor is `A - b` or `A + b` with b free of the contracted variables and A
depending on them; the other factors (W) read every contracted variable (else `sum_r W`
would need the extent as a factor) and none of the shift's tensors.
"""

from __future__ import annotations

from collections.abc import Iterator

from simulator.cascade.draft import (
    edited,
    expr_tensors,
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
    var,
)
from simulator.cascade.ir import Cascade, Einsum, Expr, Op, Read
from simulator.cascade.rewrite.rules.base import Context, Rewrite
from simulator.cascade.write import expr_text

NAME = "reassociate-affine"
STABLE = True
AT_EVERY_SITE = True  # parallel consumers of one value: all at once too


def shift(expr: Expr, contracted: set[str]) -> tuple[Expr, Expr, str] | None:
    """(A, b, 'sub' | 'add') for `A - b` / `A + b` with b free of the contracted variables."""
    if not isinstance(expr, Op) or expr.name not in ("sub", "add"):
        return None
    a, b = expr.args
    if expr.name == "add" and expr_vars(a) & contracted and not expr_vars(b) & contracted:
        return a, b, "add"
    if expr.name == "add" and expr_vars(b) & contracted and not expr_vars(a) & contracted:
        return b, a, "add"
    if expr.name == "sub" and expr_vars(a) & contracted and not expr_vars(b) & contracted:
        return a, b, "sub"
    return None


def shifts(c: Cascade, consumer: Einsum) -> Iterator[tuple[list[Expr], Expr, Expr, str]]:
    """(the other factors W, A, b, 'sub' | 'add') for each shifted factor of the plain sum
    `consumer` that this rule takes out."""
    contracted = set(consumer.reduced)
    parts = factors(consumer.expr)
    if len(parts) < 2:
        return
    for i, part in enumerate(parts):
        body: Expr | None = part
        if isinstance(part, Read):
            producers = c.producers(part.access.tensor)
            if len(producers) != 1 or not is_plain_map(producers[0]):
                continue
            body = inline(producers[0], part.access)
        if body is None:
            continue
        found = shift(body, contracted)
        if found is None:
            continue
        others = parts[:i] + parts[i + 1 :]
        if not contracted <= expr_vars(product(others)):
            continue  # sum_r W must run over every contracted variable
        if any(expr_tensors(found[1]) & expr_tensors(o) for o in others):
            continue
        yield (others, *found)


def candidates(context: Context) -> Iterator[Rewrite]:
    c = context.cascade
    for consumer in c.einsums:
        if is_plain_sum(consumer):
            for others, a, b, how in shifts(c, consumer):
                yield _rewrite(context, consumer, others, a, b, how)


def _rewrite(context, consumer, others, a, b, how) -> Rewrite:
    c = context.cascade
    taken = names_in_use(c)
    rest = product(others)
    a_name = a.access.tensor if isinstance(a, Read) else consumer.output.tensor + "A"
    main = fresh(a_name + "".join(sorted(expr_tensors(rest))), taken)
    ones = fresh("S" + "".join(sorted(expr_tensors(rest))), taken)
    out = consumer.output
    out_vars = [p.expr.name for p in out.indices]
    rest_vars = [v for v in out_vars if v in expr_vars(rest)]
    rest_ranks = tuple(
        r for v, r in zip(out_vars, c.tensor(out.tensor).ranks, strict=True) if v in rest_vars
    )
    main_read = read(main, out.indices)
    ones_read = read(ones, [var(v) for v in rest_vars])
    texts = [
        statement(main_read, product([a, *others])),
        statement(ones_read, rest),
        statement(
            out,
            Op("sub" if how == "sub" else "add", (main_read, Op("mul", (b, ones_read)))),
            label=consumer.name,
        ),
    ]
    symbol = "-" if how == "sub" else "+"
    detail = (
        f"{consumer.name} = sum_{','.join(consumer.reduced)} ({expr_text(a)} {symbol} "
        f"{expr_text(b)}) * {expr_text(rest, 2)} -> {main} {symbol} {expr_text(b, 2)} * {ones}"
    )
    return Rewrite(
        NAME,
        consumer.name,
        detail,
        edited(
            c,
            {consumer.name: texts},
            new_declarations=[(main, c.tensor(out.tensor).ranks), (ones, rest_ranks)],
        ),
    )
