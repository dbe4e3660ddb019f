"""Rewriting beyond attention: a row softmax (online softmax: the running maximum and the
running sum rescaled) and a naive LayerNorm (Welford's running count, mean and squared
deviations) go from 3 to 2 passes with stable rules the search finds on its own -- on the
shipped files and on cascades written with other names -- and stay equal to the originals
at large offsets (logits of +-1e4, a mean of 1e6 with unit spread), where the naive
softmax and the one-pass variance do not."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cascade.__main__ import main
from simulator.cascade.draft import without_dead
from simulator.cascade.execute import compare, evaluate, random_inputs
from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade.rewrite import rewrite
from simulator.cascade.rewrite.rule_search import pass_floor
from simulator.cascade.rewrite.rules import (
    chunked_variance,
    iterative_reduction,
    one_pass_variance,
    partition_rank,
    running_max,
    welford_variance,
)
from simulator.cascade.rewrite.rules.base import Context
from simulator.cascade.shapes import resolve_shapes

ROOT = Path(__file__).resolve().parents[1]
ONLINE_SOFTMAX = ["iterative-reduction", "running-max"]
WELFORD = ["welford-variance"]


def cascade_text(name: str, shapes: str, decls: dict[str, str], body: list[str]) -> str:
    text = f"name: {name}\nshapes: {{{shapes}}}\neinsum:\n  declaration:\n"
    text += "".join(f"    {t}: {r}\n" for t, r in decls.items())
    return text + "  expressions:\n" + "".join(f'    - "{s}"\n' for s in body)


# Written by someone else: other tensor and rank names, other ways to spell the same thing.
OTHERS = {
    # softmax over j of S[j, i], the exponentials in their own tensor
    "softmax-j": cascade_text(
        "softmax-j",
        "J: 96, I: 8",
        {"S": "[J, I]", "MX": "[I]", "EX": "[J, I]", "Z": "[I]", "PR": "[J, I]"},
        [
            "MX[i] = S[j, i] :: max(j)",
            "EX[j, i] = exp(S[j, i] - MX[i])",
            "Z[i] = EX[j, i]",
            "PR[j, i] = EX[j, i] / Z[i]",
        ],
    ),
    # the exponential written twice inline, the division as a reciprocal
    "softmax-inline": cascade_text(
        "softmax-inline",
        "K: 80, Q: 6",
        {"L": "[Q, K]", "TOP": "[Q]", "NORM": "[Q]", "INV": "[Q]", "OUT": "[Q, K]"},
        [
            "TOP[q] = L[q, k] :: max(k)",
            "NORM[q] = exp(L[q, k] - TOP[q])",
            "INV[q] = 1 / NORM[q]",
            "OUT[q, k] = exp(L[q, k] - TOP[q]) * INV[q]",
        ],
    ),
    # the shift in a tensor of its own, then the exponential
    "softmax-shifted": cascade_text(
        "softmax-shifted",
        "T: 64, B: 4",
        {"A": "[T, B]", "HI": "[B]", "SH": "[T, B]", "EA": "[T, B]", "DEN": "[B]", "P": "[T, B]"},
        [
            "HI[b] = A[t, b] :: max(t)",
            "SH[t, b] = A[t, b] - HI[b]",
            "EA[t, b] = exp(SH[t, b])",
            "DEN[b] = EA[t, b]",
            "P[t, b] = EA[t, b] / DEN[b]",
        ],
    ),
    # LayerNorm over d of H[d, t], multiplying by the reciprocal standard deviation
    "layernorm-d": cascade_text(
        "layernorm-d",
        "D: 96, T: 8",
        {"H": "[D, T]", "AVG": "[T]", "CEN": "[D, T]", "V": "[T]", "INV": "[T]", "OUT": "[D, T]"},
        [
            "AVG[t] = H[d, t] / D",
            "CEN[d, t] = H[d, t] - AVG[t]",
            "V[t] = CEN[d, t] * CEN[d, t] / D",
            "INV[t] = 1 / sqrt(V[t] + 0.00001)",
            "OUT[d, t] = CEN[d, t] * INV[t]",
        ],
    ),
    # the sum and the mean apart, the squares inline, the scale outside, gain and bias
    "layernorm-affine": cascade_text(
        "layernorm-affine",
        "C: 72, N: 5",
        {
            "Z": "[C, N]",
            "G": "[C]",
            "BETA": "[C]",
            "TOT": "[N]",
            "MEAN": "[N]",
            "SS": "[N]",
            "SD": "[N]",
            "OUT": "[C, N]",
        },
        [
            "TOT[n] = Z[c, n]",
            "MEAN[n] = TOT[n] / C",
            "SS[n] = (Z[c, n] - MEAN[n]) * (Z[c, n] - MEAN[n])",
            "SD[n] = sqrt(SS[n] / C + 0.00001)",
            "OUT[c, n] = (Z[c, n] - MEAN[n]) / SD[n] * G[c] + BETA[c]",
        ],
    ),
}
CHAINS = {
    "softmax-j": ONLINE_SOFTMAX,
    "softmax-inline": ONLINE_SOFTMAX,
    "softmax-shifted": ONLINE_SOFTMAX,
    "layernorm-d": WELFORD,
    "layernorm-affine": WELFORD,
}


def rewrites(rule, c):
    return list(rule.candidates(Context(c, analyze_passes(c), resolve_shapes(c))))


def apply(rw, original):
    return without_dead(rw.draft.build(), original.outputs).build()


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def rel(got: np.ndarray, want: np.ndarray) -> float:
    """Largest error relative to the largest magnitude of the expected values."""
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


# ---- the search finds both chains on its own -------------------------------------------


@pytest.mark.parametrize(
    "name,chain", [("softmax", ONLINE_SOFTMAX), ("layernorm", WELFORD)], ids=["softmax", "ln"]
)
def test_shipped_cascades_reach_two_passes_with_stable_rules(name, chain):
    c = load_cascade(ROOT / f"cascades/{name}.yaml")
    result = rewrite(c)
    assert (result.passes_before.max_passes, result.passes_after.max_passes) == (3, 2)
    assert [s.rule for s in result.steps] == chain
    assert result.unstable == () and result.rejected == ()
    assert compare(c, result.cascade, scale=1.0).equivalent
    assert compare(c, result.cascade, scale=30.0).equivalent


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_cascades_written_by_someone_else_reach_two_passes(name, tmp_path, capsys):
    original = tmp_path / f"{name}.yaml"
    original.write_text(OTHERS[name])
    out = tmp_path / f"{name}-2pass.yaml"
    code, text = run(capsys, "rewrite", str(original), "-o", str(out))
    assert code == 0 and "bug:" not in text and "warning" not in text
    rules = [line.split()[1] for line in text.splitlines() if line.startswith("  ")]
    # a file written another way is first put in canonical form (a step of its own)
    assert [r for r in rules if r != "canonical-form"] == CHAINS[name]
    assert analyze_passes(load_cascade(original)).max_passes == 3
    assert analyze_passes(load_cascade(out)).max_passes == 2
    for scale in ("1", "30"):
        code, text = run(capsys, "compare", str(original), str(out), "--scale", scale)
        assert code == 0 and "equivalent" in text


def test_the_floor_is_two_passes_when_a_result_reads_its_own_statistics():
    floors = {
        n: pass_floor(load_cascade(ROOT / f"cascades/{n}.yaml"))
        for n in ("softmax", "layernorm", "attention-3pass", "layernorm-matmul", "rmsnorm-ffn")
    }
    assert floors == {
        "softmax": 2,
        "layernorm": 2,
        "attention-3pass": 1,
        "layernorm-matmul": 1,
        "rmsnorm-ffn": 1,
    }
    # at the floor the search stops: no budget spent on a pass it cannot reach
    result = rewrite(load_cascade(ROOT / "cascades/softmax.yaml"))
    assert result.expanded == len(result.steps)


def test_per_chunk_forms_are_kept_where_the_rank_can_be_chunked():
    """layernorm-matmul's E can be split: the chain is still the chunked (Chan) one, and
    attention still becomes Cascade 5; the per-element rules do not apply there."""
    ln = load_cascade(ROOT / "cascades/layernorm-matmul.yaml")
    assert rewrites(welford_variance, ln) == []
    assert "chunked-variance" in [s.rule for s in rewrite(ln).steps]
    attention = load_cascade(ROOT / "cascades/attention-3pass.yaml")
    assert rewrites(iterative_reduction, attention) == []


# ---- large offsets: where stable and unstable forms part ------------------------------


def _online_softmax():
    c = load_cascade(ROOT / "cascades/softmax.yaml")
    return c, rewrite(c).cascade


def _numpy_softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over axis 0, computed directly in numpy (not by the cascade language)."""
    e = np.exp(x - x.max(axis=0))
    return e / e.sum(axis=0)


