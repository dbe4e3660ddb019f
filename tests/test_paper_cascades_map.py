"""Cascades as papers write them map near the chip's floor (issue 42).

A cascade written the way a paper writes it (`tests/data/paper_cascades/`: a 3-pass softmax
with its 1/sqrt(d) scale, a 2-pass safe softmax, a SwiGLU FFN) must map, with no
hand-written mapping, within 1.5x of max(MACs / the chip's MAC rate, compulsory bytes /
bandwidth) on FuseMax's chip where a block of rows fits on chip. The floor is worked out
here from the cascade's operation counts and tensor sizes alone, not from the simulator's
own bounds. The rest of the set and longer sequences: `docs/mapper.md`.
"""

from __future__ import annotations

import math

import pytest

from simulator.cascade.ops import count_points, ops_per_point
from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.drivers.configs import Specs, evaluate
from simulator.spec.arch_file import load_architecture
from simulator.spec.workload import make_workload
from simulator.strategies.auto import template
from simulator.strategies.binder_facts import load_facts
from simulator.strategies.context import bind_context, instances_of, workload_extents
from simulator.strategies.flat import fastest_arrays, soonest_arrays
from simulator.strategies.fusemax import arrays_of
from simulator.strategies.roles import in_place
from simulator.strategies.segments import fusable_span, fusable_spans
from simulator.support.errors import SpecError
from simulator.support.paths import resolve_spec

from .conftest import CASCADES, DATA

PAPER = DATA / "paper_cascades"
CASES = {
    "vaswani-attention-3pass": {},
    "safe-softmax-attention-2pass": {},
    "swiglu-ffn": {"D": 4096, "N": 14336, "O": 4096},
    # a whole pre-norm attention layer: its attention fused as a segment, the projections
    # kernel by kernel (before: every kernel alone, the softmax on the 1D array, 6.5x)
    "prenorm-attention-layer-3pass": {"D": 4096, "H": 32},
    # Performer as written: its feature sums on the 2D array (before: on the 1D array, 1.79x)
    "performer-attention": {"R": 256},
}


def _floor_s(path, workload, arch) -> float:
    cascade = load_cascade(path)
    facts = load_facts()
    shapes, extents = workload_extents(cascade, workload, facts)
    fields = workload.fields()
    instances = math.prod(
        int(fields[q]) if q in fields else int(q) for q in instances_of(shapes, facts).values()
    )
    macs = sum(
        ops_per_point(cascade, e).get("mac", 0) * count_points(cascade, e, extents)
        for e in cascade.einsums
        if e.kind == "compute"
    )
    rate = sum(a.pes for a in arch.arrays if a.op("mac")) * arch.frequency_hz
    values = sum(
        math.prod(extents[r] for r in cascade.tensor(t).ranks)
        for t in (*cascade.inputs, *cascade.outputs)
    )
    moved = values * arch.value_bytes / arch.dram.bandwidth_bytes_per_s
    return instances * max(macs / rate, moved)


@pytest.mark.parametrize(
    ("name", "seq"), [*((n, "4K") for n in CASES), ("diff-attention-3pass", "16K")]
)
def test_a_paper_form_maps_within_1_5x_of_the_floor(name, seq):
    """(Differential attention at 16K: two softmaxes' score fibres for a block of rows fill
    FuseMax's 16 MB only when each softmax's steps -- scale, exponentials, division -- are
    computed in place over the scores; before, a block of half the array's rows: 2.33x.)"""
    path = PAPER / f"{name}.yaml"
    w = make_workload("llama3-8b", seq, {"causal": False}, shape=CASES.get(name) or None)
    arch = load_architecture(resolve_spec("arch", "fusemax"))
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto", w)
    floor = _floor_s(path, w, arch)
    assert floor <= r.latency_s <= 1.5 * floor, (name, r.latency_s / floor, r.search.found)


def test_latent_attention_decode_reads_its_latent_cache_once_at_the_bandwidth_floor():
    """DeepSeek-V2's absorbed attention at decode reads its 512-wide latent cache as keys and
    as values. FLAT's block keeps the cache's tile in the PEs while the heads stream by; a
    latent wider than the array's side is split across it (before: one column of PEs ran
    the two 512-wide contractions, and the unfused kernels won at 1.51x)."""
    path = PAPER / "mla-decode-3pass.yaml"
    shape = {"L": 512, "R": 64, "D": 4096}
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape=shape, phase="decode")
    arch = load_architecture(resolve_spec("arch", "fusemax"))
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto", w)
    floor = _floor_s(path, w, arch)
    assert floor <= r.latency_s <= 1.1 * floor, (r.latency_s / floor, r.search.found)


