"""End-to-end layer: a configuration's attention plus the model's linear layers on its chip.

Pipeline: a driver above :mod:`simulator.drivers.configs`; both parts take the one path every
number takes (:func:`simulator.core.evaluate.evaluate_mapping_variants`: plan -> time -> price
-> the bound guard).

The attention comes from the configuration's own mapping (`configs.evaluate`). The linear
layers are a cascade of GEMMs -- the model card's (`layer:`: a decoder's grouped K/V
projections and gated FFN, `cascades/linear-layers-gated.yaml`), else the linear-layer
spec's (`cascades/linear-layers.yaml`, an encoder layer's six GEMMs) -- sized by the spec's
`shapes:` (`mappings/linear/*.yaml`: one row per token the layer processes, `batch x
queries`: the sequence in prefill, one decoded token per request in decode) and run as the
phases of a mapping the spec writes: one GEMM phase per Einsum, each mapped by the GEMM
mapper (`plan/gemm_mapper.py`) under the spec's settings on the design's 2D array, its tiles
spread over every core of the chip (a GPU's SMs), at the point's value format, timed by
either engine and priced like the attention. The mapper's energy objective uses the
architecture's corrected table, so the chosen mappings do not depend on the accounting that
prices them. Layer latency, energy and traffic are the sums of the parts; the area is the
chip's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.cascade.ir import Cascade
from simulator.core.evaluate import check_floor, evaluate_mapping_variants
from simulator.core.floors import linear_floor
from simulator.core.result import Result
from simulator.drivers.configs import Sizing, Specs, check_shape, evaluate_each, evaluate_variants
from simulator.mapper.resolve import resolved
from simulator.spec.arch import Architecture
from simulator.spec.linear import LinearSpec
from simulator.spec.mapping import MappingSpec, mapping_from_data
from simulator.spec.workload import Workload
from simulator.support.errors import CannotSimulate, SimulationLimit, SpecError
from simulator.support.textfmt import table
from simulator.timing.options import UNLIMITED, TimingOptions

DEFAULT_LINEAR = "gemm"


@dataclass(frozen=True)
class LayerOptions:
    """How a layer is evaluated: the energy accounting, the timing engine, the linear-layer
    spec (`mappings/linear/NAME.yaml` or a file) and the cycle engine's limits."""

    accounting: str = "corrected"
    engine: str = "analytic"
    linear: str = DEFAULT_LINEAR
    timing: TimingOptions = UNLIMITED
    # A part the cycle engine cannot simulate (a chip of many cores) or would take too long
    # over shows the analytic engine's numbers, said in the layer's notes (`run`'s default).
    fallback: bool = False

    def analytic(self) -> LayerOptions:
        return dataclasses.replace(self, engine="analytic")


@dataclass(frozen=True)
class LayerResult:
    accelerator: str
    label: str
    model: str
    seq_len: int
    latency_s: float
    energy_pj: float | None
    traffic_bytes: float
    area_um2: float | None
    attention: Result
    linear: Result
    linear_spec: str
    energy_accounting: str
    notes: tuple[str, ...] = ()

    @property
    def linear_latency_s(self) -> float:
        return self.linear.latency_s

    @property
    def linear_traffic_bytes(self) -> float:
        return self.linear.traffic_bytes

    @property
    def linear_energy_pj(self) -> float | None:
        return self.linear.energy_pj


def layer_cascade(specs: Specs, spec: LinearSpec, workload: Workload) -> Cascade:
    """The cascade of the workload's linear layers: its model card's (`layer:`), else the
    linear-layer spec's."""
    if workload.layer:
        return specs.shipped_cascade(workload.layer)
    return specs.linear(spec.path)[1]


def linear_mapping(spec: LinearSpec, cascade: Cascade, arch: Architecture) -> MappingSpec:
    """The mapping the linear-layer spec writes for its cascade on a chip: every GEMM its
    own phase through DRAM, on the 2D array, mapped by the GEMM mapper under the spec's
    settings; the cascade runs once (its rows are every request's tokens)."""
    array = spec.array or next((a.name for a in arch.arrays if a.mesh_y > 1), None)
    if array is None:
        raise SpecError(f"architecture {arch.name} has no 2D PE array for the GEMMs", spec.loc)
    gemms = [e.name for e in cascade.einsums if e.kind == "compute"]
    ranks = set(cascade.shape_names())
    mapper: Any = spec.mapper_data if spec.mapper_data is not None else {}
    produced = {e.output.tensor for e in cascade.einsums if e.kind == "compute"}
    body = {
        "label": spec.label,
        "description": f"{cascade.name}: every GEMM its own phase, mapped by the GEMM mapper",
        "cascade": cascade.name,
        "architecture": arch.name,
        "shapes": {rank: raw for rank, raw in spec.shapes if rank in ranks},
        "instances": {"batch": 1, "heads": 1},
        "binding": {array: gemms},
        "tensors": {t: {"home": "DRAM", "keep": "stream"} for t in sorted(produced)},
        "phases": [{"name": g, "mapper": mapper, "schedule": [g]} for g in gemms],
    }
    return mapping_from_data({"mapping": body}, spec.path, f"linear-{spec.name}")


