"""`python -m simulator.run`: compare accelerator configurations on one attention workload.

    python -m simulator.run --model bert --seq 1M
    python -m simulator.run --model xlm --seq 64K --accel flat,fusemax --format json
    python -m simulator.run --heads 32 --embed 128 --seq 16K --pe-dim 128
    python -m simulator.run --mapping my-mapping.yaml --seq 4K     # a user's configuration
    python -m simulator.run --cascade my-cascade.yaml --mapping auto --strategy fusemax
    python -m simulator.run --model llama3-8b --phase decode --context 32K --mapping auto

Each configuration is a mapping file (`mappings/*.yaml`) naming its cascade and
architecture; all of them go through the same model. Speedups are against the unfused
baseline and FLAT at the same point.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import sys
from dataclasses import dataclass

from simulator.core.result import Result
from simulator.drivers.configs import (
    ALIASES,
    DEFAULT_MAX_SIM_S,
    STANDARD,
    EvalOptions,
    Sizing,
    Specs,
    analytic_past_budget,
    auto_name,
    evaluate,
    evaluate_each,
    is_auto,
    parse_auto,
    shipped_configs,
    workload_from_args,
)
from simulator.drivers.endtoend import (
    DEFAULT_LINEAR,
    LayerOptions,
    check_layer_shape,
    compare_layers,
    layer_record,
    render_layer_table,
)
from simulator.mapper.search import DEFAULT_SEARCH_S, OBJECTIVES
from simulator.spec.arch import precision_change
from simulator.spec.ceilings import CEILINGS_HELP, read_ceilings
from simulator.support.cli import ArgumentParser, guarded
from simulator.support.errors import SpecError
from simulator.support.progress import SearchProgress, SimulationProgress
from simulator.support.textfmt import table
from simulator.support.units import (
    format_bytes,
    parse_bandwidth,
    parse_bytes,
    parse_count,
    parse_seconds,
)
from simulator.timeloop import backend as timeloop_backend
from simulator.timing.options import TimingOptions


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m simulator.run",
        description="Latency, speedup, utilisation and DRAM traffic of attention "
        "accelerator configurations at one workload point.",
    )
    p.add_argument(
        "--model",
        default=None,
        help="bert, trxl, t5, xlm, llama3-8b, llama3-70b, mistral-7b or custom (default: bert)",
    )
    p.add_argument(
        "--seq",
        default=None,
        help="sequence length: 1K, 64k, 1M, 1048576 ... (default 1M; decode: --context)",
    )
    p.add_argument(
        "--accel",
        default=None,
        help="comma-separated configurations (default: all shipped: "
        "unfused,flat,cascade,arch,binding; fusemax = binding)",
    )
    p.add_argument(
        "--mapping",
        action="append",
        default=[],
        help="a mapping file to evaluate (repeatable); replaces --accel's default. `auto` "
        "binds the cascade automatically (--strategy); `auto:STRATEGY[/sequential|/no-reuse]`",
    )
    p.add_argument(
        "--strategy",
        default=None,
        help="--mapping auto: the mapper's constraint -- fused (default: none), fusemax, flat "
        "or unfused",
    )
    p.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default=None,
        help="--mapping auto: what the mapper minimises (default latency)",
    )
    p.add_argument(
        "--search-s",
        type=_positive_float("--search-s"),
        default=None,
        help="--mapping auto: the mapper's budget in seconds of evaluations (a fixed count, "
        f"so results do not depend on the machine; default {DEFAULT_SEARCH_S:g})",
    )
    p.add_argument("--arch", help="architecture file replacing each mapping's own")
    p.add_argument("--cascade", help="cascade file replacing each mapping's own")
    p.add_argument("--ceilings", metavar="FILE", help=CEILINGS_HELP)
    p.add_argument("--format", choices=["table", "json", "csv"], default="table")
    for name, help_text in (
        ("batch", "batch size B"),
        ("heads", "heads H"),
        ("embed", "per-head embedding E (= F)"),
        ("ffn", "FFN width S"),
        ("dmodel", "model width D"),
        ("kv-heads", "K/V heads (grouped-query attention; default: the model's)"),
    ):
        p.add_argument(f"--{name}", type=_positive_int(f"--{name}"), help=help_text)
    p.add_argument(
        "--window",
        type=_window,
        help="sliding-window width in tokens, causal (default: the model's; 0: no window)",
    )
    p.add_argument(
        "--causal",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a causal mask (default: the model's: the LLMs are causal, the paper's encoders not)",
    )
    p.add_argument(
        "--phase",
        choices=["prefill", "decode"],
        default="prefill",
        help="prefill (default): the sequence attends to itself; decode: one new token per "
        "request attends to --context cached tokens",
    )
    p.add_argument("--context", help="--phase decode: cached tokens (default: --seq)")
    p.add_argument(
        "--shape",
        action="append",
        metavar="RANK=N[,RANK=N]",
        help="extents of cascade ranks no workload field sizes (e.g. --shape E=4096,F=14336)",
    )
    p.add_argument(
        "--precision",
        help="value format: fp32, fp16, bf16, fp8, int8 (those the architecture lists with "
        "a MAC cost; default: its own, fp16 for the shipped designs)",
    )
    p.add_argument(
        "--value-bits",
        type=_positive_int("--value-bits"),
        help="value width in bits (the architecture's format of that width)",
    )
    p.add_argument(
        "--pe-dim",
        type=_positive_int("--pe-dim"),
        help="PE array dimension: 2D arrays become N x N, 1D arrays N",
    )
    p.add_argument("--buffer-bytes", type=_bytes, help="global buffer size (e.g. 8MiB; 8MB = 8e6)")
    p.add_argument(
        "--bandwidth", type=_bandwidth, help="DRAM bandwidth in bytes/s (e.g. 400GiB or 4.3e11)"
    )
    p.add_argument(
        "--accounting",
        choices=["corrected", "published"],
        default="corrected",
        help="energy accounting: corrected (default) or the FuseMax artifact's (published)",
    )
    p.add_argument("--breakdown", action="store_true", help="energy per component (table format)")
    p.add_argument(
        "--engine",
        choices=["cycle", "analytic"],
        default="cycle",
        help="timing: the cycle-level simulator (default) or the analytic schedule model",
    )
    p.add_argument(
        "--max-sim-s",
        type=_seconds,
        help="refuse (one line, with the estimate) a cycle simulation that would run longer "
        "than this many seconds per phase; long ones show a progress bar (default: past "
        f"{DEFAULT_MAX_SIM_S:g} s, the analytic engine's numbers, with a note)",
    )
    p.add_argument(
        "--backend",
        choices=["model", "timeloop"],
        default="model",
        help="timeloop: also run timeloop-model on every Einsum's exported inputs and "
        "compare its cycles, accesses and energy with this model's (needs timeloop-model)",
    )
    p.add_argument(
        "--timeloop-version",
        metavar="VERSION",
        help="--backend timeloop: the installed Timeloop release, for its input spelling "
        "(3.0.3 or earlier: 'data-spaces'; default: the current 'data_spaces')",
    )
    p.add_argument(
        "--scope",
        choices=["attention", "layer"],
        default="attention",
        help="attention alone (default) or the encoder layer: attention + linear layers",
    )
    p.add_argument(
        "--linear",
        default=None,
        help="--scope layer: linear-layer spec, mappings/linear/NAME.yaml or a file "
        "(default: gemm; artifact = the FuseMax artifact's mapper constraints)",
    )
    return p


def _positive_int(option: str):
    """An argparse type: a positive count, errors naming the option."""

    def parse(text: str) -> int:
        return parse_count(text, what=option)

    return parse


def _window(text: str) -> int:
    """--window: a width in tokens, or 0 for none."""
    if text.strip() == "0":
        return 0
    return parse_count(text, what="--window")


def _bytes(text: str) -> int:
    return parse_bytes(text, what="--buffer-bytes")


def _seconds(text: str) -> float:
    return parse_seconds(text, what="--max-sim-s")


def _positive_float(option: str):
    """An argparse type: a positive number of seconds, errors naming the option."""

    def parse(text: str) -> float:
        return parse_seconds(text, what=option)

    return parse


def timing_options(args: argparse.Namespace) -> TimingOptions:
    """The cycle engine's wall-clock limit and progress bars, from the command line."""
    limit = args.max_sim_s if args.max_sim_s is not None else DEFAULT_MAX_SIM_S
    return TimingOptions(max_sim_s=limit, progress=SimulationProgress())


