"""Mapping + binding specs: how a cascade runs on an architecture (`mappings/*.yaml`).

A mapping names its cascade and architecture and says:

* `factors` / `partitions`: how ranks split into tiles (`P: [P2, P1, P0]`); a factor is an
  arithmetic expression (`PE2D.meshX`) or `search` (chosen by the model: least DRAM traffic
  that fits the buffer);
* `spatial`: which rank components each array spreads over its PEs;
* `binding`: which array runs each Einsum, and `chaining` (sequential or pipelined use of a
  PE's functional units);
* `tensors`: where each tensor lives -- `home` DRAM, buffer or registers; `keep`: the loop
  below which its tile stays in the buffer (`stream`: no reuse, `top`: whole tensor);
  `copies` (double buffering); `spill` (fraction of its buffer accesses going to DRAM, or
  `auto` when it does not fit);
* `phases`: groups of Einsums that run together, each with temporal `loops` (outermost
  first), per-Einsum overrides, and a `schedule` tree combining per-Einsum cycles (a list
  runs in sequence, `par` overlaps branches, `stall` adds cycles).

Per-point choices can come from a data table (`dataflow:`): `{select: dataflow.COLUMN,
VALUE: ...}` anywhere picks the branch named by the point's row. This module loads and
checks the file; :func:`resolve` fixes it for one workload point.
"""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.spec import expr, yamlio
from simulator.spec.linear import parse_mapper
from simulator.spec.yamlio import LocDict, LocList, LocStr
from simulator.support.errors import Loc, SpecError
from simulator.support.hashing import HashedOnce
from simulator.support.units import parse_count

TOP_KEYS = (
    "label",
    "description",
    "cascade",
    "architecture",
    "shapes",
    "dataflow",
    "factors",
    "partitions",
    "spatial",
    "binding",
    "chaining",
    "tensors",
    "phases",
    "published",
    "padded",
    "instances",
    "otherwise",
    "normalised",
    "recompute",
)
INSTANCE_KEYS = ("batch", "heads")
# The five configurations of the paper's evaluation (mapping files), in its order, and the
# other names they go by.
STANDARD = ("unfused", "flat", "cascade", "arch", "binding")
ALIASES = {"fusemax": "binding"}

PLACEMENT_KEYS = ("home", "keep", "copies", "spill", "over")
HOMES = ("DRAM", "buffer", "register")
PHASE_KEYS = ("name", "loops", "einsums", "tensors", "schedule", "pipeline", "mapper", "split")
PIPELINE_KEYS = ("tiles_in_flight",)
EINSUM_KEYS = ("loops", "inner", "spatial")
CHAINING = ("sequential", "pipelined")


@dataclass(frozen=True)
class Placement:
    tensor: str
    home: str  # DRAM | buffer | register
    keep: str | None  # a loop (rank component), "stream", "top", or None
    copies: int = 1
    spill: float | str | None = None  # fraction, "auto", or None
    loc: Loc | None = None
    # Computed in place over another buffer tile (FLAT's SN over QK): the two take one slot.
    over: str | None = None


@dataclass(frozen=True)
class EinsumMap:
    einsum: str
    array: str
    loops: tuple[str, ...] | None  # None: the phase's loops (those the Einsum iterates)
    inner: tuple[str, ...] | None  # None: remaining temporal components, in rank order
    spatial: tuple[str, ...]


@dataclass(frozen=True)
class Schedule:
    kind: str  # seq | par | einsum | stall
    children: tuple[Schedule, ...] = ()
    name: str = ""  # the Einsum, or the stall expression
    loc: Loc | None = None

    def einsums(self) -> list[str]:
        if self.kind == "einsum":
            return [self.name]
        return [n for c in self.children for n in c.einsums()]


@dataclass(frozen=True)
class Phase(HashedOnce):
    __hash__ = HashedOnce.__hash__  # kept per object: a cache key on every candidate

    name: str
    loops: tuple[str, ...]
    einsums: tuple[EinsumMap, ...]
    placements: tuple[Placement, ...]
    schedule: Schedule
    loc: Loc | None = None
    # Cycle engine: a pipelined waterfall of tiles (epochs) instead of per-Einsum phases;
    # `tiles_in_flight` bounds the tiles the 2D array works on at once (None: registers).
    pipeline: bool = False
    tiles_in_flight: int | None = None
    # A GEMM phase mapped by the GEMM mapper (`plan/gemm_mapper.py`) under these settings
    # (`simulator.spec.linear.MapperSettings`) instead of the phase's loops and placements.
    mapper: Any = None
    # Its outermost loops over a rank its Einsums reduce, dealt to a chip's cores as units
    # all the same (split-K): each unit reduces its part, the parts accumulate in the
    # cores' shared cache (simulator.plan.waves.unit_loops).
    split: tuple[str, ...] = ()

    def placement(self, tensor: str) -> Placement | None:
        return self._placement_by_tensor.get(tensor)

    def __getstate__(self) -> dict:
        state = HashedOnce.__getstate__(self)
        state.pop("_placement_of", None)  # the planner's memo (simulator.plan.facts)
        return state

    @functools.cached_property
    def _placement_by_tensor(self) -> dict[str, Placement]:
        """The placements by tensor, the first of each (looked up per access)."""
        out: dict[str, Placement] = {}
        for p in self.placements:
            out.setdefault(p.tensor, p)
        return out


