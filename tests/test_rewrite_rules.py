"""Each rewrite rule on its own: it applies where its identity holds, the result computes
the same values, and it does not apply where its side condition fails -- with the wrong
rewrite built by hand to show the condition matters (it changes the values)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.cascade.draft import without_dead
from simulator.cascade.execute import compare, evaluate, random_inputs
from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade.rewrite.rules import (
    RULES,
    chunked_variance,
    defer_normalization,
    distribute_contraction,
    iterative_reduction,
    one_pass_variance,
    partition_rank,
    reassociate_affine,
    running_max,
)
from simulator.cascade.rewrite.rules.base import Context
from simulator.cascade.shapes import resolve_shapes
from simulator.cascade.write import to_yaml
from simulator.support.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]


def cascade(body: str, shapes: str, decls: str):
    text = f"name: t\nshapes: {{{shapes}}}\neinsum:\n  declaration:\n"
    text += "".join(f"    {d}\n" for d in decls.split(";"))
    text += "  expressions:\n" + "".join(f"    - {json_quote(s)}\n" for s in body.split(";"))
    return loads_cascade(text, "t.yaml")


def json_quote(s: str) -> str:
    return json.dumps(s.strip())


def rewrites(rule, c):
    return list(rule.candidates(Context(c, analyze_passes(c), resolve_shapes(c))))


def apply(rw, original):
    """The rewrite as the search keeps it: built, without what nothing reads any more."""
    return without_dead(rw.draft.build(), original.outputs).build()


def equal(a, b, scale: float = 1.0) -> bool:
    return compare(a, b, scale=scale).equivalent


ATTENTION_DECLS = (
    "Q: [E, P];K: [E, M];V: [F, M];QK: [M, P];GM: [P];SN: [M, P];SD: [P];A: [M, P];AV: [F, P]"
)
SHAPES = "M: 32, P: 8, E: 4, F: 4"


# ---- deferred normalisation ----------------------------------------------------------


def test_defer_moves_a_division_free_of_the_contracted_rank():
    c = load_cascade(ROOT / "cascades/attention-3pass.yaml")
    (rw,) = rewrites(defer_normalization, c)
    new = apply(rw, c)
    assert rw.site == "AV"
    assert equal(c, new) and equal(c, new, scale=30)
    assert analyze_passes(new).max_passes == 2


def test_defer_refuses_a_division_that_depends_on_the_contracted_rank():
    # A divides by a per-key value DK[m]: sum_m (SN / DK[m]) V is not (sum_m SN V) / DK.
    decls = "X: [M, P];V: [F, M];DK: [M];SN: [M, P];A: [M, P];AV: [F, P]"
    body = "SN[m, p] = exp(X[m, p]);A[m, p] = SN[m, p] / DK[m];AV[f, p] = A[m, p] * V[f, m]"
    c = cascade(body, "M: 16, P: 4, F: 4", decls)
    assert rewrites(defer_normalization, c) == []
    # What ignoring the condition would give: the division after the sum, by DK's sum.
    wrong = cascade(
        "SN[m, p] = exp(X[m, p]);SNV[f, p] = SN[m, p] * V[f, m];"
        "SDK = DK[m];AV[f, p] = SNV[f, p] / SDK",
        "M: 16, P: 4, F: 4",
        "X: [M, P];V: [F, M];DK: [M];SN: [M, P];SNV: [F, P];SDK: [];AV: [F, P]",
    )
    assert not equal(c, wrong)


def test_defer_pulls_a_factor_free_of_the_rank_out_of_the_sum():
    c = load_cascade(ROOT / "cascades/cascade1-dot.yaml")
    (rw,) = rewrites(defer_normalization, c)
    new = apply(rw, c)
    assert equal(c, new)
    assert analyze_passes(c).max_passes == 2 and analyze_passes(new).max_passes == 1


# ---- partitioning a rank -------------------------------------------------------------


def test_partition_splits_a_multi_pass_rank_and_changes_no_value():
    c = load_cascade(ROOT / "cascades/attention-3pass.yaml")
    (rw,) = rewrites(partition_rank, c)
    new = apply(rw, c)
    assert rw.site == "M" and dict(new.partitions)["M"] == ("M1", "M0")
    assert dict(new.shapes)["M0"] == 256  # the largest divisor of 1024 at most 1024 / 4
    assert equal(c, new)
    assert analyze_passes(new).max_passes == analyze_passes(c).max_passes


def test_partition_leaves_ranks_of_the_results_and_filtered_ranks_alone():
    # layernorm's result Y is indexed by E: splitting E would change its shape.
    assert rewrites(partition_rank, load_cascade(ROOT / "cascades/layernorm.yaml")) == []
    # the causal mask filters m: a chunk would need the filter rewritten.
    causal = load_cascade(ROOT / "cascades/attention-causal-3pass.yaml")
    assert rewrites(partition_rank, causal) == []


def test_partition_ignores_single_pass_ranks():
    c = load_cascade(ROOT / "cascades/attention-3pass-deferred-div.yaml")
    assert [rw.site for rw in rewrites(partition_rank, c)] == ["M"]  # not E, F or P


# ---- iterative reduction -------------------------------------------------------------


def _split_attention():
    c = load_cascade(ROOT / "cascades/attention-3pass-deferred-div.yaml")
    return apply(rewrites(partition_rank, c)[0], c)


def test_iterative_reduction_folds_chunks_from_the_identity():
    c = _split_attention()
    found = {rw.site: rw for rw in rewrites(iterative_reduction, c)}
    assert set(found) == {"GM", "SD", "SNV"}
    for rw in found.values():
        assert equal(c, apply(rw, c))


def test_iterative_reduction_needs_both_components_reduced():
    decls = "X: [M1, M0, P];L: [M1, P]"
    c = cascade("L[m1, p] = X[m1, m0, p] :: max(m0)", "M1: 4, M0: 4, P: 4", decls)
    assert rewrites(iterative_reduction, c) == []


# ---- running maximum with correction --------------------------------------------------


def _iterative_max_attention():
    c = _split_attention()
    rw = next(r for r in rewrites(iterative_reduction, c) if r.site == "GM")
    return apply(rw, c)


def test_running_max_makes_attention_one_pass():
    c = _iterative_max_attention()
    (rw,) = rewrites(running_max, c)
    new = apply(rw, c)
    assert analyze_passes(c).max_passes == 2 and analyze_passes(new).max_passes == 1
    assert equal(c, new) and equal(c, new, scale=30)
    one_pass = load_cascade(ROOT / "cascades/attention-1pass.yaml")
    assert equal(one_pass, new, scale=35)


def test_running_max_keeps_the_final_scaling_for_terms_read_other_than_by_a_sum():
    # SN is also summed squared: the correction exp(old - new) rescales a sum of terms
    # exp(x - max), not of their squares, so TOP keeps SN scaled by the final maximum while
    # the sums SD and SNV follow the running one through a copy LSN.
    base = _iterative_max_attention()
    text = to_yaml(base).replace("    AV: [F, P]\n", "    AV: [F, P]\n    TOP: [P]\n")
    text += '    - "TOP[p] = SN[m1, m0, p] * SN[m1, m0, p]"\n'
    c = loads_cascade(text, "t.yaml")
    (rw,) = rewrites(running_max, c)
    new = apply(rw, c)
    assert "TOP[p] = SN[m1, m0, p] * SN[m1, m0, p]" in rw.draft.statements
    assert "SN[m1, m0, p] = exp(QK[m1, m0, p] - RGM[M1, p])" in rw.draft.statements
    assert "LSN[m1, m0, p] = exp(QK[m1, m0, p] - RGM[m1+1, p])" in rw.draft.statements
    assert equal(c, new) and equal(c, new, scale=30)
    # AV needs one pass now, TOP still waits for the final maximum: 2 passes.
    assert analyze_passes(new).max_passes == 2
    # What ignoring the condition gives: TOP squaring the terms scaled by the running
    # maximum (the copy LSN) mixes scales -- TOP changes.
    forced = rw.draft.text().replace(
        "TOP[p] = SN[m1, m0, p] * SN[m1, m0, p]", "TOP[p] = LSN[m1, m0, p] * LSN[m1, m0, p]"
    )
    shapes = resolve_shapes(c)
    inputs = random_inputs(c, shapes, seed=1)
    want = evaluate(c, inputs, shapes)["TOP"]
    got = evaluate(loads_cascade(forced, "f.yaml"), inputs, resolve_shapes(new))["TOP"]
    assert not np.allclose(want, got)


# ---- reassociation of a per-row shift -------------------------------------------------


def test_reassociation_takes_the_shift_out_of_the_contraction():
    decls = "X: [E, P];W: [E, F];MU: [P];D: [E, P];Z: [F, P]"
    body = "MU[p] = X[e, p] / E;D[e, p] = X[e, p] - MU[p];Z[f, p] = D[e, p] * W[e, f]"
    c = cascade(body, "E: 16, P: 4, F: 8", decls)
    (rw,) = rewrites(reassociate_affine, c)
    new = apply(rw, c)
    assert equal(c, new)
    assert analyze_passes(c).max_passes == 2 and analyze_passes(new).max_passes == 1


def test_reassociation_refuses_a_shift_along_the_contracted_rank():
    decls = "X: [E, P];W: [E, F];B: [E];D: [E, P];Z: [F, P]"
    body = "D[e, p] = X[e, p] - B[e];Z[f, p] = D[e, p] * W[e, f]"
    c = cascade(body, "E: 16, P: 4, F: 8", decls)
    assert rewrites(reassociate_affine, c) == []
    # Treating B[e] as constant along e (sum X W - B * sum W, with B's sum) is wrong.
    wrong = cascade(
        "XW[f, p] = X[e, p] * W[e, f];SW[f] = W[e, f];SB = B[e];Z[f, p] = XW[f, p] - SB * SW[f]",
        "E: 16, P: 4, F: 8",
        "X: [E, P];W: [E, F];B: [E];XW: [F, P];SW: [F];SB: [];Z: [F, P]",
    )
    assert not equal(c, wrong)


# ---- distributing a contraction over a sum or difference --------------------------------

SHIFT_DECLS = "X: [E, P];G: [E];W: [E, F];MU: [P];Z: [F, P]"
SHIFT_SHAPES = "E: 16, P: 4, F: 8"


def test_distribution_splits_a_contraction_whose_shift_varies_along_the_rank():
    """Z = sum_e (X - MU G) W: the shift MU G varies along e, so reassociate-affine cannot
    take it out and Z waits for MU (2 passes). Distributed, Z = sum_e X W - sum_e MU G W,
    and deferring moves MU out of the second sum: the hand-written XW - MU * sum_e G W is
    1 pass, and so is the result."""
    body = "MU[p] = X[e, p] / E;Z[f, p] = (X[e, p] - MU[p] * G[e]) * W[e, f]"
    c = cascade(body, SHIFT_SHAPES, SHIFT_DECLS)
    assert rewrites(reassociate_affine, c) == []
    (rw,) = rewrites(distribute_contraction, c)
    new = apply(rw, c)
    assert equal(c, new) and equal(c, new, scale=30)
    (moved,) = rewrites(defer_normalization, new)
    final = apply(moved, new)
    hand = cascade(
        "MU[p] = X[e, p] / E;XW[f, p] = X[e, p] * W[e, f];GW[f] = G[e] * W[e, f];"
        "Z[f, p] = XW[f, p] - MU[p] * GW[f]",
        SHIFT_SHAPES,
        SHIFT_DECLS + ";XW: [F, P];GW: [F]",
    )
    assert equal(c, final) and equal(c, hand)
    assert analyze_passes(c).max_passes == 2
    assert analyze_passes(final).max_passes == analyze_passes(hand).max_passes == 1


def test_distribution_reaches_a_sum_through_a_quotient_and_a_map():
    """LayerNorm's scale and shift in a map the matmul reads: Z = sum_e (D / SD * G + B) W
    is distributed over `+ B`, then the first term over D = X - MU, inside the quotient."""
    decls = "X: [E, P];G: [E];B: [E];W: [E, F];MU: [P];SD: [P];D: [E, P];Y: [E, P];Z: [F, P]"
    body = (
        "MU[p] = X[e, p] / E;SD[p] = sqrt(X[e, p] * X[e, p] / E + 1);"
        "D[e, p] = X[e, p] - MU[p];Y[e, p] = D[e, p] / SD[p] * G[e] + B[e];"
        "Z[f, p] = Y[e, p] * W[e, f]"
    )
    c = cascade(body, SHIFT_SHAPES, decls)
    (rw,) = rewrites(distribute_contraction, c)
    new = apply(rw, c)
    assert equal(c, new) and "ZA + ZB" in rw.detail
    (again,) = rewrites(distribute_contraction, new)
    assert again.site == "ZA" and "X[e, p] - MU[p]" in again.detail
    assert equal(c, apply(again, new), scale=30)


def test_distribution_needs_a_statistic_to_move_out():
    """(X - V) W with V[e, p] an input: nothing of either term is free of e, so the
    distributed form only doubles the work (its passes: those of the original)."""
    decls = "X: [E, P];V: [E, P];W: [E, F];Z: [F, P]"
    c = cascade("Z[f, p] = (X[e, p] - V[e, p]) * W[e, f]", SHIFT_SHAPES, decls)
    assert rewrites(distribute_contraction, c) == []


def test_distribution_counts_a_term_constant_along_the_rank():
    """sum_e (MU - X) SD: the term MU SD does not vary along e, so its sum is E MU SD --
    written as one product without E it would be wrong."""
    decls = "X: [E, P];MU: [P];SD: [P];Z: [P]"
    c = cascade("Z[p] = (MU[p] - X[e, p]) * SD[p]", "E: 16, P: 4", decls)
    (rw,) = rewrites(distribute_contraction, c)
    new = apply(rw, c)
    assert equal(c, new) and "ZA[p] = MU[p] * SD[p] * E" in rw.draft.statements
    wrong = cascade(
        "ZA[p] = MU[p] * SD[p];ZB[p] = X[e, p] * SD[p];Z[p] = ZA[p] - ZB[p]",
        "E: 16, P: 4",
        decls + ";ZA: [P];ZB: [P]",
    )
    assert not equal(c, wrong)


def test_distribution_leaves_a_term_that_only_counts_along_the_rank():
    """A term using e as a value (`e * MU`) but reading nothing along e: an Einsum of its
    own could not iterate e (the language refuses it), so the rule does not split."""
    decls = "X: [E, P];MU: [P];Z: [P]"
    body = "MU[p] = X[e, p] / E;Z[p] = (X[e, p] - MU[p] * e) * MU[p]"
    c = cascade(body, "E: 16, P: 4", decls)
    assert rewrites(distribute_contraction, c) == []
    with pytest.raises(SpecError):
        cascade("MU[p] = X[e, p] / E;ZB[p] = MU[p] * e * MU[p]", "E: 16, P: 4", decls)


def test_distribution_leaves_a_shift_factor_to_reassociation():
    decls = "X: [E, P];W: [E, F];MU: [P];Z: [F, P]"
    body = "MU[p] = X[e, p] / E;Z[f, p] = (X[e, p] - MU[p]) * W[e, f]"
    c = cascade(body, SHIFT_SHAPES, decls)
    assert rewrites(distribute_contraction, c) == []
    assert len(rewrites(reassociate_affine, c)) == 1


def test_distribution_leaves_a_square_alone():
    """LayerNorm's variance sums D * D with D = X - MU: distributing the square, and its
    terms again, is the one-pass variance sum X X / E - MU^2, which at a mean of 1e6 with
    unit spread is off by far more than the checks' 1e-5."""
    c = load_cascade(ROOT / "cascades/layernorm.yaml")
    assert rewrites(distribute_contraction, c) == []
    decls = "X: [E, P];MU: [P];SXX: [P];SX: [P];VAR: [P]"
    exact = cascade(
        "MU[p] = X[e, p] / E;VAR[p] = (X[e, p] - MU[p]) * (X[e, p] - MU[p]) / E",
        "E: 256, P: 8",
        "X: [E, P];MU: [P];VAR: [P]",
    )
    squares = cascade(
        "MU[p] = X[e, p] / E;SXX[p] = X[e, p] * X[e, p];SX[p] = X[e, p];"
        "VAR[p] = SXX[p] / E - MU[p] * SX[p] / E - MU[p] * SX[p] / E + MU[p] * MU[p]",
        "E: 256, P: 8",
        decls,
    )
    shapes = resolve_shapes(exact)
    x = 1e6 + random_inputs(exact, shapes, seed=3)["X"]  # mean 1e6, unit spread
    want = evaluate(exact, {"X": x}, shapes)["VAR"]
    got = evaluate(squares, {"X": x}, shapes)["VAR"]
    assert equal(exact, squares)  # equal at a unit scale: the identity holds
    assert np.max(np.abs(got - want) / np.abs(want)) > 1e-5


