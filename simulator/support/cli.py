"""Helpers shared by the command-line entry points (I/O edge of the package)."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import Executor

from simulator.support import collector
from simulator.support.errors import BoundBreach, SpecError, take_warnings
from simulator.support.interrupts import (
    EXIT_INTERRUPTED,
    INTERRUPTED,
    command_line,
    exit_interrupted,
    imports_done,
    interrupted,
)

EXIT_USAGE = 2
EXIT_INTERNAL = 3  # a result that breaks its own lower bound: a bug of the tool


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are a :class:`SpecError`: one line on stderr and exit
    code 2 through :func:`guarded`, like every other bad input (argparse's own would print
    the usage and exit itself)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SpecError(f"{self.prog}: {message}")


def guarded(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Wrap a CLI `main` so user errors print one line on stderr and exit with code 2, and a
    result below its own bound (:class:`BoundBreach`) one line and code 3."""

    def wrapper(argv: list[str] | None = None) -> int:
        imports_done()
        collector.tune()
        take_warnings()  # none left from before this command
        try:
            code = main(negative_values(sys.argv[1:] if argv is None else list(argv)))
            for warning in take_warnings():
                print(f"warning: {warning}", file=sys.stderr)
            _done()
            return code
        except SpecError as err:
            take_warnings()  # the error is the one line
            print(f"error: {err}", file=sys.stderr)
            return EXIT_USAGE
        except BoundBreach as err:
            print(f"internal error: {' '.join(str(err).split())}", file=sys.stderr)
            return EXIT_INTERNAL
        except BrokenPipeError:  # `... | head` closed the pipe: not an error of ours
            return 0
        except KeyboardInterrupt:  # files being written were removed as the stack unwound
            return _interrupted_exit()
        except Exception as err:
            if not interrupted(err):
                raise
            # Ctrl-C can surface as another error that it caused: an ImportError from a C
            # extension's first import, a RuntimeError from a class being built
            return _interrupted_exit()

    wrapper.__doc__ = main.__doc__
    wrapper.__name__ = main.__name__
    return wrapper


def _interrupted_exit() -> int:
    """The one line and exit status 130. In a command-line process the process ends here:
    the stack has unwound (files being written removed, workers ended), and Ctrl-C in the
    middle of a C extension's first import can leave it half set up, so that the
    interpreter's teardown aborts (exit -6, "Fatal Python error") or dies of the signal
    (exit -2) after the line was printed. Called as a function (the tests), it returns."""
    if command_line():
        exit_interrupted()
    print(INTERRUPTED, file=sys.stderr)
    return EXIT_INTERRUPTED


def _done() -> None:
    """The command's work and its files are complete: in a command-line process, a Ctrl-C
    from here to the exit has nothing left to interrupt (it would otherwise kill the
    interpreter's teardown, exit -2, with the results already written)."""
    if command_line():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def negative_values(argv: list[str]) -> list[str]:
    """`--seq -4K` as `--seq=-4K`: argparse takes a value that starts with '-' for an option
    (and says only "expected one argument"); joined, the option's own check says what is
    wrong with the value ("must be positive")."""
    out: list[str] = []
    for token in argv:
        if (
            out
            and out[-1].startswith("--")
            and "=" not in out[-1]
            and len(token) > 1
            and token[0] == "-"
            and (token[1].isdigit() or token[1] == ".")
        ):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends (Linux)


def worker_process(parent: int) -> None:
    """Initializer of a worker process: Ctrl-C and SIGTERM are its parent's to handle (the
    parent ends its workers: :func:`abandon`), and it ends with its parent. The parent
    starts its workers with both signals held (:func:`simulator.support.atomic.interrupts_held`),
    so one that came meanwhile is dropped here, not a traceback from a half-started
    worker."""
    collector.tune()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(AttributeError, ValueError, OSError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    die_with_parent(parent)


# Seconds a terminated worker has to end before it is killed (and then to end).
WORKER_END_S = 5.0


def _ended(processes: list, seconds: float) -> bool:
    """Wait until every process's exit is recorded (its exit code known), at most
    `seconds`. Not `join`: the pool's own thread reaps the workers too, and a join racing
    it can return while the exit is not yet recorded (the worker then looks alive)."""
    deadline = time.monotonic() + seconds
    while any(p.exitcode is None for p in processes):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def abandon(executor: Executor) -> None:
    """After an interrupt: drop the queued work and end the workers now, without waiting
    for their running tasks (a second Ctrl-C meanwhile is ignored)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        # ProcessPoolExecutor keeps its worker processes here (and forgets them on
        # shutdown); terminating them is the only way to stop a running task.
        processes = list((getattr(executor, "_processes", None) or {}).values())
        executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        if not _ended(processes, WORKER_END_S):  # SIGTERM still pending: SIGKILL
            for process in processes:
                if process.exitcode is None:
                    process.kill()
            _ended(processes, WORKER_END_S)
    finally:
        signal.signal(signal.SIGINT, previous)


def die_with_parent(parent: int) -> None:
    """Initializer of a worker process: end with the process that started it (a sweep
    killed with SIGKILL leaves no worker computing on). Linux only; elsewhere a no-op."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before the call took effect
        os._exit(1)
