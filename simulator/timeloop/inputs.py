"""Every Einsum of a configuration as a runnable Timeloop v0.4 input (and back).

The per-Einsum views of a plan (`plan/views.py`) already hold what Timeloop needs: a problem and a
mapping over DRAM -> global buffer -> (spatial fan-out over the array) -> PE registers.
This module writes them in Timeloop's v0.4 shapes, as the FuseMax artifact's
`specs/proposal/problems/*.yaml` and `mappings/*.yaml` are written:

* `problem.yaml` -- dimensions (Timeloop reads one character per dimension, so rank
  components like M1, M0 get letters: M, N, as in the artifact), data spaces, instance;
* `architecture.yaml` -- the path of the Einsum's array: DRAM, the buffer, the array as
  spatial containers, its registers and a compute unit; Timeloop attributes only. A 2D
  array is two nested containers, `<array>_col` over X holding `<array>` over Y, as the
  artifact writes its arrays (`PE_col`, `PE`): Timeloop's multicast analysis compares every
  pair of instances of one spatial level, so one 65,536-way level (256 x 256) never
  finishes, while two 256-way levels take a second and count the same (checked with the
  real tool at 16x16 and 64x64; the runs of `tests/data/timeloop-real/` read this form);
* `mapping.yaml` -- per storage level the factors of every dimension and the permutation
  (innermost first), per spatial container its factors and split (X then Y) and
  keep/bypass;
* `ERT.yaml`, `ART.yaml` -- Accelergy-shaped tables for those components, from the design's
  tables (corrected accounting). Timeloop prices one `compute` per point, so the compute
  unit's energy is this Einsum's energy per point, from the same function the project's
  energy model uses (`energy.action_counts`);
* `timeloop-model.yaml` -- the same problem, architecture and mapping in the processed form
  the C++ `timeloop-model` itself reads (`processed_yaml`). The v0.4 files above are the
  input of Timeloop's Python front end (timeloopfe), which turns `!Container` trees into
  this form -- a flat `subtree`/`local` list of `name[1..N]` instances, a dummy storage
  level per spatial container, factor and permutation strings, `bypass` entries -- before
  it calls the binary (the recorded real run's `parsed-processed-input.yaml` is one);
  the backend (`--backend timeloop`) gives the binary this file, so it needs no front end;
* `fusemax-sim.yaml` -- what Timeloop does not read and the way back: the letters'
  rank components, data space -> tensor, level roles, the project architecture (`like`).

The problem files take the spelling of the Timeloop release they target
(`spelling_for_version`): releases up to v3.0.3 read `data-spaces`/`read-write`, later
ones `data_spaces`/`read_write`; a release reading the other spelling fails to find the
data spaces or, worse, silently takes the output for an input.

`read_einsum` imports such a directory back into an `EinsumView` and an Architecture;
`read_processed` reads any processed `timeloop-model.yaml` (this export's or the front
end's) into an `EinsumView` over its own level names.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from simulator.cascade.ir import Cascade
from simulator.plan.accesses import LevelMapping, Loop, Problem, analyze
from simulator.plan.costs import EinsumCost
from simulator.plan.point import plan_point
from simulator.plan.views import EinsumView
from simulator.pricing.energy import action_counts
from simulator.spec import timeloop_import as ti
from simulator.spec.arch import Architecture, Array
from simulator.spec.arch_file import load_architecture
from simulator.spec.mapping import Mapping
from simulator.spec.tables import AreaTable, EnergyTable, load_area_table, load_energy_table
from simulator.spec.workload import Workload
from simulator.spec.yamlio import LocDict
from simulator.support.errors import Loc, SpecError
from simulator.timeloop.problems import load_mapping, load_problem

FILES = ("problem.yaml", "architecture.yaml", "mapping.yaml", "ERT.yaml", "ART.yaml")
PROCESSED = "timeloop-model.yaml"
# What `timeloop-model` is given: the processed form and the tables (with an ERT among its
# inputs Timeloop prices with it instead of calling Accelergy).
MODEL_INPUTS = (PROCESSED, "ERT.yaml", "ART.yaml")
SIDECAR = "fusemax-sim.yaml"
DUMMY_CLASS = "dummy_storage"  # the front end's level for a spatial container
LETTERS = "MNPQRSTUVWXYZABCDEFGHIJKL"
# Timeloop tells arithmetic from storage by the component's class; the project's generic
# `compute` class is written as Timeloop's integer MAC class.
TIMELOOP_COMPUTE_CLASS = "intmac"
TOP = "system_top_level"
BUFFER_PORTS = (
    "read_bandwidth",
    "write_bandwidth",
    "shared_bandwidth",
)  # the name Timeloop's front end gives the top container


# The X container of a 2D array (nested form): `<array>_col` holds one column of the array,
# `<array>` inside it the column's PEs over Y -- the artifact's `PE_col` / `PE`.
COLUMN_SUFFIX = "_col"


# --------------------------------------------------------------------------------------
# Problem keys: Timeloop's two spellings


@dataclass(frozen=True)
class Spelling:
    """How a Timeloop release spells the problem keys written with a separator. Releases up
    to v3.0.3 (October 2023) read `data-spaces`/`read-write`; Timeloop's keywords went from
    hyphens to underscores in February 2024 (NVlabs/timeloop 74ae30b). The other keys the
    export writes are spelled alike in both."""

    data_spaces: str
    read_write: str


HYPHENATED = Spelling("data-spaces", "read-write")
UNDERSCORED = Spelling("data_spaces", "read_write")
# Timeloop's tagged releases, all before the renaming; a later Timeloop is "4" (the v4
# documentation of the v0.4 input format).
HYPHENATED_RELEASES = ((1, 0, 0), (2, 0, 0), (3, 0, 0), (3, 0, 1), (3, 0, 2), (3, 0, 3))
FIRST_UNDERSCORED_MAJOR = 4
_VERSION = re.compile(r"[vV]?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_version(version: str) -> tuple[int, int, int]:
    """`3.0.3`, `v3.0.3`, `3` or `4.1` as (major, minor, patch); anything else is an error."""
    match = _VERSION.fullmatch(version.strip())
    if match is None:
        raise SpecError(
            f"'{version}' is not a Timeloop version (give a release such as 3.0.3, or 4 for "
            "Timeloop after February 2024)"
        )
    major, minor, patch = (int(part or 0) for part in match.groups())
    return major, minor, patch


def spelling_for_version(version: str | None) -> Spelling:
    """The problem-key spelling of a Timeloop release; None (release not known) gives the
    current spelling. A version that is no Timeloop release -- 0.4 is the input format's
    version, 3.1 was never released -- is an error rather than a guess, since the wrong
    spelling makes `timeloop-model` fail or misread the output."""
    if version is None:
        return UNDERSCORED
    parsed = parse_version(version)
    if parsed in HYPHENATED_RELEASES:
        return HYPHENATED
    if parsed[0] >= FIRST_UNDERSCORED_MAJOR:
        return UNDERSCORED
    if parsed[0] == 0:
        raise SpecError(
            f"{version} is a version of Timeloop's input format, not of Timeloop: give the "
            "release (such as 3.0.3, or 4 for Timeloop after February 2024)"
        )
    known = ", ".join(".".join(map(str, r)).removesuffix(".0") for r in HYPHENATED_RELEASES)
    raise SpecError(
        f"Timeloop {version} is not a release this export knows the input spelling of "
        f"(releases {known} read 'data-spaces'/'read-write'; {FIRST_UNDERSCORED_MAJOR} and "
        "later 'data_spaces'/'read_write')"
    )


@dataclass(frozen=True)
class ExportedEinsum:
    einsum: str
    array: str
    view: EinsumView
    cost: EinsumCost
    files: tuple[tuple[str, Any], ...]  # file name -> YAML data


def configuration_views(
    cascade: Cascade, mapping: Mapping, arch: Architecture, workload: Workload
) -> tuple[list[EinsumView], list[EinsumCost]]:
    """The views and costs of every Einsum of a configuration: its plan's, which the
    evaluation prices (:func:`simulator.plan.point.plan_point`)."""
    point = plan_point(cascade, mapping, arch, workload)
    return list(point.views), list(point.costs)


def dimension_letters(
    dims: tuple[str, ...], reserved: frozenset[str] = frozenset()
) -> dict[str, str]:
    """One upper-case letter per dimension: single letters stay, others take their first
    letter when free, else the next free one (M1 -> M, M0 -> N, as the artifact names them).
    `reserved` letters (one-letter data space names such as Q) are not given out."""
    out: dict[str, str] = {}
    used: set[str] = set(reserved)
    for d in dims:
        if len(d) == 1 and d.isalpha() and d.upper() not in used:
            out[d] = d.upper()
            used.add(d.upper())
    for d in dims:
        if d in out:
            continue
        for c in [d[0].upper()] + list(LETTERS):
            if c.isalpha() and c not in used:
                out[d] = c
                used.add(c)
                break
        else:
            raise SpecError(f"more than 26 dimensions: cannot name '{d}' with one letter")
    return out


class _Tagged(dict):
    tag = ""


class _Container(_Tagged):
    tag = "!Container"


class _Component(_Tagged):
    tag = "!Component"


class _Dumper(yaml.SafeDumper):
    pass


def _represent_tagged(dumper: yaml.SafeDumper, data: _Tagged) -> yaml.Node:
    return dumper.represent_mapping(data.tag, dict(data))


def _represent_flow_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = all(isinstance(x, str | int | float) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(_Container, _represent_tagged)
_Dumper.add_representer(_Component, _represent_tagged)
_Dumper.add_representer(list, _represent_flow_list)
# Names read from specs are str subclasses carrying source positions: written as plain text.
_Dumper.add_multi_representer(str, lambda d, s: d.represent_str(str(s)))


def dump(data: Any) -> str:
    """YAML text of an exported file (deterministic: insertion order, no aliases)."""
    _Dumper.ignore_aliases = lambda self, data: True  # type: ignore[method-assign]
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def _level_names(arch: Architecture, array: str) -> dict[str, str]:
    """View level -> the architecture's component name."""
    return {
        "DRAM": arch.dram.name,
        "buffer": arch.buffer.name,
        "registers": arch.array(array).register_component or "registers",
    }