def _bandwidth(text: str) -> float:
    return parse_bandwidth(text, what="--bandwidth")


@dataclass(frozen=True)
class Row:
    result: Result
    speedup_vs_unfused: float | None
    speedup_vs_flat: float | None
    energy_vs_unfused: float | None = None  # this energy / the baseline's
    energy_vs_flat: float | None = None
    # The workload's bounds -- the least of the configurations' own floors, so that no
    # configuration of the point beats them (None: the configuration's own)
    latency_bound_s: float | None = None
    traffic_bound_bytes: float | None = None

    @property
    def bound_s(self) -> float:
        r = self.result
        return r.latency_bound_s if self.latency_bound_s is None else self.latency_bound_s

    @property
    def fraction_of_bound(self) -> float:
        r = self.result
        return self.bound_s / r.latency_s if r.latency_s else 1.0


def masked_work(r: Result) -> float:
    """The share of the points a configuration computes that its filters mask out (a
    library's GEMM computes whole tiles: unfused attention computes the masked scores)."""
    points = sum(c.points for c in r.einsums if c.useful_points is not None)
    useful = sum(c.useful_points for c in r.einsums if c.useful_points is not None)
    return 1 - useful / points if points else 0.0


def compare(
    specs: Specs,
    configs: list[str],
    workload,
    sizing: Sizing | None = None,
    options: EvalOptions | None = None,
    optional: bool = False,
    fallback: bool = False,
) -> tuple[list[Row], list[str]]:
    """Evaluate configurations, their speedups and energy ratios to unfused and FLAT.
    `optional`: the configurations are the default set, and one that cannot run the point
    is left out with a note instead of stopping the others. `fallback`: a configuration
    whose cycle simulation outruns the time limit shows its analytic numbers, noted."""
    sizing = sizing or Sizing()
    options = options or EvalOptions(engine="cycle")
    budget_notes: list[str] = []
    one = (
        analytic_past_budget(specs, workload, sizing, options, budget_notes)
        if fallback
        else (lambda c: evaluate(specs, c, workload, sizing, options))
    )
    results, failed, notes = evaluate_each(configs, one, optional)
    notes = [*budget_notes, *notes]
    baselines: dict[str, Result | None] = {}
    # Automatically bound configurations compare with the baselines bound the same way;
    # the paper's configurations with the paper's baselines.
    auto = any(is_auto(c) for c in configs) or workload.phase == "decode"
    for base in ("unfused", "flat"):
        config = f"auto:{base}" if auto else base
        name = auto_name(config) if auto else base
        found = next((r for r in results if r.accelerator in (base, name)), None)
        if (
            found is None
            and config not in failed
            and specs.cascade_override is None
            and (specs.arch_override is None or auto)
        ):
            try:
                found = one(config)
            except SpecError as err:
                notes.append(f"no {base} baseline at this point: {err}")
            notes += [n for n in budget_notes if n not in notes]
        baselines[base] = found
    rows = []
    for r in results:
        unfused, flat = baselines["unfused"], baselines["flat"]
        rows.append(
            Row(
                r,
                _ratio(unfused, r),
                _ratio(flat, r),
                _energy_ratio(r, unfused),
                _energy_ratio(r, flat),
            )
        )
        notes += [n for n in r.notes if n not in notes]
    for b in baselines.values():
        if b is not None:
            notes += [n for n in b.notes if n not in notes]
    if rows:
        least = min(row.result.latency_bound_s for row in rows)
        least_traffic = min(row.result.traffic_bound_bytes for row in rows)
        rows = [
            dataclasses.replace(row, latency_bound_s=least, traffic_bound_bytes=least_traffic)
            for row in rows
        ]
    for row in rows:
        r = row.result
        masked = masked_work(r)
        if masked > 0.005 and r.skipped_fraction < 0.005:
            notes.append(
                f"{r.label} computes the masked-out scores too: {masked:.0%} of the points it "
                "computes are masked (its kernels compute whole tiles); of bound counts only "
                "the useful work"
            )
    return rows, merged_notes(notes)