def test_the_span_flat_fuses_is_found_in_the_graph():
    """The span between a contraction making a fibre and the one reducing it, through the
    Einsums normalising it: a layer's attention within it; none in an FFN; attention alone
    is one span (FLAT's own template)."""
    layer = load_cascade(PAPER / "prenorm-attention-layer-3pass.yaml")
    compute = tuple(e.name for e in layer.einsums if e.kind == "compute")
    assert fusable_span(layer, compute) == ("QK", "S", "GM", "SN", "SD", "A", "AV")
    ffn = load_cascade(PAPER / "swiglu-ffn.yaml")
    assert fusable_span(ffn, tuple(e.name for e in ffn.einsums)) is None
    attention = load_cascade(CASCADES / "attention-3pass.yaml")
    names = tuple(e.name for e in attention.einsums)
    assert fusable_span(attention, names) == names


def test_a_softmax_is_computed_in_place_over_its_scores_step_by_step():
    """A softmax as papers write it -- scores, a scale step, exponentials, division -- runs
    each step over the last once its other readers are done with it (the row's maximum
    reads the scaled scores a pass before the exponentials overwrite them): one fibre per
    softmax on chip, not one per step."""
    vaswani = load_cascade(PAPER / "vaswani-attention-3pass.yaml")
    assert in_place(vaswani, {"QK", "S", "SN", "A"}) == {"S": "QK", "SN": "S", "A": "SN"}
    diff = load_cascade(PAPER / "diff-attention-3pass.yaml")
    handed = {"QK1", "QK2", "S1", "S2", "SN1", "SN2", "A1", "A2", "DA"}
    assert len(handed) - len(in_place(diff, handed)) == 2  # one fibre per softmax


def test_a_masked_softmax_is_computed_in_place_where_its_readers_share_the_mask():
    """Under a filter a step writes its result only where the filter holds; in place, the
    rest of the slot still holds the source. Where every reader of the result reads it
    under the same filter (a causal softmax; StreamingLLM's window and sink regions), it
    runs in place all the same; where one reads it whole, it does not."""
    causal = load_cascade(CASCADES / "attention-gqa-causal-3pass.yaml")
    assert in_place(causal, {"QK", "SN", "A"}) == {"SN": "QK", "A": "SN"}
    sink = load_cascade(PAPER / "sink-window-attention-3pass.yaml")
    handed = {"QKS", "QKW", "SS", "SW", "SNS", "SNW", "AS", "AW"}
    assert len(handed) - len(in_place(sink, handed)) == 2  # one fibre per region
    unmasked_reader = loads_cascade(
        "name: t\nshapes: {M: 8, P: 8, E: 4}\neinsum:\n  declaration:\n"
        "    Q: [E, P]\n    K: [E, M]\n    QK: [M, P]\n    SN: [M, P]\n    SD: [P]\n"
        "  expressions:\n    - QK[m, p] = Q[e, p] * K[e, m]\n"
        '    - "SN[m, p] = exp(QK[m : m <= p, p])"\n    - SD[p] = SN[m, p]\n'
    )
    assert in_place(unmasked_reader, {"QK", "SN"}) == {}


@pytest.mark.parametrize("seq", ["4K", "16K"])
def test_streaming_llm_fetches_its_keys_and_values_once_and_holds_its_band_of_scores(seq):
    """StreamingLLM's window (1,024 keys) and 4 sink keys, as written. Every block of rows
    needs only the band of keys its window spans: K and V held whole on chip (`hold:
    whole`) cross DRAM once, and the block's score fibres hold the band's tiles, not every
    key's (at 16K a block's whole fibre is 8 MB of the 16 MB buffer). Before: K and V
    fetched again by every block of 256 rows (5.06x their size at 4K) and the fibres held
    whole, 1.94x / 2.05x of the floor; then 1.61x / 1.62x, the 4 sink keys computed in whole
    tiles of 256 and the 2D array's load reckoned without the filters (every division on
    the 1D array); now 1.31x / 1.31x, the rest the band padded to whole tiles."""
    path = PAPER / "sink-window-attention-3pass.yaml"
    w = make_workload("llama3-8b", seq, {"window": 1024}, shape={"SINK": 4})
    arch = load_architecture(resolve_spec("arch", "fusemax"))
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto", w)
    moved = {t.tensor: t.read_bytes for t in r.tensors}
    # K or V once: the cascade has no group rank, every head its own keys and values
    per_tensor = w.batch * w.heads * w.keys * w.embed * arch.value_bytes
    for t in ("K", "V"):
        assert per_tensor <= moved[t] <= 1.01 * per_tensor, t
    assert _floor_s(path, w, arch) <= r.latency_s <= 1.5 * _floor_s(path, w, arch)


