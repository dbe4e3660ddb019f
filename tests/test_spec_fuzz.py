"""Fuzzing the specs, not only cascades: mutated architecture, mapping, table and sweep
files (from the shipped ones) and hostile command-line values. Every case ends in a result
or one line on stderr with exit code 2, within a time limit, leaving no file half-written.

The unit suite runs FUZZ_CASES cases in all (default 300, derandomized: the same cases on
every run); `make fuzz` runs 10,000 with fresh random draws.
"""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.run import main as run_main
from simulator.spec.sweep_file import PARAMETERS
from simulator.support.journal import journal_path
from simulator.sweep import main as sweep_main

from .spec_fuzz import ROOT, TEXT, TREE, arch_copy, dump, mutate, no_partial_files, run_case

CASES = int(os.environ.get("FUZZ_CASES", "300"))
TARGETS = 5
LIMIT_S = int(os.environ.get("FUZZ_LIMIT_S", "20"))  # per case
FUZZ = settings(
    max_examples=max(1, CASES // TARGETS),
    deadline=None,
    derandomize="FUZZ_CASES" not in os.environ,
    database=None,
    suppress_health_check=list(HealthCheck),
)

mutations = st.lists(
    st.tuples(st.sampled_from(TREE + TEXT), st.integers(0, 10**6), st.integers(0, 10**6)),
    min_size=1,
    max_size=3,
)
engines = st.sampled_from(["analytic", "analytic", "cycle"])


@FUZZ
@given(st.sampled_from([("fusemax", "binding"), ("flat", "flat")]), mutations, engines)
def test_mutated_architectures(base, muts, engine):
    name, accel = base
    with tempfile.TemporaryDirectory() as tmp:
        path = arch_copy(Path(tmp), name)
        path.write_text(mutate(path.read_text(), muts))
        argv = ["--arch", str(path), "--accel", accel, "--seq", "1K", "--engine", engine]
        run_case(run_main, argv, LIMIT_S)


TABLES = sorted(
    str(p.relative_to(ROOT / "arch" / "tables")) for p in (ROOT / "arch" / "tables").rglob("*.yaml")
)


@FUZZ
@given(st.sampled_from(TABLES), mutations, st.sampled_from(["corrected", "published"]))
def test_mutated_energy_and_area_tables(table, muts, accounting):
    with tempfile.TemporaryDirectory() as tmp:
        name, accel = ("flat", "flat") if "flat" in table else ("fusemax", "binding")
        path = arch_copy(Path(tmp), name)
        target = Path(tmp) / "tables" / table
        target.write_text(mutate(target.read_text(), muts))
        argv = ["--arch", str(path), "--accel", accel, "--seq", "4K", "--engine", "analytic"]
        run_case(run_main, [*argv, "--accounting", accounting, "--breakdown"], LIMIT_S)


MAPPINGS = ["binding", "arch", "cascade", "flat", "unfused"]


@FUZZ
@given(st.sampled_from(MAPPINGS), mutations, engines)
def test_mutated_mappings(name, muts, engine):
    with tempfile.TemporaryDirectory() as tmp:
        for extra in (ROOT / "mappings").glob("*.csv"):
            (Path(tmp) / extra.name).write_bytes(extra.read_bytes())
        path = Path(tmp) / f"{name}.yaml"
        path.write_text(mutate((ROOT / "mappings" / f"{name}.yaml").read_text(), muts))
        argv = ["--mapping", str(path), "--seq", "1K", "--engine", engine]
        run_case(run_main, argv, LIMIT_S)


def _small_sweep() -> str:
    """The shipped pareto sweep on two small points (the mutations keep its rules)."""
    tree = yaml.safe_load((ROOT / "arch" / "sweeps" / "pareto.yaml").read_text())
    tree["sweep"]["grid"].update(model=["bert"], seq=["4K"], pe_dim=[16, 64])
    return dump(tree)


SMALL_SWEEP = _small_sweep()


@FUZZ
@given(mutations)
def test_mutated_sweeps(muts):
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "sweep.yaml"
        spec.write_text(mutate(SMALL_SWEEP, muts))
        out = Path(tmp) / "out" / "sweep.csv"
        argv = ["--spec", str(spec), "--out", str(out), "--jobs", "1", "--no-progress"]
        outcome = run_case(sweep_main, argv, LIMIT_S)
        if outcome.code == 0:
            rows = list(csv.DictReader(out.open()))
            assert rows and all("latency_s" in r for r in rows)
        else:
            assert not out.exists()
        assert not journal_path(out).exists()
        no_partial_files(Path(tmp))


VALUES = [
    "0",
    "-1",
    "1",
    "3",
    "1K",
    "64k",
    "1M",
    "10T",
    "2^40",
    "2^65",
    "2**10",
    "1e3",
    "1.5",
    "nan",
    "inf",
    "-inf",
    "",
    "  ",
    "banana",
    "0x10",
    "1_000",
    "\u0661\u0662",
    "1K1",
    "9" * 50,
]
COUNT_FLAGS = [
    "--seq",
    "--pe-dim",
    "--buffer-bytes",
    "--bandwidth",
    "--batch",
    "--heads",
    "--embed",
    "--kv-heads",
    "--window",
    "--context",
    "--value-bits",
    "--max-sim-s",
]
CHOICES = {
    "--model": ["bert", "xlm", "custom", "banana"],
    "--phase": ["prefill", "decode", "banana"],
    "--precision": ["fp16", "fp32", "int8", "banana"],
    "--engine": ["analytic", "analytic", "cycle"],
    "--mapping": ["auto", "auto:fusemax", "auto:flat/sequential", "auto:banana", "binding"],
}


@st.composite
def command_lines(draw) -> list[str]:
    argv: list[str] = []
    for flag in draw(st.lists(st.sampled_from(COUNT_FLAGS), min_size=1, max_size=3, unique=True)):
        argv += [flag, draw(st.sampled_from(VALUES))]
    for flag, pool in CHOICES.items():
        if draw(st.booleans()):
            argv += [flag, draw(st.sampled_from(pool))]
    if "--seq" not in argv:
        argv += ["--seq", "4K"]
    if "--engine" not in argv:
        argv += ["--engine", "analytic"]
    return argv


@FUZZ
@given(command_lines(), st.sampled_from(sorted(PARAMETERS)), st.sampled_from(VALUES))
def test_command_line_values(argv, parameter, value):
    run_case(run_main, argv, LIMIT_S)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "grid.csv"
        grid = ["--grid", f"{parameter}={value}", "seq=4K", "--engine", "analytic"]
        outcome = run_case(sweep_main, [*grid, "--out", str(out), "--no-progress"], LIMIT_S)
        assert out.exists() == (outcome.code == 0)
        no_partial_files(Path(tmp))


def _deep(depth: int) -> str:
    """A YAML document whose `shapes` nests `depth` flow sequences (then more keys)."""
    return "name: deep\nshapes: " + "[" * depth + "]" * depth + "\neinsums: []\n"


def test_deep_nesting_is_one_line_from_every_spec_loader(tmp_path, capsys):
    """200 levels of nesting: one line naming the file and line, not a RecursionError, from
    the cascade, architecture, mapping and sweep readers alike."""
    from simulator.cascade_cli import main as cascade_main

    deep = tmp_path / "deep.yaml"
    deep.write_text(_deep(200))
    for main, argv in (
        (cascade_main, ["passes", str(deep)]),
        (run_main, ["--arch", str(deep), "--seq", "1K", "--engine", "analytic"]),
        (run_main, ["--mapping", str(deep), "--seq", "1K", "--engine", "analytic"]),
        (sweep_main, ["--spec", str(deep), "--engine", "analytic"]),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        # the 65th level: the document's mapping, then the 64th bracket after "shapes: "
        assert err == f"error: {deep}:2:{len('shapes: ') + 64}: nested deeper than 64 levels\n"


def test_a_hundred_thousand_levels_fail_fast(tmp_path):
    """Deep enough to overflow the C stack of a recursive parser: one line, exit 2, fast."""
    import subprocess
    import sys
    import time

    deep = tmp_path / "deep.yaml"
    deep.write_text(_deep(100_000))
    start = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "simulator.cascade", "passes", str(deep)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert (r.returncode, r.stderr.count("\n")) == (2, 1), r.stderr[-500:]
    assert "nested deeper than 64 levels" in r.stderr
    assert time.monotonic() - start < 20
