"""The mapper (simulator/mapper/): at least as good as the hand-written mappings and the
rules it replaces, as a peer mapper, monotone in the hardware, deterministic, cached, and
its answer a mapping file that runs again."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.bind.__main__ import main as bind_main
from simulator.cascade.parse import load_cascade
from simulator.core.evaluate import evaluate_mapping
from simulator.drivers.configs import Specs, evaluate
from simulator.mapper.resolve import resolved
from simulator.mapper.search import SearchOptions, search
from simulator.mapper.space import spread_order, with_factors
from simulator.run import main as run_main
from simulator.spec.arch_file import load_architecture
from simulator.spec.mapping import loads_mapping
from simulator.spec.workload import make_workload
from simulator.strategies.auto import bind, mapping_yaml, template
from simulator.strategies.context import bind_context
from simulator.support.paths import resolve_spec

from .conftest import CASCADES, DATA

MODELS = ("bert", "trxl", "t5", "xlm")
SEQS = ("1K", "4K", "16K", "64K", "256K", "1M")
SLACK = 0.005  # the acceptance's 0.5%


def _rule(specs: Specs, strategy: str, workload, arch: str, cascade: str):
    """The strategy's rule as it was before the mapper (its tile factors searched for the
    least traffic that fits), evaluated."""
    c = load_cascade(resolve_spec("cascades", cascade))
    a = load_architecture(resolve_spec("arch", arch))
    data = bind(bind_context(c, a, workload, cascade, arch), strategy)
    spec = loads_mapping(mapping_yaml(data), f"<{strategy} rule>", f"rule-{strategy}")
    return evaluate_mapping(c, resolved(spec, c, a, workload), a, workload)


@pytest.mark.parametrize("model", MODELS)
def test_the_mapper_is_at_least_as_fast_as_the_hand_written_and_the_rules(model):
    """At the paper's points: the FuseMax strategy's search at least as fast as +Binding's
    file, the FLAT strategy's at least as fast as FLAT's rule, the unconstrained search as
    fast as both (within 0.5%)."""
    specs = Specs()
    bad = []
    for seq in SEQS:
        w = make_workload(model, seq)
        binding = evaluate(specs, "binding", w).latency_s
        fusemax = evaluate(specs, "auto:fusemax", w).latency_s
        rule = _rule(specs, "flat", w, "flat", "attention-3pass").latency_s
        flat = evaluate(specs, "auto:flat", w).latency_s
        fused = evaluate(specs, "auto", w).latency_s
        if fusemax > binding * (1 + SLACK):
            bad.append(f"{seq}: auto:fusemax {fusemax:.6g} s > +Binding {binding:.6g} s")
        if flat > rule * (1 + SLACK):
            bad.append(f"{seq}: auto:flat {flat:.6g} s > FLAT's rule {rule:.6g} s")
        if fused > min(binding, rule) * (1 + SLACK):
            bad.append(f"{seq}: auto {fused:.6g} s > min(+Binding, FLAT's rule)")
    assert not bad, "\n".join(bad)


def _peer(n: int, objective: str) -> dict:
    path = DATA / "accelforge" / f"af_matmul_chain_N{n}_{objective}_fuse.json"
    return json.loads(path.read_text())["mappings"][0]


@pytest.mark.parametrize("n", [1024, 16384])
def test_the_search_matches_or_beats_the_peer_mapper_on_the_chain(n):
    """AccelForge's fused mappings of `QK = Q K; AV = QK V` on FuseMax's chip (its runs'
    json): the search's DRAM traffic and latency at most its best of either objective. Both
    charge no reduction network: FuseMax's PEs reduce down the columns in the array."""
    w = make_workload("bert", n, {"batch": 1, "heads": 1}, shape={"M": n, "P": n})
    specs = Specs(cascade_override=str(DATA / "accelforge" / "matmul-chain.cascade.yaml"))
    r = evaluate(specs, "auto", w)
    energy, latency = _peer(n, "ENERGY"), _peer(n, "LATENCY")
    assert r.traffic_bytes <= min(energy["dram_bytes"], latency["dram_bytes"])
    assert r.latency_s <= min(energy["latency_s"], latency["latency_s"]) * (1 + 1e-9)


def _search(cascade: str, arch, workload, **options):
    c = load_cascade(resolve_spec("cascades", cascade))
    ctx = bind_context(c, arch, workload, cascade, arch.name)
    return search(ctx, SearchOptions(**options), "auto-test")


