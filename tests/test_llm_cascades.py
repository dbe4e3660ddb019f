"""LLM attention cascades: GQA, causal, sliding window, decode.

Expected values come from numpy written here (a per-query loop for attention, brute-force
grids for point counts, closed forms) or from `simulator.cascade.references`, which the
first test checks against the loop.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simulator.cascade.__main__ import main
from simulator.cascade.execute import compare, compare_reference, evaluate, random_inputs
from simulator.cascade.ops import cascade_ops, count_points
from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade.references import attention, attention_mask
from simulator.cascade.shapes import resolve_shapes
from simulator.support.errors import SpecError

from .conftest import CASCADES

NEW = [
    "attention-gqa-3pass",
    "attention-gqa-1pass",
    "attention-causal-3pass",
    "attention-causal-1pass",
    "attention-window-3pass",
    "attention-window-1pass",
    "attention-gqa-causal-3pass",
    "attention-gqa-causal-1pass",
    "attention-gqa-window-3pass",
    "attention-gqa-window-1pass",
    "attention-decode",
]


def _load(name: str):
    return load_cascade(CASCADES / f"{name}.yaml")


# --------------------------------------------------------------------------------------
# An independent attention: one query at a time, keys chosen by an explicit loop.


def _attention_loop(q, k, v, mask="none", window=None):
    """AV for q [E, P] or [E, G, P] against k [E, M], v [F, M], one (g, p) at a time."""
    grouped = q.ndim == 3
    q3 = q if grouped else q[:, None, :]
    out = np.zeros((v.shape[0], q3.shape[1], q3.shape[2]))
    for g in range(q3.shape[1]):
        for p in range(q3.shape[2]):
            t = p + k.shape[1] - q3.shape[2]  # the query's position: the last P of M
            keys = [
                m
                for m in range(k.shape[1])
                if mask == "none"
                or (mask == "causal" and m <= t)
                or (mask == "window" and t - window < m <= t)
            ]
            logits = np.array([q3[:, g, p] @ k[:, m] for m in keys])
            weights = np.exp(logits - logits.max())
            weights /= weights.sum()
            out[:, g, p] = sum(w * v[:, m] for w, m in zip(weights, keys, strict=True))
    return out if grouped else out[:, 0, :]


@pytest.mark.parametrize("mask, window", [("none", None), ("causal", None), ("window", 5)])
@pytest.mark.parametrize("heads", [None, 1, 3])
def test_reference_equals_a_per_query_loop(mask, window, heads):
    rng = np.random.default_rng(7)
    e, f, m, p = 6, 5, 13, 11
    q = rng.standard_normal((e, p) if heads is None else (e, heads, p))
    k, v = rng.standard_normal((e, m)), rng.standard_normal((f, m))
    ref = attention(q, k, v, mask, window)
    assert ref.shape == ((f, p) if heads is None else (f, heads, p))
    assert np.allclose(ref, _attention_loop(q, k, v, mask, window), rtol=1e-12, atol=1e-12)


def test_reference_of_a_query_without_keys_is_nan():
    # Six queries are the last six positions of three keys: queries 0-2 sit before the first
    # key (positions -3..-1) and see none, so no softmax exists for them.
    q, k, v = np.ones((2, 6)), np.ones((2, 3)), np.ones((2, 3))
    for mask in ("causal", "window"):
        out = attention(q, k, v, mask, 2)
        assert np.isnan(out[:, :3]).all() and np.isfinite(out[:, 3:]).all()


def test_a_decoded_query_sits_after_the_cache():
    # One query against 8 cached keys: causal keeps all 8, a window of 3 the last 3.
    assert attention_mask("causal", 8, 1).ravel().tolist() == [True] * 8
    assert attention_mask("window", 8, 1, 3).ravel().tolist() == [False] * 5 + [True] * 3


# --------------------------------------------------------------------------------------
# Every new cascade computes its reference.

CASES = [
    ("attention-gqa-3pass", {"M": 64, "P": 40, "E": 8, "F": 12, "G": 1}, None, None),
    ("attention-gqa-3pass", {"M": 64, "P": 37, "E": 8, "F": 12, "G": 4}, None, None),
    ("attention-gqa-1pass", {"M": 64, "M0": 16, "P": 40, "E": 8, "F": 12, "G": 1}, None, None),
    ("attention-gqa-1pass", {"M": 64, "M0": 16, "P": 37, "E": 8, "F": 12, "G": 4}, None, None),
    ("attention-decode", {"M": 96, "M0": 32, "E": 8, "F": 12, "G": 4}, None, None),
    ("attention-decode", {"M": 96, "M0": 32, "E": 8, "F": 12, "G": 1}, None, None),
    ("attention-causal-3pass", {"M": 64, "P": 64, "E": 8, "F": 12}, "causal", None),
    ("attention-causal-3pass", {"M": 64, "P": 48, "E": 8, "F": 12}, "causal", None),
    ("attention-causal-1pass", {"M": 64, "M0": 16, "P": 64, "E": 8, "F": 12}, "causal", None),
    # P not a multiple of M0; the last chunks fully masked for every query
    ("attention-causal-1pass", {"M": 64, "M0": 16, "P": 37, "E": 8, "F": 12}, "causal", None),
    ("attention-causal-1pass", {"M": 64, "M0": 16, "P": 20, "E": 8, "F": 12}, "causal", None),
    ("attention-causal-1pass", {"M": 48, "M0": 16, "P": 1, "E": 8, "F": 12}, "causal", None),
    ("attention-causal-1pass", {"M": 64, "M0": 1, "P": 30, "E": 8, "F": 12}, "causal", None),
    ("attention-causal-1pass", {"M": 64, "M0": 64, "P": 30, "E": 8, "F": 12}, "causal", None),
    # grouped and masked; fewer queries than keys (the queries are the last positions)
    ("attention-gqa-causal-3pass", {"M": 64, "P": 64, "E": 8, "F": 12, "G": 3}, "causal", None),
    ("attention-gqa-causal-3pass", {"M": 64, "P": 37, "E": 8, "F": 12, "G": 4}, "causal", None),
    (
        "attention-gqa-causal-1pass",
        {"M": 64, "M0": 16, "P": 37, "E": 8, "F": 12, "G": 4},
        "causal",
        None,
    ),
    (
        "attention-gqa-window-3pass",
        {"M": 64, "P": 37, "E": 8, "F": 12, "G": 4, "W": 20},
        "window",
        20,
    ),
    (
        "attention-gqa-window-1pass",
        {"M": 64, "M0": 16, "P": 64, "E": 8, "F": 12, "G": 3, "W": 9},
        "window",
        9,
    ),
    # decode: one query after the cache
    (
        "attention-gqa-causal-1pass",
        {"M": 48, "M0": 16, "P": 1, "E": 8, "F": 12, "G": 4},
        "causal",
        None,
    ),
    (
        "attention-gqa-window-1pass",
        {"M": 48, "M0": 16, "P": 1, "E": 8, "F": 12, "G": 4, "W": 7},
        "window",
        7,
    ),
    ("attention-window-3pass", {"M": 64, "P": 64, "E": 8, "F": 12, "W": 5}, "window", 5),
    ("attention-window-3pass", {"M": 64, "P": 50, "E": 8, "F": 12, "W": 40}, "window", 40),
    # window smaller than a chunk, larger than one, of one key, wider than all keys
    ("attention-window-1pass", {"M": 64, "M0": 16, "P": 64, "E": 8, "F": 12, "W": 5}, "window", 5),
    (
        "attention-window-1pass",
        {"M": 64, "M0": 16, "P": 50, "E": 8, "F": 12, "W": 40},
        "window",
        40,
    ),
    ("attention-window-1pass", {"M": 64, "M0": 16, "P": 64, "E": 8, "F": 12, "W": 1}, "window", 1),
    ("attention-window-1pass", {"M": 64, "M0": 8, "P": 64, "E": 8, "F": 12, "W": 99}, "window", 99),
    (
        "attention-window-1pass",
        {"M": 64, "M0": 16, "P": 61, "E": 8, "F": 12, "W": 16},
        "window",
        16,
    ),
]


def _max_rel(out, ref):
    return float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))


@pytest.mark.parametrize("name, shape, mask, window", CASES)
def test_cascade_equals_numpy_attention(name, shape, mask, window):
    cascade = _load(name)
    shapes = resolve_shapes(cascade, shape)
    inputs = random_inputs(cascade, shapes, seed=11)
    ref = _attention_loop(inputs["Q"], inputs["K"], inputs["V"], mask or "none", window)
    out = evaluate(cascade, inputs, shapes)["AV"]
    assert out.shape == ref.shape
    assert _max_rel(out, ref) <= 1e-5
    # Masked points of non-iterative Einsums as NaN: no kept point ever reads one.
    poisoned = evaluate(cascade, inputs, shapes, unkept=np.nan)["AV"]
    assert np.isfinite(poisoned).all() and _max_rel(poisoned, ref) <= 1e-5
    assert compare_reference(cascade, shape, seed=3).equivalent


@pytest.mark.parametrize("name", NEW)
def test_large_logits_stay_finite(name):
    # Inputs of standard deviation 40 with E = 16 give logits of order +-1e4.
    cascade = _load(name)
    shape = {"M": 64, "E": 16, "F": 8}
    shape.update({"P": 48} if name != "attention-decode" else {})
    shape.update({"M0": 16} if cascade.partitions else {})
    shape.update({"G": 3} if "G" in cascade.shape_names() else {})
    shape.update({"W": 20} if "W" in cascade.params else {})
    shapes = resolve_shapes(cascade, shape)
    inputs = random_inputs(cascade, shapes, seed=5, scale=40.0)
    logits = np.einsum("e...,em->...m", inputs["Q"], inputs["K"])
    assert np.abs(logits).max() > 5e3
    mask = cascade.reference.option("mask", "none")
    ref = _attention_loop(inputs["Q"], inputs["K"], inputs["V"], mask, shape.get("W"))
    out = evaluate(cascade, inputs, shapes)["AV"]
    assert np.isfinite(out).all()
    assert _max_rel(out, ref) <= 1e-5
    assert compare_reference(cascade, shape, seed=5, scale=40.0).equivalent


@pytest.mark.parametrize(
    "one, three, shape",
    [
        ("attention-causal-1pass", "attention-causal-3pass", {"M": 64, "M0": 16, "P": 45}),
        ("attention-window-1pass", "attention-window-3pass", {"M": 64, "M0": 16, "W": 21}),
        ("attention-gqa-1pass", "attention-gqa-3pass", {"M": 64, "M0": 16, "G": 2}),
    ],
)
def test_one_pass_equals_three_pass(one, three, shape):
    small = {"P": 32, "E": 8, "F": 8, **shape}
    result = compare(_load(three), _load(one), small, seed=2)
    assert result.equivalent, result


def test_decode_is_the_gqa_one_pass_cascade_with_one_query():
    decode, gqa = _load("attention-decode"), _load("attention-gqa-1pass")
    assert decode.einsums == gqa.einsums and decode.tensors == gqa.tensors
    assert dict(decode.shapes)["P"] == 1


# --------------------------------------------------------------------------------------
# Passes


@pytest.mark.parametrize(
    "name, passes, boundaries",
    [
        ("attention-causal-3pass", 3, ("GM", "SD")),
        ("attention-window-3pass", 3, ("GM", "SD")),
        ("attention-gqa-3pass", 3, ("GM", "SD")),
        ("attention-causal-1pass", 1, ()),
        ("attention-window-1pass", 1, ()),
        ("attention-gqa-1pass", 1, ()),
        ("attention-decode", 1, ()),
    ],
)
def test_passes_over_the_keys(name, passes, boundaries):
    report = analyze_passes(_load(name))
    per_rank = {g: (n, why) for g, n, why in report.per_rank}
    assert per_rank["M"] == (passes, boundaries)
    assert report.max_passes == passes
    live = {(f.tensor, f.rank): f.live_footprint for f in report.fibers}
    assert live[("QK" if passes == 3 else "BQK", "M")] == ("M" if passes == 3 else "M0")
    # Masks and query heads change no fibre along M: the same footprints as unmasked.
    plain = analyze_passes(_load("attention-1pass" if passes == 1 else "attention-3pass"))

    def along_m(r):
        return {
            (f.tensor, f.components, f.passes, f.live_footprint) for f in r.fibers if f.rank == "M"
        }

    assert along_m(report) == along_m(plain)


def test_cli_passes_accepts_a_size_parameter(run_cli):
    code, out, err = run_cli(main, ["passes", "attention-window-1pass", "--shape", "W=4K"])
    assert code == 0, err
    assert "1 pass(es)" in out


# --------------------------------------------------------------------------------------
# Broken on purpose: compare and the counts notice.


def _variant(tmp_path, name: str, *edits: tuple[str, str]) -> str:
    """The shipped cascade with each (old, new) text replaced once."""
    text = (CASCADES / f"{name}.yaml").read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / f"{name}-broken.yaml"
    path.write_text(text)
    return str(path)


CHUNK_FILTERS = {
    "RD": ("SLD[m1 : m1*M0 <= p + M - P, p] + SPD", "SLD[m1, p] + SPD"),
    "RNV": ("SLNV[f, m1 : m1*M0 <= p + M - P, p] + SPNV", "SLNV[f, m1, p] + SPNV"),
}


@pytest.mark.parametrize("einsum", sorted(CHUNK_FILTERS))
def test_dropping_a_running_update_filter_breaks_causal_attention(tmp_path, run_cli, einsum):
    # Without its filter the step happens on a fully masked chunk and resets the running
    # sum to 0 + 0 (SLD and SPD are 0 there) instead of keeping it.
    path = _variant(tmp_path, "attention-causal-1pass", CHUNK_FILTERS[einsum])
    shape = {"M": 64, "M0": 16, "P": 40, "E": 8, "F": 8}
    result = compare_reference(load_cascade(path), shape, seed=1)
    wrong = result.outputs[0]  # wrong numbers, or a denominator reset to 0 (not finite)
    assert not result.equivalent and (wrong.max_rel_error > 1e-2 or wrong.nonfinite_a > 0)
    cascade = load_cascade(path)
    shapes = resolve_shapes(cascade, shape)
    inputs = random_inputs(cascade, shapes, seed=1)
    # ... and the poisoned evaluation shows it reads masked points.
    assert not np.isfinite(evaluate(cascade, inputs, shapes, unkept=np.nan)["AV"]).all()
    argv = ["compare", path, "--reference", "--shape", "M=64,M0=16,P=40,E=8,F=8"]
    code, out, _ = run_cli(main, argv)
    assert code == 1 and "NOT equivalent" in out


WINDOW = {"M": 64, "M0": 16, "P": 64, "E": 8, "F": 8, "W": 10}
PER_KEY = "p : p + M - P < m1*M0 + m0 + W]"


def test_dropping_the_window_from_the_exponentials_breaks_window_attention(tmp_path):
    # SLN and SLD without the window: keys before it enter the denominator.
    path = _variant(
        tmp_path,
        "attention-window-1pass",
        (
            f"SLN[m1, m0, p] = exp(BQK[m1, m0 : m1*M0 + m0 <= p + M - P, {PER_KEY}",
            "SLN[m1, m0, p] = exp(BQK[m1, m0 : m1*M0 + m0 <= p + M - P, p]",
        ),
        (
            f"SLD[m1, p] = SLN[m1, m0 : m1*M0 + m0 <= p + M - P, {PER_KEY}",
            "SLD[m1, p] = SLN[m1, m0 : m1*M0 + m0 <= p + M - P, p]",
        ),
    )
    result = compare_reference(load_cascade(path), WINDOW, seed=1)
    assert not result.equivalent and result.outputs[0].max_rel_error > 1e-2


def test_a_running_update_reading_masked_chunks_is_caught_by_poisoning(tmp_path):
    # Without the window, RD steps on the chunks before the window too; there RD, SLD and
    # SPD are all 0, so the numbers happen to agree -- but RD reads masked points, which the
    # NaN fill shows. The shipped cascade reads none.
    chunk = "SLD[m1 : m1*M0 <= p + M - P, p : p + M - P < m1*M0 + M0 - 1 + W]"
    path = _variant(tmp_path, "attention-window-1pass", (chunk, "SLD[m1 : m1*M0 <= p + M - P, p]"))
    broken = load_cascade(path)
    assert compare_reference(broken, WINDOW, seed=1).equivalent
    for cascade, finite in ((broken, False), (_load("attention-window-1pass"), True)):
        shapes = resolve_shapes(cascade, WINDOW)
        inputs = random_inputs(cascade, shapes, seed=1)
        av = evaluate(cascade, inputs, shapes, unkept=np.nan)["AV"]
        assert np.isfinite(av).all() == finite


def _iterative(filter_text: str) -> str:
    return f"""
