"""Execute a cascade numerically (numpy) to prove what it computes.

Einsums run in a topological order of the dependency graph's strongly connected
components. An acyclic Einsum is evaluated at once over its whole iteration space
(`np.einsum` for products summed over a rank, broadcasting otherwise). A recurrence -- an
SCC closed by loop-carried edges, like {RD, SPD} over m1 -- runs step by step along its
iterative rank, each step evaluating its Einsums with that variable fixed. An iterative
tensor holds every step (`RM[0] .. RM[M1]`). Floating-point overflow is not an error here:
it shows up as non-finite values, which :func:`compare` reports (the naive softmax does
overflow).

Filters. A point a filter removes contributes the reduction's identity to a reduction; an
output point of a map Einsum whose point is removed is 0. An iterative Einsum is different:
its output point at step r+1 whose points the filters all remove keeps the previous step's
value (`RM[m1+1, p] = RM[m1, p]`): the step does not happen there. That is what a schedule
skipping a fully masked chunk computes, and it needs no identity that a later step would
have to absorb -- so an iterative Einsum with filters runs its steps in order even outside
a recurrence. `evaluate(..., unkept=nan)` fills the removed output points of the other
Einsums with NaN instead, which shows whether any later point consumes one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import reduce

import numpy as np

from simulator.cascade.graph import dependency_graph, recurrences, strongly_connected
from simulator.cascade.ir import (
    FUNCTIONS,
    REDUCE_OPS,
    Access,
    Cascade,
    Cond,
    Einsum,
    Expr,
    IVar,
    Num,
    Op,
    Read,
    VarValue,
    bind_sizes,
    eval_index,
    index_vars,
    rank_of,
)
from simulator.cascade.ops import filter_mask, index_grid, iteration_extents
from simulator.cascade.references import reference_outputs
from simulator.cascade.shapes import resolve_shapes
from simulator.support.errors import Loc, SpecError

# What each map action computes: the arithmetic operators, then every function of the
# language's table (its numpy implementation is its definition).
_UFUNC: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "neg": np.negative,
    **{name: f.numpy for name, f in FUNCTIONS.items()},
}
_REDUCE: dict[str, Callable[..., np.ndarray]] = {
    "sum": np.sum,
    "prod": np.prod,
    "max": np.max,
    "min": np.min,
}


def tensor_shape(cascade: Cascade, tensor: str, shapes: Mapping[str, int]) -> tuple[int, ...]:
    """Array shape of a tensor; an iterative rank holds bound+1 steps."""
    decl = cascade.tensor(tensor)
    dims = [shapes[r] for r in decl.ranks]
    info = cascade.iterative_tensors().get(tensor)
    if info is not None:
        pos, var = info
        bound = cascade.iterative_map[var]
        dims[pos] = (int(bound) if bound.isdigit() else shapes[bound]) + 1
    return tuple(dims)


# Numerical evaluation holds every tensor in float64: it is for small shapes. Beyond this
# the machine would swap or fail mid-run; the user gets one line instead.
MAX_EVALUATION_BYTES = 2 * 2**30


def evaluation_bytes(cascade: Cascade, shapes: Mapping[str, int]) -> int:
    """Bytes of float64 tensors a numerical evaluation at `shapes` holds."""
    names = list(cascade.inputs) + [
        e.output.tensor for e in cascade.einsums if e.output.tensor not in cascade.inputs
    ]
    return 8 * sum(math.prod(tensor_shape(cascade, n, shapes)) for n in dict.fromkeys(names))


def check_evaluation_size(cascade: Cascade, shapes: Mapping[str, int]) -> None:
    """A SpecError when the cascade's tensors at `shapes` would not fit the budget."""
    total = evaluation_bytes(cascade, shapes)
    if total > MAX_EVALUATION_BYTES:
        largest = sorted(shapes, key=lambda r: (-shapes[r], r))[:2]  # its own ranks
        example = ",".join(f"{r}=256" for r in sorted(largest))
        raise SpecError(
            f"evaluating {cascade.name} at these shapes needs {total / 2**30:.3g} GiB of float64 "
            f"tensors (at most {MAX_EVALUATION_BYTES / 2**30:g} GiB): numerical checks are for "
            f"small shapes, e.g. --shape {example}",
            Loc(cascade.path),
        )


