"""Deferred normalisation: a scale that does not depend on the contracted rank moves past
the contraction.

    C[o] = sum_r (N[.., r, ..] / D[o']) * X[.., r, ..]
         = (sum_r N[.., r, ..] * X[.., r, ..]) / D[o']          (likewise for N * D)

Holds when D reads none of the contracted variables r (then it is a common factor of every
term). Attention's `AV = sum_m (SN / SD) V` becomes `AV = (sum_m SN V) / SD` (Cascade 4 ->
its deferred-division form, 3 -> 2 passes); RMSNorm's `H = sum_e (X / RMS) W` becomes
`(sum_e X W) / RMS` (the normalisation and the matmul share one pass).

The scale may also be a factor of C itself (`Z = sum_k Y * A[k]` with Y free of k:
`Z = (sum_k A[k]) * Y`, the paper's Cascade 1 -> 2), and the division may be written in C
(`Z = sum_e X / SD * W`, as :mod:`.distribute_contraction` writes its terms).

Conditions checked: C is a plain sum (no filters, not iterative) whose expression is a
product with the factor A; A is `N / D` written in C with D independent of r and N
depending on it, or a read by plain variables of a tensor with one producer, a plain map
(no reduction, filters or iteration) `A = N / D` or a product with factors D independent
of r. Dividing by a scale that depends on r is not this identity: the rule
does not apply.
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
)
from simulator.cascade.ir import Expr, Op, Read
from simulator.cascade.rewrite.rules.base import Context, Rewrite
from simulator.cascade.write import expr_text

NAME = "defer-normalization"
STABLE = True
AT_EVERY_SITE = True  # parallel consumers of one value: all at once too


def _splits(expr: Expr, contracted: set[str]) -> Iterator[tuple[Expr, Expr, str]]:
    """(numerator, scale, 'div' | 'mul') with the scale free of the contracted variables."""
    if isinstance(expr, Op) and expr.name == "div":
        num, den = expr.args
        if not expr_vars(den) & contracted:
            yield num, den, "div"
        return
    parts = factors(expr)
    if len(parts) < 2:
        return
    scale = [f for f in parts if not expr_vars(f) & contracted]
    rest = [f for f in parts if expr_vars(f) & contracted]
    if scale and rest:
        yield product(rest), product(scale), "mul"


def _free_quotient(part: Expr, contracted: set[str]) -> tuple[Expr, Expr] | None:
    """(N, D) for a factor `N / D` of C written in C, N depending on the contracted
    variables and D a tensor's values free of them (`Z = sum_e X / SD * W`); a constant
    D is a mean's count, which stays with its sum."""
    if not isinstance(part, Op) or part.name != "div":
        return None
    num, den = part.args
    if expr_vars(den) & contracted or not expr_tensors(den) or not expr_vars(num) & contracted:
        return None
    return num, den


def candidates(context: Context) -> Iterator[Rewrite]:
    c = context.cascade
    for consumer in c.einsums:
        if not is_plain_sum(consumer):
            continue
        contracted = set(consumer.reduced)
        parts = factors(consumer.expr)
        free = [f for f in parts if not expr_vars(f) & contracted]
        bound = [f for f in parts if expr_vars(f) & contracted]
        if free and bound:
            yield _rewrite(context, consumer, bound, 0, bound[0], product(free), "mul")
            continue
        for i, part in enumerate(parts):
            quotient = _free_quotient(part, contracted)
            if quotient is not None:
                yield _rewrite(context, consumer, parts, i, *quotient, "div")
                continue
            if not isinstance(part, Read):
                continue
            producers = c.producers(part.access.tensor)
            if len(producers) != 1 or not is_plain_map(producers[0]):
                continue
            body = inline(producers[0], part.access)
            if body is None:
                continue
            for num, scale, how in _splits(body, contracted):
                if not expr_vars(num) & contracted:
                    continue  # nothing of A varies along r: no contraction to move past
                yield _rewrite(context, consumer, parts, i, num, scale, how)


def _rewrite(context, consumer, parts, i, num, scale, how) -> Rewrite:
    c = context.cascade
    taken = names_in_use(c)
    others = parts[:i] + parts[i + 1 :]
    # A numerator that is itself a product (RMSNorm's X * G) becomes an element-wise Einsum
    # of its own, indexed as the factor it replaces: the contraction keeps two operands (a
    # GEMM), and the product is computed once per element, not once per term of the sum.
    pre: list = []
    declared: list = []
    part = parts[i]
    if not isinstance(num, Read) and isinstance(part, Read) and len(factors(num)) > 1:
        scaled = fresh(part.access.tensor + "N", taken)
        taken = taken | {scaled}
        pre = [statement(read(scaled, part.access.indices), num)]
        declared = [(scaled, c.tensor(part.access.tensor).ranks)]
        num = read(scaled, part.access.indices)
    if isinstance(num, Read):
        base = (
            num.access.tensor + "".join(sorted(expr_tensors(product(others))))
            if others
            else (num.access.tensor + "S")
        )
    else:
        base = consumer.output.tensor + "N"
    inner = fresh(base, taken)
    out = consumer.output
    inner_read = read(inner, out.indices)
    first = statement(inner_read, product([num, *others]))
    second = statement(out, Op(how, (inner_read, scale)), label=consumer.name)
    ranks = c.tensor(out.tensor).ranks
    symbol = "/" if how == "div" else "*"
    detail = (
        f"{consumer.name} = sum_{','.join(consumer.reduced)} "
        f"({expr_text(num, 2)} {symbol} {expr_text(scale, 2, True)}) ... -> "
        f"{inner} {symbol} {expr_text(scale, 2, True)}"
    )
    return Rewrite(
        NAME,
        consumer.name,
        detail,
        edited(
            c,
            {consumer.name: [*pre, first, second]},
            new_declarations=[*declared, (inner, ranks)],
        ),
    )
