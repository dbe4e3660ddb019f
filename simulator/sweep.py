"""`python -m simulator.sweep`: design-space sweeps to a CSV.

    python -m simulator.sweep --grid pe_dim=64,128,256 buffer_bytes=4M,8M --out sweep.csv
    python -m simulator.sweep --spec pareto --out pareto.csv        # figure 12's sweep
    python -m simulator.sweep --grid model=bert,xlm seq=64K,1M --scope layer
    python -m simulator.sweep --spec pareto --executor dask --scheduler tcp://HOST:8786

A sweep is a grid of parameters (configuration, model, sequence length, PE array, 1D width,
buffer, bandwidth, register files, workload fields; `--list` prints them), optionally read
from a sweep file with derived values and a buffer-sizing rule (`arch/sweeps/*.yaml`, see
`simulator/spec/sweep.py`); `--grid` adds to or replaces the file's parameters. Points run
in parallel on the local cores (`--jobs`, default all), or on a Dask cluster. Rows come out
in grid order whatever the executor, so the same sweep gives a byte-identical CSV. A point
that cannot be evaluated (no mapping fits its buffer, ...) keeps its row with the reason in
`error`; errors in the sweep itself stop it before any work, in one line, exit code 2.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from tqdm import tqdm

from simulator.atomic import check_writable, write_text
from simulator.cli import guarded
from simulator.configs import Specs
from simulator.design_space import Point, check, columns, evaluate_points, points
from simulator.errors import SpecError
from simulator.paths import resolve_sweep
from simulator.spec.sweep import (
    ACCOUNTINGS,
    DEFAULTS,
    ENGINES,
    PARAMETERS,
    SCOPES,
    SweepSpec,
    load_sweep,
    parse_grid_args,
)

Rows = list[tuple[int, dict[str, Any]]]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise SpecError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m simulator.sweep",
        description="Sweep a design space (PE array, buffer, bandwidth, 1D width, sequence "
        "length, model, configuration) and write one CSV row per point.",
    )
    p.add_argument(
        "--grid",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME=V1,V2",
        help="parameter values, e.g. pe_dim=16,32,64 buffer_bytes=4M,8M (--list: the names)",
    )
    p.add_argument("--spec", help="a sweep file, or a shipped sweep (pareto)")
    p.add_argument("--scope", choices=SCOPES, help="attention (default) or the encoder layer")
    p.add_argument("--engine", choices=ENGINES, help="timing model (default: cycle)")
    p.add_argument("--accounting", choices=ACCOUNTINGS, help="energy/area tables")
    p.add_argument("--linear", help="--scope layer: linear-layer spec (default: gemm)")
    p.add_argument("--arch", help="architecture file replacing each mapping's own")
    p.add_argument("--cascade", help="cascade file replacing each mapping's own")
    p.add_argument("--out", "-o", help="CSV file to write (default: standard output)")
    p.add_argument("--jobs", "-j", type=int, help="local worker processes (default: all cores)")
    p.add_argument("--executor", choices=["local", "dask"], default="local")
    p.add_argument("--scheduler", help="--executor dask: the scheduler, tcp://HOST:PORT")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--list", action="store_true", help="print the sweepable parameters")
    return p


def sweep_spec(args: argparse.Namespace) -> SweepSpec:
    """The sweep file (if any) with the command line's grid and settings applied."""
    spec = load_sweep(resolve_sweep(args.spec)) if args.spec else SweepSpec("grid")
    spec = spec.with_grid(parse_grid_args(args.grid))
    settings = {k: getattr(args, k) for k in ("scope", "engine", "accounting", "linear")}
    return dataclasses.replace(spec, **{k: v for k, v in settings.items() if v is not None})


def chunked(items: Sequence[Point], jobs: int) -> list[list[Point]]:
    """About four chunks per worker, dealt round-robin: few enough to read the specs
    rarely, and each chunk mixes cheap and costly corners of the grid (a 16x16 array at
    1M tokens next to a 512x512) so that the workers finish together."""
    n = max(1, min(len(items), 4 * max(1, jobs)))
    return [list(items[i::n]) for i in range(n) if items[i::n]]