def _best_latency(cascade: str, arch, workload) -> float:
    found = _search(cascade, arch, workload)
    c = load_cascade(resolve_spec("cascades", cascade))
    return evaluate_mapping(c, resolved(found.spec, c, arch, workload), arch, workload).latency_s


CASES = ("attention-1pass", "attention-3pass", "sigmoid-attention", "linear-attention")


@settings(
    max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    cascade=st.sampled_from(CASES),
    arch=st.sampled_from(("fusemax", "flat")),
    seq=st.sampled_from((1024, 2048, 4096, 8192)),
    heads=st.sampled_from((1, 2, 4)),
    grow=st.sampled_from(("pe_dim", "buffer", "bandwidth")),
    pe_dim=st.sampled_from((32, 64, 128, 256)),
    buffer_mb=st.sampled_from((1, 2, 4, 8, 16)),
)
def test_more_hardware_never_gives_a_slower_best_mapping(
    cascade, arch, seq, heads, grow, pe_dim, buffer_mb
):
    """Doubling the PE array, the buffer or the bandwidth never makes the best mapping
    slower (0.5%)."""
    w = make_workload("bert", seq, {"batch": 1, "heads": heads})
    base = load_architecture(resolve_spec("arch", arch))
    small = base.with_overrides(pe_dim, buffer_mb * 2**20)
    big = {
        "pe_dim": base.with_overrides(2 * pe_dim, buffer_mb * 2**20),
        "buffer": base.with_overrides(pe_dim, 2 * buffer_mb * 2**20),
        "bandwidth": base.with_overrides(
            pe_dim, buffer_mb * 2**20, 2 * base.dram.bandwidth_bytes_per_s
        ),
    }[grow]
    before, after = _best_latency(cascade, small, w), _best_latency(cascade, big, w)
    assert after <= before * (1 + SLACK), (cascade, arch, grow, before, after)


@pytest.mark.parametrize("cores", [33, 66])
def test_more_cores_never_give_a_slower_best_mapping(cores):
    w = make_workload("llama3-8b", "4K", {"batch": 2})
    base = load_architecture(resolve_spec("arch", "h100"))
    few = dataclasses.replace(base, cores=cores)
    more = dataclasses.replace(base, cores=2 * cores)
    before = _best_latency("attention-gqa-1pass", few, w)
    after = _best_latency("attention-gqa-1pass", more, w)
    assert after <= before * (1 + SLACK)


@pytest.mark.parametrize("cores", [8, 66])
def test_more_cores_never_slow_a_split_reduction(cores):
    """Linear attention's key-value summary split over the cores (the chain template's
    `keys: split`): 16 instances of 16K keys on 8 / 16 SMs and 66 / 132."""
    w = make_workload("bert", "16K", {"batch": 16, "heads": 1}, shape={"E": 64, "F": 64})
    base = load_architecture(resolve_spec("arch", "h100"))
    few = dataclasses.replace(base, cores=cores)
    more = dataclasses.replace(base, cores=2 * cores)
    before = _best_latency("linear-attention", few, w)
    after = _best_latency("linear-attention", more, w)
    assert after <= before * (1 + SLACK), (before, after)


def test_the_search_is_deterministic_and_cached(monkeypatch, tmp_path):
    """The same inputs give the same mapping; a second search is read from the cache and
    gives the same mapping and statistics (but the time)."""
    monkeypatch.setenv("FUSEMAX_SIM_CACHE", str(tmp_path))
    w = make_workload("llama3-8b", "4K")
    arch = load_architecture(resolve_spec("arch", "fusemax"))
    first = _search("attention-gqa-1pass", arch, w)
    again = _search("attention-gqa-1pass", arch, w)
    assert not first.stats.cached and again.stats.cached
    assert mapping_yaml(first.data) == mapping_yaml(again.data)
    assert dataclasses.replace(again.stats, cached=False, seconds=first.stats.seconds) == (
        first.stats
    )
    monkeypatch.setenv("FUSEMAX_SIM_CACHE", "off")
    fresh = _search("attention-gqa-1pass", arch, w)
    assert mapping_yaml(fresh.data) == mapping_yaml(first.data) and not fresh.stats.cached


