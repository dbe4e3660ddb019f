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


def content_repr(value: object, skip: frozenset[str] = frozenset()) -> str:
    """`value`'s repr without what its equality ignores (a dataclass field with
    `compare=False`: source positions) and without the outermost dataclass's `skip` fields:
    the same content read from another file, or from other lines, gives the same text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        inner = ", ".join(
            f"{f.name}={content_repr(getattr(value, f.name))}"
            for f in dataclasses.fields(value)
            if f.compare and f.name not in skip
        )
        return f"{type(value).__name__}({inner})"
    if isinstance(value, tuple | list):
        items = ", ".join(content_repr(v) for v in value)
        return f"({items})" if isinstance(value, tuple) else f"[{items}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {content_repr(v)}" for k, v in value.items()) + "}"
    return repr(value)
