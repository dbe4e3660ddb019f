"""End-to-end encoder layer: a configuration's attention plus the linear layers on its chip.

Pipeline: a driver above :mod:`simulator.configs` (the attention) that plans and prices the
GEMMs with the GEMM mapper and the pricing stage.

The attention comes from the configuration's own mapping (`configs.evaluate`). The linear
layers -- the GEMMs of a linear-layer spec (`mappings/linear/*.yaml`, cascade
`linear-layers`) -- run one after another on the same design: its 2D array, global buffer
and DRAM (the configuration's architecture, with any --pe-dim / --buffer-bytes /
--bandwidth override). Each GEMM is mapped by the GEMM mapper (`plan/mapper.py`) with the
spec's settings; it takes max(compute, DRAM traffic / bandwidth), and its accesses are
priced like the attention's (`pricing/energy.py`). The mapper's energy objective always uses
the architecture's corrected table, so the chosen mappings do not depend on the accounting
that prices them. Layer latency, energy and traffic are the sums of the parts; the area is
the chip's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.cascade.ir import Cascade
from simulator.configs import Sizing, Specs, evaluate, evaluate_each
from simulator.errors import SpecError
from simulator.plan.mapper import GemmMapping, gemm_of, map_gemm, with_gemm
from simulator.plan.views import EinsumView
from simulator.pricing.energy import action_counts, price
from simulator.result import Result
from simulator.spec import expr
from simulator.spec.arch import Architecture
from simulator.spec.linear import LinearSpec
from simulator.spec.tables import EnergyTable
from simulator.spec.workload import FIELDS, Workload
from simulator.textfmt import table
from simulator.timing.options import UNLIMITED, TimingOptions

DEFAULT_LINEAR = "gemm"


@dataclass(frozen=True)
class GemmResult:
    einsum: str
    mapping: GemmMapping
    energy_pj: float | None
    energy_per_component: tuple[tuple[str, float], ...] = ()

    @property
    def latency_s(self) -> float:
        return self.mapping.latency_s

    @property
    def traffic_bytes(self) -> float:
        return self.mapping.traffic_bytes


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
    linear: tuple[GemmResult, ...]
    linear_spec: str
    energy_accounting: str

    @property
    def linear_latency_s(self) -> float:
        return sum(g.latency_s for g in self.linear)

    @property
    def linear_traffic_bytes(self) -> float:
        return sum(g.traffic_bytes for g in self.linear)

    @property
    def linear_energy_pj(self) -> float | None:
        parts = [g.energy_pj for g in self.linear]
        return None if any(p is None for p in parts) else sum(parts)  # type: ignore[misc]


def linear_extents(spec: LinearSpec, workload: Workload) -> dict[str, int]:
    """Rank extents of the linear-layer cascade from the workload (the spec's `shapes:`)."""
    context: dict[str, float] = {f: getattr(workload, f) for f in FIELDS}
    context["seq_len"] = workload.seq_len
    locs = dict(spec.shape_locs)
    out = {}
    for rank, raw in spec.shapes:
        value = expr.as_int(expr.evaluate(raw, context, locs[rank]), f"shape {rank}", locs[rank])
        if value <= 0:
            raise SpecError(f"shape {rank} must be positive, got {value}", locs[rank])
        out[rank] = value
    return out


def evaluate_linear(
    specs: Specs,
    arch: Architecture,
    workload: Workload,
    accounting: str = "corrected",
    linear: str = DEFAULT_LINEAR,
) -> tuple[GemmResult, ...]:
    """Every GEMM of the linear-layer spec, mapped onto `arch` and priced."""
    spec, cascade = specs.linear(linear)
    extents = linear_extents(spec, workload)
    objective = specs.tables(arch, "corrected")
    pricing = specs.tables(arch, accounting)
    results = []
    mapped: dict[tuple, GemmMapping] = {}  # Q, K and V projections share a shape
    for e in cascade.einsums:
        if e.kind != "compute":
            continue
        gemm = gemm_of(cascade, e.name, extents)
        key = (gemm.extents, gemm.instances)
        if key not in mapped:
            mapped[key] = map_gemm(
                gemm, arch, spec.mapper, objective[0] if objective else None, spec.array
            )
        m = mapped[key]
        if m.gemm != gemm:  # same shape, another Einsum: count it under its own names
            m = with_gemm(m, gemm, arch)
        energy, per = _energy(m, arch, cascade, pricing[0] if pricing else None, accounting)
        results.append(GemmResult(e.name, m, energy, per))
    return tuple(results)


def _energy(
    m: GemmMapping,
    arch: Architecture,
    cascade: Cascade,
    ert: EnergyTable | None,
    accounting: str,
) -> tuple[float | None, tuple[tuple[str, float], ...]]:
    if ert is None:
        return None, ()
    g = m.gemm
    view = EinsumView(
        g.einsum,
        m.array,
        m.problem,
        m.levels,
        tuple((ds.name, ds.name) for ds in m.problem.dataspaces),
    )
    counts = action_counts(
        [view],
        arch,
        cascade,
        {g.einsum: math.prod(g.extents)},
        g.copies,
        0.0,
        accounting,
        m.latency_s * arch.frequency_hz,
    )
    report = price(counts, ert, accounting)
    return report.total_pj, report.per_component


def evaluate_layer(
    specs: Specs,
    config: str,
    workload: Workload,
    pe_dim: int | None = None,
    buffer_bytes: int | None = None,
    bandwidth: float | None = None,
    accounting: str = "corrected",
    engine: str = "analytic",
    linear: str = DEFAULT_LINEAR,
    *,
    resize: dict[str, int] | None = None,
    timing: TimingOptions = UNLIMITED,
) -> LayerResult:
    """One encoder layer on one configuration: its attention, then the linear layers on its
    architecture. Latency, energy and traffic add up; the area is the chip's."""
    arch = specs.architecture_of(
        config, workload, Sizing.of(pe_dim, buffer_bytes, bandwidth, resize)
    )
    gemms = evaluate_linear(specs, arch, workload, accounting, linear)
    attention = evaluate(
        specs,
        config,
        workload,
        pe_dim,
        buffer_bytes,
        bandwidth,
        accounting,
        engine,
        resize=resize,
        timing=timing,
    )
    linear_energy = [g.energy_pj for g in gemms]
    energy = (
        None
        if attention.energy_pj is None or any(e is None for e in linear_energy)
        else attention.energy_pj + sum(linear_energy)  # type: ignore[arg-type]
    )
    return LayerResult(
        attention.accelerator,
        attention.label,
        attention.model,
        attention.seq_len,
        attention.latency_s + sum(g.latency_s for g in gemms),
        energy,
        attention.traffic_bytes + sum(g.traffic_bytes for g in gemms),
        attention.area_um2,
        attention,
        gemms,
        linear,
        accounting,
    )


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
    pe_dim: int | None = None,
    buffer_bytes: int | None = None,
    bandwidth: float | None = None,
    accounting: str = "corrected",
    engine: str = "analytic",
    linear: str = DEFAULT_LINEAR,
    timing: TimingOptions = UNLIMITED,
    optional: bool = False,
) -> tuple[list[LayerRow], list[str]]:
    """End-to-end layers of several configurations, with speedups and energy ratios to the
    unfused baseline and FLAT at the same point."""

    def run(config: str) -> LayerResult:
        return evaluate_layer(
            specs,
            config,
            workload,
            pe_dim,
            buffer_bytes,
            bandwidth,
            accounting,
            engine,
            linear,
            timing=timing,
        )

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
        notes += [n for n in r.attention.notes if n not in notes]
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
    lines = [f"{workload.describe()}: encoder layer (attention + linear layers)"]
    lines.append(table(headers, body, right=[False] + [True] * (len(headers) - 1)))
    if rows:
        first = rows[0].result
        lines.append(
            f"linear layers: {first.linear_spec} mapping ({len(first.linear)} GEMMs on each "
            f"design's 2D array); energy accounting: {first.energy_accounting}"
        )
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)
