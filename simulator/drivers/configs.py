"""Configurations = mapping files: load one with its cascade and architecture, evaluate points.

A configuration is a shipped mapping's name (`binding`), a mapping file, or `auto` -- the
mapping the automatic binder (:mod:`simulator.bind`) writes for the point:
`auto[:STRATEGY[/OPTION...]]` with STRATEGY fused (default: the mapper's unconstrained
search), fusemax, flat or unfused (constraints on it) and options
`sequential` (no pipelining across tiles) and `no-reuse` (no K/V reuse across a group's
query heads). Its cascade is `--cascade`, by default the one that runs the model's own
attention (its K/V heads and mask; the binder's facts name it: one pass for fusemax, the
3-pass softmax for the baselines) and its architecture `--arch` (default: FuseMax's for
fusemax, FLAT's for the baselines).

A model's attention is never quietly replaced: a mapping file whose cascade computes
another attention than the model's (multi-head for a grouped-query model, no mask for a
causal one) hands the point to its `otherwise:` configuration (the paper's files name the
strategy that binds them: `auto:flat` for FLAT), with a note, or is refused in one line.
So does a file with a dataflow table that has no row for the point or was chosen for
another architecture (FLAT's published per-point choices hold for its 32 MB, 256 x 256
design).

Pipeline: above the orchestrator. Names and paths -> specs -> a resolved mapping ->
:func:`simulator.core.evaluate.evaluate_mapping`.

`python -m simulator.run` and the experiments go through :class:`Specs`, which reads each
file once (the same cascade serves several mappings) and keeps nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from simulator.cascade.ir import Cascade
from simulator.cascade.normal import mapping_view
from simulator.cascade.parse import load_cascade
from simulator.cascade.recompute import recomputed
from simulator.cascade.references import attention_kind
from simulator.core.evaluate import check_floor, evaluate_mapping_variants
from simulator.core.floors import attention_floor
from simulator.core.result import Result
from simulator.mapper.resolve import resolved, workload_fields
from simulator.mapper.search import DEFAULT_SEARCH_S, Found, SearchOptions, search
from simulator.mapper.space import needs_padding
from simulator.plan.extents import example_shape_notes
from simulator.spec.arch import Architecture
from simulator.spec.arch_file import load_architecture
from simulator.spec.ceilings import Ceilings
from simulator.spec.linear import LinearSpec, load_linear
from simulator.spec.mapping import (
    ALIASES,
    STANDARD,
    Mapping,
    MappingSpec,
    has_row,
    load_mapping,
)
from simulator.spec.tables import (
    AreaTable,
    EnergyTable,
    check_tables,
    load_area_table,
    load_energy_table,
)
from simulator.spec.workload import (
    FIELDS,
    FLAGS,
    OPTIONAL,
    Workload,
    make_workload,
    parse_shape,
    settle_shape,
)
from simulator.strategies.auto import DEFAULT_ARCH, STRATEGIES
from simulator.strategies.binder_facts import load_facts
from simulator.strategies.context import bind_context
from simulator.support.errors import BoundBreach, CannotSimulate, SimulationLimit, SpecError
from simulator.support.paths import data_dir, is_file, resolve_spec
from simulator.timing.options import UNLIMITED, TimingOptions

T = TypeVar("T")

AUTO_OPTIONS = ("sequential", "no-reuse")


def model_cascade(strategy: str, workload: Workload) -> str:
    """The cascade that runs the workload's own attention under a strategy (the binder's
    facts: by K/V heads and mask)."""
    return load_facts().attention_cascade(strategy, workload.grouped, workload.mask)


def runs_model_attention(cascade: Cascade, workload: Workload) -> bool:
    """Does an attention cascade compute the workload's attention? Its mask must be the
    model's, and a multi-head cascade cannot run grouped K/V heads (it would read K and V
    once per query head); a grouped one runs multi-head with groups of 1. A cascade that
    claims no attention (no `reference:`) is the user's business: True."""
    kind = attention_kind(cascade)
    if kind is None:
        return True
    grouped, mask = kind
    wanted = workload.mask
    if workload.phase == "decode" and wanted == "causal":
        wanted = "none"  # a decoded token sits after the whole cache: it attends every key
    return mask in (wanted, workload.mask) and (grouped or not workload.grouped)


