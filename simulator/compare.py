"""`python -m simulator.compare`: cascades side by side on the same accelerator.

    python -m simulator.compare --cascades attention-1pass,attention-causal-1pass \\
        --arch fusemax --model llama3-8b --seq 128K
    python -m simulator.compare --cascades a.yaml,b.yaml --format csv --out cmp   # + cmp.png/pdf

For every cascade: its passes and largest live footprint (analysis before mapping), then
each binding strategy that applies to it -- FuseMax's on `--arch`, and the FLAT and unfused
baselines on their own architecture (FLAT's) -- bound automatically (:mod:`simulator.bind`)
and evaluated at the workload point: latency, DRAM traffic, utilisation of both arrays,
energy and the share of work a filter skipped. A strategy that does not apply to a cascade
(FuseMax's needs one pass; FLAT's a 3-pass softmax) is left out with the reason.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.cascade.parse import load_cascade
from simulator.cascade.passes import analyze_passes
from simulator.core.result import Result
from simulator.drivers.configs import (
    DEFAULT_MAX_SIM_S,
    EvalOptions,
    Sizing,
    Specs,
    analytic_past_budget,
    check_shape,
    evaluate,
    workload_from_args,
)
from simulator.spec.arch_file import load_architecture
from simulator.spec.ceilings import CEILINGS_HELP, Ceilings, read_ceilings
from simulator.spec.workload import PHASES, Workload
from simulator.support.atomic import check_writable, output_path
from simulator.support.cli import ArgumentParser, guarded
from simulator.support.errors import SimulationLimit, SpecError
from simulator.support.figures import (
    SMALL_PT,
    TEXT_PT,
    WIDE_IN,
    freeze_layout,
    pyplot,
    save_figures,
)
from simulator.support.paths import resolve_spec
from simulator.support.progress import SimulationProgress
from simulator.support.textfmt import table
from simulator.support.units import parse_count, parse_seconds
from simulator.timing.options import TimingOptions

STRATEGIES = ("fused", "fusemax", "flat", "unfused")


@dataclass(frozen=True)
class Row:
    cascade: str
    strategy: str
    passes: int
    footprint: str  # the largest live footprint of any fibre (symbolic)
    result: Result | None
    why: str = ""  # why the strategy does not apply


LOG_SPAN = 100.0  # a panel whose values span more than this gets a logarithmic axis


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m simulator.compare",
        description="Compare cascades (passes, footprint, latency, traffic, utilisation, "
        "energy) on one accelerator, each bound automatically.",
    )
    p.add_argument("--cascades", required=True, help="comma-separated cascade names or files")
    p.add_argument(
        "--arch", default="fusemax", help="the accelerator of the fusemax and fused strategies"
    )
    p.add_argument(
        "--strategies",
        default=",".join(STRATEGIES),
        help=f"binding strategies to try (default: {','.join(STRATEGIES)})",
    )
    p.add_argument("--model", default="bert")
    p.add_argument("--seq", help="sequence length (default 64K; decode: --context)")
    p.add_argument("--phase", choices=PHASES, default="prefill")
    p.add_argument("--context", help="--phase decode: cached tokens")
    p.add_argument(
        "--shape",
        action="append",
        metavar="RANK=N[,RANK=N]",
        help="extents of cascade ranks no workload field sizes (e.g. --shape E=4096,F=14336)",
    )
    for name in ("batch", "heads", "kv-heads", "embed", "window"):
        p.add_argument(f"--{name}", type=lambda t, n=name: parse_count(t, what=f"--{n}"))
    p.add_argument("--engine", choices=["cycle", "analytic"], default="cycle")
    p.add_argument(
        "--max-sim-s",
        type=lambda text: parse_seconds(text, what="--max-sim-s"),
        help="refuse (one line, with the estimate) a cycle simulation that would run longer "
        "than this many seconds per phase (default: past "
        f"{DEFAULT_MAX_SIM_S:g} s, the analytic engine's numbers, with a note)",
    )
    p.add_argument(
        "--ceilings",
        metavar="FILE",
        help=CEILINGS_HELP + " (they apply to --arch: the fused and fusemax strategies)",
    )
    p.add_argument("--precision", help="value format (fp32, fp16, bf16, fp8, int8)")
    p.add_argument("--format", choices=["table", "json", "csv"], default="table")
    p.add_argument("--out", help="draw the comparison to OUT.png and OUT.pdf")
    return p


def _footprint(cascade) -> str:
    """The largest live footprint symbol: a whole rank (`M`) over a chunk (`M0`) over 1."""
    report = analyze_passes(cascade)
    symbols = [f.live_footprint for f in report.fibers]
    whole = [s for s in symbols if s != "1" and not any(ch.isdigit() for ch in s)]
    chunks = [s for s in symbols if s != "1" and s not in whole]
    return (whole or chunks or ["1"])[0]


def compare_cascades(
    cascades: list[str],
    strategies: list[str],
    arch: str,
    workload: Workload,
    sizing: Sizing,
    options: EvalOptions,
    notes: list[str] | None = None,
    ceilings: Ceilings | None = None,
) -> list[Row]:
    """Each cascade bound by each strategy and evaluated on `arch` sized so (a value
    format, `--precision`). `options.timing`: the cycle engine's limit; past it the point
    is refused in one line, or -- with `notes` -- shown with the analytic engine's numbers
    and a note appended there (the default budget's way); `ceilings` (a measured chip's)
    apply to `arch`, the architecture of the fused and fusemax strategies."""
    rows = []
    if any(strategy in ("fusemax", "fused") for strategy in strategies):
        Specs(arch_override=arch).check_arch_override()  # a bad --arch: one line, exit 2
    loaded = [(name, resolve_spec("cascades", name)) for name in cascades]
    check_shape([load_cascade(path) for _n, path in loaded], workload)
    for _name, path in loaded:
        cascade = load_cascade(path)
        passes = analyze_passes(cascade).max_passes
        footprint = _footprint(cascade)
        for strategy in strategies:
            own_arch = strategy in ("fusemax", "fused")
            specs = Specs(
                cascade_override=str(path),
                arch_override=arch if own_arch else None,
                ceilings=ceilings if own_arch else None,
            )
            one = (
                analytic_past_budget(specs, workload, sizing, options, notes)
                if notes is not None
                else (lambda c, s=specs: evaluate(s, c, workload, sizing, options))
            )
            try:
                r = one(f"auto:{strategy}")
            except SimulationLimit:  # --max-sim-s: refused, not a strategy that cannot bind
                raise
            except SpecError as err:  # the strategy's own reason, whatever stage found it
                rows.append(Row(cascade.name, strategy, passes, footprint, None, str(err)))
                continue
            rows.append(Row(cascade.name, strategy, passes, footprint, r))
    if rows and all(row.result is None for row in rows):
        first = rows[0]
        raise SpecError(
            f"no cascade could be bound: {first.cascade} with {first.strategy} -- {first.why}"
            + (f" (and {len(rows) - 1} more)" if len(rows) > 1 else "")
        )
    return rows


def records(rows: list[Row]) -> list[dict]:
    out = []
    for row in rows:
        r = row.result
        out.append(
            {
                "cascade": row.cascade,
                "strategy": row.strategy,
                "passes": row.passes,
                "live_footprint": row.footprint,
                "latency_s": r.latency_s if r else None,
                "traffic_bytes": r.traffic_bytes if r else None,
                "util_2d": r.util_2d if r else None,
                "util_1d": r.util_1d if r else None,
                "energy_pj": r.energy_pj if r else None,
                "skipped_fraction": r.skipped_fraction if r else None,
                "latency_bound_s": r.latency_bound_s if r else None,
                "traffic_bound_bytes": r.traffic_bound_bytes if r else None,
                "fraction_of_bound": r.fraction_of_bound if r else None,
                "bound_binds": r.bound_binds if r else None,
                "not_applicable": row.why or None,
            }
        )
    return out


def render_table(rows: list[Row], workload: Workload) -> str:
    body = []
    for row in rows:
        r = row.result
        if r is None:  # said below the table
            continue
        body.append(
            (
                row.cascade,
                row.strategy,
                str(row.passes),
                row.footprint,
                f"{r.latency_s:.4g}",
                f"{r.traffic_bytes / 1e9:.4g}",
                f"{100 * r.util_2d:.1f}%",
                f"{100 * r.util_1d:.1f}%",
                "-" if r.energy_pj is None else f"{r.energy_pj * 1e-12:.4g}",
                f"{100 * r.skipped_fraction:.1f}%",
                f"{100 * r.fraction_of_bound:.0f}%",
            )
        )
    headers = [
        "cascade",
        "strategy",
        "passes",
        "footprint",
        "latency (s)",
        "DRAM (GB)",
        "util 2D",
        "util 1D",
        "energy (J)",
        "skipped",
        "of bound",
    ]
    lines = [f"{workload.describe()}: cascades compared"]
    lines.append(table(headers, body, right=[False, False] + [True] * (len(headers) - 2)))
    for row in rows:
        if row.why:
            lines.append(f"not bound: {row.cascade} with {row.strategy} -- {row.why}")
    return "\n".join(lines)


def render_csv(recs: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(recs[0]), lineterminator="\n")
    writer.writeheader()
    for rec in recs:
        writer.writerow({k: "" if v is None else v for k, v in rec.items()})
    return buf.getvalue()


def draw(rows: list[Row], workload: Workload, out: Path) -> list[Path]:
    """Grouped bars, one panel per metric (latency, DRAM traffic, energy, 2D utilisation):
    cascades along x, one bar per strategy."""
    plt = pyplot()
    from matplotlib.ticker import EngFormatter, PercentFormatter  # noqa: PLC0415 - drawing only

    cascades = list(dict.fromkeys(r.cascade for r in rows))
    strategies = list(dict.fromkeys(r.strategy for r in rows))
    metrics = [
        ("latency (s)", lambda r: r.latency_s),
        ("DRAM traffic (GB)", lambda r: r.traffic_bytes / 1e9),
        ("energy (J)", lambda r: (r.energy_pj or 0.0) * 1e-12),
        ("2D utilisation", lambda r: r.util_2d),
    ]
    fig, axes = plt.subplots(1, len(metrics), figsize=(WIDE_IN, 3.4), layout="constrained")
    width = 0.8 / max(1, len(strategies))
    colours = plt.get_cmap("tab10")
    labelled = []  # the panels' value labels, thinned out once the layout is done
    for ax, (title, value) in zip(axes, metrics, strict=True):
        bars = []
        for j, strategy in enumerate(strategies):
            xs, ys = [], []
            for i, c in enumerate(cascades):
                row = next((r for r in rows if r.cascade == c and r.strategy == strategy), None)
                if row is not None and row.result is not None:
                    xs.append(i + (j - (len(strategies) - 1) / 2) * width)
                    ys.append(value(row.result))
            bars.append((ax.bar(xs, ys, width, label=strategy, color=colours(j)), ys))
        shown = [y for _, ys in bars for y in ys if y > 0]
        if shown and max(shown) / min(shown) > LOG_SPAN:
            # values three orders apart (38 GB beside 38,000 GB): a logarithmic axis, each
            # bar labelled with its value, so the small ones stay visible and readable
            ax.set_yscale("log")
            ax.set_ylim(top=max(shown) * 40)  # room for the labels above the tallest bars
            title += " (log)"
            for container, ys in bars:
                texts = ax.bar_label(container, [f"{y:.2g}" for y in ys], fontsize=SMALL_PT,
                                     rotation=90, padding=2)  # fmt: skip
                labelled += texts
        ax.set_xticks(range(len(cascades)), cascades, rotation=30, ha="right", fontsize=SMALL_PT)
        ax.tick_params(axis="y", labelsize=SMALL_PT)
        if "utilisation" in title:
            ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
        elif ax.get_yscale() == "linear" and max(shown, default=0) >= 1e4:
            # 2.5 M, not 2.5 under a "1e6" that runs into the title
            ax.yaxis.set_major_formatter(EngFormatter(places=1, sep=" "))
        ax.set_title(title, fontsize=TEXT_PT)
        # linear axes from zero where the values are of one scale: heights compare as the
        # numbers do
        missing = [
            i for i, c in enumerate(cascades)
            if not any(r.cascade == c and r.result is not None for r in rows)
        ]  # fmt: skip
        for i in missing:
            ax.annotate("not bound", (i, 0), ha="center", va="bottom", rotation=90,
                        fontsize=SMALL_PT, color="#888888")  # fmt: skip
    # one legend for the panels, below them: never over a bar
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=SMALL_PT, frameon=False, loc="outside lower center",
               ncol=len(strategies))  # fmt: skip
    fig.suptitle(workload.describe(), fontsize=TEXT_PT)
    for text in labelled:
        text.set_in_layout(False)  # inside the axes: the layout leaves them out
    freeze_layout(fig)  # laid out once: the labels are thinned where they are drawn
    _thin_out(fig, labelled)
    return save_figures(fig, out)


def _thin_out(fig: Any, labels: list[Any]) -> None:
    """Value labels that would overlap one already shown (narrow bars side by side: four
    strategies, several cascades) are hidden, left to right in each panel; the bars and the
    logarithmic axis still show them. Measured on the figure as drawn, after its
    constrained layout."""
    if not labels:
        return
    renderer = fig.canvas.get_renderer()
    shown: list[Any] = []
    for text in sorted(labels, key=lambda t: (id(t.axes), t.xy[0])):
        box = text.get_window_extent(renderer)
        if any(box.overlaps(other) for other in shown):
            text.set_visible(False)
        else:
            shown.append(box)


@guarded
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cascades = [c.strip() for c in args.cascades.split(",") if c.strip()]
    if not cascades:
        raise SpecError("--cascades names no cascade")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    for s in strategies:
        if s not in STRATEGIES:
            raise SpecError(f"--strategies: unknown strategy '{s}' ({', '.join(STRATEGIES)})")
    workload = workload_from_args(args, default_seq="64K")
    out = output_path(args.out, "compare") if args.out else None
    if out is not None:
        for suffix in (".png", ".pdf"):
            check_writable(out.with_name(out.name + suffix))
    ceilings = None
    if args.ceilings:
        if args.precision:
            raise SpecError(
                "--ceilings are the chip's rates in the value format they were measured in: "
                "drop --precision"
            )
        ceilings = read_ceilings(args.ceilings)
        ceilings.apply(load_architecture(resolve_spec("arch", args.arch)))  # one line, first
    limit = DEFAULT_MAX_SIM_S if args.max_sim_s is None else args.max_sim_s
    timing = TimingOptions(max_sim_s=limit, progress=SimulationProgress())
    notes: list[str] | None = [] if args.max_sim_s is None and args.engine == "cycle" else None
    rows = compare_cascades(
        cascades,
        strategies,
        args.arch,
        workload,
        Sizing(precision=args.precision),
        EvalOptions(engine=args.engine, timing=timing),
        notes,
        ceilings,
    )
    for note in notes or ():  # on stderr: the table, JSON or CSV on stdout stay as they are
        print(f"note: {note}", file=sys.stderr)
    recs = records(rows)
    if args.format == "table":
        print(render_table(rows, workload))
    elif args.format == "json":
        print(json.dumps(recs, indent=2))
    else:
        sys.stdout.write(render_csv(recs))
    if out is not None:
        for path in draw(rows, workload, out):
            print(f"figure -> {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
