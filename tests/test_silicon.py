"""A real chip (issue 27): the H100 in the architecture language, and its predictions checked
against attention measured on it (experiments/data/h100-attention.csv, committed; CI has no
GPU).

Expected values are datasheet arithmetic, the measured file's own numbers, or the issue's
acceptance thresholds -- never the model's own output.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from simulator.core.evaluate import evaluate_mapping
from simulator.drivers.configs import EvalOptions, Specs, evaluate, prepare
from simulator.spec.arch_file import load_architecture
from simulator.spec.sustained import with_sustained
from simulator.spec.workload import make_workload
from simulator.support.errors import SpecError
from simulator.validate import (
    causal_ratios,
    read_measured,
    speedups,
    summaries,
    utilisation_by_head_dim,
    validate,
)
from simulator.validate import main as validate_main

from .conftest import ROOT

H100 = ROOT / "arch" / "h100.yaml"
MEASURED = ROOT / "experiments" / "data" / "h100-attention.csv"


@pytest.fixture(scope="module")
def rows():
    """The whole validation, once (about 15 s)."""
    return validate(read_measured(MEASURED), "h100")


# ---------------------------------------------------------------------------------------
# The architecture: datasheet figures, a fan-out of cores


def test_h100_file_is_the_datasheet():
    a = load_architecture(H100)
    tc, lanes = a.array("TensorCores"), a.array("CUDACores")
    assert a.cores == 132
    # 989.4 TFLOP/s dense BF16 = 132 SMs x MACs per clock x 2 x clock
    assert a.cores * tc.pes * 2 * a.frequency_hz == pytest.approx(989.4e12, rel=1e-3)
    assert lanes.pes == 128  # 4 x 32 FP32 lanes per SM
    # 16 exp2 per clock per SM [PG], at the lanes' own clock (the 1.98 GHz boost the
    # datasheet's 67 TFLOP/s FP32 is quoted at): 4.18 T/s over the chip
    assert lanes.frequency_hz == 1.98e9
    exp_per_s = a.cores * lanes.pes / lanes.op("exp").cycles * a.frequency_hz
    assert exp_per_s == pytest.approx(132 * 16 * 1.98e9, rel=1e-9)
    fp32_flops = a.cores * lanes.pes * 2 / lanes.op("mac").cycles * a.frequency_hz
    assert fp32_flops == pytest.approx(66.9e12, rel=2e-3)  # 67 TFLOP/s FP32 [DS]
    assert a.buffer.cache  # the L2: a cache the SMs share
    assert a.dram.bandwidth_bytes_per_s == 3.35e12
    assert a.buffer.capacity_bytes == 50 * 2**20  # the L2, shared
    assert a.core_memory is not None and a.core_memory.capacity_bytes == 228 * 1024
    assert lanes.register_words * lanes.pes * 2 == 256 * 1024  # 256 KB of registers per SM


def test_fusemax_and_flat_have_one_core():
    for name in ("fusemax", "flat"):
        a = load_architecture(ROOT / "arch" / f"{name}.yaml")
        assert a.cores == 1 and a.core_memory is None


def _h100_with_cores(tmp_path: Path, cores: int) -> Path:
    text = H100.read_text().replace("spatial: {meshX: 132}", f"spatial: {{meshX: {cores}}}")
    assert cores == 132 or text != H100.read_text()
    out = tmp_path / f"h100-{cores}.yaml"
    out.write_text(text)
    return out


def test_cores_share_the_blocks_of_rows(tmp_path):
    """Compute-bound prefill (BF16, d 128, 16K keys): the cores deal the blocks of rows in
    waves (4 x 32 query heads x 128 blocks of rows = 16384 units: 16384 waves on one core,
    125 on 132)."""
    w = make_workload("custom", "16K", {"batch": 4, "heads": 32, "kv_heads": 8, "embed": 128})
    times = {}
    for cores in (1, 132):
        specs = Specs(arch_override=str(_h100_with_cores(tmp_path, cores)))
        times[cores] = evaluate(specs, "h100/flash", w).latency_s
    units = 4 * 32 * (16384 // 128)
    assert times[1] / times[132] == pytest.approx(units / -(-units // 132), rel=1e-6)
    assert load_architecture(_h100_with_cores(tmp_path, 1)).core_memory is not None


def test_one_core_fan_out_changes_nothing(tmp_path):
    """FuseMax's arrays wrapped in a fan-out of one core: the same numbers."""
    text = (ROOT / "arch" / "fusemax.yaml").read_text()
    wrapped = text.replace(
        "  - !Parallel\n",
        "  - !Container\n    name: core\n    spatial: {meshX: 1}\n  - !Parallel\n",
        1,
    )
    assert wrapped != text
    (tmp_path / "fusemax.yaml").write_text(wrapped)
    w = make_workload("bert", "4K")
    cascade, mapping, arch = prepare(Specs(), "binding", w)
    same = load_architecture(tmp_path / "fusemax.yaml")
    assert same.cores == 1 and same.arrays == arch.arrays
    a = evaluate_mapping(cascade, mapping, arch, w)
    b = evaluate_mapping(cascade, mapping, same, w)
    assert (b.latency_s, b.traffic_bytes, b.util_2d, b.util_1d) == (
        a.latency_s,
        a.traffic_bytes,
        a.util_2d,
        a.util_1d,
    )


