"""The language's element-wise functions and index variables read as values (issue 26).

Expected values come from Python's `math` module element by element or from numpy written
here, never from the evaluator's own table; counts from arithmetic on the shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.cascade.execute import evaluate, random_inputs, run_tile, tensor_shape
from simulator.cascade.ir import FUNCTIONS, VarValue
from simulator.cascade.ops import KINDS, cascade_ops, totals
from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade.shapes import resolve_shapes
from simulator.cascade.write import to_yaml
from simulator.support.errors import SpecError

from .conftest import CASCADES


def cascade(exprs: list[str], decl: dict[str, str], shapes: str = "", extra: str = ""):
    text = extra
    if shapes:
        text += f"shapes: {{{shapes}}}\n"
    text += "einsum:\n  declaration:\n"
    text += "".join(f"    {k}: {v}\n" for k, v in decl.items())
    text += "  expressions:\n" + "".join(f'    - "{e}"\n' for e in exprs)
    return loads_cascade(text, "t.yaml")


def counts(c, shapes):
    return {o.einsum: dict(o.counts) for o in cascade_ops(c, shapes)}


# ---- the function table ---------------------------------------------------------------

SCALAR = {  # an independent definition of each one-argument function, element by element
    "exp": math.exp,
    "log": math.log,
    "sqrt": math.sqrt,
    "abs": abs,
    "rsqrt": lambda x: 1 / math.sqrt(x),
    "tanh": math.tanh,
    "sigmoid": lambda x: 1 / (1 + math.exp(-x)),
    "silu": lambda x: x / (1 + math.exp(-x)),
    "erf": math.erf,
    "gelu": lambda x: x * (1 + math.erf(x / math.sqrt(2))) / 2,
    "gelu_tanh": lambda x: x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))) / 2,
    "softplus": lambda x: math.log1p(math.exp(x)),
}


def test_every_unary_function_has_an_independent_definition_here():
    unary = {name for name, f in FUNCTIONS.items() if f.arity == 1}
    assert unary == set(SCALAR)


@pytest.mark.parametrize("name", sorted(SCALAR))
def test_a_function_evaluates_as_defined_and_counts_as_itself(name):
    c = cascade([f"Y[k] = {name}(A[k])"], {"A": "[K]", "Y": "[K]"}, "K: 7")
    x = np.array([0.3, 1.7, 2.5, 0.01, 4.0, 0.9, 12.0])  # positive: log, sqrt, rsqrt
    y = evaluate(c, {"A": x})["Y"]
    want = np.array([SCALAR[name](v) for v in x])
    assert np.allclose(y, want, rtol=1e-12, atol=0), (name, y, want)
    assert counts(c, {"K": 7}) == {"Y": {name: 7}}
    assert name in KINDS


def test_negative_arguments_and_tails():
    c = cascade(
        ["S[k] = sigmoid(A[k])", "T[k] = tanh(A[k])", "U[k] = silu(A[k])", "G[k] = gelu(A[k])"],
        {"A": "[K]", "S": "[K]", "T": "[K]", "U": "[K]", "G": "[K]"},
        "K: 5",
    )
    x = np.array([-800.0, -30.0, -1.5, 30.0, 800.0])
    out = evaluate(c, {"A": x})
    assert np.all(np.isfinite(out["S"])) and np.all(np.isfinite(out["U"]))
    assert out["S"][1] == pytest.approx(1 / (1 + math.exp(30)), rel=1e-12)  # no 1 - 1
    assert out["S"][0] == 0.0 and out["S"][-1] == 1.0
    assert list(out["T"][[0, -1]]) == [-1.0, 1.0]
    assert out["G"][2] == pytest.approx(-1.5 * (1 + math.erf(-1.5 / math.sqrt(2))) / 2)


def test_max_and_min_fold_and_count_under_their_own_kinds():
    c = cascade(
        ["Y[k] = max(A[k], B[k], 0)", "Z[k] = min(A[k], B[k]) + abs(A[k])"],
        {"A": "[K]", "B": "[K]", "Y": "[K]", "Z": "[K]"},
        "K: 4",
    )
    assert counts(c, {"K": 4}) == {"Y": {"max": 8}, "Z": {"min": 4, "abs": 4, "add": 4}}
    a, b = np.array([-2.0, 1.0, 3.0, -0.5]), np.array([1.0, -4.0, 2.0, -1.0])
    out = evaluate(c, {"A": a, "B": b})
    assert list(out["Y"]) == [1.0, 1.0, 3.0, 0.0]
    assert list(out["Z"]) == [0.0, -3.0, 5.0, -0.5]


def test_a_min_reduction_counts_as_min():
    c = cascade(["Y = A[k] :: min(k)"], {"A": "[K]", "Y": "[]"}, "K: 6")
    assert counts(c, {"K": 6}) == {"Y": {"min": 6}}


def test_the_function_table_arity_is_checked(tmp_path):
    with pytest.raises(SpecError, match=r"tanh\(\) takes 1 argument\(s\), got 2"):
        cascade(["Y[k] = tanh(A[k], A[k])"], {"A": "[K]", "Y": "[K]"})


def test_an_unknown_function_is_one_line_listing_the_known_ones():
    with pytest.raises(SpecError) as err:
        cascade(["Y[k] = tanhh(A[k])"], {"A": "[K]", "Y": "[K]"})
    message = str(err.value)
    assert "\n" not in message and message.startswith("t.yaml:6:15: ")
    assert "unknown function or operator 'tanhh'" in message
    assert all(name in message for name in FUNCTIONS)


def test_a_user_operator_may_not_hide_a_function():
    with pytest.raises(SpecError, match="operator 'tanh' is already defined: a built-in"):
        cascade(
            ["Y[k] = tanh(A[k])"],
            {"A": "[K]", "Y": "[K]"},
            extra="operators:\n  tanh(x): (exp(x) - exp(-x)) / (exp(x) + exp(-x))\n",
        )


def test_an_operator_body_reads_only_its_parameters():
    with pytest.raises(SpecError) as err:
        cascade(
            ["Y[k] = shift(A[k])"],
            {"A": "[K]", "Y": "[K]"},
            extra="operators:\n  shift(a): a + k\n",
        )
    message = str(err.value)
    assert message.startswith("t.yaml:2:17: ") and "\n" not in message
    assert "operator 'shift' reads 'k', which is none of its parameters (a)" in message


# ---- constants computed once ------------------------------------------------------------


def test_arithmetic_on_numbers_and_extents_alone_counts_nothing_per_point():
    decl = {"A": "[K]", "Y": "[K]"}
    recip = cascade(["Y[k] = A[k] * (1 / N)"], decl, "K: 5, N: 4")
    assert counts(recip, {"K": 5, "N": 4}) == {"Y": {"mul": 5}}
    assert np.allclose(evaluate(recip, {"A": np.arange(5.0)})["Y"], np.arange(5.0) / 4)
    # dividing by a constant multiplies by its reciprocal: the same cost as written so
    divide = cascade(["Y[k] = A[k] / N"], decl, "K: 5, N: 4")
    assert counts(divide, {"K": 5, "N": 4}) == {"Y": {"mul": 5}}
    assert np.allclose(evaluate(divide, {"A": np.arange(5.0)})["Y"], np.arange(5.0) / 4)
    # ... and under a sum it is a multiply-accumulate, as `A[k] * (1 / N)` summed is
    mean = cascade(["Y = A[k] / N"], {"A": "[K]", "Y": "[]"}, "K: 5, N: 4")
    scaled = cascade(["Y = A[k] * (1 / N)"], {"A": "[K]", "Y": "[]"}, "K: 5, N: 4")
    assert counts(mean, {"K": 5, "N": 4}) == counts(scaled, {"K": 5, "N": 4}) == {"Y": {"mac": 5}}
    # a division by a value that varies from point to point is a division
    ratio = cascade(["Y[k] = A[k] / B[k]"], {**decl, "B": "[K]"}, "K: 5")
    assert counts(ratio, {"K": 5}) == {"Y": {"divide": 5}}
    # a product of constants is no MAC: the add alone is per point
    affine = cascade(["Y[k] = A[k] + 2 * N"], decl, "K: 5, N: 4")
    assert counts(affine, {"K": 5, "N": 4}) == {"Y": {"add": 5}}


# ---- index variables as values ----------------------------------------------------------


def test_index_variables_evaluate_as_their_indices_and_cost_nothing():
    c = cascade(
        ["B[m, p] = A[m, p] + S * (m - p)"],
        {"A": "[M, P]", "S": "[]", "B": "[M, P]"},
        "M: 5, P: 3",
    )
    assert isinstance(c.einsum("B").expr.args[1].args[1].args[0], VarValue)
    a = np.random.default_rng(0).standard_normal((5, 3))
    out = evaluate(c, {"A": a, "S": np.array(0.25)})["B"]
    m, p = np.meshgrid(np.arange(5), np.arange(3), indexing="ij")
    assert np.allclose(out, a + 0.25 * (m - p))
    # per point: the bias's multiply-add is one MAC, m - p one add; m and p are free
    assert counts(c, {"M": 5, "P": 3}) == {"B": {"mac": 15, "add": 15}}


def test_an_index_value_in_a_filtered_reduction():
    """Y[p] = sum over m <= p of A[m] * m: only kept points compute."""
    c = cascade(["Y[p] = A[m : m <= p] * m"], {"A": "[M]", "Y": "[P]"}, "M: 6, P: 6")
    a = np.arange(1.0, 7.0)
    y = evaluate(c, {"A": a})["Y"]
    assert list(y) == [sum(a[i] * i for i in range(p + 1)) for p in range(6)]
    assert counts(c, {"M": 6, "P": 6}) == {"Y": {"mac": 6 * 7 // 2}}


def test_the_iterative_variable_reads_as_its_step():
    c = cascade(
        ["R[0] = 0", "R[k+1] = R[k] + k * A[k]  until k == K", "Y = R[K]"],
        {"A": "[K]", "R": "[K]", "Y": "[]"},
        "K: 5",
    )
    a = np.array([3.0, -1.0, 2.0, 0.5, 4.0])
    out = evaluate(c, {"A": a})
    assert out["Y"] == sum(k * a[k] for k in range(5))
    assert list(out["R"]) == [sum(k * a[k] for k in range(j)) for j in range(6)]


def test_an_index_value_in_a_tile_is_the_absolute_index():
    """The cycle engine's tiles (`run_tile`) offset their ranges: m - p must stay the
    distance of the whole tensor's indices."""
    c = cascade(["B[m, p] = A[m, p] + (m - p)"], {"A": "[M, P]", "B": "[M, P]"}, "M: 8, P: 4")
    shapes = {"M": 8, "P": 4}
    arrays = {"A": np.zeros((8, 4)), "B": np.full(tensor_shape(c, "B", shapes), np.nan)}
    run_tile(c, c.einsum("B"), arrays, shapes, {}, {"m": (4, 8), "p": (2, 4)})
    m, p = np.meshgrid(np.arange(8), np.arange(4), indexing="ij")
    tile = (slice(4, 8), slice(2, 4))
    assert np.array_equal(arrays["B"][tile], (m - p)[tile])
    assert np.isnan(arrays["B"][:4]).all()


