"""Every flag changes the answer or is refused in one line, exit 2 (issue 43); `auto` means
the mapper's unconstrained search everywhere; a sequence one token shorter is never slower."""

from __future__ import annotations

import json

import pytest

from simulator.run import main as run_main
from simulator.spec.sweep_file import PARAMETERS

FAST = ["--engine", "analytic", "--seq", "1K"]


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--accel", "binding", "--objective", "energy"], "--objective"),
        (["--accel", "flat", "--search-s", "1"], "--search-s"),
        (["--linear", "gemm"], "--linear"),
        (["--accel", "flat", "--mapping", "auto"], "--accel and --mapping"),
        (["--phase", "decode", "--context", "8K", "--mapping", "auto:fusemax"], "--seq"),
        (["--precision", "bogus", "--accel", "binding"], "bogus"),
        (["--precision", "bogus", "--accel", "binding", "--scope", "layer"], "bogus"),
    ],
)
def test_a_flag_that_cannot_act_is_one_line(run_cli, argv, names):
    code, out, err = run_cli(run_main, [*FAST, *argv])
    assert code == 2 and not out, out
    assert err.count("\n") == 1 and err.startswith("error:") and names in err, err


def test_objective_acts_where_the_mapper_searches(run_cli):
    base = [*FAST, "--mapping", "auto", "--format", "json"]
    code, latency, err = run_cli(run_main, base)
    assert code == 0, err
    code, energy, err = run_cli(run_main, [*base, "--objective", "energy"])
    assert code == 0, err
    assert json.loads(energy)[0]["search"]["objective"] == "energy"
    assert json.loads(latency)[0]["search"]["objective"] == "latency"


def test_auto_is_the_unconstrained_search_in_a_sweep_too():
    parse = PARAMETERS["accel"][0]
    assert parse("auto", "accel") == "auto"
    assert parse("auto:fused", "accel") == "auto"  # one spelling, so duplicates show
    assert parse("auto:fusemax", "accel") == "auto:fusemax"


def _latency(run_cli, seq: int, config: str) -> float:
    argv = ["--engine", "analytic", "--seq", str(seq), "--mapping", config, "--format", "json"]
    code, out, err = run_cli(run_main, argv)
    assert code == 0, err
    return json.loads(out)[0]["latency_s"]


def test_a_shorter_sequence_is_not_slower(run_cli):
    """1023 tokens ran its GEMMs on 93 of the array's 256 columns (the divisors of 1023):
    padded to whole rows, as a GEMM library pads its last tile, it is not slower than 1024."""
    assert _latency(run_cli, 1023, "auto:unfused") <= _latency(run_cli, 1024, "auto:unfused")
