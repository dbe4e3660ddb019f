"""A restricted arithmetic evaluator for expressions in specs (`datawidth * 3`, `P / (P0 * P1)`).

Specs are untrusted input, so expressions never reach `eval`. They are parsed with Python's
`ast` module and only a whitelist is evaluated: numbers, names (looked up in a context,
dotted names like `PE2D.meshX` included), `+ - * / // % **`, unary minus, parentheses, and
the functions `min`, `max`, `ceil`, `floor`, `log2`, `sqrt`, `abs`. Anything else -- calls
of other functions, attributes of objects, subscripts, lambdas, strings -- is an error
naming the construct. Exponents are bounded so `10**10**10` cannot hang the tool.
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Mapping

from simulator.support.errors import Loc, SpecError

Number = int | float

_FUNCTIONS = {
    "min": min,
    "max": max,
    "ceil": math.ceil,
    "floor": math.floor,
    "log2": math.log2,
    "sqrt": math.sqrt,
    "abs": abs,
}
MAX_MAGNITUDE = 1e30  # any number a spec gives
_MAX_EXPONENT = 1024


@functools.lru_cache(maxsize=4096)
def _parse(source: str) -> ast.Expression:
    """Python's parse of an expression, once per text (specs evaluate the same few
    expressions for every candidate mapping); never mutated by the walkers below."""
    return ast.parse(source, mode="eval")


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


_ALLOWED_NODES = (
    ast.Expression,
    ast.Constant,
    ast.Name,
    ast.Attribute,
    ast.Load,
    ast.BinOp,
    ast.UnaryOp,
    ast.Call,
    ast.operator,
    ast.unaryop,
)


def is_arithmetic(text: str) -> bool:
    """Does `text` parse as an expression of the evaluator's whitelist (not yet evaluated)?"""
    try:
        tree = _parse(text.strip())
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            return False
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float):
            return False
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
        ):
            return False
    return True


def names_in(text: str) -> set[str]:
    """The (dotted) names an expression refers to; empty for a plain number."""
    return set(_names_in(text.strip()))


@functools.lru_cache(maxsize=4096)
def _names_in(text: str) -> frozenset[str]:
    """:func:`names_in`, kept per text (a mapper's every candidate asks of the same few)."""
    try:
        tree = _parse(text)
    except (SyntaxError, ValueError):  # evaluating it says what is wrong
        return frozenset()
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name):
            name = _dotted(node)
            if name and name not in _FUNCTIONS:
                out.add(name)
    # keep the longest dotted names only (PE2D.meshX, not PE2D)
    return frozenset(n for n in out if not any(o != n and o.startswith(n + ".") for o in out))


def evaluate(text: str | Number, context: Mapping[str, Number], loc: Loc | None = None) -> Number:
    """Value of an arithmetic expression; unknown names and constructs are SpecErrors."""
    if isinstance(text, bool):
        raise SpecError(f"expected a number, got {text}", loc)
    if isinstance(text, int | float):
        return _bounded(text, f"'{text}'", loc)
    source = str(text).strip()
    if not source:
        raise SpecError("empty expression", loc)
    try:
        tree = _parse(source)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte, an integer literal too long
        raise SpecError(f"'{source[:60]}' is not an arithmetic expression", loc) from None
    return _bounded(_eval(tree.body, context, source, loc), f"'{source[:60]}'", loc)


def _bounded(value: Number, label: str, loc: Loc | None) -> Number:
    """Spec numbers are sizes, rates and costs: finite ones at most MAX_MAGNITUDE (or `inf`
    where a spec means unlimited), never NaN -- so that every later float is exact enough
    and no product overflows."""
    if isinstance(value, float) and math.isnan(value):
        raise SpecError(f"{label} is not a number (NaN)", loc)
    if not isinstance(value, float) or math.isfinite(value):
        if abs(value) > MAX_MAGNITUDE:
            raise SpecError(f"{label[:80]} is too large (at most {MAX_MAGNITUDE:g})", loc)
    return value


# Names an unknown-name message lists, at most.
KNOWN_SHOWN = 12


def known_names(ctx: Mapping[str, Number]) -> str:
    """The names an expression may use here, for a message: every one (or the first
    KNOWN_SHOWN and how many more), or that there are none."""
    names = sorted(ctx)
    if not names:
        return "no names are defined here"
    shown = ", ".join(names[:KNOWN_SHOWN])
    more = len(names) - KNOWN_SHOWN
    return f"known: {shown}" + (f", and {more} more" if more > 0 else "")


def _eval(node: ast.AST, ctx: Mapping[str, Number], source: str, loc: Loc | None) -> Number:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise SpecError(f"'{source}': only numbers are allowed, not {node.value!r}", loc)
        return node.value
    if isinstance(node, ast.Name | ast.Attribute):
        name = _dotted(node)
        if name is None:
            raise SpecError(f"'{source}': attribute access is not allowed", loc)
        if name in ("inf", "infinity"):
            return math.inf
        if name not in ctx:
            raise SpecError(f"'{source}': unknown name '{name}' ({known_names(ctx)})", loc)
        value = ctx[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"'{source}': '{name}' is not a number", loc)
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval(node.operand, ctx, source, loc)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, ctx, source, loc)
        right = _eval(node.right, ctx, source, loc)
        op = node.op
        try:
            if isinstance(op, ast.Add):
                return left + right
            if isinstance(op, ast.Sub):
                return left - right
            if isinstance(op, ast.Mult):
                return left * right
            if isinstance(op, ast.Div):
                result = left / right
                return int(result) if result == int(result) and abs(result) < 2**53 else result
            if isinstance(op, ast.FloorDiv):
                return left // right
            if isinstance(op, ast.Mod):
                return left % right
            if isinstance(op, ast.Pow):
                if abs(right) > _MAX_EXPONENT:
                    raise SpecError(f"'{source}': exponent {right} is too large", loc)
                if left < 0 and right != int(right):
                    raise SpecError(
                        f"'{source}': a negative number to a fractional power is not real", loc
                    )
                return left**right
        except ZeroDivisionError:
            raise SpecError(f"'{source}': division by zero", loc) from None
        except OverflowError:
            raise SpecError(f"'{source}': numeric overflow", loc) from None
        raise SpecError(f"'{source}': operator {type(op).__name__} is not allowed", loc)
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in _FUNCTIONS or node.keywords:
            raise SpecError(f"'{source}': only {', '.join(sorted(_FUNCTIONS))} may be called", loc)
        args = [_eval(a, ctx, source, loc) for a in node.args]
        try:
            return _FUNCTIONS[name](*args)
        except (TypeError, ValueError) as err:
            raise SpecError(f"'{source}': {name}(): {err}", loc) from None
    raise SpecError(f"'{source}': {type(node).__name__} is not allowed in a spec expression", loc)


def as_int(value: Number, what: str, loc: Loc | None = None) -> int:
    """An integer value, or a SpecError when the expression is fractional."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(f"{what} must be a number, got {value!r}"[:200], loc)
    _bounded(value, what, loc)
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise SpecError(f"{what} must be a whole number, got {value:g}", loc)
        return int(value)
    return int(value)