@pytest.mark.parametrize("kind", ["spread 1e4", "offset 1e4"])
def test_online_softmax_at_logits_of_1e4(kind):
    """Logits spread over +-1e4, or at 1e4 with unit spread. The numerators of both
    cascades are the same exp(x - max) (the running maximum ends at the row maximum
    exactly); only the sums differ, by rounding: 1024 rescaled additions bound the relative
    error by about 1024 * 2^-53 = 1e-13, far below the 1e-9 asked."""
    c, online = _online_softmax()
    shapes = resolve_shapes(c)
    rng = np.random.default_rng(7)
    if kind == "spread 1e4":
        x = rng.uniform(-1e4, 1e4, (shapes["M"], shapes["P"]))
    else:
        x = 1e4 + rng.standard_normal((shapes["M"], shapes["P"]))
    want = evaluate(c, {"X": x}, shapes)["Y"]
    got = evaluate(online, {"X": x}, resolve_shapes(online))["Y"]
    reference = _numpy_softmax(x)
    assert np.isfinite(got).all()
    kept = want > 0  # entries that did not underflow to 0
    assert np.max(np.abs(got[kept] - want[kept]) / want[kept]) < 1e-9
    assert np.max(np.abs(got[kept] - reference[kept]) / reference[kept]) < 1e-9
    assert np.array_equal(got == 0, want == 0)
    assert np.allclose(got.sum(axis=0), 1.0, rtol=1e-12)


