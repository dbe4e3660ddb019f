"""Read a cascade file (TeAAL-style YAML + the lark grammar of one Einsum) into checked IR.

The file format (documented with examples in `cascades/README.md`)::

    name: attention-1pass            # optional, defaults to the file name
    description: ...                 # optional
    shapes: {M: 4096, M0: 256}       # optional default rank extents
    operators:                       # optional user-defined operators
      sub_exp(a, b): exp(a - b)
    einsum:
      declaration:                   # tensor -> ranks (upper-case)
        Q: [E, P]
      expressions:                   # one Einsum per line, in a valid execution order
        - "QK: BQK[m1, m0, p] = Q[e, p] * BK[e, m1, m0]"

Every problem is a :class:`SpecError` naming the file, line and column.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from simulator.cascade.ir import (
    CANONICAL_REDUCE,
    FUNCTION_ARITY,
    REDUCE_OPS,
    Access,
    Cascade,
    Cond,
    Einsum,
    Expr,
    IBin,
    IInt,
    Index,
    IndexPos,
    ISym,
    IVar,
    Num,
    Op,
    Operator,
    Read,
    TensorDecl,
    expr_reads,
    index_str,
    index_syms,
    index_vars,
    rank_of,
    reads_previous_step,
)
from simulator.errors import Loc, SpecError
from simulator.spec import yamlio
from simulator.spec.yamlio import LocDict, LocList, LocStr

TOP_KEYS = ("name", "description", "shapes", "operators", "einsum")
EINSUM_KEYS = ("declaration", "expressions")


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = (Path(__file__).parent / "grammar.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", start=["start", "opdef"], propagate_positions=True)


# --------------------------------------------------------------------------------------
# Text -> raw statement


@dataclass(frozen=True)
class RawStatement:
    label: str | None
    output: Access
    expr: Expr
    reduction: tuple[str, tuple[str, ...], Loc] | None
    until: Cond | None
    until_loc: Loc | None
    loc: Loc


def _describe_unexpected(err: UnexpectedInput, text: str) -> str:
    if isinstance(err, UnexpectedCharacters):
        return f"unexpected character {text[err.pos_in_stream]!r}"
    if isinstance(err, UnexpectedEOF) or (
        isinstance(err, UnexpectedToken) and err.token.type == "$END"
    ):
        return "unexpected end of Einsum"
    if isinstance(err, UnexpectedToken):
        return f"unexpected {err.token.value!r}"
    return "syntax error"


class _ToIR(Transformer):
    """Lark tree -> IR pieces; positions become `Loc`s inside the YAML file."""

    def __init__(self, source: LocStr) -> None:
        super().__init__()
        self.source = source

    def loc(self, item: Token | Any) -> Loc:
        column = getattr(item, "column", None)
        if column is None:
            return self.source.text_loc(0)
        return self.source.text_loc(column - 1)

    # index expressions
    def iint(self, items: list[Token]) -> Index:
        return IInt(int(items[0]))

    def iname(self, items: list[Token]) -> Index:
        name = str(items[0])
        return ISym(name) if name[0].isupper() else IVar(name)

    def iadd(self, items: list[Index]) -> Index:
        return IBin("+", items[0], items[1])

    def isub(self, items: list[Index]) -> Index:
        return IBin("-", items[0], items[1])

    def imul(self, items: list[Index]) -> Index:
        return IBin("*", items[0], items[1])

    def cond(self, items: list[Any]) -> Cond:
        return Cond(items[0], str(items[1]), items[2])

    def index(self, items: list[Any]) -> IndexPos:
        return IndexPos(items[0], items[1])

    @v_args(meta=True)
    def ranked(self, meta: Any, items: list[Any]) -> Access:
        name = items[0]
        indices = tuple(i for i in items[1:] if i is not None)
        return Access(str(name), indices, self.loc(name))

    def bare(self, items: list[Token]) -> Any:
        name = str(items[0])
        if name == "inf":
            return Num(float("inf"))
        return Access(name, (), self.loc(items[0]))

    # value expressions
    def number(self, items: list[Token]) -> Expr:
        return Num(float(items[0]))

    def _wrap(self, item: Any) -> Expr:
        return Read(item) if isinstance(item, Access) else item

    def add(self, items: list[Any]) -> Expr:
        return Op("add", (self._wrap(items[0]), self._wrap(items[1])))

    def sub(self, items: list[Any]) -> Expr:
        return Op("sub", (self._wrap(items[0]), self._wrap(items[1])))

    def mul(self, items: list[Any]) -> Expr:
        return Op("mul", (self._wrap(items[0]), self._wrap(items[1])))

    def div(self, items: list[Any]) -> Expr:
        return Op("div", (self._wrap(items[0]), self._wrap(items[1])))

    def neg(self, items: list[Any]) -> Expr:
        inner = self._wrap(items[0])
        if isinstance(inner, Num):
            return Num(-inner.value)
        return Op("neg", (inner,))

    def call(self, items: list[Any]) -> Expr:
        name = items[0]
        return _Call(str(name), tuple(self._wrap(a) for a in items[1:]), self.loc(name))

    def reduction(self, items: list[Token]) -> tuple[str, tuple[str, ...], Loc]:
        return (str(items[0]), tuple(str(t) for t in items[1:]), self.loc(items[0]))

    def until(self, items: list[Any]) -> tuple[Cond, Loc]:
        return (items[1], self.loc(items[0]))

    def label(self, items: list[Token]) -> str:
        return str(items[0])

    def statement(self, items: list[Any]) -> RawStatement:
        label, output, expr, reduction, until = items
        if isinstance(output, Access) and output.tensor == "inf":
            raise SpecError("'inf' cannot be assigned", output.loc)
        until_cond, until_loc = until if until is not None else (None, None)
        return RawStatement(
            label,
            output,
            self._wrap(expr),
            reduction,
            until_cond,
            until_loc,
            self.source.text_loc(0),
        )

    def start(self, items: list[Any]) -> RawStatement:
        return items[0]

    def opdef(self, items: list[Token]) -> tuple[str, tuple[str, ...]]:
        return (str(items[0]), tuple(str(t) for t in items[1:]))


@dataclass(frozen=True)
class _Call:
    """A call before operator expansion (user operators are expanded inline)."""

    name: str
    args: tuple[Any, ...]
    loc: Loc


def _parse_text(text: LocStr, start: str) -> Any:
    try:
        tree: Tree = _parser().parse(str(text), start=start)
    except UnexpectedInput as err:
        offset = max(0, min(len(text), (getattr(err, "column", 1) or 1) - 1))
        if isinstance(err, UnexpectedToken | UnexpectedEOF) and getattr(err, "token", None):
            tok = err.token
            if tok.type == "$END":
                offset = len(str(text).rstrip())
        raise SpecError(
            f"syntax error: {_describe_unexpected(err, str(text))} in '{text}'",
            text.text_loc(offset),
        ) from None
    try:
        return _ToIR(text).transform(tree)
    except Exception as err:  # lark wraps errors raised in callbacks
        inner = getattr(err, "orig_exc", err)
        if isinstance(inner, SpecError):
            raise inner from None
        raise


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
        name, params = _parse_text(LocStr(str(head), kloc, None), "opdef")
        if name in FUNCTION_ARITY or name in REDUCE_OPS or name in ops:
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
        body = _parse_body(body_text)
        ops[name] = Operator(name, params, body, identity, kloc)
    # Expand operators that call other operators (no recursion allowed).
    expanded: dict[str, Operator] = {}
    for name, op in ops.items():
        body = _expand(op.body, ops, params=frozenset(op.params), stack=(name,))
        expanded[name] = Operator(name, op.params, body, op.identity, op.loc)
    return expanded


def _parse_body(body_text: LocStr) -> Expr:
    """Parse an operator body as the right-hand side of a dummy Einsum."""
    prefix = "__body = "
    stmt: RawStatement = _parse_text(
        LocStr(prefix + str(body_text), body_text.loc, body_text.style, prefix=len(prefix)), "start"
    )
    if stmt.reduction is not None or stmt.until is not None:
        raise SpecError("an operator body is an expression, without '::' or 'until'", body_text.loc)
    return stmt.expr


def _expand(
    expr: Any,
    ops: dict[str, Operator],
    params: frozenset[str] = frozenset(),
    stack: tuple[str, ...] = (),
) -> Expr:
    """Replace user-operator calls by their bodies; check built-in function arity."""
    if isinstance(expr, Num | Read):
        return expr
    if isinstance(expr, Op):
        return Op(expr.name, tuple(_expand(a, ops, params, stack) for a in expr.args))
    if isinstance(expr, _Call):
        args = tuple(_expand(a, ops, params, stack) for a in expr.args)
        if expr.name in FUNCTION_ARITY:
            arity = FUNCTION_ARITY[expr.name]
            if expr.name in ("max", "min") and len(args) >= 2:
                result: Expr = args[0]
                for arg in args[1:]:
                    result = Op(expr.name, (result, arg))
                return result
            if len(args) != arity:
                raise SpecError(
                    f"{expr.name}() takes {arity} argument(s), got {len(args)}", expr.loc
                )
            return Op(expr.name, args)
        if expr.name in ops:
            if expr.name in stack:
                raise SpecError(f"operator '{expr.name}' calls itself", expr.loc)
            op = ops[expr.name]
            if len(args) != len(op.params):
                raise SpecError(
                    f"operator '{expr.name}' takes {len(op.params)} argument(s), got {len(args)}",
                    expr.loc,
                )
            body = _expand(op.body, ops, frozenset(op.params), stack + (expr.name,))
            return _substitute(body, dict(zip(op.params, args, strict=True)))
        known = sorted(set(FUNCTION_ARITY) | set(ops))
        raise SpecError(
            f"unknown function or operator '{expr.name}' (known: {', '.join(known)})", expr.loc
        )
    raise TypeError(expr)


def _substitute(expr: Expr, binding: dict[str, Expr]) -> Expr:
    if isinstance(expr, Read) and not expr.access.indices and expr.access.tensor in binding:
        return binding[expr.access.tensor]
    if isinstance(expr, Op):
        return Op(expr.name, tuple(_substitute(a, binding) for a in expr.args))
    return expr


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
    for i, item in enumerate(exprs):
        if isinstance(item, LocDict) and len(item) == 1:
            # `- QK: BQK[...] = ...` is YAML for {QK: "BQK[...] = ..."}: a labelled Einsum.
            ((label, body),) = item.items()
            body = _as_str(body, item.loc_of(label), "an Einsum")
            prefix = f"{label}: "
            text = LocStr(prefix + str(body), body.loc, body.style, prefix=len(prefix))
        else:
            text = _as_str(item, exprs.loc_of(i), "an Einsum")
        statements.append(_parse_text(text, "start"))
    return _Checker(
        str(name), str(description).strip(), source, decls, shapes, ops, statements, shape_locs
    ).build()


# --------------------------------------------------------------------------------------
# Semantic checks


def _affine_terms(ix: Index, loc: Loc) -> tuple[list[tuple[str, tuple[Any, ...]]], list[Any]]:
    """Split an index into `var * coefficient` terms and constant terms; reject non-affine."""
    if isinstance(ix, IVar):
        return [(ix.name, ())], []
    if isinstance(ix, IInt | ISym):
        return [], [ix]
    if ix.op in ("+", "-"):
        lt, lc = _affine_terms(ix.left, loc)
        rt, rc = _affine_terms(ix.right, loc)
        if ix.op == "-" and rt:
            raise SpecError(f"index '{index_str(ix)}' subtracts a variable (not supported)", loc)
        return lt + rt, lc + rc
    # product: at most one side may hold a variable
    lt, lc = _affine_terms(ix.left, loc)
    rt, rc = _affine_terms(ix.right, loc)
    if lt and rt:
        raise SpecError(f"index '{index_str(ix)}' multiplies two variables (not affine)", loc)
    if (lt and lc) or (rt and rc):
        raise SpecError(
            f"index '{index_str(ix)}' is too complex; write it as a sum of variable*shape terms",
            loc,
        )
    if lt:
        return [(v, c + tuple(rc)) for v, c in lt], []
    if rt:
        return [(v, c + tuple(lc)) for v, c in rt], []
    return [], [ix]


class _Checker:
    """Turns raw statements into Einsums, checking names, ranks, order and iteration."""

    def __init__(
        self,
        name: str,
        description: str,
        source: str,
        decls: tuple[TensorDecl, ...],
        shapes: tuple[tuple[str, int], ...],
        ops: dict[str, Operator],
        statements: list[RawStatement],
        shape_locs: tuple[tuple[str, Loc], ...] = (),
    ) -> None:
        self.name, self.description, self.source = name, description, source
        self.decls = {d.name: d for d in decls}
        self.decl_order = decls
        self.shapes = shapes
        self.shape_locs = shape_locs
        self.ops = ops
        self.statements = statements
        self.declared_ranks = {r for d in decls for r in d.ranks}
        self.partitions: dict[str, tuple[str, ...]] = {}
        self.partition_locs: dict[str, Loc] = {}
        self.offset_indices: list[tuple[Access, int, bool]] = []

    # ---- helpers ----
    def known_rank(self, rank: str) -> bool:
        return rank in self.declared_ranks or any(rank in c for c in self.partitions.values())

    def check_access(self, access: Access, is_output: bool) -> None:
        decl = self.decls.get(access.tensor)
        if decl is None:
            raise SpecError(
                f"unknown tensor '{access.tensor}' (declare it under einsum.declaration)",
                access.loc,
            )
        if len(access.indices) != len(decl.ranks):
            raise SpecError(
                f"'{access.tensor}' has {len(decl.ranks)} rank(s) "
                f"[{', '.join(decl.ranks)}] but is indexed with "
                f"{len(access.indices)}",
                access.loc,
            )
        for pos, (ix, rank) in enumerate(zip(access.indices, decl.ranks, strict=True)):
            self.check_index(access, pos, ix, rank, is_output)

    def check_index(
        self, access: Access, pos: int, ix: IndexPos, rank: str, is_output: bool
    ) -> None:
        loc = access.loc
        terms, consts = _affine_terms(ix.expr, loc)
        for sym in index_syms(ix.expr):
            if not self.known_rank(sym):
                raise SpecError(
                    f"undeclared rank '{sym}' in index '{index_str(ix.expr)}' of '{access.tensor}'",
                    loc,
                )
        if ix.filter is not None:
            if is_output:
                raise SpecError(f"a filter is not allowed on the output '{access.tensor}'", loc)
            for side in (ix.filter.left, ix.filter.right):
                _affine_terms(side, loc)
                for sym in index_syms(side):
                    if not self.known_rank(sym):
                        raise SpecError(f"undeclared rank '{sym}' in filter '{ix.filter}'", loc)
                for var in index_vars(side):
                    if not self.known_rank(rank_of(var)):
                        raise SpecError(
                            f"undeclared rank '{rank_of(var)}' (variable '{var}') "
                            f"in filter '{ix.filter}'",
                            loc,
                        )
        if not terms:
            for c in consts:
                if isinstance(c, ISym) and c.name != rank:
                    raise SpecError(
                        f"constant index '{c.name}' at rank '{rank}' of "
                        f"'{access.tensor}': a rank used with two different shapes "
                        f"('{c.name}' and '{rank}')",
                        loc,
                    )
            return
        if len(terms) == 1:
            var, coef = terms[0]
            if coef:
                raise SpecError(
                    f"index '{index_str(ix.expr)}' of '{access.tensor}' scales a "
                    "variable; use a partitioned index like m1*M0 + m0",
                    loc,
                )
            if not self.known_rank(rank_of(var)):
                raise SpecError(
                    f"undeclared rank '{rank_of(var)}' (variable '{var}' in '{access}')", loc
                )
            if rank_of(var) != rank:
                raise SpecError(
                    f"variable '{var}' ranges over rank '{rank_of(var)}' but indexes "
                    f"rank '{rank}' of '{access.tensor}': a rank used with two "
                    f"different shapes",
                    loc,
                )
            if consts:
                # `r+1`: the output of an iterative Einsum, or a read of the current step of an
                # iterative tensor; both are checked once iterative tensors are known.
                self.offset_indices.append((access, pos, is_output))
            return
        # Partitioned index: m1*M0 + m0 (outer first), coefficients = product of inner extents.
        if is_output:
            raise SpecError(
                f"output index '{index_str(ix.expr)}' of '{access.tensor}' must be a "
                "variable; split ranks on the right-hand side",
                loc,
            )
        if consts:
            raise SpecError(f"partitioned index '{index_str(ix.expr)}' has a constant term", loc)
        comps: list[str] = []
        for var, _ in terms:
            comp = rank_of(var)
            if not comp[0].isalpha():
                raise SpecError(f"bad variable '{var}'", loc)
            comps.append(comp)
        if len(set(comps)) != len(comps):
            raise SpecError(f"partitioned index '{index_str(ix.expr)}' repeats a variable", loc)
        order = sorted(range(len(terms)), key=lambda i: -len(terms[i][1]))
        comps = [comps[i] for i in order]
        for k, i in enumerate(order):
            inner = sorted(comps[k + 1 :])
            coef = terms[i][1]
            if any(not isinstance(c, ISym) for c in coef) or sorted(c.name for c in coef) != inner:
                expected = " + ".join(
                    "*".join([terms[j][0]] + comps[kk + 1 :]) for kk, j in enumerate(order)
                )
                raise SpecError(
                    f"partitioned index '{index_str(ix.expr)}' of rank '{rank}' must "
                    f"read {expected}",
                    loc,
                )
        existing = self.partitions.get(rank)
        if existing is not None and existing != tuple(comps):
            raise SpecError(
                f"rank '{rank}' is split as {'x'.join(comps)} here but as "
                f"{'x'.join(existing)} at {self.partition_locs[rank]}",
                loc,
            )
        if rank in comps:
            raise SpecError(f"rank '{rank}' cannot be a component of itself", loc)
        self.partitions[rank] = tuple(comps)
        self.partition_locs.setdefault(rank, loc)

    # ---- main ----
    def build(self) -> Cascade:
        expanded: list[tuple[RawStatement, Expr]] = []
        for st in self.statements:
            expanded.append((st, _expand(st.expr, self.ops)))
        # Pass 1: accesses, partitions, iterative outputs.
        iterative_tensors: dict[str, tuple[int, str, Loc]] = {}
        for st, expr in expanded:
            self.check_access(st.output, is_output=True)
            for acc in expr_reads(expr):
                self.check_access(acc, is_output=False)
            for pos, ix in enumerate(st.output.indices):
                if isinstance(ix.expr, IBin):
                    terms, consts = _affine_terms(ix.expr, st.output.loc)
                    if not (
                        len(terms) == 1
                        and len(consts) == 1
                        and ix.expr.op == "+"
                        and isinstance(consts[0], IInt)
                        and consts[0].value == 1
                    ):
                        raise SpecError(
                            f"output index '{index_str(ix.expr)}' must be a variable,"
                            " 'var+1' (iterative) or a constant",
                            st.output.loc,
                        )
                    var = terms[0][0]
                    prev = iterative_tensors.get(st.output.tensor)
                    if prev is not None:
                        raise SpecError(
                            f"iterative tensor '{st.output.tensor}' is produced "
                            f"twice (also at {prev[2]})",
                            st.loc,
                        )
                    iterative_tensors[st.output.tensor] = (pos, var, st.loc)
        for acc, pos, is_output in self.offset_indices:
            ix = acc.indices[pos].expr
            plus_one = (
                isinstance(ix, IBin)
                and ix.op == "+"
                and isinstance(ix.left, IVar)
                and ix.right == IInt(1)
            )
            if is_output:
                continue  # checked above
            it = iterative_tensors.get(acc.tensor)
            if not plus_one or it is None or it[0] != pos or it[1] != ix.left.name:
                raise SpecError(
                    f"index '{index_str(ix)}' of '{acc.tensor}': an offset index is "
                    "only allowed as 'r+1' on the iterative rank of an iterative "
                    "tensor",
                    acc.loc,
                )
        for rank in list(self.partitions):
            if rank not in self.declared_ranks:
                raise SpecError(f"undeclared rank '{rank}'", self.partition_locs[rank])
        self._check_partition_cycles()

        # Pass 2: build Einsums.
        einsums: list[Einsum] = []
        names: dict[str, Loc] = {}
        stops: dict[str, tuple[str, Loc]] = {}
        for st, expr in expanded:
            e = self._einsum(st, expr, iterative_tensors, stops)
            if e.name in names:
                raise SpecError(
                    f"Einsum name '{e.name}' is used twice (first at {names[e.name]});"
                    " give one a label, 'NAME: ...'",
                    st.loc,
                )
            names[e.name] = e.loc
            einsums.append(e)
        self._check_producers(einsums, iterative_tensors, stops)
        cascade = Cascade(
            name=self.name,
            description=self.description,
            path=self.source,
            tensors=self.decl_order,
            einsums=tuple(einsums),
            operators=tuple(self.ops.values()),
            partitions=tuple(sorted(self.partitions.items())),
            iterative=tuple(sorted((v, b) for v, (b, _) in stops.items())),
            shapes=self.shapes,
            shape_locs=self.shape_locs,
        )
        for rank, _ in self.shapes:
            if not (self.known_rank(rank)):
                raise SpecError(f"shapes: unknown rank '{rank}'", cascade.shape_loc(rank))
        return cascade

    def _check_partition_cycles(self) -> None:
        for rank in self.partitions:
            seen = {rank}
            stack = list(self.partitions[rank])
            while stack:
                comp = stack.pop()
                if comp in seen:
                    raise SpecError(
                        f"rank '{rank}' is partitioned into itself", self.partition_locs[rank]
                    )
                seen.add(comp)
                stack += list(self.partitions.get(comp, ()))

    def _einsum(
        self,
        st: RawStatement,
        expr: Expr,
        iterative_tensors: dict[str, tuple[int, str, Loc]],
        stops: dict[str, tuple[str, Loc]],
    ) -> Einsum:
        out = st.output
        out_vars = list(out.vars())
        iterative_var = None
        it = iterative_tensors.get(out.tensor)
        is_init = False
        if it is not None:
            pos, var, _ = it
            ix = out.indices[pos].expr
            if isinstance(ix, IBin):
                iterative_var = var
            elif isinstance(ix, IInt) and ix.value == 0:
                is_init = True
            else:
                raise SpecError(
                    f"iterative tensor '{out.tensor}' can only be written at index 0 "
                    f"(initialisation) or {var}+1",
                    out.loc,
                )
        elif any(isinstance(ix.expr, IInt | ISym) for ix in out.indices):
            raise SpecError(
                f"constant output index in '{out}': only iterative tensors "
                "(written elsewhere as T[r+1, ...]) have an initialisation",
                out.loc,
            )
        read_vars: list[str] = []
        for acc in expr_reads(expr):
            read_vars += [v for v in acc.vars() if v not in read_vars]
        iteration = tuple(out_vars + [v for v in read_vars if v not in out_vars])
        reduced = tuple(v for v in read_vars if v not in out_vars)
        reduce_op = "sum"
        if st.reduction is not None:
            op_name, rvars, rloc = st.reduction
            if op_name in CANONICAL_REDUCE:
                reduce_op = CANONICAL_REDUCE[op_name]
            elif op_name in self.ops:
                op = self.ops[op_name]
                if len(op.params) != 2 or op.identity is None:
                    raise SpecError(
                        f"operator '{op_name}' cannot reduce: a reduction operator "
                        "takes 2 arguments and declares an 'identity'",
                        rloc,
                    )
                reduce_op = op_name
            else:
                raise SpecError(
                    f"unknown reduction operator '{op_name}' (known: "
                    f"{', '.join(sorted(set(CANONICAL_REDUCE) | set(self.ops)))})",
                    rloc,
                )
            for v in rvars:
                if v not in iteration:
                    raise SpecError(f"'{v}' is reduced but is not a variable of this Einsum", rloc)
                if v in out_vars:
                    raise SpecError(f"'{v}' is reduced but appears in the output '{out}'", rloc)
            missing = [v for v in reduced if v not in rvars]
            if missing:
                raise SpecError(
                    f"'{', '.join(missing)}' absent from the output must be listed "
                    f"in the reduction '{op_name}({', '.join(rvars)})'",
                    rloc,
                )
        if st.until is not None:
            cond = st.until
            if iterative_var is None:
                raise SpecError(
                    "'until' belongs to an iterative Einsum (output index 'r+1')", st.until_loc
                )
            if not (
                cond.op == "=="
                and isinstance(cond.left, IVar)
                and cond.left.name == iterative_var
                and isinstance(cond.right, IInt | ISym)
            ):
                raise SpecError(
                    f"stopping condition must read '{iterative_var} == BOUND', got '{cond}'",
                    st.until_loc,
                )
            bound = index_str(cond.right)
            if isinstance(cond.right, ISym) and not self.known_rank(cond.right.name):
                raise SpecError(f"undeclared rank '{bound}' in stopping condition", st.until_loc)
            prev = stops.get(iterative_var)
            if prev is not None and prev[0] != bound:
                raise SpecError(
                    f"iterative rank '{iterative_var}' stops at '{bound}' here but at "
                    f"'{prev[0]}' at {prev[1]}",
                    st.until_loc,
                )
            stops[iterative_var] = (bound, st.until_loc or st.loc)
        if is_init:
            kind = "init"
        elif isinstance(expr, Read) and st.reduction is None and not reduced:
            kind = "copy"
        elif isinstance(expr, Num):
            kind = "init" if it is not None else "copy"
        else:
            kind = "compute"
        name = st.label or (f"{out.tensor}_init" if is_init else out.tensor)
        text = (
            f"{out} = {expr}"
            if st.reduction is None
            else (f"{out} = {expr} :: {reduce_op}({', '.join(reduced)})")
        )
        return Einsum(
            name=name,
            output=out,
            expr=expr,
            reduce_op=reduce_op,
            reduced=reduced,
            iteration=iteration,
            iterative=iterative_var,
            until=st.until,
            kind=kind,
            text=text,
            loc=st.loc,
        )

    def _check_producers(
        self,
        einsums: list[Einsum],
        iterative_tensors: dict[str, tuple[int, str, Loc]],
        stops: dict[str, tuple[str, Loc]],
    ) -> None:
        main: dict[str, int] = {}
        init: dict[str, int] = {}
        for i, e in enumerate(einsums):
            table = init if e.kind == "init" else main
            t = e.output.tensor
            if t in table:
                other = einsums[table[t]]
                raise SpecError(
                    f"tensor '{t}' is produced twice (also by '{other.name}' at {other.loc})", e.loc
                )
            table[t] = i
        for t, (_pos, var, loc) in iterative_tensors.items():
            if t not in init:
                raise SpecError(
                    f"iterative tensor '{t}' (rank '{var}') has no initialisation; "
                    f"add e.g. '{t}[0, ...] = 0'",
                    loc,
                )
            if var not in stops:
                raise SpecError(
                    f"iterative rank '{var}' has no stopping condition; add "
                    f"'until {var} == {rank_of(var)}' to its Einsum",
                    loc,
                )
        for t, i in init.items():
            if t not in iterative_tensors:
                raise SpecError(
                    f"'{t}' is initialised but never iterated (no '{t}[r+1, ...]')", einsums[i].loc
                )
        # Dependency cycles (edges that are not carried by an iterative rank).
        edges: dict[int, list[tuple[int, str]]] = {i: [] for i in range(len(einsums))}
        for j, e in enumerate(einsums):
            for acc in e.reads():
                t = acc.tensor
                if t not in main and t not in init:
                    continue
                carried = _is_carried_read(e, acc, iterative_tensors.get(t))
                if carried and t in init:
                    edges[init[t]].append((j, t))
                elif t in main:
                    edges[main[t]].append((j, t))
        cycle = _find_cycle(edges)
        if cycle:
            path = " -> ".join(einsums[i].name for i in cycle + [cycle[0]])
            raise SpecError(
                f"dependency cycle: {path} (only an iterative rank, 'T[r+1] = f(T[r])',"
                " may carry a value around a loop)",
                einsums[cycle[0]].loc,
            )
        # Reads must follow production in file order (the order is an execution order).
        for j, e in enumerate(einsums):
            for acc in e.reads():
                t = acc.tensor
                if t not in main and t not in init:
                    continue  # an input of the cascade
                carried = _is_carried_read(e, acc, iterative_tensors.get(t))
                if carried:
                    if init.get(t, len(einsums)) > j:
                        raise SpecError(
                            f"'{e.name}' reads '{acc}' (previous step) before '{t}' is initialised",
                            acc.loc,
                        )
                    if e.iterative is None and not _iterates(e, iterative_tensors[t][1]):
                        raise SpecError(
                            f"'{acc}' reads a step of iterative rank "
                            f"'{iterative_tensors[t][1]}' outside its loop",
                            acc.loc,
                        )
                elif main.get(t, len(einsums)) >= j and t in main:
                    producer = einsums[main[t]]
                    raise SpecError(
                        f"'{t}' is read before it is produced (by '{producer.name}' "
                        f"at {producer.loc})",
                        acc.loc,
                    )
                elif t not in main:
                    raise SpecError(
                        f"'{acc}' reads beyond the initialisation of '{t}', which is "
                        "never iterated",
                        acc.loc,
                    )


def _iterates(e: Einsum, var: str) -> bool:
    return var in e.iteration


def _is_carried_read(e: Einsum, acc: Access, iterative: tuple[int, str, Loc] | None) -> bool:
    """A read `T[r, ...]` of an iterative tensor at the plain variable, not reduced by `e`:
    the previous step (see :func:`reads_previous_step`)."""
    if iterative is None:
        return False
    pos, var, _ = iterative
    return reads_previous_step(acc, pos, var, e.reduced)


def _find_cycle(edges: dict[int, list[tuple[int, str]]]) -> list[int]:
    """Some cycle of the graph (nodes in order), or [] if it is acyclic."""
    color = dict.fromkeys(edges, 0)
    parent: dict[int, int] = {}
    for root in sorted(edges):
        if color[root]:
            continue
        stack = [(root, iter(sorted(edges[root])))]
        color[root] = 1
        while stack:
            node, children = stack[-1]
            advanced = False
            for child, _t in children:
                if color[child] == 0:
                    color[child] = 1
                    parent[child] = node
                    stack.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if color[child] == 1:
                    cycle = [node]
                    while cycle[-1] != child:
                        cycle.append(parent[cycle[-1]])
                    return list(reversed(cycle))
            if not advanced:
                color[node] = 2
                stack.pop()
    return []