def merged_notes(notes: list[str]) -> list[str]:
    """Notes that say the same of several configurations (`auto:flat: the cycle engine
    simulates one core ...` for each of three) as one, naming them all."""
    out: list[str] = []
    said: dict[str, int] = {}
    for note in notes:
        config, sep, message = note.partition(": ")
        if not sep or " " in config or not message:
            out.append(note)
            continue
        if message in said:
            i = said[message]
            head, _, rest = out[i].partition(": ")
            out[i] = f"{head}, {config}: {rest}"
            continue
        said[message] = len(out)
        out.append(note)
    return out


def _ratio(base: Result | None, r: Result) -> float | None:
    return base.latency_s / r.latency_s if base is not None and r.latency_s > 0 else None


def _energy_ratio(r: Result, base: Result | None) -> float | None:
    if base is None or r.energy_pj is None or not base.energy_pj:
        return None
    return r.energy_pj / base.energy_pj


def record(row: Row) -> dict:
    r = row.result
    return {
        "accelerator": r.accelerator,
        "label": r.label,
        "cascade": r.cascade,
        "model": r.model,
        "seq_len": r.seq_len,
        "latency_s": r.latency_s,
        "traffic_bytes": r.traffic_bytes,
        "util_2d": r.util_2d,
        "util_1d": r.util_1d,
        "util_2d_per_einsum": r.util_2d_per_einsum(),
        "einsums": [
            {"einsum": e, "array": a, "cycles_per_point": cpp, "share_of_time": share}
            for e, a, cpp, share in r.einsum_shares()
        ],
        "dominant_einsum": (r.dominant_einsum() or (None,))[0],
        "skipped_fraction": r.skipped_fraction,
        # the workload's bounds (no configuration of the point beats them), and apart each
        # configuration's own floor (its cascade's useful work on its own chip)
        "latency_bound_s": row.bound_s,
        "traffic_bound_bytes": r.traffic_bound_bytes
        if row.traffic_bound_bytes is None
        else row.traffic_bound_bytes,
        "fraction_of_bound": row.fraction_of_bound,
        "own_latency_bound_s": r.latency_bound_s,
        "own_traffic_bound_bytes": r.traffic_bound_bytes,
        "masked_work": masked_work(r),
        "bound_binds": r.bound_binds,
        "speedup_vs_unfused": row.speedup_vs_unfused,
        "speedup_vs_flat": row.speedup_vs_flat,
        "energy_pj": r.energy_pj,
        "energy_vs_unfused": row.energy_vs_unfused,
        "energy_vs_flat": row.energy_vs_flat,
        "energy_accounting": r.energy_accounting,
        "energy_per_component_pj": dict(r.energy_per_component),
        "energy_parts_pj": {
            c: {"dynamic": dyn, "drain_reads": drain, "leakage": leak}
            for c, dyn, drain, leak in r.energy_parts
        },
        "area_um2": r.area_um2,
        "cycles": r.cycles,
        "engine": r.engine,
        "stall_cycles": {f"{a}:{why}": n for a, why, n in r.stalls},
        "util": dict(r.util),
        "factors": dict(r.factors),
        "phases": [
            {
                "name": p.name,
                "latency_s": p.latency_s,
                "compute_s": p.compute_s,
                "memory_s": p.memory_s,
                "traffic_bytes": p.traffic_bytes,
                "buffer_bytes": p.buffer_bytes,
            }
            for p in r.phases
        ],
        "traffic_per_tensor": {
            t.tensor: {
                "read_bytes": t.read_bytes,
                "write_bytes": t.write_bytes,
                "spill_bytes": t.spill_bytes,
            }
            for t in r.tensors
        },
        "search": search_record(r),
        # Timeloop's statistics: per Einsum, tensor and level, in values over the run
        "accesses": [
            {
                "einsum": a.einsum,
                "tensor": a.tensor,
                "level": a.level,
                "reads": a.reads,
                "fills": a.fills,
                "updates": a.updates,
            }
            for a in r.accesses
        ],
    }


