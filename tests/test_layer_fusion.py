"""A layer's rows in one block (issue 42): the attention's span widened by the Einsums around
it that walk its rows, what it needs first made in blocks of its own rows.

The case is the held-out pre-norm RoPE layer (one head per instance), 4.08x its floor when
the norm, projections and residual ran kernel by kernel, each D x P tensor through DRAM:
a design case since. The checks are of structure (which Einsum runs where), of DRAM
traffic against the tensors' own sizes, and of PEs used against the array's.
"""

from __future__ import annotations

import math

from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.core.evaluate import evaluate_mapping
from simulator.mapper.resolve import resolved
from simulator.mapper.space import with_factors
from simulator.spec.arch_file import load_architecture
from simulator.spec.mapping import loads_mapping
from simulator.spec.workload import make_workload
from simulator.strategies.auto import mapping_yaml, template
from simulator.strategies.context import bind_context
from simulator.strategies.layer import ahead_of, layer_spans
from simulator.strategies.roles import einsum_ranks
from simulator.strategies.segments import fusable_spans
from simulator.support.paths import resolve_spec

from .conftest import DATA

LAYER = DATA / "paper_cascades_heldout" / "rope-prenorm-attention-layer-3pass.yaml"
SHAPE = {"D": 4096, "S": 2, "H": 64}
KNOBS = {"scale": 1, "fibres": "fit", "soonest": True, "spread": "columns", "hold": "whole"}


def _point():
    a = load_architecture(resolve_spec("arch", "fusemax"))
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape=SHAPE)
    ctx = bind_context(load_cascade(LAYER), a, w, str(LAYER), "fusemax")
    return a, w, ctx


def _evaluate(ctx, a, w, data, factors):
    spec = loads_mapping(mapping_yaml(data), "<template>", "template")
    m = with_factors(resolved(spec, ctx.cascade, a, w), factors)
    return evaluate_mapping(ctx.cascade, m, a, w)


def test_the_span_takes_the_rows_norm_projections_and_residual_not_the_keys_side():
    _a, _w, ctx = _point()
    c, compute = ctx.cascade, ctx.roles.compute
    (span,) = fusable_spans(c, compute)
    (grown,) = layer_spans(c, compute, [span])
    added = set(grown) - set(span)
    # the queries' norm (the sum of squares over the width), projection and rotation
    # before; the output projection and the residual after (the cascade's output)
    assert {"MSPS", "MSP", "XN", "Q", "QR1", "QR2", "OP", "Y"} == added
    # every Einsum the block takes walks the query rows P; the keys' side walks M alone
    assert all("P" in einsum_ranks(c.einsum(n)) for n in grown)
    ahead = ahead_of(c, compute, [grown], ctx.extents)
    assert set(ahead) == {"MSMS", "MSM", "XNM", "K", "V", "KR1", "KR2"}
    assert not any("P" in einsum_ranks(c.einsum(n)) for n in ahead)


def test_the_layer_reads_each_token_once_and_writes_each_result_once():
    """Before, X was read three times (the norm's statistic, the normalisation, the
    residual), OP and XN written and read back, the keys' normalised tokens twice."""
    a, w, ctx = _point()
    data = template(ctx, "segments", kernels="free", layer=True, ahead="blocks", **KNOBS)
    names = [p["name"] for p in data["mapping"]["phases"]]
    assert names == ["ahead", "fused"], names
    r = _evaluate(ctx, a, w, data, {"M1": 1, "F1": 1, "H1": 1, "P1": 1})
    tokens = r.instances * math.prod(ctx.extents[x] for x in ("D", "P")) * a.value_bytes
    moved = {t.tensor: t for t in r.tensors}
    assert moved["X"].read_bytes == moved["XM"].read_bytes == tokens
    assert moved["Y"].write_bytes == tokens and moved["Y"].read_bytes == 0
    # nothing the layer makes between the tokens and its output crosses DRAM but K, V and
    # the rotated keys (one head's: a 32nd of the tokens each)
    between = {t for t, x in moved.items() if x.write_bytes and t != "Y"}
    assert between <= {"KR1", "KR2", "V"}, between
    assert sum(moved[t].write_bytes for t in between) <= 0.1 * tokens


def test_the_layers_projections_fill_the_array():
    """The queries' projection reduces the 4096-wide width into 128 outputs a token, the
    output projection makes 4096: both fill all 65,536 PEs -- the width's part the norm
    split across the array (the reduction summed down the PEs, or the output's columns) --
    not the 32,768 of the rows and the head's 128 outputs; in the keys' block K and V sum
    their reduction down the PEs too (a head's 128 outputs walked), as FLAT's query
    projection does (was 128 of the side: K's two rotary halves beside its 64 frequencies,
    V's 128 values)."""
    a, w, ctx = _point()
    two = next(x for x in a.arrays if x.mesh_y > 1)
    data = template(ctx, "segments", kernels="free", layer=True, ahead="blocks", **KNOBS)
    r = _evaluate(ctx, a, w, data, {"M1": 1, "F1": 1, "H1": 1, "P1": 1})
    par = {e.einsum: e.parallelism for e in r.einsums}
    assert par["Q"] == par["OP"] == par["Y"] == two.pes
    assert par["K"] == par["V"] == two.pes


