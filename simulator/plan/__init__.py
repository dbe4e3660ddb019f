"""Stage 1 of the evaluation pipeline: planning.

Mapping + cascade + architecture + workload -> a :class:`~simulator.plan.point.PointPlan`:
the rank extents (the `search` factors chosen), every phase's loop nests, the tiles the
buffer keeps, its DRAM traffic tallies, each Einsum's compute demand (points, cycles per
point, PEs) and its Timeloop view (problem + mapping over DRAM, buffer, registers). Nothing
here times or prices anything: timing (:mod:`simulator.timing`) and pricing
(:mod:`simulator.pricing`) read plans; planning imports neither.
"""
