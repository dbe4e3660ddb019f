"""`python -m simulator.sweep`: the pareto sweep against the published pareto.csv, user grids,
the buffer rule, parallel and Dask executors giving identical CSVs, and bad input."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from simulator.drivers.configs import Sizing, Specs, evaluate
from simulator.drivers.design_space import compute_bound
from simulator.spec.workload import make_workload
from simulator.sweep import main
from tests.reference import rows

SMALL = ["--no-progress", "--engine", "analytic"]


def _sweep(tmp_path: Path, *args: str, name: str = "out.csv") -> list[dict[str, str]]:
    out = tmp_path / name
    assert main([*args, "--out", str(out)]) == 0
    with open(out, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def pareto_rows(tmp_path_factory) -> list[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("pareto")
    return _sweep(tmp, "--spec", "pareto", "--no-progress", "--jobs", "2")


def test_pareto_sweep_matches_the_published_latency_and_area(pareto_rows):
    ours = {(r["model"], int(r["pe_dim"])): r for r in pareto_rows}
    reference = rows("pareto")
    assert len(ours) == len(reference) == 24
    for ref in reference:
        mine = ours[(ref["model"], int(ref["PE_dim"]))]
        assert not mine["error"]
        for column, theirs in (
            ("latency_s", "latency"),
            ("area_um2", "area"),
            ("array_2d_area_um2", "array_2d_area"),
            ("traffic_bytes", "traffic"),
            ("memory_s", "mem_lat"),
        ):
            assert float(mine[column]) == pytest.approx(float(ref[theirs]), rel=0.02), (
                column,
                ref,
            )


def test_buffer_rule_doubles_the_minimum_only_when_attention_is_memory_bound(pareto_rows):
    # The paper's minimum buffer for the pareto sweep: pe_dim rows of E values, 8 tensors,
    # 2 bytes each (the sequence is long enough that one row of tiles suffices).
    specs = Specs()
    chosen = {(r["model"], int(r["pe_dim"])): int(r["buffer_bytes"]) for r in pareto_rows}
    for model, pe_dim in (("BERT", 256), ("BERT", 512), ("XLM", 512)):
        embed = 128 if model == "XLM" else 64
        minimum = pe_dim * embed * 8 * 2
        workload = make_workload(model.lower(), "256K")
        at_min = evaluate(specs, "binding", workload, Sizing(pe_dim=pe_dim, buffer_bytes=minimum))
        if compute_bound(at_min):
            assert chosen[(model, pe_dim)] == minimum
        else:
            doubled = evaluate(
                specs, "binding", workload, Sizing(pe_dim=pe_dim, buffer_bytes=2 * minimum)
            )
            assert compute_bound(doubled)
            assert chosen[(model, pe_dim)] == 2 * minimum
    # the 512x512 array is the one whose minimum buffer leaves attention waiting on DRAM
    assert chosen[("BERT", 512)] == 2 * 512 * 64 * 16 and chosen[("BERT", 256)] == 256 * 64 * 16


def test_a_user_grid_runs_every_combination_in_order(tmp_path):
    got = _sweep(tmp_path, "--grid", "pe_dim=64,128", "buffer_bytes=4M,8M", "seq=64K", *SMALL)
    assert [(r["pe_dim"], r["buffer_bytes"]) for r in got] == [
        ("64", "4194304"),
        ("64", "8388608"),
        ("128", "4194304"),
        ("128", "8388608"),
    ]
    assert {r["accel"] for r in got} == {"binding"} and {r["model"] for r in got} == {"BERT"}
    specs = Specs()
    for r in got:
        direct = evaluate(
            specs,
            "binding",
            make_workload("bert", "64K"),
            Sizing(pe_dim=int(r["pe_dim"]), buffer_bytes=int(r["buffer_bytes"])),
        )
        assert float(r["latency_s"]) == direct.latency_s
    # four times the PEs: about a quarter of the (compute-bound) latency
    assert float(got[2]["latency_s"]) < 0.3 * float(got[0]["latency_s"])


def test_the_1d_width_and_register_files_are_design_parameters(tmp_path):
    got = _sweep(tmp_path, "--grid", "pe_dim_1d=64,256,512", "seq=64K", *SMALL)
    narrow, same, wide = got
    assert [(r["pe_dim"], r["pe_dim_1d"]) for r in got] == [
        ("256", "64"),
        ("256", "256"),
        ("256", "512"),
    ]
    # FuseMax's binding spreads a 256-wide tile (P0 = the 2D array's width) over the 1D array
    assert "PE1D's meshX=64" in narrow["error"] and narrow["latency_s"] == ""
    # a wider 1D array: the same schedule on half of it, more area
    assert float(wide["latency_s"]) == pytest.approx(float(same["latency_s"]), rel=1e-9)
    assert float(wide["util_1d"]) == pytest.approx(float(same["util_1d"]) / 2, rel=1e-9)
    assert float(wide["area_um2"]) > float(same["area_um2"])
    # Registers: two tiles in flight on a 64x64 array (E = 64) stall the cycle engine's
    # waterfall, four do not (the analytic model does not see registers at all).
    regs = _sweep(
        tmp_path,
        "--grid",
        "seq=256K",
        "pe_dim=64",
        "buffer_bytes=64K",
        "register_words_2d=4,8",
        "register_words_1d=16",
        "--no-progress",
        name="regs.csv",
    )
    two, four = (float(r["latency_s"]) for r in regs)
    analytic = evaluate(
        Specs(), "binding", make_workload("bert", "256K"), Sizing(pe_dim=64, buffer_bytes=65536)
    )
    assert two > 1.3 * four
    assert four == pytest.approx(analytic.latency_s, rel=1e-3)


def test_layer_scope_adds_the_linear_layers(tmp_path):
    attention = _sweep(tmp_path, "--grid", "seq=16K", *SMALL)
    layer = _sweep(tmp_path, "--grid", "seq=16K", "--scope", "layer", *SMALL, name="l.csv")
    (a,), (r,) = attention, layer
    assert float(r["attention_latency_s"]) == float(a["latency_s"])
    assert float(r["latency_s"]) == pytest.approx(
        float(r["attention_latency_s"]) + float(r["linear_latency_s"]), rel=1e-12
    )
    assert float(r["linear_latency_s"]) > 0


def test_a_point_that_cannot_map_keeps_its_row_with_the_reason(tmp_path, capsys):
    # 16 x 16 PEs and a 4 KiB buffer: FLAT's rule fits its tiles, +Binding's file does not
    grid = ("accel=flat,binding", "pe_dim=16", "buffer_bytes=4K", "seq=1K")
    flat, binding = _sweep(tmp_path, "--grid", *grid, *SMALL)
    assert "does not fit" in binding["error"] and binding["latency_s"] == ""
    assert flat["error"] == "" and float(flat["latency_s"]) > 0
    assert "1 without results" in capsys.readouterr().err


def test_results_do_not_depend_on_the_executor(tmp_path):
    grid = ["--grid", "model=bert,xlm", "seq=1K,64K", "pe_dim=64,256", "--no-progress"]
    one = _sweep(tmp_path, *grid, "--jobs", "1", name="one.csv")
    _sweep(tmp_path, *grid, "--jobs", "2", name="two.csv")
    assert len(one) == 8
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "two.csv").read_bytes()


def test_dask_executor_on_a_local_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    grid = ["--grid", "model=bert,t5", "seq=4K", "pe_dim=64,128", *SMALL]
    local = _sweep(tmp_path, *grid, "--jobs", "1", name="local.csv")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        remote = _sweep(
            tmp_path,
            *grid,
            "--executor",
            "dask",
            "--scheduler",
            cluster.scheduler_address,
            name="dask.csv",
        )
    assert len(local) == 4 and not any(r["error"] for r in remote)
    assert (tmp_path / "local.csv").read_bytes() == (tmp_path / "dask.csv").read_bytes()


def test_stdout_csv_and_parameter_list(capsys):
    assert main(["--grid", "seq=1K", *SMALL]) == 0
    text = capsys.readouterr().out
    (row,) = list(csv.DictReader(io.StringIO(text)))
    assert row["seq"] == "1024" and float(row["latency_s"]) > 0
    assert main(["--list"]) == 0
    listing = capsys.readouterr().out
    for name in ("pe_dim_1d", "buffer_bytes", "bandwidth", "register_words_2d", "seq"):
        assert name in listing


BAD_SPEC = """\
sweep:
  grid:
    pe_dim: [64, 128]
  bufer:
    minimum_bytes: 1024