def evaluate_linear(
    specs: Specs,
    arch: Architecture,
    workload: Workload,
    options: LayerOptions = LayerOptions(),
) -> Result:
    """The workload's linear layers on `arch` (sized already), through the pipeline; kept
    per process (`Specs.linear_results`)."""
    key = (options.linear, options.engine, options.accounting, options.timing, arch, workload)
    kept = specs.linear_results.get(key)
    if kept is None:
        kept = specs.linear_results[key] = _linear_result(specs, arch, workload, options)
    return kept


def _linear_result(
    specs: Specs, arch: Architecture, workload: Workload, options: LayerOptions
) -> Result:
    spec, _default = specs.linear(options.linear)
    cascade = layer_cascade(specs, spec, workload)
    mapping = resolved(linear_mapping(spec, cascade, arch), cascade, arch, workload)
    tables = specs.tables(arch, options.accounting)
    variants = [(options.engine, options.accounting, tables)]
    try:
        (result,) = evaluate_mapping_variants(
            cascade, mapping, arch, workload, variants, options.timing
        )
    except SimulationLimit as err:
        raise SimulationLimit(f"linear layers: {err.message}") from None
    if not workload.rank_overrides:  # (--shape resizes the layer: no longer the card's)
        check_floor(result, linear_floor(workload, arch), workload)
    return result


def evaluate_layer(
    specs: Specs,
    config: str,
    workload: Workload,
    sizing: Sizing | None = None,
    options: LayerOptions = LayerOptions(),
) -> LayerResult:
    """One layer on one configuration: its attention, then the model's linear layers on its
    architecture (sized so, at the point's value format). Latency, energy and traffic add
    up; the area is the chip's."""
    sizing = sizing or Sizing()
    arch = specs.architecture_of(config, workload, sizing)
    if sizing.precision is not None and options.accounting == "published":
        raise SpecError(
            "--accounting published prices the FuseMax artifact's 16-bit values: another "
            "precision needs the corrected accounting"
        )
    attention_workload = _attention_workload(specs, config, workload)
    linear_workload = _linear_workload(specs, options, workload)
    notes: list[str] = []

    def attention_part(how: LayerOptions) -> Result:
        variant = [(how.engine, how.accounting)]
        return evaluate_variants(specs, config, attention_workload, variant, sizing, how.timing)[0]

    linear = _timed(
        lambda how: evaluate_linear(specs, arch, linear_workload, how),
        options,
        notes,
        f"{config}'s linear layers",
    )
    attention = _timed(attention_part, options, notes, config)
    energy = (
        None
        if attention.energy_pj is None or linear.energy_pj is None
        else attention.energy_pj + linear.energy_pj
    )
    return LayerResult(
        attention.accelerator,
        attention.label,
        attention.model,
        attention.seq_len,
        attention.latency_s + linear.latency_s,
        energy,
        attention.traffic_bytes + linear.traffic_bytes,
        attention.area_um2,
        attention,
        linear,
        options.linear,
        options.accounting,
        tuple(notes),
    )


def _timed(
    part: Callable[[LayerOptions], Result], options: LayerOptions, notes: list[str], what: str
) -> Result:
    """A part of the layer under the options' engine, or -- with `fallback`, where the cycle
    engine cannot simulate it or would outrun its limit -- the analytic engine's, noted."""
    try:
        return part(options)
    except (CannotSimulate, SimulationLimit) as err:
        if not options.fallback or options.engine == "analytic":
            raise
        why = err.message.split(": ", 1)[-1]
        notes.append(f"{what}: {why}; shown: the analytic engine's numbers")
        return part(options.analytic())


def check_layer_shape(specs: Specs, configs: list[str], workload: Workload, linear: str) -> None:
    """`--shape` names ranks of the attention cascades or of the linear layers' (one line
    otherwise)."""
    if workload.rank_overrides:
        spec, _default = specs.linear(linear)
        cascades = [specs.cascade_of(c, workload) for c in configs]
        check_shape([*cascades, layer_cascade(specs, spec, workload)], workload)


