"""Timeloop problem and mapping files, and its printed mappings, read into the access
model (:mod:`simulator.plan.accesses`): a :class:`~simulator.plan.accesses.Problem` and the
per-level loop nest (`LevelMapping`s) that `analyze` counts.

Used to import the FuseMax artifact's problems and mappings, to read this project's
exports back, and to compare with a real `timeloop-model` run (its `map.txt`).
Dense problems only: each data space a projection on whole dimensions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.plan.accesses import DataSpace, LevelMapping, Loop, Problem
from simulator.spec.timeloop_import import load_yaml
from simulator.spec.yamlio import LocDict, LocList
from simulator.support.errors import Loc, SpecError


def load_problem(path: str | Path) -> Problem:
    """A Timeloop v0.4 problem (dense, each data space a projection on whole dimensions)."""
    source = str(path)
    data = load_yaml(path)
    top = Loc(source, 1, 1)
    if not isinstance(data, LocDict) or not isinstance(data.get("problem"), LocDict):
        raise SpecError("a Timeloop problem file needs a top-level 'problem:' mapping", top)
    body = data["problem"]
    shape, instance = body.get("shape"), body.get("instance")
    if not isinstance(shape, LocDict) or not isinstance(instance, LocDict):
        raise SpecError("'problem:' needs 'shape:' and 'instance:'", body.loc)
    dims = shape.get("dimensions")
    if isinstance(dims, str):
        dims = list(dims)
    if not isinstance(dims, list) or not dims:
        raise SpecError("'shape:' needs a 'dimensions:' list", shape.loc)
    dims = [str(d) for d in dims]
    coefficients = shape.get("coefficients")
    if coefficients:
        raise SpecError(
            "problem coefficients (strides, dilations) are not supported: only plain "
            "dimensions index the data spaces",
            shape.loc_of("coefficients"),
        )
    extents = []
    for key in instance:
        if key == "densities":
            if instance[key]:
                raise SpecError("sparse 'densities' are not supported", instance.key_locs[key])
            continue
        # Timeloop ignores instance entries of undeclared dimensions (the artifact's AV
        # problem lists M); so does the import.
    for d in dims:
        value = instance.get(d)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SpecError(f"instance needs a positive integer for dimension '{d}'", instance.loc)
        extents.append((d, value))
    spaces = shape.get("data_spaces")
    if not isinstance(spaces, LocList) or not spaces:
        raise SpecError("'shape:' needs 'data_spaces:'", shape.loc)
    out = []
    for i, ds in enumerate(spaces):
        loc = spaces.loc_of(i)
        if not isinstance(ds, LocDict) or "name" not in ds:
            raise SpecError("each data space needs a 'name' and a 'projection'", loc)
        name = str(ds["name"])
        projection = ds.get("projection")
        if not isinstance(projection, list):
            raise SpecError(f"data space '{name}' needs a 'projection' list", loc)
        indexed = []
        for term in projection:
            if (
                isinstance(term, list)
                and len(term) == 1
                and isinstance(term[0], list)
                and len(term[0]) == 1
                and str(term[0][0]) in dims
            ):
                indexed.append(str(term[0][0]))
            else:
                raise SpecError(
                    f"data space '{name}': projection term {_plain(term)} is not a single "
                    "dimension (sums and coefficients -- sliding windows -- are not supported)",
                    ds.loc_of("projection"),
                )
        out.append(DataSpace(name, tuple(indexed), bool(ds.get("read_write", False))))
    return Problem(str(shape.get("name", Path(source).stem)), tuple(extents), tuple(out))


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return str(value)


def load_mapping(
    path: str | Path, levels: Sequence[str], anchors: Mapping[str, str] | None = None
) -> tuple[LevelMapping, ...]:
    """A Timeloop v0.4 `mapping:` list over the storage `levels` (outermost first);
    `anchors` (`spatial_anchors` of the architecture) place its spatial entries."""
    source = str(path)
    data = load_yaml(path)
    entries = data.get("mapping") if isinstance(data, LocDict) else None
    if not isinstance(entries, LocList):
        raise SpecError(
            "a Timeloop mapping file needs a top-level 'mapping:' list", Loc(source, 1, 1)
        )
    normal = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, LocDict) or "target" not in entry or "type" not in entry:
            raise SpecError("each mapping entry needs 'target' and 'type'", entries.loc_of(i))
        item = dict(entry)
        factors = item.get("factors", [])
        if isinstance(factors, str):  # Timeloop's processed form: "B=64,E=1" or "B=64 E=1"
            item["factors"] = [f for f in re.split(r"[,\s]+", factors) if f]
        elif not isinstance(factors, list):
            raise SpecError(
                "'factors' must be a list (or string) of DIM=N", entry.loc_of("factors")
            )
        permutation = item.get("permutation", [])
        if isinstance(permutation, str):  # one character per dimension, innermost first
            item["permutation"] = list(permutation.replace(",", "").replace(" ", ""))
        elif not isinstance(permutation, list):
            raise SpecError(
                "'permutation' must be a list (or string) of dimensions",
                entry.loc_of("permutation"),
            )
        for key in ("keep", "bypass"):
            if key in item and not isinstance(item[key], list):
                raise SpecError(f"'{key}' must be a list of data spaces", entry.loc_of(key))
        split = item.get("split")
        if split is not None and (isinstance(split, bool) or not isinstance(split, int)):
            raise SpecError("'split' must be a whole number of dimensions", entry.loc_of("split"))
        if entry["type"] not in ("temporal", "spatial", "dataspace", "bypass"):
            raise SpecError(
                f"unsupported mapping entry type '{entry['type']}' (temporal, spatial, dataspace)",
                entry.loc_of("type"),
            )
        target = str(entry["target"])
        if entry["type"] in ("temporal", "dataspace", "bypass") and target not in levels:
            if not (target.startswith("inter_") and target.endswith("_spatial")):
                raise SpecError(
                    f"mapping targets '{target}', which is not a storage level of the "
                    f"architecture ({', '.join(levels)})",
                    entry.loc_of("target"),
                )
            continue  # Timeloop's dummy levels of the processed form: no storage
        normal.append(item)
    return mapping_from_timeloop(normal, list(levels), source, anchors)


def mapping_from_timeloop(
    entries: list,
    level_order: list[str],
    source: str = "<mapping>",
    anchors: Mapping[str, str] | None = None,
) -> tuple[LevelMapping, ...]:
    """A Timeloop v0.4 `mapping:` list (targets with temporal/spatial/dataspace entries).

    `level_order` lists the storage levels outermost first; spatial entries target a
    container and attach to the storage level above it in the architecture (`anchors`:
    container -> that level; without them, the level of the temporal entry before it).
    Timeloop permutations list loops innermost first."""
    temporal: dict[str, tuple[Loop, ...]] = {}
    spatial: dict[str, list[Loop]] = {lv: [] for lv in level_order}
    keep: dict[str, frozenset[str]] = {lv: frozenset() for lv in level_order}
    last_storage = level_order[0]
    for entry in entries:
        target = str(entry.get("target"))
        kind = entry.get("type")
        factors = _factors(entry.get("factors", []), source)
        perm = [str(p) for p in entry.get("permutation", [])]
        if kind == "temporal":
            if target not in level_order:
                raise SpecError(
                    f"{source}: temporal mapping for unknown level '{target}'", Loc(source)
                )
            order = list(reversed(perm)) + [d for d in factors if d not in perm]
            temporal[target] = tuple(Loop(d, factors[d]) for d in order if d in factors)
            last_storage = target
        elif kind == "spatial":
            if anchors and target in anchors and target not in level_order:
                anchor = anchors[target]
            else:
                anchor = _storage_above(target, level_order, last_storage)
            axis_split = entry.get("split")
            order = perm + [d for d in factors if d not in perm]
            for k, d in enumerate(d for d in order if d in factors):
                axis = "X" if axis_split is None or k < int(axis_split) else "Y"
                spatial[anchor].append(Loop(d, factors[d], axis))
        elif kind in ("dataspace", "bypass"):
            if target in level_order:
                keep[target] = frozenset(str(x) for x in entry.get("keep", []))
        else:
            raise SpecError(f"{source}: unsupported mapping entry type '{kind}'", Loc(source))
    return tuple(
        LevelMapping(lv, temporal.get(lv, ()), tuple(spatial[lv]), keep[lv]) for lv in level_order
    )


def _storage_above(container: str, level_order: list[str], last_storage: str) -> str:
    return last_storage if container not in level_order else container


def _factors(raw: object, source: str) -> dict[str, int]:
    out: dict[str, int] = {}
    items = raw.split() if isinstance(raw, str) else list(raw or [])
    for item in items:
        match = re.fullmatch(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(\d+)\s*", str(item))
        if not match:
            raise SpecError(f"{source}: bad factor '{item}' (expected DIM=N)", Loc(source))
        out[match.group(1)] = int(match.group(2))
    return out


_MAP_LEVEL = re.compile(r"^(\w+) \[(.*)\]\s*$")
_MAP_LOOP = re.compile(r"^[|\s]*for (\w+) in \[0:(\d+)\)\s*(\(Spatial-([XY])\))?")


def mapping_from_map_text(text: str, storage_levels: list[str]) -> tuple[LevelMapping, ...]:
    """Timeloop's printed mapping (`timeloop-model.map.txt`). Loops under a dummy
    `inter_*_spatial` level are spatial fan-out of the storage level above it."""
    levels: list[LevelMapping] = []
    current: str | None = None
    temporal: list[Loop] = []
    spatial: list[Loop] = []
    keep: frozenset[str] = frozenset()

    def flush() -> None:
        if current is not None:
            levels.append(LevelMapping(current, tuple(temporal), tuple(spatial), keep))

    for line in text.splitlines():
        level = _MAP_LEVEL.match(line.strip())
        if level:
            name = level.group(1)
            if name in storage_levels:
                flush()
                current, temporal, spatial = name, [], []
                keep = frozenset(m.group(1) for m in re.finditer(r"(\w+):\d+", level.group(2)))
            continue
        loop = _MAP_LOOP.match(line)
        if loop and current is not None:
            lp = Loop(loop.group(1), int(loop.group(2)), loop.group(4) or "")
            (spatial if lp.spatial else temporal).append(lp)
    flush()
    return tuple(levels)