def test_a_region_of_the_fibre_is_computed_in_its_own_tiles():
    """StreamingLLM's sink Einsums keep 4 of the 4096 keys: their tiles walk the chunk's
    keys (only the region's computed) and spread the other ranks down the side -- the
    scores' 128-long reduction, the output's 128 columns (before: a whole tile of 256 keys
    for 4, 96 cycles a block of rows each). The window's Einsums keep whole tiles."""
    path = PAPER / "sink-window-attention-3pass.yaml"
    w = make_workload("llama3-8b", "4K", {"window": 1024}, shape={"SINK": 4})
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto:flat", w)
    by = {c.einsum: c for c in r.einsums}
    for sink, window in (("QKS", "QKW"), ("AVS", "AVW")):
        assert by[sink].points * 128 <= by[window].points  # the region, not whole tiles
        assert by[sink].cycles * 100 <= by[window].cycles
    assert by["QKS"].useful_points / by["QKS"].points > 0.99


def test_flats_strategy_binds_a_layer_as_flat_would_run_it():
    """FLAT fuses a layer's attention and runs its projections as GEMMs: `auto:flat` on a
    whole pre-norm layer binds it so (before: FLAT's rule bound the K projection as the
    scores' GEMM, and every candidate spread more than the array: exit 2)."""
    path = PAPER / "prenorm-attention-layer-3pass.yaml"
    w = make_workload("llama3-8b", "1K", {"causal": False}, shape={"D": 4096, "H": 32})
    r = evaluate(Specs(cascade_override=str(path), arch_override="flat"), "auto:flat", w)
    assert r.search is not None and r.search.found.startswith("segments")
    assert r.latency_s >= r.latency_bound_s > 0


TWO_ATTENTIONS = """\
name: two-attentions
description: self-attention, a projection, cross-attention over other keys
shapes: {M: 64, P: 64, E: 16, F: 16, N: 48}
einsum:
  declaration:
    Q: [E, P]
    K: [E, M]
    V: [F, M]
    WQ2: [F, E]
    K2: [E, N]
    V2: [F, N]
    QK: [M, P]
    GM: [P]
    SN: [M, P]
    SD: [P]
    A: [M, P]
    AV: [F, P]
    Q2: [E, P]
    QK2: [N, P]
    GM2: [P]
    SN2: [N, P]
    SD2: [P]
    A2: [N, P]
    AV2: [F, P]
  expressions:
    - QK[m, p] = Q[e, p] * K[e, m]
    - GM[p] = QK[m, p] :: max(m)
    - SN[m, p] = exp(QK[m, p] - GM[p])
    - SD[p] = SN[m, p]
    - A[m, p] = SN[m, p] / SD[p]
    - AV[f, p] = A[m, p] * V[f, m]
    - Q2[e, p] = AV[f, p] * WQ2[f, e]
    - QK2[n, p] = Q2[e, p] * K2[e, n]
    - GM2[p] = QK2[n, p] :: max(n)
    - SN2[n, p] = exp(QK2[n, p] - GM2[p])
    - SD2[p] = SN2[n, p]
    - A2[n, p] = SN2[n, p] / SD2[p]
    - AV2[f, p] = A2[n, p] * V2[f, n]
"""


def test_a_cascade_with_two_attentions_fuses_each(tmp_path):
    """Self-attention, a projection, then cross-attention over other keys (a decoder
    layer's two): two spans FLAT's shape fuses -- each its own phase of blocks of rows, the
    projection a GEMM between them (`segments`: 1.03x the bound, 21.5 GB), or both in one
    block of rows, each attention's keys a fibre of its own and the projection of the
    block's rows between them (`flat`: at the bound, 13.0 GB of DRAM, the hand-off on chip)
    -- within 1.3x of the latency bound (kernel by kernel: 12x)."""
    path = tmp_path / "two-attentions.yaml"
    path.write_text(TWO_ATTENTIONS, encoding="utf-8")
    cascade = load_cascade(path)
    spans = fusable_spans(cascade, tuple(e.name for e in cascade.einsums))
    assert [s[0] for s in spans] == ["QK", "QK2"] and [s[-1] for s in spans] == ["AV", "AV2"]
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape={"N": 4096})
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto", w)
    assert r.search is not None and r.search.found.startswith(("segments", "flat"))
    assert r.latency_bound_s <= r.latency_s <= 1.3 * r.latency_bound_s


