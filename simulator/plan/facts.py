"""Facts about a cascade that every plan of it uses: which Einsums compute, which tensors
are partitioned views of others, each Einsum's pass, each tensor's producer; and where a
tensor lives in a phase.

Planning step 0: read once per evaluation, before any extent is chosen.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from simulator.cascade.ir import Cascade, Einsum, Read
from simulator.cascade.passes import pass_index
from simulator.spec.mapping import Phase, Placement


@dataclass(frozen=True)
class CascadeFacts:
    cascade: Cascade
    aliases: dict[str, str]  # copy outputs -> the tensor they re-index (BK -> K)
    compute: tuple[Einsum, ...]
    passes: dict[str, int]
    producers: dict[str, str]  # canonical tensor -> producing compute Einsum


@functools.lru_cache(maxsize=64)
def cascade_facts(cascade: Cascade) -> CascadeFacts:
    """The facts of a cascade, computed once per cascade (the mapper plans hundreds of
    mappings of one); read-only."""
    aliases: dict[str, str] = {}
    for e in cascade.einsums:
        if e.kind == "copy" and isinstance(e.expr, Read):
            src = e.expr.access.tensor
            aliases[e.output.tensor] = aliases.get(src, src)
    compute = tuple(e for e in cascade.einsums if e.kind == "compute")
    producers = {}
    for e in compute:
        producers[aliases.get(e.output.tensor, e.output.tensor)] = e.name
    return CascadeFacts(cascade, aliases, compute, pass_index(cascade), producers)


def canonical(facts: CascadeFacts, tensor: str) -> str:
    """The tensor an alias (a partitioned view such as BK of K) stands for."""
    return facts.aliases.get(tensor, tensor)


def placement_of(phase: Phase, facts: CascadeFacts, tensor: str) -> Placement:
    """Where a tensor lives in a phase: its placement, an alias's, or the default."""
    # kept in the phase (planning asks for every access of every candidate's phases), each
    # answer with the cascade it was worked out for (reused only for that very cascade)
    kept = phase.__dict__.setdefault("_placement_of", {})
    found = kept.get(tensor)
    if found is None or found[0] is not facts.cascade:
        found = kept[tensor] = (facts.cascade, _placement_of(phase, facts, tensor))
    return found[1]


def _placement_of(phase: Phase, facts: CascadeFacts, tensor: str) -> Placement:
    canon = canonical(facts, tensor)
    for name in (tensor, canon):
        p = phase.placement(name)
        if p is not None:
            return p
    for alias, target in facts.aliases.items():
        if target == canon:
            p = phase.placement(alias)
            if p is not None:
                return p
    cascade = facts.cascade
    if canon in cascade.inputs or canon in cascade.outputs:
        return Placement(canon, "DRAM", "stream")
    return Placement(canon, "register", None)
