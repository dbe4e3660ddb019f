"""The mapper's view of a cascade (`simulator.cascade.normal.mapping_view`): an input read
both whole and through a split of one of its ranks is read, where split, as a view of its
own over a rank of its own."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from simulator.cascade.execute import evaluate, random_inputs
from simulator.cascade.gemm import batched_gemm_shape
from simulator.cascade.normal import mapping_view
from simulator.cascade.parse import load_cascade
from simulator.cascade.shapes import resolve_shapes
from simulator.cascade_cli import main as cascade_main
from simulator.core.bounds import dram_bound_values
from simulator.drivers.configs import Specs
from simulator.drivers.configs import evaluate as evaluate_point
from simulator.spec.arch_file import load_architecture
from simulator.spec.workload import make_workload
from simulator.support.paths import resolve_spec

from .conftest import CASCADES, DATA

AGENT = DATA / "paper_cascades" / "agent-attention-3pass.yaml"
FUNNEL = DATA / "paper_cascades_heldout" / "funnel-pool-query-attention-layer-3pass.yaml"
MCA = DATA / "paper_cascades" / "memory-compressed-attention-3pass.yaml"
DDPM = DATA / "paper_cascades_heldout" / "ddpm-groupnorm-attention-block-3pass.yaml"
EVERY = sorted(
    [*CASCADES.glob("*.yaml"), *(DATA / "paper_cascades").glob("*.yaml")]
    + [*(DATA / "paper_cascades_heldout").glob("*.yaml")]
)


def test_an_input_read_whole_and_split_is_read_split_through_a_view_of_its_own():
    """Agent attention pools its agents from segments of the queries (`Q[e, l*S + s]`) and
    reads the queries whole in their scores (`Q[e, p]`): a split is the whole cascade's, so
    every Einsum iterating p iterated the agents' L and the segment's S instead -- the
    scores `S2S[l, p]` one agent per segment, and no mapping could split the rows P its own
    way. In the view the pooling reads QV over a rank PV of its own, sized as P."""
    c = load_cascade(AGENT)
    v = mapping_view(c)
    assert dict(c.partitions) == {"P": ("L", "S")}
    assert dict(v.partitions) == {"PV": ("L", "S")}
    assert v.tied_ranks == (("PV", "P"),) and v.input_views == (("QV", "Q"),)
    assert v.tensor("QV").ranks == ("E", "PV")
    assert [str(a) for e in v.einsums if e.name == "BQ" for a in e.reads()] == ["QV[e, l*S+s]"]
    scores = v.einsum("S2S")
    assert {a.tensor for a in scores.reads()} == {"Q", "A"}


def test_the_view_computes_what_the_cascade_computes():
    c = load_cascade(AGENT)
    v = mapping_view(c)
    shapes = resolve_shapes(c, {})
    inputs = random_inputs(c, shapes, seed=3)
    out = evaluate(c, inputs, shapes)["O"]
    viewed = evaluate(v, {**inputs, "QV": inputs["Q"]}, resolve_shapes(v, {}))["O"]
    # (the view also divides after each scaled sum: the same values to rounding)
    assert np.allclose(viewed, out, rtol=1e-12, atol=0)


def test_the_bound_reads_a_viewed_input_once():
    """QV is Q's data: the traffic bound reads it once, under Q's name."""
    c = load_cascade(AGENT)
    v = mapping_view(c)
    extents = {"M": 4096, "P": 4096, "PV": 4096, "L": 256, "S": 16, "E": 128, "F": 128}
    before = dict(dram_bound_values(c, extents, 1e6))
    after = dict(dram_bound_values(v, extents, 1e6))
    assert "read QV" not in after and after["read Q"] == before["read Q"] == 4096 * 128
    assert sum(after.values()) == pytest.approx(sum(before.values()))


@pytest.mark.parametrize("path", EVERY, ids=lambda p: p.stem)
def test_a_split_no_einsum_iterates_whole_stays_as_written(path):
    """FuseMax's cascades split the keys (`K[e, m1*M0 + m0]`) and iterate only the parts:
    their view keeps the split (agent attention, Funnel's pooled queries and DDPM's
    GroupNorm over channel groups are the cascades here that read an input both ways)."""
    c = load_cascade(path)
    v = mapping_view(c)
    if path in (AGENT, FUNNEL, DDPM):
        assert v.input_views and not set(dict(c.partitions)) & set(dict(v.partitions))
        return
    assert (v.partitions, v.input_views, v.tied_ranks) == (c.partitions, (), ())


def test_a_split_that_does_not_span_its_rank_is_one_line_in_the_cascades_names():
    """The segments (L x S) must make up the queries P: said of P, not of the view's PV."""
    cmd = [sys.executable, "-m", "simulator.run", "--model", "llama3-8b", "--seq", "16K"]
    cmd += ["--no-causal", "--shape", "L=256,S=16", "--cascade", str(AGENT), "--mapping", "auto"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "splits P into L x S" in lines[0] and "P=16384" in lines[0]
    assert "PV" not in lines[0] and "agent-attention-3pass.yaml" in lines[0]


def test_a_split_read_inside_a_contraction_is_a_view_copy_and_a_gemm():
    """Memory-compressed attention's convolution reads the keys through a split of the
    tokens (`KC[e, n] = K[d, n*S + s] * WCK[d, s, e]`): in the view a copy (`BK[d, n, s] =
    K[d, n*S + s]`, as FuseMax's cascades write `BK`) and a GEMM over it, N x (D S) x E."""
    v = mapping_view(load_cascade(MCA))
    copy = v.einsum("BK")
    assert copy.kind == "copy" and [str(a) for a in copy.reads()] == ["K[d, n*S+s]"]
    assert v.tensor("BK").ranks == ("D", "N", "S")
    shape, batch = batched_gemm_shape(v, "KC")
    assert (shape.rows, shape.cols, set(shape.reduction), batch) == (("N",), ("E",), {"D", "S"}, ())
    assert batched_gemm_shape(load_cascade(MCA), "KC") is None  # as written: no GEMM


def test_the_traffic_bound_counts_a_part_of_a_split_rank_as_that_part():
    """A weight over the convolution's taps S (`WCK[d, s, e]`, S a part of M = N x S) holds
    D x S x E values, not D x M x E; nor is the convolution an attention whose keys are
    re-read: the bound is the compulsory traffic (before: 5.4x it)."""
    c = load_cascade(MCA)
    extents = {"M": 3072, "N": 1024, "S": 3, "P": 3072, "D": 128, "C": 128, "E": 128, "F": 128}
    parts = dict(dram_bound_values(c, extents, 8e6))
    assert parts["read WCK"] == 128 * 3 * 128
    compulsory = 4 * 3072 * 128 + 2 * 128 * 3 * 128  # Q, K, V, AV; the two weights
    assert sum(parts.values()) == compulsory


def test_the_passes_of_a_split_input_are_said_in_the_cascades_names(run_cli):
    """Funnel's queries are the tokens pooled in windows (`X[d, p*S + s]`, M = P x S) and
    its keys the tokens whole: its softmax over the keys is 3 passes as written. Before: 1
    (a reduction over `m` whole was no reduction of M's parts), and with that alone 4 (the
    pooled rows P, M's parts, walked after the softmax). The view's names stay inside."""
    code, out, _err = run_cli(cascade_main, ["passes", str(FUNNEL)])
    assert code == 0
    table = out.split("\n\n")[1].splitlines()[2:]  # the per-rank table's rows
    rows = {line.split()[0]: line.split()[1] for line in table}
    assert rows == {"D": "4", "M": "3", "E": "1", "H": "1", "F": "1"}, out
    assert "MV" not in out.split() and "XV" not in out.split()


POOLED = DATA / "paper_cascades_heldout" / "pooled-kv-attention-3pass.yaml"


def _direct(text: str) -> str:
    """The pooled keys and values read straight through the split (`KS[e, n] = K[e, n*S +
    s]`), without the view tensors BK, BV that name its parts."""
    lines = [
        line
        for line in text.splitlines()
        if not line.strip().startswith(("BK:", "BV:", "- BK[", "- BV["))
    ]
    out = "\n".join(lines).replace("BK[e, n, s]", "K[e, n*S + s]")
    return out.replace("BV[f, n, s]", "V[f, n*S + s]") + "\n"


def test_a_split_read_names_its_own_parts_and_maps_as_its_view(tmp_path):
    """`KS[e, n] = K[e, n*S + s]`: S is the rank of the index's own variable, though no
    tensor declares it (before: "undeclared rank 'S'", so a user had to add a view copy).
    Written either way, the same computation gives the same numbers."""
    direct = tmp_path / "pooled-direct.yaml"
    direct.write_text(_direct(POOLED.read_text()))
    assert "BK" not in direct.read_text() and "K[e, n*S + s]" in direct.read_text()
    _same_numbers(POOLED, direct, {"N": 1024, "S": 4})


def _same_numbers(first, second, shape: dict[str, int]) -> None:
    """The two cascade files at 4K on FuseMax's chip: the same latency, DRAM traffic and
    energy."""
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape=shape)
    runs = [
        evaluate_point(Specs(cascade_override=str(p), arch_override="fusemax"), "auto", w)
        for p in (first, second)
    ]
    a, b = ((r.latency_s, r.traffic_bytes, r.energy_pj) for r in runs)
    assert a == pytest.approx(b, rel=1e-9)


