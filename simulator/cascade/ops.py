"""Operation counts per Einsum, by kind, from the iteration space.

Every point of an Einsum's iteration space performs the map actions of its expression once
and, when variables are reduced, one reduce action. Kinds: `mac` (a multiply whose product
is accumulated: a `*` under a `+` reduction, or `x + y*z`), `mul`, `add` (also subtract and
negate), `max` (also min), `exp`, `divide`, and the rarer `log`, `sqrt`. Copies and
initialisations cost no arithmetic. An iterative Einsum runs once per step (0 .. bound-1).
A filtered reduction counts only the points its filter keeps.

These are algorithmic counts, independent of hardware; what a kind costs on a PE lives in
the architecture spec.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from simulator.cascade.ir import (
    MAP_KIND,
    REDUCE_OPS,
    Cascade,
    Einsum,
    Expr,
    Num,
    Op,
    Read,
    eval_index,
    index_vars,
    rank_of,
)
from simulator.errors import SpecError

KINDS = ("mac", "mul", "add", "max", "exp", "divide", "log", "sqrt")
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
    """Map actions per point; `x + y*z` counts as one mac."""
    counts: Counter[str] = Counter()
    if isinstance(expr, Num | Read):
        return counts
    assert isinstance(expr, Op)
    args = expr.args
    if expr.name == "add" and any(isinstance(a, Op) and a.name == "mul" for a in args):
        fused = next(i for i, a in enumerate(args) if isinstance(a, Op) and a.name == "mul")
        mul = args[fused]
        assert isinstance(mul, Op)
        counts["mac"] += 1
        for a in mul.args:
            counts += _map_ops(a)
        counts += _map_ops(args[1 - fused])
        return counts
    counts[MAP_KIND[expr.name]] += 1
    for a in args:
        counts += _map_ops(a)
    return counts


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


def ops_per_point(cascade: Cascade, e: Einsum) -> Counter[str]:
    """Operations one point of a compute Einsum performs, by kind (reduction included)."""
    per_point = _map_ops(e.expr)
    if e.reduced:
        if e.reduce_op in REDUCE_OPS:
            kind = REDUCE_OPS[e.reduce_op][0]
            if kind == "add" and isinstance(e.expr, Op) and e.expr.name == "mul":
                per_point["mul"] -= 1
                per_point["mac"] += 1
            else:
                per_point[kind] += 1
        else:
            user = next(op for op in cascade.operators if op.name == e.reduce_op)
            per_point += _map_ops(user.body)
    return +per_point


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
    """Points of the iteration space, after filters."""
    extents = iteration_extents(cascade, e, shapes)
    filters = [pos.filter for acc in e.reads() for pos in acc.indices if pos.filter is not None]
    if not filters:
        total = 1
        for n in extents.values():
            total *= n
        return total
    fvars = sorted({v for f in filters for side in (f.left, f.right) for v in index_vars(side)})
    grid_size = 1
    for v in fvars:
        grid_size *= extents[v]
    if grid_size > _FILTER_GRID_LIMIT:
        raise SpecError(
            f"filter in '{e.name}' spans {grid_size} points; too many to count exactly", e.loc
        )
    env: dict[str, object] = dict(shapes)
    env.update(index_grid(fvars, extents))
    mask = filter_mask(filters, env, tuple(extents[v] for v in fvars))
    rest = 1
    for v, n in extents.items():
        if v not in fvars:
            rest *= n
    return int(mask.sum()) * rest


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
