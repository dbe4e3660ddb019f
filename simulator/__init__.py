"""FuseMax simulator: cascades of Extended Einsums -> analyses, mapping, binding, simulation.

The package is organised as the data flows (see README, "Architecture"):

* :mod:`simulator.cascade` -- the cascade language (lark grammar -> frozen IR) and the
  mapping-independent analyses (passes, live footprint, operation counts, dependency graph)
  plus a numpy evaluator that proves two cascades compute the same function.
* :mod:`simulator.spec` -- safe YAML loading with source positions and the restricted
  arithmetic evaluator shared by every spec reader.
"""

__version__ = "0.1.0"
