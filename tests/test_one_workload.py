"""One workload, however it is stated (issue 43): flags, `--shape` of the ranks the
workload sizes, a model's own field given again -- the same numbers, the same header; a
`--shape` that contradicts the sequence or head structure is one line, exit 2."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.bind.__main__ import main as bind_main
from simulator.run import main as run_main

# What each model card says (cascades/workloads/*.yaml), written here, not read from it.
MODELS = {
    "bert": {"heads": 12, "kv": 12, "embed": 64},
    "llama3-8b": {"heads": 32, "kv": 8, "embed": 128},
}


def _statements(model: str, seq: int, decode: bool) -> list[list[str]]:
    """Other ways to state the same workload: its sized ranks by --shape, its own fields."""
    card = MODELS[model]
    keys, queries = seq, 1 if decode else seq
    shapes = [f"M={keys}", f"P={queries}", f"E={card['embed']},F={card['embed']}"]
    if card["kv"] != card["heads"]:
        shapes.append(f"G={card['heads'] // card['kv']}")
    out = [["--shape", s] for s in shapes]
    out.append(["--shape", ",".join(shapes)])
    out.append(["--heads", str(card["heads"])])
    if card["kv"] != card["heads"]:
        out.append(["--kv-heads", str(card["kv"])])
    return out


def _argv(model: str, seq: int, batch: int, decode: bool) -> list[str]:
    argv = ["--model", model, "--batch", str(batch), "--mapping", "auto"]
    argv += ["--engine", "analytic", "--format", "json"]
    if decode:
        return [*argv, "--phase", "decode", "--context", str(seq)]
    return [*argv, "--seq", str(seq)]


@settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    model=st.sampled_from(sorted(MODELS)),
    seq=st.sampled_from([1024, 4096]),
    batch=st.sampled_from([1, 8]),
    decode=st.booleans(),
    pick=st.integers(0, 10),
)
def test_the_same_workload_stated_two_ways_gives_the_same_numbers(
    run_cli, model, seq, batch, decode, pick
):
    base = _argv(model, seq, batch, decode)
    code, want, err = run_cli(run_main, base)
    assert code == 0, err
    ways = _statements(model, seq, decode)
    extra = ways[pick % len(ways)]
    code, got, err = run_cli(run_main, [*base, *extra])
    assert code == 0, (extra, err)
    assert _numbers(got) == _numbers(want), extra


def _numbers(text: str) -> list[dict]:
    """The records less how long the search took and whether its cache answered."""
    records = json.loads(text)
    for r in records:
        r["search"] = {k: v for k, v in r["search"].items() if k not in ("search_s", "cached")}
    return records


def test_a_full_width_shape_keeps_the_heads(run_cli):
    """`--seq 4K --shape M=4096` is `--seq 4K`: the instances stay per head (it ran one
    head, 12x faster than the workload's floor, with the bound moving along)."""
    base = ["--model", "bert", "--seq", "4K", "--mapping", "auto", "--engine", "analytic"]
    code, want, err = run_cli(run_main, [*base, "--format", "json"])
    assert code == 0, err
    code, got, err = run_cli(run_main, [*base, "--format", "json", "--shape", "M=4096"])
    assert code == 0, err
    want, got = json.loads(want)[0], json.loads(got)[0]
    assert got["latency_s"] == want["latency_s"]
    assert got["traffic_bytes"] == want["traffic_bytes"]


def test_bind_writes_the_heads_whatever_the_statement(run_cli):
    base = ["attention-gqa-causal-1pass", "--model", "llama3-8b", "--seq", "1K", "--rule"]
    code, want, err = run_cli(bind_main, base)
    assert code == 0, err
    code, got, err = run_cli(bind_main, [*base, "--shape", "G=4,M=1024"])
    assert code == 0, err
    assert got == want
    assert "heads: kv_heads" in got


def test_a_shape_that_contradicts_the_workload_is_one_line(run_cli):
    base = ["--model", "llama3-8b", "--seq", "4K", "--mapping", "auto", "--engine", "analytic"]
    for shape, flag in (("M=8192", "--seq"), ("P=1", "--seq"), ("G=2", "--kv-heads")):
        code, out, err = run_cli(run_main, [*base, "--shape", shape])
        assert code == 2 and not out, (shape, out)
        assert err.count("\n") == 1 and flag in err and "Traceback" not in err, err
    code, out, err = run_cli(bind_main, ["attention-1pass", "--seq", "1K", "--shape", "M=2K"])
    assert code == 2 and err.count("\n") == 1, err
