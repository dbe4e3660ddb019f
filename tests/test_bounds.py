"""Lower bounds: the IO-aware closed forms by hand, no result beating its bound, and FuseMax
near its bound where it is compute-bound."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.core.bounds import dram_bound_values
from simulator.drivers.configs import STANDARD, EvalOptions, Sizing, Specs, evaluate
from simulator.spec.workload import make_workload

from .conftest import ROOT

GEMM = """
name: gemm
shapes: {I: 1024, J: 1024, K: 1024}
einsum:
  declaration:
    A: [K, I]
    B: [K, J]
    C: [I, J]
  expressions:
    - C[i, j] = A[k, i] * B[k, j]
"""


def _total(parts) -> float:
    return sum(v for _w, v in parts)


def test_gemm_bound_is_smith_et_als():
    """a = b = c = 1024, M = 64K values: at least 2abc / sqrt(M) - 2M + ac values move (the
    tight bound of Smith, Lowery, Langou and van de Geijn, arXiv 1702.02017: Hong and Kung's
    leading term, less its lower-order 2M)."""
    cascade = loads_cascade(GEMM, "gemm.yaml")
    extents = {"I": 1024, "J": 1024, "K": 1024}
    n, m = 1024, 64 * 1024
    assert _total(dram_bound_values(cascade, extents, m)) == (
        2 * n**3 / math.sqrt(m) - 2 * m + n * n
    )
    # a buffer holding both operands: the compulsory traffic only
    assert _total(dram_bound_values(cascade, extents, 1e12)) == 3 * n * n


@pytest.mark.parametrize("name", ["attention-1pass", "attention-3pass"])
def test_attention_bound_is_flashattentions(name):
    """q = x = 4096, d = f = 64: H = 2qd + 2xd q/g with g = M / 2d rows on chip; the
    re-read term 2xd q/g halves when M doubles (1/M), whatever pass structure computes it."""
    cascade = load_cascade(ROOT / "cascades" / f"{name}.yaml")
    q = x = 4096
    d = 64
    extents = {"P": q, "M": x, "E": d, "F": d, "M1": x // 256, "M0": 256}
    terms = []
    for m in (64 * 1024, 128 * 1024):
        total = _total(dram_bound_values(cascade, extents, m))
        g = m / (2 * d)
        assert total == pytest.approx(2 * q * d + 2 * x * d * q / g, rel=1e-12)
        terms.append(total - 2 * q * d)
    assert terms[0] == pytest.approx(2 * terms[1], rel=1e-12)
    assert terms[1] == pytest.approx(4 * x * q * d * d / (128 * 1024), rel=1e-12)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(
    model=st.sampled_from(["bert", "trxl", "t5", "xlm"]),
    seq=st.sampled_from(["1K", "4K", "16K", "64K", "256K"]),
    batch=st.integers(1, 64),
    buffer_mb=st.sampled_from([4, 8, 16, 32, 64]),
    bandwidth_gb=st.sampled_from([50, 200, 400, 1600]),
)
def test_no_result_beats_its_bound(model, seq, batch, buffer_mb, bandwidth_gb):
    w = make_workload(model, seq, {"batch": batch})
    specs = Specs()
    for config in STANDARD:
        r = evaluate(
            specs, config, w, Sizing(buffer_bytes=buffer_mb * 2**20, bandwidth=bandwidth_gb * 1e9)
        )
        point = f"{config} {model} {seq} B={batch} {buffer_mb} MB {bandwidth_gb} GB/s"
        assert r.latency_s >= r.latency_bound_s * (1 - 1e-9), point
        assert r.traffic_bytes >= r.traffic_bound_bytes * (1 - 1e-9), point
        assert 0 < r.fraction_of_bound <= 1 + 1e-9, point


@pytest.mark.parametrize("seq", ["64K", "256K"])
def test_no_result_beats_its_bound_in_the_cycle_engine(seq):
    specs = Specs()
    w = make_workload("xlm", seq)
    for config in STANDARD:
        r = evaluate(specs, config, w, options=EvalOptions(engine="cycle"))
        assert r.latency_s >= r.latency_bound_s * (1 - 1e-9), config


@pytest.mark.parametrize("model", ["bert", "trxl", "t5", "xlm"])
def test_fusemax_is_near_its_bound_from_64k(model):
    """+Binding at 64K..1M: compute-bound, within 5% of the least time its arrays need for
    the useful work; FLAT and unfused leave the gap the paper's figures show."""
    specs = Specs()
    for seq in ("64K", "256K", "1M"):
        w = make_workload(model, seq)
        fusemax = evaluate(specs, "binding", w)
        assert fusemax.fraction_of_bound >= 0.95, (model, seq, fusemax.fraction_of_bound)
        assert fusemax.bound_binds.startswith("compute")
        for config in ("flat", "unfused"):
            assert evaluate(specs, config, w).fraction_of_bound < 0.8