def test_a_softmax_without_the_maximum_overflows_there():
    """The check can fail: exp(x) / sum exp(x) is not finite at logits of 1e4."""
    naive = loads_cascade(
        cascade_text(
            "naive",
            "M: 1024, P: 64",
            {"X": "[M, P]", "SN": "[M, P]", "SD": "[P]", "Y": "[M, P]"},
            ["SN[m, p] = exp(X[m, p])", "SD[p] = SN[m, p]", "Y[m, p] = SN[m, p] / SD[p]"],
        ),
        "naive.yaml",
    )
    x = 1e4 + np.random.default_rng(7).standard_normal((1024, 64))
    assert not np.isfinite(evaluate(naive, {"X": x})["Y"]).all()
    assert np.isfinite(_numpy_softmax(x)).all()


def _offset_inputs(c, seed: int = 3) -> np.ndarray:
    """Mean 1e6, unit spread."""
    return 1e6 + random_inputs(c, resolve_shapes(c), seed=seed)["X"]


def test_welford_layernorm_keeps_its_digits_at_a_mean_of_1e6():
    """Against the exact variance of the same float64 inputs (statistics.pvariance works
    in exact rationals): the Welford rewrite and the original both within 1e-9, the
    one-pass variance (sum x^2 - n mean^2: two sums of 2.6e14 cancelling to 256) off by
    more than 1e-5. The normalised output follows the variance.

    The margin is honest, not generous: Welford's error is about the rounding of its
    running mean against the spread, 2^-53 * 1e6 = 1.1e-10 (measured: 8e-11), so 1e-9
    holds up to means of about 1e7 at unit spread; the two-pass original is exact to 1e-16
    (its deviations from one mean subtract exactly), the one-pass form loses 2^-53 * 1e12."""
    c = load_cascade(ROOT / "cascades/layernorm.yaml")
    welford = rewrite(c).cascade
    unstable = apply(rewrites(one_pass_variance, c)[0], c)
    x = _offset_inputs(c)
    exact = np.array([statistics.pvariance(x[:, p].tolist()) for p in range(x.shape[1])])
    shapes = resolve_shapes(c)
    runs = {
        "original": evaluate(c, {"X": x}, shapes),
        "welford": evaluate(welford, {"X": x}, resolve_shapes(welford)),
        "one-pass": evaluate(unstable, {"X": x}, resolve_shapes(unstable)),
    }
    error = {k: float(np.max(np.abs(v["VAR"] - exact) / exact)) for k, v in runs.items()}
    assert error["welford"] < 1e-9 and error["original"] < 1e-9
    assert error["one-pass"] > 1e-5
    assert rel(runs["welford"]["Y"], runs["original"]["Y"]) < 1e-9
    assert rel(runs["one-pass"]["Y"], runs["original"]["Y"]) > 1e-6


