"""Writing one cascade in other notations (a test generator for issue 35).

Each notation computes the same outputs as the cascade at its shapes, written the way
another person would: tensors and ranks renamed, sums and their scaling split apart, rank
extents written as literals, scalings written as products with the reciprocal, the
Einsums in another valid order, the operands of sums and products swapped -- and all of
them at once. `rewrite` must reach the same pass count
from each as from the shipped form.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from simulator.cascade.draft import is_plain_sum, restate
from simulator.cascade.ir import Cascade, Expr, Num, Op, Size, VarValue
from simulator.cascade.parse import loads_cascade
from simulator.cascade.write import cascade_yaml, einsum_text, expr_text, to_yaml


def _file(c: Cascade, statements: list[str], extra: list[tuple[str, tuple[str, ...]]]) -> str:
    decls = [(t.name, t.ranks) for t in c.tensors] + extra
    return cascade_yaml(c.name, c.description, c.shapes, decls, statements, c.reference)


def _map_exprs(c: Cascade, fn: Callable[[Expr], Expr]) -> str:
    statements = []
    for e in c.einsums:
        if e.kind != "compute":
            statements.append(einsum_text(e))
            continue
        new = fn(e.expr)
        statements.append(restate(e, new) if new != e.expr else einsum_text(e))
    return _file(c, statements, [])


def literals(c: Cascade) -> str:
    """Every rank extent used as a number written as its value (`/ E` -> `/ 64`)."""
    shapes = dict(c.shapes)
    ranks = {r for t in c.tensors for r in t.ranks}  # not size parameters (a softcap CAP)

    def walk(x: Expr) -> Expr:
        if isinstance(x, Size) and not isinstance(x, VarValue) and x.name in ranks:
            return Num(float(shapes[x.name]))
        if isinstance(x, Op):
            return Op(x.name, tuple(walk(a) for a in x.args))
        return x

    return _map_exprs(c, walk)


def reciprocal(c: Cascade) -> str:
    """Every division by a constant written as a product with its reciprocal: `X / E` ->
    `X * (1 / E)`, a literal count as its reciprocal's value (`X / 64` -> `X * 0.015625`)."""

    def walk(x: Expr) -> Expr:
        if not isinstance(x, Op):
            return x
        args = tuple(walk(a) for a in x.args)
        if x.name != "div" or not _constant(args[1]):
            return Op(x.name, args)
        den = args[1]
        inverse = Num(1.0 / den.value) if isinstance(den, Num) else Op("div", (Num(1.0), den))
        return Op("mul", (args[0], inverse))

    return _map_exprs(c, walk)


def swapped(c: Cascade) -> str:
    """The operands of every sum and product swapped (`a * b` -> `b * a`)."""

    def walk(x: Expr) -> Expr:
        if isinstance(x, Op):
            args = tuple(walk(a) for a in x.args)
            if x.name in ("add", "mul"):
                args = args[::-1]
            return Op(x.name, args)
        return x

    return _map_exprs(c, walk)


def split(c: Cascade) -> str:
    """A sum scaled by a constant (`MU[p] = X[e, p] / E`) written as the sum and then the
    scaling (`MUS[p] = X[e, p]; MU[p] = MUS[p] / E`)."""
    statements: list[str] = []
    extra: list[tuple[str, tuple[str, ...]]] = []
    names = {t.name for t in c.tensors}
    for e in c.einsums:
        x = e.expr
        scaled = (
            is_plain_sum(e)
            and isinstance(x, Op)
            and x.name in ("div", "mul")
            and _constant(x.args[1])
            and not _constant(x.args[0])
        )
        if not scaled or e.output.tensor in {t for t, _ in extra}:
            statements.append(einsum_text(e))
            continue
        assert isinstance(x, Op)
        name = f"{e.output.tensor}SUM"
        while name in names:
            name += "X"
        names.add(name)
        extra.append((name, c.tensor(e.output.tensor).ranks))
        total = f"{name}[{', '.join(str(i) for i in e.output.indices)}]"
        if not e.output.indices:
            total = name
        statements.append(f"{total} = {_text(x.args[0])}")
        symbol = "/" if x.name == "div" else "*"
        statements.append(f"{e.output} = {total} {symbol} {_text(x.args[1])}")
    return _file(c, statements, extra)


