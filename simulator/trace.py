"""`python -m simulator.trace`: the waterfall of a pipelined binding, epoch by epoch.

Pipeline: a command-line tool; plans a point (:mod:`simulator.plan.point`) and runs the
cycle engine's waterfall with tracing on.

Simulates one (batch, head) instance of a configuration's pipelined phase with the cycle
engine and draws the first `--epochs` epochs like the FuseMax paper's figure 4: one row per
array, each operation a bar from its start to the end of its issue, coloured by epoch and
labelled with its Einsum. `--csv` writes the per-cycle activity (what each array runs in
every cycle) of the same window. Also prints the stall breakdown of the whole phase.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from dataclasses import dataclass
from pathlib import Path

from simulator.core.bounds import point_bounds
from simulator.drivers.configs import ALIASES, Specs, prepare
from simulator.plan.point import plan_point
from simulator.spec.mapping import Mapping
from simulator.spec.workload import Workload, make_workload
from simulator.support.atomic import check_writable, output_path, write_text
from simulator.support.cli import ArgumentParser, guarded
from simulator.support.errors import BoundBreach, SpecError
from simulator.support.figures import SMALL_PT, TEXT_PT, WIDE_IN, pyplot
from simulator.support.units import parse_count
from simulator.timing.cycle.program import Program
from simulator.timing.cycle.simulate import pipelined_point
from simulator.timing.cycle.waterfall import TraceEvent, Waterfall, WaterfallResult


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m simulator.trace", description=__doc__.splitlines()[0])
    p.add_argument("--accel", default="binding", help="a configuration with a pipelined phase")
    p.add_argument("--mapping", help="a mapping file instead of --accel")
    p.add_argument("--model", default="bert")
    p.add_argument("--seq", default="4K", help="sequence length (e.g. 4K)")
    p.add_argument("--epochs", type=lambda t: parse_count(t, what="--epochs"), default=6)
    p.add_argument("--pe-dim", type=lambda t: parse_count(t, what="--pe-dim"))
    p.add_argument("--out", help="waterfall picture (.png, .pdf, .svg)")
    p.add_argument("--csv", help="per-cycle activity of the traced epochs")
    return p


@dataclass(frozen=True)
class Trace:
    """One instance of a configuration's pipelined phase, simulated with a traced window."""

    result: WaterfallResult
    arrays: list[str]  # the arrays the phase uses, in the architecture's order
    events: list[TraceEvent]  # the traced epochs' operations, by start cycle
    mapping: Mapping
    program: Program


def trace_point(
    specs: Specs, config: str, workload: Workload, epochs: int, pe_dim: int | None = None
) -> Trace:
    """Simulate one (batch, head) instance of `config`'s pipelined phase, tracing the first
    `epochs` epochs (the workload should have batch = heads = 1)."""
    cascade, mapping, arch = prepare(specs, config, workload, pe_dim=pe_dim)
    point = plan_point(cascade, mapping, arch, workload)
    program = pipelined_point(point).program
    r = Waterfall(program, trace_epochs=epochs).run()
    if len(point.phases) == 1:  # the traced phase is the whole point: within its bound
        bound = point_bounds(point).latency_s * arch.frequency_hz / point.instances
        if r.cycles < bound * (1 - 1e-9):
            raise BoundBreach(
                f"{mapping.label} ({mapping.name}) on {workload.describe()}: the traced "
                f"instance takes {r.cycles} cycles, below its bound of {bound:.6g} -- a bug "
                "of the tool, not a result; please report it with this command line"
            )
    arrays = [a.name for a in arch.arrays if any(s.array == a.name for s in program.ops)]
    events = sorted(r.trace, key=lambda e: (e.start, e.array))
    return Trace(r, arrays, events, mapping, program)


def activity_rows(events: list[TraceEvent], arrays: list[str]) -> list[list[str]]:
    """One row per cycle: the operation (Einsum@epoch) each array issues, or idle."""
    end = max((e.end for e in events), default=0)
    grid = {a: ["idle"] * end for a in arrays}
    for ev in events:
        for cycle in range(ev.start, ev.end):
            grid[ev.array][cycle] = f"{ev.einsum}@{ev.epoch}"
    return [[str(c)] + [grid[a][c] for a in arrays] for c in range(end)]