@pytest.mark.parametrize(
    ("expr", "decl", "fragment", "col"),
    [
        (
            "Y[k] = A[k] * j",
            {"A": "[K]", "Y": "[K]"},
            "'j' used as a value is an index variable, but its rank 'J' is not declared",
            22,
        ),
        (
            "Y[k] = A[k] * j",
            {"A": "[K]", "B": "[J]", "Y": "[K]"},
            "index variable 'j' used as a value is not a variable of this Einsum",
            22,
        ),
        (
            "BK[m1, m0] = K[m1*M0 + m0] * m",
            {"K": "[M]", "BK": "[M1, M0]"},
            "index variable 'm' used as a value is not a variable of this Einsum",
            37,
        ),
    ],
)
def test_a_bad_index_value_is_one_line_at_its_place(expr, decl, fragment, col):
    with pytest.raises(SpecError) as err:
        cascade([expr], decl)
    message = str(err.value)
    line = 4 + len(decl)
    assert message.startswith(f"t.yaml:{line}:{col}: "), message
    assert fragment in message and "\n" not in message


def test_a_cascade_with_index_values_writes_back_to_itself():
    c = load_cascade(CASCADES / "attention-alibi-1pass.yaml")
    again = loads_cascade(to_yaml(c), "again.yaml")
    assert again.einsums == c.einsums


