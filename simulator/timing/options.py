"""How long a timing engine may work, and whom it tells how far it got.

The cycle engine jumps over a phase's steady state, so most points take well under a
second at any length; a shape whose state never repeats (an unusual tiling, a masked
cascade) is simulated epoch by epoch, which at a million tokens can take minutes. These
options let the caller see that work (a progress callback) and refuse it (`max_sim_s`:
a one-line error with the estimate, instead of a run that seems to hang). They never
change a result: a run either completes exactly as without them or stops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# progress(phase, epochs done, epochs in all, seconds elapsed)
Progress = Callable[[str, int, int, float], None]


@dataclass(frozen=True)
class TimingOptions:
    max_sim_s: float | None = None  # wall-clock seconds one phase's simulation may take
    progress: Progress | None = None


UNLIMITED = TimingOptions()