@pytest.mark.parametrize("name", ["layernorm-d", "layernorm-affine"])
def test_other_layernorms_at_a_mean_of_1e6(name):
    c = loads_cascade(OTHERS[name], f"{name}.yaml")
    new = rewrite(c).cascade
    shapes = resolve_shapes(c)
    inputs = random_inputs(c, shapes, seed=5)
    big = next(t for t in c.inputs if len(c.tensor(t).ranks) == 2)
    inputs[big] = 1e6 + inputs[big]
    (out,) = c.outputs
    want = evaluate(c, inputs, shapes)[out]
    got = evaluate(new, inputs, resolve_shapes(new))[out]
    assert rel(got, want) < 1e-9


# ---- the rules' conditions ------------------------------------------------------------


def test_iterative_reduction_runs_element_by_element_only_on_an_unchunkable_rank():
    c = load_cascade(ROOT / "cascades/softmax.yaml")
    found = {rw.site: rw for rw in rewrites(iterative_reduction, c)}
    # M indexes the result Y, so partition-rank refuses it; per element, only the maximum
    # (the sum SD is left to running-max, which makes the running sum itself)
    assert set(found) == {"GM"}
    assert rewrites(partition_rank, c) == []
    new = apply(found["GM"], c)
    assert "RGM[m+1, p] = max(RGM[m, p], X[m, p]) until m == M" in found["GM"].draft.statements
    assert compare(c, new).equivalent and compare(c, new, scale=30).equivalent


def test_running_max_leaves_a_sum_across_the_rows_alone():
    """A total over every row (i reduced too) cannot be rescaled by one per-row correction:
    it keeps reading the terms scaled by the final maximum, and the values stay."""
    text = OTHERS["softmax-j"].replace("    Z: [I]\n", "    Z: [I]\n    ALL: []\n")
    text += '    - "ALL = EX[j, i]"\n'
    c = loads_cascade(text, "t.yaml")
    (step,) = [rw for rw in rewrites(iterative_reduction, c) if rw.site == "MX"]
    c = apply(step, c)
    (rw,) = rewrites(running_max, c)
    assert "ALL = EX[j, i]" in rw.draft.statements
    assert "Z -> RZ" in rw.detail and "ALL" not in rw.detail
    new = apply(rw, c)
    assert compare(c, new).equivalent and compare(c, new, scale=30).equivalent


def _variance(mean_of: str):
    body = [
        f"MU[p] = X[e, p] / {mean_of}",
        "D[e, p] = X[e, p] - MU[p]",
        "VAR[p] = D[e, p] * D[e, p] / E",
        "Y[e, p] = D[e, p] / sqrt(VAR[p] + 0.00001)",
    ]
    decls = {"X": "[E, P]", "MU": "[P]", "D": "[E, P]", "VAR": "[P]", "Y": "[E, P]"}
    return loads_cascade(cascade_text("v", "E: 48, P: 4", decls, body), "v.yaml")


def test_welford_needs_the_mean_of_the_same_values():
    """About any other centre Welford's update is wrong: it always measures from the
    running mean."""
    wrong_centre = _variance("P")  # MU = sum_e X / P: not the mean over E
    assert rewrites(welford_variance, wrong_centre) == []
    right = _variance("E")
    (rw,) = rewrites(welford_variance, right)
    welford = apply(rw, right)
    assert compare(right, welford).equivalent and compare(right, welford, scale=30).equivalent
    assert not compare(wrong_centre, welford).equivalent


