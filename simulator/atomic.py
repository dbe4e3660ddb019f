"""Writing a result file whole or not at all (I/O edge: the CLIs call it).

The text goes to a hidden temporary beside the destination, which is renamed over it once
complete (`os.replace` is atomic within a directory): a run killed midway leaves the old
file or none, never half a CSV. The temporary is opened like any new file, so the result
gets the user's usual permissions (umask), unlike `tempfile.mkstemp`'s private 0600.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from simulator.errors import SpecError


def check_writable(path: Path) -> None:
    """Fail early, in one line, when `path` cannot be written (a folder, a file where its
    folder should be, a read-only place): before hours of sweeping, not after."""
    if path.is_dir():
        raise SpecError(f"cannot write {path}: it is a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = _temporary(path)
        probe.open("w").close()
        probe.unlink()
    except OSError as err:
        raise SpecError(f"cannot write {path}: {err.strerror or err}") from None


def write_text(path: Path, text: str) -> None:
    """`text` to `path`, atomically; an OS error is a one-line SpecError."""
    tmp = _temporary(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", newline="", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError as err:
        raise SpecError(f"cannot write {path}: {err.strerror or err}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial-{os.getpid()}")