def test_a_chain_holds_what_every_chunk_reads_in_the_buffer():
    """LayerNorm + SwiGLU as one chain over the FFN's hidden units N: the normalised rows
    `XN[d, p]`, made once for a block of rows, are read with every chunk of N. They are held
    in the buffer for the block (counted there), not handed in the PEs' registers, which
    cannot keep 1M values across the chunks (a mapping that does no longer fits); the rows
    the residual reads again at the end spill what does not fit. At its floor: 1.00x (1.11x
    kernel by kernel once the registers were held to their size)."""
    path = PAPER / "layernorm-swiglu-ffn.yaml"
    shape = {"D": 4096, "N": 14336}
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape=shape)
    arch = load_architecture(resolve_spec("arch", "fusemax"))
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto", w)
    assert r.search.found.startswith("chain"), r.search.found
    assert _floor_s(path, w, arch) <= r.latency_s <= 1.02 * _floor_s(path, w, arch)


def _performer_point(name: str, seq: str, shape: dict[str, int]):
    path = PAPER / f"{name}.yaml"
    w = make_workload("llama3-8b", seq, {"causal": False}, shape=shape)
    arch = load_architecture(resolve_spec("arch", "fusemax"))
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto", w)
    return r, _floor_s(path, w, arch)


@pytest.mark.parametrize("seq", ["4K", "16K"])
def test_a_chain_whose_arrays_take_turns_binds_each_einsum_where_it_runs_fastest(seq):
    """Performer as written is one chain over the keys whose arrays hand each other no tile
    through the buffer: they take turns, and the block takes the sum of their work. Bound
    for arrays side by side, its feature sum `KS[r] = FK[r, m]` (R x M adds) went to the 1D
    array's 256 PEs -- twice the 2D array's K'^T V -- and the queries' norms with it:
    1.79x the floor. Each on the array that runs it fastest (`arrays: fastest`, a choice
    the search makes): at the bandwidth floor."""
    r, floor = _performer_point("performer-attention", seq, {"R": 256})
    assert floor <= r.latency_s <= 1.05 * floor, (r.latency_s / floor, r.search.found)
    assert "arrays=fastest" in r.search.found


def test_fastest_and_soonest_arrays_differ_where_the_2d_array_is_busy():
    """The feature sum is 16 cycles on the 2D array and 4,096 on the 1D array: side by side
    with the 2D array's contractions (8,192 cycles) the 1D array finishes it sooner; taking
    turns, the 2D array runs it faster."""
    path = PAPER / "performer-attention.yaml"
    c = load_cascade(path)
    a = load_architecture(resolve_spec("arch", "fusemax"))
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape={"R": 256})
    ctx = bind_context(c, a, w, str(path), "fusemax")
    two, one = arrays_of(a)
    gemms = [n for n in ctx.roles.compute if n in ("WKS", "KV", "WQS", "NUM")]
    assert len(gemms) == 4, ctx.roles.compute
    soonest = soonest_arrays(ctx.cascade, ["KS"], gemms, two, one, ctx.extents)
    assert soonest == {"KS": one.name}
    assert fastest_arrays(ctx.cascade, ["KS"], two, one, ctx.extents) == {"KS": two.name}


KEYS_STATISTIC = """
name: keys-statistic
shapes: {M: 40, E: 8, F: 6, R: 16}
einsum:
  declaration:
    K: [E, M]
    V: [F, M]
    W: [R, E]
    WK: [R, M]
    NK: [M]
    GK: []
    FK: [R, M]
    KV: [R, F]
    KS: [R]
  expressions:
    - WK[r, m] = W[r, e] * K[e, m]
    - NK[m] = K[e, m] * K[e, m]
    - GK = WK[r, m] :: max(r, m)
    - FK[r, m] = exp(WK[r, m] - NK[m] / 2 - GK)
    - KV[r, f] = FK[r, m] * V[f, m]
    - KS[r] = FK[r, m]
"""