def test_cycle_engine_says_it_simulates_one_core():
    w = make_workload("custom", "4K", {"batch": 1, "heads": 32, "kv_heads": 8, "embed": 128})
    with pytest.raises(SpecError, match="simulates one core.*132.*--engine analytic"):
        evaluate(Specs(arch_override="h100"), "h100/flash", w, options=EvalOptions(engine="cycle"))


# ---------------------------------------------------------------------------------------
# Sustained rates


def test_sustained_rates_replace_the_peaks():
    a = load_architecture(H100)
    peak_mac = 132 * 2048 * 1.83e9
    s, done = with_sustained(a, mac_per_s=peak_mac / 2, exp_per_s=3.0e12, dram_bytes_per_s=3e12)
    assert s.array("TensorCores").op("mac").cycles == pytest.approx(2.0)
    # the lanes' own clock (1.98 GHz) in the system's cycles (1.83 GHz), then the exp2
    # loop's rate: the lanes' clock as measured, for every operation of the array
    exp_peak = 132 * 16 * 1.98e9
    slower = exp_peak / 3.0e12
    lanes = s.array("CUDACores")
    assert lanes.op("exp").cycles == pytest.approx(8 * 1.83 / 1.98 * slower)
    assert lanes.op("reciprocal").cycles == pytest.approx(8 * 1.83 / 1.98 * slower)
    assert lanes.op("add").cycles == pytest.approx(1.83 / 1.98 * slower)
    assert s.array("TensorCores").op("mac").cycles == pytest.approx(2.0)
    assert s.dram.bandwidth_bytes_per_s == 3e12
    assert {d.rate for d in done} == {"mac_per_s", "exp_per_s", "dram_bytes_per_s"}
    with pytest.raises(SpecError, match="exceeds .* peak"):
        with_sustained(a, dram_bytes_per_s=4e12)


def test_a_rate_between_the_clocks_is_accepted():
    """An exp2 loop at 4.09 T/s is above 16 per clock x 132 SMs at 1.83 GHz (3.87 T/s) but
    below the same at the lanes' 1.98 GHz (4.18 T/s): accepted as measured; above 4.18 it
    is still an error."""
    a = load_architecture(H100)
    s, (d,) = with_sustained(a, exp_per_s=4.086e12)
    assert d.peak == pytest.approx(132 * 16 * 1.98e9)
    assert s.array("CUDACores").op("exp").cycles < 8  # faster than 1.83 GHz would allow
    with pytest.raises(SpecError, match="exceeds .* peak"):
        with_sustained(a, exp_per_s=4.2e12)


