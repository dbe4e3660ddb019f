"""Operation counts from the iteration space, checked against closed forms."""

from __future__ import annotations

import json

from simulator.cascade.__main__ import main
from simulator.cascade.ops import cascade_ops, totals
from simulator.cascade.parse import load_cascade
from simulator.cascade.shapes import resolve_shapes

from .conftest import CASCADES

M, P, E, F, M0 = 4096, 2048, 64, 32, 256


def _ops(name, **extra):
    cascade = load_cascade(CASCADES / f"{name}.yaml")
    shapes = resolve_shapes(cascade, {k: v for k, v in dict(M=M, P=P, E=E, F=F, **extra).items()})
    return {o.einsum: o for o in cascade_ops(cascade, shapes)}


def test_three_pass_divides_m_times_p():
    ops = _ops("attention-3pass")
    assert ops["A"].count("divide") == M * P
    assert totals(tuple(ops.values()))["divide"] == M * P


def test_deferred_division_divides_f_times_p():
    ops = _ops("attention-3pass-deferred-div")
    assert totals(tuple(ops.values()))["divide"] == F * P


def test_matrix_products_are_macs():
    ops = _ops("attention-3pass")
    assert ops["QK"].count("mac") == E * M * P
    assert ops["AV"].count("mac") == F * M * P
    assert ops["GM"].count("max") == M * P
    assert ops["SN"].count("exp") == M * P


def test_one_pass_costs_extra_exp_and_multiplies():
    one = _ops("attention-1pass", M0=M0)
    three = _ops("attention-3pass")
    m1 = M // M0
    t1, t3 = totals(tuple(one.values())), totals(tuple(three.values()))
    # PRM: one extra exp per (m1, p); SPD and SPNV: (1 + F) multiplies per (m1, p).
    assert t1["exp"] - t3["exp"] == m1 * P
    assert t1.get("mul", 0) - t3.get("mul", 0) == (1 + F) * m1 * P
    assert one["PRM"].count("exp") == m1 * P
    assert one["SPNV"].count("mul") == F * m1 * P
    # Iterative Einsums run M1 steps.
    assert one["RM"].points == m1 * P


def test_filtered_reduction_counts_only_kept_points():
    cascade = load_cascade(CASCADES / "prefix-sum.yaml")
    shapes = resolve_shapes(cascade, {"K": 10, "I": 10})
    ops = {o.einsum: o for o in cascade_ops(cascade, shapes)}
    assert ops["S"].count("add") == 10 * 11 // 2


def test_copies_cost_nothing():
    ops = _ops("attention-1pass", M0=M0)
    assert ops["BK"].total == 0 and ops["RM_init"].total == 0


def test_cli_ops_json_and_baseline(run_cli):
    code, out, err = run_cli(
        main,
        [
            "ops",
            "attention-3pass-deferred-div",
            "--shape",
            f"M={M},P={P},E={E},F={F}",
            "--format",
            "json",
            "--baseline",
            "attention-3pass",
        ],
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["total"]["divide"] == F * P
    assert data["baseline"]["divide"] == M * P
