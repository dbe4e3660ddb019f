"""Design-space sweep specs: which parameters vary, which follow from them, how to size the
buffer (`arch/sweeps/*.yaml`, and `--grid name=v1,v2` on the command line).

A sweep file:

    sweep:
      description: the paper's pareto sweep (figure 12)
      grid:                        # every combination of these values is one point
        accel: [binding]
        model: [bert, trxl, t5, xlm]
        seq: [256K]
        pe_dim: [16, 32, 64, 128, 256, 512]
      derive:                      # per point, in order: restricted arithmetic over the
        min_tiles: 2 * max(1, pe_dim // E)        # point's parameters, the workload's
        register_words_2d: 2 * min_tiles          # shapes (M P E F batch heads ...),
        register_words_1d: 8 * min_tiles          # value_bytes and earlier derived names
      buffer:                      # the buffer rule: the smallest minimum_bytes x grow^k
        minimum_bytes: pe_dim * E * 8 * value_bytes   # that keeps attention compute-bound
        # (minimum_bytes also sees the resized design: PE2D.meshX, PE1D.pes, ...)
        grow: 2
      accounting: published        # optional: scope, engine, accounting, linear

A derived name that is a parameter (`register_words_2d`) sets it; other names are helpers.
The rule's facts (the minimum, the growth) are spec data because they are modelling choices
of a study, not of the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.spec import yamlio
from simulator.spec.expr import is_arithmetic
from simulator.spec.mapping import ALIASES
from simulator.spec.workload import PHASES, parse_shape
from simulator.spec.yamlio import LocDict, LocList
from simulator.support.errors import Loc, SpecError
from simulator.support.units import parse_bandwidth, parse_bytes, parse_count


def _name(text: str | int | float, what: str = "name") -> str:
    value = str(text).strip()
    if not value:
        raise SpecError(f"{what}: empty value")
    return value


def _model(text: str | int | float, what: str = "model") -> str:
    """Model names are case-blind (bert = BERT): one spelling, so duplicates show."""
    return _name(text, what).lower()


def _accel(text: str | int | float, what: str = "accel") -> str:
    """A configuration under its own name (fusemax = binding), so duplicates show; `auto`
    is the mapper's unconstrained search, as everywhere (`auto:fused`)."""
    value = _name(text, what)
    if value == "auto:fused":
        return "auto"
    return ALIASES.get(value, value)


def _phase(text: str | int | float, what: str = "phase") -> str:
    value = _name(text, what).lower()
    if value not in PHASES:
        raise SpecError(f"{what}: '{value}' is not one of {', '.join(PHASES)}")
    return value


def _shape(text: str | int | float, what: str = "shape") -> str:
    """Extents of cascade ranks no workload field sizes, `E=4096;F=14336` (`;` between
    ranks: `,` separates a grid's values); kept in one spelling, so duplicates show."""
    ranks = parse_shape([str(text).replace(";", ",")], what=what)
    if not ranks:
        raise SpecError(f"{what}: empty value")
    return ";".join(f"{r}={n}" for r, n in sorted(ranks.items()))


# Sweepable parameters: name -> (parser, what it is). Design parameters left out of a sweep
# keep the architecture file's values; accel, model and seq have defaults (DEFAULTS).
PARAMETERS: dict[str, tuple[Callable[[Any, str], Any], str]] = {
    "accel": (
        _accel,
        "configuration: a mapping (unfused, flat, cascade, arch, binding, a file) or "
        "auto[:fusemax|flat|unfused][/sequential][/no-reuse], bound per point",
    ),
    "cascade": (_name, "cascade file or shipped cascade, replacing each mapping's own"),
    "model": (_model, "workload model (cascades/workloads: bert, llama3-8b, ...; custom)"),
    "seq": (parse_count, "sequence length (1K, 64K, 1M)"),
    "pe_dim": (parse_count, "PE array dimension: 2D arrays N x N, 1D arrays N"),
    "pe_dim_1d": (parse_count, "width of the 1D array alone"),
    "buffer_bytes": (parse_bytes, "global buffer size in bytes (4M = 4MiB; 16MB = 16e6)"),
    "bandwidth": (parse_bandwidth, "DRAM bandwidth in bytes/s (400GiB; 400GB = 4e11; 4.3e11)"),
    "register_words_2d": (parse_count, "register-file words per 2D PE"),
    "register_words_1d": (parse_count, "register-file words per 1D PE"),
    "batch": (parse_count, "batch size B"),
    "heads": (parse_count, "heads H"),
    "embed": (parse_count, "per-head embedding E (= F)"),
    "ffn": (parse_count, "FFN width S"),
    "dmodel": (parse_count, "model width D"),
    "kv_heads": (parse_count, "K/V heads (grouped-query attention)"),
    "window": (parse_count, "sliding-window width in tokens"),
    "phase": (_phase, "prefill or decode (one token per request)"),
    "context": (parse_count, "phase decode: cached tokens"),
    "shape": (_shape, "extents of ranks no workload field sizes, E=4096;F=14336"),
}
DEFAULTS: dict[str, Any] = {"accel": "binding", "model": "bert", "seq": 2**20}
# Workload fields a point overrides (make_workload's `overrides`).
WORKLOAD_FIELDS = ("batch", "heads", "embed", "ffn", "dmodel", "kv_heads", "window")
# Parameters that are columns of the CSV only when the sweep varies them.
OPTIONAL_COLUMNS = ("cascade", *WORKLOAD_FIELDS, "phase", "context", "shape")
SCOPES = ("attention", "layer")
ENGINES = ("cycle", "analytic")
ACCOUNTINGS = ("corrected", "published")
RULE_GOALS = ("compute_bound",)
SWEEP_KEYS = (
    "description",
    "grid",
    "derive",
    "buffer",
    "scope",
    "engine",
    "accounting",
    "linear",
)
BUFFER_KEYS = ("minimum_bytes", "grow", "max_steps", "until")


