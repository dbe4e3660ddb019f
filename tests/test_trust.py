"""No impossible numbers (issue 24): every record within its own bounds, and a model's own
attention by default.

Expected values come from the workloads' arithmetic (bytes of K and V over the bandwidth,
shares of a window), never from the tool's own output; the guard is shown to fire by
feeding it an impossible bound.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from simulator.core import evaluate as evaluate_module
from simulator.core.bounds import Bounds
from simulator.drivers.configs import EvalOptions, Sizing, Specs, evaluate
from simulator.run import main as run_main
from simulator.spec.arch_file import load_architecture
from simulator.spec.workload import make_workload
from simulator.support.errors import BoundBreach, SpecError
from simulator.sweep import main as sweep_main

from .conftest import ROOT

BANDWIDTH = 400 * 2**30  # bytes/s, the shipped designs' DRAM


def _json(run_cli, *argv):
    import json

    code, out, err = run_cli(run_main, [*argv, "--format", "json"])
    assert code == 0, err
    return {r["accelerator"]: r for r in json.loads(out)}


# --------------------------------------------------------------------------------------
# 1. A decoded token sits after the whole cache.


@pytest.mark.parametrize(
    "model, cascade, keys",
    [
        # causal keeps every cached key: 32 query heads each read the 32K cache
        ("llama3-8b", "attention-causal-1pass", 32768),
        # a window of 4096 keeps the last 4096 keys
        ("mistral-7b", "attention-window-1pass", 4096),
    ],
)
def test_decode_with_a_mask_attends_the_end_of_the_cache(run_cli, model, cascade, keys):
    # a multi-head cascade: the workload stated as multi-head (its 32 query heads each with
    # their K and V), else the grouped model's attention is one the cascade cannot compute
    argv = ["--model", model, "--phase", "decode", "--context", "32K", "--batch", "64"]
    argv += ["--kv-heads", "32"]
    argv += ["--engine", "analytic"]  # the cycle engine: tests/test_bind.py's decode tests
    r = _json(run_cli, *argv, "--mapping", "auto", "--cascade", cascade)["auto-fused"]
    kv_bytes = 2 * 64 * 32 * keys * 128 * 2  # multi-head: K and V per query head
    assert r["traffic_bytes"] == pytest.approx(kv_bytes, rel=0.001)
    assert kv_bytes / BANDWIDTH <= r["latency_s"] <= 1.03 * kv_bytes / BANDWIDTH
    assert r["fraction_of_bound"] <= 1 + 1e-9


# --------------------------------------------------------------------------------------
# 2. Defaults run the model's own attention, and say which cascade ran.


def test_defaults_run_the_models_attention_and_name_it(run_cli):
    code, out, err = run_cli(run_main, ["--model", "llama3-8b", "--seq", "4K"])
    assert code == 0, err
    header = out.splitlines()[0]
    assert "attention-gqa-causal-3pass (auto: unfused, auto: FLAT)" in header
    assert "attention-gqa-causal-1pass (auto: FuseMax)" in header
    # the paper's models keep the paper's configurations and cascades
    code, out, err = run_cli(run_main, ["--model", "bert", "--seq", "4K"])
    assert "attention-3pass (Unfused, FLAT), attention-1pass (+Cascade" in out.splitlines()[0]


def test_causal_grouped_prefill_costs_half_of_full_grouped_attention(run_cli):
    # Causal keeps P(P+1)/2 of P^2 key-query pairs; diagonal tiles count whole, so the
    # 2D work (and the compute-bound latency) is 0.50-0.55 of full attention at 64K.
    argv = ["--model", "llama3-8b", "--seq", "64K", "--engine", "analytic"]
    causal = _json(run_cli, *argv, "--accel", "fusemax")["auto-fusemax"]
    full = _json(
        run_cli, *argv, "--no-causal", "--mapping", "auto", "--cascade", "attention-gqa-1pass"
    )
    assert causal["cascade"] == "attention-gqa-causal-1pass"
    assert 0.50 <= causal["latency_s"] / full["auto-fused"]["latency_s"] <= 0.55


@pytest.mark.parametrize(
    "extra, cascade",
    [
        (["--no-causal"], "attention-gqa-1pass"),
        (["--kv-heads", "32"], "attention-causal-1pass"),
        (["--kv-heads", "32", "--no-causal"], "attention-1pass"),
        (["--window", "1024"], "attention-gqa-window-1pass"),
    ],
)
def test_overrides_change_the_attention_that_runs(run_cli, extra, cascade):
    argv = ["--model", "llama3-8b", "--seq", "4K", "--engine", "analytic", "--accel", "fusemax"]
    assert next(iter(_json(run_cli, *argv, *extra).values()))["cascade"] == cascade


def test_a_window_without_causality_is_refused(run_cli):
    code, out, err = run_cli(run_main, ["--model", "mistral-7b", "--no-causal"])
    assert code == 2 and err.count("\n") == 1 and "--window 0" in err


def test_a_paper_configuration_never_runs_another_attention(run_cli):
    # +Cascade has no automatic counterpart: named for a grouped causal model, one line
    code, out, err = run_cli(
        run_main, ["--model", "llama3-8b", "--seq", "4K", "--accel", "cascade"]
    )
    assert code == 2 and err.count("\n") == 1
    assert "not Llama-3-8B's attention (grouped-query, causal)" in err
    # FLAT hands the point to its FLAT strategy, saying so
    code, out, err = run_cli(run_main, ["--model", "llama3-8b", "--seq", "4K", "--accel", "flat"])
    assert code == 0 and "bound by the flat strategy (auto:flat)" in out
    assert "attention-gqa-causal-3pass" in out.splitlines()[0]


# --------------------------------------------------------------------------------------
# 3. and 4. FLAT's dataflow: published where published, else the FLAT strategy's rule;
# a buffer its tiles do not fit leaves it out.


def test_flat_in_a_tiny_buffer_is_refused_or_left_out(run_cli):
    code, out, err = run_cli(run_main, ["--seq", "64K", "--accel", "flat", "--buffer-bytes", "512"])
    assert code == 2 and err.count("\n") == 1 and "does not fit" in err
    code, out, err = run_cli(run_main, ["--seq", "64K", "--buffer-bytes", "512"])
    assert "flat left out" in out
    assert not any(line.startswith("FLAT ") for line in out.splitlines())
    # the unfused GEMMs still map (their PEs' registers hold the tiles), at their bound
    assert "Unfused" in out


def test_flat_follows_the_buffer():
    """FLAT's published 64K row keeps QK on chip with a fixed spill: at a smaller buffer the
    published choice no longer applies and FLAT moves more data."""
    specs = Specs()
    w = make_workload("bert", "64K")
    rows = [evaluate(specs, "flat", w, Sizing(buffer_bytes=b)) for b in (4 << 20, 32 << 20)]
    assert rows[0].traffic_bytes > rows[1].traffic_bytes
    assert rows[0].accelerator == "auto-flat" and rows[1].accelerator == "flat"


def test_flats_rule_reproduces_the_published_choices():
    """The FLAT strategy's rule against FLAT's published per-point dataflow (the paper's
    24 points): where the score fibres live and the GEMMs' stationarity agree everywhere
    (at 64K FLAT keeps the fibres on chip, computing SN over the scores and A over SN in
    place; the rule does the same, in blocks of 128 rows); the latency is the same up to
    64K and within 13% everywhere."""
    from experiments.flat_rule import CHOICES, compute

    specs = Specs()
    for model in ("bert", "trxl", "t5", "xlm"):
        for seq in (1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20):
            row = compute(specs, (model, seq))
            agrees = dict(zip(CHOICES, row.agrees, strict=True))
            for choice in ("QK_loc", "A_loc", "QK_stationarity"):
                assert agrees[choice], (model, seq, choice)
            ratio = row.rule_latency_s / row.published_latency_s
            assert abs(ratio - 1) < 0.13, (model, seq)
            if seq <= 1 << 16:
                assert ratio == pytest.approx(1.0, rel=1e-3), (model, seq)


def test_flat_outside_the_paper_borrows_no_row(run_cli):
    code, out, err = run_cli(run_main, ["--model", "llama3-8b", "--seq", "128K", "--accel", "flat"])
    assert code == 0 and "nearest" not in out and "published row" not in out


# --------------------------------------------------------------------------------------
# 5. One datawidth rule for every design.


@pytest.mark.parametrize("design", ["flat", "fusemax"])
def test_multiplier_units_scale_alike_at_fp32(design):
    arch = load_architecture(ROOT / "arch" / f"{design}.yaml")
    wide = arch.with_precision("fp32")
    for a, b in zip(arch.arrays, wide.arrays, strict=True):
        for op in a.operations:
            scaled = b.op(op.name).cycles / op.cycles
            # a 32-bit product is four 16-bit ones: multiplier-built units 4x, adders 1x
            assert scaled == (4 if op.unit in ("mac", "exponential", "divide") else 1), op
    one_d = {a.mesh_y: a for a in wide.arrays}[1]
    assert one_d.op("exp").cycles == (4 if design == "flat" else 24)


def test_fp32_leaves_out_what_its_registers_cannot_hold(run_cli):
    # FLAT's 2D PEs have 3 x 16 bits of registers: one 32-bit value, and a GEMM's PE holds
    # two operands and a result. The same rule for every configuration.
    code, out, err = run_cli(
        run_main, ["--seq", "4K", "--precision", "fp32", "--engine", "analytic"]
    )
    assert code == 0, err
    for config in ("unfused", "flat", "cascade"):
        assert f"{config} left out" in out
    assert "registers keep their bits at another precision" in out
    assert "+Binding" in out


# --------------------------------------------------------------------------------------
# 6. Grouped K/V at mid lengths: why the row tiles stay divisors.


def test_grouped_mid_length_is_compute_bound_so_row_tiles_stay_divisors():
    """Llama-3-8B at 16K: the group's rows do not fit the buffer, one head's do; blocks of
    rows divide each head's P/P0 = 64 tiles (powers of two), so K and V are read once per
    query head as in multi-head attention. A padded block (3 blocks of 22-31 tiles) would
    cut that to 0.75 -- but the point is compute-bound by far, and padded rows cost whole
    tiles of compute."""
    w = make_workload("llama3-8b", "16K")
    r = evaluate(Specs(cascade_override="attention-gqa-1pass"), "auto:fusemax", w)
    kv = 2 * w.batch * w.heads * w.seq_len * 128 * 2  # per query head, as multi-head
    reads = sum(t.read_bytes for t in r.tensors if t.tensor in ("K", "V"))
    assert reads == pytest.approx(kv, rel=1e-9)
    assert r.traffic_bytes / BANDWIDTH < 0.05 * r.latency_s


# --------------------------------------------------------------------------------------
# 7. What each strategy skips under a mask.


def test_fused_strategies_skip_masked_tiles_and_library_calls_do_not():
    """Mistral-7B at 128K, window 4096: a block of 256 rows touches 17 chunks of 256 keys of
    the 512 (the band of 4096 + 255 keys): about 3.3% computed. FLAT and FuseMax skip the
    rest; the unfused baseline's GEMMs compute dense and mask afterwards."""
    w = make_workload("mistral-7b", "128K")
    band = (4096 + 256) / 256 / 512  # chunks a block of rows touches, of 512
    for config in ("auto:fusemax", "auto:flat"):
        r = evaluate(Specs(), config, w)
        assert 1 - r.skipped_fraction == pytest.approx(band, rel=0.05), config
    assert evaluate(Specs(), "auto:unfused", w).skipped_fraction == 0.0