def _class_of(arch: Architecture, name: str, default: str) -> str:
    for comp, klass, _n in arch.components:
        if comp == name and klass:
            return klass
    return default


def problem_yaml(
    view: EinsumView, letters: dict[str, str], spelling: Spelling = UNDERSCORED
) -> dict:
    """The Einsum's Timeloop problem, its keys spelled as the targeted release reads them."""
    dims = [letters[d] for d in view.problem.dims]
    spaces = []
    for ds in view.problem.dataspaces:
        entry: dict[str, Any] = {
            "name": ds.name,
            "projection": [[[letters[d]]] for d in ds.dims],
        }
        if ds.read_write:
            entry[spelling.read_write] = True
        spaces.append(entry)
    return {
        "problem": {
            "version": "0.4",
            "shape": {"name": view.einsum, "dimensions": dims, spelling.data_spaces: spaces},
            "instance": {letters[d]: e for d, e in view.problem.instance},
        }
    }


def array_containers(array: Array, nested: bool = True) -> list[tuple[str, str, dict[str, int]]]:
    """The spatial containers an array is written as, outermost first: (name, the axes its
    fan-out covers, its `spatial:` mesh). Nested, a 2D array is `<array>_col` over X holding
    `<array>` over Y (see the module docstring for why); flat, or 1D, one container."""
    if nested and array.mesh_y > 1:
        return [
            (f"{array.name}{COLUMN_SUFFIX}", "X", {"meshX": array.mesh_x}),
            (array.name, "Y", {"meshY": array.mesh_y}),
        ]
    mesh = {"meshX": array.mesh_x}
    if array.mesh_y > 1:
        mesh["meshY"] = array.mesh_y
    return [(array.name, "XY", mesh)]