def test_predictions_follow_the_measured_ceilings_only():
    """The ceilings are the only device numbers: halve the copy rate and a DRAM-bound decode
    takes twice as long."""
    m = read_measured(MEASURED)
    w = make_workload(
        "custom", "32K", {"batch": 64, "heads": 32, "kv_heads": 8, "embed": 128},
        phase="decode", context="32K",
    )  # fmt: skip
    specs = Specs(arch_override="h100")
    cascade, mapping, arch = prepare(specs, "h100/flash", w)
    times = []
    for copy in (m.ceilings["dram_bytes_per_s"], m.ceilings["dram_bytes_per_s"] / 2):
        ceilings = {**m.ceilings, "dram_bytes_per_s": copy}
        times.append(
            evaluate_mapping(cascade, mapping, with_sustained(arch, **ceilings)[0], w).latency_s
        )
    assert times[1] / times[0] == pytest.approx(2.0, rel=0.01)


# ---------------------------------------------------------------------------------------
# The measured file


def test_measured_file_is_complete():
    lines = list(csv.DictReader(MEASURED.read_text().splitlines()))
    assert {r["gpu"] for r in lines} == {"NVIDIA H100 80GB HBM3"}
    assert all(r["driver"] and r["torch"] and r["cuda"] for r in lines)
    assert {r["impl"] for r in lines if r["kind"] == "ceiling"} == {"matmul", "copy", "exp2"}
    attention = [r for r in lines if r["impl"] in ("fused", "unfused")]
    assert all(r["ok"] == "1" and float(r["rel_err"]) < 2e-2 for r in attention)
    assert {r["backend"] for r in attention if r["impl"] == "fused"} == {
        "cudnn",
        "flash",
        "efficient",
    }
    assert {int(r["head_dim"]) for r in attention} == {64, 128, 256}
    assert {r["kind"] for r in attention} == {"prefill", "decode"}


def test_read_measured_keeps_the_fastest_passing_backend():
    m = read_measured(MEASURED)
    lines = list(csv.DictReader(MEASURED.read_text().splitlines()))
    for x in m.measurements:
        s = x.shape
        same = [
            float(r["time_s"]) for r in lines
            if r["impl"] == x.impl and r["ok"] == "1" and r["kind"] == s.kind
            and int(r["batch"]) == s.batch and int(r["keys"]) == s.keys
            and int(r["head_dim"]) == s.head_dim and r["causal"] == str(int(s.causal))
        ]  # fmt: skip
        assert x.time_s == min(same)
    assert len(m.measurements) >= 30


# ---------------------------------------------------------------------------------------
# The acceptance points


def test_fused_prefill_error(rows):
    """Fused prefill from 4K tokens: mean absolute error <= 15%, none worse than 30%."""
    group = next(s for s in summaries(rows) if s.group == "fused prefill, S >= 4K")
    assert group.shapes >= 27  # 3 head dims x 5 lengths x 2 masks, less nothing
    assert group.mean <= 0.15
    assert group.largest <= 0.30


def test_tensor_core_utilisation_order(rows):
    """Head dimensions ranked by tensor-core utilisation: the same order measured and
    predicted (64 lowest: the exponentials weigh most against the matrix work)."""
    util = utilisation_by_head_dim(rows)
    assert [d for d, _m, _p in util] == [64, 128, 256]
    measured = sorted(util, key=lambda u: u[1])
    predicted = sorted(util, key=lambda u: u[2])
    assert [d for d, *_ in measured] == [d for d, *_ in predicted]
    assert all(p < q for (_d, _m, p), (_e, _n, q) in zip(predicted, predicted[1:], strict=False))


def test_decode_within_five_percent(rows):
    decode = [
        r for r in rows if r.measurement.shape.kind == "decode" and r.measurement.impl == "fused"
    ]
    assert len(decode) == 4
    assert all(abs(r.error) <= 0.05 for r in decode)


def test_fused_speedup_within_25_percent(rows):
    pairs = speedups(rows)
    assert len(pairs) >= 20
    assert all(abs(p.error) <= 0.25 for p in pairs), [(p.shape, p.error) for p in pairs]


