"""Points of a design-space sweep and their evaluation (pure; `simulator.sweep` is the CLI).

Pipeline: a driver above :mod:`simulator.drivers.configs` and :mod:`simulator.drivers.endtoend`.

A point is one combination of the sweep's grid. Evaluating it resolves the derived values
(register depths from the PE array, ...), sizes the buffer by the sweep's rule if it has
one, and runs the configuration through the same path as `python -m simulator.run`: the
mapping file with its cascade and architecture, resized. Every number of a row comes from
cascade + mapping + architecture + the sweep file; none is computed here.

The buffer rule ("the smallest power-of-two multiple of the minimum that keeps attention
compute-bound", the paper's pareto sweep) tries `minimum x grow^k` for k = 0, 1, ... with
the analytic model and keeps the first size at which a valid mapping exists and no phase
of attention waits on DRAM or the buffer's ports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from simulator.core.result import Result
from simulator.drivers.configs import ALIASES, EvalOptions, Sizing, Specs, evaluate, settled
from simulator.drivers.endtoend import LayerOptions, evaluate_layer
from simulator.mapper.resolve import rank_shapes
from simulator.spec.ceilings import Ceilings
from simulator.spec.expr import as_int, names_in
from simulator.spec.expr import evaluate as evaluate_expr
from simulator.spec.sweep_file import (
    DEFAULTS,
    OPTIONAL_COLUMNS,
    PARAMETERS,
    WORKLOAD_FIELDS,
    SweepSpec,
    load_sweep,
)
from simulator.spec.workload import Workload, make_workload, parse_shape
from simulator.support.errors import SpecError
from simulator.support.paths import resolve_sweep
from simulator.timing.options import UNLIMITED, TimingOptions

# Design parameters passed to Architecture.with_overrides as keywords.
_RESIZE = ("pe_dim_1d", "register_words_2d", "register_words_1d")
_COUNTS = (
    "seq",
    "pe_dim",
    "pe_dim_1d",
    "buffer_bytes",
    "register_words_2d",
    "register_words_1d",
    *WORKLOAD_FIELDS,
    "context",
)
# Grid parameters that are not numbers an expression may use.
_NAMES = ("accel", "model", "cascade", "phase", "shape")
# Relative slack when comparing memory time with compute time (float sums of phases).
_SLACK = 1e-9

# The CSV's columns: the point (as evaluated: the design's actual sizes), then the results.
POINT_COLUMNS = (
    "accel",
    "model",
    "seq",
    "pe_dim",
    "pe_dim_1d",
    "buffer_bytes",
    "bandwidth_bytes_per_s",
    "register_words_2d",
    "register_words_1d",
)
ATTENTION_COLUMNS = (
    "latency_s",
    "compute_2d_s",
    "compute_1d_s",
    "memory_s",
    "traffic_bytes",
    "util_2d",
    "util_1d",
    "energy_pj",
    "area_um2",
    "array_2d_area_um2",
    "latency_bound_s",
    "traffic_bound_bytes",
    "fraction_of_bound",
    "bound_binds",
)
LAYER_COLUMNS = (
    "latency_s",
    "attention_latency_s",
    "linear_latency_s",
    "traffic_bytes",
    "energy_pj",
    "attention_energy_pj",
    "linear_energy_pj",
    "area_um2",
)


def columns(spec: SweepSpec) -> tuple[str, ...]:
    extra = tuple(f for f in OPTIONAL_COLUMNS if spec.values(f) is not None)
    results = LAYER_COLUMNS if spec.scope == "layer" else ATTENTION_COLUMNS
    return (*POINT_COLUMNS, *extra, *results, "error")


@dataclass(frozen=True)
class Point:
    index: int  # position in the sweep (rows are written in this order)
    values: tuple[tuple[str, Any], ...]  # every grid parameter's value at this point

    def get(self, name: str) -> Any:
        return dict(self.values).get(name, DEFAULTS.get(name))


def points(spec: SweepSpec) -> Iterator[Point]:
    """Every combination of the grid, the first parameter varying slowest: made one at a
    time (a grid of 10^8 points is never a list)."""
    names = [p for p, _ in spec.grid]
    combos = itertools.product(*(values for _, values in spec.grid))
    for i, combo in enumerate(combos):
        yield Point(i, tuple(zip(names, combo, strict=True)))


def point_specs(specs: Specs, point: Point, cascades: Mapping[str, str]) -> Specs:
    """The specs a point reads: its `cascade` (a grid value, `cascades` giving the file a
    value names) replaces the sweep's."""
    cascade = point.get("cascade")
    return specs if cascade is None else specs.with_cascade(cascades.get(cascade, cascade))


