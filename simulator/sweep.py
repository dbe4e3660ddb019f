"""`python -m simulator.sweep`: design-space sweeps to a CSV.

    python -m simulator.sweep --grid pe_dim=64,128,256 buffer_bytes=4M,8M --out sweep.csv
    python -m simulator.sweep --spec pareto --out pareto.csv        # figure 12's sweep
    python -m simulator.sweep --grid model=bert,xlm seq=64K,1M --scope layer
    python -m simulator.sweep --spec pareto --executor dask --scheduler tcp://HOST:8786

A sweep is a grid of parameters (configuration, model, sequence length, PE array, 1D width,
buffer, bandwidth, register files, workload fields; `--list` prints them), optionally read
from a sweep file with derived values and a buffer-sizing rule (`arch/sweeps/*.yaml`, see
`simulator/spec/sweep_file.py`); `--grid` adds to or replaces the file's parameters. Points run
in parallel on the local cores (`--jobs`, default all), or on a Dask cluster. Rows come out
in grid order whatever the executor, so the same sweep gives a byte-identical CSV. A point
that cannot be evaluated (no mapping fits its buffer, ...) keeps its row with the reason in
`error`; errors in the sweep itself stop it before any work, in one line, exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import itertools
import math
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from tqdm import tqdm

from simulator.drivers.configs import Specs
from simulator.drivers.design_space import (
    Point,
    check,
    columns,
    evaluate_points,
    failed_row,
    points,
)
from simulator.spec.ceilings import CEILINGS_HELP, Ceilings, read_ceilings
from simulator.spec.sweep_file import (
    ACCOUNTINGS,
    DEFAULTS,
    ENGINES,
    PARAMETERS,
    SCOPES,
    SweepSpec,
    load_sweep,
    parse_grid_args,
)
from simulator.support import journal
from simulator.support.atomic import (
    atomic_path,
    check_writable,
    interrupts_held,
    is_stream,
    landing,
    output_path,
    remove_stale_partials,
)
from simulator.support.cli import ArgumentParser, abandon, guarded, worker_process
from simulator.support.errors import BoundBreach, SpecError
from simulator.support.paths import KINDS, data_dir, is_file, resolve_sweep
from simulator.support.pool import MAX_JOBS_PER_CPU, local_jobs
from simulator.support.units import parse_seconds
from simulator.timing.options import TimingOptions

Rows = list[tuple[int, dict[str, Any]]]


# Points a sweep runs without --yes (a long run: say so before starting it).
LARGE_GRID = 100_000
# Points read from the grid at a time per worker: the grid is streamed, never a list, and
# rows are written in grid order as soon as those before them are in.
WINDOW_PER_JOB = 256


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
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
    p.add_argument("--ceilings", metavar="FILE", help=CEILINGS_HELP)
    p.add_argument("--out", "-o", help="CSV file to write (default: standard output)")
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        help="local worker processes (default: all cores; at most one per point and "
        f"{MAX_JOBS_PER_CPU} per core)",
    )
    p.add_argument("--executor", choices=["local", "dask"], default="local")
    p.add_argument("--scheduler", help="--executor dask: the scheduler, tcp://HOST:PORT")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue a sweep killed before it finished: its journal (--out + .journal) "
        "keeps the finished points, only the others are computed",
    )
    p.add_argument(
        "--max-sim-s",
        type=lambda text: parse_seconds(text, "--max-sim-s"),
        help="a point whose cycle simulation would run longer than this (seconds per "
        "phase) gets its row with the reason in `error` (default: no limit)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--yes",
        action="store_true",
        help=f"run a grid of more than {LARGE_GRID:,} points (refused without it)",
    )
    p.add_argument("--list", action="store_true", help="print the sweepable parameters")
    return p


def sweep_spec(args: argparse.Namespace) -> SweepSpec:
    """The sweep file (if any) with the command line's grid and settings applied."""
    spec = load_sweep(resolve_sweep(args.spec)) if args.spec else SweepSpec("grid")
    spec = spec.with_grid(parse_grid_args(args.grid))
    settings = {k: getattr(args, k) for k in ("scope", "engine", "accounting", "linear")}
    return dataclasses.replace(spec, **{k: v for k, v in settings.items() if v is not None})


