"""Architecture specs: a Timeloop v0.4 tree of containers and components -> `Architecture`.

The tree is read the way Timeloop reads it: a `nodes:` list is a hierarchy (each node sits
inside the containers before it), `!Parallel` holds sibling sub-trees, and a container's
`spatial: {meshX, meshY}` replicates everything below it. From the tree the loader takes:

* DRAM (class `DRAM`): access width, and `bandwidth_bytes_per_s`;
* the global buffer (the `*SRAM*`/`*buffer*` storage outside every spatial container);
* each PE array: a spatial container whose sub-tree holds a compute component with an
  `operations` table (cycles per operation, functional unit, Accelergy actions -- or, for an
  operation the PE computes from its others, `via:` those operations), and the registers
  (storage) of one PE;
* the clock (`frequency_hz` or Timeloop's `global_cycle_seconds`) and value width.

Attribute values may be arithmetic expressions over the file's top-level `variables:` and
the node's own attributes (`depth: 16 * 1024`), evaluated by the restricted evaluator.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.spec import expr
from simulator.spec.yamlio import LocDict, LocList, LocStr
from simulator.support.errors import Loc, SpecError
from simulator.support.hashing import HashedOnce

_MISSING = object()  # not looked up yet

TEXT_SUFFIXES = ("_table", "_file", "_path")
TEXT_KEYS = ("type", "technology", "class", "subclass")
NODE_KEYS = (
    "name",
    "class",
    "subclass",
    "attributes",
    "spatial",
    "nodes",
    "required_actions",
    "area_share",
    "constraints",
    "enabled",
)


@dataclass(frozen=True)
class OpCost:
    """One operation a PE executes: cycles it occupies `unit`, and the actions it triggers.

    A composite operation (built `via` others) takes the sum of its steps' cycles, one
    after another on the PE, and their actions; `unit` is the unit its steps occupy longest
    and `occupancy` the cycles of each unit its steps use (empty for a primitive: all of
    `cycles` on `unit`)."""

    name: str
    cycles: float
    unit: str
    actions: tuple[tuple[str, float], ...]  # (action component, count) per operation
    occupancy: tuple[tuple[str, float], ...] = ()

    def unit_cycles(self) -> tuple[tuple[str, float], ...]:
        """Cycles the operation occupies each functional unit it uses."""
        return self.occupancy or ((self.unit, self.cycles),)


@dataclass(frozen=True)
class Composite:
    """An operation a PE computes as a sequence of its other operations, written
    `tanh: {via: {add: 3, exp: 1, divide: 1}}` in the operation table: its cost is derived
    from theirs (:meth:`Array.op`), so it prices nothing the tables do not already price,
    and it follows them when a precision change rescales the primitive operations."""

    name: str
    parts: tuple[tuple[str, float], ...]  # (operation, count)


@dataclass(frozen=True)
class Precision:
    """A value format an array's PEs take: bits per value, and cycles per MAC (relative to
    the `operations` table, which is written for the architecture's own datawidth)."""

    name: str
    bits: int
    mac_cycles: float


@dataclass(frozen=True)
class Array(HashedOnce):
    __hash__ = HashedOnce.__hash__  # kept per object: a cache key on every candidate

    name: str
    mesh_x: int
    mesh_y: int
    register_words: int
    operations: tuple[OpCost, ...]
    compute_component: str = ""
    register_component: str = ""
    # Timing of the array's interconnect, used by the cycle engine (cycles). `None` means the
    # default: a spatial reduction down a column takes meshY cycles (a chain), a broadcast
    # from the 1D array into a column takes 1 (a bus), and operands enter skewed by one
    # cycle per row and column.
    reduction_latency: int | None = None
    broadcast_latency: int | None = None
    operand_latches: int = 2  # registers that hold the operands streaming through a PE
    precisions: tuple[Precision, ...] = ()  # value formats its PEs take (compute attribute)
    # Units built from multipliers (a MAC, an exponential's polynomial, a divider's
    # iterations): at another precision their cycles scale as the MAC's; adders and
    # comparators keep theirs (compute attribute `multiplier_units`; default: the MAC's unit).
    multiplier_units: tuple[str, ...] = ()
    # Operations computed from the others (`via:`), kept apart from the primitive ones: what
    # reads `operations` (the units a PE has, their precision scaling) sees the units.
    composites: tuple[Composite, ...] = ()
    # The array's own clock where its container declares one (`frequency_hz`): a datasheet
    # quotes each unit's rate at the clock that unit runs at (the H100's tensor rate at
    # 1.83 GHz, its FP32 and special-function rates at the 1.98 GHz boost). Its operations'
    # `cycles` are then counted in the system clock's cycles (x system clock / own clock),
    # so every engine keeps one clock. None: the system clock.
    frequency_hz: float | None = None

    def precision(self, name: str) -> Precision | None:
        return next((p for p in self.precisions if p.name == name), None)

    @property
    def skew(self) -> int:
        """Cycles between the first and the last PE starting a wavefront."""
        return (self.mesh_x - 1) + (self.mesh_y - 1)

    @property
    def reduce_cycles(self) -> int:
        return self.mesh_y if self.reduction_latency is None else self.reduction_latency

    @property
    def broadcast_cycles(self) -> int:
        return 1 if self.broadcast_latency is None else self.broadcast_latency

    @property
    def pes(self) -> int:
        return self.mesh_x * self.mesh_y

    @property
    def chains(self) -> bool:
        """Its operations use distinct functional units (a multiply shares the MAC's), so a
        mapping may chain them (`chaining: pipelined`): one point per cycle through each."""
        units = [op.unit for op in self.operations if op.name != "mul"]
        return len(units) == len(set(units))

    def op(self, kind: str) -> OpCost | None:
        """What one `kind` operation costs on a PE (None: its PEs do not declare it); kept
        per array (planning asks for the same few thousands of times)."""
        found = self._ops.get(kind, _MISSING)
        if found is _MISSING:
            found = self._ops[kind] = self._op(kind)
        return found

    @functools.cached_property
    def _ops(self) -> dict[str, OpCost | None]:
        return {}

    def _op(self, kind: str) -> OpCost | None:
        for op in self.operations:
            if op.name == kind:
                return op
        recipe = next((c for c in self.composites if c.name == kind), None)
        return None if recipe is None else self._compose(recipe)

    def _compose(self, recipe: Composite) -> OpCost:
        """A composite's cost from its parts (declared and acyclic: checked on load)."""
        cycles = 0.0
        actions: dict[str, float] = {}
        occupancy: dict[str, float] = {}
        for part, count in recipe.parts:
            op = self.op(part)
            assert op is not None, part
            cycles += count * op.cycles
            for unit, n in op.actions:
                actions[unit] = actions.get(unit, 0.0) + count * n
            for unit, c in op.unit_cycles():
                occupancy[unit] = occupancy.get(unit, 0.0) + count * c
        unit = max(occupancy, key=occupancy.__getitem__)
        return OpCost(recipe.name, cycles, unit, tuple(actions.items()), tuple(occupancy.items()))

    @property
    def operation_names(self) -> tuple[str, ...]:
        """Every operation its PEs declare: the primitive ones, then the composites."""
        return tuple(o.name for o in self.operations) + tuple(c.name for c in self.composites)