def _attention_workload(specs: Specs, config: str, workload: Workload) -> Workload:
    """The workload less the `--shape` ranks only the linear layers have."""
    ranks = set(specs.cascade_of(config, workload).shape_names())
    keep = tuple((r, v) for r, v in workload.rank_overrides if r in ranks)
    return dataclasses.replace(workload, rank_overrides=keep)


def _linear_workload(specs: Specs, options: LayerOptions, workload: Workload) -> Workload:
    """The workload less the `--shape` ranks the linear layers do not have."""
    spec, _default = specs.linear(options.linear)
    ranks = set(layer_cascade(specs, spec, workload).shape_names())
    keep = tuple((r, v) for r, v in workload.rank_overrides if r in ranks)
    return dataclasses.replace(workload, rank_overrides=keep)


# --------------------------------------------------------------------------------------
# Comparing configurations (`python -m simulator.run --scope layer`)


@dataclass(frozen=True)
class LayerRow:
    result: LayerResult
    speedup_vs_unfused: float | None
    speedup_vs_flat: float | None
    energy_vs_unfused: float | None
    energy_vs_flat: float | None


def compare_layers(
    specs: Specs,
    configs: list[str],
    workload: Workload,
    sizing: Sizing | None = None,
    options: LayerOptions = LayerOptions(),
    optional: bool = False,
) -> tuple[list[LayerRow], list[str]]:
    """End-to-end layers of several configurations, with speedups and energy ratios to the
    unfused baseline and FLAT at the same point."""

    def run(config: str) -> LayerResult:
        return evaluate_layer(specs, config, workload, sizing, options)

    results, failed, notes = evaluate_each(configs, run, optional)
    bases: dict[str, LayerResult | None] = {}
    for base in ("unfused", "flat"):
        found = next((r for r in results if r.accelerator == base), None)
        if (
            found is None
            and base not in failed
            and specs.cascade_override is None
            and specs.arch_override is None
        ):
            try:
                found = run(base)
            except SpecError as err:
                notes.append(f"no {base} baseline at this point: {err}")
        bases[base] = found
    rows = []
    for r in results:
        u, f = bases["unfused"], bases["flat"]
        rows.append(
            LayerRow(
                r,
                u.latency_s / r.latency_s if u else None,
                f.latency_s / r.latency_s if f else None,
                r.energy_pj / u.energy_pj if u and u.energy_pj and r.energy_pj else None,
                r.energy_pj / f.energy_pj if f and f.energy_pj and r.energy_pj else None,
            )
        )
        notes += [n for n in (*r.notes, *r.attention.notes, *r.linear.notes) if n not in notes]
    return rows, notes


def layer_record(row: LayerRow) -> dict:
    r = row.result
    return {
        "accelerator": r.accelerator,
        "label": r.label,
        "model": r.model,
        "seq_len": r.seq_len,
        "latency_s": r.latency_s,
        "attention_latency_s": r.attention.latency_s,
        "linear_latency_s": r.linear_latency_s,
        "traffic_bytes": r.traffic_bytes,
        "energy_pj": r.energy_pj,
        "attention_energy_pj": r.attention.energy_pj,
        "linear_energy_pj": r.linear_energy_pj,
        "energy_accounting": r.energy_accounting,
        "area_um2": r.area_um2,
        "speedup_vs_unfused": row.speedup_vs_unfused,
        "speedup_vs_flat": row.speedup_vs_flat,
        "energy_vs_unfused": row.energy_vs_unfused,
        "energy_vs_flat": row.energy_vs_flat,
        "linear_spec": r.linear_spec,
    }


def render_layer_table(rows: list[LayerRow], notes: list[str], workload: Workload) -> str:
    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}%"

    def joules(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e-12:.4g}"

    body = [
        (
            row.result.label,
            f"{row.result.latency_s:.4g}",
            f"{row.result.attention.latency_s:.4g}",
            f"{row.result.linear_latency_s:.4g}",
            x(row.speedup_vs_unfused),
            x(row.speedup_vs_flat),
            joules(row.result.energy_pj),
            pct(row.energy_vs_unfused),
            pct(row.energy_vs_flat),
        )
        for row in rows
    ]
    headers = [
        "config",
        "latency (s)",
        "attention (s)",
        "linear (s)",
        "vs unfused",
        "vs FLAT",
        "energy (J)",
        "E/unfused",
        "E/FLAT",
    ]
    lines = [f"{workload.describe()}: one layer (attention + linear layers)"]
    lines.append(table(headers, body, right=[False] + [True] * (len(headers) - 1)))
    if rows:
        first = rows[0].result
        lines.append(
            f"linear layers: {first.linear.cascade}, {first.linear_spec} mapping "
            f"({len(first.linear.phases)} GEMMs on each design's 2D array, over all its "
            f"cores); energy accounting: {first.energy_accounting}"
        )
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)
