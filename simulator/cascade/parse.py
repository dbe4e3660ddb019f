"""Read a cascade file (TeAAL-style YAML + the lark grammar of one Einsum) into checked IR.

The file format (documented with examples in `cascades/README.md`)::

    name: attention-1pass            # optional, defaults to the file name
    description: ...                 # optional
    shapes: {M: 4096, M0: 256}       # optional default rank extents (and size parameters)
    reference: {algorithm: attention}  # optional: what it computes (compare --reference)
    operators:                       # optional user-defined operators
      sub_exp(a, b): exp(a - b)
    einsum:
      declaration:                   # tensor -> ranks (upper-case)
        Q: [E, P]
      expressions:                   # one Einsum per line, in a valid execution order
        - "QK: BQK[m1, m0, p] = Q[e, p] * BK[e, m1, m0]"

Every problem is a :class:`SpecError` naming the file, line and column.

This module reads the YAML structure (sections, declarations, shapes, operators) and
each Einsum's string; :mod:`simulator.cascade.transform` turns one Einsum's text into IR
through the lark grammar, and :mod:`simulator.cascade.checks` checks what the statements
mean together.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from simulator.cascade.checks import Checker
from simulator.cascade.ir import (
    FUNCTIONS,
    REDUCE_OPS,
    Cascade,
    Einsum,
    Expr,
    Op,
    Operator,
    Reference,
    TensorDecl,
    VarValue,
    expr_reads,
)
from simulator.cascade.references import ALGORITHMS, check_reference
from simulator.cascade.transform import expand, free_names, parse_body, parse_text
from simulator.spec import yamlio
from simulator.spec.yamlio import LocDict, LocList, LocStr
from simulator.support.errors import Loc, SpecError, warn
from simulator.support.progress import Steps

TOP_KEYS = ("name", "description", "shapes", "operators", "einsum", "reference")
EINSUM_KEYS = ("declaration", "expressions")


# --------------------------------------------------------------------------------------
# YAML -> cascade


def _as_str(value: Any, where: Loc, what: str) -> LocStr:
    if isinstance(value, LocStr):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return LocStr(str(value), where)
    raise SpecError(f"{what} must be a string, got {type(value).__name__}", where)


def _check_keys(mapping: LocDict, allowed: tuple[str, ...], what: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise SpecError(
                f"unknown key '{key}' in {what} (allowed: {', '.join(allowed)})",
                mapping.key_locs.get(key, mapping.loc),
            )


def _declarations(raw: Any, where: Loc) -> tuple[TensorDecl, ...]:
    if not isinstance(raw, LocDict) or not raw:
        raise SpecError(
            "einsum.declaration must map each tensor to its ranks, e.g. 'Q: [E, P]'", where
        )
    decls = []
    for name, ranks in raw.items():
        loc = raw.key_locs[name]
        if isinstance(name, bool):  # YAML 1.1 reads ON, OFF, YES, NO, Y, N as booleans
            raise SpecError(
                f"tensor name read as the YAML boolean {str(name).lower()} (ON, OFF, YES and "
                "NO are booleans in YAML): quote it, e.g. 'ON': [F, P], or choose another name",
                loc,
            )
        if not isinstance(name, str) or not name.isidentifier() or not name[0].isupper():
            raise SpecError(f"tensor name '{name}' must be an identifier starting upper-case", loc)
        if ranks is None:
            ranks = LocList()
            ranks.loc, ranks.item_locs = loc, []
        if not isinstance(ranks, LocList):
            raise SpecError(
                f"ranks of tensor '{name}' must be a list like [M, P]", raw.loc_of(name)
            )
        names: list[str] = []
        for i, rank in enumerate(ranks):
            rloc = ranks.loc_of(i)
            if not isinstance(rank, str) or not rank.isidentifier() or not rank[0].isupper():
                raise SpecError(
                    f"rank '{rank}' of tensor '{name}' must be an upper-case name", rloc
                )
            if rank in names:
                raise SpecError(f"tensor '{name}' declares rank '{rank}' twice", rloc)
            names.append(str(rank))
        decls.append(TensorDecl(str(name), tuple(names), loc))
    return tuple(decls)


def _shapes(
    raw: Any, where: Loc
) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, Loc], ...]]:
    """The file's default extents and where each entry is written (its key)."""
    if raw is None:
        return (), ()
    if not isinstance(raw, LocDict):
        raise SpecError("shapes must map ranks to positive integers, e.g. 'M: 4096'", where)
    out, locs = [], []
    for rank, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SpecError(
                f"shape of rank '{rank}' must be a positive integer, got {value!r}",
                raw.loc_of(rank),
            )
        out.append((str(rank), int(value)))
        locs.append((str(rank), raw.key_locs.get(rank, where)))
    return tuple(out), tuple(locs)


