"""Operation counts per Einsum, by kind, from the iteration space.

Every point of an Einsum's iteration space performs the map actions of its expression once
and, when variables are reduced, one reduce action. Kinds: `mac` (a multiply whose product
is accumulated: a `*` under a `+` reduction, or `x + y*z`), `mul`, `add` (also subtract and
negate), `divide`, and every element-wise function under its own name (`max`, `min`, `exp`,
`tanh`, ...: the table `ir.FUNCTIONS`). Numbers, extents and index variables read as
values cost nothing (an index is the PE's loop counter; `m - p` is one add), and so does
arithmetic on numbers and extents alone (`1 / CAP`: one value for every point, computed
once); a division by such a constant is a multiplication by its reciprocal (`x / E` and
`x * (1 / E)` cost the same). Copies and initialisations cost no arithmetic. An iterative
Einsum runs once per step (0 .. bound-1). A filtered Einsum counts only the points its
filters keep (a masked step of an iterative Einsum keeps the previous value and costs
nothing); the count is exact and fast at LLM sizes (:func:`count_filtered`).

These are algorithmic counts, independent of hardware; what a kind costs on a PE lives in
the architecture spec.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from simulator.cascade.ir import (
    FUNCTIONS,
    REDUCE_OPS,
    Cascade,
    Cond,
    Einsum,
    Expr,
    IInt,
    Index,
    ISym,
    IVar,
    Num,
    Op,
    Read,
    Size,
    eval_index,
    index_syms,
    index_vars,
    is_constant,
    kind_of,
    rank_of,
)
from simulator.support.errors import SpecError

# Every kind, in the order reports list them: the arithmetic units, then the functions.
_FIRST = ("mac", "mul", "add", "max", "exp", "divide", "log", "sqrt")
KINDS = _FIRST + tuple(name for name in FUNCTIONS if name not in _FIRST)
# A filtered iteration space is counted by enumerating every filter variable but one (in
# numpy blocks of _COUNT_BLOCK) and counting the last one in closed form. At most
# _COUNT_ENUM_LIMIT combinations are enumerated (about 2 s); causal or windowed attention at
# M = P = 1M enumerates 1M (the keys), so LLM sizes count in milliseconds.
_COUNT_ENUM_LIMIT = 1 << 26
_COUNT_BLOCK = 1 << 20
# Filters that are not affine (checks reject them; kept for safety) use a dense grid.
_FILTER_GRID_LIMIT = 50_000_000


@dataclass(frozen=True)
class EinsumOps:
    einsum: str
    kind: str  # compute / copy / init
    points: int
    counts: tuple[tuple[str, int], ...]  # (kind, count) in KINDS order, non-zero only

    def count(self, kind: str) -> int:
        return dict(self.counts).get(kind, 0)

    @property
    def total(self) -> int:
        return sum(n for _, n in self.counts)


def _map_ops(expr: Expr, ops_by_name: Mapping[str, Expr] | None = None) -> Counter[str]:
    """Map actions per point; `x + y*z` counts as one mac. Numbers, extents and index
    values (:class:`Size`, :class:`VarValue`) are free, and so is an operation on numbers
    and extents alone (`1 / CAP` in `X * (1 / CAP)`): the same at every point, it is
    computed once, not per point."""
    counts: Counter[str] = Counter()
    if isinstance(expr, Num | Read | Size) or is_constant(expr):
        return counts
    assert isinstance(expr, Op)
    args = expr.args

    def per_point_mul(a: Expr) -> bool:
        return isinstance(a, Op) and _multiplies(a) and not is_constant(a)

    if expr.name == "add" and any(per_point_mul(a) for a in args):
        fused = next(i for i, a in enumerate(args) if per_point_mul(a))
        mul = args[fused]
        assert isinstance(mul, Op)
        counts["mac"] += 1
        for a in mul.args:
            counts += _map_ops(a)
        counts += _map_ops(args[1 - fused])
        return counts
    counts["mul" if _multiplies(expr) else kind_of(expr.name)] += 1
    for a in args:
        counts += _map_ops(a)
    return counts


def _multiplies(expr: Op) -> bool:
    """A product, or a division by a constant (`x / E`, `x / sqrt(E)`): the constant's
    reciprocal is computed once, each point multiplies by it -- `x / c` and `x * (1 / c)`
    are one computation at one cost."""
    if expr.name == "mul":
        return True
    return expr.name == "div" and is_constant(expr.args[1]) and not is_constant(expr.args[0])


COMPARE = {
    "<=": np.less_equal,
    "<": np.less,
    ">=": np.greater_equal,
    ">": np.greater,
    "==": np.equal,
    "!=": np.not_equal,
}


def index_grid(vars_: list[str], extents: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Each variable as an arange along its own axis, broadcastable against the others."""
    env = {}
    for i, v in enumerate(vars_):
        shape = [1] * len(vars_)
        shape[i] = extents[v]
        env[v] = np.arange(extents[v]).reshape(shape)
    return env


