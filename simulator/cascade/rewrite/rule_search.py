"""Searching sequences of rewrite rules for a cascade with fewer passes.

Best-first over candidates, ordered by (maximum passes, passes summed over ranks, rules
applied, Einsums): rules that lower nothing on their own (partitioning a rank, making a
reduction iterative) stay in the frontier so a later rule (the running maximum) can use
them. Every candidate is parsed and checked by the language, its passes computed, and run
on the same random inputs as the original at several input magnitudes before it enters
the frontier: a candidate that parses badly or computes something else is a bug of the
rule that made it, reported (never silently dropped, never returned).

Besides each rule's candidates, a rule marked `AT_EVERY_SITE` applied at every site where
it applies is one more candidate (:mod:`.everywhere`): a pattern repeated at k sites (an
FFN's two projections) is one step, not a chain of k steps at unchanged passes. At equal
passes the frontier prefers fewer walks of a rank that wait for a full reduction over it
(`PassReport.late_walks`): a rewrite that moves a contraction to an earlier pass is
expanded first, though the pass count falls only once every such walk has moved. (With
`every`, for a ranking by cost, the frontier stays breadth-first by chain length: the
variety of candidates is the point there.)

Bounds, so any cascade answers: the search expands MIN_EXPANSIONS candidates, and goes on
past them while it still finds better ones -- a candidate with fewer passes (at most,
then summed over ranks) than any before it within the last PATIENCE expansions -- up to
MAX_EXPANSIONS; chains are at most MAX_STEPS rules long (the canonical form is not a rule),
and each numerical check runs at the extents the cascade's file gives (or `--shape`),
which `check_evaluation_size` bounds. The search stops at the target, or at the floor
`pass_floor` finds when the target is below it (a result that reads its own rank's
statistics: a softmax, a LayerNorm -- 2 passes). Everything is in a fixed order (rules,
sites, the frontier's ties by arrival), so the same input gives the same search.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import ModuleType

import numpy as np

from simulator.cascade.draft import Draft, draft_of, without_dead, without_duplicates
from simulator.cascade.execute import evaluate, random_inputs
from simulator.cascade.ir import Cascade, Einsum, rank_of
from simulator.cascade.passes import PassReport, analyze_passes
from simulator.cascade.rewrite.canonical import canonical
from simulator.cascade.rewrite.everywhere import everywhere, sites
from simulator.cascade.rewrite.rules import RULES
from simulator.cascade.rewrite.rules.base import Context, Rewrite
from simulator.cascade.shapes import MissingShapes, resolve_shapes
from simulator.support.errors import Loc, SpecError

MIN_EXPANSIONS = 32  # candidates whose rewrites are generated, unless the target is reached
MAX_EXPANSIONS = 128  # ... at most, while the search still finds better candidates
PATIENCE = 16  # expansions past MIN_EXPANSIONS without a better candidate: the search stops
MAX_STEPS = 8  # rules in one chain
CANONICAL = "canonical-form"  # the first step of a chain from a cascade not yet canonical
# Standard deviations of the random inputs of the checks: 1, and one large enough that
# attention's logits reach about 1e4 (E = 64: a product of two N(0, 30^2) vectors has a
# standard deviation of 30 * 30 * 8 = 7200), where a cascade without a max overflows.
CHECK_SCALES = (1.0, 30.0)
RTOL = 1e-5


@dataclass(frozen=True)
class Step:
    rule: str
    site: str
    detail: str
    max_passes: int


@dataclass(frozen=True)
class Rejected:
    """A candidate a rule produced that the checks refused: a bug of that rule."""

    rule: str
    site: str
    reason: str


@dataclass(frozen=True)
class ScaleCheck:
    scale: float
    max_rel_error: float | None  # None: the original is not finite at this scale
    note: str = ""


@dataclass(frozen=True)
class Candidate:
    """An equivalent cascade the search reached (checked numerically against the input):
    the search's states, and what it reports of them."""

    cascade: Cascade
    draft: Draft
    report: PassReport
    steps: tuple[Step, ...]
    checks: tuple[ScaleCheck, ...]
    unstable: tuple[str, ...]

    def passes(self) -> tuple[int, int]:
        """(the most passes over a rank, the passes summed over the ranks)."""
        return self.report.max_passes, sum(n for _, n, _ in self.report.per_rank)

    def rules(self) -> int:
        """How many rules the chain applies (the canonical form is none)."""
        return sum(1 for s in self.steps if s.rule != CANONICAL)

    def score(self) -> tuple[int, int, int, int, int]:
        """Fewer passes first; at equal passes a chain without unstable rules, then a
        shorter chain, then fewer Einsums."""
        return (*self.passes(), len(self.unstable), len(self.steps), len(self.cascade.einsums))

    def guided(self) -> tuple[int, int, int, int, int, int]:
        """The score with fewer walks waiting for a full reduction before a shorter chain:
        the order in which a search for fewer passes expands its frontier."""
        passes, total, unstable, steps, einsums = self.score()
        return (passes, total, unstable, self.report.late_walks, steps, einsums)


