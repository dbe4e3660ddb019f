"""Measured ceilings as one step of every command, and measured cascades validated.

The expected values here come from the measured files (experiments/data/h100-cascades*.csv,
written on an H100 by experiments/silicon/measure_cascades.py) or from first principles
(bytes over the measured copy rate), never from the model's own output.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import io
import json
import statistics
from pathlib import Path

import pytest

from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.cascade.write import einsum_yaml
from simulator.compare import main as compare_main
from simulator.drivers.configs import EvalOptions, Specs, evaluate
from simulator.run import main as run_main
from simulator.spec.ceilings import Ceilings, read_ceilings
from simulator.spec.workload import make_workload
from simulator.support.errors import SpecError
from simulator.sweep import main as sweep_main
from simulator.validate import (
    CASCADE_SPLIT_COLUMNS,
    CascadeShape,
    cascade_summaries,
    halves,
    read_measured,
    read_split,
    validate,
)
from simulator.validate import main as validate_main

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "experiments" / "data"
MEASURED = DATA / "h100-cascades.csv"
SPLIT = DATA / "h100-cascades-split.csv"


def _rows(path: Path = MEASURED) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text().splitlines()))


def _ceiling(impl: str, column: str) -> float:
    """The median of a ceiling's passing rows, read here from the CSV."""
    values = [
        float(r[column])
        for r in _rows()
        if r["kind"] == "ceiling" and r["impl"] == impl and r["ok"] == "1"
    ]
    return statistics.median(values)


def test_ceilings_are_the_measured_rows():
    c = read_ceilings(MEASURED)
    assert c.mac_per_s == pytest.approx(_ceiling("matmul", "rate") / 2)
    assert c.dram_bytes_per_s == pytest.approx(_ceiling("copy", "rate"))
    assert c.exp_per_s == pytest.approx(_ceiling("exp2", "rate"))
    assert c.launch_s == pytest.approx(_ceiling("launch", "time_s"))
    assert c.dram_latency_s == pytest.approx(_ceiling("dram-latency", "time_s"))
    # what the microbenchmarks said on the H100 (docs/silicon.md): a kernel's launch back to
    # back in a stream about 1.4 us, a DRAM load about 350 ns
    assert 1e-6 < c.launch_s < 2e-6 and 2.5e-7 < c.dram_latency_s < 5e-7
    # the attention files carry the three rates only: no fixed cost
    a = read_ceilings(DATA / "h100-attention.csv")
    assert a.launch_s is None and a.dram_latency_s is None and a.phase_s == 0.0


def _rmsnorm_latency(ceilings: Ceilings | None, e: int = 4096, p: int = 16384) -> float:
    specs = Specs(cascade_override="rmsnorm", arch_override="h100", ceilings=ceilings)
    w = make_workload("custom", 1, {"batch": 1, "heads": 1, "embed": 64}, shape={"E": e, "P": p})
    return evaluate(specs, "auto:fused", w, options=EvalOptions(engine="analytic")).latency_s


def test_fixed_costs_are_paid_once_per_phase_on_top_of_the_stream():
    """RMSNorm fused streams X in and Y out: at the measured copy rate it takes their bytes
    over the rate, plus one launch and one DRAM latency."""
    c = read_ceilings(MEASURED)
    rates_only = Ceilings(**c.rates)
    e, p = 4096, 16384
    stream = 2 * (2 * e * p) / c.dram_bytes_per_s  # X read, Y written, BF16
    assert _rmsnorm_latency(rates_only) == pytest.approx(stream, rel=0.01)
    assert _rmsnorm_latency(c) - _rmsnorm_latency(rates_only) == pytest.approx(
        c.launch_s + c.dram_latency_s, rel=1e-6
    )
    assert _rmsnorm_latency(None) < _rmsnorm_latency(rates_only)  # the datasheet is faster


def _csv_table(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader([line for line in text.splitlines() if line]))