def chunked(items: Iterable[Point], jobs: int, window: int | None = None) -> Iterator[list[Point]]:
    """The points as chunks, read `window` points at a time (default WINDOW_PER_JOB per
    worker): each window dealt round-robin into about four chunks per worker, few enough
    to read the specs rarely, each mixing cheap and costly corners of the grid (a 16x16
    array at 1M tokens next to a 512x512) so that the workers finish together."""
    stream = iter(items)
    size = window or WINDOW_PER_JOB * max(1, jobs)
    while block := list(itertools.islice(stream, size)):
        n = max(1, min(len(block), 4 * max(1, jobs)))
        yield from (block[i::n] for i in range(n))


class Sink:
    """Where finished points go: the journal (when the sweep writes a file), the progress
    bar, and `emit` in grid order -- a row waits only for those before it (rows resumed
    from the journal take their turn among them). Points handed to a worker are journaled
    as started first, so a resumed sweep knows which it recomputes."""

    def __init__(
        self,
        writer: journal.Writer | None,
        tick: Callable[[int], Any],
        emit: Callable[[dict[str, Any]], None],
        resumed: dict[int, dict[str, Any]] | None = None,
    ) -> None:
        self.writer, self.tick, self.emit = writer, tick, emit
        self.waiting: dict[int, dict[str, Any]] = dict(resumed or {})
        self.written = 0
        self.failed = 0
        self._flush()

    def started(self, chunk: list[Point]) -> None:
        if self.writer is not None:
            self.writer.started([p.index for p in chunk])

    def finished(self, rows: Rows) -> None:
        if self.writer is not None:
            self.writer.finished(rows)
        self.waiting.update(rows)
        self.tick(len(rows))
        self._flush()

    def _flush(self) -> None:
        while self.written in self.waiting:
            row = self.waiting.pop(self.written)
            self.failed += bool(row.get("error"))
            self.emit(row)
            self.written += 1


def run_local(
    spec: SweepSpec, chunks: Iterator[list[Point]], jobs: int, extra: tuple, sink: Sink
) -> None:
    """The chunks on `jobs` local processes, at most `jobs` chunks handed out at a time (a
    kill loses at most those)."""
    first = list(itertools.islice(chunks, 2))
    if jobs <= 1 or len(first) <= 1:
        for chunk in itertools.chain(first, chunks):
            sink.started(chunk)
            sink.finished(evaluate_points(spec, chunk, *extra))
        return
    queue = _Queue(itertools.chain(first, chunks))
    pool = ProcessPoolExecutor(
        max_workers=jobs, initializer=worker_process, initargs=(os.getpid(),)
    )
    running: dict[Future, list[Point]] = {}

    def submit() -> None:
        chunk = queue.popleft()
        sink.started(chunk)
        running[pool.submit(evaluate_points, spec, chunk, *extra)] = chunk

    try:
        with interrupts_held():  # the workers start (see worker_process)
            while queue and len(running) < jobs:
                submit()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: running[f][0].index):
                del running[future]
                try:
                    sink.finished(future.result())
                except BrokenProcessPool:
                    raise SpecError(
                        "a sweep worker process died (out of memory, killed?): the finished "
                        "points are in the journal; run again with --resume to continue"
                    ) from None
                if queue:
                    submit()
    except BaseException:  # Ctrl-C (the workers leave it to us), or a worker died
        abandon(pool)
        raise
    pool.shutdown(wait=True)


# A chunk whose task raised is retried by Dask this many times; a chunk that still fails
# (or whose worker keeps dying: Dask's KilledWorker) is split into single points, and a
# single point that still fails gets its row with the reason in `error`.
DASK_RETRIES = 2


def run_dask(
    spec: SweepSpec, chunks: list[list[Point]], scheduler: str, extra: tuple, sink: Sink
) -> None:
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
    try:
        # Chunks handed out at a time: two per worker thread, so that a killed client
        # loses few and a killed worker costs only its own.
        limit = max(2, 2 * sum(client.nthreads().values()))
        queue = _Queue(chunks)
        chunk_of: dict[str, list[Point]] = {}
        completed = dask_completed()

        def submit() -> None:
            chunk = queue.popleft()
            sink.started(chunk)
            future = client.submit(
                evaluate_points, spec, chunk, *extra, pure=False, retries=DASK_RETRIES
            )
            chunk_of[future.key] = chunk
            completed.add(future)

        while queue and len(chunk_of) < limit:
            submit()
        for future in completed:
            chunk = chunk_of.pop(future.key)
            try:
                rows = future.result()
            except BoundBreach:  # a bug of the model: the sweep stops, no row keeps it
                raise
            except Exception as err:  # anything a remote task or a dying worker raises
                if len(chunk) > 1:
                    queue.extendleft([p] for p in reversed(chunk))
                else:
                    reason = " ".join(f"{type(err).__name__}: {err}".split())
                    point = chunk[0]
                    sink.finished([(point.index, failed_row(spec, point, f"on Dask: {reason}"))])
            else:
                sink.finished(rows)
            while queue and len(chunk_of) < limit:
                submit()
    finally:
        client.close()


