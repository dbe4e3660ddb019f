"""Issue 8, point 3: `simulator.run --backend timeloop`. Without `timeloop-model`, or when it
fails, one line and exit code 2; a (fake) successful run is parsed and compared; the real
tool's path runs only where it is installed."""

from __future__ import annotations

import json
import math
import os
import shutil
import stat

import pytest

from simulator.plan.accesses import analyze
from simulator.run import main
from simulator.timeloop.backend import parse_stats, run_einsum
from simulator.timeloop.problems import mapping_from_map_text

from .conftest import DATA
from .test_accesses_timeloop import LEVELS, PROBLEM

STATS = DATA / "timeloop-check" / "timeloop-model.stats.txt"
ARGS = ["--accel", "binding", "--model", "bert", "--seq", "1K", "--backend", "timeloop"]


def _fake(tmp_path, body: str):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "timeloop-model"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bindir


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    return lines[0]


def test_parse_real_stats_matches_the_access_model():
    stats = parse_stats(STATS.read_text())
    assert stats.cycles == 67108864
    assert stats.computes == math.prod(e for _d, e in PROBLEM.instance)
    assert stats.energy_pj == pytest.approx(1174740.87e6, rel=1e-9)
    report = analyze(
        PROBLEM,
        mapping_from_map_text((DATA / "timeloop-check/timeloop-model.map.txt").read_text(), LEVELS),
    )
    assert stats.accesses == sum(c.reads + c.fills + c.updates for _l, _d, c in report.counts)


def test_missing_timeloop_is_one_line(tmp_path, monkeypatch, run_cli):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code, out, err = run_cli(main, ARGS)
    assert code == 2 and out == ""
    line = _one_line(err)
    assert "timeloop-model" in line and "not on PATH" in line
    assert "timeloopaccelergy/timeloop-accelergy-pytorch" in line


def test_failing_timeloop_is_one_line(tmp_path, monkeypatch, run_cli):
    bindir = _fake(tmp_path, 'echo "ERROR: cannot parse the mapping" >&2\nexit 3\n')
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    code, out, err = run_cli(main, ARGS)
    assert code == 2 and out == ""
    line = _one_line(err)
    assert "failed" in line and "exit code 3" in line and "cannot parse the mapping" in line


def test_timeloop_without_stats_is_one_line(tmp_path, monkeypatch, run_cli):
    bindir = _fake(tmp_path, "exit 0\n")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    code, _out, err = run_cli(main, ARGS)
    assert code == 2 and "no *.stats.txt" in _one_line(err)


def test_successful_run_is_compared(tmp_path, monkeypatch, run_cli):
    """A stand-in that answers every Einsum with the recorded real run's statistics: the
    comparison is parsed and printed for all 12 Einsums, and JSON carries it per config."""
    # The stand-in insists on what the C++ binary reads: the processed form first (a flat
    # `subtree`, no v0.4 `nodes:` with tags), then the ERT and ART.
    check = (
        'case "$1" in */timeloop-model.yaml) ;; *) echo "not the processed form: $1" >&2; '
        "exit 4;; esac\n"
        'grep -q "subtree:" "$1" && ! grep -q "!Container" "$1" || exit 5\n'
        'case "$2 $3" in */ERT.yaml\\ */ART.yaml) ;; '
        '*) echo "no ERT/ART: $2 $3" >&2; exit 6;; esac\n'
    )
    bindir = _fake(tmp_path, check + f'cp "{STATS}" ./timeloop-model.stats.txt\n')
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    code, out, err = run_cli(main, ARGS)
    assert code == 0, err
    section = out.split("Timeloop (timeloop-model) vs this model")[1]
    rows = [ln for ln in section.splitlines() if ln.startswith("binding")]
    assert len(rows) == 12 and all("67108864" in ln or "6.711e+07" in ln for ln in rows)
    code, out, err = run_cli(main, [*ARGS, "--format", "json"])
    assert code == 0, err
    checks = json.loads(out)[0]["timeloop"]
    assert len(checks) == 12 and all(c["timeloop_cycles"] == 67108864 for c in checks)
    qk = next(c for c in checks if c["einsum"] == "QK")
    assert qk["accesses_rel_diff"] == pytest.approx(qk["accesses"] / qk["timeloop_accesses"] - 1)


@pytest.mark.skipif(shutil.which("timeloop-model") is None, reason="timeloop-model not installed")
def test_real_timeloop_runs_every_exported_einsum(tmp_path):
    from simulator.export import main as export_main
    from simulator.timeloop.inputs import read_einsum

    assert export_main(["timeloop", "--accel", "binding", "--seq", "1K", "-o", str(tmp_path)]) == 0
    for d in sorted(tmp_path.iterdir()):
        stats = run_einsum(shutil.which("timeloop-model"), d)
        view = read_einsum(d).view
        assert stats.computes == math.prod(e for _x, e in view.problem.instance), d.name
        assert stats.cycles > 0 and stats.energy_pj > 0