def run_local(
    spec: SweepSpec, chunks: list[list[Point]], jobs: int, overrides: tuple, tick: Callable
) -> Rows:
    rows: Rows = []
    if jobs <= 1 or len(chunks) <= 1:
        for chunk in chunks:
            rows += evaluate_points(spec, chunk, *overrides)
            tick(len(chunk))
        return rows
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(evaluate_points, spec, c, *overrides): len(c) for c in chunks}
        for future in as_completed(futures):
            rows += future.result()
            tick(futures[future])
    return rows


def run_dask(
    spec: SweepSpec, chunks: list[list[Point]], scheduler: str, overrides: tuple, tick: Callable
) -> Rows:
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError:
        raise SpecError(
            "--executor dask needs dask.distributed: pip install -e '.[dask]'"
        ) from None
    try:
        client = Client(scheduler, timeout="10s")
    except (OSError, TimeoutError, ValueError) as err:
        raise SpecError(f"cannot reach the Dask scheduler at {scheduler}: {err}") from None
    rows: Rows = []
    try:
        futures = [client.submit(evaluate_points, spec, c, *overrides, pure=False) for c in chunks]
        sizes = {f.key: len(c) for f, c in zip(futures, chunks, strict=True)}
        for future in dask_completed(futures):
            rows += future.result()
            tick(sizes[future.key])
    finally:
        client.close()
    return rows


def render_csv(spec: SweepSpec, rows: Rows) -> str:
    header = columns(spec)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for _index, row in sorted(rows, key=lambda r: r[0]):
        writer.writerow([_cell(row.get(c)) for c in header])
    return out.getvalue()


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _absolute(path: str | None) -> str | None:
    """A file path made absolute; shipped spec names (no such file here) stay names."""
    if path is None or not Path(path).is_file():
        return path
    return str(Path(path).resolve())


def _parameters() -> Iterator[str]:
    width = max(len(p) for p in PARAMETERS)
    for name, (_parser, what) in PARAMETERS.items():
        default = DEFAULTS.get(name)
        tail = f" (default: {default})" if default is not None else " (default: the design's)"
        yield f"{name.ljust(width)}  {what}{tail}"


@guarded
def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m simulator.sweep`."""
    args = build_parser().parse_args(argv)
    if args.list:
        print("\n".join(_parameters()))
        return 0
    if args.executor == "dask" and not args.scheduler:
        raise SpecError("--executor dask needs --scheduler tcp://HOST:PORT")
    if args.scheduler and args.executor != "dask":
        raise SpecError("--scheduler is for --executor dask")
    if args.jobs is not None and args.jobs < 1:
        raise SpecError(f"--jobs must be at least 1, got {args.jobs}")
    # Files named on the command line, as absolute paths: workers (Dask's included) may
    # run in other folders.
    cascade, arch = _absolute(args.cascade), _absolute(args.arch)
    spec = sweep_spec(args)
    if spec.linear and Path(spec.linear).is_file():
        spec = dataclasses.replace(spec, linear=str(Path(spec.linear).resolve()))
    specs = Specs(cascade_override=cascade, arch_override=arch)
    check(spec, specs)  # unknown configurations, models, specs, names: before any work
    if args.out:
        check_writable(Path(args.out))
    todo = points(spec)
    jobs = args.jobs or os.cpu_count() or 1
    overrides = (cascade, arch)
    bar = tqdm(
        total=len(todo),
        desc="sweep",
        unit="point",
        disable=True if args.no_progress else None,  # None: only on a terminal
        file=sys.stderr,
    )
    with bar:
        if args.executor == "dask":
            chunks = chunked(todo, 4 * jobs)
            rows = run_dask(spec, chunks, args.scheduler, overrides, bar.update)
        else:
            rows = run_local(spec, chunked(todo, jobs), jobs, overrides, bar.update)
    text = render_csv(spec, rows)
    if args.out:
        write_text(Path(args.out), text)
        failed = sum(1 for _i, r in rows if r.get("error"))
        print(
            f"{len(rows)} points -> {args.out}"
            + (f" ({failed} without results: see the error column)" if failed else ""),
            file=sys.stderr,
        )
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