@dataclass(frozen=True)
class BufferRule:
    """The smallest `minimum_bytes x grow^k` (k = 0..max_steps) that meets `until`."""

    minimum_bytes: str  # an expression, evaluated per point
    grow: int = 2
    max_steps: int = 16
    until: str = "compute_bound"
    loc: Loc = field(default=Loc("<buffer rule>"), compare=False)


@dataclass(frozen=True)
class SweepSpec:
    name: str
    description: str = ""
    grid: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    derive: tuple[tuple[str, str, Loc], ...] = ()
    buffer: BufferRule | None = None
    scope: str = "attention"
    engine: str = "cycle"
    accounting: str = "corrected"
    linear: str = "gemm"

    def values(self, parameter: str) -> tuple[Any, ...] | None:
        return dict(self.grid).get(parameter)

    def with_grid(self, grid: Sequence[tuple[str, tuple[Any, ...]]]) -> SweepSpec:
        """This sweep with some parameters' values replaced (or added), order kept."""
        new = dict(grid)
        merged = [(p, new.pop(p, v)) for p, v in self.grid]
        merged += [(p, v) for p, v in grid if p in new]
        return _checked(
            SweepSpec(
                self.name,
                self.description,
                tuple(merged),
                self.derive,
                self.buffer,
                self.scope,
                self.engine,
                self.accounting,
                self.linear,
            )
        )


def _checked(spec: SweepSpec, loc: Loc | None = None) -> SweepSpec:
    if spec.buffer is not None and spec.values("buffer_bytes") is not None:
        raise SpecError("buffer_bytes is both swept and sized by the buffer rule: choose one", loc)
    for name, _text, derive_loc in spec.derive:
        if spec.values(name) is not None:
            raise SpecError(f"{name} is both swept (grid) and derived: choose one", derive_loc)
    return spec


def parse_values(parameter: str, raw: Any, loc: Loc | None = None) -> tuple[Any, ...]:
    """One parameter's values (a list, or one value) through its parser."""
    if parameter not in PARAMETERS:
        raise SpecError(
            f"unknown sweep parameter '{parameter}' (known: {', '.join(PARAMETERS)})", loc
        )
    parser, what = PARAMETERS[parameter]
    items = list(raw) if isinstance(raw, (list, tuple)) else [raw]
    if not items:
        raise SpecError(f"{parameter}: no values", loc)
    out = []
    for i, item in enumerate(items):
        item_loc = raw.loc_of(i) if isinstance(raw, LocList) else loc
        try:
            value = parser(item, parameter)
        except SpecError as err:
            raise SpecError(f"{err.message} ({what})", item_loc) from None
        if value in out:
            raise SpecError(f"{parameter}: value '{item}' is listed twice", item_loc)
        out.append(value)
    return tuple(out)