def filter_mask(filters: list, env: Mapping[str, object], shape: tuple[int, ...]) -> np.ndarray:
    """Points of the grid that every filter keeps."""
    mask = np.ones(shape, dtype=bool)
    for f in filters:
        mask &= COMPARE[f.op](eval_index(f.left, env), eval_index(f.right, env))
    return mask


# ops_per_point's answers by the Einsum's identity (an Einsum equal to another but not the
# same object would be compared expression by expression on every look-up of a value-keyed
# cache); the entry holds the Einsum, so its id is not reused while the entry lives.
_OPS_SEEN: dict[int, tuple[Einsum, tuple, Counter[str]]] = {}
_OPS_SEEN_MAX = 4096


class OpCounts(Counter):
    """Operations per point by kind, shared by every caller: read-only (0 for a kind the
    Einsum does not perform, as a Counter; arithmetic on it gives a new Counter)."""

    def __init__(self, counts=()) -> None:
        dict.__init__(self, counts)

    def _read_only(self, *_args, **_kwargs):
        raise TypeError("ops_per_point's counts are shared: copy them (Counter(c)) to change")

    __setitem__ = __delitem__ = update = subtract = clear = pop = popitem = _read_only
    setdefault = __iadd__ = __isub__ = __iand__ = __ior__ = _read_only


def ops_per_point(cascade: Cascade, e: Einsum) -> Counter[str]:
    """Operations one point of a compute Einsum performs, by kind (reduction included);
    the same read-only counts for every call."""
    seen = _OPS_SEEN.get(id(e))
    if seen is None or seen[0] is not e or seen[1] != cascade.operators:
        if len(_OPS_SEEN) >= _OPS_SEEN_MAX:
            _OPS_SEEN.clear()
        seen = (e, cascade.operators, OpCounts(_ops_per_point(e, cascade.operators)))
        _OPS_SEEN[id(e)] = seen
    return seen[2]


def _ops_per_point(e: Einsum, operators: tuple) -> tuple[tuple[str, int], ...]:
    """:func:`ops_per_point` worked out."""
    per_point = _map_ops(e.expr)
    if e.reduced:
        if e.reduce_op in REDUCE_OPS:
            kind = REDUCE_OPS[e.reduce_op][0]
            if kind == "add" and isinstance(e.expr, Op) and _multiplies(e.expr):
                per_point["mul"] -= 1
                per_point["mac"] += 1
            else:
                per_point[kind] += 1
        else:
            user = next(op for op in operators if op.name == e.reduce_op)
            per_point += _map_ops(user.body)
    return tuple((+per_point).items())


def iteration_extents(cascade: Cascade, e: Einsum, shapes: Mapping[str, int]) -> dict[str, int]:
    """Extent of each iteration variable (an iterative variable runs 0 .. bound-1)."""
    extents = {}
    for v in e.iteration:
        if v == e.iterative:
            bound = cascade.iterative_map[v]
            extents[v] = int(bound) if bound.isdigit() else shapes[bound]
        else:
            extents[v] = shapes[rank_of(v)]
    return extents


def count_points(cascade: Cascade, e: Einsum, shapes: Mapping[str, int]) -> int:
    """Points of the iteration space, after filters (a filtered Einsum's count kept for its
    extents and the shape symbols its filters read: a search asks at every tiling)."""
    extents = iteration_extents(cascade, e, shapes)
    if not e.filters():
        return math.prod(extents.values())
    symbols = tuple((s, shapes[s]) for s in _filter_symbols(e) if s in shapes)
    return _filtered_points(e, tuple(extents.items()), symbols)


