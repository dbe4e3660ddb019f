"""The cycle-level engine: functional correctness, steady-state extrapolation, agreement
with the analytic model where it should agree, SCALE-Sim on plain GEMMs, and its errors."""

from __future__ import annotations

import csv
import dataclasses
import math
import shutil
from pathlib import Path

import pytest

from simulator.drivers.configs import EvalOptions, Specs, evaluate, prepare
from simulator.plan.point import plan_point
from simulator.spec.workload import make_workload
from simulator.support.errors import SpecError
from simulator.timing.cycle.functional import check_attention
from simulator.timing.cycle.simulate import pipelined_point
from simulator.timing.cycle.waterfall import Waterfall

ROOT = Path(__file__).resolve().parents[1]
GEMM = ROOT / "tests" / "data" / "gemm-os"


@pytest.fixture(scope="module")
def specs() -> Specs:
    return Specs()


def _small_point(specs: Specs, config: str):
    workload = make_workload("custom", "64", {"batch": 1, "heads": 1, "embed": 8})
    cascade, mapping, arch = prepare(specs, config, workload, pe_dim=8)
    return pipelined_point(plan_point(cascade, mapping, arch, workload))


@pytest.mark.parametrize("config", ["binding", "arch"])
def test_functional_schedule_computes_attention(specs, config):
    # 8x8 array, 1D array of 8, E = F = 8, M = P = 64: the simulated schedule yields AV.
    pt = _small_point(specs, config)
    result = check_attention(pt)
    assert result.error < 1e-6
    assert result.av.shape == (8, 64)


@pytest.mark.parametrize("config", ["binding", "arch"])
def test_functional_mode_catches_a_broken_dependency(specs, config):
    # SLN no longer waits for the running max RM of its own epoch: it reads RM before the
    # 1D array has produced it (an epoch early), and AV is wrong.
    pt = _small_point(specs, config)
    result = check_attention(
        pt,
        broken=("SLN", "RM"),
    )
    assert not result.error < 1e-6


def test_extrapolation_equals_full_simulation(specs):
    # 32x32 FuseMax, M = P = 4K, two heads: ~33K epochs simulated in full and extrapolated
    # (556 simulated).
    workload = make_workload("bert", "4K", {"batch": 1, "heads": 2})
    cascade, mapping, arch = prepare(specs, "binding", workload, pe_dim=32)
    program = pipelined_point(plan_point(cascade, mapping, arch, workload)).program
    fast = Waterfall(program).run()
    full = Waterfall(program, extrapolate=False).run()
    assert fast.simulated_epochs < full.epochs / 50  # it did extrapolate
    assert full.simulated_epochs == full.epochs
    assert (fast.cycles, fast.busy, fast.stalls) == (full.cycles, full.busy, full.stalls)


def test_extrapolation_over_many_blocks_equals_full_simulation(specs):
    # 256x256 with the pareto sweep's small registers and buffer at 4K tokens: blocks of 32
    # epochs, a DRAM step of ~80.68 cycles per epoch (kept in 1/64 cycle), so the state at a
    # block's start repeats only every few blocks (here 6), never within a block.
    workload = make_workload("bert", "4K", {"batch": 1, "heads": 8})
    cascade, mapping, arch = prepare(
        specs,
        "binding",
        workload,
        pe_dim=256,
        buffer_bytes=262144,
        resize={"register_words_2d": 16, "register_words_1d": 64},
    )
    program = pipelined_point(plan_point(cascade, mapping, arch, workload)).program
    fast = Waterfall(program).run()
    full = Waterfall(program, extrapolate=False).run()
    assert fast.simulated_epochs < full.epochs / 5
    assert (fast.cycles, fast.busy, fast.stalls) == (full.cycles, full.busy, full.stalls)