def test_causal_ratio(rows):
    """Causal / full from 8K tokens. Predicted: the kept share of the 128 x 128 tiles
    (blocks of 128 queries, chunks of 128 keys), (n + 1) / 2n for n = S / 128. Measured:
    within 5% of it at two thirds of the shapes; the misses (docs/silicon.md) are the
    kernels' own -- at head dimension 256 and 32K+ tokens both backends run causal tiles
    slower than full ones, and cuDNN's rounds spread up to 16%."""
    pairs = causal_ratios(rows)
    assert len(pairs) == 12
    for p in pairs:
        n = int(p.shape.split()[1].rstrip("K")) * 1024 // 128
        assert p.predicted == pytest.approx((n + 1) / (2 * n), rel=0.01), p.shape
    within = [p for p in pairs if abs(p.error) <= 0.05]
    assert len(within) >= 8


def test_predictions_at_or_above_their_bounds(rows):
    """Each prediction is a Result that passed the guard; and none beats the chip's own
    ceilings: matrix work over the measured matrix rate."""
    m = read_measured(MEASURED)
    for r in rows:
        if r.measurement.impl == "fused":
            floor = r.measurement.shape.matmul_flops / (2 * m.ceilings["mac_per_s"])
            assert r.predicted_s >= floor * (1 - 1e-9)


# ---------------------------------------------------------------------------------------
# The command line


def _small_csv(tmp_path: Path) -> Path:
    lines = MEASURED.read_text().splitlines()
    head = lines[0].split(",")
    keep = [lines[0]]
    for line in lines[1:]:
        row = dict(zip(head, next(csv.reader([line])), strict=True))
        if row["kind"] == "ceiling" or (row["kind"] == "decode" and row["keys"] == "4096"):
            keep.append(line)
    out = tmp_path / "small.csv"
    out.write_text("\n".join(keep) + "\n")
    return out