@functools.lru_cache(maxsize=1024)
def _filter_symbols(e: Einsum) -> tuple[str, ...]:
    return tuple(
        sorted({s for f in e.filters() for side in (f.left, f.right) for s in index_syms(side)})
    )


@functools.lru_cache(maxsize=4096)
def _filtered_points(
    e: Einsum, box: tuple[tuple[str, int], ...], symbols: tuple[tuple[str, int], ...]
) -> int:
    """:func:`count_points` of a filtered Einsum: its iteration extents, and the values of
    the shape symbols its filters read."""
    extents, shapes = dict(box), dict(symbols)
    filters = e.filters()
    fvars = sorted({v for f in filters for side in (f.left, f.right) for v in index_vars(side)})
    grid_size = math.prod(extents[v] for v in fvars)
    rest = math.prod(n for v, n in extents.items() if v not in fvars)
    forms = [condition_form(f, shapes) for f in filters]
    if all(form is not None for form in forms):
        kept = count_filtered([f for f in forms if f is not None], {v: extents[v] for v in fvars})
        if kept is None:
            raise SpecError(
                f"filter in '{e.name}' spans {grid_size} points; too many to count exactly", e.loc
            )
        return kept * rest
    if grid_size > _FILTER_GRID_LIMIT:
        raise SpecError(
            f"filter in '{e.name}' spans {grid_size} points; too many to count exactly", e.loc
        )
    env: dict[str, object] = dict(shapes)
    env.update(index_grid(fvars, extents))
    mask = filter_mask(filters, env, tuple(extents[v] for v in fvars))
    return int(mask.sum()) * rest


# --------------------------------------------------------------------------------------
# Counting affine filters without the grid


@dataclass(frozen=True)
class LinearCondition:
    """`sum(coef * var) + const OP 0`: a filter with its shape symbols replaced by values."""

    coefs: tuple[tuple[str, int], ...]
    const: int
    op: str

    def coef(self, var: str) -> int:
        return dict(self.coefs).get(var, 0)


def linear_form(ix: Index, values: Mapping[str, int]) -> tuple[dict[str, int], int] | None:
    """An index expression as ({var: coefficient}, constant); None if it multiplies two
    variables (then only the grid can count it)."""
    if isinstance(ix, IInt):
        return {}, ix.value
    if isinstance(ix, ISym):
        return {}, int(values[ix.name])
    if isinstance(ix, IVar):
        return {ix.name: 1}, 0
    left, right = linear_form(ix.left, values), linear_form(ix.right, values)
    if left is None or right is None:
        return None
    (lc, lk), (rc, rk) = left, right
    if ix.op in ("+", "-"):
        sign = 1 if ix.op == "+" else -1
        coefs = dict(lc)
        for v, c in rc.items():
            coefs[v] = coefs.get(v, 0) + sign * c
        return coefs, lk + sign * rk
    if lc and rc:
        return None
    if rc:
        (lc, lk), (rc, rk) = (rc, rk), (lc, lk)
    return {v: c * rk for v, c in lc.items()}, lk * rk


def condition_form(cond: Cond, values: Mapping[str, int]) -> LinearCondition | None:
    """`left OP right` as `left - right OP 0` (zero coefficients dropped)."""
    left, right = linear_form(cond.left, values), linear_form(cond.right, values)
    if left is None or right is None:
        return None
    coefs = dict(left[0])
    for v, c in right[0].items():
        coefs[v] = coefs.get(v, 0) - c
    kept = tuple(sorted((v, c) for v, c in coefs.items() if c))
    return LinearCondition(kept, left[1] - right[1], cond.op)


_FLIP = {"<=": ">=", "<": ">", ">=": "<=", ">": "<", "==": "==", "!=": "!="}


def count_filtered(conds: list[LinearCondition], extents: Mapping[str, int]) -> int | None:
    """Points of the box `0 <= var < extent` meeting every condition, exactly (counted once
    per box: the mapper plans one cascade at many tilings)."""
    return _count_filtered(tuple(conds), tuple(sorted(extents.items())))


@functools.lru_cache(maxsize=4096)
def _count_filtered(
    conds: tuple[LinearCondition, ...], box: tuple[tuple[str, int], ...]
) -> int | None:
    """:func:`count_filtered` of a hashable box."""
    extents = dict(box)
    return _count(list(conds), extents)