def test_extrapolation_with_a_period_of_a_whole_row_of_tiles(specs):
    # XLM (E = 128) on a 128x128 array at 8K tokens: the 1D array is the busier one and the
    # state repeats only after a row of query tiles or more (the running max links tiles a
    # row apart): a period beyond the pipeline depth and the DRAM phase (simulated in full
    # before the search reached that far).
    workload = make_workload("xlm", "8K", {"batch": 1, "heads": 1})
    cascade, mapping, arch = prepare(specs, "binding", workload, pe_dim=128)
    program = pipelined_point(plan_point(cascade, mapping, arch, workload)).program
    fast = Waterfall(program).run()
    full = Waterfall(program, extrapolate=False).run()
    assert fast.simulated_epochs < full.epochs / 4
    assert (fast.cycles, fast.busy, fast.stalls) == (full.cycles, full.busy, full.stalls)


@pytest.mark.parametrize("model", ["bert", "trxl", "t5", "xlm"])
@pytest.mark.parametrize("seq", ["64K", "256K", "1M"])
def test_binding_utilisation_matches_analytic_at_long_sequences(specs, model, seq):
    workload = make_workload(model, seq)
    cycle = evaluate(specs, "binding", workload, options=EvalOptions(engine="cycle"))
    analytic = evaluate(specs, "binding", workload, options=EvalOptions(engine="analytic"))
    assert abs(cycle.util_2d - analytic.util_2d) < 0.02
    assert abs(cycle.util_1d - analytic.util_1d) < 0.02
    assert cycle.engine == "cycle" and cycle.simulated_epochs < 5000


def test_architecture_shows_its_stalls(specs):
    r = evaluate(specs, "arch", make_workload("bert", "64K"), options=EvalOptions(engine="cycle"))
    stalls = {(a, why): n for a, why, n in r.stalls}
    # One tile at a time: the 2D array waits for the previous tile to leave its registers
    # (which waits on the running max coming back from the 1D array); the 1D array waits on
    # the 2D array's reductions.
    assert stalls[("PE2D", "fill/drain")] > 0.3 * r.cycles
    assert sum(n for (a, _why), n in stalls.items() if a == "PE1D") > 0.3 * r.cycles
    assert r.util_2d < 0.6


def test_short_sequence_gap_is_prologue_and_epilogue(specs):
    # At 1K tokens each query block has only 4 key chunks: the waterfall's fill at the
    # start of each block and the 1D array's AV at its end are exposed.
    workload = make_workload("bert", "1K")
    cycle = evaluate(specs, "binding", workload, options=EvalOptions(engine="cycle"))
    analytic = evaluate(specs, "binding", workload, options=EvalOptions(engine="analytic"))
    assert cycle.latency_s >= analytic.latency_s
    assert cycle.latency_s < 1.1 * analytic.latency_s


def test_registers_too_few_for_the_binding(specs, tmp_path):
    arch = (ROOT / "arch" / "fusemax.yaml").read_text()
    arch = arch.replace(
        "attributes: {depth: 16, width: 16, datawidth: 16}",
        "attributes: {depth: 3, width: 16, datawidth: 16}",
    )
    arch = arch.replace("tables/", f"{ROOT / 'arch' / 'tables'}/")
    (tmp_path / "tiny-regs.yaml").write_text(arch)
    mapping = (ROOT / "mappings" / "binding.yaml").read_text()
    mapping = mapping.replace("architecture: fusemax", "architecture: ./tiny-regs.yaml")
    (tmp_path / "map.yaml").write_text(mapping)
    with pytest.raises(SpecError, match="registers"):
        evaluate(
            specs,
            str(tmp_path / "map.yaml"),
            make_workload("bert", "4K"),
            options=EvalOptions(engine="cycle"),
        )


def test_too_many_tiles_in_flight(specs, tmp_path):
    mapping = (ROOT / "mappings" / "binding.yaml").read_text()
    mapping = mapping.replace("pipeline: {}", "pipeline: {tiles_in_flight: 9}")
    (tmp_path / "map.yaml").write_text(mapping)
    with pytest.raises(SpecError, match="tiles in flight"):
        evaluate(
            specs,
            str(tmp_path / "map.yaml"),
            make_workload("bert", "4K"),
            options=EvalOptions(engine="cycle"),
        )