def check(spec: SweepSpec, specs: Specs, cascades: Mapping[str, str] | None = None) -> None:
    """Errors a whole sweep would hit, before any work: unknown configurations or models,
    missing or broken spec files (the overrides included), names the sweep's expressions
    use that no point defines."""
    cascades = cascades or {}
    for cascade in spec.values("cascade") or (None,):
        each = specs.with_cascade(None if cascade is None else cascades.get(cascade, cascade))
        for accel in spec.values("accel") or (DEFAULTS["accel"],):
            each.check_config(ALIASES.get(accel, accel))
    for model in spec.values("model") or (DEFAULTS["model"],):
        make_workload(model, DEFAULTS["seq"])
    for shape in spec.values("shape") or ():
        given = make_workload(
            DEFAULTS["model"], DEFAULTS["seq"], shape=parse_shape([str(shape).replace(";", ",")])
        )
        for cascade in spec.values("cascade") or (None,):
            each = specs.with_cascade(None if cascade is None else cascades.get(cascade, cascade))
            accels = [ALIASES.get(a, a) for a in spec.values("accel") or (DEFAULTS["accel"],)]
            each.check_shape(accels, given)
    if spec.values("context") is not None and "decode" not in (spec.values("phase") or ()):
        raise SpecError("context is the cache of a decode step: sweep phase=decode too")
    if spec.scope == "layer":
        specs.linear(spec.linear)
    base, ctx = _first_context(spec, specs, cascades)
    known = set(ctx)
    for name, text, loc in spec.derive:
        _check_names(text, known, loc, f"derive {name}")
        known.add(name)
    if spec.buffer is not None:
        known |= set(base.parameters())
        _check_names(spec.buffer.minimum_bytes, known, spec.buffer.loc, "minimum_bytes")


def _first_context(spec: SweepSpec, specs: Specs, cascades: Mapping[str, str]):
    """The architecture and expression names of the first point that binds: a cascade one
    strategy cannot bind is a row's error, not the sweep's; the first point's error stands
    when no point binds."""
    first: SpecError | None = None
    for point in points(spec):
        try:
            _config, _workload, _params, base, ctx = _context(
                spec, point_specs(specs, point, cascades), point
            )
        except SpecError as err:
            first = first or err
            continue
        return base, ctx
    assert first is not None
    raise first


def _check_names(text: str, known: set[str], loc, what: str) -> None:
    unknown = sorted(names_in(text) - known)
    if unknown:
        raise SpecError(
            f"{what}: unknown name {', '.join(unknown)} in '{text}' "
            f"(known: {', '.join(sorted(known))})",
            loc,
        )


@dataclass(frozen=True)
class Design:
    """A point made concrete: configuration, workload and the architecture's overrides."""

    config: str
    workload: Workload
    pe_dim: int | None
    buffer_bytes: int | None
    bandwidth: float | None
    resize: tuple[tuple[str, int], ...]

    def with_buffer(self, buffer_bytes: int) -> Design:
        return Design(
            self.config, self.workload, self.pe_dim, buffer_bytes, self.bandwidth, self.resize
        )


def _context(spec: SweepSpec, specs: Specs, point: Point):
    """The point's configuration, workload, grid parameters, the mapping's architecture and
    the names the sweep's derived values see (before any is derived)."""
    accel = str(point.get("accel"))
    config = ALIASES.get(accel, accel)
    workload = point_workload(point)
    params: dict[str, Any] = {
        p: point.get(p) for p in PARAMETERS if p not in _NAMES and point.get(p)
    }
    mapping = specs.config_spec(config, workload)
    base = specs.architecture(mapping)
    ctx: dict[str, float] = {}
    ctx.update({k: v for k, v in vars_of(workload).items()})
    ctx.update(rank_shapes(mapping, workload))
    ctx["value_bytes"] = base.value_bytes
    ctx.update({k: v for k, v in params.items() if isinstance(v, int | float)})
    return config, workload, params, base, ctx


def design(spec: SweepSpec, specs: Specs, point: Point) -> tuple[Design, dict[str, float]]:
    """The point's configuration, workload and overrides, with the derived values applied,
    and the names the sweep's expressions see."""
    config, workload, params, base, ctx = _context(spec, specs, point)
    for name, text, loc in spec.derive:
        value = evaluate_expr(text, ctx, loc)
        if name in _COUNTS:
            value = as_int(value, name, loc)
            if value <= 0:
                raise SpecError(f"derive {name} = {value} must be positive", loc)
        ctx[name] = value
        if name in PARAMETERS:
            params[name] = value
    resized = base.with_overrides(params.get("pe_dim"))
    ctx.update(resized.parameters())
    d = Design(
        config,
        workload,
        params.get("pe_dim"),
        params.get("buffer_bytes"),
        params.get("bandwidth"),
        tuple((k, int(params[k])) for k in _RESIZE if k in params),
    )
    return d, ctx


