"""A phase's `schedule:` tree from its Einsums' dependencies and arrays.

The schedule tree is the analytic engine's closed form of one tile (the cycle engine
simulates the dependencies themselves). For a phase on a 2D and a 1D array coupled through
their interconnect (a reduction down the columns into the 1D array, a broadcast back), one
tile's Einsums fall into:

* the **head** -- 2D Einsums that wait for nothing on the 1D array (QK, LM);
* the **sync** -- 1D Einsums the rest of the 2D work waits for (RM);
* the **middle** -- the remaining 2D Einsums and the 1D Einsums that need no remaining 2D
  result (SLN, SLD, SLNV | PRM, SPD, SPNV), which the two arrays run side by side;
* the **tail** -- 1D Einsums that need a middle 2D result (RD, RNV, AV).

The middle is cut at its join points: for each tail Einsum, in cascade order, the middle
Einsums it needs on each array form one `par` step (RD joins SLN, SLD with PRM, SPD; RNV
joins SLNV with SPNV). Pipelined (the waterfall), the tail overlaps the next tile's head:
`par: [head, tail]`, sync, join steps. Strictly sequential tiles, a tail Einsum fed
directly by the tile's last 2D Einsum runs in that step instead (the tile's drain), and a
sync Einsum reading a value reduced down the columns waits for the reduction to drain
(`stall: tiles * ARRAY.meshY`).

A phase whose arrays exchange only tiles through the buffer (double-buffered) overlaps
whole: `par: [2D Einsums, 1D Einsums]`. Anything else runs in sequence, in cascade order.
"""

from __future__ import annotations

from typing import Any

from simulator.strategies.roles import Roles


def _par(two: list[str], one: list[str]) -> list[Any]:
    """One step: the 2D and the 1D Einsums side by side (a list item per Einsum if only one
    array has work)."""
    if two and one:
        return [{"par": [two, one]}]
    return list(two or one)


def waterfall_schedule(
    roles: Roles,
    einsums: list[str],
    array_of: dict[str, str],
    two_d: str,
    pipelined: bool,
    reduced_down_columns: set[str],
) -> list[Any] | None:
    """The schedule of a coupled two-array tile (see module docstring), or None when the
    tile does not have that shape (then the caller falls back to a sequence)."""
    order = {n: i for i, n in enumerate(einsums)}
    on2 = [n for n in einsums if array_of[n] == two_d]
    on1 = [n for n in einsums if array_of[n] != two_d]
    anc = {n: roles.ancestors(n) & set(einsums) for n in einsums}
    head = [n for n in on2 if not anc[n] & set(on1)]
    rest2 = [n for n in on2 if n not in head]
    sync: list[str] = []
    for n in on1:
        waited_by_2d = any(n in anc[m] for m in rest2)
        if waited_by_2d and anc[n] <= set(head) | set(sync):
            sync.append(n)
    tail = [n for n in on1 if n not in sync and anc[n] & set(rest2)]
    mid1 = [n for n in on1 if n not in sync and n not in tail]
    if not head or not rest2 or not sync:
        return None
    if any(anc[m] & set(mid1) for m in rest2) or any(anc[m] & set(tail) for m in rest2):
        return None  # the 2D array waits on the 1D array a second time: not this shape
    steps: list[tuple[list[str], list[str]]] = []
    grouped: set[str] = set()
    for t in tail:
        two = [m for m in rest2 if m in anc[t] and m not in grouped]
        one = [m for m in mid1 if m in anc[t] and m not in grouped]
        if two or one:
            steps.append((two, one))
            grouped |= set(two) | set(one)
    left2 = [m for m in rest2 if m not in grouped]
    left1 = [m for m in mid1 if m not in grouped]
    if left2 or left1:
        steps.append((left2, left1))
    overlap = list(tail)
    if not pipelined and rest2:
        last = max(rest2, key=order.__getitem__)
        drains = [t for t in tail if last in roles.preds[t]]
        overlap = [t for t in tail if t not in drains]
        for two, one in steps:
            if last in two:
                one += drains
    schedule: list[Any] = _par(head, overlap)
    if not pipelined:
        waits = [h for s in sync for h in roles.preds[s] if h in reduced_down_columns]
        if waits:
            schedule.append({"stall": f"tiles * {two_d}.meshY"})
    schedule += sync
    for two, one in steps:
        schedule += _par(two, one)
    return schedule


def decoupled_schedule(einsums: list[str], array_of: dict[str, str], two_d: str) -> list[Any]:
    """Arrays that hand each other whole tiles through the buffer overlap completely."""
    on2 = [n for n in einsums if array_of[n] == two_d]
    on1 = [n for n in einsums if array_of[n] != two_d]
    return _par(on2, on1)


def two_stage_schedule(
    roles: Roles, einsums: list[str], array_of: dict[str, str], two_d: str
) -> list[Any]:
    """Tiles handed between the arrays in the PEs' registers (no second copy to overlap
    with): the 1D Einsums of a tile beside the 2D Einsums that need none of their results,
    then the remaining 2D Einsums (FlashAttention-3's two stages: a chunk's softmax beside
    the next chunk's scores, then its values)."""
    on1 = [n for n in einsums if array_of[n] != two_d]
    head = [n for n in einsums if array_of[n] == two_d and not roles.ancestors(n) & set(on1)]
    rest = [n for n in einsums if array_of[n] == two_d and n not in head]
    return [*_par(head, on1), *rest]
