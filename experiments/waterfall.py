"""Extra figure: the cycle engine's waterfall for BERT at 4K tokens, +Architecture vs +Binding.

The paper explains +Binding's speedup with a hand-drawn waterfall (its figure 4); here the
cycle engine draws both schedules of one (batch, head) instance over the same window of
cycles, through `simulator.trace` (the functions behind `python -m simulator.trace`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from experiments.compare import md_table
from experiments.experiment import Context, Experiment, Selection
from simulator.drivers.configs import Specs
from simulator.spec.workload import make_workload
from simulator.support.figures import pyplot, save_figures
from simulator.timing.cycle.waterfall import TraceEvent
from simulator.trace import plot_waterfall, trace_point

plt = pyplot()  # Agg, TrueType fonts in PDFs

CONFIGS = ("arch", "binding")
MODEL, SEQ = "bert", "4K"
EPOCHS = 16  # traced epochs of each configuration


@dataclass(frozen=True)
class WaterfallRow:
    config: str
    label: str
    cycles: int  # the whole phase, one instance
    epochs: int
    tiles_in_flight: int
    arrays: tuple[str, ...]
    events: tuple[TraceEvent, ...]
    stalls: tuple[tuple[str, str, int], ...]  # (array, reason, cycles)


def points(selection: Selection) -> list[str]:
    return list(CONFIGS)


def compute(specs: Specs, config: str) -> WaterfallRow:
    workload = make_workload(MODEL, SEQ, {"batch": 1, "heads": 1})
    t = trace_point(specs, config, workload, EPOCHS)
    return WaterfallRow(
        config,
        t.mapping.label,
        t.result.cycles,
        t.result.epochs,
        t.program.tiles_in_flight,
        tuple(str(a) for a in t.arrays),
        # plain strings: spec names carry source positions that do not survive pickling
        tuple(replace(e, array=str(e.array), einsum=str(e.einsum)) for e in t.events),
        tuple(sorted((str(a), str(why), n) for (a, why), n in t.result.stalls.items() if n)),
    )


def _window(rows: Sequence[WaterfallRow]) -> int:
    """The cycles +Binding (the last row) needs for its traced epochs: both panels show the
    same window, so the slower schedule shows fewer epochs."""
    return max(e.end for e in rows[-1].events)


def figures(rows: Sequence[WaterfallRow], ctx: Context) -> list[Path]:
    end = _window(rows)
    fig, axes = plt.subplots(
        len(rows), 1, figsize=(7.0, 1.6 + 1.3 * len(rows)), sharex=True, layout="constrained"
    )
    for ax, r in zip(axes, rows, strict=True):
        handles, labels = plot_waterfall(ax, list(r.events), list(r.arrays), end, "tab20")
        # each panel is a window of its run: say how much of it
        ax.set_title(
            f"{r.label}: {r.tiles_in_flight} tile(s) in flight; cycles 0-{end:,} shown of "
            f"{r.cycles:,} for {r.epochs} epochs",
            fontsize=8,
            loc="left",
        )
        ax.tick_params(axis="both", labelsize=7)
    axes[-1].set_xlabel(f"cycle (BERT, {SEQ} tokens, one batch x head instance)", fontsize=8)
    # laid out with the panels (never off the figure's edges)
    fig.legend(
        handles,
        labels,
        fontsize=7,
        ncol=min(len(labels), 8),
        loc="outside lower center",
        frameon=False,
        columnspacing=1.0,
        handlelength=1.5,
    )
    paths = save_figures(fig, ctx.out / f"waterfall-{MODEL}-{SEQ}")  # (closes the figure)
    return paths


def report(rows: Sequence[WaterfallRow], ctx: Context) -> str:
    by = {r.config: r for r in rows}
    table = []
    for r in rows:
        stalls = ", ".join(f"{a} {why} {n}" for a, why, n in r.stalls) or "none"
        table.append((r.label, r.cycles, r.tiles_in_flight, stalls))
    lines = [
        f"## Extra: waterfall of BERT at {SEQ} tokens (`waterfall-{MODEL}-{SEQ}`)",
        "",
        "Cycle engine, one (batch, head) instance of the pipelined phase; both panels show the "
        f"same window of cycles (+Binding's first {EPOCHS} epochs). Whole-phase cycles and "
        "stall cycles per array and reason:",
        "",
        md_table(["configuration", "cycles", "tiles in flight", "stalls"], table),
        "",
    ]
    if "arch" in by and "binding" in by:
        lines.append(
            f"+Binding finishes the instance {by['arch'].cycles / by['binding'].cycles:.2f}x "
            "sooner than +Architecture."
        )
    return "\n".join(lines) + "\n"


EXPERIMENT = Experiment(
    name="waterfall",
    title="Extra: cycle-engine waterfall, BERT 4K",
    points=points,
    compute=compute,
    figures=figures,
    report=report,
    chunk=1,
    outputs=(f"waterfall-{MODEL}-{SEQ}",),
)