def random_inputs(
    cascade: Cascade, shapes: Mapping[str, int], seed: int = 0, scale: float = 1.0
) -> dict[str, np.ndarray]:
    """Normally distributed inputs (standard deviation `scale`), reproducible by seed."""
    check_evaluation_size(cascade, shapes)
    rng = np.random.default_rng(seed)
    return {
        name: scale * rng.standard_normal(tensor_shape(cascade, name, shapes))
        for name in cascade.inputs
    }


def evaluate(
    cascade: Cascade,
    inputs: Mapping[str, np.ndarray],
    shapes: Mapping[str, int] | None = None,
    *,
    unkept: float | None = None,
) -> dict[str, np.ndarray]:
    """Every tensor of the cascade, computed from `inputs` (float64).

    `unkept`, when given, is the value of every output point of a non-iterative Einsum
    whose points the filters all remove (instead of 0 for a map and the identity for a
    reduction): NaN there proves that no kept point reads a masked value."""
    shapes = dict(shapes) if shapes is not None else resolve_shapes(cascade)
    check_evaluation_size(cascade, shapes)
    arrays: dict[str, np.ndarray] = {}
    for name in cascade.inputs:
        if name not in inputs:
            raise SpecError(f"missing input tensor '{name}'", Loc(cascade.path))
        value = np.asarray(inputs[name], dtype=np.float64)
        expected = tensor_shape(cascade, name, shapes)
        if value.shape != expected:
            raise SpecError(
                f"input '{name}' has shape {value.shape}, expected {expected}", Loc(cascade.path)
            )
        arrays[name] = value
    for e in cascade.einsums:
        if e.output.tensor not in arrays:
            arrays[e.output.tensor] = np.full(
                tensor_shape(cascade, e.output.tensor, shapes), np.nan
            )
    graph = dependency_graph(cascade)
    cyclic = {rec.einsums: rec for rec in recurrences(cascade, graph)}
    by_name = {e.name: e for e in cascade.einsums}
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        for component in strongly_connected(graph):
            members = [by_name[n] for n in component]
            if component not in cyclic:
                for e in members:
                    _run(cascade, e, arrays, shapes, {}, unkept)
                continue
            rec = cyclic[component]
            if len(rec.carried_by) != 1:
                raise SpecError(
                    f"recurrence {{{', '.join(component)}}} is carried by "
                    f"{len(rec.carried_by)} ranks; one is supported",
                    members[0].loc,
                )
            var = rec.carried_by[0]
            bound = cascade.iterative_map[var]
            steps = int(bound) if bound.isdigit() else shapes[bound]
            for step in range(steps):
                for e in members:
                    _run(cascade, e, arrays, shapes, {var: step}, unkept)
    return arrays


def _run(
    cascade: Cascade,
    e: Einsum,
    arrays: dict[str, np.ndarray],
    shapes: Mapping[str, int],
    fixed: Mapping[str, int],
    unkept: float | None = None,
) -> None:
    try:
        _run_unchecked(cascade, e, arrays, shapes, fixed, unkept=unkept)
    except IndexError as err:
        raise SpecError(f"Einsum '{e.name}' indexes outside a tensor: {err}", e.loc) from None


def run_tile(
    cascade: Cascade,
    e: Einsum,
    arrays: dict[str, np.ndarray],
    shapes: Mapping[str, int],
    fixed: Mapping[str, int],
    ranges: Mapping[str, tuple[int, int]],
) -> None:
    """Evaluate one Einsum over a box of its iteration space: `fixed` variables take one
    value, `ranges` variables run over [lo, hi) (the cycle engine's tiles)."""
    _run_unchecked(cascade, e, arrays, shapes, fixed, ranges)


def _grid(free: list[str], extents: Mapping[str, int], ranges: Mapping[str, tuple[int, int]]):
    env = index_grid(free, extents)
    for v, (lo, _hi) in ranges.items():
        if v in env and lo:
            env[v] = env[v] + lo
    return env


