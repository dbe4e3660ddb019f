"""Passes and minimum live footprint: properties of a cascade that hold for every mapping.

Definition (FuseMax paper, section III). A pass over a
fibre of rank R is a traversal of its elements. When an Einsum must traverse an R fibre
again after *all* of it has been reduced (a read-read dependency through a full reduction
over R), every schedule makes one more pass. An N-pass cascade has a chain of N-1 such
reductions.

How it is computed. Per rank group G (an original rank with its partitions, M = M1 x M0),
every tensor gets a state (level, reduced): `level` counts the full reductions over G its
values depend on, `reduced` the components of G already reduced on top of that level
(LM has reduced M0 of the M fibre, not all of it). An Einsum -- initialisations included:
`R[0] = Y` makes R depend on everything Y does -- starts at the combination of its inputs'
states (the highest level, and the union of the components reduced at that level); it
outputs its start plus the components it reduces; once every component of G is reduced,
the level increases. Reading the final step of an iterative rank (`RNV[f, M1, p]`) counts as
reducing that rank. Iterative ranks otherwise read only the previous step, so they never
add a level. The states are a monotone fixpoint, so recurrences converge -- unless a
recurrence reduces G fully at every step (`S[k] = T[k, j]`, `T[k+1, j] = T[k, j] + S[k]`):
then the passes grow with the number of steps, and the analysis says so instead of
reporting a number.

Filters. A filtered reduction (`GM[p] = QK[m : m <= p, p] :: max(m)`) counts as a full
reduction over the filtered rank. The filter restricts the points, but nothing here proves
that the kept points end before a later use needs the rest of the fibre -- and for causal
attention they do not: for the last p the prefix is the whole fibre, so SN waits for all of
QK's fibre as in the unmasked cascade. Counting it as full is the conservative choice; it can
over-count only for a filter that keeps a bounded prefix (`k < 4`), which no cascade here has.

The cascade makes 1 + (highest start level of an Einsum traversing G) passes over G; an
Einsum runs in the earliest pass its inputs allow (the reference table's convention: in
2-pass attention SLN is produced in pass 1 and kept for pass 2). For a tensor T, the passes
over its G fibre run from the first to the last pass in which T -- or a tensor derived from
it element-wise along G -- is traversed: from its production if an Einsum computes it, from
its first read if it is an input. A partition copy (`BK[e, m1, m0] = K[e, m1*M0 + m0]`) is a
view, not a traversal: BK is read where its readers read it. Its minimum live footprint is
its own whole fibre (M, or M1 for a [M1, P] tensor) when that is more than one pass;
otherwise the components of its fibre reduced between its first and a later traversal in
the same pass (the M0 chunk of BQK in 1-pass attention); otherwise 1 (streamed).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from simulator.cascade.graph import components, recurrences
from simulator.cascade.ir import Access, Cascade, Einsum, ISym, Read, index_vars, rank_of
from simulator.cascade.normal import split_reads_viewed
from simulator.support.errors import SpecError
from simulator.support.progress import Steps


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
    # Over every rank and every Einsum walking it, the pass the walk starts in (0-based),
    # summed: it falls when a walk moves to an earlier pass even where the pass count does
    # not (yet) -- the rewrite search's measure of progress between pass counts.
    late_walks: int = 0

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


@dataclass(frozen=True)
class GroupStates:
    """The fixpoint for one rank group: where every Einsum starts, what it outputs, and the
    state of every tensor (all its producers combined, the initialisation included)."""

    start: dict[str, State]
    out: dict[str, State]
    tensors: dict[str, State]


def _components_iterated(cascade: Cascade, e: Einsum, group: str) -> frozenset[str]:
    return frozenset(rank_of(v) for v in e.iteration if cascade.rank_group(rank_of(v)) == group)


def _is_view(e: Einsum) -> bool:
    """A copy that only re-indexes one tensor, like the partition
    `BK[e, m1, m0] = K[e, m1*M0 + m0]`: it computes nothing, so it is not a traversal of
    its own; BK is traversed where its readers read it."""
    return e.kind == "copy" and isinstance(e.expr, Read)


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
    cascade: Cascade, acc: Access, states: dict[str, State], comps: frozenset[str]
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


def _reduced_components(cascade: Cascade, e: Einsum, comps: frozenset[str]) -> frozenset[str]:
    """Components of the group the Einsum reduces; a rank reduced whole (`max(m)` where the
    cascade also splits M into parts) reduces all of its parts. A filter (`QK[m : m <= p,
    p]`) does not make the reduction partial: see the module docstring."""
    out: set[str] = set()
    for v in e.reduced:
        leaves = set(cascade.group_components(rank_of(v)))
        if leaves <= comps:
            out |= leaves
    return frozenset(out)


def _states(cascade: Cascade, group: str) -> GroupStates:
    """Least fixpoint of the Einsum and tensor states for one rank group.

    Every Einsum raises a level at most twice (a final-step read, then its own full
    reduction), so along the dependency graph no level can exceed twice the number of
    Einsums; a level beyond that can only come from a recurrence that reduces the group at
    every step, whose pass count grows with the number of steps."""
    comps = frozenset(cascade.group_components(group))
    start: dict[str, State] = {}
    out: dict[str, State] = {}
    tensors: dict[str, State] = {}
    limit = 2 * len(cascade.einsums)
    while True:
        changed = False
        for e in cascade.einsums:
            begin = _combine([_read_state(cascade, a, tensors, comps) for a in e.reads()])
            end = _normalize(
                State(
                    begin.level, begin.reduced | _reduced_components(cascade, e, comps), begin.why
                ),
                comps,
                e.name,
            )
            if start.get(e.name) != begin or out.get(e.name) != end:
                start[e.name], out[e.name] = begin, end
                producers = cascade.producers(e.output.tensor)
                tensors[e.output.tensor] = _combine(
                    [out[q.name] for q in producers if q.name in out]
                )
                changed = True
        if not changed:
            return GroupStates(start, out, tensors)
        runaway = [e for e in cascade.einsums if out[e.name].level > limit]
        if runaway:
            raise _growing_passes(cascade, group, runaway)


def _growing_passes(cascade: Cascade, group: str, runaway: list[Einsum]) -> SpecError:
    """The error for a recurrence that makes one more pass over `group` at every step."""
    names = {e.name for e in runaway}
    for rec in recurrences(cascade):
        if names & set(rec.einsums):
            first = cascade.einsum(rec.einsums[0])
            return SpecError(
                f"passes over {group} cannot be counted: the recurrence "
                f"{{{', '.join(rec.einsums)}}} reduces all of {group} at every step of "
                f"{', '.join(rec.carried_by) or 'its rank'}, so the count grows with the "
                "number of steps",
                first.loc,
            )
    first = runaway[0]
    return SpecError(
        f"passes over {group} cannot be counted: the levels of "
        f"{', '.join(e.name for e in runaway)} keep rising, so the count grows with the "
        "number of steps",
        first.loc,
    )


def _traverses(cascade: Cascade, acc: Access, group: str) -> bool:
    """Does this read walk a fibre of `group` (a variable indexes one of its ranks)?"""
    decl = cascade.tensor(acc.tensor)
    for rank, pos in zip(decl.ranks, acc.indices, strict=True):
        if cascade.rank_group(rank) == group and index_vars(pos.expr):
            return True
    return False


def analyze_passes(cascade: Cascade) -> PassReport:
    """:func:`_passes` of the cascade, kept per cascade (the mapper's templates ask it at
    every candidate structure; the report is immutable)."""
    return _passes(cascade)


@functools.lru_cache(maxsize=256)
def _passes(cascade: Cascade) -> PassReport:
    """The passes of every schedule. An input read both whole and through a split of one of
    its ranks (Funnel's queries pooled from the tokens, `X[d, p*S + s]`, beside `X[d, m]`)
    is analysed as the mapper reads it, its split read a view of its own
    (:func:`~simulator.cascade.normal.split_reads_viewed`), and reported in the cascade's
    names: otherwise the split's parts (the pooled queries P) would be parts of the tokens M
    wherever they appear, and the rows' walks after the softmax walks of M."""
    view = split_reads_viewed(cascade)
    if view is cascade:
        return _analyze(cascade)
    return _folded(_analyze(view), cascade, view)


def _folded(report: PassReport, cascade: Cascade, view: Cascade) -> PassReport:
    """A report on the view in the cascade's names: a rank the view added is its original
    (the most passes of the two), a viewed input the input it views."""
    rank = dict(view.tied_ranks)
    tensor = dict(view.input_views)
    per: dict[str, tuple[int, tuple[str, ...]]] = {}
    for group, n, why in report.per_rank:
        name = rank.get(group, group)
        if name not in per or n > per[name][0]:
            per[name] = (n, why)
    per_rank = tuple((g, *per[g]) for g in cascade.rank_groups() if g in per)
    fibers: dict[tuple[str, str], FiberPasses] = {}
    for f in report.fibers:
        named = FiberPasses(
            tensor.get(f.tensor, f.tensor),
            rank.get(f.rank, f.rank),
            tuple(rank.get(c, c) for c in f.components),
            f.passes,
            rank.get(f.live_footprint, f.live_footprint),
            f.reductions,
        )
        key = (named.tensor, named.rank)
        if key not in fibers or named.passes > fibers[key].passes:
            fibers[key] = named
    max_passes = max((n for _, n, _ in per_rank), default=1)
    return dataclasses.replace(
        report,
        cascade=cascade.name,
        max_passes=max_passes,
        per_rank=per_rank,
        fibers=tuple(fibers.values()),
    )


def _analyze(cascade: Cascade) -> PassReport:
    groups = cascade.rank_groups()
    per_rank = []
    fibers: list[FiberPasses] = []
    late = 0
    total = len(groups) * len(cascade.tensors)
    with Steps("passes: tensor fibres", total, "fibre") as progress:
        for g, group in enumerate(groups):
            states = _states(cascade, group)
            traversing = [e for e in cascade.einsums if _components_iterated(cascade, e, group)]
            deepest = max(traversing, key=lambda e: states.start[e.name].level, default=None)
            n = 1 + (states.start[deepest.name].level if deepest else 0)
            late += sum(states.start[e.name].level for e in traversing)
            per_rank.append((group, n, states.start[deepest.name].why if deepest else ()))
            reach = _reach(cascade, group, states)
            for i, t in enumerate(cascade.tensors):
                progress.update(g * len(cascade.tensors) + i + 1)
                t_comps = tuple(r for r in t.ranks if cascade.rank_group(r) == group)
                if not t_comps:
                    continue
                fibers.append(_fiber(cascade, t.name, group, t_comps, states, reach))
    max_passes = max((n for _, n, _ in per_rank), default=1)
    return PassReport(cascade.name, max_passes, tuple(per_rank), tuple(fibers), late)


def _leaves(cascade: Cascade, ranks: tuple[str, ...]) -> frozenset[str]:
    return frozenset(leaf for r in ranks for leaf in cascade.group_components(r))


def _fibre_extent(cascade: Cascade, group: str, t_comps: tuple[str, ...]) -> str:
    """A whole fibre of the tensor along the group: the group (M) when it spans all of it,
    else its own components (M1 for LM[M1, P], whose fibre holds M1 values, not M)."""
    if _leaves(cascade, t_comps) >= frozenset(cascade.group_components(group)):
        return group
    return "*".join(t_comps)


@dataclass(frozen=True)
class _Readers:
    """What the traversals of a tensor's values -- its readers and the readers of what is
    computed from it element-wise along the group -- come to: their least and greatest
    start levels, the first Einsum (cascade order) at the greatest, the components every
    one of them has reduced on starting, and those some one of them has reduced and
    iterates."""

    lo: int
    hi: int
    deepest: Einsum
    reduced_by_all: frozenset[str]
    reduced_iterated: frozenset[str]


def _reach(cascade: Cascade, group: str, states: GroupStates) -> dict[str, _Readers | None]:
    """Every tensor's :class:`_Readers` along the group, in one pass over the graph of
    element-wise descent (strongly connected components first: a recurrence's state reads
    itself), so the analysis stays near linear in the cascade's size."""
    order = {e.name: i for i, e in enumerate(cascade.einsums)}

    def traverses(e: Einsum, source: str) -> bool:
        return any(a.tensor == source and _traverses(cascade, a, group) for a in e.reads())

    tensors = list(dict.fromkeys([t.name for t in cascade.tensors]))
    direct: dict[str, list[Einsum]] = {}
    children: dict[str, list[str]] = {}
    for s in tensors:
        for e in cascade.readers(s):
            if not traverses(e, s):
                continue
            if not _is_view(e) and _components_iterated(cascade, e, group):
                direct.setdefault(s, []).append(e)
            keeps = any(cascade.rank_group(rank_of(v)) == group for v in e.output_vars)
            if keeps and e.output.tensor != s:
                children.setdefault(s, []).append(e.output.tensor)

    def single(e: Einsum) -> _Readers:
        st = states.start[e.name]
        iterated = st.reduced & _components_iterated(cascade, e, group)
        return _Readers(st.level, st.level, e, st.reduced, iterated)

    def combine(a: _Readers | None, b: _Readers | None) -> _Readers | None:
        if a is None:
            return b
        if b is None:
            return a
        if b.hi > a.hi or (b.hi == a.hi and order[b.deepest.name] < order[a.deepest.name]):
            deepest, hi = b.deepest, b.hi
        else:
            deepest, hi = a.deepest, a.hi
        return _Readers(
            min(a.lo, b.lo),
            hi,
            deepest,
            a.reduced_by_all & b.reduced_by_all,
            a.reduced_iterated | b.reduced_iterated,
        )

    # strongly connected components come out children first: a component's readers are
    # its members' own and those of the components it descends into, already known
    out: dict[str, _Readers | None] = {}
    for members in components(tensors, lambda t: children.get(t, ())):
        agg: _Readers | None = None
        for m in members:
            for e in direct.get(m, ()):
                agg = combine(agg, single(e))
            for c in children.get(m, ()):
                if c not in members:
                    agg = combine(agg, out[c])
        for m in members:
            out[m] = agg
    return out


def _fiber(
    cascade: Cascade,
    tensor: str,
    group: str,
    t_comps: tuple[str, ...],
    states: GroupStates,
    reach: dict[str, _Readers | None],
) -> FiberPasses:
    producers = [
        e
        for e in cascade.producers(tensor)
        if not _is_view(e) and _components_iterated(cascade, e, group)
    ]
    readers = reach.get(tensor)
    if not producers and readers is None:
        return FiberPasses(tensor, group, t_comps, 1, "1", ())
    levels = [states.start[e.name].level for e in producers]
    first = min([*levels, *([readers.lo] if readers else [])])
    last = max([*levels, *([readers.hi] if readers else [])])
    deepest = next((e for e in producers if states.start[e.name].level == last), None)
    if deepest is None:
        assert readers is not None
        deepest = readers.deepest
    if last > first:
        why = states.start[deepest.name].why[first:last]
        footprint = _fibre_extent(cascade, group, t_comps)
        return FiberPasses(tensor, group, t_comps, 1 + last - first, footprint, why)
    # One pass: what must stay live between the first traversal and a later one that
    # waits for a partial reduction (BQK's M0 chunk, re-read by SLN after LM reduced it).
    if readers is None:
        return FiberPasses(tensor, group, t_comps, 1, "1", ())
    base = states.tensors[tensor].reduced if producers else readers.reduced_by_all
    own = _leaves(cascade, t_comps)
    chunk = readers.reduced_iterated - base
    ordered = [c for c in cascade.group_components(group) if c in chunk & own]
    footprint = "*".join(ordered) if ordered else "1"
    return FiberPasses(tensor, group, t_comps, 1, footprint, ())


def pass_index(cascade: Cascade) -> dict[str, int]:
    """The pass each Einsum runs in: its highest start level over all rank groups (0-based).

    Two Einsums in the same pass can hand values over directly; a value read in a later
    pass must have been stored."""
    return dict(_pass_index(cascade))


def group_pass_index(cascade: Cascade) -> dict[str, dict[str, int]]:
    """The pass each Einsum starts in, per rank group (0-based): group -> Einsum -> pass.
    An Einsum that starts in a later pass over a group than another reads the group's
    values after the other has read all of them (a row's maximum before its exponentials)."""
    return {group: dict(levels) for group, levels in _group_pass_index(cascade)}


@functools.lru_cache(maxsize=64)
def _group_pass_index(cascade: Cascade) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    return tuple(
        (group, tuple((name, state.level) for name, state in _states(cascade, group).start.items()))
        for group in cascade.rank_groups()
    )


@functools.lru_cache(maxsize=64)
def _pass_index(cascade: Cascade) -> tuple[tuple[str, int], ...]:
    """:func:`pass_index`, once per cascade."""
    out = {e.name: 0 for e in cascade.einsums}
    for group in cascade.rank_groups():
        for name, state in _states(cascade, group).start.items():
            out[name] = max(out[name], state.level)
    return tuple(out.items())
