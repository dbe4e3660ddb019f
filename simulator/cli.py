"""Helpers shared by the command-line entry points (I/O edge of the package)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from simulator.errors import BoundBreach, SpecError

EXIT_USAGE = 2
EXIT_INTERNAL = 3  # a result that breaks its own lower bound: a bug of the tool


def guarded(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Wrap a CLI `main` so user errors print one line on stderr and exit with code 2, and a
    result below its own bound (:class:`BoundBreach`) one line and code 3."""

    def wrapper(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except SpecError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_USAGE
        except BoundBreach as err:
            print(f"internal error: {' '.join(str(err).split())}", file=sys.stderr)
            return EXIT_INTERNAL
        except BrokenPipeError:  # `... | head` closed the pipe: not an error of ours
            return 0

    wrapper.__doc__ = main.__doc__
    wrapper.__name__ = main.__name__
    return wrapper