def test_a_blocks_contraction_with_narrow_columns_fills_the_side(tmp_path):
    """`K[s, h, m]` over 256 rows m: with 128 columns h its two halves s beside them fill the
    side (was 128 of 256 PEs); with 64, the halves leave half of it idle, and the
    reduction's chunk goes down it instead (its 4096-long sum over d down the PEs, the
    outputs walked)."""
    text = """
name: two-halves
shapes: {M: 8, D: 8, S: 2, H: 4}
einsum:
  declaration:
    X: [D, M]
    W: [D, S, H]
    K: [S, H, M]
    KR: [M]
  expressions:
    - K[s, h, m] = X[d, m] * W[d, s, h]
    - KR[m] = K[0, h, m] * K[1, h, m]
"""
    path = tmp_path / "two-halves.yaml"
    path.write_text(text)
    c = loads_cascade(text, str(path))
    a = load_architecture(resolve_spec("arch", "fusemax"))
    two = next(x for x in a.arrays if x.mesh_y > 1)
    spreads = {}
    for h in (128, 64):
        shape = {"D": 4096, "S": 2, "H": h}
        w = make_workload("llama3-8b", "4K", {"causal": False}, shape=shape)
        ctx = bind_context(c, a, w, str(path), "fusemax")
        data = template(ctx, "fused", rule="blocks", reduction="whole")
        spreads[h] = data["mapping"]["phases"][0]["einsums"]["K"]["spatial"]
        r = _evaluate(ctx, a, w, data, {"M1": 1})
        assert {e.einsum: e.parallelism for e in r.einsums}["K"] == two.pes, h
    assert spreads[128][-1] == "S" and spreads[64] == ["M0", "D0"], spreads


def test_a_span_reducing_only_what_the_layer_walks_joins_the_layers_block():
    """NormFormer's post-attention LayerNorm is a FLAT-shaped span of its own: the output
    projection makes the width, its mean and variance reduce it. Kept apart it took the
    queries' norm (a reduction over the width of the layer's input) from the attention's
    block, and the layer ran kernel by kernel (4.52x). Its reduced rank is the width the
    layer's block already walks: one block now, the keys' norm left for the keys' blocks."""
    path = DATA / "paper_cascades_heldout" / "normformer-attention-sublayer-3pass.yaml"
    a = load_architecture(resolve_spec("arch", "fusemax"))
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape={"D": 4096})
    ctx = bind_context(load_cascade(path), a, w, str(path), "fusemax")
    c, compute = ctx.cascade, ctx.roles.compute
    spans = fusable_spans(c, compute)
    assert len(spans) == 2 and "VOS" in spans[1]  # the post-attention norm's variance
    (grown,) = layer_spans(c, compute, spans)
    assert {"MUPS", "XN", "Q", "OP", "MUOS", "VOS", "Y"} <= set(grown)
    assert all("P" in einsum_ranks(c.einsum(n)) for n in grown)
    assert "MUMS" in ahead_of(c, compute, [grown], ctx.extents)  # the keys' mean


def test_the_keys_blocks_and_a_narrow_block_of_rows_split_the_keys_alike():
    """At 16K the layer's block of 256 rows with its 16K-key fibres and the keys held whole
    does not fit; a block of 128 rows walks the fibre's chunks two side by side (`M -> M1 x
    M10 x M0`) while the keys' blocks split M in three with a searched middle (`M2 x M1 x
    M0`). The keys' blocks take the attention's names (their middle part its width): before,
    the two could not be reconciled and only the 256-row block was offered (1.80x)."""
    a = load_architecture(resolve_spec("arch", "fusemax"))
    path = DATA / "paper_cascades_heldout" / "layerscale-prenorm-attention-layer-3pass.yaml"
    w = make_workload("llama3-8b", "16K", {"causal": False}, shape={"D": 4096})
    ctx = bind_context(load_cascade(path), a, w, str(path), "fusemax")
    knobs = {**KNOBS, "scale": 2, "spread": "fibre"}
    data = template(ctx, "segments", kernels="free", layer=True, ahead="blocks", **knobs)
    body = data["mapping"]
    assert body["partitions"]["M"] == ["M1", "M10", "M0"]
    assert isinstance(body["factors"]["M10"], int)
    ahead = next(p for p in body["phases"] if p["name"] == "ahead")
    loops = ahead["einsums"]["K"]["loops"]
    assert loops.index("M1") < loops.index("M10")  # its blocks of the keys' rows, renamed
    assert "M2" not in repr(ahead)


def test_a_narrow_block_of_rows_fills_its_idle_columns_with_part_of_the_width():
    """At 16K the layer's block is 128 rows (half the columns): the queries' and output
    projections spread their width's part down the side and two chunks of it side by side
    across the idle columns (`D -> D1 x D10 x D0`), all 65,536 PEs (was 32,768), and the
    keys' blocks walk the same three parts -- their `PE1D.meshX` chunk is the same 256 as the
    attention's (before, the names of a tile told them apart and no such template bound)."""
    a = load_architecture(resolve_spec("arch", "fusemax"))
    two = next(x for x in a.arrays if x.mesh_y > 1)
    path = DATA / "paper_cascades_heldout" / "layerscale-prenorm-attention-layer-3pass.yaml"
    w = make_workload("llama3-8b", "16K", {"causal": False}, shape={"D": 4096})
    ctx = bind_context(load_cascade(path), a, w, str(path), "fusemax")
    knobs = {**KNOBS, "scale": 2, "spread": "fibre"}
    data = template(ctx, "segments", kernels="free", layer=True, ahead="blocks", **knobs)
    assert data["mapping"]["partitions"]["D"] == ["D1", "D10", "D0"]
    r = _evaluate(ctx, a, w, data, {"E1": 1, "F1": 1, "P1": 1})
    par = {e.einsum: e.parallelism for e in r.einsums}
    assert par["Q"] == par["OP"] == two.pes, par