shapes: {{K: 6}}
einsum:
  declaration: {{A: [K], R: [K], M: [K], T: [K], S: [], X: []}}
  expressions:
    - T[0] = 7
    - "T[k+1] = 2 * A[k : {filter_text}]  until k == K"
    - R[0] = 0
    - "R[k+1] = R[k] + A[k : {filter_text}]  until k == K"
    - M[0] = -inf
    - "M[k+1] = max(M[k], A[k : {filter_text}])  until k == K"
    - S = R[K]
    - X = M[K]
"""


@pytest.mark.parametrize("cond, kept", [("k < 3", [0, 1, 2]), ("k >= 2", [2, 3, 4, 5])])
def test_a_masked_step_keeps_the_previous_step(cond, kept):
    cascade = loads_cascade(_iterative(cond), "carry.yaml")
    shapes = resolve_shapes(cascade)
    a = np.array([1.0, -2.0, 4.0, 8.0, -16.0, 32.0])
    out = evaluate(cascade, {"A": a}, shapes)
    # Step by step: R[k+1] = R[k] + A[k] where kept, else R[k]; M likewise with max.
    # T reads no previous step, yet a masked step of T keeps the one before.
    r, m, t = [0.0], [-np.inf], [7.0]
    for k in range(6):
        r.append(r[-1] + a[k] if k in kept else r[-1])
        m.append(max(m[-1], a[k]) if k in kept else m[-1])
        t.append(2 * a[k] if k in kept else t[-1])
    assert np.array_equal(out["R"], r) and np.array_equal(out["M"], m)
    assert np.array_equal(out["T"], t)
    assert out["S"] == a[kept].sum() and out["X"] == a[kept].max()
    # A masked step costs nothing.
    assert count_points(cascade, cascade.einsum("R"), shapes) == len(kept)


def test_a_masked_point_of_a_map_is_zero_and_of_a_reduction_the_identity():
    text = """