def test_run_compare_and_sweep_take_the_ceilings(run_cli):
    c = read_ceilings(MEASURED)
    # P is the workload's queries: 16K tokens by --seq (a --shape P must agree with it)
    common = ["--seq", "16K", "--shape", "E=4096", "--batch", "1", "--heads", "1"]
    common += ["--engine", "analytic", "--format", "csv"]
    base = ["--cascade", "rmsnorm", "--arch", "h100", "--mapping", "auto:fused", *common]
    code, out, err = run_cli(run_main, [*base, "--ceilings", str(MEASURED)])
    assert code == 0, err
    measured = float(_csv_table(out)[0]["latency_s"])
    code, out, _ = run_cli(run_main, base)
    peak = float(_csv_table(out)[0]["latency_s"])
    stream = 2 * (2 * 4096 * 16384) / c.dram_bytes_per_s + c.launch_s + c.dram_latency_s
    assert measured == pytest.approx(stream, rel=0.01) and peak < measured

    code, out, err = run_cli(
        compare_main,
        ["--cascades", "rmsnorm", "--arch", "h100", "--strategies", "fused", *common,
         "--ceilings", str(MEASURED)],
    )  # fmt: skip
    assert code == 0, err
    assert float(_csv_table(out)[0]["latency_s"]) == pytest.approx(measured, rel=1e-9)

    grid = ["--grid", "accel=auto:fused", "seq=16K", "shape=E=4096", "batch=1", "heads=1"]
    code, out, err = run_cli(
        sweep_main,
        [*grid, "--arch", "h100", "--cascade", "rmsnorm", "--engine", "analytic",
         "--ceilings", str(MEASURED), "--no-progress", "--jobs", "1"],
    )  # fmt: skip
    assert code == 0, err
    row = _csv_table(out)[0]
    assert float(row["bandwidth_bytes_per_s"]) == pytest.approx(_ceiling("copy", "rate"))
    assert float(row["latency_s"]) == pytest.approx(measured, rel=1e-9)


def _set(impl: str, column: str, value: str):
    """An edit of the measured file: `column` of the ceiling row `impl` set to `value`."""

    def edit(text: str) -> str:
        rows = list(csv.DictReader(text.splitlines()))
        for r in rows:
            if r["kind"] == "ceiling" and r["impl"] == impl:
                r[column] = value
        out = io.StringIO()
        writer = csv.DictWriter(out, list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()

    return edit


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.replace("time_s", "seconds", 1), "lacks column"),
        (lambda t: t.splitlines()[0] + "\n", "no passing ceiling row"),
        (_set("copy", "rate", "x"), "not a number"),
        (_set("launch", "time_s", "-1"), "positive"),
    ],
)
def test_bad_ceilings_are_one_line(tmp_path, run_cli, edit, message):
    bad = tmp_path / "bad.csv"
    bad.write_text(edit(MEASURED.read_text()))
    for main, argv in (
        (run_main, ["--arch", "h100", "--seq", "1K"]),
        (compare_main, ["--cascades", "softmax", "--arch", "h100"]),
        (sweep_main, ["--grid", "seq=1K", "--arch", "h100"]),
    ):
        code, _out, err = run_cli(main, [*argv, "--ceilings", str(bad)])
        assert code == 2 and message in err and err.count("\n") == 1, err


def test_ceilings_of_another_chip_and_missing_files_are_one_line(tmp_path, run_cli):
    code, _out, err = run_cli(compare_main, ["--cascades", "softmax", "--ceilings", str(MEASURED)])
    assert code == 2 and "another chip than 'fusemax'" in err and err.count("\n") == 1
    code, _out, err = run_cli(run_main, ["--ceilings", str(tmp_path / "none.csv")])
    assert code == 2 and "cannot read the ceilings file" in err
    code, _out, err = run_cli(
        run_main, ["--arch", "h100", "--ceilings", str(MEASURED), "--precision", "fp8"]
    )
    assert code == 2 and "--precision" in err


def test_each_einsum_stands_alone_as_a_cascade():
    cascade = load_cascade(ROOT / "cascades" / "rmsnorm-ffn.yaml")
    for e in cascade.einsums:
        one = loads_cascade(einsum_yaml(cascade, e.name))
        assert [x.name for x in one.einsums] == [e.name]
        assert {t.name for t in one.tensors} == {e.output.tensor} | {a.tensor for a in e.reads()}
        assert set(one.outputs) == {e.output.tensor}
    # the mean square reads E as a number: E stays among its extents
    ms = loads_cascade(einsum_yaml(cascade, "MS"))
    assert dict(ms.shapes) == {"E": 128, "P": 32}
    with pytest.raises(SpecError, match="chunked or iterative"):
        einsum_yaml(load_cascade(ROOT / "cascades" / "attention-1pass.yaml"), "QK")


def _small(tmp_path: Path, keep) -> Path:
    rows = _rows()
    out = tmp_path / "small.csv"
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(r for r in rows if r["kind"] == "ceiling" or keep(r))
    return out