def architecture_yaml(arch: Architecture, array_name: str, nested: bool = True) -> dict:
    """The Einsum's path through the design as a v0.4 `nodes:` tree (Timeloop attributes
    only): DRAM, the buffer, the array's spatial containers, its registers, a compute unit."""
    array = arch.array(array_name)
    top_attrs: dict[str, Any] = {
        "global_cycle_seconds": 1.0 / arch.frequency_hz,
        "datawidth": arch.datawidth_bits,
    }
    if arch.technology:
        top_attrs["technology"] = arch.technology
    words_per_cycle = (
        arch.dram.bandwidth_bytes_per_s / (arch.dram.datawidth_bits / 8) / arch.frequency_hz
    )
    buffer_attrs: dict[str, Any] = {
        "depth": arch.buffer.depth,
        "width": arch.buffer.width_bits,
        "datawidth": arch.buffer.datawidth_bits,
    }
    for key in BUFFER_PORTS:  # Timeloop's port bandwidths (values per cycle), when limited
        value = getattr(arch.buffer, key, None)
        if value:
            buffer_attrs[key] = value
    nodes: list[Any] = [
        _Container(name="system", attributes=top_attrs),
        _Component(
            name=arch.dram.name,
            **{"class": "DRAM"},
            attributes={
                "width": arch.dram.width_bits,
                "datawidth": arch.dram.datawidth_bits,
                "shared_bandwidth": words_per_cycle,
            },
        ),
        _Container(name="accel"),
        _Component(
            name=arch.buffer.name,
            **{"class": arch.buffer.klass or "SRAM"},
            attributes=buffer_attrs,
        ),
        *(
            _Container(name=name, spatial=mesh)
            for name, _axes, mesh in array_containers(array, nested)
        ),
    ]
    if array.register_component:
        nodes.append(
            _Component(
                name=array.register_component,
                **{"class": "storage", "subclass": "aladdin_register"},
                attributes={
                    "depth": array.register_words,
                    "width": arch.datawidth_bits,
                    "datawidth": arch.datawidth_bits,
                },
            )
        )
    klass = _class_of(arch, array.compute_component, "compute")
    nodes.append(
        _Component(
            name=array.compute_component or f"{array.name}_pe",
            **{"class": TIMELOOP_COMPUTE_CLASS if klass == "compute" else klass},
            attributes={
                "multiplier_width": arch.datawidth_bits,
                "adder_width": arch.datawidth_bits,
            },
        )
    )
    return {"architecture": {"version": "0.4", "nodes": nodes}}