class _Queue:
    """Chunks to hand out: those put back first (a failed chunk's points, one by one),
    then the stream's, read only as they are handed out."""

    def __init__(self, chunks: Iterator[list[Point]]) -> None:
        self.back: deque[list[Point]] = deque()
        self.chunks = chunks
        self.next: list[Point] | None = next(chunks, None)

    def __bool__(self) -> bool:
        return bool(self.back) or self.next is not None

    def popleft(self) -> list[Point]:
        if self.back:
            return self.back.popleft()
        chunk, self.next = self.next, next(self.chunks, None)
        assert chunk is not None
        return chunk

    def extendleft(self, chunks: Iterable[list[Point]]) -> None:
        self.back.extendleft(chunks)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _absolute(path: str | None) -> str | None:
    """A file path made absolute; shipped spec names (no such file here) stay names."""
    if path is None or not is_file(Path(path)):
        return path
    return str(Path(path).resolve())


# What a parameter left out of the grid takes, when it is not a value of DEFAULTS.
_LEFT_OUT = {
    "cascade": "the configuration's own",
    "phase": "prefill",
    "context": "seq",
    "kv_heads": "the model's",
    "window": "the model's",
    "batch": "the model's",
    "heads": "the model's",
    "embed": "the model's",
    "ffn": "the model's",
    "dmodel": "the model's",
}


def _parameters() -> Iterator[str]:
    width = max(len(p) for p in PARAMETERS)
    for name, (_parser, what) in PARAMETERS.items():
        default = DEFAULTS.get(name, _LEFT_OUT.get(name, "the design's"))
        tail = f" (default: {default})"
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
    if spec.linear and is_file(Path(spec.linear)):
        spec = dataclasses.replace(spec, linear=str(Path(spec.linear).resolve()))
    ceilings = read_ceilings(args.ceilings) if args.ceilings else None
    specs = Specs(cascade_override=cascade, arch_override=arch, ceilings=ceilings)
    cascades = _cascade_files(spec)
    check(spec, specs, cascades)  # unknown configurations, models, specs, names: first
    size = math.prod(len(values) for _name, values in spec.grid)
    if size > LARGE_GRID and not args.yes:
        raise SpecError(
            f"the grid has {size:,} points (more than {LARGE_GRID:,}: a long run): add --yes "
            "to run it, or sweep fewer values"
        )
    if size > 1000:
        print(f"sweeping {size:,} points", file=sys.stderr)
    if args.resume and not args.out:
        raise SpecError("--resume continues a sweep written with --out: give its --out")
    out = output_path(args.out, "sweep.csv") if args.out else None
    if out is not None:
        check_writable(out)
    if out is not None and is_stream(out) and args.resume:
        raise SpecError(f"--resume: {out} is not a file (a device or a FIFO): it keeps no journal")
    if out is None or is_stream(out):  # written straight into, without a journal
        return _sweep(args, spec, cascade, arch, cascades, out, size, ceilings)
    out = landing(out)  # a symbolic link: its target, the journal and lock beside it
    with journal.held(out):  # one sweep per --out at a time
        return _sweep(args, spec, cascade, arch, cascades, out, size, ceilings)