def test_roofline_cli(tmp_path, capsys):
    from simulator.roofline import main as roofline_main
    from simulator.roofline import parse_seqs

    assert parse_seqs("1K..1M") == [2**10, 2**12, 2**14, 2**16, 2**18, 2**20]
    assert parse_seqs("4K,64K") == [4096, 65536]
    out = tmp_path / "roof"
    args = ["--model", "bert", "--seqs", "1K..16K", "--accel", "flat,binding", "-o", str(out)]
    assert roofline_main(args) == 0
    text = capsys.readouterr().out
    assert "of bound" in text and "+Binding" in text
    for suffix in (".png", ".pdf"):
        assert (tmp_path / f"roof{suffix}").stat().st_size > 1000
    assert roofline_main(["--seqs", "1M..1K"]) == 2


def _fusemax(precision: str):
    from simulator.spec.arch_file import load_architecture

    return load_architecture(ROOT / "arch" / "fusemax.yaml").with_precision(precision)


def test_halving_the_value_width_at_a_fixed_buffer():
    """FP32 -> FP16 with the same 16 MB buffer: twice the values fit, each half the size.
    The attention re-read term (4xqd^2 / M values) falls 4x in bytes, a large GEMM's
    (2abc / sqrt(M) - 2M) about 2^1.5 = 2.83x."""
    fp32, fp16 = _fusemax("fp32"), _fusemax("fp16")
    assert fp32.buffer.capacity_bytes == fp16.buffer.capacity_bytes
    assert fp16.buffer_values == 2 * fp32.buffer_values
    attention = load_cascade(ROOT / "cascades" / "attention-1pass.yaml")
    q = x = 1 << 20
    d = 64
    extents = {"P": q, "M": x, "E": d, "F": d, "M1": x // 256, "M0": 256}

    def reread_bytes(arch) -> float:
        parts = dict(dram_bound_values(attention, extents, arch.buffer_values))
        # the K and V traffic: read once plus the re-reads = 2xd q/g
        kv = (
            parts["read K"]
            + parts["read V"]
            + parts["attention: K and V re-read per block of rows"]
        )
        return kv * arch.value_bytes

    assert reread_bytes(fp32) / reread_bytes(fp16) == pytest.approx(4.0, rel=1e-12)
    gemm = loads_cascade(GEMM, "gemm.yaml")
    n = 1 << 16
    big = {"I": n, "J": n, "K": n}

    def gemm_bytes(arch) -> float:
        parts = dict(dram_bound_values(gemm, big, arch.buffer_values))
        return (parts["read A"] + parts["read B"] + parts["GEMM C: re-reads"]) * arch.value_bytes

    def expected(arch) -> float:  # 2abc / sqrt(M) - 2M, in bytes
        m = arch.buffer_values
        return (2 * n**3 / math.sqrt(m) - 2 * m) * arch.value_bytes

    assert gemm_bytes(fp32) / gemm_bytes(fp16) == pytest.approx(
        expected(fp32) / expected(fp16), rel=1e-12
    )
    assert expected(fp32) / expected(fp16) == pytest.approx(2**1.5, rel=1e-3)


def test_the_whole_bound_follows_the_closed_form():
    """BERT at 256K on FuseMax: the traffic bound in bytes at FP32 and FP16 is what
    2qd + 4xqd^2/M (values, per head) predicts at each precision, M the on-chip values:
    the buffer and every PE's registers."""
    specs = Specs()
    w = make_workload("bert", "256K")
    q = x = w.seq_len
    d = w.embed
    ratio = []
    for precision in ("fp32", "fp16"):
        r = evaluate(specs, "binding", w, Sizing(precision=precision))
        arch = _fusemax(precision)
        registers = sum(a.mesh_x * a.mesh_y * a.register_words for a in arch.arrays)
        per_head = 2 * q * d + 4 * x * q * d * d / (arch.buffer_values + registers)
        assert r.traffic_bound_bytes == pytest.approx(
            per_head * w.instances * arch.value_bytes, rel=1e-9
        )
        ratio.append(r.traffic_bound_bytes)
    assert ratio[0] > 2 * ratio[1]


def test_precision_runs_end_to_end_and_says_what_changed(capsys):
    from simulator.run import main as run_main

    assert run_main(["--accel", "fusemax", "--precision", "fp8", "--seq", "64K"]) == 0
    out = capsys.readouterr().out
    assert "precision fp8 (8-bit values) instead of fp16" in out
    assert run_main(["--accel", "fusemax", "--precision", "fp64", "--seq", "64K"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no MAC cost for precision 'fp64'" in err


def test_narrower_values_cost_less_to_move_and_compute():
    specs = Specs()
    w = make_workload("xlm", "64K")
    fp16 = evaluate(specs, "binding", w)
    fp8 = evaluate(specs, "binding", w, Sizing(precision="fp8"))
    fp32 = evaluate(specs, "binding", w, Sizing(precision="fp32"))
    assert fp8.traffic_bytes < fp16.traffic_bytes / 2  # half the bytes, bigger tiles
    assert fp8.energy_pj < fp16.energy_pj < fp32.energy_pj
    assert fp32.latency_s > 3 * fp16.latency_s  # a 32-bit MAC takes four cycles