# ---- the shipped soft-capped and ALiBi cascades ---------------------------------------


def softmax_av(logits: np.ndarray, v: np.ndarray, keep: np.ndarray | bool = True) -> np.ndarray:
    logits = np.where(keep, logits, -np.inf)
    w = np.exp(logits - logits.max(axis=0, keepdims=True))
    return v @ (w / w.sum(axis=0, keepdims=True))


SMALL = {"M": 64, "P": 48, "E": 8, "F": 4}


@pytest.mark.parametrize("passes", ["3pass", "1pass"])
def test_softcap_is_gemma2_capped_attention(passes):
    c = load_cascade(CASCADES / f"attention-softcap-{passes}.yaml")
    extra = {"M0": 16} if passes == "1pass" else {}
    shapes = resolve_shapes(c, {**SMALL, **extra, "CAP": 3})
    x = random_inputs(c, shapes, seed=3, scale=3.0)  # logits well beyond the cap
    logits = x["K"].T @ x["Q"]
    want = softmax_av(3 * np.tanh(logits / 3), x["V"])
    got = evaluate(c, x, shapes)["AV"]
    assert np.max(np.abs(got - want)) <= 1e-12 * np.max(np.abs(want))
    # without the cap the answer differs: the test can tell
    assert np.max(np.abs(softmax_av(logits, x["V"]) - want)) > 1e-2
    assert analyze_passes(c).max_passes == (3 if passes == "3pass" else 1)