shapes: {K: 5, I: 5}
einsum:
  declaration: {A: [K], Y: [K], S: [I], G: [I]}
  expressions:
    - "Y[k] = A[k : k >= 2] * 3"
    - "S[i] = A[k : k < i]"
    - "G[i] = A[k : k < i] :: max(k)"
"""
    cascade = loads_cascade(text, "map.yaml")
    a = np.arange(1.0, 6.0)
    out = evaluate(cascade, {"A": a}, resolve_shapes(cascade))
    assert np.array_equal(out["Y"], [0, 0, 9, 12, 15])
    assert np.array_equal(out["S"], [0, 1, 3, 6, 10])
    assert np.array_equal(out["G"], [-np.inf, 1, 2, 3, 4])
    poisoned = evaluate(cascade, {"A": a}, resolve_shapes(cascade), unkept=np.nan)
    assert np.isnan(poisoned["Y"][:2]).all() and np.isnan(poisoned["S"][0])


def test_a_masked_product_ignores_what_the_other_factor_holds_there():
    # Y[i] = sum over k <= i of A[i, k] * B[k]: B[3] = inf lies outside the filter for i < 3.
    text = """
shapes: {I: 5, K: 5}
einsum:
  declaration: {A: [I, K], B: [K], Y: [I]}
  expressions:
    - "Y[i] = A[i, k : k <= i] * B[k]"