# --------------------------------------------------------------------------------------
# External check: plain GEMMs on an output-stationary array against SCALE-Sim

SHAPES = [  # (rows, cols, M, N, K): square and not, divisible and not
    (8, 8, 64, 64, 64),
    (16, 8, 100, 50, 33),
    (32, 16, 100, 50, 33),
    (8, 16, 20, 37, 129),
    (16, 16, 256, 64, 17),
]


def _engine_gemm(tmp_path: Path, rows: int, cols: int, m: int, n: int, k: int) -> int:
    for name in ("gemm.yaml", "map.yaml"):
        shutil.copy(GEMM / name, tmp_path / name)
    text = (GEMM / "arch.yaml").read_text().replace("COLS", str(cols)).replace("ROWS", str(rows))
    (tmp_path / "arch.yaml").write_text(text)
    base = make_workload("custom", "64", {"batch": 1, "heads": 1, "embed": k})
    workload = dataclasses.replace(base, rank_overrides=(("M", m), ("P", n), ("E", k)))
    cascade, mapping, arch = prepare(Specs(), str(tmp_path / "map.yaml"), workload)
    program = pipelined_point(plan_point(cascade, mapping, arch, workload)).program
    return Waterfall(program).run().cycles


def _scalesim_gemm(tmp_path: Path, rows: int, cols: int, m: int, n: int, k: int) -> int:
    from scalesim.scale_sim import scalesim

    cfg = tmp_path / "ss.cfg"
    cfg.write_text(
        "[general]\nrun_name = gemm\n[architecture_presets]\n"
        f"ArrayHeight: {rows}\nArrayWidth: {cols}\n"
        "IfmapSramSzkB: 10240\nFilterSramSzkB: 10240\nOfmapSramSzkB: 10240\n"
        "IfmapOffset: 0\nFilterOffset: 10000000\nOfmapOffset: 20000000\n"
        "Dataflow : os\nBandwidth : 10\nMemoryBanks: 1\n"
        "[run_presets]\nInterfaceBandwidth: CALC\n"
    )
    topo = tmp_path / "topo.csv"
    topo.write_text(f"Layer, M, N, K,\nl0, {m}, {n}, {k},\n")
    sim = scalesim(
        save_disk_space=True,
        verbose=False,
        config=str(cfg),
        topology=str(topo),
        input_type_gemm=True,
    )
    sim.run_scale(top_path=str(tmp_path))
    with open(tmp_path / "gemm" / "COMPUTE_REPORT.csv") as f:
        rows_ = list(csv.reader(f))
    header = [h.strip() for h in rows_[0]]
    return int(float(rows_[1][header.index("Total Cycles")]))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_cycles_agree_with_scalesim(tmp_path, shape):
    pytest.importorskip("scalesim")
    ours = _engine_gemm(tmp_path, *shape)
    theirs = _scalesim_gemm(tmp_path, *shape)
    assert abs(ours - theirs) <= 0.01 * theirs, (ours, theirs)


def test_gemm_folds_are_serialised(tmp_path):
    # Without SCALE-Sim: one accumulator per PE, so every fold pays fill and drain:
    # folds x (K + rows + cols - 2) cycles.
    # The first tile's operands cross DRAM first: at most one cycle more (the memory stream
    # rounds its time per epoch up, never down).
    rows, cols, m, n, k = 16, 8, 100, 50, 33
    folds = math.ceil(m / rows) * math.ceil(n / cols)
    cycles = _engine_gemm(tmp_path, rows, cols, m, n, k)
    assert folds * (k + rows + cols - 2) <= cycles <= folds * (k + rows + cols - 2) + 1


# --------------------------------------------------------------------------------------
# Global-buffer port bandwidth