def _factors(loops: tuple[Loop, ...], dims: tuple[str, ...], where: str) -> dict[str, int]:
    out = {d: 1 for d in dims}
    seen: set[str] = set()
    for lp in loops:
        if lp.dim in seen:
            raise SpecError(
                f"{where}: dimension {lp.dim} is split twice at one level, which Timeloop's "
                "mapping format cannot express"
            )
        seen.add(lp.dim)
        out[lp.dim] = lp.factor
    return out


def _split(axes: str, n_x: int, n_y: int, n_dims: int) -> int:
    """Timeloop's `split` of a spatial entry whose permutation lists the X loops, then the Y
    loops, then the rest: its first `split` dimensions spread over X, the others over Y."""
    if axes == "Y":
        return 0
    if axes == "X" or n_y == 0:
        return n_dims
    return n_x


def _spatial_entries(
    level: LevelMapping, view: EinsumView, array: Array, letters: dict[str, str], nested: bool
) -> list[dict]:
    """The spatial fan-out below one storage level as one entry per array container (see
    `array_containers`): each takes the loops of its axes; every entry lists the X loops,
    then the Y loops, then the other dimensions, as the artifact's and the front end's do."""
    dims = view.problem.dims
    xs = [lp for lp in level.spatial if lp.spatial != "Y"]
    ys = [lp for lp in level.spatial if lp.spatial == "Y"]
    for axis, used, mesh in (("X", xs, array.mesh_x), ("Y", ys, array.mesh_y)):
        if math.prod(lp.factor for lp in used) > mesh:
            raise SpecError(
                f"{view.einsum}: spatial factors over {axis} "
                f"({' x '.join(lp.dim for lp in used)}) exceed the array's mesh{axis} = {mesh}"
            )
    order = list(dict.fromkeys([lp.dim for lp in xs] + [lp.dim for lp in ys]))
    permutation = order + [d for d in dims if d not in order]
    entries = []
    for name, axes, _mesh in array_containers(array, nested):
        loops = tuple(lp for lp in level.spatial if (lp.spatial or "X") in axes)
        factors = _factors(loops, dims, f"{view.einsum} over {name}")
        entries.append(
            {
                "target": name,
                "type": "spatial",
                "factors": [f"{letters[d]}={factors[d]}" for d in dims],
                "permutation": [letters[d] for d in permutation],
                "split": _split(axes, len(xs), len(ys), len(dims)),
            }
        )
    return entries


