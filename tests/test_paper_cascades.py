"""The paper-form cascades of tests/data/paper_cascades/ (test data for the mapper): each is
parsed, run by the cascade evaluator on random inputs at small shapes and compared with a
numpy reference written from the paper's own definition (rows are tokens, as the papers
write X, Q K^T, softmax over the last axis: never the cascade's Einsums or its layout), and
its passes are checked against those the paper's form implies. Nothing here maps or
simulates them: they are written before anyone looks at mapping results."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from simulator.cascade.execute import evaluate, random_inputs
from simulator.cascade.parse import load_cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade.shapes import resolve_shapes

from .conftest import DATA

PAPER = DATA / "paper_cascades"
NAMES = sorted(p.stem for p in PAPER.glob("*.yaml"))
# Both sides run in float64, so they differ by rounding (about 1e-14 here): 1e-9 (tighter
# than the 1e-5 of `compare`) still tells apart forms 1e-5 cannot, e.g. the exact GELU from
# its tanh approximation (4.7e-4 at worst, 2e-6 of this output).
RTOL = 1e-9
# The ranks the workload sizes (mappings/auto/binder.yaml: keys, queries, embed,
# value_embed, group, window); every other rank is sized by --shape.
WORKLOAD_RANKS = {"M", "P", "E", "F", "G", "W"}


def _load(name: str):
    return load_cascade(PAPER / f"{name}.yaml")


def _run(name: str, shapes: dict[str, int] | None = None, seed: int = 0, scale: float = 1.0):
    """(inputs, every tensor, resolved shapes) of the cascade on normal random inputs."""
    cascade = _load(name)
    resolved = resolve_shapes(cascade, shapes or {})
    inputs = random_inputs(cascade, resolved, seed=seed, scale=scale)
    return inputs, evaluate(cascade, inputs, resolved), resolved


def _evaluate(name: str, inputs: dict[str, np.ndarray], shapes: dict[str, int] | None = None):
    cascade = _load(name)
    return evaluate(cascade, inputs, resolve_shapes(cascade, shapes or {}))


def _assert_close(out: np.ndarray, ref: np.ndarray, rtol: float = RTOL) -> None:
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert np.isfinite(ref).all()
    assert np.isfinite(out).all()
    err = np.max(np.abs(out - ref))
    assert err <= rtol * np.max(np.abs(ref)), (err, np.max(np.abs(ref)))


def _softmax(s: np.ndarray) -> np.ndarray:
    """softmax over the last axis (the keys); -inf entries get weight 0."""
    z = np.exp(s - s.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def _silu(z: np.ndarray) -> np.ndarray:
    return z / (1.0 + np.exp(-z))  # Swish_1 (Ramachandran et al. 2017)


# ---- the files and their README ----------------------------------------------------------


def test_the_set_is_complete_and_documented():
    readme = (PAPER / "README.md").read_text()
    assert 10 <= len(NAMES) <= 16, NAMES
    for name in NAMES:
        assert f"`{name}.yaml`" in readme, name


@pytest.mark.parametrize("name", NAMES)
def test_parses_with_an_example_extent_for_every_rank(name):
    cascade = _load(name)
    assert cascade.name == name
    given = {rank for rank, _ in cascade.shapes}
    assert set(cascade.shape_names()) <= given, set(cascade.shape_names()) - given
    for rank in cascade.shape_names():
        assert re.fullmatch(r"[A-Z][A-Z0-9]*", rank), rank


@pytest.mark.parametrize("name", NAMES)
def test_readme_says_which_ranks_the_workload_sizes(name):
    """The README's row for the file: its workload column names exactly the cascade's ranks
    of binder.yaml, its --shape column every other rank and size parameter."""
    row = next(
        line
        for line in (PAPER / "README.md").read_text().splitlines()
        if line.startswith(f"| `{name}.yaml`")
    )
    workload, by_shape = (set(re.findall(r"\b[A-Z][A-Z0-9]*\b", c)) for c in row.split(" | ")[4:6])
    ranks = set(_load(name).shape_names())
    assert workload == ranks & WORKLOAD_RANKS, (workload, ranks)
    assert by_shape == ranks - WORKLOAD_RANKS, (by_shape, ranks)


# ---- 1. softmax attention as written: 3 passes, and the safe softmax in 2 ------------------

ATTN = {"M": 48, "P": 20, "E": 16, "F": 12}


def _attention(q, k, v, mask=None):
    """Vaswani et al. 2017, eq. 1, rows = tokens: softmax(q k^T / sqrt(d_k)) v."""
    s = q @ k.T / math.sqrt(q.shape[1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    return _softmax(s) @ v


@pytest.mark.parametrize("name", ["vaswani-attention-3pass", "safe-softmax-attention-2pass"])
@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_softmax_attention(name, scale):
    # At scale 30 the logits have a standard deviation of 900: exp overflows (beyond 709)
    # unless the maximum is subtracted first.
    inputs, out, _ = _run(name, ATTN, seed=1, scale=scale)
    ref = _attention(inputs["Q"].T, inputs["K"].T, inputs["V"].T)
    _assert_close(out["AV"], ref.T)


# ---- 2. differential attention -------------------------------------------------------------

DIFF = {"M": 40, "P": 24, "E": 8, "F": 16, "LAYER": 5}


def _diff_inputs(seed: int):
    cascade = _load("diff-attention-3pass")
    shapes = resolve_shapes(cascade, DIFF)
    inputs = random_inputs(cascade, shapes, seed=seed)
    rng = np.random.default_rng(seed + 100)
    for name in ("LQ1", "LK1", "LQ2", "LK2"):  # initialised N(0, 0.1) in the paper
        inputs[name] = 0.3 * rng.standard_normal(DIFF["E"])
    return inputs


def _diff_attention(x, layer):
    # Ye et al. 2024, eq. 2 (lambda) and eq. 1 (DiffAttn), rows = tokens.
    lam_init = 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))
    lam = math.exp(x["LQ1"] @ x["LK1"]) - math.exp(x["LQ2"] @ x["LK2"]) + lam_init
    q1, q2, k1, k2, v = (x[n].T for n in ("Q1", "Q2", "K1", "K2", "V"))
    d = q1.shape[1]
    maps = _softmax(q1 @ k1.T / math.sqrt(d)) - lam * _softmax(q2 @ k2.T / math.sqrt(d))
    return maps @ v, lam


@pytest.mark.parametrize("seed", [0, 1])
def test_diff_attention(seed):
    inputs = _diff_inputs(seed)
    out = _evaluate("diff-attention-3pass", inputs, DIFF)
    ref, lam = _diff_attention(inputs, DIFF["LAYER"])
    assert abs(lam) > 0.1  # the second map weighs in
    assert out["LAM"] == pytest.approx(lam, rel=1e-12)
    _assert_close(out["AV"], ref.T)


# ---- 3. sliding window with attention sinks ------------------------------------------------


def _sink_window_mask(n_keys: int, n_queries: int, window: int, sinks: int) -> np.ndarray:
    # Xiao et al. 2023, sec. 3.2: query at position t keeps the first `sinks` keys and the
    # last `window` keys up to t (the queries are the last n_queries of the n_keys tokens).
    t = np.arange(n_queries)[:, None] + n_keys - n_queries
    m = np.arange(n_keys)[None, :]
    return (m <= t) & ((m < sinks) | (m > t - window))


SINK_SHAPES = [
    {"M": 64, "P": 64, "W": 16, "SINK": 4},  # prefill: early queries have no sink left
    {"M": 64, "P": 8, "W": 16, "SINK": 4},  # a chunk of late queries
    {"M": 64, "P": 1, "W": 16, "SINK": 4},  # decode
    {"M": 40, "P": 40, "W": 3, "SINK": 5},  # window shorter than the sinks
    {"M": 40, "P": 40, "W": 64, "SINK": 4},  # window over everything: causal attention
]


@pytest.mark.parametrize("shapes", SINK_SHAPES, ids=lambda s: "-".join(map(str, s.values())))
def test_sink_window_attention(shapes):
    shapes = {"E": 16, "F": 12, **shapes}
    inputs, out, _ = _run("sink-window-attention-3pass", shapes, seed=2)
    mask = _sink_window_mask(shapes["M"], shapes["P"], shapes["W"], shapes["SINK"])
    ref = _attention(inputs["Q"].T, inputs["K"].T, inputs["V"].T, mask)
    _assert_close(out["AV"], ref.T)


def test_sink_window_sinks_matter_and_no_masked_value_is_read():
    shapes = {"M": 64, "P": 8, "E": 16, "F": 12, "W": 16, "SINK": 4}
    cascade = _load("sink-window-attention-3pass")
    resolved = resolve_shapes(cascade, shapes)
    inputs = random_inputs(cascade, resolved, seed=3)
    # Every query here has both sinks and a window (t >= W): with the removed points NaN
    # the output is the same, so no kept point reads a masked one.
    out = evaluate(cascade, inputs, resolved, unkept=float("nan"))["AV"]
    q, k, v = inputs["Q"].T, inputs["K"].T, inputs["V"].T
    ref = _attention(q, k, v, _sink_window_mask(64, 8, 16, 4))
    _assert_close(out, ref.T)
    window_only = _attention(q, k, v, _sink_window_mask(64, 8, 16, 0))
    assert np.max(np.abs(ref - window_only)) > 100 * RTOL * np.max(np.abs(ref))


# ---- 4. multi-head latent attention at decode ----------------------------------------------

MLA = {"M": 40, "G": 3, "E": 8, "F": 6, "L": 10, "R": 4, "D": 7}


def _mla(x):
    """DeepSeek-V2 eq. 10-11 and 16-19, not absorbed: per head i the keys
    [W^UK_i c_j; k^R_j] and values W^UV_i c_j are formed, softmax over the cached j of
    q_i . k_j / sqrt(d_h + d_h^R), then u = W^O [o_1; ...; o_nh]. Rows = tokens."""
    c, kr = x["C"].T, x["KR"].T  # [cached tokens, d_c], [cached tokens, d_h^R]
    heads = []
    for i in range(x["QC"].shape[1]):
        k = np.concatenate([c @ x["WUK"][:, i, :].T, kr], axis=1)  # eq. 10, 17
        v = c @ x["WUV"][:, i, :].T  # eq. 11
        q = np.concatenate([x["QC"][:, i, :].T, x["QR"][:, i, :].T], axis=1)  # eq. 16
        heads.append(_softmax(q @ k.T / math.sqrt(q.shape[1])) @ v)  # eq. 18
    wo = x["WO"].reshape(-1, x["WO"].shape[2])  # rows (f, head), as the concatenation
    return np.stack(heads, axis=2).reshape(heads[0].shape[0], -1) @ wo  # eq. 19


@pytest.mark.parametrize("queries", [1, 3])
def test_mla_decode(queries):
    inputs, out, _ = _run("mla-decode-3pass", {**MLA, "P": queries}, seed=4)
    _assert_close(out["U"], _mla(inputs).T)


def test_mla_rope_part_matters():
    inputs, out, _ = _run("mla-decode-3pass", {**MLA, "P": 1}, seed=5)
    without = _mla({**inputs, "QR": np.zeros_like(inputs["QR"])})
    assert np.max(np.abs(out["U"] - without.T)) > 100 * RTOL * np.max(np.abs(out["U"]))


# ---- 5. an element-wise score function normalised by its row sum ---------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_relu2_attention(seed):
    inputs, out, _ = _run("relu2-attention-2pass", ATTN, seed=seed)
    q, k, v = inputs["Q"].T, inputs["K"].T, inputs["V"].T
    # Katharopoulos et al. 2020, eq. 2 with sim(q, k) = relu(q.k / sqrt(d))^2.
    sim = np.maximum(q @ k.T / math.sqrt(q.shape[1]), 0.0) ** 2
    ref = (sim @ v) / sim.sum(axis=1, keepdims=True)
    _assert_close(out["AV"], ref.T)


# ---- 6. LoRA --------------------------------------------------------------------------------


def test_lora_linear():
    shapes = {"P": 10, "D": 12, "O": 9, "R": 3, "ALPHA": 16}
    inputs, out, _ = _run("lora-linear", shapes, seed=6)
    # Hu et al. 2021, eq. 3 and sec. 4.1: the merged weight W = W0 + (alpha / r) Delta W,
    # Delta W = B A (here, rows = tokens: A [d_in, r], B [r, d_out]).
    merged = inputs["W0"] + inputs["A"] @ inputs["B"] * (16 / 3)
    _assert_close(out["Y"], (inputs["X"].T @ merged).T)


# ---- 7. gated FFNs --------------------------------------------------------------------------

FFN = {"P": 10, "D": 12, "N": 20, "O": 12}


def _gelu(z: np.ndarray) -> np.ndarray:
    # Hendrycks and Gimpel 2016: x Phi(x), Phi the standard normal CDF.
    return z * 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))


@pytest.mark.parametrize(("name", "act"), [("swiglu-ffn", _silu), ("geglu-ffn", _gelu)])
def test_glu_ffn(name, act):
    inputs, out, _ = _run(name, FFN, seed=7)
    x = inputs["X"].T
    # Shazeer 2020, eq. 6: (act(x W) (x) x V) W2.
    ref = (act(x @ inputs["W"]) * (x @ inputs["V"])) @ inputs["W2"]
    _assert_close(out["Y"], ref.T)


# ---- 8. whole sublayers ---------------------------------------------------------------------

LAYER = {"M": 20, "D": 12, "E": 4, "F": 5, "H": 3}


def _rmsnorm(x, g, eps=1e-6):
    # Zhang and Sennrich 2019, eq. 4 (eps under the root, as LLaMA): rows = tokens.
    return x / np.sqrt(np.mean(x**2, axis=1, keepdims=True) + eps) * g


def _prenorm_attention_layer(x, x_all, w, causal=True):
    """x + MultiHead(RMSNorm(x)) over the keys x_all (x = its last rows), causal or not."""
    xn, kn = _rmsnorm(x, w["GN"]), _rmsnorm(x_all, w["GN"])
    t = np.arange(len(x))[:, None] + len(x_all) - len(x)
    mask = (np.arange(len(x_all))[None, :] <= t) | (not causal)
    heads = [
        _attention(xn @ w["WQ"][:, :, h], kn @ w["WK"][:, :, h], kn @ w["WV"][:, :, h], mask)
        for h in range(w["WQ"].shape[2])
    ]
    concat = np.stack(heads, axis=2).reshape(len(x), -1)  # columns (f, head)
    return x + concat @ w["WO"].reshape(-1, w["WO"].shape[2])


@pytest.mark.parametrize("queries", [20, 6])
def test_prenorm_attention_layer(queries):
    # Prefill (P = M: the same tokens as queries and keys) and the last few tokens.
    shapes = {**LAYER, "P": queries}
    cascade = _load("prenorm-attention-layer-3pass")
    resolved = resolve_shapes(cascade, shapes)
    inputs = random_inputs(cascade, resolved, seed=8)
    inputs["XQ"] = inputs["XK"][:, LAYER["M"] - queries :].copy()
    out = evaluate(cascade, inputs, resolved)["Y"]
    ref = _prenorm_attention_layer(inputs["XQ"].T, inputs["XK"].T, inputs)
    _assert_close(out, ref.T)
    full = _prenorm_attention_layer(inputs["XQ"].T, inputs["XK"].T, inputs, causal=False)
    assert np.max(np.abs(ref - full)) > 100 * RTOL * np.max(np.abs(ref))  # the mask is live


@pytest.mark.parametrize("offset", [0.0, 50.0])
def test_layernorm_swiglu_ffn(offset):
    # Inputs with a large common offset: the variance as eq. 3 writes it (deviations from
    # the mean) stays exact where E[x^2] - mu^2 would cancel.
    cascade = _load("layernorm-swiglu-ffn")
    shapes = resolve_shapes(cascade, {"P": 8, "D": 12, "N": 20})
    inputs = random_inputs(cascade, shapes, seed=9)
    inputs["X"] = inputs["X"] + offset
    out = evaluate(cascade, inputs, shapes)["Y"]
    x = inputs["X"].T
    # Ba et al. 2016, eq. 3 (np.var: the mean squared deviation), then Shazeer 2020, eq. 6.
    xn = (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5)
    xn = xn * inputs["GAIN"] + inputs["BIAS"]
    ffn = (_silu(xn @ inputs["W"]) * (xn @ inputs["V"])) @ inputs["W2"]
    _assert_close(out, (x + ffn).T)


# ---- passes ---------------------------------------------------------------------------------

# Passes per rank that the paper's form implies (section III of the FuseMax paper: one more
# each time the rank is walked again after a full reduction over it), with the reductions
# that separate them:
# * softmax as written (Vaswani, DiffAttn, the sink window, MLA): the row maximum, then the
#   exponentials and their sum, then the division (whose output A is walked over M again by
#   A V): 3 over M, split at GM and SD. Differential attention has two such softmaxes side by
#   side (its two maxima and sums are in the same passes); the sink window two disjoint
#   regions of M, also side by side.
# * the safe softmax with the division after A V: maximum, then everything else (the
#   division reads no key): 2 over M.
# * squared ReLU normalised by its row sum: the sum, then the weights and A V: 2 over M.
# ---- Performer's FAVOR+ attention, as written and as its code stabilises it ---------------


def _favor(q, k, v, w, stabilised: bool):
    """Choromanski et al. 2021, rows = tokens: phi(x) = exp(w x - |x|^2 / 2) of the
    inputs scaled by d^(-1/4); Att = D^-1 (phi(Q) (phi(K)^T V)), D = diag(phi(Q) phi(K)^T 1).
    Stabilised as the paper's code: a query's features less their maximum, the keys' less
    the maximum over every key and feature (both cancel in D^-1)."""
    d = q.shape[1]
    qs, ks = q / d**0.25, k / d**0.25
    lq = qs @ w.T - (qs**2).sum(axis=1, keepdims=True) / 2
    lk = ks @ w.T - (ks**2).sum(axis=1, keepdims=True) / 2
    if stabilised:
        lq = lq - (qs @ w.T).max(axis=1, keepdims=True)
        lk = lk - (ks @ w.T).max()
    fq, fk = np.exp(lq), np.exp(lk)
    return (fq @ (fk.T @ v)) / (fq @ fk.sum(axis=0))[:, None]


@pytest.mark.parametrize("name", ["performer-attention", "performer-stabilised-attention-2pass"])
@pytest.mark.parametrize("seed", [0, 5])
def test_performer_attention(name, seed):
    inputs, out, _shapes = _run(name, seed=seed)
    q, k, v = (inputs[t].T for t in ("Q", "K", "V"))
    ref = _favor(q, k, v, inputs["W"], stabilised="stabilised" in name)
    _assert_close(out["Y"], ref.T)


def test_performer_approximates_softmax_attention_and_its_stabilisers_cancel():
    """With many random features FAVOR+ comes near softmax attention (lemma 1: an unbiased
    estimate of the softmax kernel), and the stabilised form computes the same numbers."""
    shapes = {"M": 24, "P": 16, "E": 4, "F": 3, "R": 20000}
    inputs, _out, _ = _run("performer-attention", shapes, seed=3, scale=0.5)
    inputs["W"] = np.random.default_rng(4).standard_normal((20000, 4))  # w_r ~ N(0, I_d)
    out = _evaluate("performer-attention", inputs, shapes)
    q, k, v = (inputs[t].T for t in ("Q", "K", "V"))
    exact = _attention(q, k, v)
    assert np.max(np.abs(out["Y"].T - exact)) < 0.05 * np.max(np.abs(exact))
    stabilised = _evaluate("performer-stabilised-attention-2pass", inputs, shapes)
    _assert_close(stabilised["Y"], out["Y"], rtol=1e-9)


# ---- Luna: a pack softmax and an unpack softmax in one cascade ----------------------------


@pytest.mark.parametrize("seed", [0, 9])
def test_luna_attention(seed):
    """Ma et al. 2021, eqs. 4-6, rows = tokens: Y_P = softmax(P_q K^T / sqrt(d)) V, then
    Y_X = softmax(Q (Y_P W_k)^T / sqrt(d)) (Y_P W_v)."""
    inputs, out, _ = _run("luna-attention-3pass", seed=seed)
    pq, k, v, q = (inputs[t].T for t in ("PQ", "K", "V", "Q"))
    yp = _attention(pq, k, v)
    ref = _attention(q, yp @ inputs["WK"], yp @ inputs["WV"])
    _assert_close(out["Y"], ref.T)


@pytest.mark.parametrize("seed", [37, 4])
def test_agent_attention(seed):
    """Han et al. 2024, eqs. 3-4, rows = tokens: agents A = the means of L equal segments of
    the queries; V_A = softmax(A K^T / sqrt(d)) V, O = softmax(Q A^T / sqrt(d)) V_A."""
    cascade = _load("agent-attention-3pass")
    shapes = resolve_shapes(cascade, {})
    inputs = random_inputs(cascade, shapes, seed=seed)
    inputs["Q"] = inputs["K"].copy()  # self-attention: the queries' tokens are the keys'
    out = evaluate(cascade, inputs, shapes)
    q, k, v = (inputs[t].T for t in ("Q", "K", "V"))
    n_agents, e = shapes["L"], shapes["E"]
    agents = q.reshape(n_agents, -1, e).mean(axis=1)
    va = _softmax(agents @ k.T / math.sqrt(e)) @ v
    _assert_close(out["O"], (_softmax(q @ agents.T / math.sqrt(e)) @ va).T)


def test_memory_compressed_attention():
    """Liu et al. 2018, sec. 4.2.2: keys and values through a strided convolution (kernel =
    stride = S) over the sequence, then softmax(Q K_c^T / sqrt(d)) V_c, rows = tokens."""
    inputs, out, shapes = _run("memory-compressed-attention-3pass", seed=6)
    q, k, v = (inputs[t].T for t in ("Q", "K", "V"))  # [P, E], [M, D], [M, C]
    windows, taps = shapes["N"], shapes["S"]

    def conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:  # x [M, in], w [in, S, out]
        return np.einsum("gsi,iso->go", x.reshape(windows, taps, x.shape[1]), w)

    kc, vc = conv(k, inputs["WCK"]), conv(v, inputs["WCV"])
    ref = _softmax(q @ kc.T / math.sqrt(shapes["E"])) @ vc
    _assert_close(out["AV"], ref.T)


# * MLA: the latent cache is contracted over L as keys (SC), then walked over L again as
#   values (OL, after the softmax that SC feeds): 2 over L.
# * LoRA, SwiGLU, GEGLU: contractions only, none walking a rank it waits on: 1 everywhere.
# * the pre-norm attention layer: D is reduced by the mean square (MSQ), walked to normalise,
#   reduced by the projections (Q), then walked again to write the output and residual (ATT
#   and Y index D): 3 over D; M as the causal softmax (the filters count as full reductions).
# * Performer as written: K'^T V and K'^T 1 reduce the keys once, the queries' features
#   meet them after: 1 everywhere. Stabilised: the keys' maximum over every key and feature
#   (GK) before their features, a query's maximum over its features (GQ) before its own:
#   2 over M and over R.
# * Luna: each softmax as written, the pack's over the sequence M, the unpack's over the
#   packed tokens L: 3 over each.
# * agent attention: the agents' softmax over the keys M as written (3); the agents pooled
#   from the queries' segments (a walk over P) before the queries' scores against them walk
#   P again: 2 over P.
# * memory-compressed attention: its softmax walks the windows N, M's outer part, after the
#   convolution summed each window's tokens away: 2 over M, as 2-pass attention's chunk
#   statistics walk M1 (the softmax as written is 3 over the compressed keys N).
# * LayerNorm then SwiGLU: mean, variance (deviations from the mean), normalise and project,
#   output and residual: 4 over D.
EXPECTED_PASSES = {
    "vaswani-attention-3pass": {"M": (3, ("GM", "SD")), "E": (1, ()), "F": (1, ())},
    "safe-softmax-attention-2pass": {"M": (2, ("GM",)), "E": (1, ()), "F": (1, ())},
    "diff-attention-3pass": {"M": (3, ("GM1", "SD1")), "E": (1, ()), "F": (1, ())},
    "sink-window-attention-3pass": {"M": (3, ("GMS", "SDS")), "E": (1, ()), "F": (1, ())},
    "mla-decode-3pass": {
        "M": (3, ("GM", "SD")),
        "L": (2, ("SC",)),
        "E": (1, ()),
        "R": (1, ()),
        "G": (1, ()),
        "F": (1, ()),
        "D": (1, ()),
    },
    "relu2-attention-2pass": {"M": (2, ("SD",)), "E": (1, ()), "F": (1, ())},
    "lora-linear": {"D": (1, ()), "R": (1, ()), "O": (1, ()), "P": (1, ())},
    "swiglu-ffn": {"D": (1, ()), "N": (1, ()), "O": (1, ())},
    "geglu-ffn": {"D": (1, ()), "N": (1, ()), "O": (1, ())},
    "prenorm-attention-layer-3pass": {
        "D": (3, ("MSQ", "Q")),
        "M": (3, ("GM", "SD")),
        "E": (1, ()),
        "F": (1, ()),
        "H": (1, ()),
    },
    "layernorm-swiglu-ffn": {"D": (4, ("MU", "VAR", "XW")), "N": (1, ())},
    "performer-attention": {"M": (1, ()), "R": (1, ()), "E": (1, ()), "F": (1, ())},
    "luna-attention-3pass": {"M": (3, ("GM1", "SD1")), "L": (3, ("GM2", "SD2")), "F2": (1, ())},
    "agent-attention-3pass": {
        "M": (3, ("GM1", "SD1")),
        "P": (2, ()),
        "E": (1, ()),
        "F": (1, ()),
    },
    "memory-compressed-attention-3pass": {"M": (2, ("GM",)), "P": (1, ()), "E": (1, ())},
    "performer-stabilised-attention-2pass": {
        "M": (2, ("GK",)),
        "R": (2, ("GQ",)),
        "E": (1, ()),
        "F": (1, ()),
    },
}


def test_every_file_has_expected_passes():
    assert sorted(EXPECTED_PASSES) == NAMES


@pytest.mark.parametrize(("name", "ranks"), EXPECTED_PASSES.items())
def test_passes(name, ranks):
    report = analyze_passes(_load(name))
    per_rank = {group: (n, why) for group, n, why in report.per_rank}
    for rank, (passes, boundaries) in ranks.items():
        assert per_rank[rank][0] == passes, (name, rank, per_rank)
        if boundaries:
            assert per_rank[rank][1] == boundaries, (name, rank, per_rank)
    assert report.max_passes == max(n for n, _ in ranks.values())
    assert report.max_passes == max(n for n, _ in per_rank.values())
