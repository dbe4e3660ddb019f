"""FuseMax simulator: cascades of Extended Einsums -> analyses, mapping, binding, simulation.

The package is organised as the data flows, one way (see README, "Architecture"; the
layers are import-linter contracts in pyproject.toml):

* :mod:`simulator.spec`, :mod:`simulator.cascade` -- spec files and cascades -> typed
  specs and IR, and the analyses that need no mapping (passes, live footprint, operation
  counts, dependency graph, numerical execution);
* :mod:`simulator.plan` -- a configuration at a workload point -> a plan (extents, phase
  plans, Einsum costs, Timeloop views);
* :mod:`simulator.timing` -- each planned phase timed by the analytic or the cycle engine;
* :mod:`simulator.pricing` -- energy and area;
* :mod:`simulator.evaluate` -- the orchestrator -> :class:`simulator.result.Result`;
* :mod:`simulator.configs` and the drivers above it (end-to-end layers, sweeps, Timeloop
  interop), then the command-line tools (`run`, `sweep`, `trace`, `export`).
"""

import sys as _sys

__version__ = "0.1.0"

if _sys.argv[:1] == ["-m"]:  # `python -m simulator.X` is starting: a command-line run
    from simulator.cli import install_interrupt_hook

    install_interrupt_hook()