def test_cli_formats(tmp_path, capsys):
    small = _small_csv(tmp_path)
    assert (
        validate_main(
            ["--measured", str(small), "--format", "json", "--plot", str(tmp_path / "fig")]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert {s["impl"] for s in doc["shapes"]} == {"fused", "unfused"}
    assert (tmp_path / "fig.png").stat().st_size > 0
    assert (
        validate_main(["--measured", str(small), "--format", "csv", "-o", str(tmp_path / "v.csv")])
        == 0
    )
    table = list(csv.DictReader((tmp_path / "v.csv").read_text().splitlines()))
    assert {"rel_error", "bound_by", "measured_s", "predicted_s"} <= set(table[0])
    assert all(r["bound_by"] == "DRAM" for r in table)  # a decode step streams the cache


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.replace("time_s", "seconds", 1), "lacks column"),
        (lambda t: "\n".join(x for x in t.splitlines() if ",copy," not in x), "no passing ceiling"),
        (
            lambda t: t.replace("decode,fused,cudnn,64,", "decode,fused,cudnn,banana,", 1),
            "not a number",
        ),
    ],
)
def test_cli_bad_measured_file(tmp_path, capsys, edit, message):
    small = _small_csv(tmp_path)
    small.write_text(edit(small.read_text()))
    assert validate_main(["--measured", str(small)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_mean_error_is_the_rows_mean(rows):
    """The summary's arithmetic (not a copy of the model's output)."""
    picked = [
        abs(r.error)
        for r in rows
        if r.measurement.impl == "fused"
        and r.measurement.shape.kind == "prefill"
        and r.measurement.shape.keys >= 4096
    ]
    group = next(s for s in summaries(rows) if s.group == "fused prefill, S >= 4K")
    assert group.mean == pytest.approx(statistics.mean(picked))
    assert group.largest == max(picked)


def test_the_mapper_alone_predicts_the_h100(tmp_path):
    """With no hand-written mapping (the architecture copied under another name, so that
    `mappings/h100/` is not its own), the mapper's mappings against the measured H100:
    the figures reached so far (fused prefill at S >= 4K: mean 15.5%, largest 28.9%; decode
    2.4%) must not get worse. (13.7% / 28.2% before the L2 was a shared cache: K/V cheap
    to re-read, the mapper's blocks deal to the cores in finer waves, 2-3% faster at every
    tensor-core-bound shape.) The issue's goal (10% / 25%) is not met: the mapper overlaps
    a chunk's softmax with both contractions (tiles through the buffer, double-buffered),
    which the model, with no per-core memory level, prices as free (docs/mapper.md)."""
    gpu = tmp_path / "gpu-without-mappings.yaml"
    gpu.write_text(H100.read_text())
    measured = read_measured(MEASURED)
    keep = [
        m
        for m in measured.measurements
        if m.impl == "fused" and (m.shape.kind == "decode" or m.shape.keys >= 4096)
    ]
    measured = dataclasses.replace(measured, measurements=tuple(keep))
    rows = validate(measured, str(gpu))
    assert {r.config for r in rows} <= {"auto:fused", "auto:flat"}
    groups = {s.group: s for s in summaries(rows)}
    prefill, decode = groups["fused prefill, S >= 4K"], groups["fused decode"]
    assert prefill.shapes == 30 and decode.shapes == 4
    assert prefill.mean <= 0.16 and prefill.largest <= 0.30
    assert decode.largest <= 0.05


# ---------------------------------------------------------------------------------------
# Families and the design / held-out split (issue 34)


def test_family_of_a_shape():
    from simulator.validate import Shape

    def shape(h, kv):
        return Shape("prefill", 1, h, kv, 1024, 1024, 128, False)

    assert shape(32, 32).family == "MHA"
    assert shape(32, 8).family == "GQA"
    assert shape(32, 1).family == "MQA"


def test_split_is_seeded_and_keeps_full_and_causal_together(tmp_path):
    import subprocess
    import sys

    script = ROOT / "experiments" / "silicon" / "split.py"
    outs = []
    for name in ("a.csv", "b.csv"):
        out = tmp_path / name
        subprocess.run(
            [sys.executable, str(script), str(MEASURED), "--seed", "7", "--out", str(out)],
            check=True,
            capture_output=True,
        )
        outs.append(out.read_text())
    assert outs[0] == outs[1]  # seeded: the same split
    rows = list(csv.DictReader(outs[0].splitlines()))
    assert "causal" not in rows[0]  # a shape's full and causal runs go together
    for kind in ("prefill", "decode"):
        mine = [r["half"] for r in rows if r["kind"] == kind]
        assert abs(mine.count("design") - mine.count("held-out")) <= 1


def test_validate_reports_each_half_and_family(tmp_path, capsys):
    import subprocess
    import sys

    from simulator.validate import families, halves, read_split

    split = tmp_path / "split.csv"
    subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "silicon" / "split.py"), str(MEASURED),
         "--seed", "3", "--out", str(split)],
        check=True, capture_output=True,
    )  # fmt: skip
    measured = read_measured(MEASURED)
    keep = [m for m in measured.measurements if m.shape.keys >= 8192 and m.impl == "fused"]
    small = dataclasses.replace(measured, measurements=tuple(keep))
    rows = validate(small, "h100")
    parts = dict(halves(rows, read_split(split)))
    assert len(parts["design"]) + len(parts["held-out"]) == len(rows)
    assert parts["design"] and parts["held-out"]
    # a family's mean is the mean of its rows' absolute errors
    gqa = next(s for s in families(parts["held-out"], 132) if s.group.startswith("GQA prefill"))
    picked = [abs(r.error) for r in parts["held-out"] if r.measurement.shape.kind == "prefill"]
    assert gqa.shapes == len(picked) and gqa.mean == pytest.approx(statistics.mean(picked))
    assert validate_main(["--measured", str(MEASURED), "--split", str(split)]) == 0
    out = capsys.readouterr().out
    assert "held-out: fused prefill, S >= 4K" in out and "design: GQA decode" in out
    bad = tmp_path / "bad.csv"
    bad.write_text(split.read_text().replace("held-out", "later", 1))
    assert validate_main(["--measured", str(MEASURED), "--split", str(bad)]) == 2
    assert "half must be design or held-out" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# The wide grid (issue 34): shapes the model was not built on, split before any error was
# looked at (experiments/data/h100-attention-wide-split.csv, seed 34)

WIDE = ROOT / "experiments" / "data" / "h100-attention-wide.csv"
WIDE_SPLIT = ROOT / "experiments" / "data" / "h100-attention-wide-split.csv"


