"""The cycle-level timing engine: waterfall programs of phases and their simulation.

`program` builds a phase's per-tile operations and dependencies from its plan,
`waterfall` simulates them cycle by cycle, `simulate` turns a planned phase into a
:class:`~simulator.timing.interface.PhaseTiming`, and `functional` carries real values
through the simulated schedule to check it computes the cascade.
"""