def test_unfused_decode_slices_the_cache_to_the_window():
    w = make_workload("mistral-7b", "1", phase="decode", context="32K")
    r = evaluate(Specs(), "auto:unfused", w)
    kv = sum(t.read_bytes for t in r.tensors if t.tensor in ("K", "V"))
    assert kv == pytest.approx(2 * 64 * 8 * 4096 * 128 * 2, rel=1e-9)


# --------------------------------------------------------------------------------------
# The guard: a record below its bound is never printed.


def _impossible_bounds(point):
    huge = 1e9
    return Bounds(huge, "PE2D", huge, huge, huge, huge, "compute (PE2D)", ())


def test_the_guard_refuses_a_result_below_its_bound(monkeypatch, run_cli):
    monkeypatch.setattr(evaluate_module, "point_bounds", _impossible_bounds)
    with pytest.raises(BoundBreach):
        evaluate(Specs(), "binding", make_workload("bert", "1K"))
    code, out, err = run_cli(run_main, ["--seq", "1K", "--accel", "fusemax", "--format", "json"])
    assert code == 3 and out == "" and err.count("\n") == 1
    assert err.startswith("internal error: +Binding (binding, attention-1pass")
    assert "below its bound" in err and "BERT" in err


def test_a_breach_stops_a_sweep_and_writes_nothing(monkeypatch, run_cli, tmp_path):
    monkeypatch.setattr(evaluate_module, "point_bounds", _impossible_bounds)
    out = tmp_path / "s.csv"
    argv = ["--grid", "seq=1K", "accel=binding", "--jobs", "1", "--no-progress", "--out", str(out)]
    code, _, err = run_cli(sweep_main, argv)
    assert code == 3 and "internal error" in err and not out.exists()