def describe_attention(cascade: Cascade) -> str:
    kind = attention_kind(cascade)
    if kind is None:
        return "not attention"
    grouped, mask = kind
    words = ["grouped-query" if grouped else "multi-head"]
    words.append({"none": "no mask", "causal": "causal", "window": "sliding window"}[mask])
    return ", ".join(words)


def is_auto(config: str) -> bool:
    return config == "auto" or config.startswith("auto:")


def parse_auto(config: str) -> tuple[str, bool, bool]:
    """`auto[:STRATEGY[/OPTION...]]` -> (strategy, pipelined, reuse)."""
    rest = config[len("auto:") :] if config.startswith("auto:") else ""
    strategy, *options = rest.split("/") if rest else ["fused"]
    strategy = strategy or "fused"
    if strategy not in STRATEGIES:
        raise SpecError(
            f"unknown binding strategy '{strategy}' in '{config}' "
            f"(choose from {', '.join(STRATEGIES)})"
        )
    for option in options:
        if option not in AUTO_OPTIONS:
            raise SpecError(
                f"unknown option '{option}' in '{config}' (options: {', '.join(AUTO_OPTIONS)})"
            )
    return strategy, "sequential" not in options, "no-reuse" not in options


def auto_name(config: str) -> str:
    """The name results give an automatic configuration: `auto-fusemax`, `auto-flat`,
    `auto-fusemax-sequential`."""
    strategy, pipelined, reuse = parse_auto(config)
    return "-".join(
        ["auto", strategy] + ([] if pipelined else ["sequential"]) + ([] if reuse else ["no-reuse"])
    )


def shipped_configs() -> list[str]:
    """Mapping files shipped in `mappings/`, the paper's five first, in the paper's order."""
    names = sorted(p.stem for p in data_dir("mappings").glob("*.yaml"))
    return [n for n in STANDARD if n in names] + [n for n in names if n not in STANDARD]


@dataclass(frozen=True)
class Sizing:
    """How a point resizes the architecture (`--pe-dim`, `--buffer-bytes`, `--bandwidth`,
    further overrides, a value format): the mapper searches on the resized one."""

    pe_dim: int | None = None
    buffer_bytes: int | None = None
    bandwidth: float | None = None
    resize: tuple[tuple[str, int], ...] = ()
    precision: str | int | None = None

    @staticmethod
    def of(
        pe_dim: int | None = None,
        buffer_bytes: int | None = None,
        bandwidth: float | None = None,
        resize: dict[str, int] | None = None,
        precision: str | int | None = None,
    ) -> Sizing:
        return Sizing(
            pe_dim, buffer_bytes, bandwidth, tuple(sorted((resize or {}).items())), precision
        )

    def apply(self, arch: Architecture) -> Architecture:
        arch = arch.with_overrides(
            self.pe_dim, self.buffer_bytes, self.bandwidth, **dict(self.resize)
        )
        if isinstance(self.precision, int):
            return arch.with_precision(bits=self.precision)
        if self.precision is not None:
            return arch.with_precision(self.precision)
        return arch


