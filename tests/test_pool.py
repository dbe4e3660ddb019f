"""Independent tasks on worker processes (simulator.support.pool): results in the order of
the tasks whatever order they finish in, the same as in one process, and what is asked of
the pool bounded by the cores and the tasks."""

from __future__ import annotations

import os
import time

import pytest

from simulator.support.pool import MAX_JOBS_PER_CPU, local_jobs, ordered_map


def _late(index: int, seconds: float) -> tuple[int, int]:
    time.sleep(seconds)
    return index, os.getpid()


def test_results_come_in_the_order_of_the_tasks_not_of_their_ends():
    tasks = [(0, 0.4), (1, 0.0), (2, 0.2), (3, 0.0), (4, 0.0)]  # the first ends last
    counts = []
    results = ordered_map(_late, tasks, 2, counts.append)
    assert [i for i, _pid in results] == [0, 1, 2, 3, 4]
    assert len({pid for _i, pid in results} - {os.getpid()}) == 2  # two other processes
    assert counts[-1] == len(tasks) and counts == sorted(counts)


def test_one_job_runs_in_this_process():
    results = ordered_map(_late, [(0, 0.0), (1, 0.0)], 1)
    assert results == [(0, os.getpid()), (1, os.getpid())]


def test_a_tasks_error_is_raised_in_the_caller():
    with pytest.raises(ZeroDivisionError):
        ordered_map(divmod, [(1, 1), (1, 0)], 2)


def test_the_jobs_are_bounded_by_the_cores_and_the_tasks():
    cpus = os.cpu_count() or 1
    assert local_jobs(None, 1000) == min(cpus, 1000)
    assert local_jobs(10**6, 10**6) == MAX_JOBS_PER_CPU * cpus
    assert local_jobs(8, 3) == 3
    assert local_jobs(None, 0) == 1


def _warned(index: int) -> int:
    from simulator.support.errors import warn

    warn(f"task {index} warns")
    return index


def test_warnings_a_worker_records_are_recorded_here_in_task_order():
    from simulator.support.errors import take_warnings

    take_warnings()
    assert ordered_map(_warned, [(i,) for i in range(4)], 2) == [0, 1, 2, 3]
    assert take_warnings() == [f"task {i} warns" for i in range(4)]
