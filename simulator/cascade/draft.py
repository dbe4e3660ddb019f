"""A cascade being rewritten: declarations and Einsum texts, parsed back to check them.

Rules read the checked IR (:class:`~simulator.cascade.ir.Cascade`: producers, reductions,
iteration) and write text, the cascade language itself. Building a :class:`Draft` runs the
parser and its checks, so a rule can never produce a cascade the language would refuse:
an ordering, rank or recurrence mistake in a rule surfaces as a parse error the search
reports as a bug of that rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from simulator.cascade.ir import (
    Access,
    Cascade,
    Einsum,
    Expr,
    IBin,
    IInt,
    Index,
    IndexPos,
    ISym,
    IVar,
    Op,
    Read,
    Reference,
    expr_reads,
)
from simulator.cascade.parse import loads_cascade
from simulator.cascade.write import cascade_yaml, einsum_text, expr_text


@dataclass(frozen=True)
class Draft:
    """Everything a cascade file holds, as editable text pieces."""

    name: str
    description: str
    shapes: tuple[tuple[str, int], ...]
    declarations: tuple[tuple[str, tuple[str, ...]], ...]
    statements: tuple[str, ...]
    reference: Reference | None = None

    def text(self, header: Sequence[str] = ()) -> str:
        return cascade_yaml(
            self.name,
            self.description,
            self.shapes,
            self.declarations,
            self.statements,
            self.reference,
            header,
        )

    def build(self) -> Cascade:
        """The checked cascade (a :class:`SpecError` if a rule wrote something invalid)."""
        return loads_cascade(self.text(), f"<rewrite of {self.name}>")

    def key(self) -> tuple:
        """What identifies a candidate in the search (names of the cascade aside)."""
        return (self.shapes, self.declarations, self.statements)


def draft_of(cascade: Cascade) -> Draft:
    return Draft(
        cascade.name,
        cascade.description,
        cascade.shapes,
        tuple((t.name, t.ranks) for t in cascade.tensors),
        tuple(einsum_text(e) for e in cascade.einsums),
        cascade.reference,
    )


def edited(
    cascade: Cascade,
    replacements: Mapping[str, Sequence[str]],
    *,
    declarations: Mapping[str, Sequence[str]] | None = None,
    new_declarations: Sequence[tuple[str, Sequence[str]]] = (),
    before: Sequence[str] = (),
    shapes: Sequence[tuple[str, int]] = (),
) -> Draft:
    """The cascade with Einsums replaced by statement texts (an empty list removes one),
    declarations changed (`declarations`: tensor -> ranks) or added after the existing
    ones, statements `before` the first Einsum and `shapes` added."""
    statements = list(before)
    for e in cascade.einsums:
        statements += replacements.get(e.name, [einsum_text(e)])
    decls = [(t.name, tuple((declarations or {}).get(t.name, t.ranks))) for t in cascade.tensors]
    decls += [(n, tuple(r)) for n, r in new_declarations]
    return Draft(
        cascade.name,
        cascade.description,
        tuple(cascade.shapes) + tuple(shapes),
        tuple(decls),
        tuple(statements),
        cascade.reference,
    )


def without_duplicates(draft: Draft, keep: Iterable[str]) -> Draft:
    """The draft with each Einsum that computes what an earlier one computes (same indices,
    same right-hand side, same declared ranks) removed and its readers reading the earlier
    one's tensor (repeated to a fixpoint). A rule applied at two sites makes a copy at each
    (deferring LayerNorm's division at both matmuls of an FFN: two `YN = X * G`); the
    copies would cost their work and traffic twice. A result to `keep` is left alone."""
    keep = set(keep)
    ranks = dict(draft.declarations)
    statements = list(draft.statements)
    changed = True
    while changed:
        changed = False
        seen: dict[tuple, str] = {}
        heads = [t.partition(" = ")[0].partition("[")[0] for t in statements]
        for i, text in enumerate(statements):
            lhs, sep, rhs = text.partition(" = ")
            name, bracket, indices = lhs.partition("[")
            plain = all(v.strip().isidentifier() for v in indices.rstrip("]").split(","))
            if not sep or not bracket or not plain or heads.count(name) != 1:
                continue  # a recurrence's steps or its start (`RM[0, p] = 0`): not a copy
            if name in keep:
                continue  # a result stays one: read by nothing (reading it would hide it)
            key = (indices, rhs, ranks.get(name))
            first = seen.setdefault(key, name)
            if first == name:
                continue
            pattern = re.compile(rf"\b{re.escape(name)}(?=\[)")
            statements = [pattern.sub(first, t) for j, t in enumerate(statements) if j != i]
            changed = True
            break
    if statements == list(draft.statements):
        return draft
    return replace(draft, statements=tuple(statements))


def without_dead(cascade: Cascade, keep: Iterable[str]) -> Draft:
    """The cascade without Einsums whose tensors nothing reads and that are not among the
    results to `keep` (repeated to a fixpoint), and without the declarations and shapes
    nothing left uses."""
    keep = set(keep)
    einsums = list(cascade.einsums)
    while True:
        read = {a.tensor for e in einsums for a in e.reads()}
        live = [e for e in einsums if e.output.tensor in read or e.output.tensor in keep]
        if len(live) == len(einsums):
            break
        einsums = live
    used = {e.output.tensor for e in einsums} | {a.tensor for e in einsums for a in e.reads()}
    tensors = [t for t in cascade.tensors if t.name in used]
    ranks = {r for t in tensors for r in t.ranks} | set(cascade.params)
    for parent, comps in cascade.partitions:
        if ranks & {parent, *comps}:
            ranks |= {parent, *comps}
    return Draft(
        cascade.name,
        cascade.description,
        tuple((k, v) for k, v in cascade.shapes if k in ranks),
        tuple((t.name, t.ranks) for t in tensors),
        tuple(einsum_text(e) for e in einsums),
        cascade.reference,
    )


# --------------------------------------------------------------------------------------
# Small builders over the IR, shared by the rules.


def var(name: str) -> IndexPos:
    return IndexPos(IVar(name))


def read(tensor: str, indices: Sequence[IndexPos | Index]) -> Read:
    return Read(
        Access(tensor, tuple(i if isinstance(i, IndexPos) else IndexPos(i) for i in indices))
    )


def statement(
    output: Access | Read,
    expr: Expr,
    *,
    label: str | None = None,
    reduce_op: str = "sum",
    reduced: Sequence[str] = (),
    until: str | None = None,
) -> str:
    """An Einsum's text; `reduced` is spelled out only for an operator other than sum."""
    out = output.access if isinstance(output, Read) else output
    text = f"{label}: " if label and label != out.tensor else ""
    text += f"{out} = {expr_text(expr)}"
    if reduced and reduce_op != "sum":
        text += f" :: {reduce_op}({', '.join(reduced)})"
    if until:
        text += f" until {until}"
    return text


def restate(e: Einsum, expr: Expr) -> str:
    """The Einsum with another expression: its output, label, reduction and stop kept."""
    return statement(
        e.output,
        expr,
        label=e.name,
        reduce_op=e.reduce_op,
        reduced=e.reduced,
        until=str(e.until) if e.until is not None else None,
    )


def restated(e: Einsum, fn: Callable[[Access], Expr | None]) -> str:
    """An Einsum's text with its reads replaced by `fn` (see `map_reads`), the rest kept."""
    return statement(
        e.output,
        map_reads(e.expr, fn),
        label=e.name,
        reduce_op=e.reduce_op,
        reduced=e.reduced,
        until=str(e.until) if e.until is not None else None,
    )


def final_step(finals: Mapping[str, tuple[str, int, str]]) -> Callable[[Access], Expr | None]:
    """A read replacer: a read of a tensor of `finals` (tensor -> running tensor, step
    position, bound) becomes the running tensor's final step (`S[o]` -> `RS[o, M1]`)."""

    def to_final(acc: Access) -> Expr | None:
        if acc.tensor not in finals:
            return None
        running, at, bound = finals[acc.tensor]
        return Read(replace(acc, tensor=running, indices=with_step(acc.indices, at, at_sym(bound))))

    return to_final


def plain_vars(access: Access) -> tuple[str, ...] | None:
    """The variables of an access whose every position is a plain, unfiltered variable."""
    names = []
    for pos in access.indices:
        if not isinstance(pos.expr, IVar) or pos.filter is not None:
            return None
        names.append(pos.expr.name)
    return tuple(names)


def expr_vars(expr: Expr) -> set[str]:
    return {v for acc in expr_reads(expr) for v in acc.vars()}


def expr_tensors(expr: Expr) -> set[str]:
    return {acc.tensor for acc in expr_reads(expr)}


def map_reads(expr: Expr, fn: Callable[[Access], Expr | None]) -> Expr:
    """The expression with each read replaced by `fn(access)` (None keeps it)."""
    if isinstance(expr, Read):
        new = fn(expr.access)
        return expr if new is None else new
    if isinstance(expr, Op):
        return Op(expr.name, tuple(map_reads(a, fn) for a in expr.args))
    return expr


def rename_vars(expr: Expr, names: Mapping[str, str]) -> Expr:
    """The expression with index variables renamed (plain variables only)."""

    def fix(acc: Access) -> Expr:
        return Read(replace(acc, indices=tuple(_rename_pos(p, names) for p in acc.indices)))

    return map_reads(expr, fix)


def _rename_pos(pos: IndexPos, names: Mapping[str, str]) -> IndexPos:
    if isinstance(pos.expr, IVar) and pos.expr.name in names:
        return IndexPos(IVar(names[pos.expr.name]), pos.filter)
    return pos


def factors(expr: Expr) -> list[Expr]:
    """The factors of a product tree (`a * b * c` -> [a, b, c]); a non-product is one."""
    if isinstance(expr, Op) and expr.name == "mul":
        return factors(expr.args[0]) + factors(expr.args[1])
    return [expr]


def product(items: Sequence[Expr]) -> Expr:
    result = items[0]
    for item in items[1:]:
        result = Op("mul", (result, item))
    return result


def fresh(name: str, taken: set[str]) -> str:
    """`name`, or `name2`, `name3`, ... if taken; the result is added to `taken`."""
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}{n}", n + 1
    taken.add(candidate)
    return candidate