def test_measured_cascades_are_predicted_from_their_bytes(tmp_path):
    """RMSNorm at E=4096, P=16384 (X: 134 MB): fused, X in and Y out once; unfused, one
    kernel per Einsum -- MS reads X, RMS its vector, Y reads X again and writes Y -- each
    paying a launch and a DRAM latency. Both DRAM-bound at the measured copy rate."""
    small = _small(tmp_path, lambda r: r["cascade"].endswith("/rmsnorm.yaml")
                   and r["shape"] == "E=4096,P=16384")  # fmt: skip
    measured = read_measured(small)
    rows = {r.measurement.impl: r for r in validate(measured, "h100")}
    c = measured.limits
    x = 2 * 4096 * 16384
    assert rows["fused"].predicted_s == pytest.approx(
        2 * x / c.dram_bytes_per_s + c.phase_s, rel=0.01
    )
    unfused = 3 * x / c.dram_bytes_per_s + 3 * c.phase_s
    assert rows["unfused"].predicted_s == pytest.approx(unfused, rel=0.01)
    assert {r.bound_by for r in rows.values()} == {"DRAM"}
    assert rows["unfused"].config == "auto:unfused per Einsum"
    # the measured times are the file's fastest passing rows
    picked = [
        float(r["time_s"])
        for r in _rows(small)
        if r["kind"] == "cascade" and r["impl"] == "fused" and r["ok"] == "1"
    ]
    assert rows["fused"].measurement.time_s == min(picked)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.replace("cascades/rmsnorm.yaml", "cascades/nope.yaml"), "cascade 'cascades/"),
        (lambda t: t.replace('"E=4096,P=16384"', '"E=4096"'), "lacks P"),
        (lambda t: t.replace('"E=4096,P=16384"', '"E=4096,P=16384,Q=2"'), "names no rank"),
        (lambda t: t.replace(",cascade,shape,", ",kaskade,shape,", 1), "lacks column"),
    ],
)
def test_bad_cascade_rows_are_one_line(tmp_path, capsys, edit, message):
    small = _small(tmp_path, lambda r: r["cascade"].endswith("/rmsnorm.yaml")
                   and r["shape"] == "E=4096,P=16384")  # fmt: skip
    small.write_text(edit(small.read_text()))
    assert validate_main(["--measured", str(small)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_the_split_is_of_every_measured_shape():
    script = ROOT / "experiments" / "silicon" / "split.py"
    module = importlib.util.spec_from_file_location("split", script)
    split_py = importlib.util.module_from_spec(module)
    module.loader.exec_module(split_py)
    assert split_py.CASCADE_KEY == CASCADE_SPLIT_COLUMNS[:-1]
    split = read_split(SPLIT)
    measured = read_measured(MEASURED)
    shapes = {m.shape.split_key for m in measured.measurements}
    assert set(split) == shapes and len(shapes) == 42
    for name in {s.name for m in measured.measurements if isinstance(s := m.shape, CascadeShape)}:
        mine = [h for (c, _s, _b), h in split.items() if Path(c).stem == name]
        assert mine.count("design") == mine.count("held-out") == 3


@pytest.fixture(scope="module")
def held_out():
    """The held-out half of the measured cascades, predicted (evaluated once)."""
    measured = read_measured(MEASURED)
    split = read_split(SPLIT)
    keep = [m for m in measured.measurements if split[m.shape.split_key] == "held-out"]
    return validate(dataclasses.replace(measured, measurements=tuple(keep)), "h100")


# Linear attention's fused kernels, measured: the two Triton kernels of
# experiments/silicon/measure_cascades.py. On the H200 the same kernels run its key-value
# contraction at 0.8-1.3 TB/s at E = 128 where cuBLAS's batched GEMM of that contraction runs
# at 3.0-3.6 TB/s (experiments/data/h200-linattn-probe.csv): the mapper's mapping streams at
# the copy rate and is faster than them. At 64K keys and 16 instances the kernels split the
# keys over the SMs; the mapspace did not (split-K) and was 67% slower, until the chain
# template's `keys: split` (tests/test_split_over_cores.py; docs/silicon.md).
LINEAR_FUSED = "the measured fused kernels run under the chip's rate (docs/silicon.md)"


def _linear_fused(r) -> bool:
    return r.measurement.impl == "fused" and r.measurement.shape.name == "linear-attention"


def test_held_out_cascades_within_ten_percent_on_average(held_out):
    """The issue's goal for the measured non-attention cascades' held-out half: within 10%
    on average, unfused, and fused but for linear attention's (LINEAR_FUSED; docs/silicon.md
    gives the largest errors and why)."""
    assert len(held_out) == 42
    errors = {impl: [abs(r.error) for r in held_out if r.measurement.impl == impl
                     and not _linear_fused(r)]
              for impl in ("fused", "unfused")}  # fmt: skip
    assert len(errors["unfused"]) == 21 and len(errors["fused"]) == 18
    for impl, found in errors.items():
        assert statistics.mean(found) <= 0.10, impl
    # and every fused row, linear attention's too, since the keys split over the SMs (11.8%
    # with its 64K point's summary made by each block of rows)
    fused = [abs(r.error) for r in held_out if r.measurement.impl == "fused"]
    assert len(fused) == 21 and statistics.mean(fused) <= 0.10
    summary = {s.group: s for s in cascade_summaries(held_out)}
    mean = statistics.mean(abs(r.error) for r in held_out)
    assert summary["cascades, all"].mean == pytest.approx(mean)


@pytest.mark.xfail(strict=True, reason=LINEAR_FUSED)
def test_held_out_linear_attention_fused_within_a_quarter(held_out):
    found = [abs(r.error) for r in held_out if _linear_fused(r)]
    assert len(found) == 3 and max(found) <= 0.25


def test_validate_splits_cascades_in_its_reports(tmp_path, capsys):
    small = _small(tmp_path, lambda r: r["cascade"].endswith("/softmax.yaml")
                   and r["shape"] in ("M=2048,P=2048", "M=4096,P=16384"))  # fmt: skip
    assert validate_main(["--measured", str(small), "--split", str(SPLIT), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {s["ranks"] for s in doc["shapes"]} == {"M=2048,P=2048", "M=4096,P=16384"}
    assert doc["fixed_costs"]["launch_s"] == pytest.approx(_ceiling("launch", "time_s"))
    by_half = {
        h: {s["group"]: s["shapes"] for s in v["cascades"]} for h, v in doc["halves"].items()
    }
    split = read_split(SPLIT)
    for half, groups in by_half.items():
        n = sum(1 for (c, s, _b), h in split.items() if h == half and c.endswith("softmax.yaml")
                and s in ("M=2048,P=2048", "M=4096,P=16384"))  # fmt: skip
        assert groups.get("cascades, all", 0) == 2 * n
    rows = validate(read_measured(small), "h100")
    assert sum(len(p) for _h, p in halves(rows, split)) == len(rows)


def test_validate_on_worker_processes_gives_the_same_rows(monkeypatch):
    """The shapes predicted on two worker processes (from the first one on) are the rows
    one process predicts, in the file's order."""
    import simulator.validate as v

    measured = read_measured(MEASURED)
    few = dataclasses.replace(measured, measurements=measured.measurements[::12])
    serial = validate(few, "h100")
    monkeypatch.setattr(v, "PARALLEL_AFTER_S", -1.0)  # every shape to the workers
    parallel = validate(few, "h100", jobs=2)
    assert len(serial) == len(few.measurements) >= 7
    assert parallel == serial


@pytest.mark.parametrize(("jobs", "message"), [("0", "1 or more"), ("two", "not a whole")])
def test_validate_jobs_must_be_a_count(capsys, jobs, message):
    assert validate_main(["--measured", str(MEASURED), "--jobs", jobs]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_a_second_chip_held_out_alike():
    """The H200 measured later (experiments/data/h200-cascades.csv: the same script and
    shapes, its own ceilings and fixed costs; split with seed 4402 before any prediction),
    predicted through arch/h200.yaml -- a chip the model was not built on: its held-out half
    within 10% on average, unfused, and fused but for linear attention's (LINEAR_FUSED)."""
    measured = read_measured(DATA / "h200-cascades.csv")
    split = read_split(DATA / "h200-cascades-split.csv")
    keep = [m for m in measured.measurements if split[m.shape.split_key] == "held-out"]
    assert len(keep) == 42 and measured.limits.launch_s > 0
    rows = validate(dataclasses.replace(measured, measurements=tuple(keep)), "h200")
    for impl in ("fused", "unfused"):
        found = [abs(r.error) for r in rows if r.measurement.impl == impl and not _linear_fused(r)]
        assert len(found) == (18 if impl == "fused" else 21)
        assert statistics.mean(found) <= 0.10, impl
    fused = [abs(r.error) for r in rows if r.measurement.impl == "fused"]
    assert len(fused) == 21 and statistics.mean(fused) <= 0.10  # 10.9% before the split