def mapping_yaml(
    view: EinsumView, arch: Architecture, letters: dict[str, str], nested: bool = True
) -> dict:
    """The view's loop nest as a v0.4 `mapping:` list: per storage level its temporal
    factors and permutation (innermost first) and keep/bypass, then the spatial entries of
    the array's containers."""
    names = _level_names(arch, view.array)
    array = arch.array(view.array)
    dims = view.problem.dims
    every = [ds.name for ds in view.problem.dataspaces]
    entries: list[dict] = []

    def fmt(factors: dict[str, int]) -> list[str]:
        return [f"{letters[d]}={factors[d]}" for d in dims]

    for level in view.mapping:
        target = names[level.level]
        where = f"{view.einsum} at {target}"
        factors = _factors(level.temporal, dims, where)
        inner_first = [lp.dim for lp in reversed(level.temporal)]
        perm = inner_first + [d for d in dims if d not in inner_first]
        entries.append(
            {
                "target": target,
                "type": "temporal",
                "factors": fmt(factors),
                "permutation": [letters[d] for d in perm],
            }
        )
        entries.append(
            {
                "target": target,
                "type": "dataspace",
                "keep": [n for n in every if n in level.keep],
                "bypass": [n for n in every if n not in level.keep],
            }
        )
        if level.spatial:
            entries += _spatial_entries(level, view, array, letters, nested)
    return {"mapping": entries}


# --------------------------------------------------------------------------------------
# Timeloop's processed form (what the C++ binary reads)


def spatial_level(container: str) -> str:
    """The dummy storage level Timeloop's front end puts in place of a spatial container."""
    return f"inter_{container}_spatial"


def _instances(name: str, n: int) -> str:
    return f"{name}[1..{n}]"


def _processed_architecture(nodes: list[Any]) -> dict:
    """A v0.4 `nodes:` list (containers and components, outermost first) flattened as the
    front end does: container attributes go to everything below them; a spatial container
    becomes a dummy storage level; each component is `name[1..N]` with N the product of
    the meshes above it, and carries its meshX/meshY."""
    top: dict[str, Any] = {"version": "0.4"}
    inherited: dict[str, Any] = {}
    local: list[dict] = []
    mesh_x = mesh_y = 1
    for node in nodes:
        if isinstance(node, _Container):
            attrs = dict(node.get("attributes", {}))
            if not local and len(top) == 1:
                top.update(attrs)
            inherited.update(attrs)
            spatial = node.get("spatial")
            if spatial:
                local.append(
                    {
                        "name": _instances(spatial_level(node["name"]), mesh_x * mesh_y),
                        "class": DUMMY_CLASS,
                        "attributes": {
                            "width": 1,
                            "depth": 1,
                            "datawidth": 1,
                            "technology": -1,
                            "meshX": mesh_x,
                            "meshY": mesh_y,
                        },
                    }
                )
                mesh_x *= int(spatial.get("meshX", 1))
                mesh_y *= int(spatial.get("meshY", 1))
            continue
        entry: dict[str, Any] = {
            "name": _instances(node["name"], mesh_x * mesh_y),
            "class": node["class"],
        }
        if "subclass" in node:
            entry["subclass"] = node["subclass"]
        entry["attributes"] = {
            **inherited,
            **dict(node.get("attributes", {})),
            "meshX": mesh_x,
            "meshY": mesh_y,
        }
        local.append(entry)
    return {
        "version": "0.4",
        "subtree": [{"name": TOP, "attributes": top, "local": local}],
    }