def search_record(r: Result) -> dict | None:
    """How the mapper found an automatic configuration's mapping (None: a mapping file)."""
    s = r.search
    if s is None:
        return None
    return {
        "strategy": s.strategy,
        "objective": s.objective,
        "found": s.found,
        "space": s.space,
        "evaluated": s.evaluated,
        "infeasible": s.infeasible,
        "pruned": s.pruned,
        "unevaluated": s.unevaluated,
        "budget": s.budget,
        "latency_bound_s": s.bound_s,
        "distance_to_bound": s.distance,
        "search_s": s.seconds,
        "cached": s.cached,
    }


def search_line(r: Result) -> str | None:
    """One line saying what the mapper searched and found (table output)."""
    s = r.search
    if s is None:
        return None
    time = "reused from the cache" if s.cached else f"{s.seconds:.2f} s"
    left = (
        f", {s.unevaluated} not evaluated within the budget (raise --search-s)"
        if s.unevaluated
        else ""
    )
    return (
        f"{r.label}: the mapper ({s.strategy} strategy, {s.objective}) found {s.found}: "
        f"{s.distance:.1%} above the latency bound {s.bound_s:.4g} s; {s.evaluated} of "
        f"{s.space} candidates evaluated ({s.infeasible} did not fit or run), {s.pruned} "
        f"pruned{left}; {time}"
    )