def _run_unchecked(
    cascade: Cascade,
    e: Einsum,
    arrays: dict[str, np.ndarray],
    shapes: Mapping[str, int],
    fixed: Mapping[str, int],
    ranges: Mapping[str, tuple[int, int]] | None = None,
    unkept: float | None = None,
) -> None:
    ranges = ranges or {}
    filters = e.filters()
    step_var = e.iterative
    if e.keeps_masked_steps and step_var not in fixed:
        # A removed point keeps the previous step, which must exist first: steps in order.
        lo, hi = ranges.get(step_var, (0, iteration_extents(cascade, e, shapes)[step_var]))
        rest = {v: r for v, r in ranges.items() if v != step_var}
        for step in range(lo, hi):
            _run_unchecked(cascade, e, arrays, shapes, {**fixed, step_var: step}, rest, unkept)
        return
    extents = iteration_extents(cascade, e, shapes)
    for v, (lo, hi) in ranges.items():
        if v in extents:
            extents[v] = hi - lo
    free = [v for v in e.iteration if v not in fixed]
    out_free = [v for v in e.output_vars if v not in fixed]
    reduced_axes = tuple(i for i, v in enumerate(free) if v in e.reduced)
    env: dict[str, object] = dict(shapes)
    env.update(fixed)
    env.update(_grid(free, extents, ranges))

    def gather(access: Access) -> np.ndarray:
        idx = tuple(eval_index(pos.expr, env) for pos in access.indices)
        return arrays[access.tensor][idx] if idx else arrays[access.tensor][()]

    # The filters over the filtered variables only (1 along the others): small, broadcast
    # where needed. `kept` marks the output points with at least one kept point.
    mask = None
    if filters:
        filtered = frozenset(v for f in filters for v in _cond_vars(f)) & set(free)
        mask = filter_mask(filters, env, tuple(extents[v] if v in filtered else 1 for v in free))
    result = None
    expr = bind_sizes(e.expr, shapes)
    if reduced_axes and e.reduce_op == "sum":
        factors = _factors(expr)
        if factors is not None:
            result = _sum_of_products(factors, gather, free, out_free, extents, e.reduced, mask)
    if result is None:
        values = np.asarray(_eval_expr(expr, gather, index=env), dtype=np.float64)
        full = tuple(extents[v] for v in free)
        if filters or reduced_axes:
            values = np.broadcast_to(values, full)
        if mask is not None:
            identity = _identity(cascade, e.reduce_op) if reduced_axes else 0.0
            values = np.where(mask, values, identity)
        if reduced_axes:
            values = _reduce(cascade, e.reduce_op, values, reduced_axes)
        result = values
    out_env: dict[str, object] = dict(shapes)
    out_env.update(fixed)
    out_env.update(_grid(out_free, extents, ranges))
    out_shape = tuple(extents[v] for v in out_free)
    result = np.broadcast_to(result, out_shape) if out_shape else np.asarray(result).reshape(())
    idx = tuple(eval_index(pos.expr, out_env) for pos in e.output.indices)
    if mask is not None and (step_var is not None or unkept is not None):
        kept = mask.any(axis=reduced_axes) if reduced_axes else mask
        if step_var is not None:
            fallback = arrays[e.output.tensor][_previous_step(e, out_env)]
        else:
            fallback = unkept
        result = np.where(np.broadcast_to(kept, out_shape), result, fallback)
    if idx:
        arrays[e.output.tensor][idx] = result
    else:
        arrays[e.output.tensor][()] = result


def _previous_step(e: Einsum, out_env: Mapping[str, object]) -> tuple:
    """Index of the output's previous step: `T[.., r, ..]` for the output `T[.., r+1, ..]`."""
    assert e.iterative is not None
    step = IVar(e.iterative)
    return tuple(
        eval_index(step if e.iterative in index_vars(pos.expr) else pos.expr, out_env)
        for pos in e.output.indices
    )


def _eval_expr(
    expr: Expr,
    gather: Callable[[Access], np.ndarray],
    binding: Mapping[str, np.ndarray] | None = None,
    index: Mapping[str, object] | None = None,
) -> np.ndarray | float:
    """The expression's values over the grid: `gather` reads tensors, `binding` holds an
    operator's arguments, `index` each iteration variable's values (an arange along its
    axis, or the step a recurrence fixes) for the index variables read as values."""
    if isinstance(expr, Num):
        return expr.value
    if isinstance(expr, Read):
        acc = expr.access
        if binding is not None and not acc.indices and acc.tensor in binding:
            return binding[acc.tensor]
        return gather(acc)
    if isinstance(expr, VarValue):
        if index is None or expr.name not in index:
            raise SpecError(f"index variable '{expr.name}' has no value here", expr.loc)
        return index[expr.name]  # type: ignore[return-value]
    assert isinstance(expr, Op)
    args = [_eval_expr(a, gather, binding, index) for a in expr.args]
    return _UFUNC[expr.name](*args)


