"""The rewrite search's budget and reach: how long it goes on, a rule at every site at
once, and the progress it measures between pass counts (issue 42)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from simulator.cascade.execute import compare
from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade.rewrite import rewrite
from simulator.cascade.rewrite.everywhere import everywhere
from simulator.cascade.rewrite.rule_search import (
    MAX_EXPANSIONS,
    MIN_EXPANSIONS,
    PATIENCE,
    Budget,
)
from simulator.cascade.rewrite.rules import distribute_contraction, iterative_reduction
from simulator.cascade.rewrite.rules.base import Context
from simulator.cascade.shapes import resolve_shapes

ROOT = Path(__file__).resolve().parents[1]

LAYERNORM_FFN = """\
name: layernorm-ffn
shapes: {{E: 32, P: 4, F: 8}}
einsum:
  declaration:
    X: [E, P]
    G: [E]
    B: [E]
    W1: [E, F]
    W3: [E, F]
    MU: [P]
    D: [E, P]
    VAR: [P]
    SD: [P]
{declarations}
  expressions:
    - MU[p] = X[e, p] / E
    - D[e, p] = X[e, p] - MU[p]
    - VAR[p] = D[e, p] * D[e, p] / E
    - SD[p] = sqrt(VAR[p] + 0.00001)
{expressions}
    - A[f, p] = silu(H1[f, p]) * H3[f, p]
"""
# LayerNorm with scale and shift, then a SwiGLU FFN's two projections of the same Y.
WRITTEN = LAYERNORM_FFN.format(
    declarations="    Y: [E, P]\n    H1: [F, P]\n    H3: [F, P]\n    A: [F, P]",
    expressions=(
        "    - Y[e, p] = D[e, p] / SD[p] * G[e] + B[e]\n"
        "    - H1[f, p] = Y[e, p] * W1[e, f]\n    - H3[f, p] = Y[e, p] * W3[e, f]"
    ),
)
# The same with the mean folded into both matmuls by hand.
DISTRIBUTED = LAYERNORM_FFN.format(
    declarations=(
        "    XW1: [F, P]\n    GW1: [F]\n    BW1: [F]\n    XW3: [F, P]\n    GW3: [F]\n"
        "    BW3: [F]\n    H1: [F, P]\n    H3: [F, P]\n    A: [F, P]"
    ),
    expressions="\n".join(
        f"    - XW{i}[f, p] = X[e, p] * G[e] * W{i}[e, f]\n"
        f"    - GW{i}[f] = G[e] * W{i}[e, f]\n    - BW{i}[f] = B[e] * W{i}[e, f]\n"
        f"    - H{i}[f, p] = (XW{i}[f, p] - MU[p] * GW{i}[f]) / SD[p] + BW{i}[f]"
        for i in (1, 3)
    ),
)


def _context(c):
    return Context(c, analyze_passes(c), resolve_shapes(c))


def test_the_budget_spends_the_minimum_then_goes_on_only_while_it_gains():
    budget = Budget((3, 5))
    budget.spent = MIN_EXPANSIONS - 1
    assert budget.more()  # the minimum, gain or not
    budget.spent = MIN_EXPANSIONS
    assert not budget.more()  # nothing gained since the start: stop at the minimum
    budget.last_gain = MIN_EXPANSIONS - 1
    assert budget.more() and budget.spent - budget.last_gain < PATIENCE
    budget.spent = budget.last_gain + PATIENCE
    assert not budget.more()  # PATIENCE expansions without a gain
    budget.last_gain = budget.spent = MAX_EXPANSIONS
    assert not budget.more()  # never past the cap, gaining or not


def test_a_candidate_gains_with_fewer_passes_at_most_or_in_all():
    budget = Budget((3, 5))
    budget.spent = 7
    budget.saw(SimpleNamespace(passes=lambda: (3, 4)))  # as many at most, fewer in all
    assert budget.last_gain == 7 and budget.record == (3, 4)
    budget.spent = 9
    budget.saw(SimpleNamespace(passes=lambda: (3, 4)))  # the same again is no gain
    budget.saw(SimpleNamespace(passes=lambda: (3, 5)))  # nor more
    assert budget.last_gain == 7
    budget.saw(SimpleNamespace(passes=lambda: (2, 9)))  # fewer at most
    assert budget.last_gain == 9 and budget.record == (2, 9)


def test_late_walks_count_the_walks_that_wait_for_a_reduction():
    """layernorm-matmul walks E in MU (pass 0), D and VAR (after MU: pass 1), Y and Z
    (after VAR: pass 2): 0 + 1 + 1 + 2 + 2 = 6; deferring the division moves Z's walk (as
    DW) to pass 1: 5, at the same 3 passes."""
    c = load_cascade(ROOT / "cascades/layernorm-matmul.yaml")
    assert analyze_passes(c).late_walks == 6
    deferred = loads_cascade(
        (ROOT / "cascades/layernorm-matmul.yaml")
        .read_text()
        .replace("    Z: [F, P]", "    DW: [F, P]\n    Z: [F, P]")
        .replace(
            "    - Z[f, p] = Y[e, p] * W[e, f]",
            "    - DW[f, p] = D[e, p] * W[e, f]\n    - Z[f, p] = DW[f, p] / SD[p]",
        ),
        "<deferred>",
    )
    assert analyze_passes(deferred).max_passes == 3
    assert analyze_passes(deferred).late_walks == 5


def test_a_rule_at_every_site_at_once():
    c = loads_cascade(WRITTEN, "<ffn>")
    found = list(distribute_contraction.candidates(_context(c)))
    assert [rw.site for rw in found] == ["H1", "H3"]
    both = everywhere(distribute_contraction, found, resolve_shapes)
    assert both is not None and both.site == "H1, H3"
    new = both.draft.build()
    assert {"H1A", "H1B", "H3A", "H3B"} <= {t.name for t in new.tensors}
    assert compare(c, new, scale=30.0).equivalent
    assert everywhere(distribute_contraction, found[:1], resolve_shapes) is None  # one site
    # a rule not marked for it is not tried at every site by the search
    assert distribute_contraction.AT_EVERY_SITE and not iterative_reduction.AT_EVERY_SITE


def test_a_layernorm_before_two_projections_reaches_the_distributed_passes():
    """Both projections must fold the mean in before the matmuls leave the statistics'
    passes: the hand-distributed form is 2 passes as written (the variance's deviations)
    and 1 with the variance merged chunk by chunk. From the written form the search
    reaches that 1 (it stayed at 2 with the 32-expansion budget, breadth-first among the
    orders of the two sites), deterministically."""
    written = loads_cascade(WRITTEN, "<ffn>")
    distributed = loads_cascade(DISTRIBUTED, "<distributed>")
    assert compare(written, distributed, scale=30.0).equivalent
    assert analyze_passes(written).max_passes == 3
    assert analyze_passes(distributed).max_passes == 2
    want = rewrite(distributed).passes_after.max_passes
    got = rewrite(written)
    assert got.passes_after.max_passes == want == 1 and got.unstable == ()
    assert compare(written, got.cascade, scale=30.0).equivalent
    again = rewrite(written)
    assert again.steps == got.steps and again.expanded == got.expanded
    assert again.cascade == got.cascade
