"""Progress bars for the cycle simulations and the mapper's searches that take long.

Most phases are timed in well under a second (the engine jumps over the steady state);
one whose state never repeats is simulated epoch by epoch. A bar appears only for a
phase still running after SHOW_AFTER_S, on stderr and only on a terminal (tqdm's
`disable=None`), with the epochs done and tqdm's estimate of the time left, so results on
stdout and logs stay clean.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tqdm import tqdm

SHOW_AFTER_S = 1.0


def new_bar(**options: Any) -> tqdm:
    """A tqdm bar. tqdm is imported with the first bar a process draws, not with this
    module: its import reads its own version through importlib.metadata (about 80 ms with
    its dependencies), a cost every command would pay for a bar most never draw. Off a
    terminal (`disable=None` and a stream that is not a tty) no bar is drawn: a stand-in
    that draws nothing, what tqdm itself gives there, without importing it."""
    stream = options.get("file", sys.stderr)
    if options.get("disable") is None and _off_terminal(stream):
        return _Undrawn()  # type: ignore[return-value]
    from tqdm import tqdm

    return tqdm(**options)


def _off_terminal(stream: Any) -> bool:
    """tqdm's own test for `disable=None`."""
    try:
        return hasattr(stream, "isatty") and not stream.isatty()
    except ValueError:  # a closed stream
        return True


class _Undrawn:
    """A disabled bar: counts nothing, draws nothing (as tqdm's disabled bar)."""

    n = 0

    def update(self, n: float = 1) -> None:
        return None

    def close(self) -> None:
        return None


class SimulationProgress:
    """A `TimingOptions.progress` callback: one bar per phase that runs long."""

    def __init__(self, label: str = "") -> None:
        self.label = label
        self.bars: dict[str, tqdm] = {}

    def __call__(self, phase: str, done: int, total: int, elapsed_s: float) -> None:
        bar = self.bars.get(phase)
        if bar is None:
            if done >= total or elapsed_s < SHOW_AFTER_S:
                return
            desc = f"simulating {self.label + ' ' if self.label else ''}{phase}"
            bar = new_bar(
                total=total, desc=desc, unit="epoch", file=sys.stderr, disable=None, leave=False
            )
            self.bars[phase] = bar
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
            del self.bars[phase]


class SearchProgress:
    """A mapper `progress` callback (candidates done, candidates to do): a bar once a search
    has run SHOW_AFTER_S, on stderr and only on a terminal."""

    def __init__(self) -> None:
        self.bar: tqdm | None = None
        self.start = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if done == 0:
            self.close()
            self.start = now
            return
        if self.bar is None:
            if done >= total or now - self.start < SHOW_AFTER_S:
                return
            self.bar = new_bar(
                total=total, desc="searching mappings", unit="mapping", file=sys.stderr,
                disable=None, leave=False,
            )  # fmt: skip
        self.bar.update(done - self.bar.n)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class Steps:
    """A bar for a long loop of `total` steps (parsing a long cascade's Einsums, analysing
    its tensors, predicting measured shapes, ranking rewrites on a chip), shown once the
    loop has run `show_after` seconds (SHOW_AFTER_S; 0: at once, for a loop known to be
    slow), on stderr and only on a terminal; redrawn every `every` steps (cheap steps: 256);
    a context manager that closes it."""

    def __init__(
        self,
        desc: str,
        total: int,
        unit: str = "step",
        every: int = 256,
        show_after: float | None = None,
    ) -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.every = max(1, every)
        self.show_after = SHOW_AFTER_S if show_after is None else show_after
        self.start = time.perf_counter()
        self.bar: tqdm | None = None
        if self.show_after <= 0:
            self.update(0)

    def update(self, done: int) -> None:
        if self.bar is None:
            if done % self.every or time.perf_counter() - self.start < self.show_after:
                return
            self.bar = new_bar(
                total=self.total, desc=self.desc, unit=self.unit, file=sys.stderr,
                disable=None, leave=False,
            )  # fmt: skip
        if done - self.bar.n >= self.every or done >= self.total:
            self.bar.update(done - self.bar.n)

    def __enter__(self) -> Steps:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