def _constant(x: Expr) -> bool:
    if isinstance(x, Num) or (isinstance(x, Size) and not isinstance(x, VarValue)):
        return True
    return isinstance(x, Op) and all(_constant(a) for a in x.args)


def _text(x: Expr) -> str:
    return expr_text(x)


def reordered(c: Cascade) -> str:
    """The Einsums in another valid order: each ready Einsum as late as the dependencies
    allow. The statements of one tensor (a recurrence's start and steps) keep their order,
    and Einsums that depend on each other through a loop (a recurrence's running state)
    keep their written order, as one block."""
    einsums = list(c.einsums)
    order = list(range(len(einsums)))
    needs: dict[int, set[int]] = {}
    for i, e in enumerate(einsums):
        read = {a.tensor for a in e.reads()}
        needs[i] = {
            j
            for j, p in enumerate(einsums)
            if j != i
            and (p.output.tensor in read or (p.output.tensor == e.output.tensor and j < i))
        }

    def reach(t: int) -> set[int]:
        seen, todo = set(), [t]
        while todo:
            for n in needs[todo.pop()]:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    reaches = {t: reach(t) for t in order}
    block_of: dict[int, int] = {}
    blocks: list[list[int]] = []
    for t in order:  # strongly connected tensors form one block, in written order
        if t in block_of:
            continue
        members = [u for u in order if u == t or (u in reaches[t] and t in reaches[u])]
        for u in members:
            block_of[u] = len(blocks)
        blocks.append(members)
    block_needs = [
        {block_of[n] for u in members for n in needs[u]} - {i} for i, members in enumerate(blocks)
    ]
    done: list[int] = []
    left = list(range(len(blocks)))
    while left:
        ready = [b for b in left if block_needs[b] <= set(done)]
        pick = ready[-1] if ready else left[0]
        done.append(pick)
        left.remove(pick)
    statements = [einsum_text(einsums[i]) for b in done for i in blocks[b]]
    return _file(c, statements, [])


def renamed(c: Cascade) -> str:
    """Every tensor and rank renamed (tensors `N0X`, `N1X`, ...; rank `M` -> `QM`, its
    variable `m` -> `qm`, its components alike), labels kept apart."""
    text = to_yaml(c)
    head, _, body = text.partition("einsum:")
    ranks = sorted(c.shape_names(), key=len, reverse=True)
    tensors = sorted((t.name for t in c.tensors), key=len, reverse=True)
    mapping = {t: f"N{i}X" for i, t in enumerate(sorted(t.name for t in c.tensors))}
    for r in ranks:
        mapping.setdefault(r, f"Q{r}")
        mapping.setdefault(r.lower(), f"q{r.lower()}")
    names = sorted(mapping, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\b")
    labels = {e.name for e in c.einsums} - set(tensors)

    def sub(m: re.Match[str]) -> str:
        return mapping[m.group(1)]

    out_lines = []
    for line in body.splitlines():
        label, sep, rest = line.partition(": ")
        if sep and label.strip().lstrip("- ").strip() in labels:
            out_lines.append(label + sep + pattern.sub(sub, rest))
        else:
            out_lines.append(pattern.sub(sub, line))
    # a renamed file claims no reference computation (a reference names its tensors)
    head = "\n".join(x for x in head.splitlines() if not x.startswith("reference:")) + "\n"
    shapes_line = re.sub(
        r"shapes: \{(.*)\}",
        lambda m: "shapes: {" + pattern.sub(sub, m.group(1)) + "}",
        head,
    )
    return shapes_line + "einsum:" + "\n".join(out_lines) + "\n"


NOTATIONS: dict[str, Callable[[Cascade], str]] = {
    "renamed": renamed,
    "split": split,
    "literals": literals,
    "reciprocal": reciprocal,
    "reordered": reordered,
    "swapped": swapped,
}


def everything(c: Cascade) -> str:
    """All notations at once."""
    x = c
    for step in (split, literals, reciprocal, swapped, reordered, renamed):
        x = loads_cascade(step(x), f"<{c.name} notation>")
    return to_yaml(x)


def notations(c: Cascade) -> Iterator[tuple[str, Cascade]]:
    """(name, cascade) for each notation of `c` (and all at once)."""
    for name, fn in {**NOTATIONS, "everything": everything}.items():
        yield name, loads_cascade(fn(c), f"<{c.name} {name}>")


__all__ = ["NOTATIONS", "notations"]
