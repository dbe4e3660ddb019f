"""Writing experiment outputs: atomically, deterministically.

Every output goes to a hidden temporary file next to its destination and is renamed over it
only once complete (`os.replace` is atomic within a directory), so a run killed at any
moment leaves each result file either absent, as the previous run left it, or complete --
never half written. A killed run can leave its hidden temporaries behind (nothing runs on
SIGKILL); the next run into the same folder removes them first.

CSV numbers are written with `repr` (shortest round-trip form): the same floats always give
the same bytes. Figures go through `simulator.support.figures.save_figures`, as the CLIs'
do: PNG and PDF renamed into place as a pair, without timestamps or version strings in their
metadata.
"""

from __future__ import annotations

import contextlib
import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

from simulator.support.atomic import PARTIAL, atomic_path


@contextlib.contextmanager
def atomic_text(path: Path) -> Iterator[IO[str]]:
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        yield handle


def remove_stale_partials(folder: Path) -> list[Path]:
    """Temporaries a killed run left in `folder` (recursively); removed, and returned."""
    if not folder.is_dir():
        return []
    stale = [p for p in folder.rglob(f".*{PARTIAL}*") if p.is_file()]
    for p in stale:
        p.unlink()
    return stale


def fmt_number(value: object) -> str:
    """A CSV cell: integers as integers, floats in their shortest round-trip form (the
    reference CSVs' style: `402653184`, `0.005987131914893616`, `1.0484918676489974e+16`)."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    return str(value)


def csv_text(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([fmt_number(v) for v in row])
    return buf.getvalue()


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> Path:
    text = csv_text(header, rows)
    with atomic_text(path) as handle:
        handle.write(text)
    return path


def write_text(path: Path, text: str) -> Path:
    with atomic_text(path) as handle:
        handle.write(text)
    return path
