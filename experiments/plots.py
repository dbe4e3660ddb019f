"""Figure drawing shared by the experiments, in the style of the FuseMax paper's figures.

Grouped bars per model and sequence length with the five configurations in the paper's order
and colours (Unfused red, FLAT blue, then the FuseMax steps +Cascade green, +Architecture
purple, +Binding orange, under a "FuseMax" heading in the legend); light horizontal grid, no
top/right frame. `compare=True` overlays the published value of every bar as a black marker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from simulator.support.figures import pyplot, save_figures

# Agg, TrueType fonts in PDFs, and the drawing backends' C extensions imported now, with the
# rest: the runner draws while its workers compute, so Ctrl-C or SIGTERM may land at any
# moment, and one landing inside an extension's first import is an ImportError, not the
# interrupt it is.
plt = pyplot()

# The paper's palette (ColorBrewer Set1, in its order) for the configurations in order.
CONFIG_COLOURS = ("#e41a1c", "#377eb8", "#4daf4a", "#984ea3", "#ff7f00")
# The legend groups the configurations after the first two under the proposal's name.
GROUP_HEADING = ("FuseMax", 2)  # (heading, index of the first configuration under it)
PUBLISHED_MARKER = {"marker": "_", "color": "black", "markersize": 7, "markeredgewidth": 1.2}
# Figures are drawn at the size they print: a two-column paper's text width (a figure*),
# or one column; no text under 7 pt at that size.
WIDE_IN, NARROW_IN = 7.0, 3.4
TEXT_PT, SMALL_PT = 8, 7

Point = tuple[str, str]  # (model label, sequence-length label), e.g. ("BERT", "1K")


@dataclass(frozen=True)
class Series:
    """One configuration's bars: its key, legend label and value per point."""

    config: str
    label: str
    values: dict[Point, float]
    published: dict[Point, float]