def test_softcap_costs_a_tanh_and_two_multiplies_per_logit():
    c = load_cascade(CASCADES / "attention-softcap-3pass.yaml")
    shapes = resolve_shapes(c, {"M": 1024, "P": 512})
    ops = counts(c, shapes)
    assert ops["QKC"] == {"mul": 2 * 1024 * 512, "tanh": 1024 * 512}
    base = totals(cascade_ops(load_cascade(CASCADES / "attention-3pass.yaml"), shapes))
    total = totals(cascade_ops(c, shapes))
    assert {k: total[k] - base.get(k, 0) for k in total if total[k] != base.get(k, 0)} == {
        "mul": 2 * 1024 * 512,
        "tanh": 1024 * 512,
    }


@pytest.mark.parametrize("passes", ["3pass", "1pass"])
def test_alibi_is_causal_attention_with_linear_biases(passes):
    c = load_cascade(CASCADES / f"attention-alibi-{passes}.yaml")
    extra = {"M0": 16} if passes == "1pass" else {}
    shapes = resolve_shapes(c, {**SMALL, **extra})
    x = random_inputs(c, shapes, seed=4)
    x["SLOPE"] = np.array(2.0**-1)  # the first of 8 heads' slopes, 2^(-8h/H)
    m = np.arange(64)[:, None]
    p = np.arange(48)[None, :] + 64 - 48  # query p sits at position p + M - P
    want = softmax_av(x["K"].T @ x["Q"] + 0.5 * (m - p), x["V"], m <= p)
    got = evaluate(c, x, shapes)["AV"]
    assert np.max(np.abs(got - want)) <= 1e-12 * np.max(np.abs(want))
    unbiased = softmax_av(x["K"].T @ x["Q"], x["V"], m <= p)
    assert np.max(np.abs(unbiased - want)) > 1e-2
    assert analyze_passes(c).max_passes == (3 if passes == "3pass" else 1)


def test_alibi_bias_costs_a_mac_and_an_add_per_kept_logit():
    c = load_cascade(CASCADES / "attention-alibi-3pass.yaml")
    shapes = resolve_shapes(c, {"M": 1024, "P": 1024})
    kept = 1024 * 1025 // 2  # causal prefill: m <= p
    assert counts(c, shapes)["QKB"] == {"mac": kept, "add": kept}
