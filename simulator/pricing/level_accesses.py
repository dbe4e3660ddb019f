"""Accesses per tensor at each storage level, per Einsum: Timeloop's statistics.

What Timeloop reports per data space and level -- reads (values the level sends to its
child), fills (values written into it from its parent) and updates (partial results
written back into it) -- for every Einsum's view (:mod:`simulator.plan.views`), over all
(batch, head) instances, a filtered Einsum's skipped tiles left out. The energy model
prices exactly these counts (:mod:`simulator.pricing.energy`); here they are reported, in
values, for `simulator.run --format json` and `--breakdown`.
"""

from __future__ import annotations

from simulator.plan.accesses import analyze
from simulator.plan.point import PointPlan

# (einsum, tensor, level, reads, fills, updates): values over the whole run
LevelCounts = tuple[str, str, str, float, float, float]


def level_accesses(point: PointPlan) -> tuple[LevelCounts, ...]:
    """Every (Einsum, tensor, level) the views keep, with its reads, fills and updates."""
    out: list[LevelCounts] = []
    for view in point.views:
        tensor_of = dict(view.dataspace_tensor)
        report = analyze(view.problem, view.mapping)
        for level, ds, c in report.counts:
            k = view.scale(level, ds)
            out.append(
                (view.einsum, tensor_of.get(ds, ds), level, c.reads * k, c.fills * k,
                 c.updates * k)
            )  # fmt: skip
    return tuple(out)
