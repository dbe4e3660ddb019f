"""Automatic binding: the generated mappings against the hand-written ones, decode against
the memory bound, and cascades that cannot be bound."""

from __future__ import annotations

import pytest

from simulator.bind.__main__ import main as bind_main
from simulator.cascade.parse import load_cascade
from simulator.core.evaluate import evaluate_mapping
from simulator.drivers.configs import EvalOptions, Specs, evaluate
from simulator.mapper.resolve import resolved
from simulator.run import main as run_main
from simulator.spec.arch_file import load_architecture
from simulator.spec.mapping import loads_mapping
from simulator.spec.workload import make_workload
from simulator.strategies.auto import mapping_yaml, template
from simulator.strategies.context import bind_context

from .conftest import DATA, ROOT

MODELS = ("bert", "trxl", "t5", "xlm")
SEQS = ("1K", "4K", "16K", "64K", "256K", "1M")
FIELDS = ("latency_s", "traffic_bytes", "util_2d", "util_1d")


def _close(a, b, rel: float) -> list[str]:
    out = []
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        if abs(y - x) > rel * abs(x):
            out.append(f"{a.model} {a.seq_len} {f}: hand {x:.6g} auto {y:.6g}")
    return out


@pytest.mark.parametrize(
    ("hand", "auto", "arch", "rel"),
    [
        ("binding", "auto:fusemax", None, 0.005),
        ("arch", "auto:fusemax/sequential", None, 0.005),
        ("unfused", "auto:unfused", None, 0.01),
    ],
)
def test_auto_reproduces_the_hand_written_mappings(hand, auto, arch, rel):
    """At the paper's 24 points (analytic engine) the generated mapping gives the numbers
    of the hand-written one."""
    specs, auto_specs = Specs(), Specs(arch_override=arch)
    bad = []
    for model in MODELS:
        for seq in SEQS:
            w = make_workload(model, seq)
            bad += _close(evaluate(specs, hand, w), evaluate(auto_specs, auto, w), rel)
    assert not bad, "\n".join(bad)


def test_auto_fusemax_on_flats_arrays_is_no_slower_than_cascade():
    """+Cascade (the 1-pass cascade on FLAT's chip, hand-written) is a point of the FuseMax
    strategy's space (tests/test_search.py); the search does at least as well everywhere --
    better, where it chains the 1D array's dedicated units within an Einsum as FLAT's own
    softmax does, which +Cascade's file does not."""
    specs, auto_specs = Specs(), Specs(arch_override="flat")
    for model in MODELS:
        for seq in SEQS:
            w = make_workload(model, seq)
            hand = evaluate(specs, "cascade", w).latency_s
            assert evaluate(auto_specs, "auto:fusemax", w).latency_s <= hand * (1 + 1e-12)


@pytest.mark.parametrize("model", ["bert", "xlm"])
@pytest.mark.parametrize("seq", ["1K", "64K", "1M"])
def test_auto_fusemax_reproduces_binding_in_the_cycle_engine(model, seq):
    specs = Specs()
    w = make_workload(model, seq)
    for hand, auto in (("binding", "auto:fusemax"), ("arch", "auto:fusemax/sequential")):
        a = evaluate(specs, hand, w, options=EvalOptions(engine="cycle"))
        b = evaluate(specs, auto, w, options=EvalOptions(engine="cycle"))
        assert not _close(a, b, 0.005)


def test_auto_flat_matches_flat_while_the_fibres_fit():
    """FLAT's published dataflow keeps whole fibres on chip up to 16K tokens: the FLAT
    strategy gives its latency there (within 2%); beyond, it differs (see bind/flat.py)."""
    specs = Specs()
    for model in MODELS:
        for seq in ("1K", "4K", "16K"):
            w = make_workload(model, seq)
            a, b = evaluate(specs, "flat", w), evaluate(specs, "auto:flat", w)
            assert abs(b.latency_s - a.latency_s) <= 0.02 * a.latency_s, (model, seq)


BANDWIDTH = 400 * 2**30  # bytes/s, the shipped designs' DRAM