def test_the_cache_keeps_a_search_by_the_cascade_not_its_file(monkeypatch, tmp_path):
    """The same cascade read from another file, at other lines, is the same search: read
    from the cache, its mapping naming the file it was asked for."""
    monkeypatch.setenv("FUSEMAX_SIM_CACHE", str(tmp_path / "cache"))
    w = make_workload("llama3-8b", "4K")
    arch = load_architecture(resolve_spec("arch", "fusemax"))
    shipped = resolve_spec("cascades", "attention-gqa-1pass")
    copy = tmp_path / "copy.yaml"
    copy.write_text("# a copy\n\n" + shipped.read_text(encoding="utf-8"), encoding="utf-8")
    first = _search("attention-gqa-1pass", arch, w)
    c = load_cascade(copy)
    again = search(bind_context(c, arch, w, str(copy), arch.name), SearchOptions(), "auto-test")
    assert not first.stats.cached and again.stats.cached
    assert again.data["mapping"]["cascade"] == str(copy)
    assert dict(again.data["mapping"], cascade="") == dict(first.data["mapping"], cascade="")


def test_einsums_under_disjoint_filters_fetch_the_union_of_their_tiles():
    """StreamingLLM's attention reads K and V under two disjoint filters (the window, and the
    sinks that left it), in one copy: every key is fetched, so no candidate comes out under
    the compulsory traffic (before: the copy fetched the sinks' few tiles only, and the
    search set aside every candidate that shared it as below its bound)."""
    path = DATA / "paper_cascades" / "sink-window-attention-3pass.yaml"
    w = make_workload("llama3-8b", "1K", {"window": 256}, shape={"SINK": 4})
    r = evaluate(Specs(cascade_override=str(path), arch_override="fusemax"), "auto", w)
    assert r.search is not None and r.search.breaches == 0
    one = 1024 * 128 * 2 * w.batch * w.heads  # one [M, E] tensor per head, 2-byte values
    reads = {t.tensor: t.read_bytes + t.spill_bytes for t in r.tensors}
    assert reads["K"] >= one and reads["V"] >= one


def test_each_objective_wins_on_its_own_measure():
    """The energy objective's mapping uses no more energy than the latency objective's, the
    traffic objective's moves no more data."""
    w = make_workload("bert", "16K")
    by = {}
    for objective in ("latency", "energy", "traffic", "edp"):
        specs = Specs(objective=objective)
        by[objective] = evaluate(specs, "auto", w)
        assert by[objective].search.objective == objective
    assert by["energy"].energy_pj <= by["latency"].energy_pj * (1 + 1e-9)
    assert by["traffic"].traffic_bytes <= by["latency"].traffic_bytes
    assert by["latency"].latency_s <= min(r.latency_s for r in by.values()) * (1 + 1e-9)
    edp = {k: r.energy_pj * r.latency_s for k, r in by.items()}
    assert edp["edp"] <= min(edp.values()) * (1 + 1e-9)


def test_bind_writes_the_mapping_found_and_it_runs_again(tmp_path, run_cli):
    """`simulator.bind` writes what the search found; run as a file, it gives the search's
    numbers exactly."""
    out = tmp_path / "found.yaml"
    code, _out, err = run_cli(
        bind_main,
        ["attention-gqa-causal-1pass", "--model", "llama3-8b", "--seq", "4K", "-o", str(out)],
    )
    assert code == 0, err
    text = out.read_text()
    assert "search" not in text.split("factors:")[1].split("\n")[0]  # tile factors concrete
    assert "candidates evaluated" in text
    w = make_workload("llama3-8b", "4K")
    from_file = evaluate(Specs(), str(out), w)
    searched = evaluate(Specs(cascade_override="attention-gqa-causal-1pass"), "auto", w)
    assert from_file.latency_s == searched.latency_s
    assert from_file.traffic_bytes == searched.traffic_bytes