def _sweep(
    args: argparse.Namespace,
    spec: SweepSpec,
    cascade: str | None,
    arch: str | None,
    cascades: dict[str, str],
    out: Path | None,
    size: int,
    ceilings: Ceilings | None = None,
) -> int:
    """The sweep itself, its journal and CSV at `out` (None: standard output). The grid is
    streamed: rows go out in grid order as they are ready, never all held at once."""
    timing = TimingOptions(max_sim_s=args.max_sim_s)
    extra = (cascade, arch, timing, cascades, ceilings)
    writer, done = None, journal.Progress({}, frozenset())
    if out is not None and not is_stream(out):
        log = journal.journal_path(out)
        header = journal.Header(
            _parameters_digest(spec, extra),
            _specs_digest(cascade, arch, spec),
            journal.files_digest([Path(__file__).resolve().parent], "*.py"),
            size,
        )
        if log.exists() and not args.resume:
            raise SpecError(
                f"{log} holds an interrupted sweep: add --resume to continue it, or delete "
                "it to start over"
            )
        if log.exists():
            done = journal.read(log, header)
            _say_resuming(out, done, size)
        elif args.resume:
            print(f"nothing to resume ({log} does not exist): running the sweep", file=sys.stderr)
        writer = journal.Writer(log, header, fresh=not log.exists())
    left = (p for p in points(spec) if p.index not in done.rows)
    # (at most MAX_JOBS_PER_CPU a core and one a point left: more only costs memory)
    jobs = local_jobs(args.jobs, size - len(done.rows))
    bar = tqdm(
        total=size,
        initial=len(done.rows),
        desc="sweep",
        unit="point",
        disable=True if args.no_progress else None,  # None: only on a terminal
        file=sys.stderr,
    )
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(bar)
            if out is None:
                stream = sys.stdout
            else:  # written beside, renamed over `out` only once whole
                tmp = stack.enter_context(atomic_path(out))
                stream = stack.enter_context(tmp.open("w", encoding="utf-8", newline=""))
            header_row = columns(spec)
            rows_out = csv.writer(stream, lineterminator="\n")
            rows_out.writerow(header_row)
            sink = Sink(
                writer,
                bar.update,
                lambda row: rows_out.writerow([_cell(row.get(c)) for c in header_row]),
                done.rows,
            )
            if args.executor == "dask":
                run_dask(spec, chunked(left, 4 * jobs), args.scheduler, extra, sink)
            else:
                run_local(spec, chunked(left, jobs), jobs, extra, sink)
            if sink.written != size:  # every point has its row, in order
                raise RuntimeError(f"sweep wrote {sink.written} of {size} rows")
    except BrokenPipeError:
        raise
    except OSError as err:
        if out is None or err.filename is not None:
            raise
        # writing the CSV failed (/dev/full, a full disk): one line, no file left
        raise SpecError(f"cannot write {out}: {err.strerror or err}") from None
    finally:
        if writer is not None:
            writer.close()
    if out is None:
        return 0
    if writer is not None:
        journal.journal_path(out).unlink()  # the CSV holds every row now
        remove_stale_partials(out)  # a killed run's half-written CSV, if any
    print(
        f"{sink.written} points -> {out}"
        + (f" ({sink.failed} without results: see the error column)" if sink.failed else ""),
        file=sys.stderr,
    )
    return 0


def _say_resuming(out: Path, done: journal.Progress, total: int) -> None:
    """How much of the interrupted sweep is kept, and how much is computed again: the
    points in flight at the interruption (started, no row) and those never started."""
    recomputed = len(done.started - set(done.rows))
    fresh = total - len(done.started)
    print(
        f"resuming {out}: {len(done.rows)} of {total} points done, {recomputed} recomputed "
        f"(in flight at the interruption), {fresh} not started yet",
        file=sys.stderr,
    )


def _cascade_files(spec: SweepSpec) -> dict[str, str]:
    """A swept `cascade`'s values that are files here, as absolute paths (workers may run
    in other folders); the others are shipped cascades' names."""
    out = {}
    for value in spec.values("cascade") or ():
        path = _absolute(value)
        if path != value and path is not None:
            out[value] = path
    return out


def _parameters_digest(spec: SweepSpec, extra: tuple) -> str:
    """The sweep's identity: its grid, derived values, buffer rule and settings (not the
    file positions they came from), the overrides and the timing limit."""
    buffer = spec.buffer
    rule = (
        None
        if buffer is None
        else (buffer.minimum_bytes, buffer.grow, buffer.max_steps, buffer.until)
    )
    derive = tuple((name, text) for name, text, _loc in spec.derive)
    settings = (spec.name, spec.grid, derive, rule, spec.scope, spec.engine, spec.accounting)
    cascade, arch, timing, cascades, *rest = extra
    ceilings = rest[0] if rest else None
    identity = (settings, spec.linear, cascade, arch, timing.max_sim_s, sorted(cascades.items()))
    # measured ceilings are part of what a point computes (none: the digest as before)
    return journal.digest([repr(identity if ceilings is None else (*identity, ceilings))])


def _specs_digest(cascade: str | None, arch: str | None, spec: SweepSpec) -> str:
    """Every spec file the sweep may read: the shipped folders, the overrides and a
    linear-layer file. Not the sweep file: what it says is in the parameters' digest (its
    parsed grid and rules), so a comment edited there does not refuse a --resume."""
    files = [data_dir(kind) for kind in KINDS]
    files += [Path(f) for f in (cascade, arch, spec.linear) if f and is_file(Path(f))]
    files += [Path(f) for f in _cascade_files(spec).values()]
    return journal.files_digest(files)


if __name__ == "__main__":
    sys.exit(main())