@dataclass
class Budget:
    """The expansions a search spends: MIN_EXPANSIONS, then on while one of the last
    PATIENCE of them made a candidate with fewer passes than any before it (at most, then
    summed over ranks), up to MAX_EXPANSIONS."""

    record: tuple[int, int]  # the fewest passes so far (see Candidate.passes)
    spent: int = 0
    last_gain: int = 0  # `spent` when the record last fell

    def more(self) -> bool:
        if self.spent < MIN_EXPANSIONS:
            return True
        return self.spent < MAX_EXPANSIONS and self.spent - self.last_gain < PATIENCE

    def saw(self, candidate: Candidate) -> None:
        if candidate.passes() < self.record:
            self.record = candidate.passes()
            self.last_gain = self.spent


@dataclass(frozen=True)
class RewriteResult:
    original: Cascade
    cascade: Cascade
    draft: Draft
    steps: tuple[Step, ...]
    passes_before: PassReport
    passes_after: PassReport
    checks: tuple[ScaleCheck, ...]
    rejected: tuple[Rejected, ...]
    expanded: int
    candidates: int
    unstable: tuple[str, ...]  # unstable rules the chain uses
    # every equivalent cascade reached, the input first (with `every=True`: the search does
    # not stop at the pass target, so a ranking by cost sees them all)
    reached: tuple[Candidate, ...] = ()

    @property
    def improved(self) -> bool:
        return self.passes_after.max_passes < self.passes_before.max_passes


class Mismatch(Exception):
    """A candidate that does not compute what the original does."""


class NumericalCheck:
    """The original's outputs on fixed random inputs at each scale, and the comparison of a
    candidate against them (same inputs, same extents)."""

    def __init__(
        self, original: Cascade, overrides: Mapping[str, int] | None, seed: int, where: Loc
    ) -> None:
        try:
            self.shapes = resolve_shapes(original, overrides)
        except MissingShapes as err:
            raise SpecError(
                f"cannot check rewrites of '{original.name}' numerically: {err.message}", where
            ) from None
        self.outputs = original.outputs
        self.inputs = {s: random_inputs(original, self.shapes, seed, s) for s in CHECK_SCALES}
        self.expected: dict[float, dict[str, np.ndarray]] = {}
        self.floor: dict[float, dict[str, float]] = {}
        for s in CHECK_SCALES:
            arrays = evaluate(original, self.inputs[s], self.shapes)
            self.expected[s] = _outputs(arrays, self.outputs)
            self.floor[s] = {t: _operand_size(original, arrays, t) for t in self.outputs}

    def shapes_for(self, cascade: Cascade) -> dict[str, int]:
        names = cascade.shape_names()
        return resolve_shapes(cascade, {k: v for k, v in self.shapes.items() if k in names})

    def check(self, cascade: Cascade) -> tuple[ScaleCheck, ...]:
        missing = [t for t in self.outputs if t not in cascade.outputs]
        if missing:
            raise Mismatch(f"loses the output(s) {', '.join(missing)}")
        if set(cascade.inputs) != set(self.inputs[CHECK_SCALES[0]]):
            raise Mismatch(f"reads other inputs: {', '.join(cascade.inputs)}")
        shapes = self.shapes_for(cascade)
        results = []
        for scale in CHECK_SCALES:
            got = _outputs(evaluate(cascade, self.inputs[scale], shapes), self.outputs)
            want = self.expected[scale]
            if not all(np.isfinite(v).all() for v in want.values()):
                results.append(ScaleCheck(scale, None, "the original is not finite here"))
                continue
            worst = 0.0
            for t in self.outputs:
                if not np.isfinite(got[t]).all():
                    raise Mismatch(f"{t} is not finite at input scale {scale:g}")
                size = max(float(np.max(np.abs(want[t]), initial=0.0)), self.floor[scale][t])
                err = float(np.max(np.abs(got[t] - want[t]), initial=0.0))
                worst = max(worst, err / size if size > 0 else err)
            if worst > RTOL:
                raise Mismatch(
                    f"differs from the original by {worst:.3g} (relative) at input scale {scale:g}"
                )
            results.append(ScaleCheck(scale, worst))
        return tuple(results)


