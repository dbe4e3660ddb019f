"""The canonical form and rewriting through notation (issue 35).

`tests/notations.py` writes a cascade in other notations (renamed, sums and scalings split,
literal extents, scalings as products with the reciprocal, reordered Einsums, swapped
operands, all at once); from each, `rewrite`
must reach the pass count it reaches from the shipped form, and what it returns must equal
its input numerically. CI runs the cascades below; CASCADE_NOTATIONS_ALL=1 (`make
notations`) runs every shipped cascade (about 3 minutes).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from simulator.cascade.draft import draft_of
from simulator.cascade.execute import evaluate, random_inputs
from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.cascade.rewrite import rewrite
from simulator.cascade.rewrite.canonical import canonical
from simulator.cascade.shapes import resolve_shapes
from simulator.cascade_cli import main as cascade_main

from .conftest import ROOT
from .notations import notations

CASCADES = ROOT / "cascades"
QUICK = (
    "layernorm",
    "softmax",
    "rmsnorm",
    "rmsnorm-matmul",
    "rmsnorm-ffn",
    "layernorm-matmul",
    "cascade1-dot",
    "gelu-mlp",
)
ALL = tuple(sorted(p.stem for p in CASCADES.glob("*.yaml")))
# shapes too large to evaluate numerically (a vocabulary of 128K): checked at smaller ones
SMALLER = {"cross-entropy": {"D": 64, "C": 512, "P": 32}}
NAMES = ALL if os.environ.get("CASCADE_NOTATIONS_ALL") else QUICK

LAYERNORM_APART = """\
name: layernorm-apart
description: LayerNorm with the sums and divisions apart and literals for the sizes
shapes: {E: 64, P: 32}
einsum:
  declaration:
    X: [E, P]
    S: [P]
    MU: [P]
    C: [E, P]
    SQ: [P]
    VAR: [P]
    Y: [E, P]
  expressions:
    - S[p] = X[e, p]
    - MU[p] = S[p] / 64
    - C[e, p] = X[e, p] - MU[p]
    - SQ[p] = C[e, p] * C[e, p]
    - VAR[p] = SQ[p] / 64
    - Y[e, p] = C[e, p] / sqrt(VAR[p] + 0.00001)
"""


def _layernorm_scaled(mean: str, variance: str) -> str:
    """LayerNorm over E = 128 with the mean's and the variance's scalings as given."""
    return f"""\
name: layernorm-scaled
shapes: {{E: 128, P: 32}}
einsum:
  declaration:
    X: [E, P]
    TOT: [P]
    MU: [P]
    D: [E, P]
    VAR: [P]
    Y: [E, P]
  expressions:
    - TOT[p] = X[e, p]
    - MU[p] = TOT[p] * {mean}
    - D[e, p] = X[e, p] - MU[p]
    - VAR[p] = D[e, p] * D[e, p] * {variance}
    - Y[e, p] = D[e, p] / sqrt(VAR[p] + 0.00001)
