"""`python -m simulator.cascade rewrite`: the shipped examples reach the passes the issue
names, the results are equal to the originals (and to the hand-written cascades), and a
property test over random small cascades: whatever the search accepts is equivalent and
never has more passes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cascade.__main__ import main
from simulator.cascade.execute import compare, evaluate, random_inputs
from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade.rewrite import rewrite
from simulator.cascade.shapes import resolve_shapes

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_attention_3pass_becomes_1pass_equal_to_both_originals(tmp_path, capsys):
    out = tmp_path / "attention-rewritten.yaml"
    code, text, _ = run(
        capsys, "rewrite", "attention-3pass", "--target-passes", "1", "-o", str(out)
    )
    assert code == 0
    new = load_cascade(out)
    assert analyze_passes(new).max_passes == 1
    for name in ("attention-3pass", "attention-1pass"):
        other = load_cascade(ROOT / f"cascades/{name}.yaml")
        for scale in (1.0, 35.0):  # 35: logits of about +-1e4 (E = 64)
            result = compare(other, new, scale=scale, rtol=1e-5)
            assert result.equivalent, (name, scale, result)
    # the chain the paper derives, in its order
    rules = [line.split()[1] for line in text.splitlines() if line.startswith("  ")]
    # (the file's operands are first put in one order: a canonical-form step of its own)
    assert [r for r in rules if r != "canonical-form"] == [
        "defer-normalization",
        "partition-rank",
        "iterative-reduction",
        "running-max",
    ]
    assert "-> 1 pass" in text and f"wrote {out}" in text


def test_logits_of_1e4_overflow_without_the_max(capsys):
    # the check is able to fail: the naive cascade (no max) is not finite at that scale
    naive = load_cascade(ROOT / "cascades/attention-naive.yaml")
    three = load_cascade(ROOT / "cascades/attention-3pass.yaml")
    assert not compare(three, naive, scale=35.0).equivalent


def test_layernorm_matmul_reaches_1_pass_with_stable_rules(tmp_path, capsys):
    """The deviations' pass goes with the chunked (Chan) variance, the normalisation's with
    deferral and reassociation; with --allow-unstable the search still prefers this chain
    to the one-pass variance, which reaches 1 pass too but cancels."""
    c = load_cascade(ROOT / "cascades/layernorm-matmul.yaml")
    assert analyze_passes(c).max_passes == 3
    stable = rewrite(c)
    assert stable.passes_after.max_passes == 1 and stable.unstable == ()
    assert {s.rule for s in stable.steps} - {"canonical-form"} == {
        "defer-normalization",
        "partition-rank",
        "reassociate-affine",
        "chunked-variance",
    }
    assert compare(c, stable.cascade, scale=30.0).equivalent
    either = rewrite(c, allow_unstable=True)
    assert either.passes_after.max_passes == 1 and either.unstable == ()
    code, text, _ = run(capsys, "rewrite", "layernorm-matmul", "--allow-unstable")
    assert code == 0 and "warning" not in text and "chunked-variance" in text


AFFINE_LAYERNORM_MATMUL = """\
name: affine-layernorm-matmul
shapes: {{E: 64, P: 8, F: 16}}
einsum:
  declaration:
    X: [E, P]
    G: [E]
    B: [E]
    W: [E, F]
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
"""
# LayerNorm with its scale G and shift B, then a matmul: the centring X - MU and the
# normalisation sit inside the contraction, under a sum with the shift.
AFFINE = AFFINE_LAYERNORM_MATMUL.format(
    declarations="    Y: [E, P]\n    Z: [F, P]",
    expressions="    - Y[e, p] = D[e, p] / SD[p] * G[e] + B[e]\n    - Z[f, p] = Y[e, p] * W[e, f]",
)
# The same, distributed by hand: the mean folded into the matmul,
# Z = (sum_e X G W - MU sum_e G W) / SD + sum_e B W.
DISTRIBUTED = AFFINE_LAYERNORM_MATMUL.format(
    declarations="    XGW: [F, P]\n    GW: [F]\n    BW: [F]\n    Z: [F, P]",
    expressions=(
        "    - XGW[f, p] = X[e, p] * G[e] * W[e, f]\n    - GW[f] = G[e] * W[e, f]\n"
        "    - BW[f] = B[e] * W[e, f]\n"
        "    - Z[f, p] = (XGW[f, p] - MU[p] * GW[f]) / SD[p] + BW[f]"
    ),
)


def test_a_layernorm_with_scale_and_shift_before_a_matmul_reaches_the_distributed_passes():
    """The distributed form's matmul reads X beside the statistics: as written 2 passes
    (the variance's deviations), and 1 once the variance is merged chunk by chunk. From the
    affine LayerNorm (3 passes) the rewrite reaches that 1 with stable rules (it stayed at
    2 while the sum with the shift B kept MU and SD inside the contraction)."""
    affine = loads_cascade(AFFINE, "<affine>")
    distributed = loads_cascade(DISTRIBUTED, "<distributed>")
    assert compare(affine, distributed, scale=30.0).equivalent
    assert analyze_passes(affine).max_passes == 3
    assert analyze_passes(distributed).max_passes == 2
    want = rewrite(distributed).passes_after.max_passes
    got = rewrite(affine)
    assert got.passes_after.max_passes == want == 1 and got.unstable == ()
    assert "distribute-contraction" in {s.rule for s in got.steps}
    assert compare(affine, got.cascade, scale=30.0).equivalent


CENTRED_GRAM = """\
name: centred-gram
shapes: {E: 32, P: 4, Q: 6}
einsum:
  declaration:
    X: [E, P]
    Y: [E, Q]
    MX: [P]
    MY: [Q]
%s
  expressions:
    - MX[p] = X[e, p] / E
    - MY[q] = Y[e, q] / E
%s
"""


def test_a_centred_gram_matrix_reaches_the_passes_of_its_expansion():
    """C = sum_e (X - MX) (Y - MY) waits for both means (2 passes over E); expanded by
    hand, XY - MX sum Y - MY sum X + E MX MY reads X and Y once with them (1 pass). The
    rewrite reaches that: the second reassociation leaves sum_e (Y - MY), one factor,
    which only distributing (E MY for the constant term) takes apart."""
    gram = loads_cascade(
        CENTRED_GRAM % ("    C: [P, Q]", "    - C[p, q] = (X[e, p] - MX[p]) * (Y[e, q] - MY[q])"),
        "<gram>",
    )
    expanded = loads_cascade(
        CENTRED_GRAM
        % (
            "    XY: [P, Q]\n    SX: [P]\n    SY: [Q]\n    C: [P, Q]",
            "    - XY[p, q] = X[e, p] * Y[e, q]\n    - SX[p] = X[e, p]\n    - SY[q] = Y[e, q]\n"
            "    - C[p, q] = XY[p, q] - MX[p] * SY[q] - MY[q] * SX[p] + E * MX[p] * MY[q]",
        ),
        "<expanded>",
    )
    assert compare(gram, expanded, scale=30.0).equivalent
    assert analyze_passes(gram).max_passes == 2
    got = rewrite(gram)
    assert got.passes_after.max_passes == analyze_passes(expanded).max_passes == 1
    assert "distribute-contraction" in {s.rule for s in got.steps}


def test_layernorm_alone_reaches_its_floor_with_welford_not_the_unstable_rule():
    """Y is indexed by E and reads its statistics: 2 passes is the floor, reached by the
    stable Welford update; with --allow-unstable the one-pass variance reaches 2 too, and
    the search still prefers the stable chain."""
    c = load_cascade(ROOT / "cascades/layernorm.yaml")
    for allow in (False, True):
        result = rewrite(c, allow_unstable=allow)
        assert (result.passes_before.max_passes, result.passes_after.max_passes) == (3, 2)
        assert [s.rule for s in result.steps if s.rule != "canonical-form"] == ["welford-variance"]
        assert result.unstable == () and result.rejected == ()


def test_rmsnorm_swiglu_reaches_one_pass():
    c = load_cascade(ROOT / "cascades/rmsnorm-ffn.yaml")
    result = rewrite(c)
    assert (result.passes_before.max_passes, result.passes_after.max_passes) == (2, 1)
    assert compare(c, result.cascade, scale=1.0).equivalent


def test_no_rule_lowers_a_one_pass_cascade(tmp_path, capsys):
    out = tmp_path / "same.yaml"
    code, text, _ = run(capsys, "rewrite", "attention-1pass", "-o", str(out))
    assert code == 0 and "no rule lowers the passes" in text
    again = load_cascade(out)
    original = load_cascade(ROOT / "cascades/attention-1pass.yaml")
    assert again.einsums == original.einsums


def test_json_report_and_printed_cascade(capsys):
    code, text, _ = run(capsys, "rewrite", "cascade1-dot", "--format", "json")
    report = json.loads(text)
    assert code == 0 and report["passes_before"] == 2 and report["passes_after"] == 1
    printed = loads_cascade(report["cascade_file"], "printed.yaml")
    assert analyze_passes(printed).max_passes == 1


def test_a_target_not_reached_exits_1(capsys):
    code, text, _ = run(capsys, "rewrite", "layernorm", "--target-passes", "1")
    assert code == 1 and "target of 1 pass not reached" in text


def test_a_cascade_without_shapes_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "noshape.yaml"
    text = (ROOT / "cascades/attention-3pass.yaml").read_text()
    path.write_text(text.replace("shapes: {M: 1024, P: 1024, E: 64, F: 64}\n", ""))
    code, out, err = run(capsys, "rewrite", str(path))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "cannot check rewrites" in err


def test_bad_target_is_one_line(capsys):
    code, _, err = run(capsys, "rewrite", "attention-3pass", "--target-passes", "zero")
    assert code == 2 and len(err.strip().splitlines()) == 1


# ---- property: random small cascades --------------------------------------------------

# Building blocks over X[I, J] (and W[J, K]): each appends one Einsum reading earlier
# tensors; divisions are by positive values, so the checks compare well-conditioned sums.
BLOCKS = ("rowmax", "rowsum", "shift", "scale", "softexp", "contract", "square", "rowmean")


def _build(choices: list[int]) -> str:
    decls = {"X": "[I, J]", "W": "[J, K]"}
    lines: list[str] = []
    mats, rows = ["X"], []
    for n, pick in enumerate(choices):
        kind = BLOCKS[pick % len(BLOCKS)]
        t = f"T{n}"
        m = mats[-1]
        r = rows[-1] if rows else None
        if kind in ("rowmax", "rowsum", "rowmean") or r is None:
            if kind == "rowmax":
                lines.append(f'"{t}[i] = {m}[i, j] :: max(j)"')
            elif kind == "rowmean":
                lines.append(f"{t}[i] = {m}[i, j] / J")
            else:
                lines.append(f"{t}[i] = {m}[i, j]")
            decls[t] = "[I]"
            rows.append(t)
        elif kind == "shift":
            lines.append(f"{t}[i, j] = {m}[i, j] - {r}[i]")
            decls[t] = "[I, J]"
            mats.append(t)
        elif kind == "scale":
            lines.append(f"{t}[i, j] = {m}[i, j] / (1 + {r}[i] * {r}[i])")
            decls[t] = "[I, J]"
            mats.append(t)
        elif kind == "softexp":
            lines.append(f"{t}[i, j] = exp({m}[i, j] - {r}[i])")
            decls[t] = "[I, J]"
            mats.append(t)
        elif kind == "contract":
            lines.append(f"{t}[i, k] = {m}[i, j] * W[j, k]")
            decls[t] = "[I, K]"
        else:  # square
            lines.append(f"{t}[i] = {m}[i, j] * {m}[i, j] / J")
            decls[t] = "[I]"
            rows.append(t)
    # the last matrix goes through a matmul, as activations do (else it is a result
    # indexed by J, which needs its statistics first whatever the rules do)
    lines.append(f"OUT[i, k] = {mats[-1]}[i, j] * W[j, k]")
    decls["OUT"] = "[I, K]"
    text = "name: random\nshapes: {I: 4, J: 16, K: 3}\neinsum:\n  declaration:\n"
    text += "".join(f"    {k}: {v}\n" for k, v in decls.items())
    text += "  expressions:\n" + "".join(f"    - {line}\n" for line in lines)
    return text


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(st.lists(st.integers(0, 63), min_size=2, max_size=6), st.booleans())
def test_accepted_rewrites_are_equivalent_and_never_worse(choices, unstable):
    text = _build(choices)
    c = loads_cascade(text, "random.yaml")
    result = rewrite(c, allow_unstable=unstable)
    assert result.passes_after.max_passes <= result.passes_before.max_passes
    assert result.rejected == ()  # no rule produced a wrong candidate
    # equivalence again, on inputs the search never saw (an absolute floor for outputs
    # that cancel to about zero, such as the mean of deviations from a mean)
    shapes = resolve_shapes(c)
    inputs = random_inputs(c, shapes, seed=12345)
    want = evaluate(c, inputs, shapes)
    got = evaluate(result.cascade, inputs, resolve_shapes(result.cascade))
    for t in c.outputs:
        assert np.isfinite(got[t]).all()
        assert np.allclose(got[t], want[t], rtol=1e-6, atol=1e-9), (text, result.steps, t)
