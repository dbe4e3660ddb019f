"""Bounds that hold and a guard that never refuses a valid result, for cascades beyond
attention: expected values from the bounds' arithmetic, never from the code's output."""

from __future__ import annotations

import json
import math

import pytest

from simulator.core.bounds import onchip_values
from simulator.drivers.configs import EvalOptions, Specs, evaluate
from simulator.run import main as run_main
from simulator.spec.arch_file import load_architecture
from simulator.spec.workload import make_workload
from simulator.support.paths import resolve_spec

from .conftest import DATA

CROSS_ENTROPY = DATA / "cascades" / "cross-entropy-shape.yaml"
CHUNKED_SIGMOID = DATA / "cascades" / "chunked-sigmoid.yaml"


@pytest.mark.parametrize("d, c", [(1024, 32768), (4096, 128256)])
@pytest.mark.parametrize("strategy", ["unfused", "fused"])
def test_a_cross_entropys_bound_is_its_own(d, c, strategy):
    """L = X W, then a max, a sum of exponentials and the target's logit over the vocabulary:
    the one-hot target Y is per row, read once -- no attention re-read term. The traffic
    bound is the compulsory traffic (X, W, Y read, LOSS written) plus the GEMM's re-reads
    beyond it (2PDC / sqrt(M) - 2M - PD - DC, when positive); the result is at or above it."""
    p = 4096
    w = make_workload("llama3-8b", p, {"batch": 1}, shape={"D": d, "C": c})
    r = evaluate(Specs(cascade_override=str(CROSS_ENTROPY), arch_override="fusemax"),
                 f"auto:{strategy}", w)  # fmt: skip
    m = onchip_values(load_architecture(resolve_spec("arch", "fusemax")))
    compulsory = d * p + d * c + c * p + p
    rereads = max(0.0, 2 * p * d * c / math.sqrt(m) - 2 * m - (p * d + d * c))
    assert r.traffic_bound_bytes == pytest.approx(2 * (compulsory + rereads), rel=1e-12)
    assert r.traffic_bytes >= r.traffic_bound_bytes and r.latency_s >= r.latency_bound_s


@pytest.mark.parametrize(
    "argv",
    [
        ["--phase", "decode", "--context", "2M"],
        ["--phase", "decode", "--context", "1M", "--heads", "64", "--kv-heads", "32"],
        ["--phase", "decode", "--context", "1M", "--heads", "32", "--kv-heads", "16"],
        ["--phase", "decode", "--context", "512K", "--heads", "64", "--kv-heads", "64"],
    ],
)
def test_long_decodes_on_the_cycle_engine_are_at_or_above_their_bound(argv, run_cli):
    """A memory-bound decode of 10^9 cycles: the simulated DRAM stream never finishes
    before its bytes cross the bus (its time per epoch is rounded up, never down)."""
    code, out, err = run_cli(
        run_main, ["--model", "llama3-8b", *argv, "--mapping", "auto:fusemax", "--format", "json"]
    )
    assert code == 0, err
    (r,) = json.loads(out)
    assert r["engine"] == "cycle" and r["latency_s"] >= r["latency_bound_s"]


def test_a_schedule_the_cycle_engine_cannot_order_is_no_result(run_cli):
    """Chunked sigmoid attention with a running sum, its value rank an outer loop (a mapping
    a user may write): the cycle engine cannot order the tile's operations. It says so and
    the analytic engine's numbers stand -- never a latency 1000x under the bound."""
    mapping = DATA / "cascades" / "chunked-sigmoid-f-outer.yaml"
    code, out, err = run_cli(run_main, ["--mapping", str(mapping), "--seq", "4K"])
    assert code == 0, err
    assert "the cycle engine cannot order its operations" in out
    assert "shown: the analytic engine's numbers" in out


def test_the_h100_runs_with_the_default_engine(run_cli):
    code, out, err = run_cli(run_main, ["--arch", "h100", "--model", "llama3-8b", "--seq", "4K"])
    assert code == 0, err
    assert "simulates one core" in out and "the analytic engine's numbers" in out