@dataclass(frozen=True)
class Mapping(HashedOnce):
    """A mapping fixed for one workload point (selects applied; `search` factors open)."""

    __hash__ = HashedOnce.__hash__  # kept per object: a cache key on every candidate

    name: str
    label: str
    description: str
    path: str
    cascade: str
    architecture: str
    factors: tuple[tuple[str, Any], ...]  # component -> expression text/number or "search"
    partitions: tuple[tuple[str, tuple[str, ...]], ...]
    binding: tuple[tuple[str, str], ...]  # einsum -> array
    chaining: tuple[tuple[str, str], ...]  # array -> mode
    phases: tuple[Phase, ...]
    dataflow: tuple[tuple[str, Any], ...] = ()  # the table row used, if any
    factor_locs: tuple[tuple[str, Loc], ...] = ()
    notes: tuple[str, ...] = ()
    binding_locs: tuple[tuple[str, Loc], ...] = ()
    unpriced: tuple[str, ...] = ()  # components the published accounting left unpriced
    padded: tuple[str, ...] = ()  # ranks rounded up to a whole number of tiles
    shapes: tuple[tuple[str, int], ...] = ()  # ranks the workload sizes (`shapes:`)
    # Independent repetitions of the cascade (`instances:`): requests x heads; a cascade
    # with a group rank (grouped-query attention) repeats once per K/V head.
    batch: int = 1
    heads: int = 1

    @property
    def instances(self) -> int:
        return self.batch * self.heads

    def binding_loc(self, einsum: str) -> Loc:
        return dict(self.binding_locs).get(einsum, Loc(self.path))

    def array_of(self, einsum: str) -> str:
        return dict(self.binding)[einsum]

    def chaining_of(self, array: str) -> str:
        return dict(self.chaining).get(array, "sequential")

    def context(self) -> dict[str, float]:
        """Numeric dataflow values usable in expressions (`dataflow.P1`)."""
        out = {}
        for key, value in self.dataflow:
            try:
                out[f"dataflow.{key}"] = float(value)
            except (TypeError, ValueError):
                continue
        return out