@dataclass
class Specs:
    """Reads spec files once per process; optional user overrides of cascade/architecture."""

    cascade_override: str | None = None
    arch_override: str | None = None
    _cascades: dict[str, Cascade] = field(default_factory=dict)
    _archs: dict[tuple[str, Ceilings | None], Architecture] = field(default_factory=dict)
    _mappings: dict[str, MappingSpec] = field(default_factory=dict)
    objective: str = "latency"  # what the mapper optimises (--objective)
    search_s: float = DEFAULT_SEARCH_S  # the mapper's budget (--search-s)
    whole_tiles: bool = False  # the mapper holds every tile whole (a Timeloop export's need)
    progress: Callable[[int, int], None] | None = None  # the mapper's progress bar
    _found: dict[tuple, Found] = field(default_factory=dict)
    _found_by_spec: dict[int, Found] = field(default_factory=dict)
    _bound: dict[tuple[int, str], MappingSpec] = field(default_factory=dict)
    _tables: dict[str, tuple[EnergyTable, AreaTable]] = field(default_factory=dict)
    _linear: dict[str, tuple[LinearSpec, Cascade]] = field(default_factory=dict)
    # Linear layers evaluated, by (spec, engine, accounting, limits, architecture, workload):
    # the configurations of one chip (Cascade, +Architecture, +Binding) run the same layers
    linear_results: dict[tuple, Result] = field(default_factory=dict)
    # A measured chip's ceilings and fixed costs (`--ceilings FILE`): every architecture
    # read is running at them, before the mapper searches or an engine times
    ceilings: Ceilings | None = None

    def tables(
        self, arch: Architecture, accounting: str = "corrected"
    ) -> tuple[EnergyTable, AreaTable] | None:
        """The architecture's energy and area tables for an accounting, bound to it and checked
        (None when it names none). `published` uses its published tables if it has them."""
        energy, area = arch.energy_table, arch.area_table
        keys = ("energy_table", "area_table")
        if accounting == "published" and arch.published_energy_table:
            energy, area = arch.published_energy_table, arch.published_area_table or area
            keys = ("published_energy_table", keys[1] if area == arch.area_table else
                    "published_area_table")  # fmt: skip
        if energy is None or area is None:
            return None
        for name, path in zip(keys, (energy, area), strict=True):
            if not is_file(Path(path)):  # at the line naming it, not only the missing path
                raise SpecError(
                    f"{name}: no such file {path} (named relative to the architecture's "
                    "folder: a copied architecture needs its tables beside it, or their "
                    "absolute paths)",
                    arch.table_loc(name),
                )
        key = f"{energy}|{area}"
        if key not in self._tables:
            self._tables[key] = (load_energy_table(energy), load_area_table(area))
        ert, art = self._tables[key]
        attributes = arch.component_attributes()
        ert, art = ert.bind(attributes), art.bind(attributes)
        check_tables(ert, art, arch.required_actions(), set(arch.priced_components()))
        return ert, art

    def check_arch_override(self) -> Architecture | None:
        """The `--arch` override read whole, with its energy and area tables: a missing or
        bad file is one line before any work, not a reason each strategy or candidate is
        "not bound" (None when there is no override)."""
        if not self.arch_override:
            return None
        arch = self._load_arch(self._override("arch", "--arch", self.arch_override))
        self.tables(arch)
        return arch

    def with_cascade(self, cascade: str | None, arch: str | None = None) -> Specs:
        """These specs with another cascade (and architecture) override (None: keep this
        one's); the files read so far are shared."""
        cascade = self.cascade_override if cascade is None else cascade
        arch = self.arch_override if arch is None else arch
        if (cascade, arch) == (self.cascade_override, self.arch_override):
            return self
        return dataclasses.replace(self, cascade_override=cascade, arch_override=arch)

    def config_spec(
        self,
        config: str,
        workload: Workload,
        arch_changed: bool = False,
        sizing: Sizing | None = None,
    ) -> MappingSpec:
        """A configuration's mapping at a workload: the file, or the one bound for it --
        also where the file does not cover the point (see the module docstring):
        `arch_changed` says the architecture is not the file's own (another buffer, array or
        value format)."""
        if is_auto(config):
            return self.auto(config, workload, sizing).spec
        spec = self.mapping(config)
        why = self._uncovered(spec, workload, arch_changed)
        if why is None:
            return spec
        instead = spec.otherwise
        if instead is None:
            raise SpecError(f"mapping '{spec.name}' {why}: name another configuration", None)
        if not is_auto(instead):
            raise SpecError(
                f"mapping '{spec.name}': otherwise must name an automatic configuration "
                f"(auto:STRATEGY), got '{instead}'",
                spec.data.loc_of("otherwise"),
            )
        found = self.auto(instead, workload, sizing)
        note = f"{spec.label}: {why}; bound by the {parse_auto(instead)[0]} strategy ({instead})"
        # One bound spec per (search, note), kept: `found()` looks specs up by identity, and
        # an id is unique only while its object lives.
        bound = self._bound.get((id(found.spec), note))
        if bound is None:
            bound = dataclasses.replace(found.spec, notes=(*found.spec.notes, note))
            self._bound[(id(found.spec), note)] = bound
            self._found_by_spec[id(bound)] = found
        return bound

    def runs_model_attention(self, config: str, workload: Workload) -> bool:
        """Does the configuration's own file compute the workload's attention (automatic
        configurations always do)?"""
        if is_auto(config) or self.cascade_override is not None:
            return True
        return runs_model_attention(self.cascade(self.mapping(config)), workload)

    def binds_on(self, config: str) -> bool:
        """Does the configuration's file name only arrays the architecture it would run on
        has (automatic configurations always do)? The paper's files bind FuseMax's and
        FLAT's arrays by name; another chip (`--arch h100`) has its own."""
        if is_auto(config):
            return True
        spec = self.mapping(config)
        binding = spec.data.get("binding")
        names = {a.name for a in self.architecture(spec).arrays}
        return not isinstance(binding, dict) or all(str(a) in names for a in binding)

    def _uncovered(self, spec: MappingSpec, workload: Workload, arch_changed: bool) -> str | None:
        """Why a mapping file does not cover a point (None: it does)."""
        if self.cascade_override is None:
            cascade = self.cascade(spec)
            if not runs_model_attention(cascade, workload):
                return (
                    f"runs {cascade.name} ({describe_attention(cascade)}), not "
                    f"{workload.label}'s attention ({workload.attention()})"
                )
        if spec.table and spec.otherwise is not None:
            fields = workload_fields(workload)
            if not has_row(spec, fields):
                described = ", ".join(
                    f"{col}={fields.get(str(f), f)}"
                    for col, f in spec.data["dataflow"]["match"].items()
                )
                return f"no published dataflow for {described}"
            if arch_changed:
                return (
                    "its published dataflow holds for its own architecture, not this buffer, "
                    "array or value format"
                )
        return None

    def auto_sources(self, config: str, workload: Workload | None = None) -> tuple[Path, Path]:
        """The cascade and architecture files an automatic configuration binds (with no
        workload: the cascade of the paper's multi-head, unmasked attention)."""
        strategy, _pipelined, _reuse = parse_auto(config)
        if self.cascade_override:
            cascade_path = self._override("cascades", "--cascade", self.cascade_override)
        else:
            facts = load_facts()
            name = (
                model_cascade(strategy, workload)
                if workload is not None
                else facts.attention_cascade(strategy, False, "none")
            )
            cascade_path = resolve_spec("cascades", name)
        arch_path = (
            self._override("arch", "--arch", self.arch_override)
            if self.arch_override
            else resolve_spec("arch", DEFAULT_ARCH[strategy])
        )
        return cascade_path, arch_path

    def check_config(self, config: str) -> None:
        """The files a configuration reads exist and parse (before a sweep's work)."""
        if is_auto(config):
            cascade_path, arch_path = self.auto_sources(config)
            self._load_cascade(cascade_path)
            self._load_arch(arch_path)
            return
        spec = self.mapping(config)
        self.architecture(spec)
        self.cascade(spec)

    def auto(self, config: str, workload: Workload, sizing: Sizing | None = None) -> Found:
        """The mapping the mapper finds for `config` (`auto:STRATEGY/OPTIONS`) at this
        workload on the architecture sized so (:mod:`simulator.mapper`); searched once per
        point and process."""
        sizing = sizing or Sizing()
        strategy, pipelined, reuse = parse_auto(config)
        cascade_path, arch_path = self.auto_sources(config, workload)
        options = SearchOptions(
            strategy=strategy,
            pipelined=pipelined,
            reuse=reuse,
            objective=self.objective,
            search_s=self.search_s,
            whole_tiles=self.whole_tiles,
        )
        key = (config, str(cascade_path), str(arch_path), sizing, workload, options, self.ceilings)
        if key not in self._found:
            cascade = self._load_cascade(cascade_path)
            arch = sizing.apply(self._load_arch(arch_path))
            ctx = bind_context(cascade, arch, workload, str(cascade_path), str(arch_path))
            found = search(ctx, options, auto_name(config), self.tables(arch), self.progress)
            self._found[key] = found
            self._found_by_spec[id(found.spec)] = found
        return self._found[key]

    def architecture_of(self, config: str, workload: Workload, sizing: Sizing) -> Architecture:
        """The architecture a configuration runs on at a point, sized -- without searching
        for its mapping."""
        if is_auto(config):
            return sizing.apply(self._load_arch(self.auto_sources(config, workload)[1]))
        return sizing.apply(self.architecture(self.mapping(config)))

    def cascade_of(self, config: str, workload: Workload) -> Cascade:
        """The cascade a configuration runs at a point (without searching its mapping)."""
        if is_auto(config):
            return self._load_cascade(self.auto_sources(config, workload)[0])
        return self.cascade(self.mapping(config))

    def check_shape(self, configs: list[str], workload: Workload) -> None:
        """`--shape`: every rank it names is a rank of a cascade the run evaluates -- one
        rule for every command: an unknown rank is one line, never silently ignored."""
        if workload.rank_overrides:
            check_shape([self.cascade_of(c, workload) for c in configs], workload)

    def check_cascade_override(self, workload: Workload) -> None:
        """`--cascade` computes the workload's attention: a feature of the workload the
        cascade cannot express (grouped K/V heads, a causal mask, a window) is one line --
        never a header naming a workload the numbers do not compute. The user states the
        workload the cascade computes instead (`--window 0`, `--no-causal`,
        `--kv-heads H`)."""
        if self.cascade_override is None:
            return
        cascade = self._load_cascade(self._override("cascades", "--cascade", self.cascade_override))
        if runs_model_attention(cascade, workload):
            return
        raise SpecError(
            f"--cascade {cascade.name} computes {describe_attention(cascade)} attention, not "
            f"{workload.label}'s ({workload.attention()}): name a cascade that computes it, "
            "or state the workload it computes (--window 0, --no-causal, --kv-heads)"
        )

    def found(self, spec: MappingSpec) -> Found | None:
        """How the mapper found a configuration's mapping (None: a mapping file)."""
        return self._found_by_spec.get(id(spec))

    def mapping(self, name_or_path: str) -> MappingSpec:
        name = ALIASES.get(name_or_path, name_or_path)
        if name not in self._mappings:
            self._mappings[name] = load_mapping(resolve_spec("mappings", name))
        return self._mappings[name]

    def linear(self, name_or_path: str) -> tuple[LinearSpec, Cascade]:
        """A linear-layer spec (`mappings/linear/NAME.yaml` or a path) and its cascade."""
        if name_or_path not in self._linear:
            path = Path(name_or_path)
            if not is_file(path):
                folder = data_dir("mappings") / "linear"
                path = folder / f"{name_or_path}.yaml"
                if not is_file(path):
                    shipped = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
                    raise SpecError(f"no linear-layer spec '{name_or_path}' (shipped: {shipped})")
            spec = load_linear(path)
            local = path.parent / spec.cascade
            cascade = local if is_file(local) else resolve_spec("cascades", spec.cascade)
            self._linear[name_or_path] = (spec, load_cascade(cascade))
        return self._linear[name_or_path]

    def shipped_cascade(self, name_or_path: str) -> Cascade:
        """A cascade by its shipped name or path (a model card's linear layers)."""
        return self._load_cascade(resolve_spec("cascades", name_or_path))

    def cascade(self, spec: MappingSpec) -> Cascade:
        """The cascade a mapping binds: its file (or `--cascade`), as the mapper reads it
        where the mapping says `normalised: yes`, with what it makes again (`recompute:`)."""
        if self.cascade_override:
            path = self._override("cascades", "--cascade", self.cascade_override)
        else:
            path = self._relative(spec, "cascades", spec.cascade)
        cascade = self._load_cascade(path)
        cascade = mapping_view(cascade) if spec.normalised else cascade
        return recomputed(cascade, spec.recompute, spec.data.loc_of("recompute"))

    def _load_cascade(self, path: Path) -> Cascade:
        key = str(path)
        if key not in self._cascades:
            self._cascades[key] = load_cascade(path)
        return self._cascades[key]

    def architecture(self, spec: MappingSpec, as_written: bool = False) -> Architecture:
        """The architecture a configuration runs on (at the measured ceilings, if any;
        `as_written`: as its file says)."""
        if self.arch_override:
            path = self._override("arch", "--arch", self.arch_override)
        else:
            path = self._relative(spec, "arch", spec.architecture)
        return self._load_arch(path, as_written)

    def own_architecture(self, spec: MappingSpec) -> Architecture:
        """The architecture a mapping file names (not `--arch`'s), as its file says."""
        return self._load_arch(self._relative(spec, "arch", spec.architecture), True)

    def _load_arch(self, path: Path, as_written: bool = False) -> Architecture:
        ceilings = None if as_written else self.ceilings
        key = (str(path), ceilings)
        if key not in self._archs:
            arch = load_architecture(path)
            self._archs[key] = arch if ceilings is None else ceilings.apply(arch)
        return self._archs[key]

    @staticmethod
    def _override(kind: str, option: str, name: str) -> Path:
        """A command line's file (relative to the current folder) or shipped spec name."""
        try:
            return resolve_spec(kind, name).resolve()
        except SpecError as err:
            raise SpecError(f"{option} {name}: {err.message}") from None

    @staticmethod
    def _relative(spec: MappingSpec, kind: str, name: str) -> Path:
        # A bare name is a shipped spec; a path (with / or .yaml) is relative to the mapping.
        if "/" in name or name.endswith((".yaml", ".yml")):
            local = Path(spec.path).parent / name
            if is_file(local):
                return local
        try:
            return resolve_spec(kind, name)
        except SpecError:
            key = "architecture" if kind == "arch" else "cascade"
            raise SpecError(
                f"mapping '{spec.name}' names {kind} '{name}', which does not exist",
                spec.data.loc_of(key),
            ) from None