def test_defer_moves_a_division_written_in_the_contraction():
    """sum_e X / SD * W = (sum_e X W) / SD: SD free of e, written in Z itself."""
    decls = "X: [E, P];W: [E, F];SD: [P];Z: [F, P]"
    body = "SD[p] = X[e, p] * X[e, p];Z[f, p] = X[e, p] / SD[p] * W[e, f]"
    c = cascade(body, SHIFT_SHAPES, decls)
    (rw,) = rewrites(defer_normalization, c)
    new = apply(rw, c)
    assert equal(c, new)
    assert analyze_passes(c).max_passes == 2 and analyze_passes(new).max_passes == 1


def test_defer_leaves_a_division_along_the_rank_or_by_a_count_in_the_contraction():
    decls = "X: [E, P];W: [E, F];S: [E];Z: [F, P]"
    along = cascade("Z[f, p] = X[e, p] / S[e] * W[e, f]", SHIFT_SHAPES, decls)
    assert rewrites(defer_normalization, along) == []
    wrong = cascade(
        "XW[f, p] = X[e, p] * W[e, f];SS = S[e];Z[f, p] = XW[f, p] / SS",
        SHIFT_SHAPES,
        decls + ";XW: [F, P];SS: []",
    )
    assert not equal(along, wrong)
    mean = cascade("MU[p] = X[e, p] / E", "E: 16, P: 4", "X: [E, P];MU: [P]")
    assert rewrites(defer_normalization, mean) == []  # a mean stays one reduction


