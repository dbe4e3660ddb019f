"""Rank extents: the file's defaults, the user's overrides, and partitioned ranks derived.

Size parameters (a window `W` used in filters, `Cascade.params`) resolve like extents: from
`shapes:` or `--shape W=...`, positive, returned with the ranks.

A partitioned rank M = M1 x M0 needs only two of the three extents; the third is derived
(M1 = M / M0 must divide exactly -- a sequence the chunk does not divide is an error, never
silently truncated).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from simulator.cascade.ir import Cascade
from simulator.support.errors import Loc, SpecError
from simulator.support.units import parse_count


def parse_shape_arg(text: str) -> dict[str, int]:
    """`M=4096,P=4096,E=64` -> {"M": 4096, ...}; accepts K/M suffixes (`M=1M`, `P=4K`)."""
    shapes: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        if "=" not in item:
            raise SpecError(f"--shape: expected RANK=VALUE, got '{item}'")
        rank, value = (s.strip() for s in item.split("=", 1))
        if not rank or not rank[0].isupper() or not rank.isidentifier():
            raise SpecError(f"--shape: rank names are upper-case identifiers, got '{rank}'")
        shapes[rank] = parse_count(value, what=f"--shape {rank}")
    return shapes


class MissingShapes(SpecError):
    """Some rank has no extent: an analysis that can stay symbolic may go on without one."""


def _entry_loc(cascade: Cascade, ranks: Sequence[str], overrides: Mapping[str, int]) -> Loc:
    """The first `shapes:` entry of the file among `ranks` that the user did not override:
    where a partition that does not divide is written (else the file)."""
    written = dict(cascade.shape_locs)
    for rank in ranks:
        if rank in written and rank not in overrides:
            return written[rank]
    return Loc(cascade.path)


def resolve_shapes(cascade: Cascade, overrides: Mapping[str, int] | None = None) -> dict[str, int]:
    """Extent of every rank of the cascade (defaults < overrides; partitions derived)."""
    overrides = overrides or {}
    known: dict[str, int] = dict(cascade.shapes)
    for rank, value in overrides.items():
        known[rank] = int(value)
    ranks = set(cascade.shape_names())
    unknown = sorted(set(overrides) - ranks)
    if unknown:
        raise SpecError(
            f"--shape: cascade '{cascade.name}' has no rank {', '.join(unknown)} "
            f"(its ranks: {', '.join(sorted(ranks))})",
            Loc(cascade.path),
        )
    for rank, value in known.items():
        if value <= 0:
            raise SpecError(
                f"shape of rank {rank} must be positive, got {value}", Loc(cascade.path)
            )
    changed = True
    while changed:
        changed = False
        for parent, comps in cascade.partitions:
            missing = [c for c in comps if c not in known]
            if parent in known and len(missing) == 1:
                rest = 1
                for c in comps:
                    if c != missing[0]:
                        rest *= known[c]
                if known[parent] % rest:
                    raise SpecError(
                        f"rank {parent}={known[parent]} is not divisible into "
                        f"chunks of {rest} ({' x '.join(comps)})",
                        _entry_loc(cascade, (parent, *comps), overrides),
                    )
                known[missing[0]] = known[parent] // rest
                changed = True
            elif parent not in known and not missing:
                product = 1
                for c in comps:
                    product *= known[c]
                known[parent] = product
                changed = True
    for parent, comps in cascade.partitions:
        product = 1
        for c in comps:
            product *= known.get(c, 0)
        if parent in known and product and product != known[parent]:
            raise SpecError(
                f"rank {parent}={known[parent]} but {' x '.join(comps)} = "
                f"{' x '.join(str(known[c]) for c in comps)} = {product}",
                _entry_loc(cascade, (parent, *comps), overrides),
            )
    missing = sorted(r for r in ranks if r not in known)
    if missing:
        raise MissingShapes(
            f"no shape for rank(s) {', '.join(missing)} of cascade "
            f"'{cascade.name}'; give them with --shape, e.g. "
            f"--shape {','.join(f'{m}=64' for m in missing)}",
            Loc(cascade.path),
        )
    return {r: known[r] for r in sorted(known) if r in ranks}
