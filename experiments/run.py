"""Running the experiments: points in a process pool under one progress bar, then outputs.

Order of work: every available experiment's points are computed (in parallel, chunks of
points per worker task); as soon as an experiment's last chunk is in, this process writes
its result CSVs and report section, and its figures become one more task of the pool (drawn
beside the other experiments' points); the report is written last. Every file is written
atomically (`experiments.output`), so a run killed at any moment leaves no partial result
file, and `report.md` present means the run finished. Rows come back in the order of the
points whatever the order in which workers finish, so a re-run writes byte-identical CSVs.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from experiments.experiment import Context, Experiment, Selection
from experiments.output import remove_stale_partials, write_text
from experiments.published import REFERENCE_DIR, load_published
from experiments.registry import by_name, registry
from simulator.drivers.configs import Specs
from simulator.support.atomic import interrupts_held
from simulator.support.cli import abandon, worker_process
from simulator.support.units import format_count


@dataclass(frozen=True)
class RunOptions:
    out: Path
    selection: Selection
    experiments: tuple[str, ...]  # names, in registry order
    jobs: int = 1
    compare: bool = False
    progress: bool = True


@dataclass(frozen=True)
class RunSummary:
    written: tuple[Path, ...]
    points: int
    seconds: float
    report: Path


# Seconds between redraws of the progress bar while no chunk arrives (its elapsed time and
# rate stay current: a run never looks stalled on a terminal).
REFRESH_S = 0.5

_SPECS: list[Specs] = []  # this process's Specs: spec files parsed once per worker


def process_specs() -> Specs:
    """The Specs every chunk a process computes shares: the spec files do not change during
    a run, and what it keeps (parsed files, the mapper's answers under a key of everything
    they depend on) is the same whichever chunks came before."""
    if not _SPECS:
        _SPECS.append(Specs())
    return _SPECS[0]


def compute_chunk(name: str, points: Sequence[Any]) -> list[Any]:
    """Worker task: one experiment's points with the process's Specs."""
    experiment = by_name(name)
    specs = process_specs()
    return [experiment.compute(specs, p) for p in points]


def draw_figures(name: str, rows: list[Any], ctx: Context) -> list[Path]:
    """Worker task: one experiment's figures (drawn beside the other experiments' points and
    figures, not one after another in the parent at the end of a run)."""
    return by_name(name).figures(rows, ctx)


def tasks_of(
    points: Sequence[Any], size: int, share: Callable[[Any], Any] | None = None
) -> list[list[int]]:
    """The points' indices in worker tasks of at most `size`: consecutive points, or those
    with the same `share` key together (keys in the order they first appear)."""
    size = max(1, size)
    if share is None:
        groups = [list(range(len(points)))]
    else:
        by_key: dict[Any, list[int]] = {}
        for i, point in enumerate(points):
            by_key.setdefault(share(point), []).append(i)
        groups = list(by_key.values())
    return [group[i : i + size] for group in groups for i in range(0, len(group), size)]


def compute_rows(
    experiments: Sequence[Experiment],
    selection: Selection,
    jobs: int,
    progress: bool,
    finished: Callable[[str, list[Any]], None] | None = None,
    drawing: tuple[Context, Callable[[str, list[Path]], None]] | None = None,
) -> dict[str, list[Any]]:
    """Every experiment's rows, in the order of its points. `finished(name, rows)` is called
    in this process as soon as an experiment's last chunk is in, while the workers go on
    with the others' points. `drawing` (context, `drew(name, paths)`): its figures are then
    drawn by a worker, one more task of the pool (in this process with `jobs` 1), and
    `drew` is called here with their paths."""
    points = {e.name: list(e.points(selection)) for e in experiments}
    rows: dict[str, list[Any]] = {name: [None] * len(p) for name, p in points.items()}
    placed = [  # (experiment, the indices of its points in the task)
        (e.name, indices)
        for e in experiments
        for indices in tasks_of(points[e.name], e.chunk, e.share)
    ]
    tasks = [(name, [points[name][i] for i in indices]) for name, indices in placed]
    total = sum(len(chunk) for _, chunk in tasks)
    left = Counter(name for name, _ in tasks)

    drawn: dict[Any, str] = {}  # figure tasks in the pool -> their experiment

    def arrived(index: int, chunk_rows: list[Any]) -> Any:
        """The chunk's rows in place; the experiment's figure task when it is complete."""
        name, indices = placed[index]
        for i, row in zip(indices, chunk_rows, strict=True):
            rows[name][i] = row  # in the order of the points, whichever task came first
        bar.update(len(indices))
        left[name] -= 1
        if left[name] != 0:
            return None
        bar.set_postfix_str(f"writing {name}")  # its figures take seconds: said
        if finished is not None:
            finished(name, rows[name])
        if drawing is not None and executor is None:
            drawing[1](name, draw_figures(name, rows[name], drawing[0]))
        bar.set_postfix_str("")
        if drawing is None or executor is None:
            return None
        ctx = drawing[0]
        job = executor.submit(draw_figures, name, rows[name], ctx)
        drawn[job] = name
        return job

    bar = tqdm(total=total, desc="experiments", unit="point", disable=None if progress else True)
    executor = (  # --jobs 1: no pool, every chunk in this process
        ProcessPoolExecutor(max_workers=jobs, initializer=worker_process, initargs=(os.getpid(),))
        if jobs > 1
        else None
    )
    try:
        if executor is not None:
            with interrupts_held():  # the workers start (see worker_process)
                futures = {executor.submit(compute_chunk, *task): i for i, task in enumerate(tasks)}
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=REFRESH_S, return_when=FIRST_COMPLETED)
                if not done:  # a long chunk: the bar's clock moves on meanwhile
                    bar.refresh()
                chunks = sorted((futures[f], f) for f in done if f in futures)
                for index, future in chunks:
                    job = arrived(index, future.result())
                    if job is not None:
                        pending.add(job)
                for future in sorted((f for f in done if f in drawn), key=drawn.__getitem__):
                    drawing[1](drawn[future], future.result())  # type: ignore[index]
        else:
            for index, task in enumerate(tasks):
                arrived(index, compute_chunk(*task))
    except BaseException:
        if executor is not None:
            abandon(executor)
        raise
    else:
        if executor is not None:
            executor.shutdown(wait=True)
    finally:
        bar.close()
    for e in experiments:  # experiments with no points at this selection
        if e.name not in left:
            if finished is not None:
                finished(e.name, rows[e.name])
            if drawing is not None:
                drawing[1](e.name, draw_figures(e.name, rows[e.name], drawing[0]))
    return rows


def _header(options: RunOptions, experiments: Sequence[Experiment]) -> str:
    sel = options.selection
    return "\n".join(
        [
            "# FuseMax paper reproduction: figures and comparison with the published results",
            "",
            "Written by `python -m experiments` (`make experiments`). Models: "
            f"{', '.join(sel.models)}; sequence lengths: "
            f"{', '.join(format_count(s) for s in sel.seqs)}. Published values: the FuseMax "
            "artifact's result CSVs (copied into `tests/data/reference/`) and the means the "
            "paper states. Relative error = ours / published - 1.",
            "",
            "Engines and accountings: the paper-reproduction numbers use the **analytic** "
            "engine (the published numbers follow the analytic form) and energies the "
            "**published** accounting (the artifact's pricing); the project's defaults are the "
            "cycle engine and the **corrected** accounting (arch/tables/README.md), shown as "
            "extra columns where they differ. Figures: `<name>.pdf` and `<name>.png` in this "
            "folder"
            + (
                " with the published values as black markers."
                if options.compare
                else "; `--compare` overlays the published values as markers."
            ),
            "",
            "| experiment | outputs | status |",
            "| --- | --- | --- |",
            *[
                f"| {e.title} | {', '.join(f'`{o}`' for o in e.outputs)} | written |"
                for e in experiments
            ],
            "",
        ]
    )


def run(options: RunOptions) -> RunSummary:
    start = time.perf_counter()
    remove_stale_partials(options.out)
    # report.md is written last: gone until then, its presence means the run finished.
    (options.out / "report.md").unlink(missing_ok=True)
    experiments = [by_name(n) for n in options.experiments]
    ctx = Context(options.out, options.selection, load_published(REFERENCE_DIR), options.compare)
    files: dict[str, list[Path]] = {}
    sections: dict[str, str] = {}

    figures: dict[str, list[Path]] = {}

    def outputs(name: str, rows: list[Any]) -> None:
        e = by_name(name)
        files[name] = e.write(rows, ctx)
        sections[name] = e.report(rows, ctx)

    def drew(name: str, paths: list[Path]) -> None:
        figures[name] = paths

    try:
        rows = compute_rows(
            experiments,
            options.selection,
            options.jobs,
            options.progress,
            finished=outputs,
            drawing=(ctx, drew),
        )
    except BaseException:
        # a worker ended while drawing leaves its figures' temporaries: nothing half-written
        remove_stale_partials(options.out)
        raise
    written = [path for e in experiments for path in [*files[e.name], *figures[e.name]]]
    text = "\n".join([_header(options, experiments), *(sections[e.name] for e in experiments)])
    report = write_text(options.out / "report.md", text)
    written.append(report)
    return RunSummary(
        tuple(written),
        sum(len(r) for r in rows.values()),
        time.perf_counter() - start,
        report,
    )


def default_experiments() -> tuple[str, ...]:
    return tuple(e.name for e in registry())