def _fmt_x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def render_breakdown(rows: list[Row]) -> str:
    """Energy per component (pJ) of every configuration, and its share."""
    lines = []
    for row in rows:
        r = row.result
        if r.energy_pj is None:
            continue
        lines.append("")
        lines.append(f"{r.label}: energy by component ({r.energy_accounting} accounting)")
        # Timeloop's dynamic energy, then the terms the corrected accounting adds to it:
        # reads of values drained to a parent level, and leakage.
        parts = {c: (dyn, drain, leak) for c, dyn, drain, leak in r.energy_parts}
        body = []
        for name, pj in sorted(r.energy_per_component, key=lambda x: -x[1]):
            dyn, drain, leak = parts.get(name, (pj, 0.0, 0.0))
            body.append(
                (
                    name,
                    f"{dyn:.4g}",
                    f"{drain:.4g}",
                    f"{leak:.4g}",
                    f"{pj:.4g}",
                    f"{100 * pj / r.energy_pj:.1f}%",
                )
            )
        sums = [sum(v[i] for v in parts.values()) for i in range(3)]
        body.append(("total", *(f"{s:.4g}" for s in sums), f"{r.energy_pj:.4g}", "100.0%"))
        lines.append(
            table(
                [
                    "component",
                    "dynamic (pJ)",
                    "drain reads (pJ)",
                    "leakage (pJ)",
                    "energy (pJ)",
                    "share",
                ],
                body,
                [False, True, True, True, True, True],
            )
        )
        if r.accesses:
            lines.append("")
            lines.append(render_accesses(r))
    return "\n".join(lines)


LEVEL_ORDER = {"DRAM": 0, "buffer": 1, "registers": 2}


def render_accesses(r: Result) -> str:
    """Reads, fills and updates per tensor at each level (values, summed over the Einsums
    that touch it; per Einsum in the JSON), as Timeloop reports them."""
    totals: dict[tuple[str, str], list[float]] = {}
    users: dict[tuple[str, str], set[str]] = {}
    for a in r.accesses:
        key = (a.tensor, a.level)
        t = totals.setdefault(key, [0.0, 0.0, 0.0])
        t[0], t[1], t[2] = t[0] + a.reads, t[1] + a.fills, t[2] + a.updates
        users.setdefault(key, set()).add(a.einsum)
    body = [
        (tensor, level, f"{v[0]:.4g}", f"{v[1]:.4g}", f"{v[2]:.4g}", len(users[(tensor, level)]))
        for (tensor, level), v in sorted(
            totals.items(), key=lambda kv: (kv[0][0], LEVEL_ORDER.get(kv[0][1], 9))
        )
    ]
    head = f"{r.label}: accesses per tensor and level (values; per Einsum in --format json)"
    return (
        head
        + "\n"
        + table(
            ["tensor", "level", "reads", "fills", "updates", "Einsums"],
            body,
            [False, False, True, True, True, True],
        )
    )


