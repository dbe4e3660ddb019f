"""LLM attention bound automatically: filtered iteration spaces at tile granularity
(causal, sliding window), K/V reuse across a group's query heads, and the side-by-side
comparison CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.compare import main as compare_main
from simulator.drivers.configs import EvalOptions, Specs, evaluate
from simulator.run import main as run_main
from simulator.spec.workload import make_workload
from simulator.support.errors import SpecError

TILE = 256  # FuseMax's 2D array: P0 = M0 = 256


def _run(cascade: str, workload, engine: str = "analytic", config: str = "auto:fusemax"):
    return evaluate(
        Specs(cascade_override=cascade), config, workload, options=EvalOptions(engine=engine)
    )


def _work_2d(r) -> float:
    return sum(c.cycles for c in r.einsums if c.array == r.array_2d)


def _tiles_computed(n: int, keep) -> float:
    """Share of the (query tile, key tile) grid holding a kept (p, m) point, by brute force
    over every pair of tiles: `keep(p_lo, p_hi, m_lo, m_hi)`."""
    t = np.arange(n // TILE)
    p_lo, m_lo = t[:, None] * TILE, t[None, :] * TILE
    return float(keep(p_lo, p_lo + TILE - 1, m_lo, m_lo + TILE - 1).mean())


@pytest.mark.parametrize("engine", ["analytic", "cycle"])
@pytest.mark.parametrize("seq", ["64K", "256K"])
def test_causal_prefill_costs_about_half(engine, seq):
    """Diagonal tiles count whole: at 64K+ causal FuseMax does 0.50-0.55x the 2D work and
    takes 0.50-0.55x the time of full attention."""
    w = make_workload("bert", seq)
    full = _run("attention-1pass", w, engine)
    causal = _run("attention-causal-1pass", w, engine)
    assert 0.50 <= _work_2d(causal) / _work_2d(full) <= 0.55
    assert 0.50 <= causal.latency_s / full.latency_s <= 0.55
    expected = _tiles_computed(w.seq_len, lambda p_lo, p_hi, m_lo, m_hi: m_lo <= p_hi)
    qk = next(c for c in causal.einsums if c.einsum == "QK")
    assert qk.skipped == pytest.approx(1 - expected, rel=1e-9)
    assert 0.45 < causal.skipped_fraction < 1 - expected  # AV runs whole
    assert causal.energy_pj < 0.6 * full.energy_pj


def test_a_sliding_window_computes_its_band():
    """Mistral's window (4096 keys): the tiles computed are those meeting the band
    p - W < m <= p, counted by brute force over the tile grid."""
    w = make_workload("mistral-7b", "64K")
    r = _run("attention-window-1pass", w)
    band = _tiles_computed(
        w.seq_len,
        lambda p_lo, p_hi, m_lo, m_hi: (m_lo <= p_hi) & (p_lo - m_hi < w.window),
    )
    qk = next(c for c in r.einsums if c.einsum == "QK")
    assert qk.skipped == pytest.approx(1 - band, rel=1e-9)
    full = _run("attention-1pass", w)
    assert r.latency_s < 2 * band * full.latency_s


def test_causal_skips_key_and_value_fetches():
    """K and V tiles above the diagonal are never fetched: with several blocks of query
    rows (P2 > 1) their traffic falls too."""
    w = make_workload("bert", "256K")
    full = _run("attention-1pass", w)
    causal = _run("attention-causal-1pass", w)
    kv = {t.tensor: t.read_bytes for t in full.tensors}
    kv_causal = {t.tensor: t.read_bytes for t in causal.tensors}
    p2 = dict(causal.factors)["P2"]
    assert p2 > 1
    for t in ("K", "V"):
        # block b of P2 needs the first (b + 1) / P2 of the keys
        assert kv_causal[t] == pytest.approx(kv[t] * (p2 + 1) / (2 * p2), rel=1e-3)


def test_grouped_query_attention_reads_k_and_v_once_per_group():
    """Llama-3-8B: 4 query heads per K/V head. Kept for its group (one block of rows, P2 =
    1 at 4K), each K/V tile serves 4 heads: K and V traffic is a quarter of multi-head
    attention's with the same 32 query heads; the mapping without that reuse reads as
    much as multi-head attention."""
    w = make_workload("llama3-8b", "4K")
    mha = _run("attention-1pass", w)
    gqa = _run("attention-gqa-1pass", w)
    no_reuse = _run("attention-gqa-1pass", w, config="auto:fusemax/no-reuse")
    assert w.group == 4 and dict(gqa.factors)["P2"] == 1

    def reads(r, t):
        return next(x.read_bytes for x in r.tensors if x.tensor == t)

    for t in ("K", "V"):
        assert reads(gqa, t) * w.group == reads(mha, t)
        assert reads(no_reuse, t) == reads(mha, t)
    assert gqa.latency_s == pytest.approx(mha.latency_s, rel=1e-9)  # same work


@pytest.mark.parametrize("engine", ["analytic", "cycle"])
def test_grouped_query_decode_reads_the_cache_once(engine):
    """Decode with the K/V cache shared by each group: (K + V bytes of the KV heads) / DRAM
    bandwidth within 2%, FuseMax on its arrays and FLAT on its own."""
    w = make_workload("llama3-8b", "1", phase="decode", context="32K")
    kv_bytes = w.batch * w.kv * w.keys * (w.embed + w.value_embed) * 2
    bound = kv_bytes / (400 * 2**30)
    for cascade, config in (
        ("attention-decode", "auto:fusemax"),
        ("attention-gqa-3pass", "auto:flat"),
    ):
        r = _run(cascade, w, engine, config)
        assert bound <= r.latency_s <= 1.02 * bound, (config, r.latency_s / bound)
        assert r.util_2d < 0.05


def test_compare_cli(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = [
        "--cascades",
        "attention-1pass,attention-causal-1pass,attention-3pass",
        "--model",
        "llama3-8b",
        "--seq",
        "16K",
        "--engine",
        "analytic",
        "--format",
        "json",
        "--out",
        str(out),
    ]
    assert compare_main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    by = {(r["cascade"], r["strategy"]): r for r in rows}
    assert by[("attention-1pass", "fusemax")]["passes"] == 1
    assert by[("attention-3pass", "flat")]["passes"] == 3
    assert by[("attention-3pass", "fusemax")]["not_applicable"].startswith("cannot bind")
    assert by[("attention-causal-1pass", "fusemax")]["skipped_fraction"] > 0.4
    assert (
        by[("attention-1pass", "fusemax")]["latency_s"]
        < by[("attention-3pass", "flat")]["latency_s"]
    )
    for suffix in (".png", ".pdf"):
        assert (tmp_path / f"cmp{suffix}").stat().st_size > 1000


def test_compare_cli_errors_are_one_line(capsys):
    assert compare_main(["--cascades", "nonexistent"]) == 2
    assert compare_main(["--cascades", "attention-1pass", "--strategies", "magic"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "magic" in err


def test_unfused_gemms_share_a_kv_tile_among_the_group():
    """The unfused strategy maps grouped-query attention's QK and AV as GEMMs whose rows are
    the G query heads x P queries: K and V are read a factor G less often than by multi-head
    attention with the same query heads (same GEMM work), and one KV head's tiles serve
    its whole group."""
    w = make_workload("llama3-8b", "4K")
    mha = _run("attention-3pass", w, config="auto:unfused")
    gqa = _run("attention-gqa-3pass", w, config="auto:unfused")
    assert w.group == 4

    def reads(r, t):
        return next(x.read_bytes for x in r.tensors if x.tensor == t)

    for t in ("K", "V"):
        assert reads(gqa, t) * w.group == pytest.approx(reads(mha, t), rel=1e-12)
    qk = {r: next(c for c in r.einsums if c.einsum == "QK") for r in (mha, gqa)}
    assert qk[gqa].points * gqa.instances == qk[mha].points * mha.instances


@pytest.mark.parametrize("engine", ["analytic", "cycle"])
def test_unfused_grouped_decode_reads_each_kv_head_once(engine):
    """Decode on the unfused strategy with grouped K/V: at least (K + V bytes of the KV
    heads) / bandwidth, and above it by what its design adds -- the G x M scores and
    probabilities written and read back (4 G M values against 2 x 128 M of K and V, 6.25%)
    and a softmax phase between the GEMMs: within 10%, a quarter of multi-head's time."""
    w = make_workload("llama3-8b", "1", {"batch": 64}, phase="decode", context="32K")
    bound = w.batch * w.kv * w.keys * (w.embed + w.value_embed) * 2 / (400 * 2**30)
    gqa = _run("attention-gqa-3pass", w, engine, "auto:unfused")
    mha = _run("attention-3pass", w, engine, "auto:unfused")
    intermediates = 4 * w.group / (w.embed + w.value_embed)
    assert bound * (1 + intermediates) <= gqa.latency_s * (1 + 1e-9)
    assert gqa.latency_s <= 1.10 * bound, gqa.latency_s / bound
    assert gqa.latency_s < 0.3 * mha.latency_s
    assert gqa.util_2d < 0.05