@pytest.mark.parametrize(
    "module, argv",
    [
        ("run", ["--seq", "1K", "--engine", "analytic"]),
        ("compare", ["--cascades", "attention-1pass", "--seq", "1K", "--engine", "analytic"]),
        ("bind", ["attention-1pass", "--seq", "1K"]),
    ],
)
def test_a_shape_no_cascade_has_is_one_line_everywhere(module, argv, run_cli):
    import importlib

    path = "simulator.bind.__main__" if module == "bind" else f"simulator.{module}"
    main = importlib.import_module(path).main
    code, out, err = run_cli(main, [*argv, "--shape", "Z=4"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "no cascade of this run has rank Z" in err


def test_a_sweep_refuses_a_shape_no_cascade_has_before_any_work(tmp_path, run_cli):
    from simulator.sweep import main as sweep_main

    out = tmp_path / "s.csv"
    code, _out, err = run_cli(sweep_main, ["--grid", "seq=1K", "shape=Z=4", "--out", str(out)])
    assert code == 2 and "no cascade of this run has rank Z" in err and not out.exists()


def test_a_shape_the_workload_also_sizes_wins_and_the_header_says_so(run_cli):
    code, out, err = run_cli(
        run_main, ["--seq", "1K", "--accel", "binding", "--engine", "analytic", "--shape", "E=128"]
    )
    assert code == 0, err
    assert "E=128" in out.splitlines()[0] and "E=64" not in out.splitlines()[0]
    code, base, _ = run_cli(run_main, ["--seq", "1K", "--accel", "binding", "--engine", "analytic"])
    assert base.splitlines()[3] != out.splitlines()[3]  # the user's E was used


def test_an_llms_layer_runs_through_the_mapper(run_cli, tmp_path):
    """--scope layer with an LLM model card: its attention is found by the mapper (the
    paper's files do not run grouped, causal attention) on the strategy's own architecture,
    the linear layers on the same one; also through a sweep."""
    code, out, err = run_cli(
        run_main,
        ["--model", "llama3-8b", "--seq", "4K", "--scope", "layer", "--engine", "analytic"],
    )
    assert code == 0, err
    assert "auto: FuseMax" in out and "auto: FLAT" in out
    from simulator.sweep import main as sweep_main

    csv = tmp_path / "l.csv"
    argv = ["--grid", "model=llama3-8b", "seq=4K", "accel=auto:fusemax", "--scope", "layer"]
    code, _out, err = run_cli(sweep_main, [*argv, "--out", str(csv)])
    assert code == 0, err
    assert "auto:fusemax,Llama-3-8B,4096" in csv.read_text()


@pytest.mark.parametrize(
    "argv, missing",
    [
        (["--window", "256", "--kv-heads", "1", "--cascade", "attention-causal-3pass"],
         "grouped-query, sliding window of 256"),
        (["--model", "mistral-7b", "--cascade", "attention-gqa-causal-1pass"],
         "grouped-query, sliding window of 4K"),
    ],
)  # fmt: skip
def test_a_workload_feature_the_cascade_cannot_express_is_one_line(argv, missing, run_cli):
    """The header would name a window or grouped heads the numbers do not compute: refused
    in one line, saying what the cascade computes and how to state that workload."""
    code, out, err = run_cli(run_main, [*argv, "--mapping", "auto:flat", "--seq", "4K"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert missing in err and "--window 0" in err


def test_the_user_states_the_workload_the_cascade_computes(run_cli):
    code, out, err = run_cli(
        run_main,
        ["--model", "mistral-7b", "--window", "0", "--cascade", "attention-gqa-causal-1pass",
         "--mapping", "auto", "--seq", "4K", "--engine", "analytic"],
    )  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[0].startswith("Mistral-7B(window=0)") and "W=" not in out


def test_every_row_prints_the_workloads_bound_and_its_own_floor_apart(run_cli):
    """Mistral-7B at 64K: one latency bound for the workload in every row (the least of the
    configurations' own floors: no configuration of the point beats it), each own floor
    apart; unfused and FLAT run the same cascade on the same chip, so their own floors --
    the cascade's useful work -- are the same, and unfused, which computes the masked
    scores (a library's GEMM computes whole tiles), says so."""
    code, out, err = run_cli(
        run_main, ["--model", "mistral-7b", "--seq", "64K", "--engine", "analytic", "--format",
                   "json"],
    )  # fmt: skip
    assert code == 0, err
    rows = {r["accelerator"]: r for r in json.loads(out)}
    bounds = {r["latency_bound_s"] for r in rows.values()}
    assert len(bounds) == 1 and bounds.pop() <= min(r["latency_s"] for r in rows.values())
    unfused, flat = rows["auto-unfused"], rows["auto-flat"]
    assert unfused["own_latency_bound_s"] == pytest.approx(flat["own_latency_bound_s"])
    assert unfused["masked_work"] > 0.5 and flat["masked_work"] < 0.1
    code, out, err = run_cli(run_main, ["--model", "mistral-7b", "--seq", "64K", "--engine",
                                        "analytic"])  # fmt: skip
    assert "auto: unfused computes the masked-out scores too" in out


def test_the_roofline_counts_the_work_the_workload_needs(run_cli):
    """Llama-3-8B (causal) at 64K: unfused and FLAT run the same cascade, so the useful
    operations they are credited with are the same; unfused executes twice as many (the
    masked half of its whole tiles), shown apart; FLAT's blocks skip their masked tiles (how
    many depends on the rows per block its search keeps on chip: fewer than unfused)."""
    w = make_workload("llama3-8b", "64K")
    specs = Specs()
    unfused = evaluate(specs, "auto:unfused", w, options=EvalOptions(engine="analytic"))
    flat = evaluate(specs, "auto:flat", w, options=EvalOptions(engine="analytic"))
    assert unfused.ops == pytest.approx(flat.ops, rel=1e-9)
    assert unfused.executed_ops > 1.9 * unfused.ops
    assert flat.ops < flat.executed_ops < 0.8 * unfused.executed_ops  # masked tiles skipped


def test_a_loop_listed_twice_is_one_line(tmp_path, run_cli):
    text = (DATA.parent.parent / "mappings" / "binding.yaml").read_text()
    assert "loops: [P2, M1, P1]" in text
    bad = tmp_path / "twice.yaml"
    bad.write_text(
        text.replace("loops: [P2, M1, P1]", "loops: [P2, M1, P1, P2]").replace(
            "cascade: attention-1pass", "cascade: attention-1pass"
        )
    )
    code, out, err = run_cli(run_main, ["--mapping", str(bad), "--seq", "4K"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "lists 'P2' twice" in err and "twice.yaml:" in err