def point_workload(point: Point) -> Workload:
    """The point's workload: model, sequence length, field overrides, phase and context."""
    fields = {f: point.get(f) for f in WORKLOAD_FIELDS if point.get(f) is not None}
    return settled(
        make_workload(
            str(point.get("model")),
            point.get("seq"),
            fields,
            phase=point.get("phase") or "prefill",
            context=point.get("context") if point.get("phase") == "decode" else None,
            shape=parse_shape([str(point.get("shape")).replace(";", ",")])
            if point.get("shape")
            else None,
        )
    )


def vars_of(workload: Workload) -> dict[str, float]:
    """Workload fields expressions may use (`seq`, `batch`, `heads`, `embed`, ...)."""
    out: dict[str, float] = {"seq": workload.seq_len, "seq_len": workload.seq_len}
    for f in ("batch", "heads", "embed", "ffn", "dmodel"):
        value = getattr(workload, f, None)
        if isinstance(value, int | float):
            out[f] = value
    return out


def run_attention(
    spec: SweepSpec, specs: Specs, d: Design, engine: str, timing: TimingOptions = UNLIMITED
) -> Result:
    return evaluate(
        specs,
        d.config,
        d.workload,
        Sizing.of(
            pe_dim=d.pe_dim,
            buffer_bytes=d.buffer_bytes,
            bandwidth=d.bandwidth,
            resize=dict(d.resize),
        ),
        EvalOptions(accounting=spec.accounting, engine=engine, timing=timing),
    )


def compute_bound(result: Result) -> bool:
    """No phase waits on DRAM or on the buffer's ports (analytic phase times)."""
    return all(
        p.memory_s <= p.compute_s * (1 + _SLACK) and p.buffer_s <= p.compute_s * (1 + _SLACK)
        for p in result.phases
    )


def size_buffer(spec: SweepSpec, specs: Specs, d: Design, ctx: Mapping[str, float]) -> int:
    """The sweep's buffer rule at one point: the smallest minimum x grow^k (rounded up to
    whole buffer rows) at which attention maps and is compute-bound."""
    rule = spec.buffer
    assert rule is not None
    raw = evaluate_expr(rule.minimum_bytes, ctx, rule.loc)
    if not math.isfinite(raw):
        raise SpecError(f"minimum_bytes = {raw} is not a finite number", rule.loc)
    minimum = as_int(math.ceil(raw), "minimum_bytes")
    if minimum <= 0:
        raise SpecError(f"minimum_bytes = {minimum} must be positive", rule.loc)
    arch = specs.architecture(specs.config_spec(d.config, d.workload))
    row = arch.buffer.width_bits // 8
    last = ""
    for k in range(rule.max_steps + 1):
        size = math.ceil(minimum * rule.grow**k / row) * row
        try:
            r = run_attention(spec, specs, d.with_buffer(size), "analytic")
        except SpecError as err:  # no valid mapping with this buffer: grow it
            last = f" (last: {err})"
            continue
        if compute_bound(r):
            return size
        last = f" ({size} bytes is memory-bound)"
    raise SpecError(
        f"no buffer from {minimum} bytes x {rule.grow}^0..{rule.max_steps} keeps {d.config} "
        f"compute-bound{last}",
        rule.loc,
    )


def evaluate_point(
    spec: SweepSpec, specs: Specs, point: Point, timing: TimingOptions = UNLIMITED
) -> dict[str, Any]:
    """One row: the point as evaluated and its results; a point that cannot be evaluated
    (no mapping fits, ...) gets its one-line reason in `error` and no results."""
    row = given_row(spec, point)
    try:
        d, ctx = design(spec, specs, point)
        if spec.buffer is not None:
            d = d.with_buffer(size_buffer(spec, specs, d, ctx))
        arch = specs.architecture(specs.config_spec(d.config, d.workload)).with_overrides(
            d.pe_dim, d.buffer_bytes, d.bandwidth, **dict(d.resize)
        )
        row.update(_design_columns(d, arch))
        if spec.scope == "layer":
            row.update(_layer_columns(spec, specs, d, timing))
        else:
            row.update(_attention_columns(run_attention(spec, specs, d, spec.engine, timing)))
    except SpecError as err:
        row["error"] = str(err)
    return row


def failed_row(spec: SweepSpec, point: Point, reason: str) -> dict[str, Any]:
    """The row of a point that could not be evaluated at all (its worker kept dying)."""
    return {**given_row(spec, point), "error": reason}


