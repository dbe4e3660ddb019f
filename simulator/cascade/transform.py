"""One Einsum's text -> IR pieces, through the lark grammar (`grammar.lark`).

The parser's tree becomes IR expressions and accesses with positions inside the YAML file
(a lark column becomes a `Loc` of the file through the YAML string's `LocStr`); user
operators (`operators:` of the cascade file) are expanded inline and built-in functions
(the table `ir.FUNCTIONS`) checked for arity. What the statements mean together -- names,
ranks, order, iteration -- is checked by :mod:`simulator.cascade.checks`.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from simulator.cascade.ir import (
    FUNCTIONS,
    Access,
    Cond,
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
)
from simulator.spec.yamlio import LocStr
from simulator.support.cache_dir import cache_folder
from simulator.support.errors import Loc, SpecError


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    """The LALR parser with the IR transformer embedded: each rule becomes IR as it is
    reduced, with no parse tree built and walked again (twice as fast on a long cascade).
    The transformer reads the statement being parsed from `_TRANSFORMER.source`.

    Its tables are kept in the cache folder (lark's own `cache`: read back only when the
    digest of the grammar, the options and lark's version it starts with matches), so a
    process starts with them in about 4 ms instead of building them in 30-70 ms."""
    grammar = (Path(__file__).parent / "grammar.lark").read_text(encoding="utf-8")
    return Lark(
        grammar,
        parser="lalr",
        start=["start", "opdef"],
        transformer=_TRANSFORMER,
        cache=_tables_file(grammar),
    )


def _tables_file(grammar: str) -> str | bool:
    """Where the parser's tables are kept (one file per grammar text), or False: caching
    off, or no folder for it."""
    where = cache_folder("parser")
    if where is None:
        return False
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    digest = hashlib.sha256(grammar.encode()).hexdigest()[:16]
    return str(where / f"cascade-grammar-{digest}.lark")


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

    def __init__(self, source: LocStr | None = None) -> None:
        super().__init__()
        self.source = source if source is not None else LocStr("", Loc("<cascade>"))

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

    def ranked(self, items: list[Any]) -> Access:
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


_TRANSFORMER = _ToIR()


def parse_text(text: LocStr, start: str) -> Any:
    """The IR of one statement (`start`) or operator head (`opdef`). Kept per process by
    the text and its position: the rewriter parses each candidate cascade whole, and most
    of its statements are the input's, at the same lines (four in five parses); the IR is
    immutable, so the kept answer is shared."""
    return _parse_kept(str(text), start, text.loc, text.style, text.prefix)


@functools.lru_cache(maxsize=8192)
def _parse_kept(value: str, start: str, loc: Loc, style: str | None, prefix: int) -> Any:
    return _parse(LocStr(value, loc, style, prefix), start)


def _parse(text: LocStr, start: str) -> Any:
    _TRANSFORMER.source = text
    try:
        return _parser().parse(str(text), start=start)
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
    except Exception as err:  # lark may wrap an error raised in a callback
        inner = getattr(err, "orig_exc", err)
        if isinstance(inner, SpecError):
            raise inner from None
        raise


# --------------------------------------------------------------------------------------
# User operators


def parse_body(body_text: LocStr) -> Expr:
    """Parse an operator body as the right-hand side of a dummy Einsum."""
    prefix = "__body = "
    stmt: RawStatement = parse_text(
        LocStr(prefix + str(body_text), body_text.loc, body_text.style, prefix=len(prefix)), "start"
    )
    if stmt.reduction is not None or stmt.until is not None:
        raise SpecError("an operator body is an expression, without '::' or 'until'", body_text.loc)
    return stmt.expr


def expand(
    expr: Any,
    ops: dict[str, Operator],
    params: frozenset[str] = frozenset(),
    stack: tuple[str, ...] = (),
) -> Expr:
    """Replace user-operator calls by their bodies; check built-in function arity."""
    if isinstance(expr, Num | Read):
        return expr
    if isinstance(expr, Op):
        return Op(expr.name, tuple(expand(a, ops, params, stack) for a in expr.args))
    if isinstance(expr, _Call):
        args = tuple(expand(a, ops, params, stack) for a in expr.args)
        if expr.name in FUNCTIONS:
            return _function_call(expr.name, args, expr.loc)
        if expr.name in ops:
            if expr.name in stack:
                raise SpecError(f"operator '{expr.name}' calls itself", expr.loc)
            op = ops[expr.name]
            if len(args) != len(op.params):
                raise SpecError(
                    f"operator '{expr.name}' takes {len(op.params)} argument(s), got {len(args)}",
                    expr.loc,
                )
            body = expand(op.body, ops, frozenset(op.params), stack + (expr.name,))
            return substitute(body, dict(zip(op.params, args, strict=True)))
        known = sorted(set(FUNCTIONS) | set(ops))
        raise SpecError(
            f"unknown function or operator '{expr.name}' (known: {', '.join(known)})", expr.loc
        )
    raise TypeError(expr)


def _function_call(name: str, args: tuple[Expr, ...], loc: Loc) -> Expr:
    """A call of a built-in function, its arity checked; `max(a, b, c)` and `min(...)`
    fold pairwise, so every map action the IR holds takes the arguments its kind counts."""
    arity = FUNCTIONS[name].arity
    if name in ("max", "min") and len(args) >= 2:
        result: Expr = args[0]
        for arg in args[1:]:
            result = Op(name, (result, arg))
        return result
    if len(args) != arity:
        raise SpecError(f"{name}() takes {arity} argument(s), got {len(args)}", loc)
    return Op(name, args)


def free_names(expr: Any) -> list[Access]:
    """The bare lower-case names an expression reads (before operator expansion): an
    operator's parameters, or else index variables -- which an operator body may not use,
    since it is expanded inside Einsums that iterate other variables."""
    if isinstance(expr, Read):
        acc = expr.access
        return [acc] if not acc.indices and not acc.tensor[:1].isupper() else []
    if isinstance(expr, Op | _Call):
        return [acc for a in expr.args for acc in free_names(a)]
    return []


def substitute(expr: Expr, binding: dict[str, Expr]) -> Expr:
    if isinstance(expr, Read) and not expr.access.indices and expr.access.tensor in binding:
        return binding[expr.access.tensor]
    if isinstance(expr, Op):
        return Op(expr.name, tuple(substitute(a, binding) for a in expr.args))
    return expr