def _factors(expr: Expr) -> list[Access] | None:
    """The reads of a pure product `A[..] * B[..] * ...` (or a single read), else None."""
    if isinstance(expr, Read):
        return [expr.access]
    if isinstance(expr, Op) and expr.name == "mul":
        left, right = _factors(expr.args[0]), _factors(expr.args[1])
        if left is not None and right is not None:
            return left + right
    return None


def _cond_vars(cond: Cond) -> tuple[str, ...]:
    return index_vars(cond.left) + index_vars(cond.right)


def _sum_of_products(
    factors: list[Access],
    gather: Callable[[Access], np.ndarray],
    free: list[str],
    out_free: list[str],
    extents: Mapping[str, int],
    reduced: tuple[str, ...],
    mask: np.ndarray | None,
) -> np.ndarray | None:
    """Sum of products via np.einsum, avoiding the full iteration-space array.

    An output variable that no factor reads (`W[i] = A[k] * B[k]`) is left out of the
    einsum, which cannot name it, and kept as a length-1 axis: the caller broadcasts the
    result over it, as the slow path does. Filters (`mask`, over the free variables, 1 along
    the unfiltered ones) keep it exact two ways: when they filter no reduced variable they
    remove whole output points, so the result is zeroed there (the sum's identity); else a
    factor indexed by every filtered variable is zeroed where they remove a point, which is
    exact when the other factors are finite (0 * inf would not vanish). Otherwise None: the
    caller evaluates the whole iteration space."""
    letters = {v: chr(ord("a") + i) for i, v in enumerate(free)}
    if len(letters) > 26:
        return None
    owns = [
        [v for v in free if any(v in index_vars(p.expr) for p in acc.indices)] for acc in factors
    ]
    arrays = [
        np.broadcast_to(gather(acc), tuple(extents[v] if v in own else 1 for v in free))
        for acc, own in zip(factors, owns, strict=True)
    ]
    reduced_axes = tuple(i for i, v in enumerate(free) if v in reduced)
    after = None
    if mask is not None:
        filtered = {v for v, n in zip(free, mask.shape, strict=True) if n > 1}
        if not filtered & set(reduced):
            after = mask.any(axis=reduced_axes) if reduced_axes else mask
        else:
            chosen = next((i for i, own in enumerate(owns) if filtered <= set(own)), None)
            if chosen is None:
                return None
            if not all(np.isfinite(a).all() for i, a in enumerate(arrays) if i != chosen):
                return None
            arrays[chosen] = np.where(mask, arrays[chosen], 0.0)
    operands = [
        a.reshape(tuple(extents[v] for v in own)) for a, own in zip(arrays, owns, strict=True)
    ]
    subscripts = ["".join(letters[v] for v in own) for own in owns]
    read = {v for own in owns for v in own}
    spec = ",".join(subscripts) + "->" + "".join(letters[v] for v in out_free if v in read)
    result = np.einsum(spec, *operands, optimize=True)
    result = result.reshape(tuple(extents[v] if v in read else 1 for v in out_free))
    return result if after is None else np.where(after, result, 0.0)


def _identity(cascade: Cascade, op: str) -> float:
    if op in REDUCE_OPS:
        return REDUCE_OPS[op][1]
    user = next(o for o in cascade.operators if o.name == op)
    assert user.identity is not None
    return user.identity