def test_only_a_contraction_over_a_compound_operand_has_the_operand_made_first():
    """`(X + P) W` (each side indexes a variable the other does not: a GEMM's rows and
    columns) has its sum made first; a product whose sides index the same variables -- the
    squared deviations Welford's chunk variance sums, `(BX - CVARM) * (BX - CVARM)` -- has
    no GEMM to gain and stays as written (splitting it added two tensors' buffer traffic)."""
    from simulator.cascade.parse import loads_cascade

    text = """
name: two-products
shapes: {D: 8, E: 4, P: 6}
einsum:
  declaration:
    X: [D, P]
    PE: [D, P]
    MU: [P]
    W: [D, E]
    Q: [E, P]
    SQ: [P]
  expressions:
    - Q[e, p] = (X[d, p] + PE[d, p]) * W[d, e]
    - SQ[p] = (X[d, p] - MU[p]) * (X[d, p] - MU[p])
"""
    view = mapping_view(loads_cascade(text, "<two-products>"))
    texts = sorted(e.text for e in view.einsums)
    assert "Q[e, p] = (QA[d, p] * W[d, e])" in texts
    assert "QA[d, p] = (X[d, p] + PE[d, p])" in texts
    assert "SQ[p] = ((X[d, p] - MU[p]) * (X[d, p] - MU[p]))" in texts
    assert len(texts) == 3


