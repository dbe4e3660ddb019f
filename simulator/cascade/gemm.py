"""GEMM-shaped Einsums: `OUT[m, n] = L[k, m] * R[k, n]`, and the same with several ranks in
a role (`QK[m, g, p] = Q[e, g, p] * K[e, m]`: rows G x P).

Why here: a GEMM is a fact of the cascade, and two stages read it -- the binder (which
Einsums the unfused strategy hands to the GEMM mapper) and the planner (the mapper's
problem). One recogniser keeps them agreeing.

Roles by which accesses a variable indexes: **rows** index the left operand and the output,
**cols** the right operand and the output, the **reduction** both operands. Several ranks in
one role flatten into one GEMM dimension (their product): grouped-query attention's `G` query
heads and `P` queries are `G x P` rows of one GEMM that shares every K tile among them. A
variable in all three accesses (a batch rank) is not a GEMM: the caller makes it an
instance.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from simulator.cascade.ir import Cascade, IVar, Op, Read, rank_of
from simulator.cascade.ops import ops_per_point

ROLES = ("rows", "cols", "reduction")


@dataclass(frozen=True)
class GemmShape:
    """The ranks of each role (in the order the output, then the operands, index them) and
    the tensors by role."""

    rows: tuple[str, ...]
    cols: tuple[str, ...]
    reduction: tuple[str, ...]
    left: str
    right: str
    output: str

    def role_of(self) -> dict[str, str]:
        """rank -> role (rows, cols, reduction)."""
        return {
            r: role
            for role, ranks in zip(ROLES, (self.rows, self.cols, self.reduction), strict=True)
            for r in ranks
        }


def gemm_shape(cascade: Cascade, einsum: str) -> GemmShape | None:
    """The GEMM an Einsum is, or None: a product of two plain reads (each index a single
    variable) costing one MAC per point, with at least one rank in every role and no
    variable in all three accesses."""
    found = batched_gemm_shape(cascade, einsum)
    return found[0] if found is not None and not found[1] else None


@functools.lru_cache(maxsize=4096)
def batched_gemm_shape(cascade: Cascade, einsum: str) -> tuple[GemmShape, tuple[str, ...]] | None:
    """A batch of GEMMs: the GEMM an Einsum is for each value of the ranks in all three
    accesses (`SLNV[f, m1, p] = SLN[m1, m0, p] * BV[f, m1, m0]`: one GEMM per chunk m1),
    and those batch ranks; None when it is not one (see :func:`gemm_shape`). Kept per
    process (the answer is immutable): the mapper's templates and every candidate's GEMM
    phases ask it of the same cascade thousands of times."""
    e = cascade.einsum(einsum)
    if e.kind != "compute" or not isinstance(e.expr, Op) or e.expr.name != "mul":
        return None
    args = e.expr.args
    if len(args) != 2 or not all(isinstance(a, Read) for a in args):
        return None
    if dict(ops_per_point(cascade, e)) != {"mac": 1}:
        return None
    left, right = (a.access for a in args)  # type: ignore[union-attr]
    accesses = (left, right, e.output)
    if not all(isinstance(p.expr, IVar) for acc in accesses for p in acc.indices):
        return None
    lv, rv, ov = (
        [p.expr.name for p in acc.indices]  # type: ignore[union-attr]
        for acc in accesses
    )
    ls, rs, os_ = set(lv), set(rv), set(ov)
    batch = ls & rs & os_
    if ls | rs != os_ | (ls & rs):
        return None
    rows = tuple(rank_of(v) for v in ov if v in ls and v not in batch)
    cols = tuple(rank_of(v) for v in ov if v in rs and v not in batch)
    reduction = tuple(rank_of(v) for v in lv if v in rs and v not in batch)
    if not (rows and cols and reduction):
        return None
    shape = GemmShape(rows, cols, reduction, left.tensor, right.tensor, e.output.tensor)
    return shape, tuple(rank_of(v) for v in ov if v in batch)


def flat_name(ranks: tuple[str, ...]) -> str:
    """The name of a role's flattened dimension: the rank itself, or the ranks joined
    (`GP` for G x P)."""
    return "".join(ranks)