def plot_waterfall(
    ax, events: list[TraceEvent], arrays: list[str], end: int | None = None, cmap: str = "tab10"
):
    """Draw the events on a matplotlib axis, one row per array, coloured by epoch; returns
    the legend handles and labels (one per epoch). `end` fixes the cycle window."""
    plt = pyplot()

    epochs = sorted({e.epoch for e in events})
    colours = plt.get_cmap(cmap)
    n = colours.N
    end = end if end is not None else max((e.end for e in events), default=1)
    for row, array in enumerate(arrays):
        for ev in (e for e in events if e.array == array and e.start < end):
            colour = colours(epochs.index(ev.epoch) % n)
            ax.broken_barh(
                [(ev.start, ev.end - ev.start)],
                (row - 0.4, 0.8),
                facecolors=colour,
                edgecolors="black",
                linewidth=0.4,
            )
            if ev.end - ev.start >= end / 60:  # room for a 7 pt label at 7 in
                ax.text(
                    (ev.start + ev.end) / 2,
                    row,
                    ev.einsum,
                    ha="center",
                    va="center",
                    fontsize=SMALL_PT,
                    rotation=90 if ev.end - ev.start < end / 40 else 0,
                    clip_on=True,
                )
    ax.set_yticks(range(len(arrays)), arrays)
    ax.set_ylim(len(arrays) - 0.5, -0.5)
    ax.set_xlim(0, end)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours(i % n)) for i in range(len(epochs))]
    return handles, [f"epoch {e}" for e in epochs]


LEGEND_EPOCHS = 16


def draw(events: list[TraceEvent], arrays: list[str], title: str, path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(WIDE_IN, 1.6 + 0.7 * len(arrays)))
    handles, labels = plot_waterfall(ax, events, arrays, cmap="tab20")
    # the legend names the first epochs' colours (they repeat): a long trace keeps it short
    repeat = " (colours repeat every 20 epochs)" if len(labels) > 20 else ""  # tab20
    handles, labels = handles[:LEGEND_EPOCHS], labels[:LEGEND_EPOCHS]
    ax.set_xlabel("cycle" + repeat, fontsize=TEXT_PT)
    ax.tick_params(axis="both", labelsize=SMALL_PT)
    ax.set_title(title, fontsize=TEXT_PT)
    ax.legend(
        handles,
        labels,
        fontsize=SMALL_PT,
        ncol=min(len(labels), 6),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35),
        frameon=False,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def render_summary(r: WaterfallResult, arrays: list[str], epochs: int) -> str:
    lines = [
        f"{r.cycles} cycles for {r.epochs} epoch{'s' if r.epochs != 1 else ''} of one instance "
        + (
            f"({r.simulated_epochs} simulated, the rest extrapolated)"
            if r.simulated_epochs < r.epochs
            else "(all simulated)"
        )
        + f"; traced {epochs}"
    ]
    for array in arrays:
        stalls = ", ".join(
            f"{why} {n}" for (a, why), n in sorted(r.stalls.items()) if a == array and n
        )
        lines.append(f"  {array}: stalls {stalls or 'none'}")
    return "\n".join(lines)


MAX_EPOCHS = 256  # epochs a trace records and draws (each one is a column of bars)


@guarded
def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m simulator.trace`."""
    args = build_parser().parse_args(argv)
    # Outputs checked before the simulation: a typo costs a second, not a run.
    if args.out:
        args.out = str(output_path(args.out, "trace.png"))
        _check_figure_path(Path(args.out))
    if args.csv:
        args.csv = str(output_path(args.csv, "trace.csv"))
        check_writable(Path(args.csv))
    workload = make_workload(args.model, args.seq, {"batch": 1, "heads": 1})
    config = args.mapping or ALIASES.get(args.accel, args.accel)
    if args.epochs > MAX_EPOCHS:
        print(
            f"--epochs {args.epochs}: tracing the first {MAX_EPOCHS} (a trace draws at most "
            f"{MAX_EPOCHS}; the rest are simulated or extrapolated as usual)",
            file=sys.stderr,
        )
        args.epochs = MAX_EPOCHS
    t = trace_point(Specs(), config, workload, args.epochs, args.pe_dim)
    r, arrays, events, mapping, program = t.result, t.arrays, t.events, t.mapping, t.program
    traced = min(args.epochs, r.epochs)
    if args.csv:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(
            [["cycle", *arrays], *activity_rows(events, arrays)]
        )
        write_text(Path(args.csv), out.getvalue())
    if args.out:
        title = (
            f"{mapping.label}: {workload.label} at {workload.seq_label} tokens, first "
            f"{traced} epoch{'s' if traced != 1 else ''} "
            f"({program.tiles_in_flight} tiles in flight)"
        )
        try:
            draw(events, arrays, title, Path(args.out))
        except OSError as err:
            raise SpecError(f"cannot write {args.out}: {err.strerror or err}") from None
    print(render_summary(r, arrays, traced))
    return 0


def _check_figure_path(path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    kinds = FigureCanvasAgg.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in kinds:
        raise SpecError(
            f"--out {path}: a figure needs one of the suffixes "
            f"{', '.join('.' + k for k in sorted(kinds))}"
        )
    check_writable(path)


if __name__ == "__main__":
    sys.exit(main())
