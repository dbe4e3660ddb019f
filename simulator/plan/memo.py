"""Phase plans kept across the candidates of one mapping: each keyed by the extents it read.

A search plans one template's mapping hundreds of times, each candidate with other tile
factors; most phases read few of the factors a candidate changes (a GEMM phase reads its
Einsum's extents only, a block of rows none of another phase's tiles). A phase plan is a
pure function of the phase, the mapping's binding, the cascade, the architecture, the
partitions, the instances and the extents, so the memo keeps each plan under the values of
the extents it actually read -- recorded while it was planned (:class:`ReadExtents`) --
and hands it to any later candidate whose extents agree on those names: that candidate's
planning would read the same names, take the same branches and give the same plan.
Anything else (another cascade, architecture, binding ...) empties the memo first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

_ABSENT = object()  # a name read but not in the extents (`name in extents` was False)
_EVERY = ("*every*",)  # the plan read the whole extents (iterated or copied them)

T = TypeVar("T")


class ReadExtents(dict):
    """The extents, recording every name read (looked up, tested for, or -- any iteration or
    copy -- all of them)."""

    def __init__(self, extents: Mapping[str, int]) -> None:
        super().__init__(extents)
        self.read: set[str] = set()
        self.everything = False

    def __getitem__(self, name: str) -> int:
        self.read.add(name)
        return dict.__getitem__(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        self.read.add(name)
        return dict.get(self, name, default)

    def __contains__(self, name: object) -> bool:
        self.read.add(name)  # type: ignore[arg-type]
        return dict.__contains__(self, name)

    def _all(self) -> None:
        self.everything = True

    def __iter__(self) -> Iterator[str]:
        self._all()
        return dict.__iter__(self)

    def keys(self):  # type: ignore[override]
        self._all()
        return dict.keys(self)

    def values(self):  # type: ignore[override]
        self._all()
        return dict.values(self)

    def items(self):  # type: ignore[override]
        self._all()
        return dict.items(self)

    def __len__(self) -> int:
        self._all()
        return dict.__len__(self)

    def __eq__(self, other: object) -> bool:
        self._all()
        return dict.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]

    def copy(self) -> dict[str, int]:
        self._all()
        return dict(dict.items(self))

    def __reduce__(self):  # pickled as the plain dict it is
        return (dict, (dict(dict.items(self)),))


def _values(names: tuple[str, ...], extents: Mapping[str, int]) -> tuple:
    if names is _EVERY:
        return tuple(sorted(extents.items()))
    return tuple(extents.get(n, _ABSENT) for n in names)


def _same(value: Any) -> Any:
    """A context entry as compared: by value where it is plain data, else by identity."""
    return value if isinstance(value, str | int | float | tuple) else id(value)


class PhaseMemo:
    """Plans of one mapping's phases across candidates that differ only in their extents."""

    def __init__(self) -> None:
        self._context: tuple = ()
        self._held: tuple = ()  # the objects the context names by identity, kept alive
        # phase identity -> (the phase, {names read: {their values: plan}})
        self._plans: dict[int, tuple[Any, dict[tuple[str, ...], dict[tuple, Any]]]] = {}
        self.hits = 0
        self.misses = 0

    def plan(
        self,
        phase: Any,
        context: tuple[Any, ...],
        extents: Mapping[str, int],
        make: Callable[[Mapping[str, int]], T],
    ) -> T:
        """The phase's plan for these extents: `make(extents)` unless a plan made for
        extents agreeing on every name it read is kept. `context`: every other input of
        `make`, compared by value where plain data, else by identity (a change empties the
        memo)."""
        key = tuple(_same(c) for c in context)
        if key != self._context:
            self._context, self._held, self._plans = key, context, {}
        entry = self._plans.get(id(phase))
        if entry is None:
            entry = self._plans[id(phase)] = (phase, {})
        by_names = entry[1]
        for names, kept in by_names.items():
            found = kept.get(_values(names, extents), _ABSENT)
            if found is not _ABSENT:
                self.hits += 1
                return found  # type: ignore[return-value]
        self.misses += 1
        reading = ReadExtents(extents)
        made = make(reading)
        names = _EVERY if reading.everything else tuple(sorted(reading.read))
        by_names.setdefault(names, {})[_values(names, extents)] = made
        return made
