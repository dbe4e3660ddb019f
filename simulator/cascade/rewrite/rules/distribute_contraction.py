"""Distributing a contraction over a sum or difference: each term a contraction of its own.

    C[o] = sum_r (T1 +- T2) * W          = sum_r T1 * W      +-  sum_r T2 * W
    C[o] = sum_r ((T1 +- T2) / D) * W    = sum_r T1 / D * W  +-  sum_r T2 / D * W

(the distributive law over a finite sum). The sum or difference may sit wherever products
and the numerators of quotients lead in C's expression, written there or in a plain map C
reads (`Y = D / SD * G + B; Z = Y W`). It pays where a term then holds a factor or a
divisor that is free of the contracted variables and reads a tensor -- a row's statistic
(a mean, a standard deviation): alone in its contraction, :mod:`.defer_normalization`
moves it out, so the contraction no longer waits for the statistic. LayerNorm with its
scale G and shift B followed by a matmul,

    Z = sum_e ((X - MU) / SD * G + B) W
      = (sum_e X G W) / SD  -  (MU / SD) sum_e G W  +  sum_e B W,

reads X once for the matmul and the statistics (1 pass over E with the variance merged
chunk by chunk; distributed over `+ B` here, the first term then deferred and
reassociated), where the written form's matmul waited for MU and SD (2 passes: no rule
moved them out of a sum of terms). Like :mod:`.reassociate_affine` it subtracts sums
that can be close (X G W and MU G W) when the mean is large against the spread; every
candidate is checked numerically, at large magnitudes too.

A term that does not vary along a contracted variable is summed as its count times it
(`sum_e (Y[e, q] - MY[q])` = `sum_e Y[e, q] - E * MY[q]`): the centred Gram matrix
`sum_e (X - MX) (Y - MY)`, reassociated twice, reads X and Y once with its means.

Conditions checked: C is a plain sum (no filters, not iterative); the sum or difference is
reached from C's expression through products, numerators of quotients and reads of plain
maps with one producer (inlined at C's variables); no term uses a contracted variable as a
value (`m - p`) without reading along it; a term has a factor or a divisor free of the
contracted variables that reads a tensor; the factors beside the sum or difference that
vary along the sum read none of its tensors (nor the maps inlined to reach it):
distributing a square `(A - b) * (A - b)`, and its terms again, is the one-pass variance,
which cancels catastrophically (:mod:`.one_pass_variance`, unstable). Where the sum or
difference is a factor of C with one side free of the contracted variables (`(A - b) *
W`), reassociate-affine does the same in one step: this rule leaves it to that one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from simulator.cascade.draft import (
    edited,
    expr_tensors,
    expr_vars,
    fresh,
    inline,
    is_plain_map,
    is_plain_sum,
    names_in_use,
    product,
    read,
    statement,
)
from simulator.cascade.ir import Cascade, Einsum, Expr, Op, Read, Size, expr_values, rank_of
from simulator.cascade.rewrite.rules.base import Context, Rewrite
from simulator.cascade.rewrite.rules.reassociate_affine import shifts
from simulator.cascade.write import expr_text

NAME = "distribute-contraction"
STABLE = True
AT_EVERY_SITE = True  # parallel consumers of one value: all at once too


@dataclass(frozen=True)
class Split:
    """C's expression with the sum or difference replaced by each of its terms."""

    first: Expr
    second: Expr
    how: str  # 'add' | 'sub'
    distributed: Expr  # the sum or difference itself
    factor: bool  # reached through products alone: a factor of C
    inlined: frozenset[str] = frozenset()  # the maps read on the way to it
    beside: frozenset[str] = frozenset()  # what the factors beside it read along the sum

    def tensors(self) -> frozenset[str]:
        """The tensors of the distributed sum or difference, and the maps it came from."""
        return self.inlined | expr_tensors(self.distributed)


def splits(c: Cascade, expr: Expr, contracted: set[str]) -> Iterator[Split]:
    """Every way to write `expr` as `first +- second` by distributing one sum or difference
    that products and numerators lead to (reads of plain maps inlined on the way)."""
    if isinstance(expr, Op) and expr.name in ("add", "sub"):
        yield Split(expr.args[0], expr.args[1], expr.name, expr, True)
    elif isinstance(expr, Op) and expr.name == "mul":
        left, right = expr.args
        for s in splits(c, left, contracted):
            yield _wrapped(s, "mul", right, contracted, left=True)
        for s in splits(c, right, contracted):
            yield _wrapped(s, "mul", left, contracted, left=False)
    elif isinstance(expr, Op) and expr.name == "div":
        for s in splits(c, expr.args[0], contracted):
            yield replace(_wrapped(s, "div", expr.args[1], contracted, left=True), factor=False)
    elif isinstance(expr, Read):
        body = _map_body(c, expr)
        for s in splits(c, body, contracted) if body is not None else ():
            yield replace(s, inlined=s.inlined | {expr.access.tensor})


