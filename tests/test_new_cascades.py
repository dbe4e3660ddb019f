"""The cascades sigmoid-attention, linear-attention, rmsnorm, rmsnorm-matmul, gelu-mlp and
attention-bias-softcap-{3,1}pass: each run by the cascade evaluator on random inputs and
checked against the same function written here in numpy (from the papers' definitions,
never from the cascade's own Einsums); their passes; and that every operation they use is
declared by a PE array of each shipped architecture."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.cascade.execute import compare, evaluate, random_inputs
from simulator.cascade.ops import ops_per_point
from simulator.cascade.parse import load_cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade.shapes import resolve_shapes
from simulator.spec.arch import missing_operations
from simulator.spec.arch_file import load_architecture

from .conftest import CASCADES, ROOT

# Distinct extents, so that a transposed rank cannot go unnoticed.
ATTENTION_SHAPES = {"M": 96, "P": 40, "E": 16, "F": 24}
RTOL = 1e-9


def _run(name: str, shapes: dict[str, int], seed: int = 0, scale: float = 1.0):
    cascade = load_cascade(CASCADES / f"{name}.yaml")
    resolved = resolve_shapes(cascade, shapes)
    inputs = random_inputs(cascade, resolved, seed=seed, scale=scale)
    return inputs, evaluate(cascade, inputs, resolved)


def _assert_close(out: np.ndarray, ref: np.ndarray, rtol: float = RTOL) -> None:
    assert out.shape == ref.shape
    assert np.isfinite(out).all()
    assert np.max(np.abs(out - ref)) <= rtol * np.max(np.abs(ref))


def _softmax_over_keys(logits: np.ndarray) -> np.ndarray:
    """Column softmax of an [M, P] array (keys along axis 0), stabilised by the maximum."""
    z = logits - logits.max(axis=0, keepdims=True)
    w = np.exp(z)
    return w / w.sum(axis=0, keepdims=True)


# ---- sigmoid attention -------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_sigmoid_attention(seed):
    inputs, out = _run("sigmoid-attention", ATTENTION_SHAPES, seed=seed)
    q, k, v = inputs["Q"], inputs["K"], inputs["V"]
    n_keys, d = k.shape[1], q.shape[0]
    # Ramapuram et al. 2024: sigma(q.k / sqrt(d) + b), b = -log(n), then weights times V.
    logits = np.einsum("em,ep->mp", k, q) / math.sqrt(d) - math.log(n_keys)
    weights = 0.5 * (1.0 + np.tanh(0.5 * logits))  # = 1 / (1 + exp(-logits))
    ref = np.einsum("mp,fm->fp", weights, v)
    _assert_close(out["AV"], ref)
    assert out["AV"].shape == (ATTENTION_SHAPES["F"], ATTENTION_SHAPES["P"])


def test_sigmoid_attention_bias_follows_the_key_count():
    # --shape M changes the bias log(M) with the rank: the weights' mean moves accordingly.
    _, small = _run("sigmoid-attention", {**ATTENTION_SHAPES, "M": 32})
    _, large = _run("sigmoid-attention", {**ATTENTION_SHAPES, "M": 512})
    assert small["S"].mean() > large["S"].mean() * 4


# ---- linear attention --------------------------------------------------------------------


def _elu_plus_one(x: np.ndarray) -> np.ndarray:
    # elu(x) = x for x > 0, exp(x) - 1 otherwise (Clevert et al. 2016, alpha = 1).
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))) + 1.0


@pytest.mark.parametrize("seed", [0, 1])
def test_linear_attention(seed):
    inputs, out = _run("linear-attention", ATTENTION_SHAPES, seed=seed)
    q, k, v = inputs["Q"], inputs["K"], inputs["V"]
    # Katharopoulos et al. 2020, eq. 2 with sim(q, k) = phi(q).phi(k): the quadratic form,
    # an M x P similarity matrix normalised over the keys (the cascade never builds it).
    sim = np.einsum("em,ep->mp", _elu_plus_one(k), _elu_plus_one(q))
    ref = np.einsum("mp,fm->fp", sim / sim.sum(axis=0, keepdims=True), v)
    _assert_close(out["AV"], ref)


def test_linear_attention_feature_map_is_elu_plus_one():
    inputs, out = _run("linear-attention", ATTENTION_SHAPES)
    k = inputs["K"]
    expected = np.where(k > 0, k + 1.0, np.exp(k))
    _assert_close(out["PK"], expected, rtol=1e-15)
    assert (out["PK"] > 0).all()


# ---- RMSNorm, RMSNorm + matmul -----------------------------------------------------------

NORM_SHAPES = {"E": 48, "P": 20}


def _rmsnorm(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    rms = np.sqrt(np.mean(x**2, axis=0) + 1e-6)
    return x / rms[None, :] * g[:, None]


@pytest.mark.parametrize("scale", [1.0, 1e-3])
def test_rmsnorm(scale):
    # At scale 1e-3 the mean square (1e-6) is comparable to eps: eps must be there.
    inputs, out = _run("rmsnorm", NORM_SHAPES, seed=2, scale=scale)
    _assert_close(out["Y"], _rmsnorm(inputs["X"], inputs["G"]))


def test_rmsnorm_matmul():
    inputs, out = _run("rmsnorm-matmul", {**NORM_SHAPES, "F": 36}, seed=3)
    ref = _rmsnorm(inputs["X"], inputs["G"]).T @ inputs["W"]  # [P, F]
    _assert_close(out["Z"], ref.T)


# ---- GELU MLP ----------------------------------------------------------------------------

MLP_SHAPES = {"E": 24, "P": 12, "F": 64, "O": 20}


def _gelu_tanh(h: np.ndarray) -> np.ndarray:
    # Hendrycks and Gimpel 2016, section 2: the tanh approximation.
    return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))


def test_gelu_mlp():
    inputs, out = _run("gelu-mlp", MLP_SHAPES, seed=4)
    x, w1, w2 = inputs["X"], inputs["W1"], inputs["W2"]
    ref = w2.T @ _gelu_tanh(w1.T @ x)  # [O, P]
    _assert_close(out["Z"], ref)


def test_gelu_mlp_activation_is_close_to_the_exact_gelu():
    # The approximation, not the exact x Phi(x): within 5e-4 everywhere (about 4.7e-4 at
    # worst, near |x| = 2.2), exact at 0 and in both tails.
    _, out = _run("gelu-mlp", MLP_SHAPES, seed=4, scale=3.0)
    h = out["H"]
    exact = 0.5 * h * (1.0 + np.vectorize(math.erf)(h / math.sqrt(2.0)))
    assert np.max(np.abs(out["A"] - exact)) < 5e-4


# ---- attention with a bias and soft-capped logits ----------------------------------------

BIAS_SOFTCAP = ["attention-bias-softcap-3pass", "attention-bias-softcap-1pass"]


def _bias_softcap_attention(q, k, v, b, cap):
    # Logits K^T Q plus the bias, capped (Gemma 2: cap tanh(logits / cap)), softmax over keys.
    logits = np.einsum("em,ep->mp", k, q) + b
    return np.einsum("mp,fm->fp", _softmax_over_keys(cap * np.tanh(logits / cap)), v)


@pytest.mark.parametrize("name", BIAS_SOFTCAP)
@pytest.mark.parametrize(("cap", "scale"), [(50, 1.0), (5, 1.0), (5, 30.0)])
def test_bias_softcap_attention(name, cap, scale):
    # CAP = 5 at logits of standard deviation 4 (E = 16): the cap is far from linear; at
    # scale 30 the logits reach 1e4 and saturate at +-CAP.
    shapes = {**ATTENTION_SHAPES, "CAP": cap}
    if name.endswith("1pass"):
        shapes["M0"] = 32
    inputs, out = _run(name, shapes, seed=5, scale=scale)
    ref = _bias_softcap_attention(inputs["Q"], inputs["K"], inputs["V"], inputs["B"], cap)
    _assert_close(out["AV"], ref)


def test_bias_softcap_bias_matters():
    # A bias that favours one key per query makes that key's value dominate the output.
    cascade = load_cascade(CASCADES / "attention-bias-softcap-1pass.yaml")
    shapes = resolve_shapes(cascade, {**ATTENTION_SHAPES, "M0": 32})
    inputs = random_inputs(cascade, shapes, seed=6)
    favoured = np.arange(shapes["P"]) * 2 % shapes["M"]
    inputs["B"] = np.zeros_like(inputs["B"])
    inputs["B"][favoured, np.arange(shapes["P"])] = 100.0  # capped to about 50
    out = evaluate(cascade, inputs, shapes)["AV"]
    ref = _bias_softcap_attention(inputs["Q"], inputs["K"], inputs["V"], inputs["B"], 50)
    _assert_close(out, ref)
    _assert_close(out, inputs["V"][:, favoured], rtol=1e-6)


def test_bias_softcap_one_pass_equals_three_pass():
    three = load_cascade(CASCADES / "attention-bias-softcap-3pass.yaml")
    one = load_cascade(CASCADES / "attention-bias-softcap-1pass.yaml")
    result = compare(three, one, {**ATTENTION_SHAPES, "M0": 32}, seed=7)
    assert result.equivalent, result


# ---- passes ------------------------------------------------------------------------------

# From the definitions: sigmoid attention, linear attention and the GELU MLP reduce no rank
# that is walked again (1 pass); RMSNorm reduces E for the mean square, then walks E again to
# normalise (2 passes over E, also when a matmul follows: its contraction over E reads the
# normalised Y); the 3-pass attention walks M after its max and after its sum (3); the
# FlashAttention-2 recurrence walks it once (1).
EXPECTED_PASSES = {
    "sigmoid-attention": {"M": 1},
    "linear-attention": {"M": 1, "E": 1},
    "rmsnorm": {"E": 2},
    "rmsnorm-matmul": {"E": 2, "F": 1},
    "gelu-mlp": {"E": 1, "F": 1, "O": 1},
    "attention-bias-softcap-3pass": {"M": 3},
    "attention-bias-softcap-1pass": {"M": 1},
}


@pytest.mark.parametrize(("name", "ranks"), EXPECTED_PASSES.items())
def test_passes(name, ranks):
    report = analyze_passes(load_cascade(CASCADES / f"{name}.yaml"))
    per_rank = {group: n for group, n, _ in report.per_rank}
    for rank, passes in ranks.items():
        assert per_rank[rank] == passes, (name, rank, per_rank)
    assert report.max_passes == max(ranks.values()), (name, per_rank)


def test_pass_boundaries_are_the_reductions_the_definitions_name():
    def boundaries(name: str, rank: str) -> tuple[str, ...]:
        report = analyze_passes(load_cascade(CASCADES / f"{name}.yaml"))
        return next(why for group, _, why in report.per_rank if group == rank)

    assert boundaries("rmsnorm", "E") == ("MS",)
    assert boundaries("rmsnorm-matmul", "E") == ("MS",)
    assert boundaries("attention-bias-softcap-3pass", "M") == ("GM", "SD")


# ---- every operation runs on every shipped architecture ----------------------------------

ARCHS = ["fusemax", "flat", "h100"]


@pytest.fixture(scope="module")
def archs():
    return {name: load_architecture(ROOT / "arch" / f"{name}.yaml") for name in ARCHS}


@pytest.mark.parametrize("name", EXPECTED_PASSES)
@pytest.mark.parametrize("arch", ARCHS)
def test_operations_declared_on_every_shipped_architecture(archs, name, arch):
    cascade = load_cascade(CASCADES / f"{name}.yaml")
    for e in cascade.einsums:
        kinds = sorted(ops_per_point(cascade, e))
        assert missing_operations(kinds, archs[arch].arrays) is None, (e.name, kinds)


# ---- cross-entropy -------------------------------------------------------------------------


def test_cross_entropy():
    """The loss of each token: log sum_c exp(L[c]) - L[target], L = X W; the target a one-hot
    column of Y."""
    cascade = load_cascade(CASCADES / "cross-entropy.yaml")
    shapes = resolve_shapes(cascade, {"D": 16, "C": 40, "P": 12})
    inputs = random_inputs(cascade, shapes, seed=3)
    target = np.random.default_rng(3).integers(0, 40, size=12)
    inputs["Y"] = np.zeros((40, 12))
    inputs["Y"][target, np.arange(12)] = 1.0
    out = evaluate(cascade, inputs, shapes)["LOSS"]
    logits = np.einsum("dp,dc->cp", inputs["X"], inputs["W"])
    ref = np.log(np.exp(logits).sum(axis=0)) - logits[target, np.arange(12)]
    _assert_close(out, ref)


def test_cross_entropy_says_where_it_runs(run_cli):
    """Its log has a cost on the H100 (the SFU's log2) and none on FuseMax's or FLAT's PEs:
    `cascade passes` says so before any binding."""
    from simulator.cascade.__main__ import main as cascade_main

    code, out, err = run_cli(cascade_main, ["passes", str(CASCADES / "cross-entropy.yaml")])
    assert code == 0, err
    line = out.splitlines()[1]
    assert line.startswith("runs on the shipped architectures: h100, h200;")
    assert "fusemax (no array declares log)" in line and "flat (no array declares log)" in line
