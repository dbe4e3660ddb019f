"""The drivers: what the command-line tools and the experiments ask of the evaluation core.

:mod:`simulator.drivers.configs` turns a configuration's name (a mapping file, or `auto`,
found by :mod:`simulator.mapper`) into its specs and evaluates it at a point, on the
architecture sized so; :mod:`simulator.drivers.endtoend` adds a model's linear layers,
:mod:`simulator.drivers.design_space` evaluates a sweep's points and
:mod:`simulator.drivers.rewrite_cost` ranks a cascade's rewrites on a chip.
"""
