"""Recomputation: an Einsum made again, for some of its readers, from what it read.

A mapping may make a tensor twice rather than keep it: a group norm's centred features
`XC[n, c, m] = XM[n*C + c, m] - MU[n]` are read by the variance, a sum over every key, and
by the normalisation that the keys' projections read. Kept, XC crosses DRAM between the
statistics' kernel and the keys' blocks; made again in the blocks from XM and MU (one
subtraction a value), it never does. LoopTree calls this recomputation.

:func:`recomputed` writes the cascade a mapping with `recompute:` binds: each named Einsum
copied beside itself under a fresh name (the same expression, its output a fresh tensor
of the same ranks), the listed readers reading the copy. It computes the same values;
where the copy runs is the mapping's business.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

from simulator.cascade.draft import (
    fresh,
    map_reads,
    names_in_use,
    readers,
    restated,
    statement,
)
from simulator.cascade.ir import Access, Cascade, Einsum, Expr, Read, TensorDecl
from simulator.support.errors import Loc, SpecError


def recomputed(
    cascade: Cascade, copies: tuple[tuple[str, tuple[str, ...]], ...], loc: Loc | None = None
) -> Cascade:
    """The cascade with each Einsum of `copies` made again for the readers it lists
    (module docstring); itself where `copies` is empty. An unknown Einsum, one that is no
    computation or a recurrence, or a listed reader that does not read it: one line."""
    if not copies:
        return cascade
    return _recomputed(cascade, copies, loc)


@functools.lru_cache(maxsize=256)
def _recomputed(
    cascade: Cascade, copies: tuple[tuple[str, tuple[str, ...]], ...], loc: Loc | None
) -> Cascade:
    """:func:`recomputed`, one object per (cascade, copies): the planners' caches key on it."""
    taken = names_in_use(cascade)
    renamed: dict[str, dict[str, str]] = {}  # reader -> {tensor: its copy}
    added: dict[str, tuple[Einsum, TensorDecl]] = {}  # original Einsum -> (copy, declaration)
    names = {e.name for e in cascade.einsums}
    for name, chosen in copies:
        if name not in names:
            raise SpecError(f"recompute: unknown Einsum '{name}'", loc)
        e = cascade.einsum(name)
        if e.kind != "compute" or e.iterative is not None:
            raise SpecError(f"recompute: '{name}' is no computation to make again", loc)
        tensor = e.output.tensor
        if not chosen:
            raise SpecError(f"recompute: '{name}' names no reader of its copy", loc)
        reading = {r.name for r in readers(cascade, tensor)}
        copy = fresh(f"{tensor}R", taken)
        for reader in chosen:
            if reader not in reading:
                raise SpecError(f"recompute: '{reader}' does not read '{tensor}'", loc)
            renamed.setdefault(reader, {})[tensor] = copy
        output = dataclasses.replace(e.output, tensor=copy)
        made = dataclasses.replace(
            e,
            name=copy,
            output=output,
            text=statement(output, e.expr, reduce_op=e.reduce_op, reduced=e.reduced),
        )
        added[name] = (made, TensorDecl(copy, cascade.tensor(tensor).ranks))
    einsums: list[Einsum] = []
    for e in cascade.einsums:
        if e.name in renamed:
            e = _reading_copies(e, renamed[e.name])
        einsums.append(e)
        if e.name in added:
            einsums.append(added[e.name][0])
    return dataclasses.replace(
        cascade,
        tensors=(*cascade.tensors, *(decl for _e, decl in added.values())),
        einsums=tuple(einsums),
    )


def _reading_copies(e: Einsum, copies: Mapping[str, str]) -> Einsum:
    """`e` reading each tensor of `copies` as its copy."""

    def fn(acc: Access) -> Expr | None:
        if acc.tensor not in copies:
            return None
        return Read(dataclasses.replace(acc, tensor=copies[acc.tensor]))

    return dataclasses.replace(e, expr=map_reads(e.expr, fn), text=restated(e, fn))