def given_row(spec: SweepSpec, point: Point) -> dict[str, Any]:
    """A row's columns before evaluation: the point as the sweep gives it."""
    accel = str(point.get("accel"))
    row: dict[str, Any] = {
        # until the design is known (a failed point keeps these): the point as given
        "accel": ALIASES.get(accel, accel),
        "model": point.get("model"),
        "seq": point.get("seq"),
        "pe_dim": point.get("pe_dim"),
        "pe_dim_1d": point.get("pe_dim_1d"),
        "buffer_bytes": point.get("buffer_bytes"),
        "bandwidth_bytes_per_s": point.get("bandwidth"),
        "register_words_2d": point.get("register_words_2d"),
        "register_words_1d": point.get("register_words_1d"),
    }
    with contextlib.suppress(SpecError):
        row["model"] = make_workload(str(point.get("model")), point.get("seq")).label
    for f in OPTIONAL_COLUMNS:
        if spec.values(f) is not None:
            row[f] = point.get(f)
    return row


def _design_columns(d: Design, arch) -> dict[str, Any]:
    two = next((a for a in arch.arrays if a.mesh_y > 1), None)
    one = next((a for a in arch.arrays if a.mesh_y == 1), None)
    return {
        "accel": d.config,
        "model": d.workload.label,
        # decode: the cached keys a step attends (the sequence length is no input of it)
        "seq": d.workload.keys if d.workload.phase == "decode" else d.workload.seq_len,
        "pe_dim": two.mesh_x if two else None,
        "pe_dim_1d": one.mesh_x if one else None,
        "buffer_bytes": arch.buffer.capacity_bytes,
        "bandwidth_bytes_per_s": arch.dram.bandwidth_bytes_per_s,
        "register_words_2d": two.register_words if two else None,
        "register_words_1d": one.register_words if one else None,
    }


def _attention_columns(r: Result) -> dict[str, Any]:
    array_2d = None
    if r.area_per_component and r.array_2d:
        prefix = (f"{r.array_2d}.", f"{r.array_2d}:")
        array_2d = sum(a for name, a in r.area_per_component if name.startswith(prefix))
    return {
        "latency_s": r.latency_s,
        "compute_2d_s": r.latency_s * r.util_2d,
        "compute_1d_s": r.latency_s * r.util_1d,
        "memory_s": sum(p.memory_s for p in r.phases),
        "traffic_bytes": r.traffic_bytes,
        "util_2d": r.util_2d,
        "util_1d": r.util_1d,
        "energy_pj": r.energy_pj,
        "area_um2": r.area_um2,
        "array_2d_area_um2": array_2d,
        "latency_bound_s": r.latency_bound_s,
        "traffic_bound_bytes": r.traffic_bound_bytes,
        "fraction_of_bound": r.fraction_of_bound,
        "bound_binds": r.bound_binds,
    }


def _layer_columns(
    spec: SweepSpec, specs: Specs, d: Design, timing: TimingOptions = UNLIMITED
) -> dict[str, Any]:
    r = evaluate_layer(
        specs,
        d.config,
        d.workload,
        Sizing.of(d.pe_dim, d.buffer_bytes, d.bandwidth, dict(d.resize)),
        LayerOptions(spec.accounting, spec.engine, spec.linear, timing),
    )
    return {
        "latency_s": r.latency_s,
        "attention_latency_s": r.attention.latency_s,
        "linear_latency_s": r.linear_latency_s,
        "traffic_bytes": r.traffic_bytes,
        "energy_pj": r.energy_pj,
        "attention_energy_pj": r.attention.energy_pj,
        "linear_energy_pj": r.linear_energy_pj,
        "area_um2": r.area_um2,
    }


def evaluate_points(
    spec: SweepSpec,
    chunk: list[Point],
    cascade_override: str | None = None,
    arch_override: str | None = None,
    timing: TimingOptions = UNLIMITED,
    cascades: Mapping[str, str] | None = None,
    ceilings: Ceilings | None = None,
) -> list[tuple[int, dict[str, Any]]]:
    """A chunk of points in one worker (process or Dask), reading each spec file once
    (`cascades`: the file each value of a swept `cascade` names; `ceilings`: a measured
    chip's, applied to every architecture)."""
    specs = Specs(cascade_override=cascade_override, arch_override=arch_override, ceilings=ceilings)
    return [
        (p.index, evaluate_point(spec, point_specs(specs, p, cascades or {}), p, timing))
        for p in chunk
    ]


def pareto_point(
    specs: Specs, model: str, pe_dim: int, sweep: str = "pareto", engine: str | None = None
) -> dict[str, Any]:
    """One point of a shipped sweep (`arch/sweeps/pareto.yaml`, figure 12) for this model
    and PE array: the row `python -m simulator.sweep --spec pareto` writes for it (`engine`
    replaces the sweep's timing model)."""
    spec = load_sweep(resolve_sweep(sweep)).with_grid((("model", (model,)), ("pe_dim", (pe_dim,))))
    if engine is not None:
        spec = dataclasses.replace(spec, engine=engine)
    (point,) = points(spec)
    row = evaluate_point(spec, specs, point)
    if row.get("error"):
        raise SpecError(row["error"])
    return row
