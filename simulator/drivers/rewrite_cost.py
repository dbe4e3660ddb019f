"""Rewriting by cost: every equivalent cascade the rewrite search reaches, mapped and timed
on a chip at a workload, and the best by an objective.

Fewer passes save traffic only where a fibre does not fit on chip; the rewrites that lower
them can add work (an online softmax's corrections add exponentials). So with an
architecture `python -m simulator.cascade rewrite FILE --arch A [workload flags]` does not
trust the pass count: each candidate (the input among them) goes through the mapper
(`--mapping auto`, the fused strategy, the analytic engine) at the workload, and the one
with the least latency (or energy, EDP, DRAM traffic; `--objective passes` keeps the pass
count's order) is written. The input is always a candidate, so a rewrite is never slower
on the target than what it was given. A candidate the mapper cannot bind is listed with
its reason and never chosen.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from simulator.cascade.rewrite.rule_search import Candidate, RewriteResult
from simulator.core.result import Result
from simulator.drivers.configs import EvalOptions, Specs, evaluate
from simulator.mapper.search import DEFAULT_SEARCH_S, objective_key
from simulator.spec.workload import Workload
from simulator.support.errors import SpecError
from simulator.support.pool import ordered_map
from simulator.support.progress import Steps
from simulator.support.textfmt import table
from simulator.support.units import format_bytes

OBJECTIVES = ("latency", "energy", "edp", "traffic", "passes")
# The mapper's budget per candidate (a count of evaluations): run's default, so a
# candidate's time here is the one `run --cascade FILE --mapping auto` gives.
RANK_SEARCH_S = DEFAULT_SEARCH_S


@dataclass(frozen=True)
class Ranked:
    """One candidate on the target: its cost, or why the mapper could not bind it."""

    index: int  # 0: the input
    candidate: Candidate
    result: Result | None
    error: str = ""

    @property
    def chain(self) -> str:
        """The rules applied, in order, a repeated rule counted (`iterative-reduction x2`)."""
        out: list[str] = []
        for step in self.candidate.steps:
            name, _, times = out[-1].partition(" x") if out else ("", "", "")
            if name == step.rule:
                out[-1] = f"{step.rule} x{int(times or 1) + 1}"
            else:
                out.append(step.rule)
        return ", ".join(out) or "as written"

    def costs(self) -> tuple:
        """What the table shows of it (candidates alike in all of it are one row)."""
        r = self.result
        report = (self.candidate.report.max_passes, self.footprint)
        if r is None:
            return (*report, self.error)
        return (*report, f"{r.latency_s:.4g}", format_bytes(r.traffic_bytes), _energy(r))

    @property
    def footprint(self) -> str:
        """The live footprints of the fibres read more than once (symbolic)."""
        multi = {f.live_footprint for f in self.candidate.report.fibers if f.passes > 1}
        return ", ".join(sorted(multi)) or "-"


def rank(
    result: RewriteResult,
    arch: str,
    workload: Workload,
    objective: str,
    texts: Sequence[str],
    search_s: float = RANK_SEARCH_S,
    jobs: int = 1,
) -> list[Ranked]:
    """Each reached candidate (its cascade file's text in `texts`, same order) mapped and
    timed on `arch` at `workload`, on `jobs` processes (the same rows whatever their
    number: each candidate's search is its own, with its own budget)."""
    measure = "latency" if objective == "passes" else objective
    # each candidate is mapped on the chip (seconds each): a bar at once, on a terminal
    progress = Steps(f"ranking on {Path(arch).stem}", len(texts), "candidate", 1, 0.0)
    with progress, tempfile.TemporaryDirectory(prefix="fusemax-rewrite-") as folder:
        tasks = []
        for i, text in enumerate(texts):
            path = Path(folder) / f"candidate-{i}.yaml"
            path.write_text(text, encoding="utf-8")
            tasks.append((str(path), arch, measure, search_s, workload))
        costs = ordered_map(_cost, tasks, jobs, progress.update)
    return [
        Ranked(i, candidate, r, error)
        for i, (candidate, (r, error)) in enumerate(zip(result.reached, costs, strict=True))
    ]


def _cost(
    path: str, arch: str, measure: str, search_s: float, workload: Workload
) -> tuple[Result | None, str]:
    """One candidate's result on the chip, or the first line of why the mapper cannot bind
    it (a task of :func:`rank`, run in a worker process)."""
    specs = Specs(cascade_override=path, arch_override=arch, objective=measure, search_s=search_s)
    try:
        return evaluate(specs, "auto", workload, options=EvalOptions(engine="analytic")), ""
    except SpecError as err:
        return None, err.message.splitlines()[0]


def best(ranked: Sequence[Ranked], objective: str) -> Ranked:
    """The winner: the least objective among the candidates the mapper bound (ties: fewer
    passes, then the earlier -- the input first); `passes` orders by passes, then latency."""
    bound = [r for r in ranked if r.result is not None]
    if not bound:
        return ranked[0]

    def key(r: Ranked) -> tuple:
        assert r.result is not None
        passes = r.candidate.report.max_passes
        if objective == "passes":
            return (passes, r.result.latency_s, r.index)
        return (*objective_key(r.result, objective), passes, r.index)

    return min(bound, key=key)


def render(ranked: Sequence[Ranked], winner: Ranked, objective: str, where: str) -> str:
    """The table: passes, footprint, latency, DRAM traffic, energy per candidate (best
    first; candidates alike in all of these are one row, the others counted), the winner
    marked, and a line on why it won."""

    def order(r: Ranked) -> tuple:
        if r.result is None:
            return (1, r.index)
        if objective == "passes":
            return (0, r.candidate.report.max_passes, r.result.latency_s, r.index)
        return (0, *objective_key(r.result, objective), r.candidate.report.max_passes, r.index)

    groups: dict[tuple, list[Ranked]] = {}
    for r in sorted(ranked, key=order):
        groups.setdefault(r.costs(), []).append(r)
    rows = []
    for group in groups.values():
        r = winner if winner in group else group[0]
        mark = "*" if r is winner else ""
        also = f" (and {len(group) - 1} alike)" if len(group) > 1 else ""
        if r.result is None:
            cost = ("-", "-", "-")
            rules = f"{r.chain}{also} (not bound: {r.error})"
        else:
            cost = (f"{r.result.latency_s:.4g}", format_bytes(r.result.traffic_bytes),
                    _energy(r.result))  # fmt: skip
            rules = r.chain + also
        rows.append((f"{mark}{r.index}", r.candidate.report.max_passes, r.footprint, *cost, rules))
    head = (
        f"{len(ranked)} equivalent candidates on {where} (mapper: fused strategy, analytic "
        f"engine), best first by {objective}:"
    )
    columns = ["#", "passes", "live footprint", "latency (s)", "DRAM", "energy (J)", "rules"]
    return head + "\n" + table(columns, rows) + "\n" + why(ranked, winner, objective) + "\n"


def _passes(n: int) -> str:
    return f"{n} pass" if n == 1 else f"{n} passes"


def _energy(r: Result) -> str:
    return f"{r.energy_pj / 1e12:.4g}" if r.energy_pj is not None else "-"


def why(ranked: Sequence[Ranked], winner: Ranked, objective: str) -> str:
    """One line: what the winner gains over the input and over the fewest-passes candidate."""
    first = ranked[0]
    fewest = min(
        (r for r in ranked if r.result is not None),
        key=lambda r: (r.candidate.report.max_passes, r.index),
        default=None,
    )
    w = winner.result
    if w is None:
        return "no candidate could be mapped: the input is returned"
    parts = [f"#{winner.index} wins by {objective}"]
    for label, other in (("the input", first), ("the fewest passes", fewest)):
        if other is None or other is winner or other.result is None:
            continue
        o = other.result
        parts.append(
            f"against {label} (#{other.index}, {_passes(other.candidate.report.max_passes)}): "
            f"latency {w.latency_s / o.latency_s - 1:+.1%}, DRAM "
            f"{w.traffic_bytes / o.traffic_bytes - 1:+.1%}, energy "
            f"{(w.energy_pj or 0) / (o.energy_pj or 1) - 1:+.1%}"
        )
    if winner is first:
        parts.append("the input is returned unchanged")
    return "; ".join(parts)