def _processed_mapping(entries: list[dict], dims: list[str]) -> list[dict]:
    """v0.4 mapping entries in the processed form: factor and permutation strings,
    `bypass` entries listing only non-empty sides, and for a spatial container its dummy
    level (the spatial split, no temporal loops, every data space bypassed)."""
    spaces: list[str] = []
    out: list[dict] = []
    for entry in entries:
        kind = entry["type"]
        if kind == "dataspace":
            spaces = list(entry["keep"]) + list(entry["bypass"])
            item: dict[str, Any] = {"target": entry["target"], "type": "bypass"}
            for side in ("keep", "bypass"):
                if entry[side]:
                    item[side] = list(entry[side])
            out.append(item)
            continue
        factors = ",".join(entry["factors"])
        permutation = "".join(entry["permutation"])
        if kind == "temporal":
            out.append(
                {
                    "target": entry["target"],
                    "type": "temporal",
                    "factors": factors,
                    "permutation": permutation,
                }
            )
            continue
        dummy = spatial_level(entry["target"])
        out.append(
            {
                "target": dummy,
                "type": "spatial",
                "factors": factors,
                "permutation": permutation,
                "split": entry["split"],
            }
        )
        out.append(
            {
                "target": dummy,
                "type": "temporal",
                "factors": ",".join(f"{d}=1" for d in dims),
                "permutation": "".join(dims),
            }
        )
        out.append({"target": dummy, "type": "bypass", "bypass": spaces})
    return out


def processed_yaml(problem: dict, architecture: dict, mapping: dict) -> dict:
    """One Einsum's v0.4 problem, architecture and mapping (as exported) in the processed
    form `timeloop-model` reads: one file, the problem unchanged."""
    dims = list(problem["problem"]["shape"]["dimensions"])
    return {
        "architecture": _processed_architecture(architecture["architecture"]["nodes"]),
        "problem": problem["problem"],
        "mapping": _processed_mapping(mapping["mapping"], dims),
    }


def processed_storage_levels(data: dict) -> list[str]:
    """The storage levels of a processed architecture (`architecture: subtree: local:`),
    outermost first, without dummy levels and compute units: the levels a mapping keeps
    data in."""
    out = []
    for tree in data["architecture"]["subtree"]:
        for entry in tree.get("local", []):
            klass = str(entry.get("class", ""))
            if klass == DUMMY_CLASS or klass in ("mac", "intmac", "fpmac", "compute"):
                continue
            out.append(str(entry["name"]).split("[", 1)[0])
    return out


def _accelergy_name(name: str, instances: int) -> str:
    return f"{TOP}.{name}[1..{instances}]"


def tables_yaml(
    view: EinsumView, arch: Architecture, cascade, ert: EnergyTable, art: AreaTable
) -> tuple[dict, dict]:
    """ERT/ART of the exported components; the compute unit's `compute` is one point of
    this Einsum, priced through the energy model's own action counts."""
    array = arch.array(view.array)
    per_point = action_counts([view], arch, cascade, {view.einsum: 1}, 1, 0.0, "corrected", 0.0)
    compute_pj = sum(
        n * ert.energy(component, action)
        for (component, action), n in per_point.items()
        if action == "compute"
    )
    units = sorted({f"{array.name}.{u}" for op in array.operations for u, _k in op.actions})
    storage = [(arch.dram.name, 1), (arch.buffer.name, 1)]
    if array.register_component:
        storage.append((array.register_component, array.pes))
    tables = []
    areas = []
    for name, n in storage:
        actions = ert.actions(name)
        tables.append(
            {
                "name": _accelergy_name(name, n),
                "actions": [
                    {"name": a, "energy": float(actions.get(a, 0.0))}
                    for a in ("read", "write", "update", "leak")
                ],
            }
        )
        areas.append({"name": _accelergy_name(name, n), "area": float(art.area(name))})
    compute_name = _accelergy_name(array.compute_component or f"{array.name}_pe", array.pes)
    tables.append(
        {
            "name": compute_name,
            "actions": [
                {"name": "compute", "energy": compute_pj},
                {"name": "leak", "energy": sum(ert.actions(u).get("leak", 0.0) for u in units)},
            ],
        }
    )
    areas.append({"name": compute_name, "area": sum(art.area(u) for u in units)})
    return (
        {"ERT": {"version": "0.4", "tables": tables}},
        {"ART": {"version": "0.4", "tables": areas}},
    )


