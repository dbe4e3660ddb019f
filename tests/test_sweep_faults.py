"""Sweeps that survive faults: a killed sweep resumes from its journal to the same CSV, a
journal of another sweep is refused, and a Dask worker that dies costs only its points."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from simulator.drivers import design_space
from simulator.support import journal
from simulator.sweep import main

from .conftest import ROOT

# 48 points of the analytic model: about a second on two processes, in 8 chunks of 6.
GRID = [
    "--grid",
    "model=bert,xlm,t5,trxl",
    "seq=4K,16K,64K,256K,1M,4M",
    "pe_dim=64,128",
    "--engine",
    "analytic",
    "--no-progress",
]
POINTS = 48


def _rows_in(log: Path) -> int:
    try:
        return log.read_text().count('"row"')
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("whole") / "whole.csv"
    assert main([*GRID, "--jobs", "2", "--out", str(out)]) == 0
    assert not journal.journal_path(out).exists()  # deleted once the CSV is written
    return out.read_bytes()


def test_a_killed_sweep_resumes_to_the_same_csv(tmp_path, uninterrupted):
    out = tmp_path / "killed.csv"
    log = journal.journal_path(out)
    cmd = [sys.executable, "-m", "simulator.sweep", *GRID, "--jobs", "2", "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while _rows_in(log) == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its worker processes, at once
    proc.wait()
    assert not out.exists() and log.exists()
    assert [p.name for p in tmp_path.glob(".killed.csv.partial-*")] == [
        f".killed.csv.partial-{proc.pid}"
    ]  # the CSV being written when it was killed: nothing runs on SIGKILL
    kept = _rows_in(log)
    assert 0 < kept < POINTS

    code = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert code.returncode == 2 and "--resume" in code.stderr  # a journal is never ignored

    resumed = subprocess.run([*cmd, "--resume"], cwd=ROOT, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    said = re.search(
        r"(\d+) of (\d+) points done, (\d+) recomputed \(in flight at the interruption\), "
        r"(\d+) not started yet",
        resumed.stderr,
    )
    assert said, resumed.stderr
    done, total, recomputed, fresh = map(int, said.groups())
    assert total == POINTS and done >= kept and done + recomputed + fresh == POINTS
    assert recomputed <= 2 * 6  # at most the two chunks handed to the two workers
    assert out.read_bytes() == uninterrupted
    assert not log.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["killed.csv"]  # no temporary left


def _header(out: Path, **change) -> journal.Header:
    base = dict(parameters="p", specs="s", code="c", points=POINTS)
    return journal.Header(**{**base, **change})


def test_a_journal_of_another_sweep_is_refused(tmp_path, capsys, uninterrupted):
    out = tmp_path / "other.csv"
    # a journal written by this very sweep is accepted ...
    assert main([*GRID, "--jobs", "1", "--out", str(out)]) == 0
    # ... one of another grid (or other specs, or other code) is refused in one line
    writer = journal.Writer(journal.journal_path(out), _header(out), fresh=True)
    writer.close()
    capsys.readouterr()
    assert main([*GRID, "--jobs", "1", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "journal of another sweep" in err and err.count("\n") == 1
    assert out.read_bytes() == uninterrupted  # the old CSV is left alone


def test_resume_needs_an_out_file(capsys):
    assert main([*GRID, "--resume"]) == 2
    assert "--resume" in capsys.readouterr().err


def test_a_line_cut_by_the_kill_is_dropped(tmp_path):
    path = tmp_path / "x.csv.journal"
    header = _header(path)
    writer = journal.Writer(path, header, fresh=True)
    writer.started([0, 1])
    writer.finished([(0, {"latency_s": 0.1, "accel": "binding", "error": None})])
    writer.close()
    with open(path, "a") as handle:
        handle.write('{"i": 1, "row": {"lat')  # the kill struck mid-write
    progress = journal.read(path, header)
    assert progress.rows == {0: {"latency_s": 0.1, "accel": "binding", "error": None}}
    assert progress.started == {0, 1}
    journal.Writer(path, header, fresh=False).finished([(1, {"latency_s": 0.2})])
    assert journal.read(path, header).rows[1] == {"latency_s": 0.2}


@pytest.mark.parametrize(
    ("line", "fragment"),
    [("garbage", "damaged journal line"), ('{"i": 99, "row": {}}', "indices"), ("[1]", "damaged")],
)
def test_a_damaged_journal_is_one_line(tmp_path, line, fragment):
    path = tmp_path / "x.csv.journal"
    header = _header(path)
    journal.Writer(path, header, fresh=True).close()
    with open(path, "a") as handle:
        handle.write(line + "\n")
    with pytest.raises(Exception, match=fragment) as err:
        journal.read(path, header)
    assert ":2:" in str(err.value)


def test_a_dask_worker_killed_mid_sweep_costs_only_its_points(tmp_path, uninterrupted):
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "dask.csv"
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        pids = client.run(os.getpid)  # worker address -> process id
        result: list[int] = []
        sweep = threading.Thread(
            target=lambda: result.append(
                main(
                    [
                        *GRID,
                        "--executor",
                        "dask",
                        "--scheduler",
                        cluster.scheduler_address,
                        "--out",
                        str(out),
                    ]
                )
            )
        )
        sweep.start()
        log = journal.journal_path(out)
        deadline = time.monotonic() + 120
        while _rows_in(log) == 0 and sweep.is_alive() and time.monotonic() < deadline:
            time.sleep(0.002)
        assert sweep.is_alive(), "the sweep finished before a worker could be killed"
        os.kill(next(iter(pids.values())), signal.SIGKILL)
        sweep.join(300)
    assert result == [0]
    assert out.read_bytes() == uninterrupted


def test_a_point_that_keeps_failing_on_dask_keeps_its_row(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    real = design_space.evaluate_point

    def flaky(spec, specs, point, timing=None):
        if point.index == 1:
            raise RuntimeError("the node's GPU fell off the bus")
        return real(spec, specs, point) if timing is None else real(spec, specs, point, timing)

    monkeypatch.setattr(design_space, "evaluate_point", flaky)
    out = tmp_path / "flaky.csv"
    grid = ["--grid", "model=bert", "seq=4K,16K,64K", "--engine", "analytic", "--no-progress"]
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        assert (
            main(
                [
                    *grid,
                    "--executor",
                    "dask",
                    "--scheduler",
                    cluster.scheduler_address,
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
    lines = out.read_text().splitlines()
    assert len(lines) == 4
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:]]
    assert "on Dask: RuntimeError: the node's GPU fell off the bus" in lines[2]
    assert rows[0]["error"] == "" and rows[2]["error"] == ""
    assert rows[1]["latency_s"] == "" and rows[1]["seq"] == "16384"


def test_a_fresh_sweep_removes_what_dead_runs_left(tmp_path):
    """Temporaries of the same --out left by processes no longer running are removed once
    the sweep is written; a running process's is left alone, and so are other files'."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "s.csv"
    left = tmp_path / f".s.csv.partial-{dead.pid}"
    live = tmp_path / f".s.csv.partial-{os.getppid()}"
    other = tmp_path / f".t.csv.partial-{dead.pid}"
    for path in (left, live, other):
        path.write_text("half a CSV")
    assert main(["--grid", "seq=1K", "accel=unfused", "--engine", "analytic", "--no-progress",
                 "--out", str(out)]) == 0  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, live.name, other.name])
