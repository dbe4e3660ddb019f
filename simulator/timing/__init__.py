"""Stage 2 of the evaluation pipeline: timing a planned phase.

Two engines implement one interface (:mod:`simulator.timing.interface`): a planned phase
in, a :class:`~simulator.timing.interface.PhaseTiming` out (cycles, compute and memory
time, latency, stalls). :mod:`simulator.timing.analytic` evaluates the mapping's schedule
tree in closed form; :mod:`simulator.timing.cycle` simulates the phase cycle by cycle.
Neither imports the other; both read plans (:mod:`simulator.plan`) and nothing later.
"""