def test_a_statistic_over_the_rows_and_the_fibre_is_one_block_of_flats_shape(tmp_path):
    """Performer's keys as its code stabilises them: a maximum over every feature r and key
    m before the features' exponentials, then K'^T V and K'^T 1. FLAT's shape over the keys
    (the features the rows, one block holding all of them, as the maximum needs): before,
    FLAT took the first rank the maximum reduces (the features) as the fibre, found no
    shape, and every Einsum ran alone through DRAM at 12x the floor."""
    path = tmp_path / "keys-statistic.yaml"
    path.write_text(KEYS_STATISTIC)
    a = load_architecture(resolve_spec("arch", "fusemax"))
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape={"R": 256})
    ctx = bind_context(load_cascade(path), a, w, str(path), "fusemax")
    body = template(ctx, "flat")["mapping"]
    assert body["phases"][0]["loops"] == ["R2", "M1", "R1"]
    assert body["factors"]["R1"] == 1  # no block of rows after another: one holds them all
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto", w)
    floor = _floor_s(path, w, a)
    assert floor <= r.latency_s <= 1.5 * floor, (r.latency_s / floor, r.search.found)
    wide = make_workload("llama3-8b", "4K", {"causal": False}, shape={"R": 512})
    with pytest.raises(SpecError, match="more than one block"):
        template(bind_context(load_cascade(path), a, wide, str(path), "fusemax"), "flat")


@pytest.mark.parametrize("seq", ["4K", "16K"])
def test_performer_as_its_code_stabilises_it_maps_within_1_5x_of_the_floor(seq):
    """Stabilised, Performer is two FLAT-shaped spans: the keys' (fibre M, rows R, the
    maximum over both) and the queries' (fibre R, rows P). Before: 5.0x -- the queries'
    span closed at its first contraction (the denominator, without the numerator), the
    keys' opened over the features, and their features crossed DRAM."""
    r, floor = _performer_point("performer-stabilised-attention-2pass", seq, {"R": 256})
    assert floor <= r.latency_s <= 1.5 * floor, (r.latency_s / floor, r.search.found)
    assert r.search.breaches == 0


def test_a_span_takes_what_reads_its_fibre_beside_its_first_closing_contraction():
    """The queries' span of stabilised Performer holds its numerator beside its
    denominator (both contract the features), the division after them, and the queries'
    norm that only it reads; the keys' span, found next, is over the keys (the features
    reach no closing contraction left) with the features' sum beside K'^T V and the keys'
    norm."""
    path = PAPER / "performer-stabilised-attention-2pass.yaml"
    a = load_architecture(resolve_spec("arch", "fusemax"))
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape={"R": 256})
    ctx = bind_context(load_cascade(path), a, w, str(path), "fusemax")
    queries, keys = fusable_spans(ctx.cascade, ctx.roles.compute)
    assert {"NQ", "WQS", "GQ", "FQ", "DEN", "NUM", "Y"} <= set(queries), queries
    assert {"NK", "WKS", "GK", "FK", "KS", "KV"} <= set(keys), keys
    assert not set(queries) & set(keys)


def test_a_tensor_two_spans_place_is_placed_by_each_in_its_own_phases():
    """K'^T V is the keys' span's result, kept for its block of features, and the queries'
    input, held whole for their blocks of rows (`hold: whole`): each span's phase says its
    own placement (before: one placement for both, the keys', and the queries' blocks read
    K'^T V and W again for every block -- 2.1 GB each at 4K)."""
    path = PAPER / "performer-stabilised-attention-2pass.yaml"
    a = load_architecture(resolve_spec("arch", "fusemax"))
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape={"R": 256})
    ctx = bind_context(load_cascade(path), a, w, str(path), "fusemax")
    knobs = {"soonest": True, "spread": "fibre", "kernels": "free", "hold": "whole"}
    phases = template(ctx, "segments", **knobs)["mapping"]["phases"]
    by_loops = {tuple(p["loops"]): p for p in phases}
    keys, queries = by_loops[("R2", "M1", "R1")], by_loops[("P2", "R2", "R1", "P1")]
    assert keys["tensors"]["KV"]["keep"] == "R2"
    assert queries["tensors"]["KV"]["keep"] == "top"