def settled(workload: Workload) -> Workload:
    """The workload with its `--shape` settled against what the workload sizes (the binder's
    facts say which quantity sizes each rank): stated two ways, one workload; a rank that
    contradicts the sequence or head structure is one line."""
    return settle_shape(workload, dict(load_facts().shapes))


def workload_from_args(args: object, default_seq: str = "1M") -> Workload:
    """The one workload of a command line, whichever of the workload flags the command
    has (`--model --seq --batch --heads --embed --ffn --dmodel --kv-heads --window --causal
    --phase --context --shape`; a missing one is not given): every CLI states a workload
    the same way, and a `--shape` of a rank the workload sizes agrees with it or is
    refused. A decode step with `--context` has no `--seq` (its sequence is the cache)."""

    def flag(name: str) -> object:
        return getattr(args, name, None)

    overrides = {f: flag(f) for f in (*FIELDS, *OPTIONAL, *FLAGS)}
    model = flag("model")
    if model is not None and not str(model).strip():
        raise SpecError("--model is empty: name a model (bert, llama3-8b, ...) or custom")
    if model is None:
        model = "custom" if flag("heads") and flag("embed") else "bert"
    seq = flag("seq")
    if flag("phase") == "decode" and flag("context") is not None:
        # a decode step's sequence is its cache: --context states it
        if seq is not None:
            raise SpecError(
                "--seq and --context both give a decode step's cached tokens: give --context"
            )
        seq = flag("context")
    workload = make_workload(
        str(model),
        default_seq if seq is None else seq,  # type: ignore[arg-type]
        overrides,  # type: ignore[arg-type]
        phase=flag("phase") or "prefill",  # type: ignore[arg-type]
        context=flag("context"),  # type: ignore[arg-type]
        shape=parse_shape(flag("shape")),  # type: ignore[arg-type]
    )
    return settled(workload)


