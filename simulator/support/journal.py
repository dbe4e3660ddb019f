"""A sweep's journal: the rows finished so far, kept on disk as they arrive (I/O edge).

A long sweep writes `OUT.journal` beside its CSV: one JSON object per line, the first a
header saying which sweep this is (a digest of its parameters, of the spec files and of
the simulator's code, and the number of points), then a `start` line for every batch of
points handed to a worker and a `row` line for every point finished. Each write is one
line, flushed and fsynced, so a sweep killed at any moment (SIGKILL, a laptop's battery,
a pre-empted job) leaves every finished row on disk; a line cut short by the kill is the
last one and is dropped on reading. `--resume` reads the journal back, refuses it in one
line when it belongs to another sweep, and computes only the points without a row; the
journal is deleted once the CSV is written.

A running sweep holds an OS lock on `.OUT.lock` for its whole life (released by the
kernel however the process ends): a second sweep on the same `--out` is one line naming
the holder's PID, `--resume` included, so two sweeps never compute into one journal.

Rows go through JSON exactly: a sweep row holds ints, floats (JSON keeps `repr`'s
round-trip digits, and NaN/Infinity), strings and None.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from simulator.support.errors import SpecError

FORMAT = "fusemax-sweep-journal/1"
SUFFIX = ".journal"


def journal_path(out: Path) -> Path:
    """The journal of the sweep writing `out`: `out` + `.journal`, beside it."""
    return out.with_name(out.name + SUFFIX)


def digest(parts: Iterable[bytes | str]) -> str:
    """A short SHA-256 of the parts, each length-prefixed (no ambiguity in joining)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:16]


def files_digest(roots: Iterable[Path], pattern: str = "*") -> str:
    """A digest of every file under `roots` (relative name and content), in a fixed order."""
    parts: list[bytes | str] = []
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob(pattern) if p.is_file())
        for f in files:
            if "__pycache__" in f.parts:
                continue
            parts += [f.name if f == root else str(f.relative_to(root)), f.read_bytes()]
    return digest(parts)


@dataclass(frozen=True)
class Header:
    parameters: str  # digest of the sweep's grid, settings and overrides
    specs: str  # digest of the spec files the sweep may read
    code: str  # digest of the simulator's source
    points: int

    def line(self) -> str:
        return json.dumps({"journal": FORMAT, **asdict(self)}, sort_keys=True)


@dataclass(frozen=True)
class Progress:
    rows: dict[int, dict[str, Any]]  # finished points: index -> row
    started: frozenset[int]  # points handed to a worker (finished or not)


def read(path: Path, expected: Header) -> Progress:
    """The journal's finished rows and started points; a one-line SpecError when it belongs
    to another sweep or is damaged (other than a last line cut short)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(f"cannot read {path}: {err.strerror or err}") from None
    lines = text.split("\n")
    if not text.endswith("\n"):
        lines = lines[:-1]  # the write the kill interrupted
    lines = [line for line in lines if line]
    if not lines:
        raise SpecError(f"{path}: empty journal (delete it to start the sweep over)")
    header = _json(path, 1, lines[0])
    if header.get("journal") != FORMAT:
        raise SpecError(f"{path}:1: not a sweep journal ({FORMAT})")
    for key, what in (
        ("parameters", "the sweep's parameters"),
        ("specs", "the spec files"),
        ("code", "the simulator's code"),
        ("points", "the number of points"),
    ):
        if header.get(key) != getattr(expected, key):
            raise SpecError(
                f"{path}: journal of another sweep ({what} differ since it was written): "
                "delete it to start over, or resume with the same sweep"
            )
    rows: dict[int, dict[str, Any]] = {}
    started: set[int] = set()
    for number, line in enumerate(lines[1:], start=2):
        entry = _json(path, number, line)
        if "start" in entry:
            started.update(_indices(path, number, entry["start"], expected.points))
        elif "row" in entry and "i" in entry:
            (index,) = _indices(path, number, [entry["i"]], expected.points)
            if not isinstance(entry["row"], dict):
                raise SpecError(f"{path}:{number}: a row must be an object")
            rows[index] = entry["row"]
            started.add(index)
        else:
            raise SpecError(f"{path}:{number}: neither a start nor a row line")
    return Progress(rows, frozenset(started))


def _json(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError as err:
        raise SpecError(f"{path}:{number}: damaged journal line ({err})") from None
    if not isinstance(value, dict):
        raise SpecError(f"{path}:{number}: damaged journal line (not an object)")
    return value


def _indices(path: Path, number: int, values: Any, points: int) -> list[int]:
    if not isinstance(values, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v < points for v in values
    ):
        raise SpecError(f"{path}:{number}: point indices must be integers below {points}")
    return values


class Writer:
    """Appends start and row lines, each flushed and fsynced before the call returns."""

    def __init__(self, path: Path, header: Header, fresh: bool) -> None:
        self.path = path
        try:
            if fresh:
                self.handle = open(path, "w", encoding="utf-8")
                self._write([header.line()])
            else:
                _drop_cut_line(path)
                self.handle = open(path, "a", encoding="utf-8")
        except OSError as err:
            raise SpecError(f"cannot write {path}: {err.strerror or err}") from None

    def started(self, indices: list[int]) -> None:
        self._write([json.dumps({"start": indices})])

    def finished(self, rows: list[tuple[int, dict[str, Any]]]) -> None:
        self._write([json.dumps({"i": i, "row": row}) for i, row in rows])

    def _write(self, lines: list[str]) -> None:
        self.handle.write("".join(line + "\n" for line in lines))
        self.handle.flush()
        os.fsync(self.handle.fileno())

    def close(self) -> None:
        self.handle.close()


def _drop_cut_line(path: Path) -> None:
    """Truncate a last line the kill cut short, so that appending starts a fresh line."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)


def lock_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.lock")


@contextmanager
def held(out: Path) -> Iterator[None]:
    """Hold `out`'s sweep lock while the block runs; one line naming the holder's PID when
    another process holds it."""
    path = lock_path(out)
    while True:
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the block
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise SpecError(
                f"{out} is being written by a running sweep (PID {holder}): wait for it to "
                "end, or give another --out"
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        handle.close()  # the holder before us removed the file as we opened it: again
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        path.unlink(missing_ok=True)
        handle.close()
