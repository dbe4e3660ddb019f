"""A tile component of a template's mapping split in two: its outer part walked, the inner
part spread over PEs another Einsum leaves idle.

Longformer's 16 global keys are a region of a chunk of 256 keys: the contraction over them
walks the chunk's keys as tiles (so that only the region's are computed) and spreads its
other ranks -- 128 embedding values -- down the 2D array's 256-PE side, half of it idle.
Split the chunk `M0` into `M0` (walked) x `M00` (2 keys, spread down the side beside the
embedding) and the region takes 8 steps on the whole array instead of 16 on half of it.
Every other Einsum spreads both parts where it spread the chunk: the same PEs, the same
counts.
"""

from __future__ import annotations

from typing import Any


def split_lists(einsums: dict[str, dict[str, Any]], comp: str, inner: str) -> None:
    """In every Einsum's loop, spatial and inner lists, `comp` becomes `comp, inner` (the
    inner part right inside it: loops stay a nest, a spread stays the same PEs)."""
    for entry in einsums.values():
        for key in ("loops", "spatial", "inner"):
            if key in entry and comp in entry[key]:
                at = entry[key].index(comp)
                entry[key] = [*entry[key][: at + 1], inner, *entry[key][at + 1 :]]


def split_factor(factor: Any, width: int) -> str:
    """A tile factor spanning part of an array side divided by `width`: `PE2D.meshY` ->
    `PE2D.meshY / 2`, `PE2D.meshY / 2` -> `PE2D.meshY / 4`."""
    text = str(factor)
    if " / " in text:
        base, by = text.rsplit(" / ", 1)
        return f"{base} / {int(by) * width}"
    return f"{text} / {width}"


def inner_name(comp: str, taken: set[str]) -> str:
    """A name for `comp`'s inner part that names nothing else (`M0` -> `M00`)."""
    name = f"{comp}0"
    while name in taken:
        name += "0"
    return name