def _view_computes_the_same(c, names, seed: int, atol: float = 0.0) -> None:
    """The cascade's view, run on the same random inputs, gives the same `names`."""
    v = mapping_view(c)
    shapes = resolve_shapes(c, {})
    inputs = random_inputs(c, shapes, seed=seed)
    want, got = evaluate(c, inputs, shapes), evaluate(v, inputs, resolve_shapes(v, {}))
    for name in names:
        assert np.allclose(got[name], want[name], rtol=1e-12, atol=atol), name


AFT_FULL = DATA / "paper_cascades_heldout" / "aft-full.yaml"
EXP_OF_A_SUM = """
name: exp-of-a-sum
shapes: {D: 5, M: 7, P: 6}
einsum:
  declaration:
    K: [D, M]
    V: [D, M]
    WB: [M, P]
    S: [M, P]
    EW: [D, M, P]
    NUM: [D, P]
    DEN: [D, P]
    MX: [P]
    SE: [M, P]
    SD: [P]
  expressions:
    - EW[d, m, p] = exp(K[d, m] + WB[m, p])
    - NUM[d, p] = EW[d, m, p] * V[d, m]
    - DEN[d, p] = EW[d, m, p]
    - MX[p] = S[m, p] :: max(m)
    - SE[m, p] = exp(S[m, p] - MX[p])
    - SD[p] = SE[m, p]
"""


def test_an_exponential_of_a_sum_is_two_exponentials_and_its_sums_gemms():
    """AFT-full's `exp(K[d, m] + WB[m, p])` at D x M x P points, read only by sums over m,
    is `exp(K)` over D x M and `exp(WB)` over M x P, and the sums read their product: two
    GEMMs (`exp(K) * V` made first for the numerator). The stable softmax's `exp(S - MX)`,
    whose S indexes every point, stays as written. The view computes the same values."""
    from simulator.cascade.parse import loads_cascade

    c = loads_cascade(EXP_OF_A_SUM, "<exp-of-a-sum>")
    v = mapping_view(c)
    assert "EW" not in {t.name for t in v.tensors}
    exps = {e.output.tensor: v.tensor(e.output.tensor).ranks for e in v.einsums if "exp(" in e.text}
    assert sorted(exps.values()) == [("D", "M"), ("M", "P"), ("M", "P")]
    assert "SE[m, p] = exp((S[m, p] - MX[p]))" in {e.text for e in v.einsums}
    for name in ("NUM", "DEN"):
        assert batched_gemm_shape(v, name) is not None, name
    _view_computes_the_same(c, ("NUM", "DEN", "SD"), seed=8)