"""
    cascade = loads_cascade(text, "inf.yaml")
    a = np.arange(25.0).reshape(5, 5)
    b = np.array([1.0, 2.0, 3.0, np.inf, 5.0])
    out = evaluate(cascade, {"A": a, "B": b}, resolve_shapes(cascade))["Y"]
    expected = [sum(a[i, k] * b[k] for k in range(i + 1)) for i in range(3)]
    assert np.array_equal(out[:3], expected) and np.isinf(out[3:]).all()


@pytest.mark.parametrize(
    "name, shape, tensor",
    [
        ("attention-causal-1pass", {"M": 64, "M0": 16, "P": 40}, "BQK"),
        ("attention-window-1pass", {"M": 64, "M0": 16, "P": 64, "W": 9}, "BQK"),
        ("attention-causal-3pass", {"M": 64, "P": 40}, "QK"),
        ("attention-window-3pass", {"M": 64, "P": 64, "W": 9}, "QK"),
    ],
)
def test_masked_logits_are_the_sums_identity(name, shape, tensor):
    cascade = _load(name)
    shapes = resolve_shapes(cascade, {"E": 8, "F": 8, **shape})
    inputs = random_inputs(cascade, shapes, seed=4)
    logits = inputs["K"].T @ inputs["Q"]  # [M, P]
    keep = _kept_pairs(
        "window" if "W" in shape else "causal", shapes["M"], shapes["P"], shape.get("W")
    )
    out = evaluate(cascade, inputs, shapes)[tensor].reshape(shapes["M"], shapes["P"])
    assert np.allclose(out, np.where(keep, logits, 0.0), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------
# Point counts: every Einsum over the masked region counts only its kept points.


def _kept_pairs(mask: str, m: int, p: int, window: int | None) -> np.ndarray:
    # query p sits at position p + m - p_count: the queries are the last P of the M keys
    keys, queries = np.arange(m)[:, None], np.arange(p)[None, :] + (m - p)
    keep = keys <= queries
    if mask == "window":
        keep = keep & (queries - window < keys)
    return keep  # [M, P]


@pytest.mark.parametrize(
    "name, mask, shape",
    [
        ("attention-causal-1pass", "causal", {"M": 96, "M0": 16, "P": 70}),
        ("attention-window-1pass", "window", {"M": 96, "M0": 16, "P": 70, "W": 7}),
        ("attention-window-1pass", "window", {"M": 96, "M0": 16, "P": 96, "W": 40}),
        ("attention-causal-3pass", "causal", {"M": 96, "P": 70}),
        ("attention-window-3pass", "window", {"M": 96, "P": 70, "W": 30}),
    ],
)
def test_every_einsum_counts_only_unmasked_points(name, mask, shape):
    cascade = _load(name)
    shapes = resolve_shapes(cascade, {"E": 3, "F": 5, **shape})
    keep = _kept_pairs(mask, shapes["M"], shapes["P"], shapes.get("W"))
    m0 = shapes.get("M0", 1)
    chunk = keep.reshape(shapes["M"] // m0, m0, shapes["P"]).any(axis=1)  # [M1, P]
    for e in cascade.einsums:
        if e.kind != "compute":
            continue
        names = set(e.iteration)
        other = math.prod(shapes[v.upper()] for v in names - {"m", "m1", "m0", "p"})
        if names >= {"m", "p"} or names >= {"m1", "m0", "p"}:
            expected = int(keep.sum()) * other
        elif names >= {"m1", "p"}:
            expected = int(chunk.sum()) * other
        else:
            expected = math.prod(shapes[v.upper()] for v in names)
        assert count_points(cascade, e, shapes) == expected, e.name


LLM = {"M": 1 << 20, "P": 1 << 20, "M0": 256, "E": 128, "F": 128}


@pytest.mark.parametrize(
    "name",
    [
        "attention-causal-1pass",
        "attention-causal-3pass",
        "attention-window-1pass",
        "attention-window-3pass",
    ],
)
def test_counts_at_llm_sizes_are_exact_and_fast(name):
    cascade = _load(name)
    shapes = resolve_shapes(
        cascade, {k: v for k, v in {**LLM, "W": 4096}.items() if k in cascade.shape_names()}
    )
    start = time.perf_counter()
    ops = {o.einsum: o for o in cascade_ops(cascade, shapes)}
    elapsed = time.perf_counter() - start
    p, w, m0, e = LLM["P"], 4096, LLM["M0"], LLM["E"]
    if "causal" in name:
        pairs = p * (p + 1) // 2
        n = p // m0
        chunks = m0 * n * (n + 1) // 2  # query p sees chunks 0 .. p // M0
    else:
        pairs = w * (w + 1) // 2 + (p - w) * w
        # query p sees the chunks from (p - W + 1) // M0 to p // M0
        chunks = sum(q // m0 - max(0, q - w + 1) // m0 + 1 for q in range(p))
    assert ops["QK"].points == e * pairs
    if "1pass" in name:
        assert ops["LM"].points == pairs
        for einsum in ("RM", "PRM", "SPD", "RD"):
            assert ops[einsum].points == chunks, einsum
        assert ops["RNV"].points == LLM["F"] * chunks
    else:
        assert ops["GM"].points == pairs
    assert elapsed < 1.0, elapsed


def test_a_filter_too_large_to_count_is_one_line():
    text = """