def test_unfused_binds_one_pass_cascades_and_refuses_grouped_heads_without_reuse(capsys):
    """The unfused strategy binds any cascade: a 1-pass cascade's GEMMs (QK, and SLNV: one
    GEMM per chunk) are mapped phases, the Einsums between them streamed phases, all through
    DRAM -- more traffic than the 3-pass unfused baseline, never less than its bound.
    Grouped heads without K/V reuse stay refused (its GEMMs share K/V by construction)."""
    w = make_workload("llama3-8b", "4K")
    one = _run("attention-1pass", w, config="auto:unfused")
    three = _run("attention-3pass", w, config="auto:unfused")
    assert one.traffic_bytes > three.traffic_bytes
    assert {p.name for p in one.phases} >= {"QK", "SLNV"}
    with pytest.raises(SpecError, match="without reuse"):
        _run("attention-gqa-3pass", w, config="auto:unfused/no-reuse")
    args = ["--cascade", "attention-decode", "--mapping", "auto:unfused", "--model", "llama3-8b"]
    assert run_main([*args, "--phase", "decode", "--context", "32K", "--engine", "analytic"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize(
    ("cascade", "fields"),
    [
        ("attention-gqa-causal-3pass", {}),
        ("attention-gqa-window-3pass", {"window": 1024}),
    ],
)
def test_unfused_kernels_write_whole_what_a_library_gemm_reads_whole(cascade, fields):
    """The unfused strategy's AV is a library GEMM: it reads the probabilities A whole,
    masked or not (issue 44). The softmax kernel writing A through DRAM must then write the
    masked part too -- the zeros AV reads -- not only its kept tiles: A is written as many
    bytes as AV reads of it (before: about half under the causal mask at 4K -- a GEMM
    reading values nothing wrote)."""
    w = make_workload("llama3-8b", "4K", fields)
    r = _run(cascade, w, config="auto:unfused")
    a = next(x for x in r.tensors if x.tensor == "A")
    full = w.batch * w.heads * w.seq_len * w.seq_len * 2  # bytes of BF16 probabilities
    assert a.read_bytes == pytest.approx(full) and a.write_bytes == pytest.approx(full)