# ---- the one-pass variance ------------------------------------------------------------


def test_one_pass_variance_is_equal_on_centred_data_and_marked_unstable():
    c = load_cascade(ROOT / "cascades/layernorm.yaml")
    (rw,) = rewrites(one_pass_variance, c)
    new = apply(rw, c)
    assert equal(c, new)
    assert analyze_passes(c).max_passes == 3 and analyze_passes(new).max_passes == 2
    assert not one_pass_variance.STABLE
    assert all(r.STABLE for r in RULES if r is not one_pass_variance)


def test_one_pass_variance_loses_precision_when_the_mean_is_large():
    c = load_cascade(ROOT / "cascades/layernorm.yaml")
    new = apply(rewrites(one_pass_variance, c)[0], c)
    shapes = resolve_shapes(c)
    x = 1e6 + random_inputs(c, shapes, seed=3)["X"]  # mean 1e6, unit spread
    want = evaluate(c, {"X": x}, shapes)["VAR"]
    got = evaluate(new, {"X": x}, shapes)["VAR"]
    assert np.max(np.abs(got - want) / np.abs(want)) > 1e-5


def test_one_pass_variance_refuses_a_shift_along_the_rank():
    decls = "X: [E, P];B: [E];D: [E, P];VAR: [P]"
    body = "D[e, p] = X[e, p] - B[e];VAR[p] = D[e, p] * D[e, p] / E"
    assert rewrites(one_pass_variance, cascade(body, "E: 16, P: 4", decls)) == []