def test_welford_needs_one_rank_and_leaves_chunkable_ones_to_chan():
    two_ranks = loads_cascade(
        cascade_text(
            "two",
            "E: 16, G: 4, P: 3",
            {"X": "[E, G, P]", "MU": "[P]", "VAR": "[P]", "Y": "[E, G, P]"},
            [
                "MU[p] = X[e, g, p] / E / G",
                "VAR[p] = (X[e, g, p] - MU[p]) * (X[e, g, p] - MU[p])",
                "Y[e, g, p] = (X[e, g, p] - MU[p]) / VAR[p]",
            ],
        ),
        "two.yaml",
    )
    assert rewrites(welford_variance, two_ranks) == []
    # E of layernorm-matmul can be split: Chan's merge per chunk, after partition-rank
    ln = load_cascade(ROOT / "cascades/layernorm-matmul.yaml")
    assert rewrites(welford_variance, ln) == []
    split = apply(rewrites(partition_rank, ln)[0], ln)
    assert [rw.site for rw in rewrites(chunked_variance, split)] == ["VAR"]


# ---- property: random row-wise cascades whose result keeps the row's rank -------------

BLOCKS = ("rowmax", "rowsum", "shift", "softexp", "scale", "softmax", "variance")


def _random_rowwise(choices: list[int]) -> str:
    """Row statistics and element-wise maps over X[I, J], with a softmax (max, exp, sum)
    and a variance about the mean as blocks of their own; the result keeps rank J."""
    decls = {"X": "[I, J]"}
    body: list[str] = []
    mats, rows = ["X"], []

    def add(t: str, ranks: str, expr: str) -> None:
        body.append(f"{t}[{ranks.lower()}] = {expr}")
        decls[t] = f"[{ranks}]"
        (mats if "J" in ranks else rows).append(t)

    for n, pick in enumerate(choices):
        kind, t = BLOCKS[pick % len(BLOCKS)], f"T{n}"
        m = mats[-1]
        if kind == "softmax":
            add(f"{t}M", "I", f"{m}[i, j] :: max(j)")
            add(f"{t}E", "I, J", f"exp({m}[i, j] - {t}M[i])")
            add(f"{t}S", "I", f"{t}E[i, j]")
        elif kind == "variance":
            add(f"{t}A", "I", f"{m}[i, j] / J")
            add(f"{t}D", "I, J", f"{m}[i, j] - {t}A[i]")
            add(f"{t}V", "I", f"{t}D[i, j] * {t}D[i, j] / J")
        elif kind in ("rowmax", "rowsum") or not rows:
            add(t, "I", f"{m}[i, j] :: max(j)" if kind == "rowmax" else f"{m}[i, j]")
        else:
            r = rows[-1]
            add(
                t,
                "I, J",
                {
                    "shift": f"{m}[i, j] - {r}[i]",
                    "softexp": f"exp({m}[i, j] - {r}[i])",
                }.get(kind, f"{m}[i, j] / (1 + {r}[i] * {r}[i])"),
            )
    body.append(f"OUT[i, j] = {mats[-1]}[i, j] / (1 + {rows[-1]}[i] * {rows[-1]}[i])")
    decls["OUT"] = "[I, J]"
    return cascade_text("rowwise", "I: 3, J: 12", decls, body)


@settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(st.lists(st.integers(0, 62), min_size=2, max_size=6))
def test_accepted_row_rewrites_are_equivalent_and_never_worse(choices):
    """Results indexed by the reduced rank: the per-element rules apply; whatever the search
    accepts is equivalent on inputs it never saw and has no more passes."""
    text = _random_rowwise(choices)
    c = loads_cascade(text, "rowwise.yaml")
    result = rewrite(c)
    assert result.rejected == ()
    assert result.passes_after.max_passes <= result.passes_before.max_passes
    shapes = resolve_shapes(c)
    inputs = random_inputs(c, shapes, seed=999)
    want = evaluate(c, inputs, shapes)["OUT"]
    got = evaluate(result.cascade, inputs, resolve_shapes(result.cascade))["OUT"]
    assert np.isfinite(got).all() == np.isfinite(want).all()
    finite = np.isfinite(want)
    assert np.allclose(got[finite], want[finite], rtol=1e-6, atol=1e-9), (text, result.steps)
