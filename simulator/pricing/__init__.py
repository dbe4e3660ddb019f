"""Stage 3 of the evaluation pipeline: pricing a planned and timed point.

Per-Einsum Timeloop views (from the plan) are counted with Timeloop's semantics and priced
by the architecture's Accelergy-style energy table (`energy`); leakage needs the timed
cycles. The chip's area comes from the area table (`area`). `point` prices one whole
configuration at one point.
"""