@pytest.mark.parametrize(
    "tool, argv",
    [
        ("compare", ["--cascades", "attention-1pass", "--seq", "1K", "--engine", "analytic"]),
        ("roofline", ["--model", "bert", "--seqs", "1K", "--engine", "analytic"]),
        ("trace", ["--accel", "binding", "--seq", "1K", "--epochs", "2"]),
    ],
)
def test_every_tool_refuses_a_breach(monkeypatch, run_cli, tmp_path, tool, argv):
    import importlib

    module = importlib.import_module(f"simulator.{tool}")
    monkeypatch.setattr(evaluate_module, "point_bounds", _impossible_bounds)
    if hasattr(module, "point_bounds"):
        monkeypatch.setattr(module, "point_bounds", _impossible_bounds)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(module.main, argv)
    assert code == 3 and err.startswith("internal error: ") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


MODELS = ["bert", "xlm", "llama3-8b", "mistral-7b"]
CONFIGS = ["unfused", "flat", "cascade", "arch", "binding", "auto:fusemax", "auto:flat"]
CONFIGS += ["auto:unfused", "auto:fusemax/sequential"]
CASCADES = [None, "attention-1pass", "attention-3pass", "attention-causal-1pass"]
CASCADES += ["attention-window-3pass", "attention-gqa-1pass", "attention-gqa-causal-3pass"]
CASCADES += ["attention-gqa-window-1pass", "attention-decode"]


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    model=st.sampled_from(MODELS),
    seq=st.sampled_from([256, 1024, 3072, 4096, 16384, 65536]),
    config=st.sampled_from(CONFIGS),
    cascade=st.sampled_from(CASCADES),
    phase=st.sampled_from(["prefill", "decode"]),
    buffer=st.sampled_from([None, 512, 65536, 1 << 20, 8 << 20]),
    pe_dim=st.sampled_from([None, 16, 64, 128]),
)
def test_no_record_beats_its_bound(model, seq, config, cascade, phase, buffer, pe_dim):
    """Random workloads x cascades x strategies x phases x buffers x arrays: every record
    evaluates to a result at or above its bounds, or to a one-line refusal (a SpecError);
    a BoundBreach fails the test."""
    w = make_workload(model, seq, phase=phase, context=None)
    specs = Specs(cascade_override=cascade)
    try:
        r = evaluate(specs, config, w, Sizing(pe_dim=pe_dim, buffer_bytes=buffer))
    except SpecError:
        event("refused")
        return
    event("evaluated")
    assert r.latency_s >= r.latency_bound_s * (1 - 1e-9)
    assert r.traffic_bytes >= r.traffic_bound_bytes * (1 - 1e-9)
    # and the bounds are physics: the DRAM bound's own bytes over the bandwidth
    assert r.latency_bound_s >= r.traffic_bound_bytes / BANDWIDTH * (1 - 1e-9) or (
        r.latency_bound_s >= r.compute_bound_s * (1 - 1e-9)
    )