@pytest.fixture(scope="module")
def wide():
    from simulator.validate import read_split

    measured = read_measured(WIDE)
    return measured, validate(measured, "h100"), read_split(WIDE_SPLIT)


def test_wide_grid_is_what_the_issue_asked_for(wide):
    measured, rows, split = wide
    shapes = {m.shape for m in measured.measurements}
    assert {s.family for s in shapes} == {"MHA", "GQA", "MQA"}
    assert {s.q_heads for s in shapes} >= {8, 16, 32, 64}
    assert {s.head_dim for s in shapes} == {64, 128, 256}
    prefill = [s for s in shapes if s.kind == "prefill"]
    assert min(s.keys for s in prefill) == 512 and max(s.keys for s in prefill) == 65536
    assert {s.causal for s in prefill} == {False, True}
    assert any(s.batch * s.q_heads < 132 for s in prefill)
    decode = [s for s in shapes if s.kind == "decode"]
    assert len({s.batch for s in decode}) >= 4 and len({s.keys for s in decode}) >= 4
    assert measured.device.startswith("NVIDIA H100")
    # every measured shape is in exactly one half
    assert {s.split_key for s in shapes} == set(split)


@pytest.mark.parametrize("half", ["held-out", "all"])
def test_wide_fused_prefill_within_the_issue_goals(wide, half):
    """Fused prefill from 4K tokens: mean |error| <= 10%, largest <= 25%, each head
    family's mean <= 10%; the tensor cores' utilisation per head dimension within 10
    points of the measured."""
    from simulator.validate import families, halves

    measured, rows, split = wide
    picked = rows if half == "all" else dict(halves(rows, split))[half]
    group = next(s for s in summaries(picked) if s.group == "fused prefill, S >= 4K")
    assert group.shapes >= 150
    assert group.mean <= 0.10 and group.largest <= 0.25
    for s in families(picked, measured.cores):
        if "prefill" in s.group:
            assert s.mean <= 0.10, s
    for _d, m, p in utilisation_by_head_dim(picked):
        assert abs(m - p) <= 0.10


def test_wide_decode_where_the_cache_streams(wide):
    """Decode whose K/V cache takes 100 us or more to stream at the copy rate: within 5% on
    average in each half. (Below that, a call's fixed costs -- its kernels' launches, the
    split-KV combine -- weigh against the stream and the model has none: the issue's 5% for
    every decode shape is not met; docs/silicon.md.)"""
    from simulator.validate import families, halves

    measured, rows, split = wide
    rate = measured.ceilings["dram_bytes_per_s"]
    for _half, picked in halves(rows, split):
        streamed = next(
            s for s in families(picked, measured.cores, rate) if s.group.endswith(">= 100 us")
        )
        assert streamed.shapes >= 20 and streamed.mean <= 0.05


def test_wide_causal_ratios(wide):
    """Causal over full time from 8K tokens: most within 5% of the measured ratio."""
    _measured, rows, _split = wide
    pairs = causal_ratios(rows)
    assert len(pairs) >= 100
    assert sum(abs(p.error) <= 0.05 for p in pairs) >= 0.8 * len(pairs)


def test_h200_from_its_datasheet_predicts_the_measured_h200():
    """A second chip the model was never built on: arch/h200.yaml is the H100's file with
    the H200 datasheet's memory (HBM3e, 4.8 TB/s), the kernels mappings/h100/ describe, the
    H200's own three ceilings; 179 wide-grid shapes measured on an H200, never looked at
    while the model changed. Fused prefill from 4K tokens within the H100's goals."""
    measured = read_measured(ROOT / "experiments" / "data" / "h200-attention-wide.csv")
    assert measured.device.startswith("NVIDIA H200")
    keep = [m for m in measured.measurements if m.shape.kind == "prefill" and m.shape.keys >= 4096]
    rows = validate(dataclasses.replace(measured, measurements=tuple(keep)), "h200", kernels="h100")
    group = next(s for s in summaries(rows) if s.group == "fused prefill, S >= 4K")
    assert group.shapes >= 100 and group.mean <= 0.10 and group.largest <= 0.25
    assert load_architecture(ROOT / "arch" / "h200.yaml").dram.bandwidth_bytes_per_s == 4.8e12