def names_in_use(cascade: Cascade) -> set[str]:
    """Tensor, Einsum and rank names: what a new name must avoid."""
    return (
        {t.name for t in cascade.tensors}
        | {e.name for e in cascade.einsums}
        | set(cascade.shape_names())
    )


def readers(cascade: Cascade, tensor: str) -> list[Einsum]:
    return [e for e in cascade.einsums if any(a.tensor == tensor for a in e.reads())]


def is_plain_map(e: Einsum) -> bool:
    """A compute Einsum without reduction, iteration or filters, writing plain variables."""
    return (
        e.kind == "compute"
        and not e.reduced
        and e.iterative is None
        and not e.filters()
        and plain_vars(e.output) is not None
    )


def is_plain_sum(e: Einsum) -> bool:
    """A compute Einsum summing over some variables, without iteration or filters."""
    return (
        e.kind == "compute"
        and bool(e.reduced)
        and e.reduce_op == "sum"
        and e.iterative is None
        and not e.filters()
        and plain_vars(e.output) is not None
    )


def inline(producer: Einsum, access: Access) -> Expr | None:
    """The producer's expression at the reader's variables (`A[m, p]` read as `A[k, q]`:
    its expression with m -> k, p -> q), or None when the read is not plain."""
    got, want = plain_vars(access), plain_vars(producer.output)
    if got is None or want is None or len(set(got)) != len(got):
        return None
    names = dict(zip(want, got, strict=True))
    inner = {v for a in producer.reads() for v in a.vars()} - set(want)
    if inner & set(got):
        return None
    return rename_vars(producer.expr, names)


# Index positions of running tensors (`RM[m1+1, p]`, `RM[0, p]`, `RM[M1, p]`).


def at_var(name: str) -> IndexPos:
    return IndexPos(IVar(name))


def at_int(value: int) -> IndexPos:
    return IndexPos(IInt(value))


def at_sym(name: str) -> IndexPos:
    return IndexPos(ISym(name))


def at_next(name: str) -> IndexPos:
    return IndexPos(IBin("+", IVar(name), IInt(1)))


def step_position(ranks: tuple[str, ...]) -> int:
    """Where the step rank goes in a new running tensor: before the last rank ([F, M1, P],
    [M1, P], as the paper's RNV and RM), or alone for a scalar."""
    return max(0, len(ranks) - 1)


def with_step(indices: tuple[IndexPos, ...], at: int, step: IndexPos) -> tuple[IndexPos, ...]:
    return indices[:at] + (step,) + indices[at:]