shapes: {I: 1048576, J: 1048576, K: 1048576}
einsum:
  declaration: {A: [I, J, K], Y: [K]}
  expressions:
    - "Y[k] = A[i : i + j <= k, j : j + k <= i, k]"
"""
    cascade = loads_cascade(text, "big.yaml")
    with pytest.raises(SpecError) as err:
        cascade_ops(cascade, resolve_shapes(cascade))
    assert str(err.value).startswith("big.yaml:6:") and "too many to count" in str(err.value)


# Random affine filters over three variables (and a size parameter W) against brute force.
TERM = st.tuples(st.sampled_from("ijk"), st.integers(1, 3))
SIDE = st.tuples(st.lists(TERM, max_size=2), st.integers(0, 3), st.booleans())
COND = st.tuples(SIDE, st.sampled_from(["<=", "<", ">=", ">", "==", "!="]), SIDE)


def _side_text(side) -> str:
    terms, const, with_w = side
    parts = [f"{c}*{v}" if c > 1 else v for v, c in terms] + [str(const)] * bool(const)
    parts += ["W"] * with_w
    return " + ".join(parts) or "0"


def _side_value(side, env) -> int:
    terms, const, with_w = side
    return sum(c * env[v] for v, c in terms) + const + with_w * env["W"]


PY_OPS = {
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


SAME_HOLE = ([("i", 1)], 0, False), "!=", ([("k", 1)], 0, False)  # twice: one value removed


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(conds=[SAME_HOLE, SAME_HOLE], extents=(3, 3, 3), window=1)
@given(
    conds=st.lists(COND, min_size=1, max_size=4),
    extents=st.tuples(*[st.integers(1, 6)] * 3),
    window=st.integers(1, 5),
)
def test_count_points_equals_brute_force(conds, extents, window):
    # One condition per read position: A[i : c1, j : c2, k : c3] * B[k : c4].
    texts = [f"{_side_text(left)} {op} {_side_text(right)}" for left, op, right in conds]
    slots = texts + [None] * (4 - len(texts))
    pos = [f"{v} : {t}" if t else v for v, t in zip("ijkk", slots, strict=True)]
    uses_w = any("W" in t for t in texts)
    shapes = f"{{I: {extents[0]}, J: {extents[1]}, K: {extents[2]}" + (
        f", W: {window}}}" if uses_w else "}"
    )
    text = f"""
