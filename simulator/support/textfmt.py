"""Plain-text tables for the command-line tools (no dependencies, stable output)."""

from __future__ import annotations

from collections.abc import Sequence


def table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[bool] | None = None
) -> str:
    """An aligned text table; numeric columns right-aligned unless `right` says otherwise."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    if right is None:
        right = [all(_numeric(r[i]) for r in cells) and bool(cells) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(row) for row in cells]
    return "\n".join(out)


def _numeric(text: str) -> bool:
    stripped = text.replace(",", "").replace("%", "").replace("x", "").strip()
    try:
        float(stripped)
    except ValueError:
        return stripped in ("", "-", "inf", "nan")
    return True


def si(value: float) -> str:
    """A compact engineering rendering: 1.34e+08 -> '134.2M'."""
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:g}"