def _operators(raw: Any, where: Loc) -> dict[str, Operator]:
    if raw is None:
        return {}
    if not isinstance(raw, LocDict):
        raise SpecError("operators must map 'name(a, b)' to an expression", where)
    ops: dict[str, Operator] = {}
    for key, value in raw.items():
        kloc = raw.key_locs[key]
        head = _as_str(key, kloc, "an operator head")
        name, params = parse_text(LocStr(str(head), kloc, None), "opdef")
        if name in FUNCTIONS:
            raise SpecError(
                f"operator '{name}' is already defined: a built-in function "
                f"({FUNCTIONS[name].doc}); remove the operator to use it",
                kloc,
            )
        if name in REDUCE_OPS or name in ops:
            raise SpecError(f"operator '{name}' is already defined", kloc)
        if len(set(params)) != len(params):
            raise SpecError(f"operator '{name}' repeats a parameter", kloc)
        identity = None
        body_raw = value
        if isinstance(value, LocDict):
            _check_keys(value, ("body", "identity"), f"operator '{name}'")
            if "body" not in value:
                raise SpecError(f"operator '{name}' needs a 'body'", value.loc)
            body_raw = value["body"]
            if "identity" in value:
                ident = value["identity"]
                if isinstance(ident, str) and ident.strip() in ("inf", "-inf", "+inf"):
                    ident = float(ident.strip())
                if isinstance(ident, bool) or not isinstance(ident, int | float):
                    raise SpecError(
                        f"identity of operator '{name}' must be a number", value.loc_of("identity")
                    )
                identity = float(ident)
        body_text = _as_str(body_raw, raw.loc_of(key), f"body of operator '{name}'")
        body = parse_body(body_text)
        for acc in free_names(body):
            if acc.tensor not in params:
                raise SpecError(
                    f"operator '{name}' reads '{acc.tensor}', which is none of its parameters "
                    f"({', '.join(params)}); pass it as an argument",
                    acc.loc,
                )
        ops[name] = Operator(name, params, body, identity, kloc)
    # Expand operators that call other operators (no recursion allowed).
    expanded: dict[str, Operator] = {}
    for name, op in ops.items():
        body = expand(op.body, ops, params=frozenset(op.params), stack=(name,))
        expanded[name] = Operator(name, op.params, body, op.identity, op.loc)
    return expanded


def _reference(data: LocDict) -> Reference | None:
    """The optional `reference:` entry: an algorithm of :data:`references.ALGORITHMS` and
    its options, every name and value checked where it is written."""
    if "reference" not in data:
        return None
    raw, where = data["reference"], data.loc_of("reference")
    known = ", ".join(ALGORITHMS)
    if not isinstance(raw, LocDict):
        raise SpecError(
            f"reference must map 'algorithm' to one of {known}, e.g. "
            "'reference: {algorithm: attention, mask: causal}'",
            where,
        )
    if "algorithm" not in raw:
        raise SpecError(f"reference needs 'algorithm' (one of {known})", raw.loc)
    algorithm = raw["algorithm"]
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise SpecError(
            f"unknown reference algorithm {algorithm!r} (known: {known})",
            raw.loc_of("algorithm"),
        )
    table = ALGORITHMS[algorithm]
    _check_keys(raw, ("algorithm", *table), f"reference '{algorithm}'")
    options = []
    for key, allowed in table.items():
        if key not in raw:
            continue
        value = raw[key]
        if allowed is None:
            if not isinstance(value, str) or not value.isidentifier() or not value[0].isupper():
                raise SpecError(
                    f"reference {algorithm}: {key} names a size parameter (upper-case, "
                    f"like W), got {value!r}",
                    raw.loc_of(key),
                )
        elif not isinstance(value, str) or value not in allowed:
            raise SpecError(
                f"reference {algorithm}: {key} must be one of {', '.join(allowed)}, got {value!r}",
                raw.loc_of(key),
            )
        options.append((key, str(value)))
    return Reference(algorithm, tuple(options), raw.loc)


def _terms(expr: Expr) -> list[Expr]:
    """The terms a right-hand side adds (or subtracts): `A * B + C * D` -> [A * B, C * D]."""
    if isinstance(expr, Op) and expr.name in ("add", "sub"):
        return _terms(expr.args[0]) + _terms(expr.args[1])
    if isinstance(expr, Op) and expr.name == "neg":
        return _terms(expr.args[0])
    return [expr]


def _variables(expr: Expr) -> set[str]:
    """Index variables a term reads (its tensors' indices, its variables used as values)."""
    names = {v for access in expr_reads(expr) for v in access.vars()}
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, VarValue):
            names.add(node.name)
        elif isinstance(node, Op):
            stack.extend(node.args)
    return names


