"""The project's single error type.

Every problem with user input (a cascade, an architecture, a mapping, a command-line
value) is raised as :class:`SpecError`, carrying the file, line and column it came from.
The command-line entry points turn it into one line on stderr and exit code 2, so a user
never sees a traceback for a mistake in their own files.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A position in a source file (1-based line and column; 0 means unknown)."""

    path: str
    line: int = 0
    col: int = 0

    def shifted(self, dline: int, col: int) -> Loc:
        """Position `dline` lines below and at column `col` (used for text inside a string)."""
        return Loc(self.path, self.line + dline, col)

    def __str__(self) -> str:
        if self.line <= 0:
            return self.path
        if self.col <= 0:
            return f"{self.path}:{self.line}"
        return f"{self.path}:{self.line}:{self.col}"


class SpecError(Exception):
    """A user-facing error: `file:line:col: message`."""

    def __init__(self, message: str, loc: Loc | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.loc = loc

    def __str__(self) -> str:
        first_line = " ".join(self.message.split())
        return f"{self.loc}: {first_line}" if self.loc is not None else first_line


class DoesNotFit(SpecError):
    """A mapping whose tiles do not fit the buffer (the mapper: larger tiles will not
    either)."""


class NotDivisible(SpecError):
    """A rank whose extent the mapping's tiles do not divide (the mapper: pad it to whole
    tiles instead)."""


class SimulationLimit(SpecError):
    """A cycle simulation refused past the caller's wall-clock limit (`--max-sim-s`)."""


class CannotSimulate(SpecError):
    """A phase the cycle engine cannot simulate: one that simulates one core on an
    architecture of several, or a schedule whose operations it cannot order (a dependency
    never met). Never a number: the caller uses the analytic engine and says so."""


class BoundBreach(Exception):
    """A result below its own lower bound (latency under the latency bound, or traffic
    under the traffic bound): a bug in the model, never a result. The command-line entry
    points print it as one line and exit with code 3, writing nothing. Not a SpecError:
    nothing catches it as a point's failure (a sweep stops instead of keeping a row)."""


# Warnings: input that is valid but probably not what its author meant (one line each,
# with where it is written). Recorded where they are found; a command line prints them to
# stderr once its work succeeded (:func:`simulator.support.cli.guarded`): an error is the one line
# a failed command prints.
_WARNINGS: dict[str, None] = {}


def warn(message: str, loc: Loc | None = None) -> None:
    """Record a warning (the same one once)."""
    first_line = " ".join(message.split())
    _WARNINGS[f"{loc}: {first_line}" if loc is not None else first_line] = None


def take_warnings() -> list[str]:
    """The warnings recorded since the last call, in order; forgotten."""
    out = list(_WARNINGS)
    _WARNINGS.clear()
    return out
