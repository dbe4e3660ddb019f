"""The cyclic garbage collector's thresholds for this workload.

A search plans thousands of candidate mappings, each allocating many small containers that
live for one evaluation, beside long-lived specs and caches. At Python's default (a young
collection every 700 net allocations) the collector runs so often that it takes 10-20% of a
point's time and more in a long process (a test session, a sweep worker), each young
collection tracing what a candidate still holds. Collecting every 10,000 allocations, the
older generations on Python's default ratios, gives that time back to the work for
about 50 MB more memory at the peak (the held-out paper forms' 16K points in one process: 25-27 s
and 124 MB at the default, 20-21 s and 174 MB so).
"""

from __future__ import annotations

import gc

# Net allocations of tracked objects between young collections (Python's default: 700)
YOUNG_THRESHOLD = 10_000
# Young collections per middle one, middle ones per full one (Python's defaults)
MIDDLE_EVERY = 10
FULL_EVERY = 10


def tune() -> None:
    """Set this process's collector thresholds (idempotent)."""
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_EVERY, FULL_EVERY)
