"""Numerical execution: every attention cascade computes softmax(Q^T K) V."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cascade.__main__ import main
from simulator.cascade.execute import compare, evaluate, random_inputs, softmax_attention
from simulator.cascade.parse import load_cascade
from simulator.cascade.shapes import resolve_shapes

from .conftest import CASCADES, DATA

ATTENTION = [
    "attention-3pass",
    "attention-3pass-deferred-div",
    "attention-2pass",
    "attention-1pass",
    "attention-naive",
]
SMALL = {"M": 256, "P": 96, "E": 16, "F": 24}


def _shapes(cascade):
    extra = {"M0": 64} if cascade.partitions else {}
    return resolve_shapes(cascade, {**SMALL, **extra})


@pytest.mark.parametrize("name", ATTENTION)
def test_attention_equals_numpy_softmax(name):
    cascade = load_cascade(CASCADES / f"{name}.yaml")
    shapes = _shapes(cascade)
    inputs = random_inputs(cascade, shapes, seed=3)
    out = evaluate(cascade, inputs, shapes)["AV"]
    ref = softmax_attention(inputs["Q"], inputs["K"], inputs["V"])
    assert out.shape == (SMALL["F"], SMALL["P"])
    assert np.max(np.abs(out - ref)) <= 1e-5 * np.max(np.abs(ref))


@pytest.mark.parametrize("name", ATTENTION[1:])
def test_compare_proves_equivalence(name):
    a = load_cascade(CASCADES / "attention-3pass.yaml")
    b = load_cascade(CASCADES / f"{name}.yaml")
    result = compare(a, b, SMALL, seed=1)
    assert result.equivalent, result


def test_compare_rejects_dropped_correction_factor():
    a = load_cascade(CASCADES / "attention-3pass.yaml")
    b = load_cascade(DATA / "attention-1pass-no-correction.yaml")
    result = compare(a, b, {"M": 256, "P": 64, "E": 16, "F": 16}, seed=1)
    assert not result.equivalent
    assert result.outputs[0].max_rel_error > 1e-3


def test_large_logits_overflow_only_the_naive_cascade():
    # Inputs of standard deviation 40 with E = 16 give logits of order +-1e4.
    shapes = {"M": 128, "P": 32, "E": 16, "F": 8}
    naive = load_cascade(CASCADES / "attention-naive.yaml")
    inputs = random_inputs(naive, resolve_shapes(naive, shapes), seed=0, scale=40.0)
    logits = inputs["K"].T @ inputs["Q"]
    assert np.abs(logits).max() > 5e3
    ref = softmax_attention(inputs["Q"], inputs["K"], inputs["V"])
    for name in ATTENTION[:-1]:
        cascade = load_cascade(CASCADES / f"{name}.yaml")
        extra = {"M0": 32} if cascade.partitions else {}
        out = evaluate(cascade, inputs, resolve_shapes(cascade, {**shapes, **extra}))["AV"]
        assert np.isfinite(out).all(), name
        assert np.max(np.abs(out - ref)) <= 1e-5 * np.max(np.abs(ref)), name
    out = evaluate(naive, inputs, resolve_shapes(naive, shapes))["AV"]
    assert not np.isfinite(out).all()


def test_cli_compare_reports_overflow(run_cli):
    code, out, _ = run_cli(
        main,
        [
            "compare",
            "attention-3pass",
            "attention-naive",
            "--shape",
            "M=128,P=32,E=16,F=8",
            "--scale",
            "40",
        ],
    )
    assert code == 1
    assert "non-finite" in out and "NOT equivalent" in out


def test_cli_compare_equivalent_exit_zero(run_cli):
    code, out, _ = run_cli(
        main, ["compare", "attention-3pass", "attention-1pass", "--shape", "M=256,P=64,E=16,F=16"]
    )
    assert code == 0 and "equivalent" in out


def test_pedagogical_cascades_agree():
    ref = load_cascade(CASCADES / "cascade1-dot.yaml")
    for name in ("cascade2-reassociated", "cascade3-iterative"):
        assert compare(ref, load_cascade(CASCADES / f"{name}.yaml"), seed=2).equivalent, name


def test_cascade1_value_is_dot_times_sum():
    cascade = load_cascade(CASCADES / "cascade1-dot.yaml")
    shapes = resolve_shapes(cascade)
    inputs = random_inputs(cascade, shapes, seed=5)
    z = evaluate(cascade, inputs, shapes)["Z"]
    assert np.isclose(z, np.dot(inputs["A"], inputs["B"]) * inputs["A"].sum())


def test_prefix_filter_matches_cumsum():
    cascade = load_cascade(CASCADES / "prefix-sum.yaml")
    shapes = resolve_shapes(cascade)
    inputs = random_inputs(cascade, shapes, seed=4)
    out = evaluate(cascade, inputs, shapes)
    assert np.allclose(out["S"], np.cumsum(inputs["A"]))
    assert np.isclose(out["T"], inputs["A"].sum())


def test_user_defined_reduce_operator():
    from simulator.cascade.parse import loads_cascade

    text = """
name: logsumexp
shapes: {K: 32}
operators:
  lse(a, b): {body: "max(a, b) + log(exp(a - max(a, b)) + exp(b - max(a, b)))", identity: -inf}
einsum:
  declaration: {A: [K], L: []}
  expressions:
    - L = A[k] :: lse(k)
"""
    cascade = loads_cascade(text, "lse.yaml")
    shapes = resolve_shapes(cascade)
    inputs = random_inputs(cascade, shapes, seed=1)
    out = evaluate(cascade, inputs, shapes)["L"]
    a = inputs["A"]
    assert np.isclose(out, np.log(np.exp(a).sum()))


def test_sum_of_products_broadcasts_over_output_ranks_it_does_not_read():
    from simulator.cascade.parse import loads_cascade

    text = """
shapes: {K: 4, I: 3, J: 5}
einsum:
  declaration: {A: [K], B: [K], C: [J, K], W: [I], X: [I, J], Y: [J, I]}
  expressions:
    - W[i] = A[k] * B[k]
    - X[i, j] = A[k] * C[j, k]
    - Y[j, i] = C[j, k] * A[k]
"""
    cascade = loads_cascade(text, "broadcast.yaml")
    shapes = resolve_shapes(cascade)
    inputs = random_inputs(cascade, shapes, seed=2)
    out = evaluate(cascade, inputs, shapes)
    a, b, c = inputs["A"], inputs["B"], inputs["C"]
    assert np.allclose(out["W"], np.full(3, a @ b))
    assert np.allclose(out["X"], np.broadcast_to(c @ a, (3, 5)))
    assert np.allclose(out["Y"], np.broadcast_to((c @ a)[:, None], (5, 3)))


def test_cli_eval_broadcast_has_no_traceback(tmp_path, run_cli):
    path = tmp_path / "w.yaml"
    path.write_text(
        "shapes: {K: 4, I: 3}\neinsum:\n  declaration: {A: [K], B: [K], W: [I]}\n"
        "  expressions:\n    - W[i] = A[k] * B[k]\n"
    )
    for command in ("eval", "compare"):
        argv = [command, str(path)] + ([str(path)] if command == "compare" else [])
        code, out, err = run_cli(main, argv)
        assert code == 0, err
        assert "W" in out
