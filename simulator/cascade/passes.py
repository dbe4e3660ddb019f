"""Passes and minimum live footprint: properties of a cascade that hold for every mapping.

Definition (FuseMax paper, section III; `fusemax-reference.md` section 4). A pass over a
fibre of rank R is a traversal of its elements. When an Einsum must traverse an R fibre
again after *all* of it has been reduced (a read-read dependency through a full reduction
over R), every schedule makes one more pass. An N-pass cascade has a chain of N-1 such
reductions.

How it is computed. Per rank group G (an original rank with its partitions, M = M1 x M0),
every tensor gets a state (level, reduced): `level` counts the full reductions over G its
values depend on, `reduced` the components of G already reduced on top of that level
(LM has reduced M0 of the M fibre, not all of it). An Einsum starts at the combination of
its inputs' states (the highest level, and the union of the components reduced at that
level); it outputs its start plus the components it reduces; once every component of G is
reduced, the level increases. Reading the final step of an iterative rank (`RNV[f, M1, p]`)
counts as reducing that rank. Iterative ranks otherwise read only the previous step, so
they never add a level. A filtered reduction (`A[k : k <= i]`) reduces a prefix, not the
fibre, and adds no level. The states are a monotone fixpoint, so recurrences converge.

The cascade makes 1 + (highest start level of an Einsum traversing G) passes over G. For a
tensor T, the passes over its G fibre count the levels at which T -- or a tensor derived
from it element-wise along G -- is traversed. Its minimum live footprint is the whole fibre
(G) when that is more than one pass; otherwise the components reduced between T's
production and a later traversal in the same pass (the M0 chunk of BQK in 1-pass
attention); otherwise 1 (streamed).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cascade.ir import Access, Cascade, Einsum, ISym, rank_of


@dataclass(frozen=True)
class State:
    level: int
    reduced: frozenset[str]
    why: tuple[str, ...] = ()  # the Einsums whose full reductions raised the level


@dataclass(frozen=True)
class FiberPasses:
    tensor: str
    rank: str  # the rank group (original rank), e.g. "M"
    components: tuple[str, ...]  # how the tensor indexes it, e.g. ("M1", "M0")
    passes: int
    live_footprint: str  # symbolic: "M", "M0", "1"
    reductions: tuple[str, ...]  # the full reductions separating the passes


@dataclass(frozen=True)
class PassReport:
    cascade: str
    max_passes: int
    per_rank: tuple[tuple[str, int, tuple[str, ...]], ...]  # (group, passes, reductions)
    fibers: tuple[FiberPasses, ...]

    def to_json(self) -> dict:
        return {
            "cascade": self.cascade,
            "max_passes": self.max_passes,
            "ranks": [
                {"rank": g, "passes": n, "pass_boundaries": list(why)}
                for g, n, why in self.per_rank
            ],
            "fibers": [
                {
                    "tensor": f.tensor,
                    "rank": f.rank,
                    "components": list(f.components),
                    "passes": f.passes,
                    "live_footprint": f.live_footprint,
                    "pass_boundaries": list(f.reductions),
                }
                for f in self.fibers
            ],
        }


ZERO = State(0, frozenset())


def _components_iterated(cascade: Cascade, e: Einsum, group: str) -> frozenset[str]:
    return frozenset(rank_of(v) for v in e.iteration if cascade.rank_group(rank_of(v)) == group)


def _filtered_vars(e: Einsum) -> set[str]:
    out: set[str] = set()
    for acc in e.reads():
        for pos in acc.indices:
            if pos.filter is not None:
                from simulator.cascade.ir import index_vars

                out.update(index_vars(pos.expr))
    return out


def _normalize(state: State, comps: frozenset[str], einsum: str) -> State:
    if comps and state.reduced >= comps:
        return State(state.level + 1, frozenset(), state.why + (einsum,))
    return state


def _combine(states: list[State]) -> State:
    if not states:
        return ZERO
    top = max(s.level for s in states)
    reduced: frozenset[str] = frozenset()
    why: tuple[str, ...] = ()
    for s in states:
        if s.level == top:
            reduced |= s.reduced
            if len(s.why) > len(why):
                why = s.why
    return State(top, reduced, why)


def _read_state(
    cascade: Cascade, acc: Access, states: dict[str, State], group: str, comps: frozenset[str]
) -> State:
    state = states.get(acc.tensor, ZERO)
    info = cascade.iterative_tensors().get(acc.tensor)
    if info is not None:
        pos, var = info
        ix = acc.indices[pos].expr
        bound = cascade.iterative_map.get(var)
        if isinstance(ix, ISym) and ix.name == bound and rank_of(var) in comps:
            # The final step of an iterative rank: everything along it has been consumed.
            state = _normalize(
                State(state.level, state.reduced | {rank_of(var)}, state.why), comps, acc.tensor
            )
    return state


def _states(cascade: Cascade, group: str) -> tuple[dict[str, State], dict[str, State]]:
    """Fixpoint of tensor states and Einsum start states for one rank group."""
    comps = frozenset(cascade.group_components(group))
    tensor_state: dict[str, State] = {}
    start: dict[str, State] = {}
    for _ in range(4 * len(cascade.einsums) + 4):
        changed = False
        for e in cascade.einsums:
            if e.kind == "init":
                continue
            begin = _combine(
                [_read_state(cascade, a, tensor_state, group, comps) for a in e.reads()]
            )
            filtered = _filtered_vars(e)
            reduced = frozenset(
                rank_of(v) for v in e.reduced if v not in filtered and rank_of(v) in comps
            )
            out = _normalize(State(begin.level, begin.reduced | reduced, begin.why), comps, e.name)
            if start.get(e.name) != begin or tensor_state.get(e.output.tensor) != out:
                start[e.name] = begin
                tensor_state[e.output.tensor] = out
                changed = True
        if not changed:
            break
    return tensor_state, start


def _traverses(cascade: Cascade, acc: Access, group: str) -> bool:
    """Does this read walk a fibre of `group` (a variable indexes one of its ranks)?"""
    decl = cascade.tensor(acc.tensor)
    for rank, pos in zip(decl.ranks, acc.indices, strict=True):
        if cascade.rank_group(rank) == group:
            from simulator.cascade.ir import index_vars

            if index_vars(pos.expr):
                return True
    return False


def analyze_passes(cascade: Cascade) -> PassReport:
    groups = cascade.rank_groups()
    per_rank = []
    fibers: list[FiberPasses] = []
    for group in groups:
        comps = frozenset(cascade.group_components(group))
        tstate, start = _states(cascade, group)
        traversing = [
            e
            for e in cascade.einsums
            if e.kind != "init" and _components_iterated(cascade, e, group)
        ]
        deepest = max(traversing, key=lambda e: start[e.name].level, default=None)
        n = 1 + (start[deepest.name].level if deepest else 0)
        per_rank.append((group, n, start[deepest.name].why if deepest else ()))
        for t in cascade.tensors:
            t_comps = tuple(r for r in t.ranks if cascade.rank_group(r) == group)
            if not t_comps:
                continue
            fibers.append(_fiber(cascade, t.name, group, t_comps, comps, tstate, start))
    max_passes = max((n for _, n, _ in per_rank), default=1)
    return PassReport(cascade.name, max_passes, tuple(per_rank), tuple(fibers))


def _fiber(
    cascade: Cascade,
    tensor: str,
    group: str,
    t_comps: tuple[str, ...],
    comps: frozenset[str],
    tstate: dict[str, State],
    start: dict[str, State],
) -> FiberPasses:
    # Tensors derived from `tensor` element-wise along the group (they keep a group rank).
    derived = {tensor}
    changed = True
    while changed:
        changed = False
        for e in cascade.einsums:
            if e.kind == "init" or e.output.tensor in derived:
                continue
            reads_derived = any(
                a.tensor in derived and _traverses(cascade, a, group) for a in e.reads()
            )
            keeps_group = any(cascade.rank_group(rank_of(v)) == group for v in e.output_vars)
            if reads_derived and keeps_group:
                derived.add(e.output.tensor)
                changed = True
    readers = [
        e
        for e in cascade.einsums
        if e.kind != "init"
        and _components_iterated(cascade, e, group)
        and any(a.tensor in derived and _traverses(cascade, a, group) for a in e.reads())
    ]
    own = tstate.get(tensor, ZERO)
    if not readers:
        return FiberPasses(tensor, group, t_comps, 1, "1", ())
    deepest = max(readers, key=lambda e: start[e.name].level)
    passes = 1 + start[deepest.name].level - own.level
    if passes > 1:
        why = start[deepest.name].why[len(own.why) :]
        return FiberPasses(tensor, group, t_comps, passes, group, why)
    chunk: set[str] = set()
    for e in readers:
        s = start[e.name]
        if s.level == own.level:
            chunk |= (s.reduced - own.reduced) & _components_iterated(cascade, e, group)
    ordered = [c for c in cascade.group_components(group) if c in chunk]
    footprint = "*".join(ordered) if ordered else "1"
    return FiberPasses(tensor, group, t_comps, 1, footprint, ())


def pass_index(cascade: Cascade) -> dict[str, int]:
    """The pass each Einsum runs in: its highest start level over all rank groups (0-based).

    Two Einsums in the same pass can hand values over directly; a value read in a later
    pass must have been stored."""
    groups = cascade.rank_groups()
    out = {e.name: 0 for e in cascade.einsums}
    for group in groups:
        _, start = _states(cascade, group)
        for name, state in start.items():
            out[name] = max(out[name], state.level)
    return out
