"""A fan-out of cores sharing a cache (issue 34): the L2 as a cache the SMs share, waves of
blocks, arrays with their own clocks, and the H100 through `simulator.run` by default.

Expected values are arithmetic on the workload and the architecture file (sizes, clocks,
wave counts), never the model's own output.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.drivers.configs import Specs, evaluate
from simulator.plan.waves import (
    SharedRead,
    cached_values,
    hit_share,
    sharing_group,
    spans,
)
from simulator.run import main as run_main
from simulator.spec.arch_file import load_architecture
from simulator.spec.workload import make_workload

from .conftest import ROOT

H100 = ROOT / "arch" / "h100.yaml"


def _variant(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = H100.read_text()
    assert old in text
    out = tmp_path / f"{name}.yaml"
    out.write_text(text.replace(old, new))
    return out


# ---------------------------------------------------------------------------------------
# The wave arithmetic


def test_sharing_group_is_the_innermost_unit_loops_that_do_not_index():
    sig = (("G", 4), ("P2", 64))
    assert sharing_group(("G", "P2"), sig, ("M1", "M0", "E")) == 256  # K: neither indexes
    assert sharing_group(("G", "P2"), sig, ("G", "M1")) == 64  # indexed by G: runs of P2
    assert sharing_group(("G", "P2"), sig, ("P2", "E")) == 1  # P2 innermost indexes it
    assert sharing_group(("G", "P2"), (("G", 4),), ("M1",)) == 4  # kept above P2: no refetch


def test_a_run_spans_waves():
    assert spans(1, 132) == 1.0
    assert spans(133, 132) == pytest.approx(2.0)
    assert spans(64, 132) == pytest.approx(1 + 63 / 132)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    group=st.integers(1, 5000),
    cores=st.integers(1, 256),
    per_unit=st.floats(1.0, 1e6),
    fetched=st.floats(0.01, 1.0),
    hits=st.floats(0.0, 1.0),
)
def test_the_cache_never_adds_traffic_and_reads_each_value_once(
    group, cores, per_unit, fetched, hits
):
    """With the cache a shared read is never above its fetches without it, and -- where
    the group together reads the whole tensor -- never below the tensor read once."""
    values = per_unit * group * fetched
    union = per_unit * min(1.0, fetched * group)
    read = SharedRead("K", values, group, union, in_flight=1.0)
    got = cached_values(read, cores, hits)
    assert got <= values * (1 + 1e-12)
    assert got >= min(values, union) * (1 - 1e-12)


def test_hit_share_is_what_fits():
    reads = [SharedRead("K", 100.0, 64, 10.0, in_flight=1000.0)]
    # 132 cores, runs of 64: about 132 / 64 + 1 groups in flight
    assert hit_share(reads, 10_000, 132, 1e9) == 1.0
    working = (132 / 64 + 1) * 1000.0
    assert hit_share(reads, 10_000, 132, working / 2) == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------
# The H100: multi-head attention reads each head's K and V once per wave, not per block


def _mha(seq: str = "8K", d: int = 128):
    return make_workload(
        "custom", seq, {"batch": 4, "heads": 32, "kv_heads": 32, "embed": d, "causal": False}
    )


def test_l2_shares_kv_between_the_blocks_of_a_wave(tmp_path):
    """MHA, d128, 8K tokens, batch 4, 32 heads: 64 blocks of 128 rows per head. Without the
    cache every block reads its head's K and V (64 x 4 MB per head); with it the blocks of
    a head in one wave read them once per wave they span (1 + 63/132)."""
    w = _mha()
    no_cache = _variant(tmp_path, "nocache", "cache: true", "cache: false")
    with_l2 = evaluate(Specs(arch_override=str(H100)), "h100/flash", w)
    without = evaluate(Specs(arch_override=str(no_cache)), "h100/flash", w)
    heads, seq, d, word = 4 * 32, 8192, 128, 2
    kv = heads * 2 * seq * d * word  # K and V of every head, once
    q_and_out = heads * 2 * seq * d * word
    assert without.traffic_bytes >= 64 * kv  # every block its own
    assert with_l2.traffic_bytes == pytest.approx(kv * (1 + 63 / 132) + q_and_out, rel=0.02)
    assert with_l2.latency_s < without.latency_s
    # and no faster than the tensor cores allow
    macs = 2 * heads * seq * seq * d
    arch = load_architecture(H100)
    tc = arch.array("TensorCores")
    assert with_l2.latency_s >= macs / (arch.cores * tc.pes * arch.frequency_hz)


def test_what_does_not_fit_the_l2_is_read_again(tmp_path):
    """A causal shape whose K/V per group exceeds a small L2 reads more than with the
    50 MB one; a larger cache never reads more."""
    w = make_workload(
        "custom", "32K", {"batch": 1, "heads": 16, "kv_heads": 16, "embed": 256, "causal": True}
    )
    small = _variant(tmp_path, "small-l2", "depth: 50 * 2**20 / 128", "depth: 2 * 2**20 / 128")
    big = evaluate(Specs(arch_override=str(H100)), "h100/flash-causal", w)
    tight = evaluate(Specs(arch_override=str(small)), "h100/flash-causal", w)
    assert tight.traffic_bytes > big.traffic_bytes * 1.5


def test_a_grid_that_does_not_fill_a_wave_leaves_cores_idle():
    """One request, 8 heads, 1K tokens: 8 x 8 = 64 blocks on 132 SMs -- one wave, the
    same time as 132 blocks (16 heads) would take."""
    w8 = make_workload(
        "custom", "1K", {"batch": 1, "heads": 8, "kv_heads": 8, "embed": 128, "causal": False}
    )
    w16 = make_workload(
        "custom", "1K", {"batch": 1, "heads": 16, "kv_heads": 16, "embed": 128, "causal": False}
    )
    specs = Specs(arch_override=str(H100))
    t8 = evaluate(specs, "h100/flash", w8).latency_s
    t16 = evaluate(specs, "h100/flash", w16).latency_s
    assert math.ceil(8 * 8 / 132) == math.ceil(16 * 8 / 132) == 1
    assert t16 == pytest.approx(t8, rel=0.02)


# ---------------------------------------------------------------------------------------
# Arrays with their own clocks


def test_an_array_clock_sets_its_rate(tmp_path):
    """The lanes at twice the clock: every lane operation takes half the system cycles, the
    tensor cores' do not change, and a lanes-bound shape (d64) runs faster."""
    fast = _variant(tmp_path, "fast-lanes", "frequency_hz: 1.98e9", "frequency_hz: 3.96e9")
    a, b = load_architecture(H100), load_architecture(fast)
    for op in ("add", "exp", "reciprocal"):
        assert b.array("CUDACores").op(op).cycles == pytest.approx(
            a.array("CUDACores").op(op).cycles / 2
        )
    assert b.array("TensorCores").operations == a.array("TensorCores").operations
    w = make_workload("custom", "4K", {"batch": 16, "heads": 32, "kv_heads": 8, "embed": 64})
    slow_t = evaluate(Specs(arch_override=str(H100)), "h100/flash", w).latency_s
    fast_t = evaluate(Specs(arch_override=str(fast)), "h100/flash", w).latency_s
    assert fast_t < slow_t


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("frequency_hz: 1.98e9", "frequency_hz: -1", "must be positive"),
        ("cache: true", "cache: maybe", "must be true or false"),
    ],
)
def test_bad_clock_or_cache_is_one_line(tmp_path, capsys, old, new, message):
    bad = _variant(tmp_path, "bad", old, new)
    assert run_main(["--arch", str(bad), "--seq", "4K", "--engine", "analytic"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


# ---------------------------------------------------------------------------------------
# simulator.run on the H100 with its defaults


def test_run_on_the_h100_with_its_default_engine(capsys):
    """`simulator.run --arch arch/h100.yaml`: the paper's files bind FuseMax's arrays, so
    the H100 binds automatically; the cycle engine simulates one core, so the analytic
    engine's numbers are shown, with a note."""
    assert run_main(["--arch", str(H100), "--seq", "4K"]) == 0
    out = capsys.readouterr().out
    assert "auto" in out and "analytic engine" in out


# ---------------------------------------------------------------------------------------
# Units of unequal work: dealt in order to the first free core


def test_uniform_units_take_whole_waves():
    from simulator.plan.waves import makespan

    assert makespan((1.0,) * 200, 1, 132) == 2.0  # 200 units: two waves
    assert makespan((1.0,) * 100, 1, 132) == 1.0


def test_causal_blocks_dealt_in_order_leave_a_tail():
    """8 heads x 32 causal blocks of lengths 1..32 on 132 cores: the average says 33 chunk
    times (two waves of 16.5); dealt in order, the longest blocks start last and the
    grid takes longer -- never less than the longest block or the work over the cores."""
    from simulator.plan.waves import makespan

    weights = tuple(float(i + 1) for i in range(32))
    span = makespan(weights, 8, 132)
    total = 8 * sum(weights)
    assert span >= max(max(weights), total / 132)
    assert span > 2 * (total / (8 * 32))  # more than two average waves
    assert span <= total / 132 + max(weights)  # list scheduling's bound


def test_causal_unit_weights_count_chunks():
    """A causal block of 128 rows over chunks of 128 keys: block i keeps i + 1 chunks."""
    from simulator.plan.masks import constraints
    from simulator.plan.waves import unit_weights

    w = make_workload(
        "custom", "2K", {"batch": 1, "heads": 8, "kv_heads": 8, "embed": 128, "causal": True}
    )
    specs = Specs(arch_override=str(H100))
    from simulator.drivers.configs import prepare
    from simulator.plan.point import plan_point

    cascade, mapping, arch = prepare(specs, "h100/flash-causal", w)
    point = plan_point(cascade, mapping, arch, w)
    phase = point.phases[0]
    name = phase.plan.activity[0][0]
    cons = constraints(cascade.einsum(name), point.partitions, point.extents)
    weights = unit_weights(cons, ("P2",), ("M1",), point.extents)
    assert weights == tuple(float(i + 1) for i in range(2048 // 128))


def test_the_same_note_for_several_configurations_is_said_once():
    from simulator.run import merged_notes

    notes = [
        "auto:unfused: the cycle engine simulates one core; shown: analytic",
        "auto:flat: the cycle engine simulates one core; shown: analytic",
        "no flat baseline at this point: why",
        "auto:fusemax: the cycle engine simulates one core; shown: analytic",
    ]
    assert merged_notes(notes) == [
        "auto:unfused, auto:flat, auto:fusemax: the cycle engine simulates one core; shown: "
        "analytic",
        "no flat baseline at this point: why",
    ]
