"""The mapper: `--mapping auto` searches a mapspace for the best mapping of a point.

A stage of its own between the binding rules and the evaluation: the rules
(:mod:`simulator.strategies`) write the templates of the space, :mod:`simulator.mapper.space`
spans it (templates x tile factors, under a strategy's constraints) and
:mod:`simulator.mapper.search` evaluates its candidates through the ordinary pipeline
(plan -> time -> price), keeping the best by an objective.
"""