def test_an_exponential_of_a_sum_written_as_an_einsum_of_its_own_is_the_same_view():
    """The sum `KW = K + WB` as an Einsum of its own, read only by the exponential, is the
    same computation: the same view, the same latency, traffic and energy."""
    from simulator.cascade.parse import loads_cascade

    apart = EXP_OF_A_SUM.replace("    EW: [D, M, P]\n", "    KW: [D, M, P]\n    EW: [D, M, P]\n")
    apart = apart.replace(
        "    - EW[d, m, p] = exp(K[d, m] + WB[m, p])\n",
        "    - KW[d, m, p] = K[d, m] + WB[m, p]\n    - EW[d, m, p] = exp(KW[d, m, p])\n",
    )
    one = mapping_view(loads_cascade(EXP_OF_A_SUM, "<one>"))
    two = mapping_view(loads_cascade(apart, "<two>"))
    assert sorted(e.text for e in one.einsums) == sorted(e.text for e in two.einsums)


def test_aft_full_maps_as_two_gemms_near_their_floor(tmp_path):
    """AFT-full as its equation writes it: the numerator's and denominator's sums over the
    keys are each D x M x P operations whatever the mapping (the denominator's adds as
    written, its MACs as the GEMM `exp(w) exp(K)`), so the floor is two GEMMs' MACs at the
    chip's MAC rate -- not the one GEMM the MAC count of the written form sees (its
    denominator adds no MAC). Before the view factored the exponential: 9.66x that one
    GEMM at 4K (an exponential at every point, 7 PE cycles each)."""
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape={"D": 4096})
    r = evaluate_point(Specs(cascade_override=str(AFT_FULL), arch_override="fusemax"), "auto", w)
    fields = w.fields()
    instances = int(fields["batch"]) * int(fields["heads"])
    d, m, p = 4096, int(fields["keys"]), int(fields["queries"])
    arch = load_architecture(resolve_spec("arch", "fusemax"))
    macs_per_s = sum(a.pes for a in arch.arrays if a.op("mac")) * arch.frequency_hz
    floor = 2 * d * m * p * instances / macs_per_s
    assert floor <= r.latency_s <= 1.15 * floor, r.latency_s / floor


def test_aft_full_written_another_way_gives_the_same_numbers(tmp_path):
    """AFT-full with the exponent's terms and every product's operands swapped, its sum as
    an Einsum of its own: the same latency, DRAM traffic and energy."""
    text = AFT_FULL.read_text()
    other = text.replace("    EW: [D, M, P]\n", "    KW: [D, M, P]\n    EW: [D, M, P]\n").replace(
        "    - EW[d, m, p] = exp(K[d, m] + WB[m, p])\n",
        "    - KW[d, m, p] = WB[m, p] + K[d, m]\n    - EW[d, m, p] = exp(KW[d, m, p])\n",
    )
    other = other.replace("EW[d, m, p] * V[d, m]", "V[d, m] * EW[d, m, p]")
    other = other.replace("sigmoid(Q[d, p]) * NUM[d, p]", "NUM[d, p] * sigmoid(Q[d, p])")
    assert other.count("KW") == 3 and "V[d, m] * EW" in other and "NUM[d, p] * sigmoid" in other
    path = tmp_path / "aft-full-other.yaml"
    path.write_text(other)
    _same_numbers(AFT_FULL, path, {"D": 4096})