@pytest.mark.parametrize("engine", ["analytic", "cycle"])
@pytest.mark.parametrize(
    "model, attended",
    [
        # 8 K/V heads of 128 + 128 values per cached token, every cached key attended
        ("llama3-8b", 32768),
        # Mistral's sliding window keeps the last 4096 of the 32K cached keys
        ("mistral-7b", 4096),
    ],
)
def test_decode_by_default_reads_the_models_own_cache(engine, model, attended):
    """One token per request against a 32K cache, batch 64, 16-bit values, each model's own
    attention (no --cascade): K + V = 2 x 64 x 8 x keys x 128 x 2 bytes -- Llama-3-8B 8.59 GB,
    0.0200 s at 400 GiB/s; Mistral-7B an eighth, 0.0025 s. FLAT and FuseMax within 3%.
    Unfused pays its design on top: per K/V head its G = 4 query heads' score and
    probability rows go to DRAM and back (4 G keys values against 2 x 128 keys of K and V:
    +6.25%), within 3% of that."""
    specs = Specs()
    w = make_workload(model, "1", {"batch": 64}, phase="decode", context="32K")
    kv_bytes = 2 * 64 * 8 * attended * 128 * 2
    assert kv_bytes / BANDWIDTH == pytest.approx({32768: 0.0200, 4096: 0.0025}[attended])
    for config in ("auto:fusemax", "auto:flat"):
        r = evaluate(specs, config, w, options=EvalOptions(engine=engine))
        assert kv_bytes / BANDWIDTH <= r.latency_s * (1 + 1e-9)
        assert r.latency_s <= 1.03 * kv_bytes / BANDWIDTH, (config, r.latency_s)
        assert r.util_2d < 0.05
    r = evaluate(specs, "auto:unfused", w, options=EvalOptions(engine=engine))
    scores = 64 * 8 * 4 * 4 * attended * 2  # QK and A written and read, G = 4 rows each
    assert (kv_bytes + scores) / BANDWIDTH <= r.latency_s * (1 + 1e-9)
    assert r.latency_s <= 1.03 * (kv_bytes + scores) / BANDWIDTH
    assert r.traffic_bytes == pytest.approx(kv_bytes + scores, rel=0.01)


def test_decode_with_a_multi_head_cascade_reads_the_cache_per_query_head():
    """Named on purpose, the multi-head cascades read K and V once per query head: 4x."""
    w = make_workload("llama3-8b", "1", {"batch": 64}, phase="decode", context="32K")
    kv_bytes = 2 * 64 * 32 * 32768 * 128 * 2
    for cascade in ("attention-1pass", "attention-causal-1pass"):
        r = evaluate(Specs(cascade_override=cascade), "auto:fusemax", w)
        assert r.latency_s == pytest.approx(kv_bytes / BANDWIDTH, rel=0.02), cascade


def test_bind_cli_writes_an_ordinary_mapping(tmp_path, capsys):
    out = tmp_path / "my.yaml"
    assert bind_main(["attention-1pass", "--strategy", "fusemax", "-o", str(out)]) == 0
    text = out.read_text()
    assert "binding:" in text and "pipeline: {}" in text
    capsys.readouterr()
    args = ["--seq", "64K", "--format", "csv", "--engine", "analytic"]
    assert run_main(["--mapping", str(out), *args]) == 0
    from_file = capsys.readouterr().out.splitlines()[1].split(",")
    assert run_main(["--mapping", "auto", *args]) == 0
    generated = capsys.readouterr().out.splitlines()[1].split(",")
    assert from_file[4:8] == generated[4:8]  # latency, traffic, utilisations


