"""A rule applied at every site where it applies, as one more candidate.

The same pattern at several sites -- an FFN's gate and up projections reading one
normalised activation, a transformer block's Q, K and V -- often lowers the passes only
once the rule has been applied at all of them: until then the other sites still wait for
the statistics. Site by site, that is a chain of k steps at unchanged passes, which a
best-first search explores level by level among every other rule's candidates (a budget
that grows with the branching factor to the power k). Applied at every site in one step,
it is one candidate, checked like any other; the single-site candidates stay, so nothing
the search reached before is lost.

The sites are applied in the order the rule yields them, each found again (by its site)
among the rule's candidates on the cascade the previous ones made; a site the earlier ones
removed is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType

from simulator.cascade.ir import Cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade.rewrite.rules.base import Context, Rewrite


def sites(found: Sequence[Rewrite]) -> list[str]:
    """The distinct sites of a rule's candidates, in order."""
    return list(dict.fromkeys(rw.site for rw in found))


def everywhere(
    rule: ModuleType,
    found: Sequence[Rewrite],
    shapes_for: Callable[[Cascade], dict[str, int]],
) -> Rewrite | None:
    """The rule applied at every site of `found` (its candidates on one cascade) in turn,
    or None when fewer than two sites can be applied together. A site's first candidate
    is the one applied. Building a draft may raise (a rule's bug): the caller reports it."""
    wanted = sites(found)
    if len(wanted) < 2:
        return None
    applied = [found[0]]
    for site in wanted[1:]:
        cascade = applied[-1].draft.build()
        context = Context(cascade, analyze_passes(cascade), shapes_for(cascade))
        again = next((rw for rw in rule.candidates(context) if rw.site == site), None)
        if again is not None:
            applied.append(again)
    if len(applied) < 2:
        return None
    return Rewrite(
        rule.NAME,
        ", ".join(rw.site for rw in applied),
        "; ".join(rw.detail for rw in applied),
        applied[-1].draft,
    )
