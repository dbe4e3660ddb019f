"""What an experiment is: the types every experiment module and the runner share.

An experiment is one group of outputs (its result CSVs, its figures, its report section)
computed from a list of independent points. The runner (`experiments.run`) collects every
experiment's points, computes them in a process pool under one progress bar, then calls the
experiment's writer, figure and report functions with the rows in the order of its points.

`compute` runs in worker processes: it must be a module-level function, and points and rows
must be picklable (tuples, frozen dataclasses). It gets its worker process's `Specs`, so spec
files are parsed once per process; what a Specs keeps is the same whichever points came
before (parsed files, and the mapper's answers under a key of all they depend on).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.published import Published

# The points the paper's figures and stated means cover (its section VI).
PAPER_MODELS = ("bert", "trxl", "t5", "xlm")
PAPER_SEQS = tuple(2**k for k in (10, 12, 14, 16, 18, 20))  # 1K, 4K, 16K, 64K, 256K, 1M


@dataclass(frozen=True)
class Selection:
    """The workload points of a run: model keys (`bert`) and sequence lengths (tokens)."""

    models: tuple[str, ...]
    seqs: tuple[int, ...]

    @property
    def is_full(self) -> bool:
        """The paper's four models at its six lengths: what the paper's means are over."""
        return set(self.models) == set(PAPER_MODELS) and set(self.seqs) == set(PAPER_SEQS)


@dataclass(frozen=True)
class Context:
    """What the output functions get besides their rows."""

    out: Path  # experiments/out (results/ below it)
    selection: Selection
    published: Published
    compare: bool  # overlay published values on figures

    @property
    def results(self) -> Path:
        return self.out / "results"


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    points: Callable[[Selection], Sequence[Any]]
    compute: Callable[[Any, Any], Any]  # (Specs, point) -> row, in a worker
    write: Callable[[Sequence[Any], Context], list[Path]] = lambda rows, ctx: []
    figures: Callable[[Sequence[Any], Context], list[Path]] = lambda rows, ctx: []
    report: Callable[[Sequence[Any], Context], str] = lambda rows, ctx: ""
    chunk: int = 6  # points per worker task
    # Points that share work a process keeps (a GEMM's mapping, a rewrite, a search's
    # planning) have the same key: they go to the same tasks (`chunk` points each), so one
    # worker does that work once. None: tasks of consecutive points.
    share: Callable[[Any], Any] | None = None
    outputs: tuple[str, ...] = field(default=())  # files it writes, for the report