def lopsided_sum(e: Einsum) -> None:
    """A warning (not an error: it is what the language says) for a sum over a rank that
    only some of the summed terms read: `S[m, p] = QL[l, p] * C[l, m] + QR[r, p] * KR[r, m]`
    sums the whole right-hand side over l and r, so each term is multiplied by the extent
    of the rank it lacks -- rarely what was meant (write each sum as an Einsum of its own)."""
    if e.reduce_op != "sum" or not e.reduced:
        return
    terms = _terms(e.expr)
    if len(terms) < 2:
        return
    seen = [_variables(t) for t in terms]
    lopsided = [
        var
        for var in e.reduced
        if not all(var in names for names in seen) and any(var in names for names in seen)
    ]
    if lopsided:
        counted = ", ".join(f"one without {v} {v.upper()} times" for v in lopsided)
        warn(
            f"Einsum '{e.name}' sums over {', '.join(lopsided)} terms that do not all read "
            f"{'it' if len(lopsided) == 1 else 'them'}: the reduction applies to the whole "
            f"right-hand side, so a term is counted once per point it lacks ({counted}); "
            "write each term's sum as an Einsum of its own",
            e.loc,
        )


_ARITHMETIC = ("add", "sub", "mul", "div", "neg")


def _ops(expr: Expr) -> list[Op]:
    """Every map action in the expression, outermost first."""
    out, stack = [], [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Op):
            out.append(node)
            stack.extend(node.args)
    return out


def _product_inside_function(expr: Expr, reduced: set[str]) -> Op | None:
    """The first function call whose argument multiplies two reads that both carry a
    reduced variable (`silu(X[d, p] * W[d, n])` reduced over d), None if none."""
    for call in _ops(expr):
        if call.name in _ARITHMETIC:
            continue
        for product in _ops(call):
            if product.name == "mul" and all(
                {v for a in expr_reads(side) for v in a.vars()} & reduced for side in product.args
            ):
                return call
    return None


def function_of_contraction(e: Einsum) -> None:
    """A warning for a function applied to a contraction's product inside the reduction:
    `U[n, p] = silu(X[d, p] * W[d, n])` sums silu of each term over d (the reduction applies
    to the whole right-hand side), not silu of X W -- rarely what was meant."""
    if not e.reduced:
        return
    call = _product_inside_function(e.expr, set(e.reduced))
    if call is not None:
        warn(
            f"Einsum '{e.name}' reduces over {', '.join(e.reduced)} a {call.name}() of a "
            f"product that is reduced: the reduction applies to the whole right-hand side, "
            f"so each term's {call.name} is reduced, not the {call.name} of the contraction; "
            "write the contraction as an Einsum of its own",
            e.loc,
        )


def load_cascade(path: str | Path) -> Cascade:
    """Parse and check a cascade file."""
    data = yamlio.load(path)
    return build_cascade(data, str(path))


def loads_cascade(text: str, source: str = "<string>") -> Cascade:
    return build_cascade(yamlio.loads(text, source), source)


def build_cascade(data: Any, source: str) -> Cascade:
    top = Loc(source, 1, 1)
    if not isinstance(data, LocDict):
        raise SpecError("a cascade file must be a YAML mapping with an 'einsum:' section", top)
    _check_keys(data, TOP_KEYS, "the cascade file")
    if "einsum" not in data:
        raise SpecError(
            "missing 'einsum:' section (with 'declaration:' and 'expressions:')", data.loc
        )
    einsum = data["einsum"]
    if not isinstance(einsum, LocDict):
        raise SpecError(
            "'einsum:' must hold 'declaration:' and 'expressions:'", data.loc_of("einsum")
        )
    _check_keys(einsum, EINSUM_KEYS, "'einsum:'")
    for key in EINSUM_KEYS:
        if key not in einsum:
            raise SpecError(f"missing 'einsum.{key}'", einsum.loc)
    name = data.get("name") or Path(source).stem
    description = data.get("description") or ""
    if not isinstance(name, str) or not isinstance(description, str):
        raise SpecError("'name' and 'description' must be strings", data.loc)
    decls = _declarations(einsum["declaration"], einsum.loc_of("declaration"))
    shapes, shape_locs = _shapes(data.get("shapes"), data.loc_of("shapes"))
    ops = _operators(data.get("operators"), data.loc_of("operators"))
    exprs = einsum["expressions"]
    if not isinstance(exprs, LocList) or not exprs:
        raise SpecError(
            "einsum.expressions must be a non-empty list of Einsums", einsum.loc_of("expressions")
        )
    statements = []
    with Steps("parsing Einsums", len(exprs), "Einsum") as progress:
        for i, item in enumerate(exprs):
            if isinstance(item, LocDict) and len(item) == 1:
                # `- QK: BQK[...] = ...` is YAML for {QK: "BQK[...] = ..."}: a labelled Einsum.
                ((label, body),) = item.items()
                body = _as_str(body, item.loc_of(label), "an Einsum")
                prefix = f"{label}: "
                text = LocStr(prefix + str(body), body.loc, body.style, prefix=len(prefix))
            else:
                text = _as_str(item, exprs.loc_of(i), "an Einsum")
            statements.append(parse_text(text, "start"))
            progress.update(i + 1)
    reference = _reference(data)
    cascade = Checker(
        str(name), str(description).strip(), source, decls, shapes, ops, statements, shape_locs
    ).build()
    for e in cascade.einsums:
        lopsided_sum(e)
        function_of_contraction(e)
    if reference is None:
        return cascade
    cascade = replace(cascade, reference=reference)
    check_reference(cascade)
    return cascade