def check_shape(cascades: list[Cascade], workload: Workload) -> None:
    """`--shape` names only ranks of the cascades a command runs (one line otherwise)."""
    given = dict(workload.rank_overrides)
    ranks = {r for c in cascades for r in c.shape_names()}
    unknown = sorted(set(given) - ranks)
    if unknown:
        raise SpecError(
            f"--shape: no cascade of this run has rank {', '.join(unknown)} "
            f"(their ranks: {', '.join(sorted(ranks))})"
        )


def evaluate_each(
    configs: list[str], run: Callable[[str], T], optional: bool
) -> tuple[list[T], dict[str, SpecError], list[str]]:
    """`run` on every configuration: (results, failures, notes). With `optional` (the
    default set of configurations, not one the user named) a configuration that cannot run
    the point -- FLAT's rows beyond the buffer at very long sequences -- is left out with a
    note instead of stopping the others; the error stands when none can run."""
    results: list[T] = []
    failed: dict[str, SpecError] = {}
    notes: list[str] = []
    for config in configs:
        try:
            results.append(run(config))
        except SpecError as err:
            if not optional or len(failed) + 1 == len(configs):
                raise
            failed[config] = err
            notes.append(f"{config} left out: {err}")
    return results, failed, notes


@dataclass(frozen=True)
class EvalOptions:
    """How a point is evaluated: the energy accounting, the timing engine and the cycle
    engine's limits."""

    accounting: str = "corrected"
    engine: str = "analytic"
    timing: TimingOptions = UNLIMITED

    def analytic(self) -> EvalOptions:
        return dataclasses.replace(self, engine="analytic")


