"""Linear-layer specs (`mappings/linear/*.yaml`) and the GEMM mapper's settings.

A linear-layer file names a cascade of GEMMs (`cascades/linear-layers.yaml`), how its rank
extents follow from the workload (`shapes: {N: batch * seq_len, D: dmodel, ...}`) and the
settings of the mapper that maps every GEMM onto the design's 2D array:

    linear:
      cascade: linear-layers
      shapes: {N: batch * seq_len, D: dmodel, EH: heads * embed, FH: heads * value_embed,
               S: ffn}
      mapper:
        objective: [latency, energy]          # lexicographic; latency always first
        spatial: {X: [rows, cols], Y: [cols, reduction]}   # dims each mesh axis may carry
        DRAM: {factors: {reduction: 1}, order: [rows, cols, reduction]}
        buffer: {keep: [left, right], bypass: [output], order: [...]}
        registers: {factors: {rows: 1, cols: 1, reduction: 1}}

The mapper speaks of GEMM roles, not rank names, so one file serves GEMMs of any shape:
dims `rows` (output rank shared with the left operand), `cols` (shared with the right
operand), `reduction`; tensors `left`, `right`, `output`. Anything a rule leaves open the
mapper searches. The settings are a modelling choice, hence spec data: the FuseMax artifact,
for instance, constrained Timeloop's mapper (whole reduction on chip, output bypassing the
buffer, rows outermost in DRAM) and `mappings/linear/artifact.yaml` says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.spec import yamlio
from simulator.spec.yamlio import LocDict, LocList
from simulator.support.errors import Loc, SpecError
from simulator.support.hashing import HashedOnce

DIMS = ("rows", "cols", "reduction")
TENSORS = ("left", "right", "output")
LEVELS = ("DRAM", "buffer", "registers")
AXES = ("X", "Y")
OBJECTIVES = ("energy", "traffic")  # the secondary objective; latency is always first
LEVEL_KEYS = {
    "DRAM": ("factors", "order"),
    "buffer": ("factors", "order", "keep", "bypass"),
    "registers": ("factors",),
}
MAPPER_KEYS = ("objective", "spatial", *LEVELS)
LINEAR_KEYS = ("label", "description", "cascade", "shapes", "array", "mapper")


@dataclass(frozen=True)
class LevelRule:
    """Constraints on one storage level: fixed factors, a loop order (outermost first),
    tensors the buffer must keep or must bypass. Empty means: the mapper chooses."""

    factors: tuple[tuple[str, int], ...] = ()
    order: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    bypass: tuple[str, ...] = ()

    def factor(self, dim: str) -> int | None:
        return dict(self.factors).get(dim)


@dataclass(frozen=True)
class MapperSettings(HashedOnce):
    __hash__ = HashedOnce.__hash__  # kept per object: a cache key on every candidate

    objective: tuple[str, ...] = ("latency", "energy")
    spatial: tuple[tuple[str, tuple[str, ...]], ...] = (("X", DIMS), ("Y", DIMS))
    dram: LevelRule = LevelRule()
    buffer: LevelRule = LevelRule()
    registers: LevelRule = LevelRule()
    source: Loc = field(default=Loc("<mapper>"), compare=False)

    def allowed(self, axis: str) -> tuple[str, ...]:
        return dict(self.spatial).get(axis, ())

    def rule(self, level: str) -> LevelRule:
        return {"DRAM": self.dram, "buffer": self.buffer, "registers": self.registers}[level]


@dataclass(frozen=True)
class LinearSpec:
    name: str
    path: str
    label: str
    cascade: str
    shapes: tuple[tuple[str, Any], ...]  # rank -> expression over workload fields
    shape_locs: tuple[tuple[str, Loc], ...]
    array: str | None  # None: the architecture's 2D array
    mapper: MapperSettings
    loc: Loc
    # The `mapper:` section as written: a mapping file's GEMM phase takes it as it is
    # (`phases: - mapper: ...`), so the linear layers run as phases of a mapping.
    mapper_data: Any = field(default=None, compare=False)


def load_linear(path: str | Path) -> LinearSpec:
    source = str(path)
    data = yamlio.load(path)
    if not isinstance(data, LocDict) or not isinstance(data.get("linear"), LocDict):
        raise SpecError("a linear-layer file must have a top-level 'linear:' section", Loc(source))
    for key in data:
        if key != "linear":
            raise SpecError(
                f"unknown top-level key '{key}' (expected 'linear:')", data.key_locs[key]
            )
    body = data["linear"]
    _check_keys(body, LINEAR_KEYS, "linear")
    for key in ("cascade", "shapes"):
        if key not in body:
            raise SpecError(f"linear needs '{key}'", body.loc)
    shapes = body["shapes"]
    if not isinstance(shapes, LocDict) or not shapes:
        raise SpecError(
            "shapes must map ranks to expressions over workload fields", body.loc_of("shapes")
        )
    mapper_raw = body.get("mapper")
    settings = (
        parse_mapper(mapper_raw, body.loc_of("mapper"))
        if mapper_raw is not None
        else MapperSettings(source=body.loc)
    )
    return LinearSpec(
        Path(source).stem,
        source,
        str(body.get("label", Path(source).stem)),
        str(body["cascade"]),
        tuple((str(k), v) for k, v in shapes.items()),
        tuple((str(k), shapes.loc_of(k)) for k in shapes),
        str(body["array"]) if "array" in body else None,
        settings,
        body.loc,
        mapper_raw,
    )


def parse_mapper(raw: Any, loc: Loc) -> MapperSettings:
    """The `mapper:` section: objective, allowed spatial dims, per-level rules."""
    if not isinstance(raw, LocDict):
        raise SpecError("mapper must be a mapping (objective, spatial, DRAM, buffer, ...)", loc)
    _check_keys(raw, MAPPER_KEYS, "mapper")
    objective: tuple[str, ...] = ("latency", "energy")
    if "objective" in raw:
        obj = _names(raw["objective"], raw.loc_of("objective"), "objective")
        if (
            not obj
            or obj[0] != "latency"
            or len(obj) > 2
            or any(o not in OBJECTIVES for o in obj[1:])
        ):
            raise SpecError(
                "objective must be [latency] or [latency, energy|traffic]: the mapper "
                "minimises latency first",
                raw.loc_of("objective"),
            )
        objective = obj
    spatial: tuple[tuple[str, tuple[str, ...]], ...] = (("X", DIMS), ("Y", DIMS))
    if "spatial" in raw:
        sp = raw["spatial"]
        _check_keys(sp, AXES, "mapper spatial")
        spatial = tuple(
            (axis, _dims(sp[axis], sp.loc_of(axis), f"spatial {axis}"))
            if axis in sp
            else (axis, ())
            for axis in AXES
        )
    rules = {}
    for level in LEVELS:
        rules[level] = (
            _rule(raw.get(level), raw.loc_of(level), level) if level in raw else LevelRule()
        )
    return MapperSettings(
        objective, spatial, rules["DRAM"], rules["buffer"], rules["registers"], loc
    )


def _rule(raw: Any, loc: Loc, level: str) -> LevelRule:
    _check_keys(raw, LEVEL_KEYS[level], f"mapper {level}")
    factors: list[tuple[str, int]] = []
    if "factors" in raw:
        fr = raw["factors"]
        if not isinstance(fr, LocDict):
            raise SpecError(f"factors of {level} must map dims to integers", raw.loc_of("factors"))
        for dim, value in fr.items():
            if dim not in DIMS:
                raise SpecError(
                    f"unknown GEMM dim '{dim}' (dims: {', '.join(DIMS)})", fr.key_locs[dim]
                )
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(
                    f"factor {dim} of {level} must be a positive integer", fr.loc_of(dim)
                )
            factors.append((str(dim), value))
    order: tuple[str, ...] = ()
    if "order" in raw:
        order = _dims(raw["order"], raw.loc_of("order"), f"order of {level}")
        if sorted(order) != sorted(DIMS):
            raise SpecError(
                f"order of {level} must list each of {', '.join(DIMS)} once, outermost first",
                raw.loc_of("order"),
            )
    keep = _tensors(raw.get("keep", []), raw.loc_of("keep"), f"keep of {level}")
    bypass = _tensors(raw.get("bypass", []), raw.loc_of("bypass"), f"bypass of {level}")
    both = set(keep) & set(bypass)
    if both:
        raise SpecError(
            f"{level} both keeps and bypasses {', '.join(sorted(both))}", raw.loc_of("bypass")
        )
    return LevelRule(tuple(factors), order, keep, bypass)


def _names(raw: Any, loc: Loc, what: str) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, LocList | list) or not all(isinstance(x, str) for x in raw):
        raise SpecError(f"{what} must be a list of names", loc)
    return tuple(str(x) for x in raw)


def _dims(raw: Any, loc: Loc, what: str) -> tuple[str, ...]:
    names = _names(raw, loc, what)
    for n in names:
        if n not in DIMS:
            raise SpecError(f"{what}: unknown GEMM dim '{n}' (dims: {', '.join(DIMS)})", loc)
    if len(set(names)) != len(names):
        raise SpecError(f"{what} names a dim twice", loc)
    return names


def _tensors(raw: Any, loc: Loc, what: str) -> tuple[str, ...]:
    names = _names(raw, loc, what)
    for n in names:
        if n not in TENSORS:
            raise SpecError(
                f"{what}: unknown GEMM tensor '{n}' (tensors: {', '.join(TENSORS)})", loc
            )
    if len(set(names)) != len(names):
        raise SpecError(f"{what} names a tensor twice", loc)
    return names


def _check_keys(mapping: Any, allowed: tuple[str, ...], what: str) -> None:
    if not isinstance(mapping, LocDict):
        raise SpecError(f"{what} must be a mapping", getattr(mapping, "loc", None))
    for key in mapping:
        if key not in allowed:
            raise SpecError(
                f"unknown key '{key}' in {what} (allowed: {', '.join(allowed)})",
                mapping.key_locs[key],
            )