def _reduce(cascade: Cascade, op: str, values: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if op in _REDUCE:
        return _REDUCE[op](values, axis=axes)
    user = next(o for o in cascade.operators if o.name == op)
    a, b = user.params
    moved = np.moveaxis(values, axes, tuple(range(len(axes))))
    flat = moved.reshape((-1,) + moved.shape[len(axes) :])

    def fold(acc: np.ndarray, item: np.ndarray) -> np.ndarray:
        return np.asarray(_eval_expr(user.body, _no_gather, {a: acc, b: item}))

    start = np.full(flat.shape[1:], user.identity, dtype=np.float64)
    return reduce(fold, flat, start)


def _no_gather(access: Access) -> np.ndarray:
    raise SpecError(f"an operator body cannot read tensor '{access.tensor}'", access.loc)


# --------------------------------------------------------------------------------------
# Comparing cascades


@dataclass(frozen=True)
class OutputCheck:
    tensor: str
    max_rel_error: float  # max |a - b| / max |b| over finite values
    nonfinite_a: int
    nonfinite_b: int


@dataclass(frozen=True)
class Comparison:
    cascade_a: str
    cascade_b: str
    shapes: tuple[tuple[str, int], ...]
    outputs: tuple[OutputCheck, ...]
    rtol: float

    @property
    def equivalent(self) -> bool:
        return all(
            o.nonfinite_a == 0 and o.nonfinite_b == 0 and o.max_rel_error <= self.rtol
            for o in self.outputs
        )


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return float("inf")
    scale = float(np.max(np.abs(b[finite])))
    err = float(np.max(np.abs(a[finite] - b[finite])))
    return err / scale if scale > 0 else err


def compare(
    a: Cascade,
    b: Cascade,
    overrides: Mapping[str, int] | None = None,
    seed: int = 0,
    scale: float = 1.0,
    rtol: float = 1e-5,
) -> Comparison:
    """Run both cascades on the same random inputs and compare their common outputs."""
    shapes_a = resolve_shapes(a, {k: v for k, v in (overrides or {}).items() if _has_rank(a, k)})
    shapes_b = resolve_shapes(b, {k: v for k, v in (overrides or {}).items() if _has_rank(b, k)})
    if set(a.inputs) != set(b.inputs):
        raise SpecError(
            f"the cascades read different inputs: {', '.join(a.inputs)} vs {', '.join(b.inputs)}",
            Loc(b.path),
        )
    common = [t for t in a.outputs if t in b.outputs]
    if not common:
        raise SpecError(
            f"no common output tensor ({', '.join(a.outputs)} vs {', '.join(b.outputs)})",
            Loc(b.path),
        )
    inputs = random_inputs(a, shapes_a, seed, scale)
    for name in b.inputs:
        if tensor_shape(b, name, shapes_b) != inputs[name].shape:
            raise SpecError(
                f"input '{name}' has shape {tensor_shape(b, name, shapes_b)} in "
                f"{b.name} but {inputs[name].shape} in {a.name}; align them with "
                "--shape",
                Loc(b.path),
            )
    out_a = evaluate(a, inputs, shapes_a)
    out_b = evaluate(b, inputs, shapes_b)
    checks = []
    for t in common:
        va, vb = out_a[t], out_b[t]
        if va.shape != vb.shape:
            raise SpecError(
                f"output '{t}' has shape {va.shape} in {a.name} but {vb.shape} in {b.name}",
                Loc(b.path),
            )
        checks.append(
            OutputCheck(
                t,
                relative_error(va, vb),
                int((~np.isfinite(va)).sum()),
                int((~np.isfinite(vb)).sum()),
            )
        )
    return Comparison(a.name, b.name, tuple(sorted(shapes_a.items())), tuple(checks), rtol)


def compare_reference(
    cascade: Cascade,
    overrides: Mapping[str, int] | None = None,
    seed: int = 0,
    scale: float = 1.0,
    rtol: float = 1e-5,
) -> Comparison:
    """Run the cascade and the numpy reference its file names (`reference:`) on the same
    random inputs and compare the outputs the reference defines."""
    if cascade.reference is None:
        raise SpecError(
            f"cascade '{cascade.name}' names no reference; add e.g. "
            "'reference: {algorithm: attention}' to the file",
            Loc(cascade.path),
        )
    shapes = resolve_shapes(cascade, overrides)
    inputs = random_inputs(cascade, shapes, seed, scale)
    values = evaluate(cascade, inputs, shapes)
    expected = reference_outputs(cascade, inputs, shapes)
    checks = tuple(
        OutputCheck(
            t,
            relative_error(values[t], ref),
            int((~np.isfinite(values[t])).sum()),
            int((~np.isfinite(ref)).sum()),
        )
        for t, ref in expected.items()
    )
    label = f"reference ({cascade.reference})"
    return Comparison(cascade.name, label, tuple(sorted(shapes.items())), checks, rtol)


def _has_rank(cascade: Cascade, rank: str) -> bool:
    return rank in cascade.shape_names()


def softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Reference: AV[f, p] = sum_m softmax_m(Q[:, p] . K[:, m]) V[f, m] (stable numpy)."""
    logits = k.T @ q  # [m, p]
    logits = logits - logits.max(axis=0, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=0, keepdims=True)
    return v @ weights


__all__ = [
    "compare",
    "compare_reference",
    "evaluate",
    "random_inputs",
    "softmax_attention",
    "IVar",
    "rank_of",
]