def export_einsum(
    view: EinsumView,
    cost: EinsumCost,
    arch: Architecture,
    cascade,
    tables: tuple[EnergyTable, AreaTable],
    configuration: str,
    *,
    spelling: Spelling = UNDERSCORED,
    nested: bool = True,
) -> ExportedEinsum:
    """One Einsum's files (see the module docstring); `spelling` is the targeted Timeloop's
    (`spelling_for_version`), `nested=False` writes a 2D array as one flat container."""
    letters = dimension_letters(
        view.problem.dims,
        frozenset(ds.name for ds in view.problem.dataspaces) - set(view.problem.dims),
    )
    ert, art = tables
    ert_yaml, art_yaml = tables_yaml(view, arch, cascade, ert, art)
    names = _level_names(arch, view.array)
    sidecar = {
        "fusemax_sim": {
            "einsum": view.einsum,
            "array": view.array,
            "configuration": configuration,
            "like": str(Path(arch.path).resolve()),
            "bandwidth_bytes_per_s": arch.dram.bandwidth_bytes_per_s,
            "dimensions": {letters[d]: d for d in view.problem.dims},
            "data_spaces": dict(view.dataspace_tensor),
            "levels": {names[lv]: lv for lv in ("DRAM", "buffer", "registers")},
        }
    }
    problem = problem_yaml(view, letters, spelling)
    architecture = architecture_yaml(arch, view.array, nested)
    mapping = mapping_yaml(view, arch, letters, nested)
    files = (
        ("problem.yaml", problem),
        ("architecture.yaml", architecture),
        ("mapping.yaml", mapping),
        ("ERT.yaml", ert_yaml),
        ("ART.yaml", art_yaml),
        (PROCESSED, processed_yaml(problem, architecture, mapping)),
        (SIDECAR, sidecar),
    )
    return ExportedEinsum(view.einsum, view.array, view, cost, files)


def export_configuration(
    cascade,
    mapping,
    arch: Architecture,
    workload,
    tables,
    configuration: str,
    *,
    spelling: Spelling = UNDERSCORED,
    nested: bool = True,
) -> list[ExportedEinsum]:
    """Every Einsum of a configuration exported (`export_einsum`), in plan order."""
    if tables is None:
        raise SpecError(
            f"architecture '{arch.name}' names no energy/area tables (energy_table, "
            "area_table): the Timeloop export writes its ERT and ART from them",
            Loc(arch.path),
        )
    views, costs = configuration_views(cascade, mapping, arch, workload)
    by_name = {c.einsum: c for c in costs}
    return [
        export_einsum(
            v,
            by_name[v.einsum],
            arch,
            cascade,
            tables,
            configuration,
            spelling=spelling,
            nested=nested,
        )
        for v in views
    ]


# --------------------------------------------------------------------------------------
# Back from the files


@dataclass(frozen=True)
class ImportedEinsum:
    view: EinsumView
    architecture: Architecture
    energy: EnergyTable
    area: AreaTable