def test_search_statistics_in_the_json_and_the_table(run_cli):
    code, out, err = run_cli(
        run_main, ["--seq", "4K", "--mapping", "auto", "--engine", "analytic", "--format", "json"]
    )
    assert code == 0, err
    (rec,) = json.loads(out)
    s = rec["search"]
    assert s["strategy"] == "fused" and s["objective"] == "latency"
    assert 0 < s["evaluated"] <= s["space"] and s["evaluated"] + s["pruned"] == s["space"]
    assert s["latency_bound_s"] <= rec["latency_s"]
    assert s["distance_to_bound"] == pytest.approx(rec["latency_s"] / s["latency_bound_s"] - 1)
    code, out, _ = run_cli(run_main, ["--seq", "4K", "--mapping", "auto", "--engine", "analytic"])
    assert code == 0 and "the mapper (fused strategy, latency) found" in out
    code, out, _ = run_cli(run_main, ["--seq", "4K", "--engine", "analytic", "--format", "csv"])
    assert code == 0 and "search" not in out.splitlines()[0]  # CSV: deterministic columns


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--mapping", "auto", "--objective", "speed"], "--objective"),
        (["--mapping", "auto", "--search-s", "0"], "--search-s"),
        (["--mapping", "auto", "--search-s", "banana"], "--search-s"),
    ],
)
def test_bad_search_options_are_one_line(argv, says, run_cli):
    code, out, err = run_cli(run_main, ["--seq", "1K", *argv])
    assert code == 2 and out == ""
    assert says in err and len(err.strip().splitlines()) == 1


def _point(rule: str, arch: str, workload, values: dict[str, int], **knobs):
    """One point of the space: a template with its knobs and tile factors, evaluated."""
    name = "attention-3pass" if rule == "unfused" else "attention-1pass"
    c = load_cascade(resolve_spec("cascades", name))
    a = load_architecture(resolve_spec("arch", arch))
    data = template(bind_context(c, a, workload, name, arch), rule, **knobs)
    spec = loads_mapping(mapping_yaml(data), "<template>", "template")
    return evaluate_mapping(c, with_factors(resolved(spec, c, a, workload), values), a, workload)


@pytest.mark.parametrize(
    "hand, rule, arch, knobs",
    [
        ("binding", "fusemax", "fusemax", {}),
        ("arch", "fusemax", "fusemax", {"pipelined": False}),
        ("cascade", "fusemax", "flat", {}),
        ("unfused", "unfused", "flat", {}),
    ],
)
def test_hand_written_mappings_are_points_of_the_space(hand, rule, arch, knobs):
    """+Binding, +Architecture and +Cascade are the FuseMax template with its knobs at the
    file's choices (pipelined or not; on FLAT's chip) and the file's tile factor, Unfused
    the unfused template: the same numbers, and the search at least as fast."""
    specs = Specs()
    for seq in ("1K", "64K", "1M"):
        w = make_workload("xlm", seq)
        a = evaluate(specs, hand, w)
        values = {"P1": dict(a.factors)["P1"]} if rule == "fusemax" else {}
        b = _point(rule, arch, w, values, **knobs)
        assert (b.latency_s, b.traffic_bytes, b.util_2d) == (
            a.latency_s,
            a.traffic_bytes,
            a.util_2d,
        ), (hand, seq)
        config = "auto:fusemax/sequential" if knobs else f"auto:{rule}"
        found = evaluate(Specs(arch_override=arch), config, w)
        assert found.latency_s <= a.latency_s * (1 + 1e-12), (hand, seq)


NEW = (
    "sigmoid-attention",
    "linear-attention",
    "softmax",
    "rmsnorm",
    "rmsnorm-matmul",
    "gelu-mlp",
    "attention-bias-softcap-1pass",
)
SIZES = {"E": 4096, "F": 14336, "O": 4096}


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("arch", ["fusemax", "flat"])
def test_new_cascades_bind_near_their_bound(name, arch):
    """Each binds under the unconstrained search within 1.5x of its latency bound, and under
    the traffic objective moves no more DRAM data than kernel by kernel on the same chip."""
    shape = SIZES if "attention" not in name else None
    w = make_workload("llama3-8b", "4K", {"batch": 8}, shape=shape)
    path = str(CASCADES / f"{name}.yaml")
    fused = evaluate(Specs(cascade_override=path, arch_override=arch), "auto", w)
    assert fused.latency_s <= 1.5 * fused.latency_bound_s, (name, arch, fused.search.found)
    unfused = evaluate(Specs(cascade_override=path, arch_override=arch), "auto:unfused", w)
    least = evaluate(
        Specs(cascade_override=path, arch_override=arch, objective="traffic"), "auto", w
    )
    assert least.traffic_bytes <= unfused.traffic_bytes


