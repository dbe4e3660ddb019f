"""A canonical form of a cascade: one way to write the same algebra, before any rule.

The rules match structure (a plain sum, a mean, a shift), and the same algebra can be
written many ways. The canonical form settles the ways that hide a rule's pattern:

* **a literal that is a reduced rank's extent is that extent**: `MU[p] = S[p] / 64` with
  `S` a sum over E and E = 64 reads `/ E` (a mean written with its count). Only where
  exactly one rank of the reduction has that extent; the written file then divides by the
  rank's extent at any `--shape`, which is what a mean means;
* **a product with the reciprocal of a reduced rank's extent is a division by it**:
  `TOT[p] * (1 / 128)`, `TOT[p] * 0.0078125` and `TOT[p] * (1 / E)` are `TOT[p] / E` when
  E = 128 is the extent of exactly one rank the sum reduces (in the Einsum, or in the
  plain sum a factor reads) -- a mean written with its reciprocal. Elsewhere a multiply by
  a constant's reciprocal stays one (`QK * (1 / CAP)`: computed once, no divider per
  point); a literal is a reciprocal when it is the double nearest 1 / n;
* **a sum followed by a scaling by a constant is one normalised reduction**: `S[p] =
  X[e, p]; MU[p] = S[p] / E` is `MU[p] = X[e, p] / E` (S read only there, not a result);
* **an element-wise Einsum read once, at its own iteration space, is inlined** into its
  reader (`C = X - MU; SQ = C * C` summed over e: the same points, the same operations);
* **a subexpression that depends on fewer variables than its Einsum is hoisted** into one
  of its own (`Y[e, p] = C[e, p] / sqrt(VAR[p] + eps)`: `sqrt(...)` once per p, as `SD[p]`)
  -- never the other way: inlining it would compute it per (e, p);
* **commutative operands in one order** (sums and products of reads by name);
* **common subexpressions shared**: two Einsums computing the same are one.

Each step keeps the cascade's meaning at its shapes; `rewrite` checks the canonical form
numerically against the input like any candidate. `python -m simulator.cascade show FILE
--canonical` prints it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from simulator.cascade.draft import (
    Draft,
    draft_of,
    edited,
    expr_vars,
    factors,
    fresh,
    inline,
    is_plain_map,
    is_plain_sum,
    map_reads,
    names_in_use,
    plain_vars,
    product,
    read,
    readers,
    restate,
    var,
    without_duplicates,
)
from simulator.cascade.ir import Cascade, Einsum, Expr, Num, Op, Read, Size, VarValue, is_constant
from simulator.cascade.write import einsum_text, expr_text

MAX_ROUNDS = 64  # each round changes one Einsum; a cascade settles long before


@dataclass(frozen=True)
class Canonical:
    cascade: Cascade
    draft: Draft
    changes: tuple[str, ...]  # what was rewritten, in order (empty: already canonical)


def canonical(cascade: Cascade) -> Canonical:
    """The cascade in canonical form (see the module docstring)."""
    changes: list[str] = []
    current = cascade
    for _ in range(MAX_ROUNDS):
        step = _one_step(current)
        if step is None:
            break
        draft, what = step
        current = draft.build()
        changes.append(what)
    ordered = _ordered(current)
    if ordered is not None:
        draft, what = ordered
        current = draft.build()
        changes.append(what)
    deduped = without_duplicates(draft_of(current), cascade.outputs)
    if deduped.statements != draft_of(current).statements:
        current = deduped.build()
        changes.append("shared common subexpressions")
    draft = draft_of(current)
    return Canonical(current, draft, tuple(changes))


def _one_step(c: Cascade) -> tuple[Draft, str] | None:
    steps = (
        _literal_sizes,
        _reciprocal_scales,
        _fold_scaled_sum,
        _inline_same_space,
        _hoist_invariant,
    )
    for step in steps:
        found = step(c)
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------------------
# Literals that are a reduced rank's extent


def _reduced_ranks(c: Cascade, e: Einsum) -> set[str]:
    return {v.upper() for v in e.reduced}


def _extent_for(c: Cascade, value: float, ranks: set[str]) -> str | None:
    shapes = dict(c.shapes)
    hits = [r for r in sorted(ranks) if shapes.get(r) == value]
    return hits[0] if len(hits) == 1 else None


def _literal_sizes(c: Cascade) -> tuple[Draft, str] | None:
    for e in c.einsums:
        if e.kind != "compute" or not isinstance(e.expr, Op) or e.expr.name not in ("div", "mul"):
            continue
        args = e.expr.args
        for i, arg in enumerate(args):
            if not isinstance(arg, Num) or arg.value in (0.0, 1.0) or arg.value != int(arg.value):
                continue
            if e.expr.name == "div" and i == 0:
                continue
            rank = _extent_for(c, arg.value, _sum_scope(c, e, [args[1 - i]]))
            if rank is None:
                continue
            new_args = tuple(Size(rank) if j == i else a for j, a in enumerate(args))
            text = restate(e, Op(e.expr.name, new_args))
            return edited(c, {e.name: [text]}), f"{e.name}: {arg} is the extent {rank}"
    return None


# --------------------------------------------------------------------------------------
# A product with the reciprocal of a reduced rank's extent, as a division by it


def _sum_scope(c: Cascade, e: Einsum, operands: Sequence[Expr]) -> set[str]:
    """The ranks a scaling of `e` may name: those `e` sums over (a plain sum), and those
    of the plain sums its operands read."""
    scope = _reduced_ranks(c, e) if is_plain_sum(e) else set()
    for x in operands:
        if isinstance(x, Read):
            for p in c.producers(x.access.tensor):
                if is_plain_sum(p):
                    scope |= _reduced_ranks(c, p)
    return scope


def _reciprocal_count(x: Expr) -> Expr | None:
    """c for a constant reciprocal `1 / c` (c a number or an extent, not an index value),
    or n for a literal that is the double nearest 1 / n (`0.0078125`: 128), else None."""
    if isinstance(x, Op) and x.name == "div" and x.args[0] == Num(1.0):
        den = x.args[1]
        plain = isinstance(den, Num) or (isinstance(den, Size) and not isinstance(den, VarValue))
        return den if plain else None
    if isinstance(x, Num) and 0.0 < abs(x.value) < 1.0 and math.isfinite(1.0 / x.value):
        n = round(1.0 / x.value)
        return Num(float(n)) if 1.0 / n == x.value else None
    return None


def _named_extent(c: Cascade, count: Expr, scope: set[str]) -> str | None:
    if isinstance(count, Size):
        return count.name if count.name in scope else None
    assert isinstance(count, Num)
    return _extent_for(c, count.value, scope)


def _reciprocal_scales(c: Cascade) -> tuple[Draft, str] | None:
    for e in c.einsums:
        if e.kind != "compute" or not isinstance(e.expr, Op) or e.expr.name != "mul":
            continue
        parts = factors(e.expr)
        scope = _sum_scope(c, e, parts)
        for i, part in enumerate(parts):
            count = _reciprocal_count(part)
            rank = None if count is None else _named_extent(c, count, scope)
            if rank is None:
                continue
            rest = product(parts[:i] + parts[i + 1 :])
            text = restate(e, Op("div", (rest, Size(rank))))
            what = f"{e.name}: * {expr_text(part, 2, True)} is / {rank}"
            return edited(c, {e.name: [text]}), what
    return None


# --------------------------------------------------------------------------------------
# A sum scaled by a constant, as one normalised reduction


def _fold_scaled_sum(c: Cascade) -> tuple[Draft, str] | None:
    for t in c.einsums:
        if not is_plain_sum(t) or t.output.tensor in c.outputs:
            continue
        users = readers(c, t.output.tensor)
        if len(users) != 1 or len(c.producers(t.output.tensor)) != 1:
            continue
        u = users[0]
        if not is_plain_map(u) or not isinstance(u.expr, Op):
            continue
        if u.expr.name not in ("div", "mul") or sum(1 for _ in u.reads()) != 1:
            continue
        a, b = u.expr.args
        read, scale = (a, b) if isinstance(a, Read) else (b, a)
        if u.expr.name == "div" and read is not a:
            continue
        if not isinstance(read, Read) or not is_constant(scale):
            continue
        if plain_vars(read.access) != plain_vars(t.output) or plain_vars(u.output) != plain_vars(
            t.output
        ):
            continue
        body = Op(u.expr.name, (t.expr, scale) if read is a else (scale, t.expr))
        text = restate(u, body)
        return (
            edited(c, {t.name: [], u.name: [text]}),
            f"{u.name}: the sum {t.name} scaled in one reduction",
        )
    return None


# --------------------------------------------------------------------------------------
# Inlining element-wise Einsums read once at their own iteration space


def _substitute(expr: Expr, target, body: Expr) -> Expr:
    return map_reads(expr, lambda acc: body if acc == target else None)


def _inline_same_space(c: Cascade) -> tuple[Draft, str] | None:
    for p in c.einsums:
        if not is_plain_map(p) or p.output.tensor in c.outputs:
            continue
        if len(c.producers(p.output.tensor)) != 1:
            continue
        users = readers(c, p.output.tensor)
        if len(users) != 1:
            continue
        u = users[0]
        if u.kind != "compute" or u.iterative is not None or u.filters():
            continue
        reads = [a for a in u.reads() if a.tensor == p.output.tensor]
        if len(reads) != 1 or plain_vars(reads[0]) is None:
            continue
        if set(plain_vars(reads[0]) or ()) != set(u.iteration):
            continue  # the reader iterates more points: inlining would repeat the work
        body = inline(p, reads[0])
        if body is None:
            continue
        new_expr = _substitute(u.expr, reads[0], body)
        text = restate(u, new_expr)
        return edited(c, {p.name: [], u.name: [text]}), f"{u.name}: {p.name} inlined"
    return None


# --------------------------------------------------------------------------------------
# Hoisting subexpressions that depend on fewer variables than their Einsum


def _invariant(expr: Expr, outer: set[str]) -> Expr | None:
    """The first (outermost, left to right) operation whose variables are a strict subset
    of `outer` and that reads a tensor: computed once per point of fewer variables."""
    if not isinstance(expr, Op):
        return None
    used = expr_vars(expr)
    if used < outer and any(True for _ in _reads(expr)) and not is_constant(expr):
        return expr
    for arg in expr.args:
        found = _invariant(arg, outer)
        if found is not None:
            return found
    return None


def _reads(expr: Expr):
    if isinstance(expr, Read):
        yield expr
    elif isinstance(expr, Op):
        for a in expr.args:
            yield from _reads(a)


def _replace(expr: Expr, target: Expr, by: Expr) -> Expr:
    if expr == target:
        return by
    if isinstance(expr, Op):
        return Op(expr.name, tuple(_replace(a, target, by) for a in expr.args))
    return expr


def _hoist_invariant(c: Cascade) -> tuple[Draft, str] | None:
    for e in c.einsums:
        if e.kind != "compute" or e.iterative is not None or e.filters():
            continue
        if plain_vars(e.output) is None:
            continue
        outer = set(e.iteration)
        sub = _invariant(e.expr, outer)
        if sub is None or e.reduced and expr_vars(sub) & set(e.reduced):
            continue
        keep = [v for v in e.iteration if v in expr_vars(sub)]
        ranks = tuple(v.upper() for v in keep)
        if any(r not in c.shape_names() for r in ranks):
            continue
        if not keep:
            continue
        name = fresh(f"{e.output.tensor}H", names_in_use(c))
        index = ", ".join(keep)
        hoisted = f"{name}[{index}] = {_text(sub)}"
        new_expr = _replace(e.expr, sub, read(name, [var(v) for v in keep]))
        text = restate(e, new_expr)
        draft = edited(
            c,
            {e.name: [hoisted, text]},
            new_declarations=[(name, ranks)],
        )
        return draft, f"{e.name}: {_text(sub)} hoisted as {name}[{index}]"
    return None


def _text(expr: Expr) -> str:
    return expr_text(expr)


# --------------------------------------------------------------------------------------
# Commutative operands in one order


def _sorted_operands(expr: Expr) -> Expr:
    if not isinstance(expr, Op):
        return expr
    args = tuple(_sorted_operands(a) for a in expr.args)
    if expr.name in ("add", "mul") and all(isinstance(a, Read) for a in args):
        args = tuple(sorted(args, key=lambda a: str(a)))
    return Op(expr.name, args)


def _ordered(c: Cascade) -> tuple[Draft, str] | None:
    replacements: dict[str, Sequence[str]] = {}
    for e in c.einsums:
        if e.kind != "compute":
            continue
        expr = _sorted_operands(e.expr)
        if expr != e.expr:
            replacements[e.name] = [restate(e, expr)]
    if not replacements:
        return None
    return edited(c, replacements), "operands of sums and products in one order"


__all__ = ["Canonical", "canonical", "einsum_text"]
