"""The evaluation core: one configuration at one workload point, plan -> time -> price.

:mod:`simulator.core.evaluate` is the orchestrator (every number takes its path); it
returns a :class:`~simulator.core.result.Result` and guards it with the planned point's
lower bounds (:mod:`simulator.core.bounds`) and the workload's own floors
(:mod:`simulator.core.floors`). Above planning, timing and pricing; below the mapper and
the drivers.
"""