def _wrapped(s: Split, op: str, other: Expr, contracted: set[str], *, left: bool) -> Split:
    """The split inside `op` with `other` (on the right when `left`)."""

    def put(term: Expr) -> Expr:
        return Op(op, (term, other) if left else (other, term))

    along = expr_tensors(other) if expr_vars(other) & contracted else set()
    return replace(s, first=put(s.first), second=put(s.second), beside=s.beside | along)


def _map_body(c: Cascade, r: Read) -> Expr | None:
    producers = c.producers(r.access.tensor)
    if len(producers) != 1 or not is_plain_map(producers[0]):
        return None
    return inline(producers[0], r.access)


def has_statistic(term: Expr, contracted: set[str]) -> bool:
    """Does the product `term` have a factor or a divisor that reads a tensor and none of
    the contracted variables (what deferring the normalisation moves out of the sum)?"""
    if isinstance(term, Op) and term.name == "mul":
        return any(has_statistic(a, contracted) for a in term.args)
    if isinstance(term, Op) and term.name == "div":
        num, den = term.args
        return has_statistic(num, contracted) or _free_read(den, contracted)
    return _free_read(term, contracted)


def _free_read(x: Expr, contracted: set[str]) -> bool:
    return bool(expr_tensors(x)) and not expr_vars(x) & contracted


def _reassociated(c: Cascade, consumer: Einsum) -> set[Expr]:
    """The shifted factors `A - b` of C that reassociate-affine takes out in one step."""
    found: set[Expr] = set()
    for _, a, b, how in shifts(c, consumer):
        found |= {Op(how, (a, b)), Op(how, (b, a))} if how == "add" else {Op(how, (a, b))}
    return found


def _counted_only(term: Expr, contracted: set[str]) -> bool:
    """Does the term use a contracted variable as a value without reading along it (an
    Einsum of its own could not iterate it)?"""
    values = {v.name for v in expr_values(term)}
    return bool(values & contracted - expr_vars(term))


def candidates(context: Context) -> Iterator[Rewrite]:
    c = context.cascade
    for consumer in c.einsums:
        if not is_plain_sum(consumer):
            continue
        contracted = set(consumer.reduced)
        reassociated = _reassociated(c, consumer)
        for s in splits(c, consumer.expr, contracted):
            if s.factor and s.distributed in reassociated:
                continue  # (A - b) * W: reassociate-affine's one step
            if s.beside & s.tensors():
                continue  # (A - b) * (A - b): the one-pass variance's cancellation
            terms = (s.first, s.second)
            if any(_counted_only(t, contracted) for t in terms):
                continue
            if any(has_statistic(t, contracted) for t in terms):
                yield _rewrite(c, consumer, s)


def _summed(term: Expr, reduced: tuple[str, ...]) -> Expr:
    """The term times the extent of each contracted variable it does not vary along (the
    sum of a constant is its count times it)."""
    missing = [Size(rank_of(v)) for v in reduced if v not in expr_vars(term)]
    return product([term, *missing])


def _rewrite(c: Cascade, consumer: Einsum, s: Split) -> Rewrite:
    taken = names_in_use(c)
    out = consumer.output
    first = fresh(out.tensor + "A", taken)
    second = fresh(out.tensor + "B", taken)
    first_read, second_read = read(first, out.indices), read(second, out.indices)
    texts = [
        statement(first_read, _summed(s.first, consumer.reduced)),
        statement(second_read, _summed(s.second, consumer.reduced)),
        statement(out, Op(s.how, (first_read, second_read)), label=consumer.name),
    ]
    symbol = "+" if s.how == "add" else "-"
    detail = (
        f"{consumer.name} = sum_{','.join(consumer.reduced)} ... "
        f"({expr_text(s.distributed)}) ... -> {first} {symbol} {second}"
    )
    ranks = c.tensor(out.tensor).ranks
    return Rewrite(
        NAME,
        consumer.name,
        detail,
        edited(c, {consumer.name: texts}, new_declarations=[(first, ranks), (second, ranks)]),
    )
