"""The rewrite rules, one module each (see :mod:`.base` for what a rule provides).

Order matters only for ties in the search: the rules are tried in this order at every
candidate.
"""

from simulator.cascade.rewrite.rules import (
    chunked_variance,
    defer_normalization,
    distribute_contraction,
    iterative_reduction,
    one_pass_variance,
    partition_rank,
    reassociate_affine,
    running_max,
    welford_variance,
)

RULES = (
    defer_normalization,
    partition_rank,
    iterative_reduction,
    running_max,
    reassociate_affine,
    distribute_contraction,
    chunked_variance,
    welford_variance,
    one_pass_variance,
)

__all__ = ["RULES"]
