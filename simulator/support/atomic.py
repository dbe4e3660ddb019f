"""Writing a result file whole or not at all (I/O edge: the CLIs and experiments call it).

Every output goes to a hidden temporary beside its destination (`.<name>.partial-<pid>`)
and is renamed over it once complete (`os.replace` is atomic within a directory): a run
killed midway leaves the old file or none, never half a CSV. The temporary is opened like
any new file, so results get the user's usual permissions (umask).

What is already at the destination is never replaced by anything but a regular file: a
symbolic link is followed (its target is written atomically, the link stays), and a device,
FIFO or socket (`--out /dev/null`, a named pipe) is written straight into, as a shell's `>`
does -- a stream cannot be half-replaced, only written. Writing one that fails (`/dev/full`:
no space) is the usual one-line error.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from simulator.support.errors import SpecError

PARTIAL = ".partial-"  # marks a temporary: `.<name>.partial-<pid>`


def partial_name(path: Path) -> Path:
    return path.with_name(f".{path.name}{PARTIAL}{os.getpid()}")


def remove_stale_partials(path: Path) -> list[Path]:
    """The temporaries of `path` (`.<name>.partial-<pid>`) that processes no longer running
    left beside it (a kill -9 runs no clean-up): removed, and returned. A live process's
    temporary -- another command writing the same file -- is left alone."""
    prefix = f".{path.name}{PARTIAL}"
    stale = []
    for tmp in path.parent.glob(glob.escape(prefix) + "*"):
        pid = tmp.name[len(prefix) :]
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                tmp.unlink()
                stale.append(tmp)
    return stale


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def is_stream(path: Path) -> bool:
    """Is `path` (links followed) an existing file that is neither regular nor a folder: a
    device, a FIFO, a socket? Such a destination is written straight into, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def landing(path: Path) -> Path:
    """Where writing `path` lands: a symbolic link's final target (followed through every
    link; the target need not exist yet), `path` itself otherwise."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else path


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path to write; renamed to `path` when the block ends without an error
    and removed when it raises (KeyboardInterrupt and SystemExit included). A symbolic link
    is followed, its target replaced; a device or FIFO is yielded itself, written straight
    into (see the module's note)."""
    if is_stream(path):
        yield path
        return
    path = landing(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_paths(paths: Sequence[Path]) -> Iterator[list[Path]]:
    """Temporaries for several files that belong together (a figure's PNG and PDF): all
    renamed into place when the block ends without an error, none otherwise. Ctrl-C (and
    SIGTERM) is held back while they are renamed; one that arrived meanwhile removes them
    all again, so an interrupted command leaves the set whole or absent, never half of it."""
    streams = [path for path in paths if is_stream(path)]
    files = [landing(path) for path in paths if path not in streams]
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
    temps = {path: partial_name(path) for path in files}
    try:
        yield [path if path in streams else temps[landing(path)] for path in paths]
        try:
            with interrupts_held():
                for path, tmp in temps.items():
                    os.replace(tmp, path)
        except BaseException:
            for path in files:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            raise
    finally:
        for tmp in temps.values():
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """SIGINT and SIGTERM blocked for the block (delivered when it ends); a no-op off the
    main thread or where the platform cannot block signals. For what an interrupt must not
    split: renaming a set of files, or a C extension's first import (an interrupt inside
    one surfaces as an ImportError, not as the interrupt it is)."""
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    except (AttributeError, ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def output_path(given: str | Path, default_name: str) -> Path:
    """Where a command writes: `given`, or `default_name` inside it when `given` is an
    existing folder (`--out results/` writes `results/<default_name>`)."""
    path = Path(given)
    return path / default_name if path.is_dir() else path


def check_writable(path: Path) -> None:
    """Fail early, in one line, when `path` cannot be written (a folder, a missing folder,
    a file where its folder should be, a read-only place): before hours of sweeping, not
    after. No folder is created: a typo in a path is an error, not a new tree. A device or
    FIFO is checked for writing only (opening a FIFO would wait for its reader); a symbolic
    link, where its target goes."""
    if is_stream(path):
        if not os.access(path, os.W_OK):
            raise SpecError(f"cannot write {path}: permission denied")
        return
    path = landing(path)
    if path.is_dir():
        raise SpecError(f"cannot write {path}: it is a directory")
    parent = path.parent
    if not parent.exists():
        raise SpecError(f"cannot write {path}: folder {parent} does not exist")
    if not parent.is_dir():
        raise SpecError(f"cannot write {path}: {parent} is not a folder")
    probe = partial_name(path)
    try:
        probe.open("w").close()
    except OSError as err:
        raise SpecError(f"cannot write {path}: {err.strerror or err}") from None
    finally:  # even when Ctrl-C comes between the two: no probe left behind
        with contextlib.suppress(OSError):
            probe.unlink()


def write_text(path: Path, text: str) -> None:
    """`text` to `path`, atomically; an OS error is a one-line SpecError."""
    try:
        with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as out:
            out.write(text)
    except OSError as err:
        raise SpecError(f"cannot write {path}: {err.strerror or err}") from None
