"""Bad cascades: one line on stderr naming file:line:col, exit code 2, never a traceback."""

from __future__ import annotations

import re

import pytest

from simulator.cascade.__main__ import main
from simulator.cascade.parse import load_cascade
from simulator.support.errors import SpecError

HEAD = "einsum:\n  declaration:\n{decl}  expressions:\n{exprs}"


def _file(tmp_path, decl: dict[str, str], exprs: list[str], extra: str = "") -> str:
    text = extra + HEAD.format(
        decl="".join(f"    {k}: {v}\n" for k, v in decl.items()),
        exprs="".join(f"    - {e}\n" for e in exprs),
    )
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return str(path)


# (declarations, expressions, index of the offending expression, column, message fragment)
CASES = {
    "unknown tensor": ({"A": "[K]", "Y": "[]"}, ["Y = A[k] * B[k]"], 0, 18, "unknown tensor 'B'"),
    "rank with two shapes": (
        {"Q": "[E, P]", "K": "[E, M]", "QK": "[M, P]"},
        ["QK[m, p] = Q[m, p] * K[e, m]"],
        0,
        18,
        "two different shapes",
    ),
    "undeclared rank": (
        {"A": "[K]", "Y": "[K]"},
        ['"Y[k] = A[k : k <= j]"'],
        0,
        15,
        "undeclared rank 'J'",
    ),
    "undeclared rank in stop": (
        {"A": "[K]", "R": "[K]", "Y": "[]"},
        ["R[0] = 0", "R[k+1] = R[k] + A[k] until k == N", "Y = R[K]"],
        1,
        28,
        "undeclared rank 'N'",
    ),
    "read before produced": (
        {"A": "[K]", "Y": "[]", "Z": "[]"},
        ["Z = Y * A[k]", "Y = A[k]"],
        0,
        11,
        "read before it is produced",
    ),
    "dependency cycle": (
        {"A": "[K]", "X": "[K]", "Y": "[K]"},
        ["X[k] = Y[k] + A[k]", "Y[k] = X[k] * 2"],
        0,
        7,
        "dependency cycle",
    ),
    "iterative without init": (
        {"A": "[K]", "R": "[K]", "Y": "[]"},
        ["R[k+1] = R[k] + A[k]  until k == K", "Y = R[K]"],
        0,
        7,
        "no initialisation",
    ),
    "iterative without stop": (
        {"A": "[K]", "R": "[K]", "Y": "[]"},
        ["R[0] = 0", "R[k+1] = R[k] + A[k]", "Y = R[K]"],
        1,
        7,
        "no stopping condition",
    ),
    "syntax error": ({"A": "[K]", "Y": "[]"}, ["Y = A[k] * * A[k]"], 0, 18, "syntax error"),
    "wrong rank count": ({"A": "[K]", "Y": "[]"}, ["Y = A[k, j]"], 0, 11, "indexed with 2"),
    "reduction misses a variable": (
        {"A": "[K, J]", "Y": "[]"},
        ["Y = A[k, j] :: max(k)"],
        0,
        22,
        "must be listed",
    ),
    "unknown function": (
        {"A": "[K]", "Y": "[K]"},
        ["Y[k] = wobble(A[k])"],
        0,
        14,
        "unknown function",
    ),
    "bad partition": (
        {"K": "[M]", "BK": "[M1, M0]"},
        ["BK[m1, m0] = K[m1*M1 + m0]"],
        0,
        20,
        "must read",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_cascade_is_one_clean_line(case, tmp_path, run_cli):
    decl, exprs, index, col, fragment = CASES[case]
    path = _file(tmp_path, decl, exprs)
    line = 4 + len(decl) + index  # 'einsum:', 'declaration:', decls, 'expressions:', exprs
    code, out, err = run_cli(main, ["passes", path])
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {path}:{line}:{col}: "), err
    assert fragment in err


def test_yaml_typo(tmp_path, run_cli):
    path = tmp_path / "typo.yaml"
    path.write_text(
        "einsum:\n  declaration:\n    A: [K\n    Y: []\n  expressions:\n    - Y = A[k]\n"
    )
    code, _, err = run_cli(main, ["passes", str(path)])
    assert code == 2 and re.match(rf"error: {re.escape(str(path))}:4:\d+: YAML syntax", err)


def test_unsafe_yaml_tag_is_rejected(tmp_path, run_cli):
    path = tmp_path / "evil.yaml"
    path.write_text("einsum: !!python/object/apply:os.system ['true']\n")
    code, _, err = run_cli(main, ["passes", str(path)])
    assert code == 2 and "unsupported YAML tag" in err and ":1:9:" in err


def test_missing_file(run_cli):
    code, out, err = run_cli(main, ["passes", "does-not-exist.yaml"])
    assert code == 2 and out == ""
    assert err.startswith("error: does-not-exist.yaml: no such file") and err.count("\n") == 1


def test_subprocess_has_no_traceback(tmp_path):
    import subprocess
    import sys

    path = _file(tmp_path, {"A": "[K]", "Y": "[]"}, ["Y = A[k] * B[k]"])
    proc = subprocess.run(
        [sys.executable, "-m", "simulator.cascade", "passes", path], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["compare", "attention-1pass", "attention-3pass", "--seed", "-1"], "--seed must be 0"),
        (["compare", "attention-1pass", "attention-3pass", "--rtol", "-1"], "--rtol must be"),
        (["compare", "attention-1pass", "attention-3pass", "--rtol", "nan"], "--rtol must be"),
        (["eval", "attention-1pass", "--scale", "0"], "--scale must be"),
        # float64 tensors of a 1M x 1M attention: one line, not a memory error
        (["eval", "attention-1pass", "--shape", "M=1M,P=1M"], "GiB of float64 tensors"),
        (["compare", "attention-1pass", "attention-3pass", "--shape", "M=1M,P=1M"], "GiB"),
    ],
)
def test_bad_numeric_options_are_one_line(run_cli, argv, needle):
    code, out, err = run_cli(main, argv)
    assert code == 2 and out == "", err
    assert needle in err and err.count("\n") == 1