# ---- the chunked (Chan) variance -------------------------------------------------------

VARIANCE_DECLS = "X: [E, P];MU: [P];D: [E, P];VAR: [P]"


def _variance(mean_of: str = "E"):
    """A variance about MU = sum_e X / `mean_of`, split into chunks of E (the rule's input)."""
    body = f"MU[p] = X[e, p] / {mean_of};D[e, p] = X[e, p] - MU[p];VAR[p] = D[e, p] * D[e, p] / E"
    c = cascade(body, "E: 64, P: 4", VARIANCE_DECLS)
    (split,) = rewrites(partition_rank, c)
    return c, apply(split, c)


def test_chunked_variance_merges_chunks_and_stays_exact_at_a_large_mean():
    c, split = _variance()
    assert rewrites(chunked_variance, c) == []  # chunks first: partition-rank
    (rw,) = rewrites(chunked_variance, split)
    new = apply(rw, split)
    assert rw.site == "VAR" and chunked_variance.STABLE
    assert equal(c, new) and equal(c, new, scale=30.0)
    assert analyze_passes(c).max_passes == 2 and analyze_passes(new).max_passes == 1
    shapes = resolve_shapes(c)
    x = 1e6 + random_inputs(c, shapes, seed=3)["X"]  # mean 1e6, unit spread
    want = evaluate(c, {"X": x}, shapes)["VAR"]
    got = evaluate(new, {"X": x}, resolve_shapes(new))["VAR"]
    assert np.max(np.abs(got - want) / np.abs(want)) < 1e-9  # the one-pass form: > 1e-5


