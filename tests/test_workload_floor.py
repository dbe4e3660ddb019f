"""The guard that trusts no cascade (issue 43): the workload's own MACs at the chip's peak
and its compulsory bytes at the bandwidth; no record under them, whatever the flags, the
cascade or the mapping."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.core.evaluate import check_floor
from simulator.core.floors import attended_pairs, attention_floor, peak_macs_per_s
from simulator.drivers.configs import EvalOptions, Specs, evaluate, prepare
from simulator.run import main as run_main
from simulator.spec.workload import make_workload
from simulator.strategies import context
from simulator.support.errors import BoundBreach


def _pairs_by_count(p: int, m: int, mask: str, w: int) -> int:
    """Kept (query, key) pairs counted one by one: queries the last P of M positions."""
    q = np.arange(m - p, m)[:, None]
    k = np.arange(m)[None, :]
    keep = np.ones((p, m), bool)
    if mask in ("causal", "window"):
        keep &= k <= q
    if mask == "window":
        keep &= k > q - w
    return int(keep.sum())


@given(
    seq=st.integers(1, 300),
    window=st.integers(0, 400),
    causal=st.booleans(),
    decode=st.booleans(),
)
@settings(max_examples=60, deadline=None, derandomize=True)
def test_attended_pairs_are_the_masks_pairs(seq, window, causal, decode):
    overrides = {"heads": 2, "embed": 4, "window": window, "causal": causal or bool(window)}
    if decode:
        w = make_workload("custom", str(seq), overrides, phase="decode", context=str(seq))
        mask = "none" if w.mask == "causal" else w.mask  # after its whole cache
    else:
        w = make_workload("custom", str(seq), overrides)
        mask = w.mask
    assert attended_pairs(w) == _pairs_by_count(w.queries, w.keys, mask, window)


def test_the_peak_is_the_datasheets():
    _c, _m, h100 = prepare(Specs(arch_override="h100"), "auto:fusemax", make_workload("bert", "1K"))
    tensor = 132 * 2048 * 1.83e9  # 989.4 TFLOP/s dense BF16 [WP table 3]
    assert tensor < peak_macs_per_s(h100) < 1.2 * tensor  # and the FP32 lanes' FMAs


@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    model=st.sampled_from(["bert", "llama3-8b", "mistral-7b"]),
    seq=st.sampled_from(["1K", "4K"]),
    batch=st.sampled_from([1, 8]),
    decode=st.booleans(),
    config=st.sampled_from(["auto", "auto:unfused", "auto:flat", "binding"]),
)
def test_no_record_under_the_workloads_floor(model, seq, batch, decode, config):
    phase = {"phase": "decode", "context": seq} if decode else {}
    w = make_workload(model, "1" if decode else seq, {"batch": batch}, **phase)
    specs = Specs()
    r = evaluate(
        specs, config, w, options=EvalOptions(engine="analytic")
    )  # the guard raises inside
    _c, _m, arch = prepare(specs, config, w)
    floor = attention_floor(w, arch)
    assert r.latency_s >= floor.latency_s * (1 - 1e-9)
    assert r.traffic_bytes >= floor.compulsory_bytes * (1 - 1e-9)


def test_a_record_under_the_floor_is_refused():
    w = make_workload("bert", "4K")
    specs = Specs()
    r = evaluate(specs, "binding", w, options=EvalOptions(engine="analytic"))
    _c, _m, arch = prepare(specs, "binding", w)
    floor = attention_floor(w, arch)
    with pytest.raises(BoundBreach, match="floor"):
        check_floor(dataclasses.replace(r, latency_s=floor.latency_s / 2), floor, w)
    with pytest.raises(BoundBreach, match="compulsory"):
        check_floor(dataclasses.replace(r, traffic_bytes=floor.compulsory_bytes / 2), floor, w)


def test_a_cascade_that_loses_the_heads_is_caught(run_cli, monkeypatch):
    """The bug of `--seq 4K --shape M=4096` (the instance rule took the cascade for one that
    attends nothing and ran one head of twelve): the planned point's own bounds moved with
    it; the workload's floor does not -- one line, exit 3."""
    monkeypatch.setenv("FUSEMAX_SIM_CACHE", "off")  # searched afresh, with the bug
    monkeypatch.setattr(
        context, "instances_of", lambda shapes, facts: dict(facts.keyless_instances)
    )
    argv = ["--seq", "4K", "--mapping", "auto", "--engine", "analytic"]
    code, out, err = run_cli(run_main, argv)
    assert code == 3 and not out, out
    assert err.startswith("internal error:") and "floor" in err and err.count("\n") == 1