def evaluate(
    specs: Specs,
    config: str,
    workload: Workload,
    sizing: Sizing | None = None,
    options: EvalOptions = EvalOptions(),
) -> Result:
    """One configuration (a mapping file) at one workload point, on the architecture
    `sizing` resizes (:class:`Sizing`: `--pe-dim`, `--buffer-bytes`, `--bandwidth`, further
    overrides of :meth:`Architecture.with_overrides`, a value format), evaluated as
    `options` says (:class:`EvalOptions`: the accounting, the engine, its limits)."""
    variant = [(options.engine, options.accounting)]
    return evaluate_variants(specs, config, workload, variant, sizing, options.timing)[0]


# Seconds one phase's cycle simulation may take when --max-sim-s is not given (run,
# compare): past it, the configuration shows the analytic engine's numbers with a note (any
# size answers in about a second); --max-sim-s sets another limit, past which the
# simulation is refused in one line.
DEFAULT_MAX_SIM_S = 2.0


def analytic_past_budget(
    specs: Specs, workload: Workload, sizing: Sizing, options: EvalOptions, notes: list[str]
) -> Callable[[str], Result]:
    """`evaluate` for one configuration that, when the cycle simulation would outrun the
    default budget (or cannot simulate the point), gives the analytic engine's numbers and
    says so in `notes`."""

    def run(config: str) -> Result:
        try:
            return evaluate(specs, config, workload, sizing, options)
        except SimulationLimit as err:
            # what the refusal says after "stopped at --max-sim-s S:" (the config's name,
            # auto:fusemax, has a colon of its own)
            why = str(err).split("--max-sim-s", 1)[-1].split(":", 1)[-1].split(";")[0].strip()
            notes.append(
                f"{config}: the cycle simulation outruns the {DEFAULT_MAX_SIM_S:g} s default "
                f"budget ({why}); shown: the analytic engine's numbers (--max-sim-s SECONDS "
                "simulates longer)"
            )
            return evaluate(specs, config, workload, sizing, options.analytic())
        except CannotSimulate as err:
            notes.append(f"{config}: {err.message}; shown: the analytic engine's numbers")
            return evaluate(specs, config, workload, sizing, options.analytic())

    return run


