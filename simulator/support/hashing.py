"""Immutable values hashed once (frozen dataclasses used as cache keys).

The analyses and searches keep results per cascade, Einsum, architecture or mapping, and
look them up on every candidate of a search; a frozen dataclass's own `__hash__` walks
every field (an architecture: its arrays, their operations, its components) each time.
"""

from __future__ import annotations

import dataclasses


class HashedOnce:
    """Hashed once, then remembered: the hash is of the fields equality compares; it is
    never pickled (string hashes differ between interpreters). A frozen dataclass writes
    its own `__hash__` unless its body names one: `__hash__ = HashedOnce.__hash__`."""

    def __hash__(self) -> int:
        found = self.__dict__.get("_hash")
        if found is None:
            fields = dataclasses.fields(self)  # type: ignore[arg-type]
            found = hash(tuple(getattr(self, f.name) for f in fields if f.compare))
            self.__dict__["_hash"] = found  # frozen: its own memo, as cached_property does
        return found

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state
