"""`python -m simulator.plot`: a metric of a sweep against one swept parameter.

    python -m simulator.sweep --grid pe_dim=128,256 seq=16K,64K,256K --out sweep.csv
    python -m simulator.plot sweep.csv --x seq --y latency_s -o latency      # latency.png/.pdf

One line per combination of the other parameters that vary in the file (or of `--by`'s
columns), the parameters that do not vary named under the title; a column the x parameter
determines (`pe_dim_1d` beside `pe_dim`) is no line of its own. With `--by`, a parameter
that would make one line join unrelated points (another `pe_dim` at the same `seq`) is one
line naming it: add it to `--by`, or keep one value with `--where pe_dim=128`. Past ten
lines, colours repeat with another dash, then another marker. A logarithmic axis where
the values span more than a factor of 50 (sequence lengths, latencies). The sweep's own
columns: its parameters (configuration, model, sequence length, the architecture's knobs),
then the metrics (`latency_s`, `traffic_bytes`, `energy_pj`, `util_2d`, ...). Rows with an
`error` are left out, and counted under the title.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from simulator.support.atomic import check_writable, output_path
from simulator.support.cli import ArgumentParser, guarded
from simulator.support.errors import Loc, SpecError
from simulator.support.figures import SMALL_PT, TEXT_PT, WIDE_IN, pyplot, save_figures
from simulator.support.units import format_count

# The first metric a sweep writes: the columns before it are the swept parameters.
FIRST_METRIC = "latency_s"
LOG_SPAN = 50.0  # values spanning more than this factor get a logarithmic axis


def read_sweep(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The sweep's columns and its rows (without the rows that ended in an error)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(f"cannot read the sweep: {err.strerror}", Loc(str(path))) from None
    reader = csv.DictReader(text.splitlines())
    columns = list(reader.fieldnames or [])
    if not columns:
        raise SpecError("the sweep file is empty (no header)", Loc(str(path), 1))
    return columns, list(reader)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _label(value: str) -> str:
    """A whole number as the units write it (65536 -> 64K); anything else as written."""
    number = _number(value)
    if number is None or number != int(number) or number < 1024:
        return value
    return format_count(int(number))


def independent(
    rows: Sequence[dict[str, str]], varying: Sequence[str], given: Sequence[str] = ()
) -> list[str]:
    """The varying parameters less those the others -- and the `given` columns (the x
    axis) -- determine: a sweep of `pe_dim` also writes the 1D array's size and the
    registers it implies; one line per `pe_dim`, not per each of them, and no line per
    `pe_dim_1d` when `pe_dim` is the x axis."""
    kept: list[str] = list(given)
    for c in varying:
        seen: dict[tuple[str, ...], set[str]] = {}
        for r in rows:
            seen.setdefault(tuple(r[k] for k in kept), set()).add(r[c])
        if any(len(v) > 1 for v in seen.values()):
            kept.append(c)
    return kept[len(given) :]


def lines(
    rows: Sequence[dict[str, str]], x: str, y: str, by: Sequence[str]
) -> dict[tuple[str, ...], list[tuple[float, float, str]]]:
    """(the `by` values) -> [(x, y, x as written)], sorted by x: one line each."""
    out: dict[tuple[str, ...], list[tuple[float, float, str]]] = {}
    for row in rows:
        xv, yv = _number(row[x]), _number(row[y])
        if yv is None:
            continue
        key = tuple(row[c] for c in by)
        out.setdefault(key, []).append((xv if xv is not None else math.nan, yv, row[x]))
    for points in out.values():
        points.sort(key=lambda p: (math.isnan(p[0]), p[0], p[2]))
    return out


def _sort_key(value: str) -> tuple:
    number = _number(value)
    return (0, number, "") if number is not None else (1, 0.0, value)


def _numeric_first(item: tuple[tuple[str, ...], list]) -> tuple:
    """Lines in the order of their values, numbers as numbers (64 before 128)."""
    return tuple((0, _number(v), "") if _number(v) is not None else (1, 0.0, v) for v in item[0])


# Line styles beyond the ten colours: colour, then dash, then marker change from one line to
# the next, so 200 lines are 200 different looks.
DASHES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v")


def line_style(i: int) -> dict[str, str]:
    """The `i`th line's colour, dash and marker: tab10's ten colours, then each again with
    another dash, then another marker."""
    return {
        "color": f"C{i % 10}",
        "linestyle": DASHES[(i // 10) % len(DASHES)],
        "marker": MARKERS[(i // (10 * len(DASHES))) % len(MARKERS)],
    }


def parse_where(text: str | None) -> dict[str, str]:
    """`--where NAME=VALUE[,NAME=VALUE]`: the rows to keep."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise SpecError(f"--where: expected NAME=VALUE, got '{item.strip()}'")
        out[name.strip()] = value.strip()
    return out


def _kept(rows: list[dict[str, str]], where: dict[str, str]) -> list[dict[str, str]]:
    """The rows `--where` keeps; a value as written or as the units write it (64K)."""
    return [r for r in rows if all(v in (r[c], _label(r[c])) for c, v in where.items())]