def _count(conds: list[LinearCondition], extents: Mapping[str, int]) -> int | None:
    """Points of the box `0 <= var < extent` meeting every condition, exactly.

    Every variable but the one of largest extent is enumerated with numpy, in blocks; each
    condition bounds the last variable to an interval (or, `!=`, removes one value), and
    the intervals intersect in closed form. None when more than `_COUNT_ENUM_LIMIT`
    combinations would have to be enumerated."""
    used = sorted({v for c in conds for v, _ in c.coefs})
    rest = math.prod(n for v, n in extents.items() if v not in used)
    if not used:
        holds = all(COMPARE[c.op](c.const, 0) for c in conds)
        return rest if holds else 0
    last = max(used, key=lambda v: (extents[v], v))
    others = [v for v in used if v != last]
    enumerated = math.prod(extents[v] for v in others)
    if enumerated > _COUNT_ENUM_LIMIT:
        return None
    total = 0
    for start in range(0, enumerated, _COUNT_BLOCK):
        flat = np.arange(start, min(start + _COUNT_BLOCK, enumerated), dtype=np.int64)
        total += _count_block(conds, _decode(flat, others, extents), last, extents[last])
    return total * rest


def _decode(flat: np.ndarray, names: list[str], extents: Mapping[str, int]) -> dict:
    """Flat indices of the enumerated box -> each variable's values (last name fastest)."""
    values = {}
    for v in reversed(names):
        flat, values[v] = np.divmod(flat, extents[v])
    return values


def _count_block(
    conds: list[LinearCondition], values: Mapping[str, np.ndarray], last: str, extent: int
) -> int:
    """Points of `last` in [0, extent) meeting every condition, summed over a block of the
    other variables' values."""
    size = len(next(iter(values.values()))) if values else 1
    lo = np.zeros(size, dtype=np.int64)
    hi = np.full(size, extent - 1, dtype=np.int64)
    keep = np.ones(size, dtype=bool)
    holes = []  # values of `last` removed by `!=` (-1: none)
    for c in conds:
        rest = np.full(size, c.const, dtype=np.int64)
        for v, coef in c.coefs:
            if v != last:
                rest = rest + coef * values[v]
        a, op = c.coef(last), c.op
        if a == 0:
            keep &= COMPARE[op](rest, 0)
            continue
        b = -rest  # a * x OP b
        if a < 0:
            a, b, op = -a, -b, _FLIP[op]
        if op == "<=":
            hi = np.minimum(hi, b // a)
        elif op == "<":
            hi = np.minimum(hi, (b - 1) // a)
        elif op == ">=":
            lo = np.maximum(lo, -((-b) // a))
        elif op == ">":
            lo = np.maximum(lo, -((-b - 1) // a))
        else:
            exact = b % a == 0
            if op == "==":
                keep &= exact
                lo, hi = np.maximum(lo, b // a), np.minimum(hi, b // a)
            else:
                holes.append(np.where(exact, b // a, -1))
    count = np.maximum(hi - lo + 1, 0)
    if holes:
        stacked = np.sort(np.stack(holes), axis=0)
        inside = (stacked >= lo) & (stacked <= hi)
        distinct = np.ones_like(inside)
        distinct[1:] = stacked[1:] != stacked[:-1]
        count = count - (inside & distinct).sum(axis=0)
    return int(np.where(keep, count, 0).sum())


def einsum_ops(cascade: Cascade, e: Einsum, shapes: Mapping[str, int]) -> EinsumOps:
    points = count_points(cascade, e, shapes)
    if e.kind != "compute":
        return EinsumOps(e.name, e.kind, points, ())
    per_point = ops_per_point(cascade, e)
    counts = tuple((k, per_point[k] * points) for k in KINDS if per_point[k] > 0)
    return EinsumOps(e.name, e.kind, points, counts)


def cascade_ops(cascade: Cascade, shapes: Mapping[str, int]) -> tuple[EinsumOps, ...]:
    return tuple(einsum_ops(cascade, e, shapes) for e in cascade.einsums)


def totals(ops: tuple[EinsumOps, ...]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for o in ops:
        for k, n in o.counts:
            out[k] += n
    return {k: out[k] for k in KINDS if out[k]}
