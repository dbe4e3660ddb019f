"""The registry of experiments, in report order (`experiments.experiment` says what one
is). A new figure is a new module with an `EXPERIMENT` and one entry here: nothing else
changes.
"""

from __future__ import annotations

from experiments import (
    attention,
    bounds,
    cascades,
    endtoend,
    flat_rule,
    fusion,
    llm,
    pareto,
    silicon,
    waterfall,
)
from experiments.experiment import Experiment


def registry() -> tuple[Experiment, ...]:
    """Every experiment, in report order."""
    return (
        attention.EXPERIMENT,
        endtoend.EXPERIMENT,
        pareto.EXPERIMENT,
        waterfall.EXPERIMENT,
        cascades.EXPERIMENT,
        bounds.EXPERIMENT,
        flat_rule.EXPERIMENT,
        llm.EXPERIMENT,
        fusion.EXPERIMENT,
        silicon.EXPERIMENT,
    )


def by_name(name: str) -> Experiment:
    for e in registry():
        if e.name == name:
            return e
    raise KeyError(name)
