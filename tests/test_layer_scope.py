"""A layer's linear layers take the one path (issue 43): the model card's layer (grouped K/V
projections, a gated FFN of its own width), the tokens the layer processes (one per request
in decode), the value format, every core of the chip -- within reach of the floors the
model card and the datasheet give, never under them."""

from __future__ import annotations

import pytest

from simulator.drivers.configs import Sizing, Specs
from simulator.drivers.endtoend import LayerOptions, evaluate_layer
from simulator.run import main as run_main
from simulator.spec.workload import make_workload

# Llama-3-8B's config.json (meta-llama/Meta-Llama-3-8B), written here, not read from the card.
D, H, KV, HEAD, S = 4096, 32, 8, 128, 14336
# A token's MACs through the linear layers: Q, K, V, output projections; gate, up, down.
PER_TOKEN = D * H * HEAD + 2 * D * KV * HEAD + H * HEAD * D + 3 * D * S
WEIGHT_VALUES = PER_TOKEN  # each weight takes part in one MAC per token
BATCH = 8
# Datasheet peaks: the H100 SXM5's dense BF16 rate, 132 SMs x 2048 MACs a clock at 1.83 GHz
# (989.4 TFLOP/s), and 3.35 TB/s;
# FuseMax's chip: a 256 x 256 array of one MAC a cycle at 940 MHz and 400 GiB/s.
CHIPS = {
    "h100": (132 * 2048 * 1.83e9, 3.35e12, ("h100", "auto:fusemax")),
    "fusemax": (256 * 256 * 940e6, 400 * 2**30, (None, "auto:fusemax")),
}


def _linear(chip: str, workload, engine: str = "analytic", precision=None):
    _peak, _bw, (arch, config) = CHIPS[chip]
    specs = Specs(arch_override=arch)
    r = evaluate_layer(
        specs, config, workload, Sizing(precision=precision), LayerOptions(engine=engine)
    )
    return r.linear


@pytest.mark.parametrize("chip", sorted(CHIPS))
def test_prefill_linear_layers_run_at_the_chips_mac_rate(chip):
    w = make_workload("llama3-8b", "4K", {"batch": BATCH})
    peak, _bw, _ = CHIPS[chip]
    floor = BATCH * 4096 * PER_TOKEN / peak
    r = _linear(chip, w)
    assert [p.name for p in r.phases] == ["Q", "K", "V", "Z", "FFNG", "FFN1", "FFN2"]
    assert floor * (1 - 1e-9) <= r.latency_s <= 1.25 * floor, (r.latency_s, floor)


@pytest.mark.parametrize("chip", sorted(CHIPS))
def test_decode_linear_layers_process_the_decoded_tokens(chip):
    w = make_workload("llama3-8b", "1", {"batch": BATCH}, phase="decode", context="4K")
    peak, bandwidth, _ = CHIPS[chip]
    floor = max(WEIGHT_VALUES * 2 / bandwidth, BATCH * PER_TOKEN / peak)
    r = _linear(chip, w)
    assert floor * (1 - 1e-9) <= r.latency_s <= 2 * floor, (r.latency_s, floor)


def test_the_cycle_engine_times_the_linear_layers_too():
    prefill = make_workload("llama3-8b", "4K", {"batch": BATCH})
    decode = make_workload("llama3-8b", "1", {"batch": BATCH}, phase="decode", context="4K")
    peak, bandwidth, _ = CHIPS["fusemax"]
    for w, floor in (
        (prefill, BATCH * 4096 * PER_TOKEN / peak),
        (decode, max(WEIGHT_VALUES * 2 / bandwidth, BATCH * PER_TOKEN / peak)),
    ):
        r = _linear("fusemax", w, engine="cycle")
        assert r.engine == "cycle"
        limit = 1.25 if w.phase == "prefill" else 2
        assert floor * (1 - 1e-9) <= r.latency_s <= limit * floor, (w.phase, r.latency_s, floor)


def test_the_value_format_changes_a_layers_numbers(run_cli):
    base = ["--scope", "layer", "--model", "llama3-8b", "--seq", "4K", "--batch", "8"]
    base += ["--arch", "h100", "--mapping", "auto:fusemax", "--engine", "analytic"]
    base += ["--format", "json"]
    code, bf16, err = run_cli(run_main, base)
    assert code == 0, err
    for flag in (["--precision", "fp8"], ["--value-bits", "8"]):
        code, fp8, err = run_cli(run_main, [*base, *flag])
        assert code == 0, err
        assert fp8 != bf16
    w = make_workload("llama3-8b", "4K", {"batch": BATCH})
    full, half = _linear("h100", w), _linear("h100", w, precision="fp8")
    assert half.latency_s == pytest.approx(full.latency_s / 2, rel=0.05)  # twice the MAC rate
    assert half.traffic_bytes < full.traffic_bytes


def test_an_encoder_layer_stays_six_gemms():
    r = evaluate_layer(Specs(), "binding", make_workload("bert", "4K"), None, LayerOptions())
    assert [p.name for p in r.linear.phases] == ["Q", "K", "V", "Z", "FFN1", "FFN2"]
    d, s = 768, 3072  # BERT-base: four D x D projections, two D x S FFN GEMMs
    assert r.linear.ops == pytest.approx(64 * 4096 * (4 * d * d + 2 * d * s), rel=1e-12)