@dataclass(frozen=True)
class MappingSpec:
    """A loaded mapping file, not yet fixed to a point."""

    name: str
    path: str
    data: LocDict
    table: tuple[dict[str, str], ...]
    table_path: str
    notes: tuple[str, ...] = ()  # said with its results (why this mapping runs the point)

    @property
    def otherwise(self) -> str | None:
        """The automatic configuration (`auto:STRATEGY`) that binds a point this file does
        not cover: another attention than its cascade's, or (with a dataflow table) a point
        or an architecture its table has no row for."""
        value = self.data.get("otherwise")
        return None if value is None else str(value)

    @property
    def normalised(self) -> bool:
        """The mapping binds the cascade as the mapper reads it (`normalised: yes`:
        :mod:`simulator.cascade.normal`, a scaled sum split into the sum and the scaling),
        not as written."""
        value = self.data.get("normalised", False)
        if not isinstance(value, bool):
            raise SpecError(
                f"normalised must be yes or no, got {value!r}", self.data.loc_of("normalised")
            )
        return value

    @property
    def recompute(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The Einsums the mapping makes again, each for the readers it lists
        (`recompute: {XC: [XN]}`: :mod:`simulator.cascade.recompute`); none by default."""
        value = self.data.get("recompute")
        if value is None:
            return ()
        loc = self.data.loc_of("recompute")
        if not isinstance(value, dict) or not all(
            isinstance(v, list) and v and all(isinstance(r, str) for r in v) for v in value.values()
        ):
            raise SpecError(
                "recompute must map each Einsum to the list of its readers that read the "
                f"copy (recompute: {{XC: [XN]}}), got {value!r}",
                loc,
            )
        return tuple((str(k), tuple(str(r) for r in v)) for k, v in value.items())

    @property
    def label(self) -> str:
        return str(self.data.get("label", self.name))

    @property
    def cascade(self) -> str:
        return str(self.data["cascade"])

    @property
    def architecture(self) -> str:
        return str(self.data["architecture"])


def mapping_shapes(spec: MappingSpec, fields: dict[str, Any]) -> dict[str, int]:
    """The cascade ranks the workload sizes, from the mapping's `shapes:` (rank ->
    expression over the workload's fields: `M: seq_len`, `E: embed`). Ranks it does not
    name keep the cascade's example shapes or come from the mapping's factors."""
    raw = spec.data.get("shapes")
    if raw is None:
        raise SpecError(
            f"mapping '{spec.name}' needs 'shapes:', the cascade ranks the workload sizes "
            "(e.g. {M: seq_len, P: seq_len, E: embed, F: value_embed}; {} keeps the "
            "cascade's example shapes)",
            spec.data.loc,
        )
    if not isinstance(raw, LocDict):
        raise SpecError(
            "shapes must map cascade ranks to workload expressions, e.g. {M: seq_len}",
            spec.data.loc_of("shapes"),
        )
    numbers = {
        k: v for k, v in fields.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    out: dict[str, int] = {}
    for rank, text in raw.items():
        loc = raw.loc_of(rank)
        value = expr.as_int(expr.evaluate(text, numbers, loc), f"shape of {rank}", loc)
        if value <= 0:
            raise SpecError(f"shape of {rank} must be positive, got {value}", loc)
        out[str(rank)] = value
    return out


def mapping_instances(spec: MappingSpec, fields: dict[str, Any]) -> tuple[int, int]:
    """(batch, heads): how many times the cascade runs, from the mapping's `instances:`
    (expressions over the workload's fields; default: batch x heads)."""
    raw = spec.data.get("instances")
    if raw is None:
        raw = LocDict()
    if not isinstance(raw, LocDict):
        raise SpecError(
            "instances must map batch and heads to workload expressions, e.g. {heads: kv_heads}",
            spec.data.loc_of("instances"),
        )
    _check_keys(raw, INSTANCE_KEYS, "instances")
    numbers = {
        k: v for k, v in fields.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    out = []
    for key in INSTANCE_KEYS:
        loc = raw.loc_of(key) if key in raw else spec.data.loc
        value = expr.as_int(expr.evaluate(raw.get(key, key), numbers, loc), f"instances {key}", loc)
        if value <= 0:
            raise SpecError(f"instances {key} must be positive, got {value}", loc)
        out.append(value)
    return out[0], out[1]


def load_mapping(path: str | Path) -> MappingSpec:
    return build_mapping(yamlio.load(path), str(path))


def loads_mapping(text: str, source: str, name: str) -> MappingSpec:
    """A mapping from text (a generated one): `source` names it in messages."""
    spec = build_mapping(yamlio.loads(text, source), source)
    return MappingSpec(name, spec.path, spec.data, spec.table, spec.table_path)


def mapping_from_data(data: dict[str, Any], source: str, name: str) -> MappingSpec:
    """A generated mapping from its data, as :func:`loads_mapping` reads it from the data's
    text (positions aside: every one is `source`)."""
    spec = build_mapping(yamlio.located(data, source), source)
    return MappingSpec(name, spec.path, spec.data, spec.table, spec.table_path)


def build_mapping(data: Any, source: str) -> MappingSpec:
    if not isinstance(data, LocDict) or not isinstance(data.get("mapping"), LocDict):
        raise SpecError(
            "a mapping file must have a top-level 'mapping:' section", Loc(source, 1, 1)
        )
    for key in data:
        if key != "mapping":
            raise SpecError(
                f"unknown top-level key '{key}' (expected 'mapping:')", data.key_locs[key]
            )
    body = data["mapping"]
    _check_keys(body, TOP_KEYS, "mapping")
    for key in ("cascade", "architecture", "phases"):
        if key not in body:
            raise SpecError(f"mapping needs '{key}'", body.loc)
    table: list[dict[str, str]] = []
    table_path = ""
    if "dataflow" in body:
        df = body["dataflow"]
        if not isinstance(df, LocDict) or "table" not in df or "match" not in df:
            raise SpecError(
                "dataflow needs 'table:' (a CSV file) and 'match:' ({column: workload field})",
                body.loc_of("dataflow"),
            )
        _check_keys(df, ("table", "match", "where", "nearest"), "dataflow")
        for key in ("match", "where", "nearest"):
            section = df.get(key)
            if section is None and key != "match":
                continue
            if not isinstance(section, LocDict) or not all(
                isinstance(v, str | int | float) and not isinstance(v, bool)
                for v in section.values()
            ):
                raise SpecError(
                    f"dataflow '{key}' must map table columns to names or values, "
                    "e.g. {models: label, seq_len: seq}",
                    df.loc_of(key),
                )
        table_file = Path(source).parent / str(df["table"])
        table_path = str(table_file)
        table = _read_table(table_file, df.loc_of("table"))
    return MappingSpec(Path(source).stem, source, body, tuple(table), table_path)


def _read_table(path: Path, loc: Loc) -> list[dict[str, str]]:
    try:
        lines = [
            ln
            for ln in path.read_text(encoding="utf-8").splitlines()
            if ln.strip() and not ln.startswith("#")
        ]
    except FileNotFoundError:
        raise SpecError(f"dataflow table {path} not found", loc) from None
    rows = list(csv.DictReader(lines))
    if not rows:
        raise SpecError(f"dataflow table {path} is empty", loc)
    return rows


def _check_keys(mapping: Any, allowed: tuple[str, ...], what: str) -> None:
    if not isinstance(mapping, LocDict):
        raise SpecError(f"{what} must be a mapping", getattr(mapping, "loc", None))
    for key in mapping:
        if key not in allowed:
            raise SpecError(
                f"unknown key '{key}' in {what} (allowed: {', '.join(allowed)})",
                mapping.key_locs[key],
            )


# --------------------------------------------------------------------------------------
# Fixing a mapping to one point


def has_row(spec: MappingSpec, workload_fields: dict[str, Any]) -> bool:
    """Does the mapping's dataflow table have a row for this workload (exactly)?"""
    return _exact_row(spec, workload_fields) is not None


def _exact_row(spec: MappingSpec, workload_fields: dict[str, Any]) -> dict[str, str] | None:
    df = spec.data["dataflow"]
    match, where = df["match"], df.get("where") or {}
    if not isinstance(match, LocDict) or not isinstance(where, dict):
        raise SpecError("dataflow 'match' and 'where' must be mappings", df.loc)
    for row in spec.table:
        if any(str(row.get(col, "")) != str(val) for col, val in where.items()):
            continue
        ok = True
        for col, field in match.items():
            if col not in row:
                raise SpecError(f"dataflow table has no column '{col}'", match.key_locs[col])
            if field not in workload_fields:
                raise SpecError(
                    f"unknown workload field '{field}' (known: "
                    f"{', '.join(sorted(workload_fields))})",
                    match.loc_of(col),
                )
            want = workload_fields[field]
            have = row[col]
            if isinstance(want, int):
                try:
                    ok &= parse_count(have) == want
                except SpecError:
                    ok = False
            else:
                ok &= str(have).lower() == str(want).lower()
        if ok:
            return row
    return None


def find_row(
    spec: MappingSpec, workload_fields: dict[str, Any]
) -> tuple[dict[str, str], str | None]:
    """The dataflow table row for a workload (`match` maps table columns to its fields).

    Without an exact match, `nearest:` (numeric columns -> workload fields) picks the row
    closest in log scale; the returned note says which row was borrowed."""
    exact = _exact_row(spec, workload_fields)
    if exact is not None:
        return exact, None
    df = spec.data["dataflow"]
    match, where = df["match"], df.get("where") or {}
    described = ", ".join(f"{f}={workload_fields[f]}" for f in match.values())
    nearest = df.get("nearest")
    if isinstance(nearest, LocDict) and nearest:
        best, best_key = None, None
        for row in spec.table:
            if any(str(row.get(col, "")) != str(val) for col, val in where.items()):
                continue
            distance = 0.0
            for col, field in nearest.items():
                try:
                    have = parse_count(row[col]) if col in row else None
                except SpecError:
                    have = None
                want = workload_fields.get(field)
                if have is None or not isinstance(want, int) or want <= 0:
                    raise SpecError(
                        f"nearest: column '{col}' / field '{field}' must be positive counts",
                        nearest.loc_of(col),
                    )
                distance += abs(math.log2(have / want))
            if best_key is None or distance < best_key:
                best, best_key = row, distance
        if best is not None:
            which = ", ".join(f"{c}={best[c]}" for c in match)
            return best, (
                f"{spec.label}: no published dataflow for {described}; using the "
                f"nearest published row ({which})"
            )
    raise SpecError(
        f"the dataflow table {Path(spec.table_path).name} has no row for "
        f"{described}; mapping '{spec.name}' is only defined at its published points",
        df.loc_of("table"),
    )


def _apply_selects(node: Any, row: dict[str, str] | None, where: str) -> Any:
    """Replace every `{select: dataflow.COL, VALUE: branch}` by the row's branch. A part
    with no select is returned as it is, not copied (specs are never changed once read)."""
    if isinstance(node, LocDict):
        if "select" in node:
            key = str(node["select"])
            if not key.startswith("dataflow."):
                raise SpecError(
                    f"select must name a dataflow column (dataflow.COLUMN), got '{key}'",
                    node.loc_of("select"),
                )
            if row is None:
                raise SpecError(
                    f"'select: {key}' needs a 'dataflow:' table in the mapping",
                    node.loc_of("select"),
                )
            column = key.split(".", 1)[1]
            if column not in row:
                raise SpecError(f"dataflow table has no column '{column}'", node.loc_of("select"))
            value = row[column]
            if value not in node:
                options = ", ".join(str(k) for k in node if k != "select")
                raise SpecError(
                    f"{where}: no branch for {column} = '{value}' (branches: {options})",
                    node.loc_of("select"),
                )
            return _apply_selects(node[value], row, where)
        items = {k: _apply_selects(v, row, f"{where}.{k}") for k, v in node.items()}
        if all(items[k] is v for k, v in node.items()):
            return node
        out = LocDict(items)
        out.loc, out.tag = node.loc, node.tag
        out.key_locs, out.value_locs = dict(node.key_locs), dict(node.value_locs)
        return out
    if isinstance(node, LocList):
        values = [_apply_selects(v, row, where) for v in node]
        if all(new is old for new, old in zip(values, node, strict=True)):
            return node
        out_list = LocList(values)
        out_list.loc, out_list.item_locs = node.loc, list(node.item_locs)
        return out_list
    return node


def _names(raw: Any, loc: Loc, what: str) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise SpecError(f"{what} must be a list of names", loc)
    return tuple(str(x) for x in raw)


def _placement(tensor: str, raw: Any, loc: Loc, context: dict[str, float]) -> Placement:
    if not isinstance(raw, LocDict):
        raise SpecError(
            f"placement of '{tensor}' must be a mapping like {{home: DRAM, keep: P2}}", loc
        )
    _check_keys(raw, PLACEMENT_KEYS, f"placement of '{tensor}'")
    home = str(raw.get("home", "register"))
    if home not in HOMES:
        raise SpecError(
            f"home of '{tensor}' must be one of {', '.join(HOMES)}, got '{home}'",
            raw.loc_of("home"),
        )
    keep = raw.get("keep")
    keep = None if keep is None else str(keep)
    copies = raw.get("copies", 1)
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise SpecError(f"copies of '{tensor}' must be a positive integer", raw.loc_of("copies"))
    spill: float | str | None = None
    if "spill" in raw:
        value = raw["spill"]
        if str(value) == "auto":
            spill = "auto"
        else:
            spill = float(expr.evaluate(value, context, raw.loc_of("spill")))
            if not 0 <= spill <= 1:
                raise SpecError(
                    f"spill of '{tensor}' must be a fraction in [0, 1], got {spill}",
                    raw.loc_of("spill"),
                )
    if home == "register" and (keep is not None or spill is not None):
        raise SpecError(f"'{tensor}' lives in registers: 'keep' and 'spill' do not apply", raw.loc)
    over = raw.get("over")
    if over is not None and (not isinstance(over, str) or home != "buffer"):
        raise SpecError(
            f"'over' of '{tensor}' names the buffer tensor it is computed in place over "
            "(home: buffer)",
            raw.loc_of("over"),
        )
    return Placement(tensor, home, keep, copies, spill, raw.loc, over)


def _schedule(raw: Any, loc: Loc) -> Schedule:
    if isinstance(raw, LocStr) or isinstance(raw, str):
        return Schedule("einsum", name=str(raw), loc=getattr(raw, "loc", loc))
    if isinstance(raw, LocList):
        return Schedule(
            "seq", tuple(_schedule(x, raw.loc_of(i)) for i, x in enumerate(raw)), loc=raw.loc
        )
    if isinstance(raw, LocDict) and len(raw) == 1:
        ((key, value),) = raw.items()
        if key == "par":
            if not isinstance(value, LocList) or not value:
                raise SpecError("'par' takes a list of branches", raw.loc_of("par"))
            branches = []
            for i, branch in enumerate(value):
                if not isinstance(branch, LocList):
                    branch_list = LocList([branch])
                    branch_list.loc, branch_list.item_locs = value.loc_of(i), [value.loc_of(i)]
                    branch = branch_list
                branches.append(_schedule(branch, value.loc_of(i)))
            return Schedule("par", tuple(branches), loc=raw.loc)
        if key == "seq":
            return _schedule(value, raw.loc_of("seq"))
        if key == "stall":
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise SpecError(
                    "'stall' takes an arithmetic expression of cycles", raw.loc_of("stall")
                )
            return Schedule("stall", name=str(value), loc=raw.loc_of("stall"))
    raise SpecError(
        "a schedule item is an Einsum name, a list (in sequence), "
        "{par: [[...], [...]]} or {stall: EXPRESSION}",
        getattr(raw, "loc", loc),
    )


@dataclass(frozen=True)
class CascadeNames:
    """What a mapping may name from its cascade: ranks and their components (the cascade's
    partitions'), and tensors; and which Einsum reads and produces which tensors, to check
    that phases run in an order the dependencies allow."""

    components: frozenset[str]
    tensors: frozenset[str]
    reads: tuple[tuple[str, tuple[str, ...]], ...] = ()  # einsum -> tensors it reads
    producers: tuple[tuple[str, str], ...] = ()  # tensor -> the Einsum writing it


def _check_components(
    names: tuple[str, ...], known: frozenset[str] | None, loc: Loc | None, what: str
) -> tuple[str, ...]:
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise SpecError(f"{what} lists '{twice}' twice: each component once", loc)
    if known is not None:
        for n in names:
            if n not in known:
                raise SpecError(
                    f"{what} names '{n}', which is no rank or rank component of the cascade "
                    f"or the mapping's partitions (known: {', '.join(sorted(known))})",
                    loc,
                )
    return names


KEEP_WORDS = ("stream", "top")


def _check_phase_order(phases: list[Phase], names: CascadeNames) -> None:
    """Phases run one after another: an Einsum may read what its own or an earlier phase
    produces, never what a later phase does."""
    phase_of = {em.einsum: i for i, ph in enumerate(phases) for em in ph.einsums}
    producers = dict(names.producers)
    for einsum, tensors in names.reads:
        if einsum not in phase_of:
            continue
        for tensor in tensors:
            producer = producers.get(tensor)
            if producer in phase_of and phase_of[producer] > phase_of[einsum]:
                here, later = phases[phase_of[einsum]], phases[phase_of[producer]]
                raise SpecError(
                    f"phase '{here.name}' runs {einsum}, which reads {tensor}, but {producer} "
                    f"produces it in the later phase '{later.name}': order the phases as the "
                    "dependencies run",
                    here.loc,
                )


def _check_par(schedule: Schedule, binding: dict[str, str]) -> None:
    """`par` overlaps branches that run on different arrays: an array runs one Einsum at
    a time, so two branches on the same array cannot overlap (their time would be counted
    once)."""
    for child in schedule.children:
        _check_par(child, binding)
    if schedule.kind != "par":
        return
    seen: dict[str, list[str]] = {}
    for branch in schedule.children:
        names = branch.einsums()
        for array in dict.fromkeys(binding[n] for n in names):
            if array in seen:
                raise SpecError(
                    f"par overlaps {', '.join(seen[array])} and {', '.join(names)}, which "
                    f"both run on {array}: one array runs one Einsum at a time (list them in "
                    "one branch, in sequence)",
                    schedule.loc,
                )
            seen[array] = names


def resolve(
    spec: MappingSpec,
    workload_fields: dict[str, Any],
    context: dict[str, float],
    einsum_names: list[str],
    array_names: list[str],
    cascade_names: CascadeNames | None = None,
) -> Mapping:
    """Fix a mapping to one point: pick its table row, apply selects, check names (against
    the cascade's ranks and tensors when `cascade_names` is given)."""
    row, note = find_row(spec, workload_fields) if spec.table else (None, None)
    notes = (*spec.notes, *((note,) if note else ()))
    body = _apply_selects(spec.data, row, spec.name)
    ctx = dict(context)
    if row is not None:
        for key, value in row.items():
            try:
                ctx[f"dataflow.{key}"] = float(value)
            except ValueError:
                pass

    factors_raw = body.get("factors") or LocDict()
    if not isinstance(factors_raw, LocDict):
        raise SpecError("factors must map rank components to expressions", body.loc_of("factors"))
    factors = tuple((str(k), v) for k, v in factors_raw.items())
    factor_locs = tuple((str(k), factors_raw.loc_of(k)) for k in factors_raw)
    partitions_raw = body.get("partitions") or LocDict()
    if not isinstance(partitions_raw, LocDict):
        raise SpecError(
            "partitions must map a rank to its components, e.g. P: [P2, P1, P0]",
            body.loc_of("partitions"),
        )
    partitions = tuple(
        (str(k), _names(v, partitions_raw.loc_of(k), f"partition of {k}"))
        for k, v in partitions_raw.items()
    )
    known: frozenset[str] | None = None
    if cascade_names is not None:
        for rank, _comps in partitions:
            if rank not in cascade_names.components:
                raise SpecError(
                    f"partitions: '{rank}' is no rank of the cascade "
                    f"(ranks and components: {', '.join(sorted(cascade_names.components))})",
                    partitions_raw.key_locs[rank],
                )
        known = cascade_names.components | {c for _r, comps in partitions for c in comps}
        for name, loc in factor_locs:
            _check_components((name,), known, loc, "factors")

    binding_raw = body.get("binding")
    if not isinstance(binding_raw, LocDict):
        raise SpecError(
            "binding must map each array to the Einsums it runs", body.loc_of("binding")
        )
    binding: dict[str, str] = {}
    binding_locs: dict[str, Loc] = {}
    for array, names in binding_raw.items():
        if array not in array_names:
            raise SpecError(
                f"unknown array '{array}' (the architecture has {', '.join(array_names)})",
                binding_raw.key_locs[array],
            )
        for name in _names(names, binding_raw.loc_of(array), f"Einsums of {array}"):
            if name not in einsum_names:
                raise SpecError(
                    f"unknown Einsum '{name}' (the cascade has {', '.join(einsum_names)})",
                    binding_raw.loc_of(array),
                )
            if name in binding:
                raise SpecError(
                    f"Einsum '{name}' is bound to both {binding[name]} and {array}",
                    binding_raw.loc_of(array),
                )
            binding[name] = str(array)
            binding_locs[name] = binding_raw.loc_of(array)
    missing = [e for e in einsum_names if e not in binding]
    if missing:
        raise SpecError(
            f"Einsum(s) {', '.join(missing)} are not bound to any array", body.loc_of("binding")
        )

    chaining_raw = body.get("chaining") or LocDict()
    if not isinstance(chaining_raw, LocDict):
        raise SpecError(
            f"chaining must map arrays to a mode ({', '.join(CHAINING)})", body.loc_of("chaining")
        )
    chaining = []
    for array, mode in chaining_raw.items():
        if array not in array_names:
            raise SpecError(f"unknown array '{array}'", chaining_raw.key_locs[array])
        if mode not in CHAINING:
            raise SpecError(
                f"chaining must be one of {', '.join(CHAINING)}, got '{mode}'",
                chaining_raw.loc_of(array),
            )
        chaining.append((str(array), str(mode)))

    spatial_raw = body.get("spatial") or LocDict()
    if not isinstance(spatial_raw, LocDict):
        raise SpecError(
            "spatial must map arrays to the rank components they spread, e.g. PE2D: [P0, M0]",
            body.loc_of("spatial"),
        )
    spatial: dict[str, tuple[str, ...]] = {}
    for array, comps in spatial_raw.items():
        if array not in array_names:
            raise SpecError(f"unknown array '{array}'", spatial_raw.key_locs[array])
        spatial[str(array)] = _check_components(
            _names(comps, spatial_raw.loc_of(array), f"spatial of {array}"),
            known,
            spatial_raw.loc_of(array),
            f"spatial of {array}",
        )

    base_placements: dict[str, Placement] = {}
    tensors_raw = body.get("tensors") or LocDict()
    if not isinstance(tensors_raw, LocDict):
        raise SpecError("tensors must map tensor names to placements", body.loc_of("tensors"))

    def placement(tensor: Any, raw: Any, where: LocDict) -> Placement:
        name = str(tensor)
        if cascade_names is not None and name not in cascade_names.tensors:
            raise SpecError(
                f"tensors: '{name}' is no tensor of the cascade "
                f"(tensors: {', '.join(sorted(cascade_names.tensors))})",
                where.key_locs[tensor],
            )
        place = _placement(name, raw, where.loc_of(tensor), ctx)
        if known is not None and place.keep not in (None, *KEEP_WORDS):
            _check_components((place.keep,), known, place.loc, f"keep of '{name}' (or stream, top)")
        return place

    for tensor, raw in tensors_raw.items():
        base_placements[str(tensor)] = placement(tensor, raw, tensors_raw)

    phases_raw = body["phases"]
    if not isinstance(phases_raw, LocList) or not phases_raw:
        raise SpecError("phases must be a non-empty list", body.loc_of("phases"))
    phases = []
    scheduled: dict[str, str] = {}
    for i, praw in enumerate(phases_raw):
        ploc = phases_raw.loc_of(i)
        _check_keys(praw, PHASE_KEYS, "a phase")
        pname = str(praw.get("name", f"phase{i + 1}"))
        if "schedule" not in praw:
            raise SpecError(f"phase '{pname}' needs a 'schedule'", praw.loc)
        loops = _check_components(
            _names(praw.get("loops", []), praw.loc_of("loops"), "loops"),
            known,
            praw.loc_of("loops"),
            f"loops of phase '{pname}'",
        )
        sched = _schedule(praw["schedule"], praw.loc_of("schedule"))
        names = sched.einsums()
        for name in names:
            if name not in einsum_names:
                raise SpecError(
                    f"schedule of phase '{pname}' names unknown Einsum '{name}'",
                    praw.loc_of("schedule"),
                )
            if name in scheduled:
                raise SpecError(
                    f"Einsum '{name}' is scheduled twice (also in phase '{scheduled[name]}')",
                    praw.loc_of("schedule"),
                )
            scheduled[name] = pname
        _check_par(sched, binding)
        overrides = praw.get("einsums") or LocDict()
        if not isinstance(overrides, LocDict):
            raise SpecError("einsums must map Einsum names to overrides", praw.loc_of("einsums"))
        for name in overrides:
            if name not in names:
                raise SpecError(
                    f"override for Einsum '{name}', which phase '{pname}' does not schedule",
                    overrides.key_locs[name],
                )
        maps = []
        for name in names:
            over = overrides.get(name) or LocDict()
            _check_keys(over, EINSUM_KEYS, f"overrides of '{name}'")
            array = binding[name]

            def listed(key: str, over: LocDict = over, name: str = name) -> tuple[str, ...]:
                return _check_components(
                    _names(over[key], over.loc_of(key), key),
                    known,
                    over.loc_of(key),
                    f"{key} of '{name}'",
                )

            maps.append(
                EinsumMap(
                    name,
                    array,
                    listed("loops") if "loops" in over else None,
                    listed("inner") if "inner" in over else None,
                    listed("spatial") if "spatial" in over else spatial.get(array, ()),
                )
            )
        placements = dict(base_placements)
        ptensors = praw.get("tensors") or LocDict()
        if not isinstance(ptensors, LocDict):
            raise SpecError("tensors must map tensor names to placements", praw.loc_of("tensors"))
        for tensor, raw in ptensors.items():
            placements[str(tensor)] = placement(tensor, raw, ptensors)
        pipeline = praw.get("pipeline")
        tiles_in_flight = None
        if pipeline is not None:
            if not isinstance(pipeline, LocDict):
                raise SpecError(
                    "pipeline must be a mapping, e.g. {tiles_in_flight: 1} or {}",
                    praw.loc_of("pipeline"),
                )
            _check_keys(pipeline, PIPELINE_KEYS, "pipeline")
            if "tiles_in_flight" in pipeline:
                tiles_in_flight = pipeline["tiles_in_flight"]
                if (
                    isinstance(tiles_in_flight, bool)
                    or not isinstance(tiles_in_flight, int)
                    or (tiles_in_flight < 1)
                ):
                    raise SpecError(
                        "tiles_in_flight must be a positive integer",
                        pipeline.loc_of("tiles_in_flight"),
                    )
        mapper = None
        if "mapper" in praw:
            if len(names) != 1 or pipeline is not None:
                raise SpecError(
                    f"phase '{pname}' with a 'mapper' must schedule exactly one (GEMM) Einsum "
                    "and no pipeline",
                    praw.loc_of("mapper"),
                )
            mapper = parse_mapper(praw["mapper"], praw.loc_of("mapper"))
        split = _names(praw.get("split", []), praw.loc_of("split"), "split")
        if split and (tuple(loops[: len(split)]) != tuple(split) or mapper is not None):
            raise SpecError(
                f"split of phase '{pname}' must name its outermost loops, in order "
                f"(loops: {', '.join(loops) or 'none'})",
                praw.loc_of("split"),
            )
        phases.append(
            Phase(
                pname,
                loops,
                tuple(maps),
                tuple(placements.values()),
                sched,
                ploc,
                pipeline is not None,
                tiles_in_flight,
                mapper,
                tuple(split),
            )
        )
    if cascade_names is not None:
        _check_phase_order(phases, cascade_names)
    unscheduled = [e for e in einsum_names if e not in scheduled]
    if unscheduled:
        raise SpecError(
            f"Einsum(s) {', '.join(unscheduled)} appear in no phase's schedule",
            body.loc_of("phases"),
        )
    published = body.get("published") or LocDict()
    _check_keys(published, ("unpriced",), "published")
    unpriced = _names(
        published.get("unpriced", []), published.loc_of("unpriced"), "published.unpriced"
    )
    padded = _check_components(
        _names(body.get("padded", []), body.loc_of("padded"), "padded"),
        known,
        body.loc_of("padded"),
        "padded",
    )
    shapes = mapping_shapes(spec, workload_fields)
    batch, heads = mapping_instances(spec, workload_fields)
    if cascade_names is not None:
        raw_shapes = body.get("shapes") or LocDict()
        for rank in shapes:
            if rank not in cascade_names.components:
                raise SpecError(
                    f"shapes: '{rank}' is no rank of the cascade "
                    f"(ranks and components: {', '.join(sorted(cascade_names.components))})",
                    raw_shapes.key_locs[rank],
                )
    return Mapping(
        batch=batch,
        heads=heads,
        shapes=tuple(shapes.items()),
        padded=padded,
        unpriced=unpriced,
        name=spec.name,
        label=spec.label,
        description=str(body.get("description", "")),
        path=spec.path,
        cascade=spec.cascade,
        architecture=spec.architecture,
        factors=factors,
        partitions=partitions,
        binding=tuple(binding.items()),
        chaining=tuple(chaining),
        phases=tuple(phases),
        dataflow=tuple(row.items()) if row else (),
        factor_locs=factor_locs,
        notes=notes,
        binding_locs=tuple(binding_locs.items()),
    )
