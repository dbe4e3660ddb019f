"""The canonical form and rewriting through notation (issue 35).

`tests/notations.py` writes a cascade in other notations (renamed, sums and scalings split,
literal extents, reordered Einsums, swapped operands, all at once); from each, `rewrite`
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

from simulator.cascade.evaluate import evaluate, random_inputs
from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.cascade.rewrite import rewrite
from simulator.cascade.rewrite.canonical import canonical
from simulator.cascade.rewrite.draft import draft_of
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
    assert seen >= 6


def test_show_canonical(capsys, tmp_path):
    path = Path(tmp_path) / "apart.yaml"
    path.write_text(LAYERNORM_APART)
    assert cascade_main(["show", str(path), "--canonical"]) == 0
    out = capsys.readouterr().out
    assert "# - MU: 64 is the extent E" in out
    loads_cascade(out, "<shown>")  # what it prints is a cascade file
    assert cascade_main(["show", "layernorm", "--canonical"]) == 0
    assert "already canonical" in capsys.readouterr().out
