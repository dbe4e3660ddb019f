"""FuseMax simulator: cascades of Extended Einsums -> analyses, mapping, binding, simulation.

The package is organised as the data flows, one way (see docs/architecture.md; the
layers are import-linter contracts in pyproject.toml). Its top holds only the command-line
tools (`python -m simulator.run`, `sweep`, `compare`, `roofline`, `trace`, `export`,
`validate`, `plot`, `cascade`, `bind`); the rest is in folders named for what they are:

* :mod:`simulator.support` -- helpers every layer may use (the error type, quantities, the
  shipped specs' folders, atomic writes, the command-line guard, tables, figures);
* :mod:`simulator.spec`, :mod:`simulator.cascade` -- spec files and cascades -> typed
  specs and IR, and the analyses that need no mapping (passes, live footprint, operation
  counts, dependency graph, numerical execution);
* :mod:`simulator.plan` -- a configuration at a workload point -> a plan (extents, phase
  plans, Einsum costs, Timeloop views); :mod:`simulator.strategies` beside it -- the
  mapping templates the automatic binder writes;
* :mod:`simulator.timing` -- each planned phase timed by the analytic or the cycle engine;
* :mod:`simulator.pricing` -- energy and area;
* :mod:`simulator.core` -- the orchestrator (:mod:`simulator.core.evaluate`) ->
  :class:`simulator.core.result.Result`, guarded by bounds and floors;
* :mod:`simulator.mapper` -- the search over the mapspace (evaluates candidates);
* :mod:`simulator.drivers` -- configurations, end-to-end layers, sweeps' points, rewrites
  by cost; :mod:`simulator.timeloop` -- Timeloop interop.
"""

import sys as _sys

__version__ = "0.1.0"

if _sys.argv[:1] == ["-m"]:  # `python -m simulator.X` is starting: a command-line run
    from simulator.support.interrupts import install_interrupt_hook

    install_interrupt_hook()