def evaluate_variants(
    specs: Specs,
    config: str,
    workload: Workload,
    variants: Sequence[tuple[str, str]],
    sizing: Sizing | None = None,
    timing: TimingOptions = UNLIMITED,
) -> list[Result]:
    """:func:`evaluate` under several (engine, accounting) at once: the configuration is
    bound and the point planned once, each engine times it once."""
    sizing = sizing or Sizing()
    if sizing.precision is not None and any(acc == "published" for _e, acc in variants):
        raise SpecError(
            "--accounting published prices the FuseMax artifact's 16-bit values: another "
            "precision needs the corrected accounting"
        )
    cascade, mapping, arch, found = prepare_found(specs, config, workload, sizing)
    priced = [(engine, acc, specs.tables(arch, acc)) for engine, acc in variants]
    try:
        results = evaluate_mapping_variants(cascade, mapping, arch, workload, priced, timing)
    except SimulationLimit as err:
        raise SimulationLimit(f"{config}: {err.message}") from None
    if attention_kind(cascade) is not None and runs_model_attention(cascade, workload):
        floor = attention_floor(workload, arch)  # the workload's own, whatever the cascade
        for r in results:
            try:
                check_floor(r, floor, workload)
            except BoundBreach:
                unsized = example_shape_notes(cascade, mapping, workload)
                if not unsized:
                    raise
                raise SpecError(  # the mapping's doing, not the tool's: one line, exit 2
                    f"{unsized[0]}: at its example shape the numbers fall under "
                    f"{workload.label}'s floor ({floor.latency_s:.4g} s): size the rank "
                    "from the workload"
                ) from None
    if found is None:
        return results
    return [dataclasses.replace(r, search=found.stats) for r in results]