@pytest.mark.parametrize("seq", ["4K", "16K"])
def test_luna_fuses_both_softmaxes_though_they_split_the_packed_tokens_differently(seq):
    """Luna's packed tokens L are the rows of the pack's softmax (`L -> L2 x L1 x L0`) and
    the fibre of the unpack's (`L -> L1 x L0`); one mapping splits a rank one way, so the
    second span's split overrode the first's and every fused candidate named a part that
    was gone: the search took the kernels, 5.0x the floor. The unpack now walks the pack's
    outer parts where it walked its own."""
    path = PAPER / "luna-attention-3pass.yaml"
    shape = {"L": 256, "F2": 128}
    a = load_architecture(resolve_spec("arch", "fusemax"))
    w = make_workload("llama3-8b", seq, {"causal": False}, shape=shape)
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto", w)
    floor = _floor_s(path, w, a)
    assert floor <= r.latency_s <= 1.5 * floor, (r.latency_s / floor, r.search.found)
    body = template(
        bind_context(load_cascade(path), a, w, str(path), "fusemax"),
        "segments",
        soonest=True,
        kernels="free",
    )["mapping"]
    assert body["partitions"]["L"] == ["L2", "L1", "L0"]
    fused = [p for p in body["phases"] if p["name"] == "fused"]
    assert [p["loops"] for p in fused] == [["L2", "M1", "L1"], ["P2", "L2", "L1", "P1"]]


def test_a_bound_over_an_einsum_with_no_useful_work_is_a_number():
    """StreamingLLM's window and sinks on a model without a window: its window is the whole
    sequence, so the sinks' region is empty (every key is in the window) and an Einsum over
    it has no useful work on either array. The compute bound split the flexible Einsums by
    the ratio of their two arrays' times: a division by zero, a traceback for a valid
    command (`run --cascade ... --shape SINK=4 --mapping auto`)."""
    path = PAPER / "sink-window-attention-3pass.yaml"
    w = make_workload("llama3-8b", "4K", shape={"SINK": 4})
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto", w)
    assert 0 < r.latency_bound_s <= r.latency_s


@pytest.mark.parametrize(("seq", "segment"), [("4K", 16), ("16K", 64)])
def test_agent_attention_maps_fused_within_1_5x_of_the_floor(seq, segment):
    """Agent attention's 256 agents are the means of segments of the queries (`Q[e, l*S +
    s]`). The split was the whole cascade's, so every fused template's own split of the
    query rows (`P -> P2 x P1 x P0`) was refused, and only the kernels mapped it: 9.2x, the
    scores of both softmaxes through DRAM. The mapper's view reads the pooled queries as a
    view of their own (tests/test_mapping_view.py), and FLAT's template sizes the segment as
    the workload does (it sized it as the array's 256 rows): the two softmaxes fused as
    spans, the scores on chip; the queries cross DRAM twice (pooled, then scored)."""
    path = PAPER / "agent-attention-3pass.yaml"
    w = make_workload("llama3-8b", seq, {"causal": False}, shape={"L": 256, "S": segment})
    arch = load_architecture(resolve_spec("arch", "fusemax"))
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto", w)
    floor = _floor_s(path, w, arch)
    assert floor <= r.latency_s <= 1.5 * floor, (r.latency_s / floor, r.search.found)
    assert not r.search.found.startswith("unfused") and r.search.breaches == 0


@pytest.mark.parametrize(("seq", "windows"), [("3K", 1024), ("12K", 4096)])
def test_memory_compressed_attention_maps_within_1_5x_of_the_floor(seq, windows):
    """Liu et al.'s keys and values compressed by a strided convolution over the tokens
    (`KC[e, n] = K[d, n*S + s] * WCK[d, s, e]`, S = 3). Before: 36.5x the floor, and 348
    candidates under their own bounds -- the bound counted the taps S of M = N x S as all of
    M (a 50M-value weight for 49K values, a GEMM of 3072 x 393K x 128); the convolution, a
    contraction read through a split, was no GEMM to the kernels (K read 128 times); and
    FLAT's rows came from the first contraction making the fibre, the values' convolution
    (its value width F), not the scores the softmax reads."""
    path = PAPER / "memory-compressed-attention-3pass.yaml"
    shape = {"N": windows, "S": 3, "D": 128, "C": 128}
    w = make_workload("llama3-8b", seq, {"causal": False}, shape=shape)
    arch = load_architecture(resolve_spec("arch", "fusemax"))
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto", w)
    floor = _floor_s(path, w, arch)
    assert floor <= r.latency_s <= 1.5 * floor, (r.latency_s / floor, r.search.found)
    assert r.search.breaches == 0