def test_a_contraction_of_a_sum_of_gemms_is_one_contraction_per_product():
    """RoPE's scores over the rotated halves, `QR1 * KR1 + QR2 * KR2` summed over the
    frequencies, are two GEMMs and their sum (the distributive law); as written the
    contraction was no GEMM and no FLAT-shaped span bound it (14.1x the floor at 4K). A
    sum whose term does not vary along the reduced variable (`W[e] * X[e, p] + B[p]`: B
    summed E times) stays as written, as does a sum of element-wise products."""
    from simulator.cascade.parse import loads_cascade

    text = """
name: sums
shapes: {H: 4, M: 5, P: 6, E: 3}
einsum:
  declaration:
    A1: [H, P]
    B1: [H, M]
    A2: [H, P]
    B2: [H, M]
    X: [E, P]
    W: [E]
    B: [P]
    Y: [E, P]
    S: [M, P]
    T: [P]
    U: [P]
  expressions:
    - S[m, p] = A1[h, p] * B1[h, m] + A2[h, p] * B2[h, m]
    - T[p] = W[e] * X[e, p] + B[p]
    - U[p] = X[e, p] * Y[e, p] + Y[e, p] * Y[e, p]
"""
    c = loads_cascade(text, "<sums>")
    v = mapping_view(c)
    texts = {e.text for e in v.einsums}
    assert {"SA[m, p] = (A1[h, p] * B1[h, m])", "SB[m, p] = (A2[h, p] * B2[h, m])"} <= texts
    assert "S[m, p] = (SA[m, p] + SB[m, p])" in texts
    assert len(texts) == 5  # T and U as written
    _view_computes_the_same(c, ("S", "T", "U"), seed=9, atol=1e-12)


def test_a_filtered_contraction_of_a_sum_of_gemms_keeps_its_filter_on_each():
    """Causal RoPE scores, `QR1 * KR1[h, m : m <= p] + QR2 * KR2[h, m : m <= p]`: a filter
    holds over its whole Einsum, so each product's contraction keeps it, and their sum reads
    them under it (the masked points are no points of either). The view computes the same
    values where the filter keeps them."""
    from simulator.cascade.parse import loads_cascade

    text = """
name: causal-sum
shapes: {H: 4, M: 6, P: 6}
einsum:
  declaration:
    A1: [H, P]
    B1: [H, M]
    A2: [H, P]
    B2: [H, M]
    S: [M, P]
    T: [P]
  expressions:
    - "S[m, p] = A1[h, p] * B1[h, m : m <= p] + A2[h, p] * B2[h, m : m <= p]"
    - "T[p] = S[m : m <= p, p]"
"""
    c = loads_cascade(text, "<causal-sum>")
    v = mapping_view(c)
    texts = {e.text for e in v.einsums}
    assert "SA[m, p] = (A1[h, p] * B1[h, m : m <= p])" in texts
    assert "S[m, p] = (SA[m : m <= p, p] + SB[m : m <= p, p])" in texts
    _view_computes_the_same(c, ("T",), seed=10, atol=1e-12)


def test_key_sets_written_in_another_order_price_alike(tmp_path):
    """The Compressive Transformer's compressed memories and memories are the same
    structure (their Einsums tie in the view's order, so the written order stands): written
    the other way round, the same latency, traffic and energy. Before, the energy differed
    by 0.12%: the pricing's view of the second Einsum reading the queries -- a tile the
    first had fetched -- dropped the queries' keep point from its loop nest, and refetched
    its own keys, held whole, once per block of rows."""
    path = DATA / "paper_cascades_heldout" / "compressive-memory-attention-2pass.yaml"
    lines = path.read_text().split("\n")
    at = {
        ln.strip().split("[")[0][2:]: k for k, ln in enumerate(lines) if ln.strip().startswith("- ")
    }
    for a, b in (("SC", "SN"), ("GC", "GN"), ("EC", "EN"), ("DC", "DN"), ("OC", "OM")):
        lines[at[a]], lines[at[b]] = lines[at[b]], lines[at[a]]
    other = tmp_path / "compressive-other-order.yaml"
    other.write_text("\n".join(lines))
    assert other.read_text() != path.read_text()
    _same_numbers(path, other, {"R": 1024, "N": 2048})


def test_mamba2_written_in_another_order_gives_the_same_numbers(tmp_path):
    """Mamba-2's two cumulative sums, each splitting its own tokens down the array (the chain
    template), written the other way round: the same numbers. (The order dependence the
    chain had -- a split seen by the Einsums placed after it -- showed in `make notations`'
    reordered linear-layers-gated, 9% apart in energy.)"""
    path = DATA / "paper_cascades_heldout" / "mamba2-ssd-quadratic.yaml"
    lines = path.read_text().split("\n")
    at = {ln.strip()[2:].lstrip('"').split("[")[0]: k for k, ln in enumerate(lines)}
    lines[at["CP"]], lines[at["CM"]] = lines[at["CM"]], lines[at["CP"]]
    other = tmp_path / "mamba2-other-order.yaml"
    other.write_text("\n".join(lines))
    assert other.read_text() != path.read_text()
    _same_numbers(path, other, {"T": 4096, "S": 4096, "N": 128})