def test_the_trace_cli_checks_its_outputs_first(tmp_path, run_cli):
    from simulator.trace import main as trace_main

    argv = ["--seq", "1K"]
    code, _out, err = run_cli(trace_main, [*argv, "--out", str(tmp_path / "x.txt")])
    assert code == 2 and "a figure needs one of the suffixes" in err and err.count("\n") == 1
    code, _out, err = run_cli(trace_main, [*argv, "--csv", str(tmp_path / "no" / "x.csv")])
    assert code == 2 and "does not exist" in err and err.count("\n") == 1
    assert not (tmp_path / "no").exists()
    code, _out, err = run_cli(trace_main, [*argv, "--csv", str(tmp_path)])  # a folder: inside
    assert code == 0 and (tmp_path / "trace.csv").stat().st_size > 0
    png, table = tmp_path / "w.png", tmp_path / "w.csv"
    code, out, err = run_cli(
        trace_main, [*argv, "--epochs", "100000", "--out", str(png), "--csv", str(table)]
    )
    assert code == 0, err
    # the trace covers the epochs that exist, and says how many
    epochs = int(out.split(" epochs of one instance")[0].split()[-1])
    assert f"traced {epochs}" in out and epochs < 100000
    assert png.stat().st_size > 0 and table.read_text().startswith("cycle,")


def test_reduction_over_an_iterative_rank_inside_its_loop_is_a_cycle(tmp_path, run_cli):
    # Y = R[k] sums every step of R, and each step of R needs Y: no order can compute it.
    decl = {"A": "[K]", "Y": "[]", "R": "[K]", "Z": "[]"}
    exprs = ["R[0] = 0", "Y = R[k]", "R[k+1] = R[k] + Y + A[k]  until k == K", "Z = R[K]"]
    path = _file(tmp_path, decl, exprs)
    for argv in (["passes", path], ["eval", path, "--shape", "K=4"], ["graph", path]):
        code, out, err = run_cli(main, argv)
        command = argv[0]
        assert code == 2 and out == "", (command, out)
        assert err.count("\n") == 1 and "dependency cycle" in err, err
        assert "Y -> R" in err or "R -> Y" in err, err
        line = int(err.split(f"{path}:")[1].split(":")[0])
        assert line in (4 + len(decl) + 1, 4 + len(decl) + 2), err


def test_reduction_over_all_steps_after_the_loop_is_fine(tmp_path, run_cli):
    decl = {"A": "[K]", "R": "[K]", "S": "[]"}
    exprs = ["R[0] = 0", "R[k+1] = R[k] + A[k]  until k == K", "S = R[k]"]
    path = _file(tmp_path, decl, exprs, "shapes: {K: 4}\n")
    code, out, err = run_cli(main, ["eval", path])
    assert code == 0, err
    from simulator.cascade.execute import evaluate, random_inputs
    from simulator.cascade.parse import load_cascade

    cascade = load_cascade(path)
    inputs = random_inputs(cascade, {"K": 4}, seed=1)
    values = evaluate(cascade, inputs, {"K": 4})
    steps = [sum(inputs["A"][:k]) for k in range(4)]  # R[0] .. R[K-1]
    assert abs(float(values["S"]) - sum(steps)) < 1e-9


SHAPES_DECL = {"K": "[M]", "BK": "[M1, M0]"}
SHAPES_EXPR = ["BK[m1, m0] = K[m1*M0 + m0]"]


@pytest.mark.parametrize(
    "shapes, col, fragment",
    [
        ("{M: 4, Q: 3}", 16, "unknown rank 'Q'"),
        ("{M: 10, M0: 4}", 10, "not divisible"),
        ("{M: 8, M0: 4, M1: 3}", 10, "M1 x M0"),
    ],
)
@pytest.mark.parametrize("command", ["passes", "eval"])
def test_bad_shapes_entry_is_named_by_line_and_column(
    tmp_path, run_cli, shapes, col, fragment, command
):
    path = _file(tmp_path, SHAPES_DECL, SHAPES_EXPR, f"shapes: {shapes}\n")
    code, out, err = run_cli(main, [command, path])
    assert code == 2 and out == "", out
    assert err.startswith(f"error: {path}:1:{col}: "), err
    assert fragment in err and err.count("\n") == 1