def prepare(
    specs: Specs,
    config: str,
    workload: Workload,
    pe_dim: int | None = None,
    buffer_bytes: int | None = None,
    bandwidth: float | None = None,
    *,
    resize: dict[str, int] | None = None,
    precision: str | int | None = None,
) -> tuple[Cascade, Mapping, Architecture]:
    """The cascade, resolved mapping and architecture of a configuration at a point."""
    sizing = Sizing.of(pe_dim, buffer_bytes, bandwidth, resize, precision)
    cascade, mapping, arch, _found = prepare_found(specs, config, workload, sizing)
    return cascade, mapping, arch


def prepare_found(
    specs: Specs, config: str, workload: Workload, sizing: Sizing
) -> tuple[Cascade, Mapping, Architecture, Found | None]:
    """:func:`prepare`, and how the mapper found the mapping (None: a mapping file)."""
    spec = specs.config_spec(config, workload, sizing=sizing)
    arch = sizing.apply(specs.architecture(spec))
    # another chip than the file's own (measured ceilings are the same chip, running)
    changed = sizing.apply(specs.architecture(spec, as_written=True)) != specs.own_architecture(
        spec
    )
    if not is_auto(config) and changed:
        # another buffer, array or value format than the file's own: a dataflow table
        # chosen for that architecture no longer holds
        spec = specs.config_spec(config, workload, arch_changed=True, sizing=sizing)
        arch = sizing.apply(specs.architecture(spec))
    cascade = specs.cascade(spec)
    mapping = resolved(spec, cascade, arch, workload)
    if not is_auto(config) and spec.otherwise is not None and specs.found(spec) is None:
        ranks = needs_padding(cascade, mapping, arch, workload)
        if ranks:  # the file's tiles do not divide the point: its strategy pads them
            instead = spec.otherwise
            found = specs.auto(instead, workload, sizing)
            extents = ", ".join(f"{r}={dict(mapping.shapes).get(r, '?')}" for r in ranks)
            note = (
                f"{spec.label}: its tiles do not divide {extents}; bound by the "
                f"{parse_auto(instead)[0]} strategy ({instead}), whole tiles padded"
            )
            spec = dataclasses.replace(found.spec, notes=(*found.spec.notes, note))
            specs._found_by_spec[id(spec)] = found
            arch = sizing.apply(specs.architecture(spec))
            cascade = specs.cascade(spec)
            mapping = resolved(spec, cascade, arch, workload)
    return cascade, mapping, arch, specs.found(spec)