def _cascade(tmp_path, body: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(body)
    return str(path)


ONEPASS = "\n".join(  # without its numpy reference: the edits below change what it computes
    line
    for line in (ROOT / "cascades" / "attention-1pass.yaml").read_text().splitlines()
    if not line.startswith("reference:")
)


def test_an_operation_no_array_supports_is_one_line(tmp_path, capsys):
    bad = ONEPASS.replace(
        "AV[f, p] = RNV[f, M1, p] / RD[M1, p]", "AV[f, p] = log(RNV[f, M1, p] / RD[M1, p])"
    )
    path = _cascade(tmp_path, bad)
    assert bind_main([path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Einsum 'AV'" in err and "log" in err


def test_a_rank_the_workload_does_not_size_is_one_line(tmp_path, capsys):
    bad = ONEPASS.replace("Q: [E, P]", "Q: [E, P, Z]").replace(
        "Q[e, p] * BK[e, m1, m0]", "Q[e, p, z] * BK[e, m1, m0]"
    )
    path = _cascade(tmp_path, bad)
    assert run_main(["--cascade", path, "--mapping", "auto", "--seq", "4K"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Einsum 'QK'" in err and "'Z'" in err


def test_a_strategy_that_does_not_apply_is_one_line(capsys):
    assert bind_main(["attention-3pass", "--strategy", "fusemax"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "one-pass" in err


def test_a_mapping_on_standard_output_names_files_by_absolute_path(tmp_path, capsys, monkeypatch):
    """bind --arch FILE --cascade-file to standard output: the mapping names both files by
    absolute path (it does not know where it will be saved), so it runs from any folder;
    written with -o, by a path relative to its own folder, as before."""
    here = tmp_path / "here"
    here.mkdir()
    (here / "chip.yaml").write_text((ROOT / "arch" / "h100.yaml").read_text())
    (here / "one.yaml").write_text((ROOT / "cascades" / "attention-1pass.yaml").read_text())
    monkeypatch.chdir(here)
    assert bind_main(["one.yaml", "--arch", "chip.yaml", "--rule", "--seq", "1K"]) == 0
    text = capsys.readouterr().out
    assert f"architecture: {here / 'chip.yaml'}" in text
    assert f"cascade: {here / 'one.yaml'}" in text
    saved = tmp_path / "elsewhere" / "m.yaml"
    saved.parent.mkdir()
    saved.write_text(text)
    monkeypatch.chdir(tmp_path)
    assert run_main(["--mapping", str(saved), "--seq", "1K", "--engine", "analytic"]) == 0
    monkeypatch.chdir(here)
    assert bind_main(["one.yaml", "--arch", "chip.yaml", "--rule", "--seq", "1K",
                      "-o", str(saved)]) == 0  # fmt: skip
    assert "architecture: ../here/chip.yaml" in saved.read_text()


def test_a_kernels_per_row_statistic_spreads_its_rows_over_the_1d_pes():
    """LayerNorm kernel by kernel: the square root of each row's variance (`SD[p]`, no
    fibre to walk) takes a row per PE of the 1D array, as a library kernel's threads do, not
    one row at a time; its cycles are its points' work over every PE."""
    w = make_workload("bert", "4K")
    r = evaluate(
        Specs(cascade_override="layernorm"),
        "auto:unfused",
        w,
        options=EvalOptions(engine="analytic"),
    )
    arch = load_architecture(ROOT / "arch" / "fusemax.yaml")
    one = next(a for a in arch.arrays if a.mesh_y == 1)
    sd = next(c for c in r.einsums if c.einsum == "SD")
    assert sd.array == one.name and sd.parallelism == one.pes
    assert sd.cycles == pytest.approx(sd.points * sd.cycles_per_point / one.pes, rel=0.01)


def test_a_kernels_sum_over_its_fibre_runs_on_the_2d_array_where_sooner():
    """Forgetting attention's cumulative log gates (`CK[m] = LF[j : j <= m + J - M]`, a sum
    over the gate tokens j for each key) kernel by kernel with `kernels: free`: the sum takes
    the 2D array, its keys across the columns and j reduced down the rows, as a GEMM's
    reduction is -- on FuseMax's chip 256 times the 1D array's PEs (before: the 1D array,
    the kernels' 0.14 s of the point's 0.36 s). The library's kernels keep it on the 1D
    array."""
    name = "forgetting-attention-3pass"
    path = DATA / "paper_cascades_heldout" / f"{name}.yaml"
    c = load_cascade(path)
    a = load_architecture(ROOT / "arch" / "fusemax.yaml")
    two = next(x for x in a.arrays if x.mesh_y > 1)
    one = next(x for x in a.arrays if x.mesh_y == 1)
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape={"J": 4096})
    ctx = bind_context(c, a, w, str(path), "fusemax")
    arrays = {}
    for kernels in ("library", "free"):
        data = template(ctx, "unfused", kernels=kernels)
        spec = loads_mapping(mapping_yaml(data), "<template>", "template")
        r = evaluate_mapping(c, resolved(spec, c, a, w), a, w)
        arrays[kernels] = {x.einsum: (x.array, x.parallelism) for x in r.einsums}
    assert arrays["library"]["CK"] == (one.name, one.pes)
    assert arrays["free"]["CK"] == arrays["free"]["CQ"] == (two.name, two.pes)
