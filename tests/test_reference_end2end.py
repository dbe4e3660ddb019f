"""Issue 6 acceptance: the linear layers against the artifact's end2end-*.csv, and the
end-to-end (attention + linear layers) headline numbers of the paper's figures 10-11."""

from __future__ import annotations

import statistics

import pytest

from simulator.drivers.configs import Specs
from simulator.drivers.endtoend import LayerOptions, evaluate_layer, evaluate_linear
from simulator.run import main as run_main
from simulator.spec.workload import make_workload

from .reference import MODELS, SEQS, rows

POINTS = [(m, s) for m in MODELS for s in SEQS]
# end2end-flat: the linear layers on FLAT's architecture (the unfused baseline's too);
# end2end-proposal: on FuseMax's.
DESIGNS = {"flat": "flat", "proposal": "binding"}


@pytest.fixture(scope="module")
def specs():
    return Specs()


@pytest.mark.parametrize("design", sorted(DESIGNS))
def test_linear_layers_match_the_published_end2end_csv(specs, design):
    # The artifact mapped each GEMM with Timeloop's mapper under its own constraints (whole
    # reduction on chip, output bypassing the buffer, rows outermost in DRAM), which
    # mappings/linear/artifact.yaml states; within them our mapper picks the tiles. Energy
    # uses the published accounting: the artifact priced registers for one PE instance,
    # without leakage, with the tables of its Accelergy run (arch/tables/published/).
    arch = specs.architecture(specs.mapping(DESIGNS[design]))
    reference = {(r["model"], r["seq_len"]): r for r in rows(f"end2end-{design}")}
    worst = {"traffic": 0.0, "latency": 0.0, "energy": 0.0}
    for m, s in POINTS:
        options = LayerOptions("published", "analytic", "artifact")
        r = evaluate_linear(specs, arch, make_workload(m.lower(), s), options)
        ours = {"traffic": r.traffic_bytes, "latency": r.latency_s, "energy": r.energy_pj}
        for column, value in ours.items():
            err = abs(value / float(reference[(m, s)][column]) - 1)
            worst[column] = max(worst[column], err)
    assert max(worst.values()) <= 0.03, worst


def test_free_mapper_never_does_worse_than_the_artifacts_constraints(specs):
    # The default linear-layer spec searches a superset of the artifact's mappings with the
    # same objective, so it can only match or beat it (XLM's FFN weights no longer fit next
    # to the activations: the constrained mapping re-reads them, the free one need not).
    arch = specs.architecture(specs.mapping("binding"))
    for model in ("bert", "xlm"):
        w = make_workload(model, "4K")
        free = evaluate_linear(specs, arch, w, LayerOptions(linear="gemm"))
        constrained = evaluate_linear(specs, arch, w, LayerOptions(linear="artifact"))
        for f, c in zip(free.phases, constrained.phases, strict=True):
            assert f.latency_s <= c.latency_s * (1 + 1e-12)
            assert f.traffic_bytes <= c.traffic_bytes
    assert free.traffic_bytes < constrained.traffic_bytes


@pytest.fixture(scope="module")
def layers(specs):
    # Attention latency from the analytic engine: the published numbers follow its closed
    # form (the cycle engine differs for +Architecture only). Published energy accounting.
    return {
        (c, m, s): evaluate_layer(
            specs, c, make_workload(m.lower(), s), options=LayerOptions("published", "analytic")
        )
        for c in ("unfused", "flat", "binding")
        for m, s in POINTS
    }


def test_end_to_end_headline_numbers(layers):
    def speedup(base, points):
        return statistics.mean(
            layers[(base, m, s)].latency_s / layers[("binding", m, s)].latency_s for m, s in points
        )

    def energy(base):
        return statistics.mean(
            layers[("binding", m, s)].energy_pj / layers[(base, m, s)].energy_pj for m, s in POINTS
        )

    # Linear layers from the default spec (the free mapper). With the artifact-constrained
    # spec the FLAT energy ratio is 0.837 (rounds to 0.84): the attention model's FLAT
    # energies at 64K+ tokens are 2-3% below the published ones (test_reference_energy,
    # arch/tables/README.md); the free mapper's FuseMax linear layers spend ~1.6% less.
    at_1m = [(m, s) for m, s in POINTS if s == "1M"]
    # Paper, figures 10 and 11: 5.3x at 83% energy vs FLAT, 7.6x at 82% vs unfused; at 1M
    # tokens 7.5x vs FLAT and 10.1x vs unfused.
    assert f"{speedup('flat', POINTS):.2g}" == "5.3"
    assert f"{energy('flat'):.2g}" == "0.83"
    assert f"{speedup('unfused', POINTS):.2g}" == "7.6"
    assert f"{energy('unfused'):.2g}" == "0.82"
    assert f"{speedup('flat', at_1m):.2g}" == "7.5"
    assert f"{speedup('unfused', at_1m):.3g}" == "10.1"


def test_layer_parts_add_up(layers):
    r = layers[("binding", "BERT", "64K")]
    assert r.latency_s == pytest.approx(r.attention.latency_s + r.linear_latency_s, rel=1e-12)
    assert r.energy_pj == pytest.approx(r.attention.energy_pj + r.linear_energy_pj, rel=1e-12)
    assert r.traffic_bytes == pytest.approx(
        r.attention.traffic_bytes + r.linear_traffic_bytes, rel=1e-12
    )
    assert r.area_um2 == r.attention.area_um2
    assert [p.name for p in r.linear.phases] == ["Q", "K", "V", "Z", "FFN1", "FFN2"]
    # the same GEMMs run on FLAT's and unfused's chip: the same linear part
    u, f = layers[("unfused", "BERT", "64K")], layers[("flat", "BERT", "64K")]
    assert u.linear_latency_s == f.linear_latency_s and u.linear_energy_pj == f.linear_energy_pj


def test_run_scope_layer(run_cli):
    argv = ["--model", "bert", "--seq", "1K", "--engine", "analytic", "--scope", "layer"]
    code, out, err = run_cli(run_main, argv)
    assert code == 0, err
    lines = out.splitlines()
    assert "one layer" in lines[0]
    for label in ("Unfused", "FLAT", "+Cascade", "+Architecture", "+Binding"):
        assert any(line.startswith(label) for line in lines), label
    binding = next(line for line in lines if line.startswith("+Binding"))
    assert binding.split()[4].endswith("x") and binding.split()[5].endswith("x")
    code, csv_out, _ = run_cli(run_main, argv + ["--format", "csv"])
    assert code == 0
    header = csv_out.splitlines()[0].split(",")
    assert {"latency_s", "linear_latency_s", "speedup_vs_flat", "energy_vs_unfused"} <= set(header)
    again = run_cli(run_main, argv + ["--format", "csv"])[1]
    assert again == csv_out  # deterministic
