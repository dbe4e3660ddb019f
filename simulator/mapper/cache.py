"""The mapper's cache: a search's answer kept on disk by a digest of everything it depends on.

Sweeps, experiments and repeated commands ask for the same points again; the search is
deterministic, so its answer -- the mapping found and its statistics -- is kept under a
digest of (the simulator's code, the cascade, the architecture, the workload, the search's
options, the energy tables when the objective prices energy) and reused. A changed file or
option is another digest; a stale entry is never read.

Where: `mapper/` in the simulator's cache folder (:mod:`simulator.support.cache_dir`:
`$FUSEMAX_SIM_CACHE`, `off` turning it off). An entry that cannot be read or written is
ignored: the cache only ever saves time.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from simulator.core.result import SearchStats
from simulator.support.atomic import write_text
from simulator.support.cache_dir import cache_folder

FORMAT = 1  # bumped when an entry's layout changes


def folder() -> Path | None:
    """The cache folder, or None when the cache is off."""
    return cache_folder("mapper")


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """The simulator's own code and the binder's facts: a new version never reads an old
    answer."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    facts = root.parent / "mappings" / "auto" / "binder.yaml"
    if not facts.is_file():
        facts = root / "_data" / "mappings" / "auto" / "binder.yaml"
    if facts.is_file():
        h.update(facts.read_bytes())
    return h.hexdigest()


def digest(*parts: object) -> str:
    """The key of a search: its inputs' reprs (frozen dataclasses: stable across runs)."""
    h = hashlib.sha256(FORMAT.to_bytes(2, "big"))
    h.update(code_digest().encode())
    for part in parts:
        h.update(b"\0")
        h.update(repr(part).encode())
    return h.hexdigest()


def load(key: str) -> tuple[dict[str, Any], SearchStats] | None:
    """A kept answer (mapping data, statistics marked as cached), or None."""
    where = folder()
    if where is None:
        return None
    try:
        entry = json.loads((where / f"{key}.json").read_text(encoding="utf-8"))
        stats = SearchStats(**{**entry["stats"], "seconds": 0.0, "cached": True})
        return entry["data"], stats
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(key: str, data: dict[str, Any], stats: SearchStats) -> None:
    """Keep an answer (best effort: a read-only or full disk only costs the next search)."""
    where = folder()
    if where is None:
        return
    entry = {"data": data, "stats": dataclasses.asdict(stats)}  # key order kept: the file's
    try:
        where.mkdir(parents=True, exist_ok=True)
        write_text(where / f"{key}.json", json.dumps(entry))
    except OSError:
        pass