def _narrow_buffer_mapping(tmp_path: Path, values_per_cycle: int) -> str:
    arch = (ROOT / "arch" / "fusemax.yaml").read_text()
    arch = arch.replace(
        "      n_banks: 32\n", f"      n_banks: 32\n      shared_bandwidth: {values_per_cycle}\n"
    )
    assert "shared_bandwidth: " in arch
    arch = arch.replace("tables/", f"{ROOT / 'arch' / 'tables'}/")
    (tmp_path / "narrow.yaml").write_text(arch)
    mapping = (ROOT / "mappings" / "binding.yaml").read_text()
    mapping = mapping.replace("architecture: fusemax", "architecture: ./narrow.yaml")
    (tmp_path / "map.yaml").write_text(mapping)
    return str(tmp_path / "map.yaml")


def test_buffer_ports_throttle_the_waterfall(specs, tmp_path):
    # 256 values per cycle through the buffer's ports: every epoch must at least bring the
    # K and V chunks (E + F) x M0 from the buffer to the PEs, 128 cycles -- close to the
    # 138-cycle epoch on its own, and Q and the running numerator RNV come on top.
    workload = make_workload("bert", "16K")
    path = _narrow_buffer_mapping(tmp_path, 256)
    wide = evaluate(specs, "binding", workload, options=EvalOptions(engine="analytic"))
    narrow = evaluate(specs, path, workload, options=EvalOptions(engine="analytic"))
    cycle = evaluate(specs, path, workload, options=EvalOptions(engine="cycle"))
    epochs = workload.instances * (16384 // 256) ** 2
    kv_floor_s = epochs * (64 + 64) * 256 / 256 / 940e6
    assert narrow.latency_s > max(wide.latency_s, kv_floor_s)
    assert narrow.latency_s == pytest.approx(narrow.phases[0].buffer_s)
    assert cycle.latency_s == pytest.approx(narrow.latency_s, rel=0.02)
    stalls = {(a, why): n for a, why, n in cycle.stalls}
    assert stalls[("PE2D", "memory")] > 0.3 * cycle.cycles
    assert wide.phases[0].buffer_s == 0  # the shipped buffer's ports are unlimited


def test_buffer_bandwidth_must_be_positive(specs, tmp_path):
    path = _narrow_buffer_mapping(tmp_path, 0)
    with pytest.raises(SpecError, match="shared_bandwidth"):
        evaluate(specs, path, make_workload("bert", "4K"))


def test_phase_compute_time_leaves_memory_stalls_out(specs):
    """A phase's compute_s means the same in both engines: what its arrays need, memory
    apart. The unfused QK phase at 1M tokens waits on DRAM most of the time: the cycle
    engine's latency is the memory time, its compute the analytic compute."""
    w = make_workload("bert", "1M")
    cycle = evaluate(specs, "unfused", w, options=EvalOptions(engine="cycle"))
    analytic = evaluate(specs, "unfused", w, options=EvalOptions(engine="analytic"))
    for c, a in zip(cycle.phases, analytic.phases, strict=True):
        assert c.compute_s == pytest.approx(a.compute_s, rel=0.01), c.name
        assert c.latency_s >= c.compute_s
    qk = cycle.phases[0]
    assert qk.name == "QK" and qk.compute_s < 0.5 * qk.memory_s
    assert qk.latency_s == pytest.approx(qk.memory_s, rel=0.01)


@pytest.mark.parametrize("config", ["arch", "binding"])
def test_every_cycle_of_every_array_is_busy_or_a_stall(specs, config):
    """Busy issue cycles plus stalls (dependencies, memory, fill/drain, idle) cover the whole
    run on each array, the last wavefront's drain included."""
    from simulator.trace import trace_point

    workload = make_workload("bert", "4K", {"batch": 1, "heads": 1})
    t = trace_point(specs, config, workload, 0)
    r = t.result
    for array in t.arrays:
        busy = sum(n for e, n in r.busy.items() if t.mapping.array_of(e) == array)
        stalled = sum(n for (a, _why), n in r.stalls.items() if a == array)
        assert busy + stalled == r.cycles, array
