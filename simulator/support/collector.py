"""The cyclic garbage collector's thresholds for this workload.

A search plans thousands of candidate mappings, each allocating many small containers that
live for one evaluation, beside long-lived specs and caches. At Python's default (a young
collection every 700 net allocations) collections took about 10% of one point's time (a
Llama block at 4K: 2.45-2.89 s, 2.2 s without collection) and about 20% in a long process
(the held-out paper forms' 16K points in one process: 25-27 s and 124 MB at the default,
20-21 s and 174 MB at 10,000; 50,000 and 100,000 were no faster and used 216-254 MB).
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