@dataclass(frozen=True)
class Memory:
    name: str
    klass: str
    width_bits: int  # bits per access
    depth: int  # rows (0 for DRAM: unbounded)
    datawidth_bits: int
    bandwidth_bytes_per_s: float = 0.0
    # Port bandwidths in values per cycle, as Timeloop's `read_bandwidth`, `write_bandwidth`
    # and `shared_bandwidth` (reads and writes on one port); None: unlimited (Timeloop's
    # default). The global buffer's throttle the phases it feeds.
    read_bandwidth: float | None = None
    write_bandwidth: float | None = None
    shared_bandwidth: float | None = None
    # A hardware cache shared by a fan-out of cores (`cache: true`: a GPU's L2), not a
    # scratchpad: the cores of a wave that read the same data fetch it from DRAM once
    # (simulator.plan.waves). Tiles a mapping keeps in it still count against its capacity.
    cache: bool = False
    # DRAM: the latency of a load (seconds), paid once per phase before its stream flows;
    # a measured number (simulator.spec.ceilings), 0 unless a measured file gives it
    latency_s: float = 0.0

    @property
    def capacity_bytes(self) -> int:
        return self.depth * self.width_bits // 8

    @property
    def values_per_access(self) -> int:
        return max(1, self.width_bits // self.datawidth_bits)


@dataclass(frozen=True)
class Architecture(HashedOnce):
    __hash__ = HashedOnce.__hash__  # kept per object: a cache key on every candidate

    name: str
    path: str
    frequency_hz: float
    datawidth_bits: int
    dram: Memory
    buffer: Memory
    arrays: tuple[Array, ...]
    technology: str = ""
    components: tuple[tuple[str, str, int], ...] = field(default=())  # (name, class, instances)
    energy_table: str | None = None  # path of the ERT
    area_table: str | None = None  # path of the ART
    published_energy_table: str | None = None  # the tables the FuseMax artifact's numbers used
    published_area_table: str | None = None
    precision: str = ""  # the value format in use (`precision:` of the top container)
    # A spatial container above every PE array replicates a core (an SM of a GPU, a tile of
    # a multi-core accelerator): `cores` copies of the arrays, each with the storage the
    # container holds beside them (`core_memory`, e.g. shared memory), sharing the global
    # buffer (an L2) and DRAM. 1: no such container (FuseMax, FLAT).
    cores: int = 1
    core_memory: Memory | None = None
    # Where each table is named in the file (`energy_table` -> its line): a table that is
    # not there is reported at the line that names it (a copied file loses its relative
    # tables). Not part of the design: no comparison or repr sees it.
    table_locs: tuple[tuple[str, Loc], ...] = field(default=(), compare=False, repr=False)

    def table_loc(self, key: str) -> Loc:
        """The line naming table `key` (`energy_table`, ...), else the file."""
        return dict(self.table_locs).get(key, Loc(self.path))

    # A kernel's fixed cost (seconds): each phase -- a kernel on a GPU -- pays it once, with
    # one DRAM latency (`phase_fixed_s`); measured (simulator.spec.ceilings), else 0
    launch_s: float = 0.0

    @property
    def phase_fixed_s(self) -> float:
        """What every phase takes beside its work: a launch and one DRAM latency."""
        return self.launch_s + self.dram.latency_s

    def component_attributes(self) -> dict[str, dict[str, float]]:
        """Attributes table expressions may use, per priced component."""
        out: dict[str, dict[str, float]] = {
            self.dram.name: {"width": self.dram.width_bits, "datawidth": self.dram.datawidth_bits},
            self.buffer.name: {
                "depth": self.buffer.depth,
                "width": self.buffer.width_bits,
                "datawidth": self.buffer.datawidth_bits,
            },
        }
        for a in self.arrays:
            if a.register_component:
                out[a.register_component] = {
                    "depth": a.register_words,
                    "width": self.datawidth_bits,
                    "datawidth": self.datawidth_bits,
                }
            for op in a.operations:  # functional units: the width of the values they take
                for unit, _count in op.actions:
                    out.setdefault(f"{a.name}.{unit}", {"datawidth": self.datawidth_bits})
        return out

    def priced_components(self) -> dict[str, int]:
        """Every component the energy and area models price, with its instance count."""
        out = {self.dram.name: 1, self.buffer.name: 1}
        for a in self.arrays:
            if a.register_component:
                out[a.register_component] = a.pes
            for op in a.operations:
                for unit, _count in op.actions:
                    out[f"{a.name}.{unit}"] = a.pes
        return out

    def required_actions(self) -> dict[str, tuple[str, ...]]:
        """What the energy model prices of each component: a table lacking one of these
        would price it at 0 without a word (leakage included: 0 must be written)."""
        storage = ("read", "write", "update", "leak")
        out: dict[str, tuple[str, ...]] = {self.dram.name: storage, self.buffer.name: storage}
        for a in self.arrays:
            if a.register_component:
                out[a.register_component] = storage
            for op in a.operations:
                for unit, _count in op.actions:
                    out[f"{a.name}.{unit}"] = ("compute", "leak")
        return out

    @property
    def value_bytes(self) -> float:
        return self.datawidth_bits / 8

    @property
    def buffer_values(self) -> int:
        return int(self.buffer.capacity_bytes // self.value_bytes)

    def array(self, name: str) -> Array:
        for a in self.arrays:
            if a.name == name:
                return a
        raise KeyError(name)

    def parameters(self) -> dict[str, float]:
        """Names usable in mapping expressions (`PE2D.meshX`, `global_buffer.capacity_bytes`)."""
        out: dict[str, float] = {
            "frequency_hz": self.frequency_hz,
            "datawidth": self.datawidth_bits,
            f"{self.buffer.name}.capacity_bytes": self.buffer.capacity_bytes,
            f"{self.buffer.name}.capacity_values": self.buffer_values,
            f"{self.dram.name}.bandwidth_bytes_per_s": self.dram.bandwidth_bytes_per_s,
            "cores": self.cores,
        }
        if self.core_memory is not None:
            out[f"{self.core_memory.name}.capacity_bytes"] = self.core_memory.capacity_bytes
        for a in self.arrays:
            out[f"{a.name}.meshX"] = a.mesh_x
            out[f"{a.name}.meshY"] = a.mesh_y
            out[f"{a.name}.pes"] = a.pes
            out[f"{a.name}.registers"] = a.register_words
        return out

    def with_precision(self, name: str | None = None, bits: int | None = None) -> Architecture:
        """The same chip computing on another value format: `name` (fp32, bf16, fp8, ...) or
        the format of `bits` bits, which every PE array must list under `precisions` (its
        MAC cost). Values take its bytes in DRAM, the buffer (same bytes: its value capacity
        follows) and the register files (same bits: fewer or more words); operations on the
        MAC unit take its MAC cycles; energies follow the tables' `datawidth` expressions."""
        if name is None and bits is None:
            return self
        if not self.arrays or any(not a.precisions for a in self.arrays):
            raise SpecError(
                f"architecture '{self.name}' lists no precisions (a compute component's "
                "`precisions:`): it takes its own datawidth only",
                Loc(self.path),
            )
        chosen = []
        for a in self.arrays:
            if name is not None:
                p = a.precision(name)
                wanted = f"precision '{name}'"
            else:
                p = next((q for q in a.precisions if q.bits == bits), None)
                wanted = f"{bits}-bit values"
            if p is None:
                listed = ", ".join(f"{q.name} ({q.bits} bits)" for q in a.precisions)
                raise SpecError(
                    f"architecture '{self.name}' gives no MAC cost for {wanted} on array "
                    f"'{a.name}' (it lists {listed})",
                    Loc(self.path),
                )
            chosen.append(p)
        bits = chosen[0].bits
        if any(p.bits != bits for p in chosen):
            raise SpecError(f"precision '{name}' has different widths on the arrays")
        if chosen[0].name == self.precision:
            return self

        def convert(a: Array, p: Precision) -> Array:
            base = a.precision(self.precision) if self.precision else None
            scale = p.mac_cycles / (base.mac_cycles if base else 1.0)
            mac = a.op("mac")
            units = a.multiplier_units or ((mac.unit if mac else "mac"),)
            ops = tuple(
                dataclasses.replace(op, cycles=op.cycles * scale) if op.unit in units else op
                for op in a.operations
            )
            words = a.register_words * self.datawidth_bits // bits
            return dataclasses.replace(a, operations=ops, register_words=max(1, words))

        return dataclasses.replace(
            self,
            datawidth_bits=bits,
            dram=dataclasses.replace(self.dram, datawidth_bits=bits),
            buffer=dataclasses.replace(self.buffer, datawidth_bits=bits),
            arrays=tuple(convert(a, p) for a, p in zip(self.arrays, chosen, strict=True)),
            precision=chosen[0].name,
        )

    def with_overrides(
        self,
        pe_dim: int | None = None,
        buffer_bytes: int | None = None,
        bandwidth_bytes_per_s: float | None = None,
        *,
        pe_dim_1d: int | None = None,
        register_words_2d: int | None = None,
        register_words_1d: int | None = None,
    ) -> Architecture:
        """The same design with a resized PE array (2D: pe_dim^2, 1D: pe_dim; `pe_dim_1d`
        then sets the 1D arrays' width alone), register files (words per PE), buffer or
        DRAM. None keeps the file's value."""
        arch = self

        def resize(a: Array) -> Array:
            two_d = a.mesh_y > 1
            if pe_dim is not None:
                a = dataclasses.replace(a, mesh_x=pe_dim, mesh_y=pe_dim if two_d else 1)
            if pe_dim_1d is not None and not two_d:
                a = dataclasses.replace(a, mesh_x=pe_dim_1d)
            words = register_words_2d if two_d else register_words_1d
            if words is not None:
                a = dataclasses.replace(a, register_words=words)
            return a

        for name, value in (
            ("pe_dim", pe_dim),
            ("pe_dim_1d", pe_dim_1d),
            ("register_words_2d", register_words_2d),
            ("register_words_1d", register_words_1d),
        ):
            if value is not None and value <= 0:
                raise SpecError(f"{name} must be positive, got {value}")
        if pe_dim is not None and pe_dim < 2 and any(a.mesh_y > 1 for a in self.arrays):
            raise SpecError(f"pe_dim must be at least 2 (a {pe_dim} x {pe_dim} array is not 2D)")
        arch = dataclasses.replace(arch, arrays=tuple(resize(a) for a in arch.arrays))
        if buffer_bytes is not None:
            row_bytes = arch.buffer.width_bits // 8
            if buffer_bytes % row_bytes:
                raise SpecError(
                    f"--buffer-bytes {buffer_bytes} is not a multiple of the buffer "
                    f"row ({row_bytes} bytes)"
                )
            arch = dataclasses.replace(
                arch, buffer=dataclasses.replace(arch.buffer, depth=buffer_bytes // row_bytes)
            )
        if bandwidth_bytes_per_s is not None:
            arch = dataclasses.replace(
                arch,
                dram=dataclasses.replace(
                    arch.dram, bandwidth_bytes_per_s=float(bandwidth_bytes_per_s)
                ),
            )
        return arch


def declare_hint(kind: str, pronoun: str = "it") -> str:
    """The spec key that declares an operation, for a one-line error about an operation no
    array has: the author sees what to write and where."""
    return (
        f"declare {pronoun} in the `operations:` of a PE array's compute component, e.g. "
        f"`{kind}: {{cycles: C, unit: U, actions: {{U: N}}}}`, or `{kind}: {{via: {{OP: N}}}}` "
        "built from the PE's other operations"
    )


def undeclared(kinds: Sequence[str], arrays: Sequence[Array]) -> list[str]:
    """The operation kinds (of an Einsum) that no array's PEs declare, in the given order."""
    return [k for k in kinds if all(a.op(k) is None for a in arrays)]


def missing_operations(kinds: Sequence[str], arrays: Sequence[Array]) -> str | None:
    """Why an Einsum needing `kinds` can run on no array, in words for a one-line error
    (`it needs tanh, which no PE array declares: declare it ...`); None when every kind is
    declared by some array (which one runs it is the binder's choice)."""
    missing = undeclared(kinds, arrays)
    if not missing:
        return None
    pronoun = "it" if len(missing) == 1 else "each"
    return (
        f"it needs {', '.join(missing)}, which no PE array declares: "
        f"{declare_hint(missing[0], pronoun)}"
    )


def precision_change(before: Architecture, after: Architecture) -> str:
    """What a change of value format changes in a design, in one line."""
    if before.precision == after.precision and before.datawidth_bits == after.datawidth_bits:
        return f"precision {after.precision or after.datawidth_bits}: unchanged"
    parts = [
        f"precision {after.precision} ({after.datawidth_bits}-bit values) instead of "
        f"{before.precision or 'the default'} ({before.datawidth_bits}-bit)",
        f"{after.value_bytes:g} bytes per value in DRAM and the buffer (which holds "
        f"{after.buffer_values:,} values of its {after.buffer.capacity_bytes:,} bytes)",
    ]
    for a, b in zip(before.arrays, after.arrays, strict=True):
        mac_a, mac_b = a.op("mac"), b.op("mac")
        cycles = f", a MAC {mac_b.cycles:g} cycle(s)" if mac_a and mac_b else ""
        parts.append(f"{b.name}: {b.register_words} register words per PE{cycles}")
    parts.append("energies at the new width (the tables' datawidth expressions)")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------


@dataclass
class _Node:
    tag: str
    name: str
    klass: str
    attrs: dict[str, Any]
    mesh: tuple[int, int]
    loc: Loc
    spatial_path: tuple[str, ...]  # enclosing spatial containers, outermost first
    instances: int


def build_architecture(data: Any, source: str) -> Architecture:
    top = Loc(source, 1, 1)
    if not isinstance(data, LocDict) or "architecture" not in data:
        raise SpecError("an architecture file must have a top-level 'architecture:' key", top)
    for key in data:
        if key not in ("architecture", "variables"):
            raise SpecError(
                f"unknown top-level key '{key}' (allowed: architecture, variables)",
                data.key_locs[key],
            )
    variables = _variables(data.get("variables"), data.loc_of("variables"))
    spec = data["architecture"]
    if not isinstance(spec, LocDict):
        raise SpecError(
            "'architecture:' must be a mapping with 'nodes:'", data.loc_of("architecture")
        )
    for key in spec:
        if key not in ("version", "nodes", "subtree", "local"):
            raise SpecError(
                f"unknown key '{key}' in architecture (allowed: version, nodes)", spec.key_locs[key]
            )
    version = spec.get("version")
    if version is not None and str(version) not in ("0.4", "0.4.0"):
        raise SpecError(
            f"architecture version {version} is not supported (use 0.4)", spec.loc_of("version")
        )
    if "nodes" not in spec:
        raise SpecError("architecture has no 'nodes:' list", spec.loc)
    nodes: list[_Node] = []
    _walk(spec["nodes"], spec.loc_of("nodes"), variables, (), 1, nodes)
    return _assemble(nodes, Path(source).stem, source, top)


def _variables(raw: Any, loc: Loc) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, LocDict):
        raise SpecError("'variables:' must map names to numbers or expressions", loc)
    out: dict[str, float] = {}
    for key, value in raw.items():
        if isinstance(value, str) and not expr.is_arithmetic(value):
            continue  # strings such as technology names are not arithmetic variables
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            out[str(key)] = expr.evaluate(value, out, raw.loc_of(key))
    return out


def _attributes(raw: Any, loc: Loc, variables: dict[str, float]) -> dict[str, Any]:
    """Evaluate a node's attributes: arithmetic text is evaluated (attributes may refer to
    each other and to `variables:`), other text (`LPDDR4`, `45nm`) stays a string."""
    if raw is None:
        return {}
    if not isinstance(raw, LocDict):
        raise SpecError("'attributes' must be a mapping", loc)
    ctx = dict(variables)
    out: dict[str, Any] = {}
    pending: dict[str, str] = {}
    for key, value in raw.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = ctx[key] = expr.evaluate(value, {}, raw.loc_of(key))  # bounded
        elif str(key).endswith(TEXT_SUFFIXES) or key in TEXT_KEYS:
            # file names and kinds are text, never arithmetic (a table's name keeps where
            # it is written: a missing table is reported there)
            keep = isinstance(value, LocStr) and str(key).endswith("_table")
            out[key] = value if keep else str(value)
        elif isinstance(value, str) and expr.is_arithmetic(value):
            pending[key] = value
        else:
            out[key] = value
    while pending:
        progressed = False
        for key, text in list(pending.items()):
            names = expr.names_in(text)
            if any(n in pending and n != key for n in names):
                continue
            if all(n in ctx for n in names):
                out[key] = ctx[key] = expr.evaluate(text, ctx, raw.loc_of(key))
            elif text.strip().isidentifier():
                out[key] = text  # a bare word such as a memory type
            else:
                expr.evaluate(text, ctx, raw.loc_of(key))  # raises, naming the unknown name
            del pending[key]
            progressed = True
        if not progressed:
            key = next(iter(pending))
            raise SpecError(f"attribute '{key}' depends on itself", raw.loc_of(key))
    return out


def _walk(
    raw: Any,
    loc: Loc,
    variables: dict[str, float],
    path: tuple[str, ...],
    instances: int,
    out: list[_Node],
) -> tuple[tuple[str, ...], int]:
    """Walk a hierarchical `nodes:` list; returns the spatial path/instances after it."""
    if not isinstance(raw, LocList):
        raise SpecError("'nodes:' must be a list of !Container / !Component / !Parallel", loc)
    for i, node in enumerate(raw):
        nloc = raw.loc_of(i)
        if not isinstance(node, LocDict) or getattr(node, "tag", None) is None:
            raise SpecError(
                "each node must be tagged !Container, !Component, !Parallel or !Hierarchical", nloc
            )
        for key in node:
            if key not in NODE_KEYS:
                raise SpecError(
                    f"unknown key '{key}' in !{node.tag} (allowed: {', '.join(NODE_KEYS)})",
                    node.key_locs[key],
                )
        if node.tag in ("Parallel", "Hierarchical"):
            if "nodes" not in node:
                raise SpecError(f"!{node.tag} needs 'nodes:'", nloc)
            if node.tag == "Hierarchical":
                path, instances = _walk(
                    node["nodes"], node.loc_of("nodes"), variables, path, instances, out
                )
            else:
                children = node["nodes"]
                if not isinstance(children, LocList):
                    raise SpecError("!Parallel 'nodes:' must be a list", node.loc_of("nodes"))
                for j, child in enumerate(children):
                    sub = LocList([child])
                    sub.loc, sub.item_locs = children.loc, [children.loc_of(j)]
                    if isinstance(child, LocDict) and child.tag == "Hierarchical":
                        if "nodes" not in child:
                            raise SpecError("!Hierarchical needs 'nodes:'", children.loc_of(j))
                        _walk(
                            child["nodes"], child.loc_of("nodes"), variables, path, instances, out
                        )
                    else:
                        _walk(sub, children.loc, variables, path, instances, out)
            continue
        name = node.get("name")
        if not isinstance(name, str) or not name:
            raise SpecError(f"!{node.tag} needs a 'name'", nloc)
        attrs = _attributes(node.get("attributes"), node.loc_of("attributes"), variables)
        mesh = (1, 1)
        if "spatial" in node:
            spatial = node["spatial"]
            if not isinstance(spatial, LocDict):
                raise SpecError("'spatial' must be {meshX: N, meshY: M}", node.loc_of("spatial"))
            for key in spatial:
                if key not in ("meshX", "meshY"):
                    raise SpecError(
                        f"unknown key '{key}' in spatial (allowed: meshX, meshY)",
                        spatial.key_locs[key],
                    )
            mx = expr.as_int(
                expr.evaluate(spatial.get("meshX", 1), variables, spatial.loc_of("meshX")),
                "meshX",
                spatial.loc,
            )
            my = expr.as_int(
                expr.evaluate(spatial.get("meshY", 1), variables, spatial.loc_of("meshY")),
                "meshY",
                spatial.loc,
            )
            if mx <= 0 or my <= 0:
                raise SpecError("meshX and meshY must be positive", node.loc_of("spatial"))
            mesh = (mx, my)
        klass = str(node.get("class", "")) if node.tag == "Component" else ""
        if node.tag == "Component" and not klass:
            raise SpecError(f"component '{name}' needs a 'class'", nloc)
        if node.tag == "Container" and (mesh != (1, 1) or "spatial" in node):
            path = path + (name,)
            instances *= mesh[0] * mesh[1]
        out.append(_Node(node.tag, name, klass, attrs, mesh, nloc, path, instances))
    return path, instances


PORT_BANDWIDTHS = ("read_bandwidth", "write_bandwidth", "shared_bandwidth")


def _bandwidth_attr(node: _Node, key: str) -> float:
    value = node.attrs[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise SpecError(
            f"{node.name}: '{key}' must be a positive number of values per cycle, got {value!r}",
            node.loc,
        )
    return float(value)


def _bool_attr(node: _Node, key: str) -> bool:
    value = node.attrs.get(key, False)
    if not isinstance(value, bool):
        raise SpecError(
            f"attribute '{key}' of '{node.name}' must be true or false, got {value!r}", node.loc
        )
    return value


def _positive_attr(node: _Node, key: str) -> float:
    """A positive, finite number (a clock, a bandwidth)."""
    value = node.attrs[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(
            f"attribute '{key}' of '{node.name}' must be a number, got {value!r}", node.loc
        )
    if not (0 < value < math.inf):
        raise SpecError(
            f"attribute '{key}' of '{node.name}' must be positive and finite, got {value}", node.loc
        )
    return float(value)


def _int_attr(node: _Node, key: str, default: int | None = None) -> int:
    value = node.attrs.get(key, default)
    if value is None:
        raise SpecError(f"component '{node.name}' needs attribute '{key}'", node.loc)
    if isinstance(value, str) or isinstance(value, bool):
        raise SpecError(
            f"attribute '{key}' of '{node.name}' must be a number, got {value!r}", node.loc
        )
    result = expr.as_int(value, f"attribute '{key}' of '{node.name}'", node.loc)
    if result <= 0:
        raise SpecError(f"attribute '{key}' of '{node.name}' must be positive", node.loc)
    return result


def _operations(node: _Node) -> tuple[tuple[OpCost, ...], tuple[Composite, ...]]:
    """A compute component's `operations:` table: the primitive operations (cycles, unit,
    actions) and the composite ones (`via:` other operations of the same table)."""
    raw = node.attrs.get("operations")
    if not isinstance(raw, LocDict) or not raw:
        raise SpecError(
            f"compute component '{node.name}' needs an 'operations' table "
            "(e.g. mac: {cycles: 1, unit: mac})",
            node.loc,
        )
    ops: list[OpCost] = []
    composites: list[Composite] = []
    via_locs: dict[str, tuple[LocDict, Loc]] = {}  # where each composite's parts are written
    for kind, entry in raw.items():
        eloc = raw.loc_of(kind)
        if not isinstance(entry, LocDict):
            raise SpecError(
                f"operation '{kind}' of '{node.name}' must be a mapping like "
                "{cycles: 1, unit: mac} or {via: {exp: 1, add: 1}}",
                eloc,
            )
        if "via" in entry:
            composites.append(_composite(node, str(kind), entry))
            via_locs[str(kind)] = (entry["via"], eloc)
            continue
        for key in entry:
            if key not in ("cycles", "unit", "actions"):
                raise SpecError(
                    f"unknown key '{key}' in operation '{kind}' "
                    "(allowed: cycles, unit, actions; or via alone)",
                    entry.key_locs[key],
                )
        cycles = expr.evaluate(entry.get("cycles", 1), {}, entry.loc_of("cycles"))
        if cycles <= 0:
            raise SpecError(
                f"operation '{kind}' of '{node.name}' must take positive cycles",
                entry.loc_of("cycles"),
            )
        unit = str(entry.get("unit", kind))
        actions_raw = entry.get("actions")
        if actions_raw is None:
            actions: tuple[tuple[str, float], ...] = ((unit, 1.0),)
        elif isinstance(actions_raw, LocDict):
            actions = tuple(
                (str(k), float(expr.evaluate(v, {}, actions_raw.loc_of(k))))
                for k, v in actions_raw.items()
            )
        else:
            raise SpecError(
                f"'actions' of operation '{kind}' must map components to counts",
                entry.loc_of("actions"),
            )
        ops.append(OpCost(str(kind), float(cycles), unit, actions))
    _check_composites(node, via_locs, {o.name for o in ops}, composites)
    return tuple(ops), tuple(composites)


def _composite(node: _Node, kind: str, entry: LocDict) -> Composite:
    """`tanh: {via: {add: 3, exp: 1, divide: 1}}`: the operations (and how many of each)
    a PE runs one after another to compute `kind`."""
    extra = [k for k in entry if k != "via"]
    if extra:
        raise SpecError(
            f"operation '{kind}' of '{node.name}' is built 'via' other operations, which "
            f"give its cycles, unit and actions: remove '{extra[0]}'",
            entry.key_locs[extra[0]],
        )
    parts_raw = entry["via"]
    if not isinstance(parts_raw, LocDict) or not parts_raw:
        raise SpecError(
            f"'via' of operation '{kind}' must map operations of '{node.name}' to counts, "
            "e.g. {exp: 1, add: 1, divide: 1}",
            entry.loc_of("via"),
        )
    parts = []
    for part, count_raw in parts_raw.items():
        loc = parts_raw.loc_of(part)
        count = float(expr.evaluate(count_raw, {}, loc))
        if not count > 0:
            raise SpecError(
                f"operation '{kind}' of '{node.name}' needs a positive count of '{part}'", loc
            )
        parts.append((str(part), count))
    return Composite(kind, tuple(parts))


def _check_composites(
    node: _Node,
    via_locs: dict[str, tuple[LocDict, Loc]],
    primitive: set[str],
    composites: list[Composite],
) -> None:
    """Every part of a composite is an operation of the same table, and no composite is
    built from itself (through others): its cost must be a finite sum of priced steps."""
    recipes = {c.name: c for c in composites}
    declared = sorted(primitive | set(recipes))
    for c in composites:
        via, _where = via_locs[c.name]
        for part, _count in c.parts:
            if part not in primitive and part not in recipes:
                raise SpecError(
                    f"operation '{c.name}' of '{node.name}' is built via '{part}', which "
                    f"'{node.name}' does not declare (it declares {', '.join(declared)})",
                    via.key_locs.get(part, via.loc),
                )

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            cycle = " -> ".join(path[path.index(name) :] + (name,))
            raise SpecError(
                f"operation '{name}' of '{node.name}' is built from itself ({cycle})",
                via_locs[name][1],
            )
        for part, _count in recipes[name].parts if name in recipes else ():
            visit(part, path + (name,))

    for c in composites:
        visit(c.name, ())


def _names(node: _Node, key: str) -> tuple[str, ...]:
    """A compute attribute that lists names (`multiplier_units: [mac, exponential]`)."""
    raw = node.attrs.get(key)
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise SpecError(f"'{key}' of '{node.name}' must list unit names", node.loc)
    return tuple(str(v) for v in raw)


def _precisions(node: _Node) -> tuple[Precision, ...]:
    """`precisions: {fp16: {bits: 16, mac_cycles: 1}, ...}` of a compute component."""
    raw = node.attrs.get("precisions")
    if raw is None:
        return ()
    if not isinstance(raw, LocDict) or not raw:
        raise SpecError(
            f"'precisions' of '{node.name}' must map formats to {{bits: N, mac_cycles: C}}",
            node.loc,
        )
    out = []
    for fmt, entry in raw.items():
        loc = raw.loc_of(fmt)
        if not isinstance(entry, LocDict) or set(entry) != {"bits", "mac_cycles"}:
            raise SpecError(
                f"precision '{fmt}' of '{node.name}' needs bits and mac_cycles, e.g. "
                "{bits: 16, mac_cycles: 1}",
                loc,
            )
        bits = expr.as_int(expr.evaluate(entry["bits"], {}, loc), f"bits of '{fmt}'", loc)
        cycles = float(expr.evaluate(entry["mac_cycles"], {}, loc))
        if bits <= 0 or bits % 8 or not cycles > 0:
            raise SpecError(
                f"precision '{fmt}' of '{node.name}': bits must be a positive multiple of 8 "
                "and mac_cycles positive",
                loc,
            )
        out.append(Precision(str(fmt), bits, cycles))
    return tuple(out)


def _assemble(nodes: list[_Node], name: str, source: str, top: Loc) -> Architecture:
    frequency = None
    datawidth = None
    precision = ""
    technology = ""
    tables: dict[str, str | None] = {
        "energy_table": None,
        "area_table": None,
        "published_energy_table": None,
        "published_area_table": None,
    }
    table_locs: dict[str, Loc] = {}
    for node in nodes:
        if node.tag == "Container" and not node.spatial_path:
            if "frequency_hz" in node.attrs:
                frequency = _positive_attr(node, "frequency_hz")
            elif "global_cycle_seconds" in node.attrs:
                frequency = 1.0 / _positive_attr(node, "global_cycle_seconds")
            if "datawidth" in node.attrs:
                datawidth = _int_attr(node, "datawidth")
            precision = str(node.attrs.get("precision", precision))
            technology = str(node.attrs.get("technology", technology))
            for key in tables:
                if key in node.attrs:
                    tables[key] = str(Path(source).parent / str(node.attrs[key]))
                    named = node.attrs[key]
                    table_locs[key] = named.loc if isinstance(named, LocStr) else node.loc
    drams = [n for n in nodes if n.tag == "Component" and n.klass.upper() == "DRAM"]
    if len(drams) != 1:
        raise SpecError(f"expected exactly one DRAM component, found {len(drams)}", top)
    dram_node = drams[0]
    dw = _int_attr(dram_node, "datawidth", datawidth or 16)
    if "bandwidth_bytes_per_s" not in dram_node.attrs:
        raise SpecError("DRAM needs a positive 'bandwidth_bytes_per_s'", dram_node.loc)
    bandwidth = _positive_attr(dram_node, "bandwidth_bytes_per_s")
    dram = Memory(
        dram_node.name, dram_node.klass, _int_attr(dram_node, "width", 64), 0, dw, float(bandwidth)
    )
    buffers = [
        n
        for n in nodes
        if n.tag == "Component"
        and not n.spatial_path
        and n is not dram_node
        and ("sram" in n.klass.lower() or "buffer" in n.klass.lower() or "buffer" in n.name.lower())
    ]
    if len(buffers) != 1:
        raise SpecError(
            f"expected one global buffer (a *SRAM* storage outside the PE arrays), "
            f"found {len(buffers)}",
            top,
        )
    bnode = buffers[0]
    buffer = Memory(
        bnode.name,
        bnode.klass,
        _int_attr(bnode, "width"),
        _int_attr(bnode, "depth"),
        _int_attr(bnode, "datawidth", datawidth or dw),
        **{key: _bandwidth_attr(bnode, key) for key in PORT_BANDWIDTHS if key in bnode.attrs},
        cache=_bool_attr(bnode, "cache"),
    )
    if frequency is None:
        raise SpecError("the top container needs 'frequency_hz' (or 'global_cycle_seconds')", top)
    arrays: list[Array] = []
    computes = [
        n for n in nodes if n.tag == "Component" and n.spatial_path and "operations" in n.attrs
    ]
    core_path, cores, core_memory = _core_fanout(nodes, computes)
    for comp in computes:
        path = comp.spatial_path[len(core_path) :]
        containers = [n for n in nodes if n.tag == "Container" and n.name in path]
        mx = my = 1
        for c in containers:
            mx *= c.mesh[0]
            my *= c.mesh[1]
        regs = [
            n
            for n in nodes
            if n.tag == "Component"
            and n.spatial_path == comp.spatial_path
            and n.klass in ("storage", "regfile", "SRAM")
            or (
                n.tag == "Component"
                and n.spatial_path == comp.spatial_path
                and "depth" in n.attrs
                and n is not comp
            )
        ]
        words = sum(_int_attr(r, "depth") for r in regs)
        top = next(c for c in containers if c.name == path[0])
        timing = {}
        for key in ("reduction_latency", "broadcast_latency", "operand_latches"):
            if key in top.attrs:
                timing[key] = _int_attr(top, key)
        primitive, composite = _operations(comp)
        own_clock = _positive_attr(top, "frequency_hz") if "frequency_hz" in top.attrs else None
        if own_clock is not None:  # its cycles in the system clock's (see Array)
            primitive = tuple(
                dataclasses.replace(o, cycles=o.cycles * frequency / own_clock) for o in primitive
            )
        arrays.append(
            Array(
                path[0],
                mx,
                my,
                words,
                primitive,
                comp.name,
                regs[0].name if regs else "",
                **timing,
                precisions=_precisions(comp),
                multiplier_units=_names(comp, "multiplier_units"),
                composites=composite,
                frequency_hz=own_clock,
            )
        )
    if not arrays:
        raise SpecError(
            "no PE array: a spatial container with a compute component that has "
            "an 'operations' table",
            top,
        )
    names = [a.name for a in arrays]
    if len(set(names)) != len(names):
        raise SpecError(f"PE arrays need distinct names, got {', '.join(names)}", top)
    components = tuple((n.name, n.klass, n.instances) for n in nodes if n.tag == "Component")
    width = datawidth or dw
    if not precision:  # the format of the datawidth the arrays list first
        listed = [p for a in arrays for p in a.precisions if p.bits == width]
        precision = listed[0].name if listed else ""
    for a in arrays:
        p = a.precision(precision) if precision and a.precisions else None
        if a.precisions and (p is None or p.bits != width):
            raise SpecError(
                f"array '{a.name}' lists no precision '{precision}' of {width} bits (the "
                "architecture's datawidth): add it to its `precisions:`",
                top,
            )
    return Architecture(
        name,
        source,
        frequency,
        datawidth or dw,
        dram,
        buffer,
        tuple(arrays),
        technology,
        components,
        tables["energy_table"],
        tables["area_table"],
        tables["published_energy_table"],
        tables["published_area_table"],
        precision,
        cores,
        core_memory,
        tuple(table_locs.items()),
    )


def _core_fanout(
    nodes: list[_Node], computes: list[_Node]
) -> tuple[tuple[str, ...], int, Memory | None]:
    """The spatial containers above every PE array (the core they replicate), how many
    cores they make, and the storage a core holds beside its arrays (at most one)."""
    paths = [c.spatial_path for c in computes]
    if len(paths) < 2:
        return (), 1, None
    prefix: tuple[str, ...] = ()
    for names in zip(*paths, strict=False):
        if len(set(names)) != 1:
            break
        prefix += (names[0],)
    if not prefix or any(len(p) == len(prefix) for p in paths):
        return (), 1, None
    cores = 1
    for n in nodes:
        if n.tag == "Container" and n.name in prefix:
            cores *= n.mesh[0] * n.mesh[1]
    local = [
        n for n in nodes if n.tag == "Component" and n.spatial_path == prefix and "depth" in n.attrs
    ]
    if len(local) > 1:
        raise SpecError(
            f"a core ('{prefix[-1]}') holds one storage beside its arrays, found "
            f"{', '.join(n.name for n in local)}",
            local[1].loc,
        )
    memory = None
    if local:
        m = local[0]
        memory = Memory(
            m.name,
            m.klass,
            _int_attr(m, "width"),
            _int_attr(m, "depth"),
            _int_attr(m, "datawidth", 16),
        )
    return prefix, cores, memory