def ran(rows: list[Row]) -> str:
    """The cascades that ran and the configurations that ran each: `attention-1pass
    (+Cascade, +Binding), attention-3pass (Unfused, FLAT)`."""
    by: dict[str, list[str]] = {}
    for row in rows:
        by.setdefault(row.result.cascade, []).append(row.result.label)
    return ", ".join(f"{c} ({', '.join(labels)})" for c, labels in by.items())


def render_table(rows: list[Row], notes: list[str], workload) -> str:
    lines = [f"{workload.describe()}: {ran(rows)}"]
    body = []
    for row in rows:
        r = row.result
        body.append(
            (
                r.label,
                f"{r.latency_s:.4g}",
                _fmt_x(row.speedup_vs_unfused),
                _fmt_x(row.speedup_vs_flat),
                f"{100 * r.util_2d:.1f}%",
                f"{100 * r.util_1d:.1f}%",
                format_bytes(r.traffic_bytes),
                "-" if r.energy_pj is None else f"{r.energy_pj * 1e-12:.4g}",
                _fmt_pct(row.energy_vs_unfused),
                _fmt_pct(row.energy_vs_flat),
                "-" if r.area_um2 is None else f"{r.area_um2 * 1e-6:.1f}",
                f"{100 * row.fraction_of_bound:.0f}%",
                r.bound_binds,
            )
        )
    lines.append(
        table(
            [
                "config",
                "latency (s)",
                "vs unfused",
                "vs FLAT",
                "util 2D",
                "util 1D",
                "DRAM traffic",
                "energy (J)",
                "E/unfused",
                "E/FLAT",
                "area (mm2)",
                "of bound",
                "bound by",
            ],
            body,
            right=[False] + [True] * 11 + [False],
        )
    )
    if rows:
        own = ", ".join(f"{row.result.label} {row.result.latency_bound_s:.4g} s" for row in rows)
        lines.append(
            f"of bound: the workload's latency bound {rows[0].bound_s:.4g} s (the least of "
            f"the configurations' own floors -- {own}) over the latency; bound by: what sets "
            "each configuration's own floor"
        )
    einsums: list[str] = []
    per = []
    for row in rows:
        shares = row.result.util_2d_per_einsum()
        per.append(shares)
        einsums += [e for e in shares if e not in einsums]
    if einsums:
        lines.append("")
        lines.append("2D-array utilisation per Einsum (share of total time)")
        lines.append(
            table(
                ["config", *einsums],
                [
                    (row.result.label, *[f"{100 * s[e]:.1f}%" if e in s else "-" for e in einsums])
                    for row, s in zip(rows, per, strict=True)
                ],
                right=[False] + [True] * len(einsums),
            )
        )
    lines.append("")
    lines.append(
        "Einsums: array, PE cycles per point, share of the run its array spends on it "
        "(* the largest)"
    )
    for row in rows:
        r = row.result
        top = r.dominant_einsum()
        cells = [
            f"{'*' if top and e == top[0] else ''}{e} {a} {cpp:g} {100 * share:.0f}%"
            for e, a, cpp, share in r.einsum_shares()
        ]
        lines.append(f"  {r.label}: " + ", ".join(cells))
    searched = [line for row in rows if (line := search_line(row.result))]
    if searched:
        lines.append("Mappings found by the mapper")
        lines += [f"  {line}" for line in searched]
    accountings = sorted({row.result.energy_accounting for row in rows} - {""})
    if accountings:
        lines.append(
            f"energy accounting: {', '.join(accountings)} (--accounting published "
            "reproduces the FuseMax artifact's)"
        )
    for note in notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


# The CSV names a quantity as the sweep's CSV does (simulator.drivers.design_space's columns): the
# JSON record's `accelerator` and `seq_len` are its `accel` and `seq`.
CSV_NAMES = {"accelerator": "accel", "seq_len": "seq"}