@pytest.mark.parametrize("causal", [False, True])
def test_the_flashattention_mappings_are_points_of_the_space(causal):
    """`mappings/h100/flash*.yaml` (written by hand from FlashAttention-3) is the FuseMax
    template with the lanes filling the 1D array, tiles handed in registers (two stages),
    the query heads outermost (one head's block of rows per SM, as FlashAttention's grid:
    `reuse=False`) and P1 = 8: the same numbers."""
    w = make_workload(
        "custom", "8K", {"batch": 8, "heads": 32, "kv_heads": 8, "embed": 128, "causal": causal}
    )
    name = "attention-gqa-causal-1pass" if causal else "attention-gqa-1pass"
    hand = evaluate(Specs(), "h100/flash-causal" if causal else "h100/flash", w)
    c = load_cascade(resolve_spec("cascades", name))
    a = load_architecture(resolve_spec("arch", "h100"))
    data = template(
        bind_context(c, a, w, name, "h100"),
        "fusemax",
        lanes="fill",
        handoff="registers",
        reuse=False,
    )
    spec = loads_mapping(mapping_yaml(data), "<template>", "template")
    r = evaluate_mapping(c, with_factors(resolved(spec, c, a, w), {"P1": 8}), a, w)
    assert (r.latency_s, r.traffic_bytes, r.util_2d, r.util_1d) == (
        hand.latency_s,
        hand.traffic_bytes,
        hand.util_2d,
        hand.util_1d,
    )


@pytest.mark.parametrize("strategy", ["fused", "fusemax", "flat", "unfused"])
def test_a_length_the_tiles_do_not_divide_is_padded_to_whole_tiles(strategy):
    """1000 tokens in tiles of 256: the ranks are rounded up to whole tiles (said in what
    was found) -- no slower than the 1024 tokens that fill them, never under the
    1000-token bound."""
    specs = Specs()
    r = evaluate(specs, f"auto:{strategy}", make_workload("bert", 1000))
    full = evaluate(specs, f"auto:{strategy}", make_workload("bert", 1024))
    assert "padded=" in r.search.found
    assert r.latency_bound_s <= r.latency_s <= full.latency_s * (1 + 1e-9)


def test_the_paper_files_hand_a_length_their_tiles_do_not_divide_to_their_strategy(run_cli):
    """`--seq 1000`: the paper's files whose tiles (256) do not divide it run through the
    strategy they name (`otherwise:`), whole tiles padded, said in a note."""
    code, out, err = run_cli(run_main, ["--seq", "1000", "--engine", "analytic"])
    assert code == 0, err
    assert "+Binding: its tiles do not divide" in out and "whole tiles padded" in out
    assert "auto: FuseMax" in out and "auto: unfused" in out


def test_an_array_side_that_does_not_divide_the_length_pads_it(run_cli):
    """A 3 x 3 array at 1K tokens: +Binding's tiles of 3 do not divide 1024, so its strategy
    pads the last tile (said in a note) rather than refusing the point."""
    code, out, err = run_cli(
        run_main, ["--seq", "1K", "--pe-dim", "3", "--accel", "binding", "--engine", "analytic"]
    )
    assert code == 0, err
    assert "+Binding: its tiles do not divide" in out


@given(st.integers(min_value=0, max_value=200))
def test_a_templates_tile_choices_are_tried_ends_first_then_by_halving(n):
    """Every choice once; the largest tiles first, the smallest second, and every choice
    within a quarter of the list of one tried among the first 5 (a budget that ends early
    has seen both ends and the middle)."""
    order = spread_order(n)
    assert sorted(order) == list(range(n))
    assert order[:2] == ([0, n - 1] if n > 1 else list(range(n)))
    head = order[:5]
    assert all(min(abs(i - j) for j in head) <= max(1, n // 4) for i in range(n))


def test_a_block_small_enough_to_fit_is_found_within_the_default_budget():
    """Talking heads (scores mixed across 32 heads before the softmax: a block of rows
    holds every head's fibre) fit on chip only in the smallest blocks of rows, the last of
    each template's choices in larger-first order: within the default budget the search
    reaches them (8.3x the MAC floor at 4K when it did not; 5.7x with them)."""
    path = DATA / "paper_cascades_heldout" / "talking-heads-attention-3pass.yaml"
    w = make_workload("llama3-8b", "4K", {"causal": False}, shape={"H": 32, "T": 32})
    default = evaluate(Specs(cascade_override=str(path)), "auto", w)
    everything = evaluate(Specs(cascade_override=str(path), search_s=20.0), "auto", w)
    assert everything.search.unevaluated == 0
    assert default.latency_s <= everything.latency_s * 1.005
