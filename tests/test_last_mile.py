"""The last mile for users (issue 28): interrupts, benchmarks' verdict, outputs, messages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.bench import verdict


def test_bench_verdict_fails_over_target():
    """`make bench` prints every row, then names those over their target and exits 1."""
    text, code = verdict([("fast", 0.5, 1.0), ("slow", 39.0, 30.0), ("also slow", 2.6, 2.0)])
    assert code == 1
    assert text.splitlines()[1].startswith("fast") and "0.50" in text.splitlines()[1]
    assert text.splitlines()[-1] == "over target: slow (1.30x); also slow (1.30x)"
    text, code = verdict([("fast", 0.5, 1.0), ("exact", 1.0, 1.0)])
    assert code == 0 and text.splitlines()[-1] == "every benchmark within its target"


ENTRY_POINTS = {
    "run": ["-m", "simulator.run", "--model", "bert", "--seq", "1M", "--engine", "cycle"],
    "sweep": ["-m", "simulator.sweep", "--grid", "pe_dim=64,128,256", "model=bert,xlm,t5,trxl",
              "seq=1K,4K,16K,64K", "--engine", "cycle", "--jobs", "2", "--out", "OUT/s.csv"],
    "compare": ["-m", "simulator.compare", "--cascades", "attention-1pass,attention-3pass",
                "--seq", "4K", "--out", "OUT/cmp"],
    "rewrite": ["-m", "simulator.cascade", "rewrite", "attention-3pass", "--target-passes", "1",
                "-o", "OUT/a1.yaml"],
    "validate": ["-m", "simulator.validate", "--out", "OUT/v.txt"],
}  # fmt: skip


def _interrupt(args: list[str], out: Path, delay: float) -> tuple[int | None, str, list[str]]:
    """Start an entry point in its own process group, Ctrl-C the group after `delay`."""
    cmd = [sys.executable, *[a.replace("OUT", str(out)) for a in args]]
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    time.sleep(delay)
    if p.poll() is not None:
        return None, "", []  # finished first: nothing to interrupt
    os.killpg(p.pid, signal.SIGINT)
    _out, err = p.communicate(timeout=60)
    return p.returncode, err, sorted(x.name for x in out.iterdir())


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("delay", [0.25, 2.0])
def test_ctrl_c_is_one_line_and_130(tmp_path, name, delay):
    """Ctrl-C while the modules load (0.25 s) or while working (2 s): one line, exit 130,
    no result file (a sweep keeps its journal, for --resume)."""
    rc, err, files = _interrupt(ENTRY_POINTS[name], tmp_path, delay)
    if rc is None:
        pytest.skip(f"{name} finished within {delay} s")
    assert (rc, err) == (130, "interrupted: no partial result file was left\n")
    assert all(f.endswith(".journal") for f in files), files