def read_einsum(directory: str | Path) -> ImportedEinsum:
    """An exported Einsum directory imported back: problem, mapping (in the view's level
    and rank names), the architecture (Timeloop file + the project architecture it names
    for what Timeloop lacks) and the ERT/ART."""
    d = Path(directory)
    side = ti.load_yaml(d / SIDECAR)
    body = side.get("fusemax_sim") if isinstance(side, LocDict) else None
    if not isinstance(body, LocDict):
        raise SpecError("missing 'fusemax_sim:' (not an exported Einsum)", Loc(str(d / SIDECAR)))
    like = load_architecture(str(body["like"]))
    imported = ti.import_architecture(
        [d / "architecture.yaml"],
        like=like,
        bandwidth_bytes_per_s=float(body["bandwidth_bytes_per_s"]),
    ).architecture
    dims = {str(k): str(v) for k, v in body["dimensions"].items()}
    levels = {str(k): str(v) for k, v in body["levels"].items()}
    problem = load_problem(d / "problem.yaml")
    problem = Problem(
        problem.name,
        tuple((dims[k], e) for k, e in problem.instance),
        tuple(
            type(ds)(ds.name, tuple(dims[x] for x in ds.dims), ds.read_write)
            for ds in problem.dataspaces
        ),
    )
    order = ti.storage_levels(d / "architecture.yaml")
    anchors = ti.spatial_anchors(d / "architecture.yaml")
    raw = load_mapping(d / "mapping.yaml", order, anchors)
    mapping = tuple(
        LevelMapping(
            levels[lm.level],
            tuple(Loop(dims[lp.dim], lp.factor, lp.spatial) for lp in lm.temporal),
            tuple(Loop(dims[lp.dim], lp.factor, lp.spatial) for lp in lm.spatial),
            lm.keep,
        )
        for lm in raw
    )
    view = EinsumView(
        str(body["einsum"]),
        str(body["array"]),
        problem,
        mapping,
        tuple((str(k), str(v)) for k, v in body["data_spaces"].items()),
    )
    return ImportedEinsum(
        view,
        imported,
        load_energy_table(d / "ERT.yaml"),
        load_area_table(d / "ART.yaml"),
    )


def _dummy_containers(data: LocDict) -> list[str]:
    """The spatial containers of a processed architecture, outermost first (from their
    dummy levels' `inter_<container>_spatial[..]` names)."""
    names = []
    for tree in data["architecture"]["subtree"]:
        for entry in tree.get("local", []):
            if str(entry.get("class", "")) == DUMMY_CLASS:
                name = str(entry.get("name", "")).split("[", 1)[0]
                names.append(name.removeprefix("inter_").removesuffix("_spatial"))
    return names


def read_processed(path: str | Path) -> EinsumView:
    """A processed `timeloop-model.yaml` -- this export's, a hand-edited one or the front
    end's -- as an EinsumView over Timeloop's own level names (the storage levels of its
    architecture, outermost first), each data space its own tensor. Needs no sidecar, so
    inputs of real Timeloop runs count through the project's access model as they are. The
    array is named by its outermost container, a nested 2D array's `<array>_col` by
    `<array>`."""
    source = str(path)
    data = ti.load_yaml(path)
    arch = data.get("architecture") if isinstance(data, LocDict) else None
    if not isinstance(arch, LocDict) or not isinstance(arch.get("subtree"), list):
        raise SpecError(
            "not Timeloop's processed form: no 'architecture: subtree:' (v0.4 `nodes:` files "
            "are read with read_einsum or the architecture import)",
            Loc(source, 1, 1) if not isinstance(arch, LocDict) else arch.loc,
        )
    for tree in arch["subtree"]:
        local = tree.get("local", []) if isinstance(tree, LocDict) else None
        if not isinstance(local, list) or not all(
            isinstance(e, LocDict) and "name" in e for e in local
        ):
            raise SpecError(
                "each 'subtree:' entry needs a 'local:' list of named components",
                getattr(tree, "loc", arch.loc),
            )
    levels = processed_storage_levels(data)
    if not levels:
        raise SpecError("the processed architecture has no storage level", arch.loc)
    problem = load_problem(path)
    containers = _dummy_containers(data)
    array = containers[0] if containers else ""
    if len(containers) == 2 and containers[0] == containers[1] + COLUMN_SUFFIX:
        array = containers[1]
    return EinsumView(
        problem.name,
        array,
        problem,
        load_mapping(path, levels),
        tuple((ds.name, ds.name) for ds in problem.dataspaces),
    )


def access_totals(view: EinsumView) -> dict[str, tuple[int, int, int]]:
    """Per level: scalar reads, fills and updates over all instances (Timeloop's totals)."""
    out: dict[str, tuple[int, int, int]] = {}
    for level, _ds, c in analyze(view.problem, view.mapping).counts:
        r, f, u = out.get(level, (0, 0, 0))
        out[level] = (r + c.reads, f + c.fills, u + c.updates)
    return out