LOPSIDED = """\
name: lopsided
shapes: {M: 8, P: 8, L: 4, R: 4}
einsum:
  declaration:
    QL: [L, P]
    C: [L, M]
    QR: [R, P]
    KR: [R, M]
    S: [M, P]
  expressions:
    - S[m, p] = QL[l, p] * C[l, m] + QR[r, p] * KR[r, m]
"""


def test_a_sum_over_a_rank_only_some_terms_read_is_a_warning(tmp_path, run_cli):
    """`S = QL[l] C[l] + QR[r] KR[r]` sums the whole right-hand side over l and r (each
    product counted R or L times): valid, so it runs, with one warning line naming the file
    and line. An error later in the same command is the only line; the shipped cascades
    warn of nothing."""
    from .conftest import CASCADES

    path = _warns_once(
        tmp_path / "lopsided.yaml", LOPSIDED, 11, "Einsum 'S' sums over l, r", run_cli
    )
    code, out, err = run_cli(main, ["passes", str(path), "--shape", "Z=4"])
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    _no_warnings(sorted(CASCADES.glob("*.yaml")))


def _warns_once(path, text: str, line: int, says: str, run_cli):
    """`passes` on the file runs (exit 0, a table) with one warning line at `line`."""
    path.write_text(text)
    code, out, err = run_cli(main, ["passes", str(path)])
    assert code == 0 and out
    assert err.startswith(f"warning: {path}:{line}:") and err.count("\n") == 1, err
    assert says in err
    return path


def _no_warnings(paths) -> None:
    from simulator.cascade.parse import load_cascade
    from simulator.support.errors import take_warnings

    take_warnings()
    for path in paths:
        load_cascade(path)
    assert take_warnings() == []


FUNCTION_OF_PRODUCT = """\
name: silu-inside
shapes: {D: 4, N: 3, P: 2}
einsum:
  declaration:
    X: [D, P]
    W: [D, N]
    U: [N, P]
    SD: [P]
  expressions:
    - U[n, p] = silu(X[d, p] * W[d, n])
    - SD[p] = exp(U[n, p] - 1)
"""


def test_a_function_of_a_reduced_product_is_a_warning(tmp_path, run_cli):
    """`U[n, p] = silu(X[d, p] * W[d, n])` reduces silu of each term over d, not silu of the
    contraction (the reduction applies to the whole right-hand side): valid, so it runs, with
    one warning line naming the file and line; a sum of exponentials (`SD`, a softmax's
    denominator) is what it says and warns of nothing, nor do the paper-form cascades."""
    from .conftest import DATA

    says = "Einsum 'U' reduces over d a silu() of a product"
    _warns_once(tmp_path / "silu-inside.yaml", FUNCTION_OF_PRODUCT, 10, says, run_cli)
    _no_warnings(sorted(DATA.glob("paper_cascades*/*.yaml")))


def test_the_reference_says_what_outputs_and_reductions_are():
    from .conftest import CASCADES

    text = " ".join((CASCADES / "README.md").read_text().split())
    assert "are the tensors no Einsum reads" in text and "`MEAN_OUT[p] = MEAN[p]`" in text
    assert "The reduction applies to the whole right-hand side" in text


def test_a_tensor_named_like_a_yaml_boolean_is_told_to_quote_it(tmp_path, run_cli):
    """`ON: [F, P]` reads as `True: [F, P]` in YAML 1.1: the line says so (before: "tensor
    name 'True' must be an identifier"); quoted, the name works."""
    path = _file(tmp_path, {"X": "[F, P]", "ON": "[F, P]"}, ["ON[f, p] = X[f, p]"])
    code, out, err = run_cli(main, ["passes", path])
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"error: {path}:4:5: ") and "YAML boolean" in err and "quote" in err
    quoted = _file(tmp_path, {"X": "[F, P]", "'ON'": "[F, P]"}, ["ON[f, p] = X[f, p]"])
    assert run_cli(main, ["passes", quoted])[0] == 0


def test_a_statement_parsed_before_at_another_line_is_named_at_its_own(tmp_path):
    """The parser keeps each statement's IR by its text and position: the same statement
    two lines lower in another file (or the same file, edited) is named at its new line and
    in its new file, never at the one kept."""
    statement = "Y = A[k] * B[k]"  # B is undeclared: the checker names the statement
    names = []
    for i, extra in enumerate(({}, {"C": "[K]", "D": "[K]"})):
        path = tmp_path / f"c{i}.yaml"
        decl = {"A": "[K]", "Y": "[]", **extra}
        path.write_text(
            HEAD.format(
                decl="".join(f"    {k}: {v}\n" for k, v in decl.items()),
                exprs=f"    - {statement}\n",
            )
        )
        with pytest.raises(SpecError, match="unknown tensor 'B'") as err:
            load_cascade(path)
        names.append(str(err.value.loc))
    assert names == [f"{tmp_path / 'c0.yaml'}:6:18", f"{tmp_path / 'c1.yaml'}:8:18"]