def render_csv(records: list[dict]) -> str:
    """One row per configuration, its columns named as in a sweep's CSV. The bounds are the
    configuration's own, as in a sweep's row (the JSON's `own_*`: its cascade's useful work
    on its own chip)."""
    einsums: list[str] = []
    for rec in records:
        einsums += [e for e in rec["util_2d_per_einsum"] if e not in einsums]
    columns = [
        "accelerator",
        "label",
        "model",
        "seq_len",
        "latency_s",
        "traffic_bytes",
        "util_2d",
        "util_1d",
        "speedup_vs_unfused",
        "speedup_vs_flat",
        "energy_pj",
        "energy_vs_unfused",
        "energy_vs_flat",
        "area_um2",
    ]
    bounds = ["latency_bound_s", "traffic_bound_bytes", "fraction_of_bound", "bound_binds"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [CSV_NAMES.get(c, c) for c in columns] + bounds + [f"util_2d_{e}" for e in einsums]
    )
    for rec in records:
        own = rec["own_latency_bound_s"]
        fraction = own / rec["latency_s"] if rec["latency_s"] else 1.0
        writer.writerow(
            [_csv(rec[c]) for c in columns]
            + [_csv(v) for v in (own, rec["own_traffic_bound_bytes"], fraction)]
            + [_csv(rec["bound_binds"])]
            + [_csv(rec["util_2d_per_einsum"].get(e, 0.0)) for e in einsums]
        )
    return out.getvalue().rstrip("\n")


