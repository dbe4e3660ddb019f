"""Bounded work for any input: huge lengths and sizes answer (or stop with one line) in
about a second, the cycle engine reports its progress and refuses politely past
`--max-sim-s`, and neither changes a result."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.drivers.configs import Specs, prepare
from simulator.plan.point import plan_point
from simulator.run import main
from simulator.spec.workload import make_workload
from simulator.support.errors import SpecError
from simulator.timing.cycle.simulate import pipelined_point
from simulator.timing.cycle.waterfall import Waterfall
from simulator.timing.options import TimingOptions


@pytest.fixture(scope="module")
def drifting_program():
    """XLM on a 128x128 array with a 4 MB buffer (P1 = 32 query tiles per row): the 1D
    array falls one cycle per epoch behind the 2D array's 128-cycle operations, so the
    scheduler's state repeats only every 128 epochs -- beyond the pipeline depth and the
    DRAM phase. One block of 4096 epochs."""
    specs = Specs()
    workload = make_workload("xlm", "16K", {"batch": 1, "heads": 1})
    cascade, mapping, arch = prepare(specs, "binding", workload, pe_dim=128, buffer_bytes=4 << 20)
    program = pipelined_point(plan_point(cascade, mapping, arch, workload)).program
    return dataclasses.replace(program, loops=(("P2", 1), *program.loops[1:]))


def test_a_drifting_steady_state_is_found_and_exact(drifting_program):
    fast = Waterfall(drifting_program).run()
    full = Waterfall(drifting_program, extrapolate=False).run()
    assert full.simulated_epochs == full.epochs == 4096
    assert fast.simulated_epochs < full.epochs / 4  # found the 128-epoch period
    assert (fast.cycles, fast.busy, fast.stalls) == (full.cycles, full.busy, full.stalls)


def test_progress_is_reported_and_changes_nothing(drifting_program):
    calls: list[tuple[str, int, int]] = []
    options = TimingOptions(
        progress=lambda phase, done, total, _s: calls.append((phase, done, total))
    )
    watched = Waterfall(drifting_program, extrapolate=False, options=options).run()
    plain = Waterfall(drifting_program, extrapolate=False).run()
    assert (watched.cycles, watched.busy) == (plain.cycles, plain.busy)
    assert len(calls) > 2
    done = [d for _p, d, _t in calls]
    assert done == sorted(done) and calls[-1][1:] == (4096, 4096)


def test_max_sim_s_refuses_with_an_estimate(drifting_program):
    options = TimingOptions(max_sim_s=1e-6)
    with pytest.raises(SpecError) as err:
        Waterfall(drifting_program, extrapolate=False, options=options).run()
    text = str(err.value)
    assert "--max-sim-s" in text and "to finish" in text and "of 4096 epochs done" in text
    assert "\n" not in text


def test_max_sim_s_from_the_command_line(run_cli):
    argv = ["--model", "xlm", "--seq", "1M", "--pe-dim", "128", "--buffer-bytes", "4MiB"]
    code, out, err = run_cli(main, [*argv, "--accel", "fusemax", "--max-sim-s", "1e-9"])
    assert code == 2 and out == ""
    assert err.startswith("error: binding: cycle simulation of phase attention stopped")
    assert err.count("\n") == 1
    code, out, err = run_cli(main, [*argv, "--accel", "fusemax", "--max-sim-s", "60"])
    assert code == 0 and "+Binding" in out  # the steady state: well under a second


@pytest.mark.parametrize("value", ["banana", "0", "-3", "inf", "nan"])
def test_bad_max_sim_s(run_cli, value):
    code, _out, err = run_cli(main, ["--max-sim-s", value])
    assert code == 2 and "--max-sim-s" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["--seq", "10T"],
        ["--seq", "10T", "--engine", "analytic"],
        ["--seq", "2^40"],
        ["--seq", "2**36", "--accel", "fusemax"],
        ["--seq", "64K", "--pe-dim", "65536"],
        ["--seq", "1M", "--buffer-bytes", "1T"],
    ],
)
def test_extreme_inputs_answer_or_say_which_limit(run_cli, argv):
    code, out, err = run_cli(main, argv)
    assert code in (0, 2)
    if code == 2:
        assert out == "" and err.count("\n") == 1 and err.startswith("error: ")
    else:
        assert "latency (s)" in out


def test_the_default_set_leaves_out_a_configuration_that_does_not_fit(run_cli):
    code, out, err = run_cli(main, ["--seq", "10T"])
    assert code == 0
    assert "FLAT" not in out.split("\n2D-array")[0].replace("vs FLAT", "").replace("E/FLAT", "")
    assert "note: flat left out:" in out and "does not fit" in out
    # named on the command line, it is an error
    code, out, err = run_cli(main, ["--seq", "10T", "--accel", "flat"])
    assert code == 2 and "does not fit" in err


def test_max_sim_s_help_readme_and_behaviour_agree(run_cli, capsys):
    """run and compare: without --max-sim-s a simulation past the default budget shows the
    analytic numbers with a note, and their help says so (not "no limit"); with it, one
    past the limit is refused in one line. The README says the same; a sweep has no limit
    unless given one, as its help says."""
    from simulator.compare import main as compare_main
    from simulator.drivers.configs import DEFAULT_MAX_SIM_S
    from simulator.run import build_parser as run_parser
    from simulator.sweep import build_parser as sweep_parser

    from .conftest import ROOT

    budget = f"past {DEFAULT_MAX_SIM_S:g} s, the analytic engine's numbers, with a note"
    assert budget in " ".join(run_parser().format_help().split())
    with pytest.raises(SystemExit):
        compare_main(["--help"])
    assert budget in " ".join(capsys.readouterr().out.split())
    assert "(default: no limit)" in " ".join(sweep_parser().format_help().split())
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "Any point of `run` or `compare` answers within seconds" in readme
    assert f"longer than {DEFAULT_MAX_SIM_S:g} s shows the analytic engine's numbers" in readme

    argv = ["--cascades", "attention-1pass", "--model", "xlm", "--seq", "1M",
            "--strategies", "fusemax"]  # fmt: skip
    code, out, err = run_cli(compare_main, [*argv, "--max-sim-s", "1e-9"])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "cycle simulation of phase fused stopped at --max-sim-s 1e-09" in err


def test_compare_past_the_default_budget_shows_analytic_numbers(run_cli):
    """A point whose cycle simulation never settles (1K tokens, 256 heads of width 8):
    compare answers within seconds with the analytic engine's numbers, a note on stderr."""
    import time

    from simulator.compare import main as compare_main

    start = time.monotonic()
    argv = ["--cascades", "attention-1pass", "--seq", "1K", "--embed", "8", "--heads", "256",
            "--strategies", "fusemax", "--format", "csv"]  # fmt: skip
    code, out, err = run_cli(compare_main, argv)
    assert code == 0 and out.count("\n") == 2
    assert err.startswith("note: auto:fusemax: the cycle simulation outruns the 2 s default")
    assert "analytic engine's numbers" in err and err.count("\n") == 1
    assert time.monotonic() - start < 30
