"""Independent tasks on local worker processes, their results in the order of the tasks.

For a command's own loop of independent, deterministic evaluations (ranking a rewrite's
candidates on a chip): the same results in the same order whatever the number of
processes, so the output is byte-identical to one process's. Ctrl-C and SIGTERM are the
parent's (the workers ignore them and end with it: :func:`simulator.support.cli.abandon`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from simulator.support.atomic import interrupts_held
from simulator.support.cli import abandon, worker_process
from simulator.support.errors import take_warnings, warn
from simulator.support.units import whole_number

# Worker processes per core at most, whatever is asked (never more than the tasks).
MAX_JOBS_PER_CPU = 4


def local_jobs(asked: int | None, tasks: int) -> int:
    """The processes to use: `asked` (None: one per core), at most MAX_JOBS_PER_CPU per core
    and one per task, at least one."""
    cpus = os.cpu_count() or 1
    return max(1, min(asked or cpus, MAX_JOBS_PER_CPU * cpus, tasks))


# `--jobs N` as a command line gives it: a whole number, 1 or more (one line else).
jobs_option = whole_number("--jobs", 1)


def ordered_map(
    fn: Callable[..., Any],
    tasks: Sequence[tuple],
    jobs: int,
    done: Callable[[int], None] | None = None,
) -> list[Any]:
    """`[fn(*task) for task in tasks]`, on `jobs` processes (1: in this process);
    `done(count)` after each task finishes, in whatever order they finish. `fn` must be a
    module-level function and its tasks and results picklable. The warnings a task records
    in a worker are recorded here, in the order of the tasks (as one process records them)."""
    if jobs <= 1 or len(tasks) <= 1:
        out = []
        for i, task in enumerate(tasks):
            out.append(fn(*task))
            if done is not None:
                done(i + 1)
        return out
    pool = ProcessPoolExecutor(
        max_workers=jobs, initializer=worker_process, initargs=(os.getpid(),)
    )
    try:
        with interrupts_held():  # the workers start (see worker_process)
            futures = [pool.submit(_with_warnings, fn, task) for task in tasks]
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            if done is not None:
                done(len(futures) - len(pending))
        outcomes = [f.result() for f in futures]
    except BaseException:  # Ctrl-C (the workers leave it to us), or a task's error
        abandon(pool)
        raise
    pool.shutdown(wait=True)
    for _result, warnings in outcomes:
        for message in warnings:
            warn(message)
    return [result for result, _warnings in outcomes]


def _with_warnings(fn: Callable[..., Any], task: tuple) -> tuple[Any, list[str]]:
    """A task in a worker: its result and the warnings it recorded."""
    take_warnings()  # (the parent's, copied into this process when it started)
    result = fn(*task)
    return result, take_warnings()