def test_chunked_variance_needs_the_mean_of_the_same_values():
    """About any other centre the merge is wrong: it always measures from the mean."""
    c, split = _variance(mean_of="P")  # MU = sum_e X / P: not the mean over E
    assert rewrites(chunked_variance, split) == []
    _right, right_split = _variance()
    chan = apply(rewrites(chunked_variance, right_split)[0], right_split)
    assert not equal(c, chan)


# ---- the language: a rank's extent as a number ----------------------------------------


def test_an_extent_reads_as_a_number_and_follows_the_shapes():
    c = cascade("MU[p] = X[e, p] / E", "E: 8, P: 3", "X: [E, P];MU: [P]")
    x = np.ones((8, 3))
    assert np.allclose(evaluate(c, {"X": x}, {"E": 8, "P": 3})["MU"], 1.0)
    x2 = np.ones((4, 3))
    assert np.allclose(evaluate(c, {"X": x2}, {"E": 4, "P": 3})["MU"], 1.0)


def test_an_unknown_upper_case_name_is_still_an_unknown_tensor():
    with pytest.raises(SpecError, match="unknown tensor 'Q'"):
        cascade("MU[p] = X[e, p] / Q", "E: 8, P: 3", "X: [E, P];MU: [P]")


@pytest.mark.parametrize("path", sorted((ROOT / "cascades").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_cascade_writes_back_to_itself(path):
    c = load_cascade(path)
    again = loads_cascade(to_yaml(c), str(path))
    assert again.einsums == c.einsums and again.tensors == c.tensors
    assert again.shapes == c.shapes and again.reference == c.reference