def _csv(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


@guarded
def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m simulator.run`."""
    args = build_parser().parse_args(argv)
    workload = workload_from_args(args)
    specs = Specs(
        cascade_override=args.cascade,
        arch_override=args.arch,
        objective=args.objective or "latency",
        search_s=DEFAULT_SEARCH_S if args.search_s is None else args.search_s,
        progress=SearchProgress(),
        ceilings=read_ceilings(args.ceilings) if args.ceilings else None,
    )
    if args.ceilings and (args.precision or args.value_bits):
        raise SpecError(
            "--ceilings are the chip's rates in the value format they were measured in: "
            "drop --precision / --value-bits"
        )
    if args.strategy is not None and "auto" not in args.mapping:
        raise SpecError("--strategy chooses how --mapping auto binds: add --mapping auto")
    if args.mapping and args.accel is not None:
        raise SpecError(
            "--accel and --mapping both choose the configurations: give one (--mapping FILE "
            "or auto[:STRATEGY], --accel NAMES)"
        )
    if args.linear is not None and args.scope != "layer":
        raise SpecError("--linear maps a layer's linear layers: add --scope layer")
    if args.mapping:
        configs = [
            f"auto:{args.strategy}" if m == "auto" and args.strategy else m for m in args.mapping
        ]
        for c in configs:
            if is_auto(c):
                parse_auto(c)  # a bad strategy or option: one line before any work
    elif args.accel is not None:
        configs = [ALIASES.get(c.strip(), c.strip()) for c in args.accel.split(",") if c.strip()]
        if not configs:
            raise SpecError(f"--accel '{args.accel}' names no configuration")
        known = shipped_configs()
        for c in configs:
            if c not in known:
                raise SpecError(
                    f"--accel: unknown configuration '{c}' (known: {', '.join(known)}, fusemax)"
                )
    elif workload.phase == "decode" or not all(
        specs.runs_model_attention(c, workload) and specs.binds_on(c)
        for c in shipped_configs()
        if c in STANDARD
    ):
        # The paper's configurations are prefill mappings of multi-head attention without a
        # mask on FuseMax's and FLAT's arrays: decode, a model with another attention, and
        # another chip (--arch) bind automatically (the model's own cascade for each
        # strategy).
        configs = ["auto:unfused", "auto:flat", "auto:fusemax"]
    else:
        configs = shipped_configs()
    if args.scope == "layer":
        check_layer_shape(specs, configs, workload, args.linear or DEFAULT_LINEAR)
    else:
        specs.check_shape(configs, workload)
    specs.check_cascade_override(workload)  # the header names what the numbers compute
    # The default set: a configuration that cannot run this point is left out with a note.
    optional = not args.mapping and args.accel is None
    if args.precision and args.value_bits:
        raise SpecError("--precision and --value-bits both choose the value format: give one")
    precision = args.precision or args.value_bits
    if args.scope == "layer":
        if args.breakdown:
            raise SpecError(
                "--breakdown shows attention's energy per component: use --scope attention"
            )
        if args.backend == "timeloop":
            raise SpecError("--backend timeloop compares attention Einsums: use --scope attention")
        return _print_layer(args, specs, configs, workload, optional, precision)
    timeloop = None
    if args.backend == "timeloop":
        if args.format == "csv":
            raise SpecError("--backend timeloop prints a table or JSON, not CSV")
        timeloop = timeloop_backend.find_timeloop()  # before any work: one line if absent
        timeloop_backend.timeloop_spelling(args.timeloop_version)  # a bad version: one line
    elif args.timeloop_version is not None:
        raise SpecError("--timeloop-version goes with --backend timeloop")
    rows, notes = compare(
        specs,
        configs,
        workload,
        Sizing.of(args.pe_dim, args.buffer_bytes, args.bandwidth, precision=precision),
        EvalOptions(args.accounting, args.engine, timing_options(args)),
        optional,
        fallback=args.max_sim_s is None and args.engine == "cycle",
    )
    check_searched(args, any(row.result.search is not None for row in rows))
    if precision is not None:
        notes = [*_precision_notes(specs, configs, workload, args, precision), *notes]
    checks = []
    if timeloop is not None:
        checks = timeloop_backend.compare_configurations(
            timeloop,
            specs,
            configs,
            workload,
            args.timeloop_version,
            pe_dim=args.pe_dim,
            buffer_bytes=args.buffer_bytes,
            bandwidth=args.bandwidth,
        )
    if args.format == "table":
        print(render_table(rows, notes, workload))
        if args.breakdown:
            print(render_breakdown(rows))
        if timeloop is not None:
            print(timeloop_backend.render(checks))
        return 0
    records = [record(r) for r in rows]
    if timeloop is not None:
        per = timeloop_backend.records(checks)
        for rec in records:
            rec["timeloop"] = [c for c in per if c["configuration"] == rec["accelerator"]]
    if args.format == "json":
        print(json.dumps(records, indent=2, sort_keys=False))
    else:
        print(render_csv(records))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def check_searched(args: argparse.Namespace, searched: bool) -> None:
    """`--objective` and `--search-s` steer the mapper: a run that searches for no mapping
    (every configuration a mapping file that covers the point) refuses them in one line."""
    given = [
        flag
        for flag, value in (("--objective", args.objective), ("--search-s", args.search_s))
        if value is not None
    ]
    if given and not searched:
        raise SpecError(
            f"{' and '.join(given)} {'steer' if len(given) > 1 else 'steers'} the mapper's "
            "search, and no configuration of this "
            "run is searched (each is a mapping file): add --mapping auto[:STRATEGY]"
        )


def _precision_notes(specs: Specs, configs: list[str], workload, args, precision) -> list[str]:
    """What the value format changed, once per architecture."""
    out: list[str] = []
    for config in configs:
        before = specs.architecture_of(config, workload, Sizing.of(args.pe_dim, args.buffer_bytes))
        after = specs.architecture_of(
            config, workload, Sizing.of(args.pe_dim, args.buffer_bytes, precision=precision)
        )
        note = f"{before.name}: {precision_change(before, after)}"
        if note not in out:
            out.append(note)
    return out


def _print_layer(
    args: argparse.Namespace,
    specs: Specs,
    configs: list[str],
    workload,
    optional: bool,
    precision: str | int | None,
) -> int:
    rows, notes = compare_layers(
        specs,
        configs,
        workload,
        Sizing.of(args.pe_dim, args.buffer_bytes, args.bandwidth, precision=precision),
        LayerOptions(
            args.accounting,
            args.engine,
            args.linear or DEFAULT_LINEAR,
            timing_options(args),
            fallback=args.max_sim_s is None and args.engine == "cycle",
        ),
        optional,
    )
    check_searched(args, any(row.result.attention.search is not None for row in rows))
    notes = merged_notes(notes)
    if precision is not None:
        notes = [*_precision_notes(specs, configs, workload, args, precision), *notes]
    if args.format == "table":
        print(render_layer_table(rows, notes, workload))
        return 0
    records = [layer_record(r) for r in rows]
    if args.format == "json":
        print(json.dumps(records, indent=2))
    else:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([CSV_NAMES.get(c, c) for c in records[0]])
        for rec in records:
            writer.writerow([_csv(v) for v in rec.values()])
        print(out.getvalue().rstrip("\n"))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