"""


def _equal(a, b) -> bool:
    """Same outputs on the same random inputs (outputs matched in order)."""
    shapes = resolve_shapes(a, None)
    inputs = random_inputs(a, shapes, 0, 1.0)
    renamed = dict(zip(a.inputs, b.inputs, strict=True))
    got_a = evaluate(a, inputs, shapes)
    got_b = evaluate(b, {renamed[k]: v for k, v in inputs.items()}, resolve_shapes(b, None))
    for x, y in zip(a.outputs, b.outputs, strict=True):
        if not np.allclose(got_a[x], got_b[y], rtol=1e-6, atol=1e-9):
            return False
    return True


def test_the_issues_layernorm_reaches_the_shipped_forms_passes():
    """The sum and the division apart, literals for E: 3 passes as written (no rule saw
    the mean), 2 after rewrite -- what the shipped layernorm.yaml reaches."""
    apart = loads_cascade(LAYERNORM_APART, "<layernorm apart>")
    shipped = load_cascade(CASCADES / "layernorm.yaml")
    got = rewrite(apart)
    assert got.passes_before.max_passes == 3
    assert got.passes_after.max_passes == rewrite(shipped).passes_after.max_passes == 2
    assert got.steps[0].rule == "canonical-form"
    assert all(c.max_rel_error is None or c.max_rel_error <= 1e-5 for c in got.checks)


def test_canonical_form_of_the_apart_layernorm():
    c = canonical(loads_cascade(LAYERNORM_APART, "<layernorm apart>"))
    text = "\n".join(e.text for e in c.cascade.einsums)
    assert "/ E" in text and "/ 64" not in text  # the literal is the extent
    assert not any(e.output.tensor in ("S", "SQ") for e in c.cascade.einsums)  # folded
    # the square root is per row, not per element
    hoisted = [e for e in c.cascade.einsums if "sqrt" in e.text]
    assert len(hoisted) == 1 and len(hoisted[0].output.indices) == 1
    assert _equal(loads_cascade(LAYERNORM_APART, "<a>"), c.cascade)


@pytest.mark.parametrize(
    ("mean", "variance"),
    [("(1 / 128)", "0.0078125"), ("(1 / E)", "(1 / 128)"), ("0.0078125", "(1 / E)")],
)
def test_a_product_with_the_reciprocal_of_the_count_is_a_mean(mean, variance):
    """`* (1 / 128)`, `* 0.0078125`, `* (1 / E)` with E = 128 the summed rank: a mean, so
    the LayerNorm reaches the shipped form's 2 passes (its floor: Y reads its row's
    statistics, then walks the row) instead of staying at the 3 it is written in."""
    text = _layernorm_scaled(mean, variance)
    c = canonical(loads_cascade(text, "<scaled>"))
    scales = {e.output.tensor: e.expr for e in c.cascade.einsums}
    assert str(scales["MU"]) == "(X[e, p] / E)"
    assert str(scales["VAR"]) == "((D[e, p] * D[e, p]) / E)"
    assert _equal(loads_cascade(text, "<a>"), c.cascade)
    got = rewrite(loads_cascade(text, "<scaled>"))
    assert (got.passes_before.max_passes, got.passes_after.max_passes) == (3, 2)


@pytest.mark.parametrize(
    "scale",
    [
        "(1 / 64)",  # 64 is no rank's extent
        "0.5",  # nor 2
        "0.0078126",  # not the double nearest 1 / 128
        "(1 / P)",  # P is not summed over
    ],
)
def test_a_reciprocal_of_no_summed_extent_stays_a_product(scale):
    c = canonical(loads_cascade(_layernorm_scaled(scale, scale), "<scaled>"))
    assert not any(e.expr.name == "div" for e in c.cascade.einsums if e.output.tensor == "MU")


def test_a_reciprocal_outside_a_mean_stays_a_product():
    """A soft-cap's `QK * (1 / CAP)` multiplies (no divider per point): not a mean."""
    c = load_cascade(CASCADES / "attention-softcap-3pass.yaml")
    canon = canonical(c).cascade
    assert any("* (1 / CAP)" in e.text for e in canon.einsums)


def _shipped(name: str):
    c = load_cascade(CASCADES / f"{name}.yaml")
    if name not in SMALLER:
        return c
    shapes = tuple((k, SMALLER[name].get(k, v)) for k, v in c.shapes)
    return replace(draft_of(c), shapes=shapes).build()


@pytest.mark.parametrize("name", ALL)
def test_canonical_form_computes_the_same(name):
    c = _shipped(name)
    canon = canonical(c)
    assert _equal(c, canon.cascade)
    again = canonical(canon.cascade)
    assert again.changes == ()  # canonical is a fixpoint


@pytest.mark.parametrize("name", NAMES)
def test_every_notation_reaches_the_shipped_passes(name):
    shipped = _shipped(name)
    want = rewrite(shipped).passes_after.max_passes
    seen = 0
    for notation, variant in notations(shipped):
        got = rewrite(variant)
        assert got.passes_after.max_passes == want, (name, notation)
        assert all(c.max_rel_error is None or c.max_rel_error <= 1e-5 for c in got.checks)
        assert _equal(variant, got.cascade), (name, notation)
        seen += 1
    assert seen >= 7


def test_show_canonical(capsys, tmp_path):
    path = Path(tmp_path) / "apart.yaml"
    path.write_text(LAYERNORM_APART)
    assert cascade_main(["show", str(path), "--canonical"]) == 0
    out = capsys.readouterr().out
    assert "# - MU: 64 is the extent E" in out
    loads_cascade(out, "<shown>")  # what it prints is a cascade file
    assert cascade_main(["show", "layernorm", "--canonical"]) == 0
    assert "already canonical" in capsys.readouterr().out