shapes: {shapes}
einsum:
  declaration: {{A: [I, J, K], B: [K], Y: [I]}}
  expressions:
    - "Y[i] = A[{pos[0]}, {pos[1]}, {pos[2]}] * B[{pos[3]}]"
"""
    cascade = loads_cascade(text, "prop.yaml")
    if uses_w:
        assert cascade.params == ("W",)
    got = count_points(cascade, cascade.einsums[0], resolve_shapes(cascade))
    expected = 0
    for i, j, k in itertools.product(*(range(n) for n in extents)):
        env = {"i": i, "j": j, "k": k, "W": window}
        expected += all(
            PY_OPS[op](_side_value(left, env), _side_value(right, env)) for left, op, right in conds
        )
    assert got == expected


# --------------------------------------------------------------------------------------
# Size parameters


def test_size_parameter_resolves_like_an_extent(run_cli):
    cascade = _load("attention-window-3pass")
    assert cascade.params == ("W",)
    assert resolve_shapes(cascade)["W"] == 256
    assert resolve_shapes(cascade, {"W": 8})["W"] == 8
    counts = {}
    for w in (8, 16):
        code, out, err = run_cli(
            main,
            ["ops", "attention-window-3pass", "--shape", f"M=64,P=64,W={w}", "--format", "json"],
        )
        assert code == 0, err
        counts[w] = {r["einsum"]: r["points"] for r in json.loads(out)["einsums"]}["GM"]
    assert counts == {w: w * (w + 1) // 2 + (64 - w) * w for w in (8, 16)}
    code, _, err = run_cli(main, ["ops", "attention-window-3pass", "--shape", "W=0"])
    assert code == 2 and "must be positive" in err and err.count("\n") == 1


HEAD = "einsum:\n  declaration: {A: [K], Y: [K]}\n  expressions:\n"


@pytest.mark.parametrize(
    "shapes, expr, line, col, message",
    [
        # a name of shapes: used nowhere is still an unknown rank (message unchanged)
        ("{K: 4, W: 2}", '"Y[k] = A[k]"', 1, 16, "shapes: unknown rank 'W'"),
        # a filter's upper-case name not in shapes: is still an undeclared rank
        ("{K: 4}", '"Y[k] = A[k : k < 2 + W]"', 5, 15, "undeclared rank 'W' in filter"),
        # a size parameter indexes nothing
        ("{K: 4, W: 2}", '"Y[k] = A[W]"', 5, 15, "undeclared rank 'W' in index 'W' of 'A'"),
    ],
)
def test_size_parameter_errors(tmp_path, run_cli, shapes, expr, line, col, message):
    path = tmp_path / "w.yaml"
    path.write_text(f"shapes: {shapes}\n{HEAD}    - {expr}\n")
    code, out, err = run_cli(main, ["passes", str(path)])
    assert code == 2 and out == ""
    assert err.startswith(f"error: {path}:{line}:{col}: "), err
    assert message in err and err.count("\n") == 1


# --------------------------------------------------------------------------------------
# reference: and compare --reference


def test_cli_compare_reference_exit_codes(tmp_path, run_cli):
    shape = ["--shape", "M=64,M0=16,P=40,E=8,F=8"]
    code, out, err = run_cli(main, ["compare", "attention-causal-1pass", "--reference", *shape])
    assert code == 0, err
    assert "attention-causal-1pass vs reference (attention, mask: causal): equivalent" in out
    code, out, _ = run_cli(
        main, ["compare", "attention-causal-1pass", "--reference", *shape, "--format", "json"]
    )
    data = json.loads(out)
    assert code == 0 and data["equivalent"] and data["outputs"][0]["tensor"] == "AV"
    # no reference named, or two cascades and --reference: exit 2, one line
    for argv in (
        ["compare", "prefix-sum", "--reference"],
        ["compare", "attention-3pass", "attention-1pass", "--reference"],
    ):
        code, out, err = run_cli(main, argv)
        assert code == 2 and out == "" and err.count("\n") == 1, err
    code, _, err = run_cli(main, ["compare", "prefix-sum", "--reference"])
    assert "names no reference" in err and "prefix-sum.yaml" in err
    # the message without a second cascade is argparse's, as before
    code, _, err = run_cli(main, ["compare", "attention-3pass"])
    assert code == 2
    assert err == (
        "error: python -m simulator.cascade compare: the following arguments are required: file_b\n"
    )


@pytest.mark.parametrize("name", ["attention-3pass", "attention-2pass", "attention-1pass"])
def test_shipped_attention_names_its_reference(name, run_cli):
    shape = "M=128,P=48,E=8,F=8" + (",M0=32" if name != "attention-3pass" else "")
    code, out, err = run_cli(main, ["compare", name, "--reference", "--shape", shape])
    assert code == 0, err + out


BASE = (CASCADES / "attention-causal-3pass.yaml").read_text()
REF_LINE = "reference: {algorithm: attention, mask: causal}\n"


@pytest.mark.parametrize(
    "replacement, col, message",
    [
        ("reference: {algorithm: attention, mask: sideways}\n", 41, "mask must be one of"),
        ("reference: {algorithm: attention, masc: causal}\n", 35, "unknown key 'masc'"),
        ("reference: {algorithm: flash}\n", 24, "unknown reference algorithm 'flash'"),
        ("reference: {mask: causal}\n", 12, "needs 'algorithm'"),
        ("reference: attention\n", 12, "reference must map 'algorithm'"),
        ("reference: {algorithm: attention, mask: window}\n", 12, "needs the window size W"),
        ("reference: {algorithm: attention, window: W}\n", 12, "goes with 'mask: window'"),
        ("reference: {algorithm: attention, window: w}\n", 43, "names a size parameter"),
    ],
)
def test_bad_reference_is_file_line_col(tmp_path, run_cli, replacement, col, message):
    assert BASE.count(REF_LINE) == 1
    path = tmp_path / "bad-ref.yaml"
    path.write_text(BASE.replace(REF_LINE, replacement))
    line = BASE[: BASE.index(REF_LINE)].count("\n") + 1
    for argv in (["passes", str(path)], ["compare", str(path), "--reference"]):
        code, out, err = run_cli(main, argv)
        assert code == 2 and out == "", out
        assert err.startswith(f"error: {path}:{line}:{col}: "), err
        assert message in err and err.count("\n") == 1


def test_reference_binds_tensors_not_rank_names(tmp_path):
    # No rank name is special: keys N (N1 x N0), embedding H, window L.
    text = (CASCADES / "attention-window-1pass.yaml").read_text()
    for old, new in (
        (r"\bM(\d?)\b", r"N\1"),
        (r"\bm(\d?)\b", r"n\1"),
        (r"\bE\b", "H"),
        (r"\be\b", "h"),
    ):
        text = re.sub(old, new, text)
    text = re.sub(r"\bW\b", "L", text).replace("mask: window}", "mask: window, window: L}")
    path = tmp_path / "renamed.yaml"
    path.write_text(text)
    cascade = load_cascade(path)
    assert cascade.params == ("L",) and {"N", "N0", "H"} <= cascade.shape_names()
    shape = {"N": 64, "N0": 16, "P": 50, "H": 8, "F": 8, "L": 21}
    assert compare_reference(cascade, shape, seed=2).equivalent
    # ... and it is the window of that size: another size gives another result
    inputs = random_inputs(cascade, resolve_shapes(cascade, shape), seed=2)
    out = evaluate(cascade, inputs, resolve_shapes(cascade, shape))["AV"]
    ref = _attention_loop(inputs["Q"], inputs["K"], inputs["V"], "window", 21)
    assert _max_rel(out, ref) <= 1e-5


def test_reference_checks_the_tensors_it_binds(tmp_path, run_cli):
    text = (CASCADES / "prefix-sum.yaml").read_text()
    path = tmp_path / "prefix-ref.yaml"
    path.write_text("reference: {algorithm: attention}\n" + text)
    code, _, err = run_cli(main, ["compare", str(path), "--reference"])
    assert code == 2 and err.startswith(f"error: {path}:1:12: "), err
    assert "reference attention computes Q [E, P]" in err and err.count("\n") == 1


def test_readme_lists_the_new_cascades():
    readme = (CASCADES / "README.md").read_text()
    for name in NEW:
        assert f"`{name}.yaml`" in readme, name
