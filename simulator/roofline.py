"""`python -m simulator.roofline`: every configuration on its architecture's roofline.

    python -m simulator.roofline --model bert --seqs 1K..1M          # roofline.png, .pdf
    python -m simulator.roofline --model xlm --seqs 4K,64K --accel flat,fusemax -o xlm

For each configuration and sequence length: arithmetic intensity (useful operations -- the
cascade's counts of the points it keeps -- per DRAM byte) against the attained throughput
(those operations per second), under the architecture's compute roof (every PE one
operation per cycle) and its bandwidth slope (DRAM bytes per second x intensity). A point
far below the roof at high intensity is compute-bound on an idle array; one on the slope is
memory-bound. The table gives each point's fraction of its latency bound
(:mod:`simulator.core.bounds`).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.core.result import Result
from simulator.drivers.configs import ALIASES, STANDARD, EvalOptions, Sizing, Specs, evaluate
from simulator.spec.arch import Architecture
from simulator.spec.workload import default_sequence_lengths, make_workload
from simulator.support.atomic import check_writable, output_path
from simulator.support.cli import ArgumentParser, guarded
from simulator.support.errors import SpecError
from simulator.support.figures import SMALL_PT, TEXT_PT, WIDE_IN, pyplot, save_figures
from simulator.support.textfmt import table
from simulator.support.units import format_count, parse_count

# The paper's colours for its five configurations, in order (others get the next colours).
COLOURS = ("#e41a1c", "#377eb8", "#4daf4a", "#984ea3", "#ff7f00")


MARKERS = ("o", "s", "^", "D", "v", "P")  # one shape per model where points are not joined


def parse_seqs(text: str) -> list[int]:
    """`1K,4K,64K` or a range `1K..1M` of the shipped sequence lengths (both ends kept)."""
    if ".." in text:
        lo, hi = (parse_count(t, what="--seqs") for t in text.split("..", 1))
        if lo > hi:
            raise SpecError(f"--seqs {text}: the range runs from the smaller length")
        seqs = [s for s in default_sequence_lengths() if lo <= s <= hi]
        return sorted({lo, hi, *seqs})
    seqs = [parse_count(t, what="--seqs") for t in text.split(",") if t.strip()]
    if not seqs:
        raise SpecError("--seqs names no sequence length")
    return seqs


def roofs(arch: Architecture) -> tuple[float, float]:
    """(peak operations per second of all arrays, DRAM bytes per second)."""
    peak = sum(a.pes for a in arch.arrays) * arch.frequency_hz
    return peak, arch.dram.bandwidth_bytes_per_s


def draw(
    points: Sequence[tuple[str, Any]],
    roof: tuple[float, float],
    title: str,
    out: Path,
    lines: bool = True,
    groups: Sequence[str] | None = None,
) -> list[Path]:
    """Points (label, result: anything with traffic_bytes, intensity and throughput) on
    log-log axes with the roof and the slope; `out`.png/.pdf (`lines`: join each label's
    points, in order)."""
    plt = pyplot()

    peak, bandwidth = roof
    fig, ax = plt.subplots(figsize=(WIDE_IN, 4.2))
    intensities = [r.intensity for _l, r in points if r.traffic_bytes]
    lo = min(intensities + [peak / bandwidth]) / 4
    hi = max(intensities + [peak / bandwidth]) * 4
    xs = [lo, peak / bandwidth, hi]
    ax.plot(xs, [min(peak, bandwidth * x) for x in xs], color="black", linewidth=1.2)
    ax.annotate(
        f"{peak / 1e12:.3g} Tops/s",
        (hi, peak),
        ha="right",
        va="bottom",
        fontsize=7,
    )
    labels = list(dict.fromkeys(label for label, _r in points))
    # several models without lines: a marker shape per model says which point is which
    # (`groups`: each point's model, where the points do not carry it)
    model_of = list(groups) if groups is not None else [getattr(r, "model", "") for _l, r in points]
    models = list(dict.fromkeys(model_of))
    shaped = not lines and len(models) > 1
    for i, label in enumerate(labels):
        mine = [
            (r, m) for (lab, r), m in zip(points, model_of, strict=True)
            if lab == label and r.traffic_bytes
        ]  # fmt: skip
        joined = [r for r, _ in mine]
        sets = [[r for r, g in mine if g == m] for m in models] if shaped else [joined]
        for j, group in enumerate(sets):
            ax.plot(
                [r.intensity for r in group],
                [r.throughput for r in group],
                marker=MARKERS[j % len(MARKERS)] if shaped else "o",
                markersize=4,
                linestyle="-" if lines else "none",
                linewidth=0.6,
                color=COLOURS[i % len(COLOURS)],
                label=label if j == 0 else None,
            )
        ends = (joined[:1] + joined[-1:]) if lines and joined else []
        for r in ends:  # where each line starts and ends (points of a Result: its length)
            if getattr(r, "seq_len", None):
                xy = (r.intensity, r.throughput)
                ax.annotate(format_count(r.seq_len), xy, fontsize=SMALL_PT, xytext=(4, -8),
                            textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (operations per DRAM byte)", fontsize=TEXT_PT)
    ax.set_ylabel("attained operations per second", fontsize=TEXT_PT)
    ax.tick_params(axis="both", which="both", labelsize=SMALL_PT)  # minor labels too
    ax.set_title(title, fontsize=TEXT_PT)
    legend = ax.legend(fontsize=SMALL_PT, frameon=False, loc="lower right")
    if shaped:  # the models' shapes, in grey, beside the configurations' colours
        ax.add_artist(legend)
        handles = [
            ax.plot([], [], marker=MARKERS[j % len(MARKERS)], linestyle="none", color="0.4",
                    markersize=4, label=str(m))[0]
            for j, m in enumerate(models)
        ]  # fmt: skip
        ax.legend(handles=handles, fontsize=SMALL_PT, frameon=False, loc="lower center",
                  title="model", title_fontsize=SMALL_PT)  # fmt: skip
    ax.grid(True, which="major", color="#dddddd", linewidth=0.6)
    fig.tight_layout()
    # the bandwidth on its slope: along it (its angle on the page, once laid out) and beside
    # it, not across it
    ridge = peak / bandwidth
    at = (lo * (ridge / lo) ** 0.25, bandwidth * lo * (ridge / lo) ** 0.25)
    (x0, y0), (x1, y1) = ax.transData.transform([(lo, bandwidth * lo), (ridge, peak)])
    angle = math.degrees(math.atan2(y1 - y0, x1 - x0))
    normal = math.radians(angle + 90)
    ax.annotate(
        f"{bandwidth / 2**30:.3g} GiB/s",
        at,
        xytext=(7 * math.cos(normal), 7 * math.sin(normal)),
        textcoords="offset points",
        ha="center",
        va="center",
        fontsize=7,
        rotation=angle,
        rotation_mode="anchor",
    )
    return save_figures(fig, out)


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m simulator.roofline",
        description="Arithmetic intensity vs attained throughput of each configuration "
        "and sequence length, under the architecture's roof.",
    )
    p.add_argument("--model", default="bert")
    p.add_argument("--seqs", default="1K..1M", help="1K,4K,... or a range 1K..1M")
    p.add_argument("--accel", default=",".join(STANDARD), help="configurations")
    p.add_argument("--engine", choices=["cycle", "analytic"], default="analytic")
    p.add_argument("-o", "--out", default="roofline", help="figure stem (.png and .pdf)")
    return p


@guarded
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    seqs = parse_seqs(args.seqs)
    configs = [ALIASES.get(c.strip(), c.strip()) for c in args.accel.split(",") if c.strip()]
    if not configs:
        raise SpecError("--accel names no configuration")
    out = output_path(args.out, "roofline")
    for suffix in (".png", ".pdf"):
        check_writable(out.with_name(out.name + suffix))
    specs = Specs()
    points: list[tuple[str, Result]] = []
    rows = []
    notes: list[str] = []
    roof = None
    optional = args.accel == ",".join(STANDARD)  # the default set: leave out, with a note
    for config in configs:
        for seq in seqs:
            w = make_workload(args.model, seq)
            try:
                r = evaluate(specs, config, w, options=EvalOptions(engine=args.engine))
            except SpecError as err:
                if not optional:
                    raise
                notes.append(f"{config} left out at {format_count(seq)}: {err}")
                continue
            points.append((r.label, r))
            roof = roof or roofs(specs.architecture_of(config, w, Sizing()))
            rows.append(
                (
                    r.label,
                    format_count(seq),
                    f"{r.intensity:.4g}",
                    f"{r.throughput / 1e12:.4g}",
                    f"{r.executed_ops / r.latency_s / 1e12:.4g}" if r.latency_s else "-",
                    f"{100 * r.fraction_of_bound:.0f}%",
                    r.bound_binds,
                )
            )
    if roof is None:
        raise SpecError("no configuration runs at these lengths: " + "; ".join(notes))
    label = make_workload(args.model, seqs[0]).label
    title = f"{label}: attention, {', '.join(format_count(s) for s in seqs)} tokens"
    print(
        table(
            ["config", "seq", "ops/byte", "Tops/s", "executed Tops/s", "of bound", "bound by"],
            rows,
            right=[False, True, True, True, True, True, False],
        )
    )
    for note in notes:
        print(f"note: {note}")
    for path in draw(points, roof, title, out):
        print(f"figure -> {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