def parse_grid_args(items: Sequence[str]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """`--grid pe_dim=16,32 buffer_bytes=4M,8M` -> ((pe_dim, (16, 32)), (buffer_bytes, ...))."""
    grid: dict[str, tuple[Any, ...]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or not name or not values.strip():
            raise SpecError(f"--grid: '{item}' is not NAME=V1,V2,... (e.g. pe_dim=16,32,64)")
        if name in grid:
            raise SpecError(f"--grid: '{name}' given twice")
        grid[name] = parse_values(name, [v for v in values.split(",")], Loc("--grid"))
    return tuple(grid.items())


def load_sweep(path: str | Path) -> SweepSpec:
    source = str(path)
    data = yamlio.load(path)
    if not isinstance(data, LocDict) or not isinstance(data.get("sweep"), LocDict):
        raise SpecError("a sweep file must have a top-level 'sweep:' section", Loc(source))
    for key in data:
        if key != "sweep":
            raise SpecError(
                f"unknown top-level key '{key}' (expected 'sweep:')", data.key_locs[key]
            )
    body = data["sweep"]
    _check_keys(body, SWEEP_KEYS, "sweep")
    grid_raw = body.get("grid", LocDict())
    if not isinstance(grid_raw, LocDict):
        raise SpecError("grid must map parameters to lists of values", body.loc_of("grid"))
    grid = tuple((str(p), parse_values(str(p), v, grid_raw.loc_of(p))) for p, v in grid_raw.items())
    for p in grid_raw:
        if p not in PARAMETERS:
            raise SpecError(
                f"unknown sweep parameter '{p}' (known: {', '.join(PARAMETERS)})",
                grid_raw.key_locs[p],
            )
    derive: list[tuple[str, str, Loc]] = []
    derive_raw = body.get("derive", LocDict())
    if not isinstance(derive_raw, LocDict):
        raise SpecError("derive must map names to expressions", body.loc_of("derive"))
    for name, expr in derive_raw.items():
        text = str(expr)
        if not is_arithmetic(text):
            raise SpecError(
                f"derive {name}: '{text}' is not an arithmetic expression", derive_raw.loc_of(name)
            )
        if name in ("accel", "model", "seq", *WORKLOAD_FIELDS):
            raise SpecError(
                f"derive: '{name}' cannot be computed (the workload is set before the derived "
                "values; make it a grid parameter)",
                derive_raw.key_locs[name],
            )
        derive.append((str(name), text, derive_raw.loc_of(name)))
    buffer = _buffer_rule(body["buffer"], body.loc_of("buffer")) if "buffer" in body else None
    choices = {"scope": SCOPES, "engine": ENGINES, "accounting": ACCOUNTINGS}
    settings = {}
    for key, allowed in choices.items():
        if key in body:
            value = str(body[key])
            if value not in allowed:
                raise SpecError(
                    f"{key} must be one of {', '.join(allowed)}, got '{value}'", body.loc_of(key)
                )
            settings[key] = value
    if "linear" in body:
        settings["linear"] = str(body["linear"])
    return _checked(
        SweepSpec(
            Path(source).stem,
            str(body.get("description", "")),
            grid,
            tuple(derive),
            buffer,
            **settings,
        ),
        body.loc,
    )


def _buffer_rule(raw: Any, loc: Loc) -> BufferRule:
    if not isinstance(raw, LocDict):
        raise SpecError("buffer must be a mapping (minimum_bytes, grow, max_steps, until)", loc)
    _check_keys(raw, BUFFER_KEYS, "buffer")
    if "minimum_bytes" not in raw:
        raise SpecError("the buffer rule needs 'minimum_bytes' (an expression)", raw.loc)
    minimum = str(raw["minimum_bytes"])
    if not is_arithmetic(minimum):
        raise SpecError(
            f"minimum_bytes: '{minimum}' is not an arithmetic expression",
            raw.loc_of("minimum_bytes"),
        )
    grow, steps = raw.get("grow", 2), raw.get("max_steps", 16)
    if isinstance(grow, bool) or not isinstance(grow, int) or grow < 2:
        raise SpecError("grow must be an integer >= 2", raw.loc_of("grow"))
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= 64:
        raise SpecError("max_steps must be an integer from 0 to 64", raw.loc_of("max_steps"))
    until = str(raw.get("until", "compute_bound"))
    if until not in RULE_GOALS:
        raise SpecError(
            f"until must be one of {', '.join(RULE_GOALS)}, got '{until}'", raw.loc_of("until")
        )
    return BufferRule(minimum, grow, steps, until, raw.loc_of("minimum_bytes"))


def _check_keys(raw: Any, allowed: Sequence[str], where: str) -> None:
    if not isinstance(raw, LocDict):
        return
    for key in raw:
        if key not in allowed:
            raise SpecError(
                f"unknown key '{key}' in {where} (allowed: {', '.join(allowed)})",
                raw.key_locs[key],
            )