@settings(max_examples=15, deadline=None, derandomize=True)
@given(
    model=st.sampled_from(MODELS),
    seq=st.sampled_from([1024, 4096]),
    config=st.sampled_from(["binding", "flat", "auto:fusemax", "auto:flat", "auto:unfused"]),
    phase=st.sampled_from(["prefill", "decode"]),
    pe_dim=st.sampled_from([None, 64]),
)
def test_no_cycle_engine_record_beats_its_bound(model, seq, config, phase, pe_dim):
    w = make_workload(model, seq, phase=phase)
    try:
        r = evaluate(Specs(), config, w, Sizing(pe_dim=pe_dim), EvalOptions(engine="cycle"))
    except SpecError:
        return
    assert r.latency_s >= r.latency_bound_s * (1 - 1e-9)
    assert math.isfinite(r.latency_s) and r.traffic_bytes >= r.traffic_bound_bytes * (1 - 1e-9)


def test_the_test_grid_reaches_every_strategy():
    """The property tests are only as good as what they evaluate: at least one point of
    each strategy binds (not every draw is a refusal)."""
    w = make_workload("llama3-8b", 4096)
    for config in ("auto:fusemax", "auto:flat", "auto:unfused"):
        assert evaluate(Specs(), config, w).latency_s > 0
    assert Path(ROOT / "cascades" / "attention-gqa-causal-1pass.yaml").is_file()
