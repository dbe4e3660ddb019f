"""Ctrl-C while a command's modules load: one line and exit 130, like Ctrl-C inside its
`main` (see :func:`simulator.support.cli.guarded`). Standard library only, so that the
package installs it before it imports anything heavier (argparse, numpy, lark)."""

from __future__ import annotations

import os
import signal
import sys
from types import TracebackType

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
INTERRUPTED = "interrupted: no partial result file was left"

_command_line = [False]  # set when Python runs one of the package's modules as a command


def command_line() -> bool:
    """Is this process one of the package's commands (`python -m simulator.X`)?"""
    return _command_line[0]


def interrupted(err: BaseException) -> bool:
    """Was this exception caused, at some remove, by a Ctrl-C?"""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def exit_interrupted() -> None:
    """Say so in one line and end the process now, exit status 130."""
    print(INTERRUPTED, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(EXIT_INTERRUPTED)


def _while_loading(signum: int, frame: object) -> None:
    exit_interrupted()


def install_interrupt_hook() -> None:
    """Ctrl-C before an entry point's `main` runs -- while its modules are still being
    imported -- ends like Ctrl-C inside it: one line and exit status 130, no traceback.
    Installed by the package when Python runs one of its modules (`python -m simulator.X`).

    While the modules load nothing is written, so Ctrl-C ends the process at once, before a
    KeyboardInterrupt could land in code that turns it into another error (inside a class
    being built it surfaces as "RuntimeError: Error calling __set_name__"). `main` puts
    Python's own handler back (:func:`imports_done`); an error Ctrl-C caused that reaches
    the top all the same still ends in the one line."""
    _command_line[0] = True
    signal.signal(signal.SIGINT, _while_loading)
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt) or interrupted(value):
            exit_interrupted()
        previous(kind, value, tb)

    sys.excepthook = hook


def imports_done() -> None:
    """`main` is starting: Ctrl-C raises KeyboardInterrupt again, so that files being
    written are removed as the stack unwinds."""
    if _command_line[0] and signal.getsignal(signal.SIGINT) is _while_loading:
        signal.signal(signal.SIGINT, signal.default_int_handler)