def _style(ax) -> None:
    ax.set_axisbelow(True)
    ax.yaxis.grid(True, color="#cccccc", linewidth=0.8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color("#bbbbbb")
    ax.tick_params(axis="both", labelsize=SMALL_PT, length=0)


def _legend(
    ax,
    labels: Sequence[str],
    extra: Sequence[tuple[object, str]] = (),
    colours: Sequence[str] = CONFIG_COLOURS,
    heading: bool = True,
) -> None:
    handles: list[object] = []
    names: list[str] = []
    title, first = GROUP_HEADING
    for i, label in enumerate(labels):
        if heading and i == first and len(labels) > first:
            handles.append(Patch(visible=False))
            names.append(title)
        handles.append(Patch(color=colours[i % len(colours)]))
        names.append(label)
    for handle, name in extra:
        handles.append(handle)
        names.append(name)
    legend = ax.legend(
        handles,
        names,
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        frameon=False,
        fontsize=SMALL_PT,
        handlelength=1.5,
    )
    # the heading reads as a heading (italic, a colon), not as a series without a swatch
    for text in legend.get_texts():
        if text.get_text() == title and heading:
            text.set_text(f"{title}:")
            text.set_fontstyle("italic")


def _positions(points: Sequence[Point], n_series: int) -> tuple[dict[Point, float], float]:
    """x centre of every (model, seq) group: sequence groups 1 apart, models 0.8 further."""
    width = 0.8 / max(n_series, 1)
    centre: dict[Point, float] = {}
    x = 0.0
    last_model = None
    for model, seq in points:
        if last_model is not None and model != last_model:
            x += 0.8
        centre[(model, seq)] = x
        x += 1.0
        last_model = model
    return centre, width


def _model_labels(ax, points: Sequence[Point], centre: dict[Point, float]) -> None:
    models: dict[str, list[float]] = {}
    for model, seq in points:
        models.setdefault(model, []).append(centre[(model, seq)])
    crowded = len(points) > 12  # at 7 pt, more labels than this overlap side by side
    ax.set_xticks(
        [centre[p] for p in points], [seq for _, seq in points], rotation=90 if crowded else 0
    )
    for model, xs in models.items():
        ax.annotate(
            model,
            xy=((min(xs) + max(xs)) / 2, 0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -24 if crowded else -12),
            textcoords="offset points",
            ha="center",
            va="top",
            fontsize=TEXT_PT,
        )


def grouped_bars(
    series: Sequence[Series],
    points: Sequence[Point],
    ylabel: str,
    path_stem: Path,
    compare: bool = False,
    ymax: float | None = None,
    colours: Sequence[str] = CONFIG_COLOURS,
    log: bool = False,
    title: str = "",
    heading: bool = True,
) -> list[Path]:
    """The paper's bar chart: one group per (model, seq), one bar per configuration
    (`colours`: theirs; `log`: a logarithmic axis, without the paper's legend heading;
    `title`: what the figure shows, so it reads without its caption; `heading`: the
    paper's "FuseMax" heading over its configurations -- figures of other series leave it
    out)."""
    fig, ax = plt.subplots(figsize=(WIDE_IN, 2.4))
    centre, width = _positions(points, len(series))
    offset0 = -(len(series) - 1) / 2 * width
    for i, s in enumerate(series):
        xs = [centre[p] + offset0 + i * width for p in points if p in s.values]
        ys = [s.values[p] for p in points if p in s.values]
        ax.bar(xs, ys, width=width, color=colours[i % len(colours)], linewidth=0)
        if compare:
            px = [centre[p] + offset0 + i * width for p in points if p in s.published]
            py = [s.published[p] for p in points if p in s.published]
            ax.plot(px, py, linestyle="none", **PUBLISHED_MARKER)
    _style(ax)
    ax.set_ylabel(ylabel, fontsize=TEXT_PT)
    if title:
        ax.set_title(title, fontsize=TEXT_PT, loc="left")
    ax.set_xlim(min(centre.values()) - 0.6, max(centre.values()) + 0.6)
    if ymax is not None:
        ax.set_ylim(0, ymax)
    _model_labels(ax, points, centre)
    extra = [(Line2D([], [], linestyle="none", **PUBLISHED_MARKER), "published")] if compare else []
    _legend(ax, [s.label for s in series], extra, colours, heading=heading and not log)
    if log:
        ax.set_yscale("log")
    else:
        ax.yaxis.set_major_locator(MaxNLocator(nbins=3, steps=[1, 2, 2.5, 5, 10]))
    fig.subplots_adjust(left=0.6 / fig.get_figwidth(), right=1 - 1.25 / fig.get_figwidth())
    fig.subplots_adjust(bottom=0.3 if len(points) > 12 else 0.22, top=0.88 if title else 0.95)
    paths = save_figures(fig, path_stem)  # (closes the figure)
    return paths


def stacked_breakdown(
    bars: Sequence[tuple[str, str, dict[str, float]]],
    published: dict[tuple[str, str], dict[str, float]],
    categories: Sequence[str],
    ylabel: str,
    path_stem: Path,
    compare: bool = False,
    note: str = "",
    title: str = "",
) -> list[Path]:
    """Figure 7's shape: per sequence length, one stacked bar per configuration (short
    label), stacked by Einsum category. `bars` = (group, short label, {category: value});
    `note` (the short labels spelled out) under the legend; `title` (which model) above."""
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(WIDE_IN, 2.6))
    groups: list[str] = []
    xs: list[float] = []
    x = 0.0
    for group, _, _ in bars:
        if groups and group != groups[-1]:
            x += 1.0
        groups.append(group)
        xs.append(x)
        x += 1.0
    for (group, short, parts), xpos in zip(bars, xs, strict=True):
        bottom = 0.0
        ref = published.get((group, short), {})
        ref_bottom = 0.0
        for k, cat in enumerate(categories):
            value = parts.get(cat, 0.0)
            ax.bar(xpos, value, bottom=bottom, width=0.75, color=colours(k), linewidth=0)
            bottom += value
            if compare and cat in ref:
                ref_bottom += ref[cat]
                ax.plot([xpos], [ref_bottom], linestyle="none", **PUBLISHED_MARKER)
    _style(ax)
    ax.set_ylabel(ylabel, fontsize=TEXT_PT)
    ax.set_xticks(xs, [short for _, short, _ in bars], rotation=90)
    ax.set_xlim(min(xs) - 0.7, max(xs) + 0.7)
    seen: dict[str, list[float]] = {}
    for (group, _, _), xpos in zip(bars, xs, strict=True):
        seen.setdefault(group, []).append(xpos)
    for group, pos in seen.items():
        ax.annotate(
            group,
            xy=((min(pos) + max(pos)) / 2, 0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -20),
            textcoords="offset points",
            ha="center",
            va="top",
            fontsize=TEXT_PT,
        )
    handles = [Patch(color=colours(k)) for k in range(len(categories))]
    names = list(categories)
    if compare:
        handles.append(Line2D([], [], linestyle="none", **PUBLISHED_MARKER))
        names.append("published")
    ax.legend(
        handles, names, loc="center left", bbox_to_anchor=(1.0, 0.55), frameon=False,
        fontsize=SMALL_PT,
    )  # fmt: skip
    if note:
        ax.annotate(note, xy=(1.0, 0.0), xycoords="axes fraction", xytext=(6, -20),
                    textcoords="offset points", fontsize=SMALL_PT, va="top")  # fmt: skip
    if title:
        ax.set_title(title, fontsize=TEXT_PT, loc="left")
    fig.subplots_adjust(left=0.6 / fig.get_figwidth(), right=1 - 1.3 / fig.get_figwidth())
    fig.subplots_adjust(bottom=0.3, top=0.88 if title else 0.95)
    paths = save_figures(fig, path_stem)  # (closes the figure)
    return paths


def pareto_lines(
    lines: dict[str, list[tuple[float, float]]],
    published: dict[str, list[tuple[float, float]]],
    xlabel: str,
    ylabel: str,
    path_stem: Path,
    compare: bool = False,
    title: str = "",
) -> list[Path]:
    """Figure 12's shape: one line per model, log-log (x, y) points (`title`: what and at
    which length, so the figure reads without its caption)."""
    styles = ("-", "--", ":", "-.")
    markers = ("o", "x", ".", "+")
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(NARROW_IN, 2.8))
    for k, (model, pts) in enumerate(lines.items()):
        pts = sorted(pts)
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            linestyle=styles[k % 4],
            marker=markers[k % 4],
            markersize=4,
            color=colours(k),
            label=model,
        )
        if compare and published.get(model):
            ref = sorted(published[model])
            ax.plot([p[0] for p in ref], [p[1] for p in ref], linestyle="none", **PUBLISHED_MARKER)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="major", color="#cccccc", linewidth=0.8)
    ax.set_xlabel(xlabel, fontsize=TEXT_PT)
    ax.set_ylabel(ylabel, fontsize=TEXT_PT)
    ax.tick_params(axis="both", labelsize=SMALL_PT)
    ax.legend(title="Model", fontsize=SMALL_PT, title_fontsize=SMALL_PT)
    if title:
        ax.set_title(title, fontsize=SMALL_PT)
    fig.tight_layout()
    paths = save_figures(fig, path_stem)  # (closes the figure)
    return paths
