"""Comparing our values with published ones, and the markdown the report is made of."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from experiments.plots import Point, Series


def rel_error(ours: float, published: float) -> float:
    """Signed relative error of ours against the published value."""
    if published == 0:
        return 0.0 if ours == 0 else float("inf")
    return ours / published - 1.0


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A GitHub markdown table; `align` has one of l/r per column (default: l then r)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 1e5 else f"{value:.{digits}e}"


def pct(err: float | None) -> str:
    """A signed relative error in percent."""
    return "-" if err is None else f"{100 * err:+.2f}%"


def apct(value: float) -> str:
    """An unsigned share in percent (an absolute error, a tolerance)."""
    return f"{100 * value:.2f}%"


def stated(key: str, value: float | None) -> str:
    """A value as the paper states it: `6.7x`, `79%`."""
    if value is None:
        return "-"
    return f"{value:g}x" if "speedup" in key else f"{100 * value:g}%"


def headline(key: str, value: float | None) -> str:
    """A headline mean as the paper writes it: speedups as `6.72x`, energies as `79.0%`."""
    if value is None:
        return "-"
    return f"{value:.2f}x" if "speedup" in key else f"{100 * value:.1f}%"


@dataclass(frozen=True)
class Worst:
    err: float
    config: str
    point: Point
    ours: float
    published: float

    def describe(self) -> str:
        model, seq = self.point
        return (
            f"{self.config} {model} {seq}: ours {fmt(self.ours, 4)}, published "
            f"{fmt(self.published, 4)} ({pct(self.err)})"
        )


def worst_of(series: Sequence[Series]) -> Worst | None:
    worst: Worst | None = None
    for s in series:
        for p, ours in s.values.items():
            if p not in s.published:
                continue
            err = rel_error(ours, s.published[p])
            if worst is None or abs(err) > abs(worst.err):
                worst = Worst(err, s.label, p, ours, s.published[p])
    return worst


def bars_section(
    title: str, series: Sequence[Series], points: Sequence[Point], note: str = ""
) -> str:
    """Per bar: ours / published (relative error); then the worst point and the mean
    absolute error per configuration."""
    header = ["model", "seq", *[s.label for s in series]]
    rows = []
    for p in points:
        cells: list[object] = [p[0], p[1]]
        for s in series:
            ours = s.values.get(p)
            ref = s.published.get(p)
            if ours is None:
                cells.append("-")
            elif ref is None:
                cells.append(f"{fmt(ours, 4)} / -")
            else:
                cells.append(f"{fmt(ours, 4)} / {fmt(ref, 4)} ({pct(rel_error(ours, ref))})")
        rows.append(cells)
    parts = [f"### {title}", ""]
    if note:
        parts += [note, ""]
    parts += ["Each cell: ours / published (relative error).", "", md_table(header, rows), ""]
    summary = []
    for s in series:
        errs = [abs(rel_error(v, s.published[p])) for p, v in s.values.items() if p in s.published]
        if errs:
            summary.append((s.label, apct(sum(errs) / len(errs)), apct(max(errs)), len(errs)))
    if summary:
        parts += [
            md_table(["configuration", "mean abs error", "max abs error", "bars"], summary),
            "",
        ]
    worst = worst_of(series)
    parts.append(f"Worst point: {worst.describe()}." if worst else "No published values.")
    return "\n".join(parts) + "\n"