def draw(
    path: Path,
    x: str,
    y: str,
    by: Sequence[str] | None,
    stem: Path,
    where: dict[str, str] | None = None,
) -> list[Path]:
    columns, rows = read_sweep(path)
    where = where or {}
    for name, what in (
        (x, "--x"), (y, "--y"), *((c, "--by") for c in by or ()), *((c, "--where") for c in where)
    ):  # fmt: skip
        if name not in columns:
            raise SpecError(
                f"{what}: no column '{name}' in the sweep (columns: {', '.join(columns)})",
                Loc(str(path), 1),
            )
    failed = [r for r in rows if r.get("error")]
    rows = _kept([r for r in rows if not r.get("error")], where)
    if not rows:
        what = "--where keeps no row" if where else "the sweep has no row"
        raise SpecError(f"{what} without an error to draw", Loc(str(path)))
    if not any(_number(r[y]) is not None for r in rows):
        raise SpecError(f"--y: column '{y}' holds no numbers", Loc(str(path), 1))
    params = columns[: columns.index(FIRST_METRIC)] if FIRST_METRIC in columns else []
    others = [c for c in params if c != x and len({r[c] for r in rows}) > 1]
    varying = independent(rows, others, given=[x])
    fixed = [c for c in params if c != x and len({r[c] for r in rows}) == 1]
    groups = list(by) if by is not None else varying
    loose = independent(rows, others, given=[x, *groups])
    if loose:  # a line would join points that differ in these
        differ = "; ".join(
            f"{c} ({', '.join(_label(v) for v in sorted({r[c] for r in rows}, key=_sort_key))})"
            for c in loose
        )
        first = loose[0]
        raise SpecError(
            f"--by {','.join(groups)}: each line would join points that differ in {differ}: "
            f"add {'them' if len(loose) > 1 else 'it'} to --by, or keep one value with "
            f"--where {first}={_label(rows[0][first])}"
        )
    data = lines(rows, x, y, groups)
    numeric_x = all(not math.isnan(p[0]) for pts in data.values() for p in pts)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(WIDE_IN, 3.0 + 0.12 * len(data)), layout="constrained")
    ticks: dict[str, int] = {}

    def order(item: tuple[tuple[str, ...], list]) -> tuple:
        return tuple(
            (0, _number(v), "") if _number(v) is not None else (1, 0.0, v) for v in item[0]
        )

    for i, (key, points) in enumerate(sorted(data.items(), key=order)):
        label = ", ".join(f"{c}={_label(v)}" for c, v in zip(groups, key, strict=True))
        if numeric_x:
            xs = [p[0] for p in points]
        else:  # a categorical parameter (the configuration): positions in first-seen order
            xs = [float(ticks.setdefault(p[2], len(ticks))) for p in points]
        ax.plot(xs, [p[1] for p in points], markersize=3, linewidth=1, label=label or y,
                **line_style(i))  # fmt: skip
    xs_all = [p[0] for pts in data.values() for p in pts]
    ys_all = [p[1] for pts in data.values() for p in pts]
    if numeric_x and min(xs_all) > 0 and max(xs_all) / min(xs_all) > LOG_SPAN:
        ax.set_xscale("log", base=2)
    if min(ys_all) > 0 and max(ys_all) / min(ys_all) > LOG_SPAN:
        ax.set_yscale("log")
    if numeric_x:
        values = sorted({p[0]: p[2] for pts in data.values() for p in pts}.items())
        ax.set_xticks([v for v, _ in values], [_label(t) for _, t in values])
    else:
        ax.set_xticks(list(ticks.values()), list(ticks))
    ax.minorticks_off()
    ax.set_xlabel(x, fontsize=TEXT_PT)
    ax.set_ylabel(y, fontsize=TEXT_PT)
    ax.tick_params(axis="both", labelsize=SMALL_PT)
    held = ", ".join(f"{c}={_label(rows[0][c])}" for c in fixed)
    title = f"{y} against {x} ({path.name})"
    notes = [held] if held else []
    if failed:
        notes.append(f"{len(failed)} row(s) with an error left out")
    ax.set_title("\n".join([title, *notes]), fontsize=TEXT_PT)
    if len(data) > 1 or groups:  # below the axes, laid out with them: never over a label
        fig.legend(fontsize=SMALL_PT, loc="outside lower center", columnspacing=3.0,
                   ncol=2 if len(data) > 3 else 1, frameon=False)  # fmt: skip
    return save_figures(fig, stem)


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m simulator.plot",
        description="A metric of a sweep (python -m simulator.sweep's CSV) against one swept "
        "parameter, one line per combination of the others.",
    )
    p.add_argument("sweep", help="the sweep's CSV")
    p.add_argument("--x", required=True, help="the swept parameter across (e.g. seq, pe_dim)")
    p.add_argument("--y", default="latency_s", help="the metric up (default latency_s)")
    p.add_argument(
        "--by", help="comma-separated columns, one line per combination (default: every other "
        "parameter that varies)"
    )  # fmt: skip
    p.add_argument(
        "--where",
        metavar="NAME=VALUE[,NAME=VALUE]",
        help="draw only the rows with these values (e.g. --where pe_dim=128,seq=64K)",
    )
    p.add_argument("-o", "--out", default="sweep-plot", help="figure stem: STEM.png, STEM.pdf")
    return p


@guarded
def main(argv: list[str] | None = None) -> int:
    """Draw a sweep's metric against a parameter."""
    args = _parser().parse_args(argv)
    stem = output_path(args.out, "sweep-plot")
    for suffix in (".png", ".pdf"):
        check_writable(stem.with_name(stem.name + suffix))
    by = [c.strip() for c in args.by.split(",") if c.strip()] if args.by else None
    where = parse_where(args.where)
    for path in draw(Path(args.sweep), args.x, args.y, by, stem, where):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