"""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--grid", "banana=1"], "unknown sweep parameter 'banana'"),
        (["--grid", "seq=banana"], "'banana' is not a count"),
        (["--grid", "pe_dim"], "is not NAME=V1,V2"),
        (["--grid", "pe_dim=64,64"], "listed twice"),
        (["--grid", "accel=warp"], "warp"),
        (["--grid", "model=gpt9"], "gpt9"),
        (["--executor", "dask"], "needs --scheduler"),
        (["--executor", "dask", "--scheduler", "banana"], "cannot reach the Dask scheduler"),
        (["--spec", "pareto", "--grid", "buffer_bytes=1M"], "both swept and sized"),
        (["--spec", "nosuch"], "no such sweep file"),
        (["--jobs", "0"], "--jobs must be at least 1"),
        (
            ["--spec", "pareto", "--grid", "pe_dim=64", "register_words_2d=8,64"],
            "register_words_2d is both swept (grid) and derived",
        ),
        (["--grid", "bandwidth=nan"], "positive finite number"),
        (["--grid", "model=bert,BERT"], "listed twice"),
        (["--grid", "accel=binding,fusemax"], "listed twice"),
        (["--grid", "seq=4K", "--arch", "nosuch.yaml"], "--arch nosuch.yaml: no such file"),
        (["--grid", "seq=4K", "--cascade", "nosuch"], "--cascade nosuch: no such file"),
        (["--grid", "cascade=attention-1pass,nosuch"], "--cascade nosuch: no such file"),
        (["--grid", "accel=auto:warp"], "unknown binding strategy 'warp'"),
        (["--grid", "phase=later"], "'later' is not one of prefill, decode"),
        (["--grid", "context=32K"], "context is the cache of a decode step"),
        (
            ["--grid", "accel=auto:flat", "cascade=attention-1pass", "model=llama3-8b"],
            "cannot bind 'attention-1pass' with the FLAT strategy",
        ),
    ],
)
def test_bad_sweeps_fail_in_one_line(tmp_path, capsys, args, message):
    out = tmp_path / "never.csv"
    assert main([*args, "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_a_sweep_file_typo_names_file_and_line(tmp_path, capsys):
    spec = tmp_path / "mine.yaml"
    spec.write_text(BAD_SPEC)
    assert main(["--spec", str(spec), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{spec}:4" in err and "unknown key 'bufer'" in err


@pytest.mark.parametrize(
    "derive, message",
    [
        ("seq: 4 * pe_dim", "derive: 'seq' cannot be computed"),
        ("batch: 1", "derive: 'batch' cannot be computed"),
        ("register_words_2d: PE2D.meshX // 8", "unknown name PE2D.meshX"),
        ("register_words_2d: 2 * pe_dimm", "unknown name pe_dimm"),
    ],
)
def test_derived_values_are_checked_before_any_work(tmp_path, capsys, derive, message):
    spec = tmp_path / "mine.yaml"
    spec.write_text(f"sweep:\n  grid:\n    pe_dim: [64, 128]\n  derive:\n    {derive}\n")
    out = tmp_path / "never.csv"
    assert main(["--spec", str(spec), "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and f"{spec}:5" in err and err.count("\n") == 1
    assert not out.exists()


def test_a_buffer_rule_with_an_unknown_name_stops_the_sweep(tmp_path, capsys):
    spec = tmp_path / "mine.yaml"
    spec.write_text(
        "sweep:\n  grid:\n    pe_dim: [64]\n  buffer:\n    minimum_bytes: pe_dimm * 1024\n"
    )
    assert main(["--spec", str(spec), "--no-progress"]) == 2
    assert "minimum_bytes: unknown name pe_dimm" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["missing folder", "file as folder"])
def test_an_unwritable_out_fails_before_the_sweep(tmp_path, capsys, kind):
    """(An existing folder as --out is written inside: tests/test_last_mile.py.)"""
    target = tmp_path / "taken"
    if kind == "missing folder":
        out = target / "x.csv"
    else:
        target.write_text("a file")
        out = target / "x.csv"
    assert main(["--grid", "seq=1K", *SMALL, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write {out}") and err.count("\n") == 1
    assert kind != "missing folder" or not target.exists()


def test_a_failed_point_keeps_its_parameters(tmp_path):
    (row,) = _sweep(tmp_path, "--grid", "accel=fusemax", "pe_dim=1", "seq=1K", *SMALL)
    assert row["error"] and row["pe_dim"] == "1" and row["accel"] == "binding"
    assert row["model"] == "BERT" and row["latency_s"] == ""


def test_the_csv_gets_the_usual_file_permissions(tmp_path):
    import os

    mask = os.umask(0o022)
    try:
        _sweep(tmp_path, "--grid", "seq=1K", *SMALL)
    finally:
        os.umask(mask)
    assert (tmp_path / "out.csv").stat().st_mode & 0o777 == 0o644


def test_relative_override_paths_reach_the_workers(tmp_path, monkeypatch):
    """Files named relative to the caller's folder are handed to workers as absolute
    paths: a Dask worker started elsewhere finds them."""
    from simulator import sweep as sweep_module

    arch = tmp_path / "mine.yaml"
    arch.write_text((Path(__file__).parent.parent / "arch" / "fusemax.yaml").read_text())
    seen = []
    real = sweep_module.run_local

    def spy(spec, chunks, jobs, extra, sink):
        seen.append(extra[:2])  # (cascade, arch) overrides; then the timing options
        return real(spec, chunks, jobs, extra, sink)

    monkeypatch.setattr(sweep_module, "run_local", spy)
    monkeypatch.chdir(tmp_path)
    assert main(["--grid", "seq=1K", *SMALL, "--arch", "mine.yaml", "--out", "o.csv"]) == 0
    assert seen == [(None, str(arch.resolve()))]


def test_automatic_bindings_and_cascades_are_swept(tmp_path):
    """`accel=auto:STRATEGY` binds every point for its workload and `cascade` swaps the
    cascade per point: each row is what `simulator.run` gives for that point; a cascade a
    strategy cannot bind keeps its row with the reason."""
    got = _sweep(
        tmp_path,
        "--grid",
        "accel=auto:fusemax,auto:flat",
        "cascade=attention-causal-1pass,attention-causal-3pass",
        "model=llama3-8b",
        "seq=4K",
        *SMALL,
    )
    assert [(r["accel"], r["cascade"]) for r in got] == [
        ("auto:fusemax", "attention-causal-1pass"),
        ("auto:fusemax", "attention-causal-3pass"),
        ("auto:flat", "attention-causal-1pass"),
        ("auto:flat", "attention-causal-3pass"),
    ]
    w = make_workload("llama3-8b", "4K")
    for row in (got[0], got[3]):
        assert not row["error"]
        r = evaluate(Specs(cascade_override=row["cascade"]), row["accel"], w)
        assert float(row["latency_s"]) == r.latency_s
        assert float(row["traffic_bytes"]) == r.traffic_bytes
    for row in (got[1], got[2]):  # FuseMax binds 1-pass cascades, FLAT 3-pass ones
        assert "cannot bind" in row["error"] and row["latency_s"] == ""


def test_decode_and_grouped_heads_are_sweep_parameters(tmp_path):
    got = _sweep(
        tmp_path,
        "--grid",
        "accel=auto",
        "cascade=attention-decode",
        "model=llama3-8b",
        "seq=1",
        "phase=decode",
        "context=8K,32K",
        "kv_heads=8,32",
        *SMALL,
    )
    assert [(r["context"], r["kv_heads"], r["phase"]) for r in got] == [
        ("8192", "8", "decode"),
        ("8192", "32", "decode"),
        ("32768", "8", "decode"),
        ("32768", "32", "decode"),
    ]
    latency = {(int(r["context"]), int(r["kv_heads"])): float(r["latency_s"]) for r in got}
    for context in (8192, 32768):  # memory-bound: the cache's size sets the time
        assert latency[(context, 32)] == pytest.approx(4 * latency[(context, 8)], rel=0.01)
    assert latency[(32768, 8)] == pytest.approx(4 * latency[(8192, 8)], rel=0.01)
    w = make_workload("llama3-8b", "1", {"kv_heads": 8}, phase="decode", context="32K")
    r = evaluate(Specs(cascade_override="attention-decode"), "auto", w)
    assert float(got[2]["latency_s"]) == r.latency_s


def test_a_swept_cascade_file_reaches_the_workers(tmp_path, monkeypatch):
    """A cascade file named relative to the caller's folder is found by every worker, and
    the row keeps the name it was given."""
    source = Path(__file__).resolve().parent.parent / "cascades" / "attention-causal-1pass.yaml"
    (tmp_path / "mine.yaml").write_text(source.read_text())
    monkeypatch.chdir(tmp_path)
    grid = [
        "accel=auto",
        "model=llama3-8b",
        "seq=4K,16K",
        "cascade=mine.yaml,attention-causal-1pass",
    ]
    got = _sweep(tmp_path, "--grid", *grid, "--jobs", "2", *SMALL)
    assert [r["cascade"] for r in got] == ["mine.yaml", "attention-causal-1pass"] * 2
    for a, b in ((got[0], got[1]), (got[2], got[3])):
        assert not a["error"] and a["latency_s"] == b["latency_s"]


def test_workers_are_capped_at_the_points(tmp_path, monkeypatch):
    """--jobs 1000 for two points starts two workers, not a thousand; and never more than
    MAX_JOBS_PER_CPU per core however many points there are."""
    from concurrent.futures import Future

    import simulator.sweep as sweep

    started: list[int] = []

    class Inline:  # records the pool's size, runs each task here
        def __init__(self, max_workers, initializer=None, initargs=()):
            started.append(max_workers)

        def submit(self, fn, *args):
            future: Future = Future()
            future.set_result(fn(*args))
            return future

        def shutdown(self, wait=True, cancel_futures=False):
            pass

    monkeypatch.setattr(sweep, "ProcessPoolExecutor", Inline)
    monkeypatch.setattr(sweep.os, "cpu_count", lambda: 2)
    rows = _sweep(tmp_path, "--grid", "seq=1K,2K", "accel=unfused", *SMALL, "--jobs", "1000")
    assert len(rows) == 2 and started == [2]
    started.clear()
    monkeypatch.setattr(sweep.os, "cpu_count", lambda: 1)
    rows = _sweep(tmp_path, "--grid", "seq=1K,2K,3K,4K,5K", "accel=unfused", *SMALL,
                  "--jobs", "1000", name="five.csv")  # fmt: skip
    assert len(rows) == 5 and started == [sweep.MAX_JOBS_PER_CPU] == [4]
