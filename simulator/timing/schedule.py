"""A phase's schedule tree (from its mapping) evaluated over per-Einsum cycle counts.

`sequence` adds its children, `par` takes the longest (different arrays overlap), `stall`
is an expression over the phase's names. The analytic engine applies it to each Einsum's
planned cycles; the cycle engine to each Einsum's simulated stream of tiles.
"""

from __future__ import annotations

from simulator.spec import expr
from simulator.spec.mapping import Schedule


def schedule_cycles(node: Schedule, cycles: dict[str, float], ctx: dict[str, float]) -> float:
    if node.kind == "einsum":
        return cycles[node.name]
    if node.kind == "stall":
        return float(expr.evaluate(node.name, ctx, node.loc))
    values = [schedule_cycles(c, cycles, ctx) for c in node.children]
    return max(values) if node.kind == "par" else sum(values)