def _operand_size(cascade: Cascade, arrays: Mapping[str, np.ndarray], tensor: str) -> float:
    """The largest finite magnitude among the operands of the Einsums producing `tensor`.

    An output that cancels to about zero (the mean of deviations from a mean) carries
    rounding noise of the size of its operands times the machine epsilon; measured against
    itself that noise is a 100% error. Errors are measured against the larger of the
    output and its operands, so such an output is equal when the noise is."""
    size = 0.0
    for e in cascade.producers(tensor):
        for acc in e.reads():
            values = arrays[acc.tensor]
            finite = values[np.isfinite(values)]
            if finite.size:
                size = max(size, float(np.max(np.abs(finite))))
    return size


def _outputs(arrays: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
    return {t: arrays[t] for t in names}


def _upstream(cascade: Cascade, tensor: str) -> list[Einsum]:
    """The Einsums `tensor` depends on, its producers included."""
    seen, todo, found = {tensor}, [tensor], []
    while todo:
        for e in cascade.producers(todo.pop()):
            found.append(e)
            for acc in e.reads():
                if acc.tensor not in seen:
                    seen.add(acc.tensor)
                    todo.append(acc.tensor)
    return found


def pass_floor(cascade: Cascade) -> int:
    """2 when a result is indexed by a rank and, as written, depends on a full reduction
    over that rank (a softmax's or a LayerNorm's output reads its row's statistics, then
    walks the row again to produce itself), else 1.

    No rule removes such a dependency, so the search stops once it reaches this floor
    instead of spending its whole budget on a pass count it cannot reach."""
    for t in cascade.outputs:
        reduced = [{rank_of(v) for v in e.reduced} for e in _upstream(cascade, t)]
        for rank in cascade.tensor(t).ranks:
            comps = set(cascade.group_components(cascade.rank_group(rank)))
            if rank in comps and any(comps <= r for r in reduced):
                return 2
    return 1


def _rules(allow_unstable: bool) -> tuple[ModuleType, ...]:
    return tuple(r for r in RULES if r.STABLE or allow_unstable)


def _canonical_state(
    cascade: Cascade, given: Candidate, checker: NumericalCheck, rejected: list[Rejected]
) -> Candidate:
    """Where the rules start: the cascade in canonical form (:mod:`.canonical`), checked
    like any candidate; the input itself where it is already canonical, or where the
    canonical form fails its check (a bug of that form, reported)."""
    try:
        canon = canonical(cascade)
        if not canon.changes:
            return given
        draft = without_dead(canon.cascade, cascade.outputs)
        built = draft.build()
        checks = checker.check(built)
        report = analyze_passes(built)
    except Exception as err:  # noqa: BLE001 - any failure is the canonical form's bug
        reason = err.message if isinstance(err, SpecError) else str(err)
        rejected.append(Rejected(CANONICAL, cascade.name, reason))
        return given
    step = Step(CANONICAL, cascade.name, "; ".join(canon.changes), report.max_passes)
    return Candidate(built, draft, report, (step,), checks, ())


def _rewrites(
    rule: ModuleType, context: Context, checker: NumericalCheck, rejected: list[Rejected]
) -> list[Rewrite]:
    """The rule's candidates on the context's cascade, and the rule at all their sites at
    once (:mod:`.everywhere`); a failure to build that one is the rule's bug, reported."""
    found = list(rule.candidates(context))
    if not rule.AT_EVERY_SITE:
        return found
    try:
        combined = everywhere(rule, found, checker.shapes_for)
    except Exception as err:  # noqa: BLE001 - any failure is the rule's bug
        rejected.append(Rejected(rule.NAME, ", ".join(sites(found)), _reason(err)))
        return found
    return found if combined is None else [*found, combined]


def _reason(err: Exception) -> str:
    if isinstance(err, SpecError):
        return err.message
    if isinstance(err, Mismatch):
        return str(err)
    return f"{type(err).__name__}: {err}"


def _candidate(
    rw: Rewrite,
    rule: ModuleType,
    state: Candidate,
    checker: NumericalCheck,
    seen: set[tuple],
    rejected: list[Rejected],
) -> Candidate | None:
    """The rewrite of `state` as a checked candidate; None when it was seen before or
    fails a check (then reported: a bug of the rule that made it)."""
    outputs = checker.outputs
    try:
        built = rw.draft.build()
        deduped = without_duplicates(rw.draft, outputs)
        if deduped is not rw.draft:
            built = deduped.build()
        draft = without_dead(built, outputs)
        if draft.key() in seen:
            return None
        seen.add(draft.key())
        candidate = draft.build() if draft != rw.draft else built
        new_report = analyze_passes(candidate)
        checks = checker.check(candidate)
    except Exception as err:  # noqa: BLE001 - any failure is the rule's bug
        rejected.append(Rejected(rule.NAME, rw.site, _reason(err)))
        return None
    step = Step(rule.NAME, rw.site, rw.detail, new_report.max_passes)
    unstable = state.unstable + (() if rule.STABLE else (rule.NAME,))
    return Candidate(candidate, draft, new_report, state.steps + (step,), checks, unstable)


def rewrite(
    cascade: Cascade,
    *,
    target_passes: int = 1,
    allow_unstable: bool = False,
    overrides: Mapping[str, int] | None = None,
    seed: int = 0,
    every: bool = False,
) -> RewriteResult:
    """The cascade with the fewest passes the rules reach (the input itself if none lowers
    them), with the chain of rules, the checks and any rejected candidate. `every`: search
    on past the target (within the same bounds) and keep every equivalent cascade reached,
    for a ranking by another measure than passes."""
    where = Loc(cascade.path)
    checker = NumericalCheck(cascade, overrides, seed, where)
    report = analyze_passes(cascade)
    given = Candidate(
        cascade, draft_of(cascade), report, (), checker.check(cascade) if every else (), ()
    )
    rejected: list[Rejected] = []
    start = _canonical_state(cascade, given, checker, rejected)
    reached_all: list[Candidate] = [given] + ([start] if start is not given else [])
    counter = itertools.count()
    # by passes, the frontier goes to the candidates that moved work earlier; for every
    # candidate (a ranking by cost), breadth first by chain length, for the variety
    order = Candidate.score if every else Candidate.guided
    frontier = [(order(start), next(counter), start)]
    seen = {given.draft.key(), start.draft.key()}
    best, generated = given, 0
    if start.report.max_passes < report.max_passes:
        best = start
    rules = _rules(allow_unstable)
    target_passes = max(target_passes, pass_floor(cascade))
    reached = report.max_passes <= target_passes and not every
    budget = Budget(start.passes())
    while frontier and not reached and budget.more():
        _, _, state = heapq.heappop(frontier)
        if state.rules() >= MAX_STEPS:
            continue
        budget.spent += 1
        context = Context(state.cascade, state.report, checker.shapes_for(state.cascade))
        for rule in rules:
            for rw in _rewrites(rule, context, checker, rejected):
                generated += 1
                new = _candidate(rw, rule, state, checker, seen, rejected)
                if new is None:
                    continue
                heapq.heappush(frontier, (order(new), next(counter), new))
                reached_all.append(new)
                budget.saw(new)
                if new.report.max_passes < report.max_passes and (
                    best is given or new.score() < best.score()
                ):
                    best = new
                # an unstable result keeps the search going for a stable one as good
                if best.report.max_passes <= target_passes and not best.unstable and not every:
                    reached = True
    if best is given:
        checks = given.checks or checker.check(cascade)
    else:
        checks = best.checks
    # the input's checks run once: for its own entry where the search did not need them
    kept = tuple(x if x.checks else replace(x, checks=checks) for x in reached_all)
    return RewriteResult(
        original=cascade,
        cascade=best.cascade,
        draft=best.draft,
        steps=best.steps,
        passes_before=report,
        passes_after=best.report,
        checks=checks,
        rejected=tuple(rejected),
        expanded=budget.spent,
        candidates=generated,
        unstable=best.unstable,
        reached=kept,
    )
