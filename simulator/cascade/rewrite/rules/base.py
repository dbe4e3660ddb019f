"""What every rule module provides and returns.

A rule is a module with `NAME`, `STABLE` (False: it may lose precision and runs only when
asked, `--allow-unstable`), `AT_EVERY_SITE` (True: the search also tries it at all the
places it applies at once, `simulator.cascade.rewrite.everywhere` -- for rules whose
places are parallel consumers of one value, as an FFN's projections are) and
`candidates(context)`, yielding one :class:`Rewrite` per place it applies. Its docstring
states the algebraic identity and the conditions under which it holds; `candidates`
yields nothing where a condition fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cascade.draft import Draft
from simulator.cascade.ir import Cascade
from simulator.cascade.passes import PassReport


@dataclass(frozen=True)
class Context:
    """The cascade a rule rewrites, with what the search already knows of it."""

    cascade: Cascade
    passes: PassReport
    shapes: dict[str, int]  # extents the numerical checks use (defaults and --shape)


@dataclass(frozen=True)
class Rewrite:
    rule: str
    site: str  # the Einsum, tensor or rank it applies to
    detail: str  # one line: the identity as instantiated here
    draft: Draft
