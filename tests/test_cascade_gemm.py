"""GEMM-shaped Einsums (simulator/cascade/gemm.py): which Einsums the GEMM mapper may map,
with several ranks in a role flattened (grouped-query attention's G x P rows)."""

from __future__ import annotations

import pytest

from simulator.cascade.gemm import gemm_shape
from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.plan.gemm_mapper import gemm_of
from simulator.support.errors import SpecError

from .conftest import ROOT


def _one(expr: str, decl: str) -> object:
    text = f"name: t\neinsum:\n  declaration:\n{decl}\n  expressions:\n    - {expr}\n"
    cascade = loads_cascade(text)
    return gemm_shape(cascade, cascade.einsums[0].name)


DECL = "\n".join(
    f"    {t}: [{ranks}]"
    for t, ranks in (
        ("A", "K, M"),
        ("B", "K, N"),
        ("C", "M, N"),
        ("D", "K, M, N"),
        ("X", "B, K, M"),
        ("Y", "B, K, N"),
        ("Z", "B, M, N"),
    )
)


def test_roles_follow_which_accesses_a_rank_indexes():
    s = _one("C[m, n] = A[k, m] * B[k, n]", DECL)
    assert (s.rows, s.cols, s.reduction) == (("M",), ("N",), ("K",))
    assert (s.left, s.right, s.output) == ("A", "B", "C")
    # the operands swapped: rows are what the left operand shares with the output
    s = _one("C[m, n] = B[k, n] * A[k, m]", DECL)
    assert (s.rows, s.cols, s.left) == (("N",), ("M",), "B")


@pytest.mark.parametrize(
    "expr",
    [
        "Z[b, m, n] = X[b, k, m] * Y[b, k, n]",  # a batch rank in all three accesses
        "C[m, n] = A[k, m] + B[k, n]",  # not a product
        "C[m, n] = A[k, m] * D[k, m, n]",  # no cols: N only in the right operand and output
        "C[m, n] = A[k, m] * B[k, n] * 2",  # more than a product of two reads
    ],
)
def test_what_is_not_a_gemm(expr):
    assert _one(expr, DECL) is None


def test_grouped_query_heads_are_rows_of_one_gemm():
    cascade = load_cascade(ROOT / "cascades" / "attention-gqa-3pass.yaml")
    qk, av = gemm_shape(cascade, "QK"), gemm_shape(cascade, "AV")
    assert (qk.rows, qk.cols, qk.reduction) == (("G", "P"), ("M",), ("E",))
    assert (av.rows, av.cols, av.reduction) == (("G", "P"), ("F",), ("M",))
    gemm = gemm_of(cascade, "QK", {"G": 4, "P": 512, "M": 1024, "E": 128})
    assert gemm.ranks == ("GP", "M", "E") and gemm.extents == (4 * 512, 1024, 128)
    with pytest.raises(SpecError, match="no extent for rank"):
        gemm_of(cascade, "QK", {"P": 512, "M": 1024, "E": 128})
    with pytest.raises(SpecError, match="GEMM mapper maps"):
        gemm_of(cascade, "SN", {"G": 4, "P": 512, "M": 1024, "E": 128})
