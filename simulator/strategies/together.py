"""Independent spans in one phase: one loop over the blocks of rows running both.

Memorizing Transformers attend each query to its local context and, apart, to the 32
(key, value) pairs retrieved for it; the two attentions are two spans of the `segments`
template, each FLAT's block of rows. As two phases one after the other, the memories' is
bound by DRAM (the retrieved pairs) and the local context's by the 2D array, and their
latencies add. Run by one loop over the blocks of rows, each block computes both: the
memories stream in while the local scores compute. Two spans go together when neither reads
what the other makes and their phases walk the same loops but for each one's own fibre
(`[P2, M1, P1]` and `[P2, R1, P1]` -> `[P2, M1, R1, P1]`). An input of the rows that a block
reads once -- a span whose fibre is one chunk, the 32 memories -- streams through the phase
rather than being held for the block, where it would crowd the other span's fibres.
"""

from __future__ import annotations

import itertools
from typing import Any

from simulator.cascade.ir import Cascade

Unit = tuple[set[str], list[dict[str, Any]]]  # (its Einsums, its phases)


def _made(cascade: Cascade, names: set[str]) -> set[str]:
    return {cascade.einsum(n).output.tensor for n in names}


def _read(cascade: Cascade, names: set[str]) -> set[str]:
    return {a.tensor for n in names for a in cascade.einsum(n).reads()}


def independent(cascade: Cascade, a: set[str], b: set[str]) -> bool:
    """Neither group of Einsums reads what the other makes."""
    return not (_read(cascade, a) & _made(cascade, b) or _read(cascade, b) & _made(cascade, a))


def any_independent(cascade: Cascade, spans: list[tuple[str, ...]]) -> bool:
    """Some two of the spans need nothing of each other."""
    return any(independent(cascade, set(a), set(b)) for a, b in itertools.combinations(spans, 2))


def _loops(a: list[str], b: list[str]) -> list[str] | None:
    """The loops of two phases that walk the same loops but one each (its fibre's): both,
    the first's own loop before the second's; None otherwise."""
    if len(a) != len(b) or a == b:
        return None
    differ = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    if len(differ) != 1 or a[differ[0]] in b or b[differ[0]] in a:
        return None
    i = differ[0]
    return [*a[: i + 1], b[i], *a[i + 1 :]]


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """Two span phases as one (None: they cannot be)."""
    if any(k in p for p in (a, b) for k in ("mapper", "pipeline")):
        return None
    loops = _loops(list(a.get("loops", [])), list(b.get("loops", [])))
    sa, sb = a.get("schedule", []), b.get("schedule", [])
    if loops is None or len(sa) != 1 or len(sb) != 1:
        return None
    if not (isinstance(sa[0], dict) and isinstance(sb[0], dict) and "par" in sa[0]):
        return None
    pa, pb = sa[0]["par"], sb[0].get("par")
    if pb is None or len(pa) != len(pb):
        return None
    ta, tb = a.get("tensors", {}), b.get("tensors", {})
    if any(ta[t] != tb[t] for t in set(ta) & set(tb)):
        return None
    einsums: dict[str, Any] = {}
    for phase in (a, b):  # each Einsum walks its own phase's loops, as it did alone
        for n, over in phase.get("einsums", {}).items():
            einsums[n] = {"loops": list(phase["loops"]), **over}
    merged = {
        "name": a["name"],
        "loops": loops,
        "einsums": einsums,
        "schedule": [{"par": [[*x, *y] for x, y in zip(pa, pb, strict=True)]}],
    }
    if ta or tb:
        merged["tensors"] = {**ta, **tb}
    return merged


def _streamed(
    cascade: Cascade, span: set[str], body: dict[str, Any], phase: dict[str, Any]
) -> dict[str, Any]:
    """The span's inputs of the rows a block reads once (its fibre one chunk; none of them
    read outside it), streamed rather than held for the block."""
    partitions, factors = body.get("partitions", {}), body.get("factors", {})
    loops = phase.get("loops", [])
    one_chunk = any(
        len(comps) == 2 and comps[0] in loops and str(factors.get(comps[1])) == rank
        for rank, comps in partitions.items()
    )
    if not one_chunk:
        return {}
    return {
        t: {"home": "DRAM", "keep": "stream"}
        for t, place in body.get("tensors", {}).items()
        if t in cascade.inputs
        and place.get("keep") in loops
        and place.get("home") == "DRAM"
        and {e.name for e in cascade.readers(t)} <= span
    }


def run_together(
    cascade: Cascade, units: list[Unit], spans: list[set[str]], bodies: list[dict[str, Any]]
) -> list[Unit]:
    """The units (spans and kernels, in an order their data allows) with consecutive spans
    that need nothing of each other and walk the same blocks of rows in one phase."""
    out: list[Unit] = []
    members: list[list[int]] = []  # the spans each unit of `out` runs (none: a kernel)
    for names, phases in units:
        own = [i for i, span in enumerate(spans) if span == names]
        if out and own and members[-1] and len(phases) == 1 and len(out[-1][1]) == 1:
            before, was = out[-1], members[-1]
            merged = (
                _merged(before[1][0], phases[0]) if independent(cascade, before[0], names) else None
            )
            if merged is not None:
                tensors = dict(merged.get("tensors", {}))
                for i in (*was, *own):
                    tensors.update(_streamed(cascade, spans[i], bodies[i], merged))
                if tensors:
                    merged["tensors"] = tensors
                out[-1] = (before[0] | names, [merged])
                members[-1] = [*was, *own]
                continue
        out.append((names, phases))
        members.append(own)
    return out
