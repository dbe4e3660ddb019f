"""Import of Timeloop v0.4 inputs and Accelergy outputs as the FuseMax artifact wrote them.

Architects hold designs written for Timeloop/Accelergy; this module reads them into the
project's own objects, so they run through the same model as the project's specs:

* an architecture -- one file or several (the artifact describes its 2D and 1D PE arrays
  in separate files; the first file gives DRAM and the global buffer, every file its PE
  array) -> :class:`~simulator.spec.arch.Architecture`, parsed by the project's own loader
  (`arch.build_architecture`), so each parameter is read in one place;
* Accelergy ERT/ART outputs -> :class:`~simulator.spec.tables.EnergyTable` / `AreaTable`;
* the storage levels and spatial anchors of an architecture file, which a Timeloop
  mapping's levels follow (the problem and mapping files themselves are read into the
  access model by :mod:`simulator.timeloop.problems`).

What a Timeloop file does not say is taken from a project architecture given as `like`:
which operations a PE executes and in how many cycles (Timeloop knows one `compute`
action), the interconnect timing, the DRAM bandwidth when the file has no
`shared_bandwidth`, the energy/area tables, and the array and register names the project's
mappings bind to (matched by shape: the 2D array to the 2D array). Everything a Timeloop
file does say -- clock, widths, depths, meshes, register files -- comes from it.

Supported: `!Container`, `!Component`, `!Parallel`, `!Hierarchical`, `spatial`,
attribute expressions over `variables:` (also from separate variables files) and the
simple Jinja forms the artifact uses (`{{ name }}`, `{{ name|default(8) }}`,
`{% if name|default(True) %} ... {% else %} ... {% endif %}`). Anything else (another tag,
Jinja loops or includes, v0.3 `subtree`/`local` trees, window projections) is a SpecError
naming the construct. Problems load in either spelling of Timeloop's keys (`data-spaces`,
`read-write` up to release v3.0.3; `data_spaces`, `read_write` since February 2024).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.spec import arch as arch_mod
from simulator.spec import expr, yamlio
from simulator.spec.arch import Architecture
from simulator.spec.tables import AreaTable, EnergyTable, load_area_table, load_energy_table
from simulator.spec.yamlio import LocDict, LocList
from simulator.support.errors import Loc, SpecError

# Timeloop input sections an architecture file may carry besides the architecture; they
# describe Accelergy's component classes, the mapper or a workload, which the import does
# not need (energies come from the ERT).
IGNORED_SECTIONS = (
    "components",
    "compound_components",
    "mapper",
    "mapspace",
    "problem",
    "mapping",
    "globals",
    "architecture_constraints",
    "constraints",
)
STORAGE_CLASS_WORDS = ("dram", "sram", "regfile", "storage", "smartbuffer", "buffer", "register")

# --------------------------------------------------------------------------------------
# Jinja-style templating (the subset the artifact's specs use)

_JINJA = re.compile(r"\{\{(.*?)\}\}|\{%-?(.*?)-?%\}|\{#.*?#\}", re.S)
_EXPR = re.compile(
    r"\s*(not\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(?:\|\s*default\s*\(\s*(.*?)\s*\))?\s*$", re.S
)
SUPPORTED_JINJA = (
    "{{ name }}, {{ name|default(value) }}, {% if name %}, {% if not name %}, "
    "{% else %}, {% endif %}"
)


def _literal(text: str) -> Any:
    text = text.strip()
    if text in ("True", "true"):
        return True
    if text in ("False", "false"):
        return False
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise SpecError(f"jinja default '{text}' is not a number, boolean or string") from None


def _jinja_value(body: str, values: Mapping[str, Any], loc: Loc, construct: str) -> Any:
    match = _EXPR.fullmatch(body)
    if not match:
        raise SpecError(
            f"unsupported jinja construct '{construct}' (supported: {SUPPORTED_JINJA})", loc
        )
    negate, name, default = match.groups()
    if name in values:
        value = values[name]
    elif default is not None:
        try:
            value = _literal(default)
        except SpecError as err:
            raise SpecError(err.message, loc) from None
    else:
        raise SpecError(
            f"jinja variable '{name}' has no value and no default (give it in the import's "
            "'variables:')",
            loc,
        )
    return (not value) if negate else value


def render_jinja(text: str, values: Mapping[str, Any], source: str) -> str:
    """Expand the simple Jinja forms; lines keep their numbers (dropped branches become
    blank) so YAML errors still point into the original file."""
    out: list[str] = []
    stack: list[tuple[bool, bool]] = []  # (this branch active, an earlier branch was taken)
    pos = 0

    def active() -> bool:
        return all(a for a, _ in stack)

    def emit(chunk: str) -> None:
        out.append(chunk if active() else re.sub(r"[^\n]", " ", chunk))

    for match in _JINJA.finditer(text):
        emit(text[pos : match.start()])
        pos = match.end()
        line = text.count("\n", 0, match.start()) + 1
        col = match.start() - (text.rfind("\n", 0, match.start()) + 1) + 1
        loc = Loc(source, line, col)
        construct = " ".join(match.group(0).split())
        blank = re.sub(r"[^\n]", " ", match.group(0))
        if match.group(1) is not None:  # {{ expression }}
            if active():
                value = _jinja_value(match.group(1), values, loc, construct)
                out.append(str(value))
            else:
                out.append(blank)
            continue
        if match.group(2) is None:  # {# comment #}
            out.append(blank)
            continue
        statement = match.group(2).strip()
        keyword = statement.split(None, 1)[0] if statement else ""
        if keyword == "if":
            cond = bool(_jinja_value(statement[2:], values, loc, construct)) if active() else False
            stack.append((cond, cond))
        elif keyword == "else" and statement == "else":
            if not stack:
                raise SpecError("'{% else %}' without '{% if %}'", loc)
            _, taken = stack.pop()
            stack.append((not taken, True))
        elif keyword == "endif" and statement == "endif":
            if not stack:
                raise SpecError("'{% endif %}' without '{% if %}'", loc)
            stack.pop()
        else:
            raise SpecError(
                f"unsupported jinja construct '{construct}' (supported: {SUPPORTED_JINJA})", loc
            )
        out.append(blank)
    if stack:
        raise SpecError("'{% if %}' without '{% endif %}'", Loc(source))
    emit(text[pos:])
    return "".join(out)


def load_yaml(path: str | Path, values: Mapping[str, Any] | None = None) -> Any:
    """A Timeloop/Accelergy YAML file, Jinja forms expanded, loaded safely; a `problem:`
    in the spelling of Timeloop releases up to v3.0.3 reads as today's
    (:func:`current_spelling`), so every reader of problems takes both."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("no such file", Loc(source)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"cannot read: {err}", Loc(source)) from None
    return current_spelling(yamlio.loads(render_jinja(text, values or {}, source), source))


# --------------------------------------------------------------------------------------
# Problem keys in either spelling

# The problem keys Timeloop renamed: (spelling of releases up to v3.0.3, spelling since
# February 2024). Both read as the second, so a problem written for either release loads; a
# reader that missed the old `read-write` would silently take the output for an input.
DATA_SPACES_KEYS = ("data-spaces", "data_spaces")
READ_WRITE_KEYS = ("read-write", "read_write")


def _renamed(node: LocDict, old: str, new: str) -> LocDict:
    """`node` with key `old` called `new`, in its place and with its source positions; both
    present is an error (two spellings of one key, one of them ignored by any Timeloop)."""
    if old not in node:
        return node
    if new in node:
        raise SpecError(
            f"both '{old}' and '{new}' given: they are one key in two Timeloop spellings "
            "(releases up to v3.0.3 read the first, later ones the second); keep one",
            node.key_locs.get(old, node.loc),
        )
    out = LocDict((new if k == old else k, v) for k, v in node.items())
    out.loc, out.tag = node.loc, node.tag
    out.key_locs = {(new if k == old else k): loc for k, loc in node.key_locs.items()}
    out.value_locs = {(new if k == old else k): loc for k, loc in node.value_locs.items()}
    return out


def current_spelling(data: Any) -> Any:
    """A loaded Timeloop document with its `problem:` keys in today's spelling
    (`data_spaces`, `read_write`); anything without a problem comes back unchanged."""
    problem = data.get("problem") if isinstance(data, LocDict) else None
    shape = problem.get("shape") if isinstance(problem, LocDict) else None
    if not isinstance(shape, LocDict):
        return data
    shape = _renamed(shape, *DATA_SPACES_KEYS)
    spaces = shape.get("data_spaces")
    if isinstance(spaces, LocList):
        spaces = _list(
            [_renamed(ds, *READ_WRITE_KEYS) if isinstance(ds, LocDict) else ds for ds in spaces],
            spaces.loc,
            list(spaces.item_locs),
        )
        shape = _copy_dict(shape, data_spaces=spaces)
    return _copy_dict(data, problem=_copy_dict(problem, shape=shape))


# --------------------------------------------------------------------------------------
# Architecture


@dataclass(frozen=True)
class ImportedArchitecture:
    """An imported design and how its Timeloop component names map to the project's
    (per file: Timeloop name -> component name in the Architecture and its tables)."""

    architecture: Architecture
    names: tuple[tuple[tuple[str, str], ...], ...]  # one name map per architecture file

    def name_map(self, index: int) -> dict[str, str]:
        return dict(self.names[index])


@dataclass
class _File:
    path: str
    data: LocDict
    prefix: list[Any]  # nodes outside the PE array
    array: list[Any]  # the PE array: first spatial container and everything below it
    array_loc: Loc


def _copy_dict(src: LocDict, **items: Any) -> LocDict:
    out = LocDict(src)
    out.update(items)
    out.loc, out.tag = src.loc, src.tag
    out.key_locs = dict(src.key_locs)
    out.value_locs = dict(src.value_locs)
    for key in items:
        out.key_locs.setdefault(key, src.loc)
        out.value_locs.setdefault(key, src.loc)
    return out


def _list(items: list[Any], loc: Loc, locs: list[Loc] | None = None) -> LocList:
    out = LocList(items)
    out.loc = loc
    out.item_locs = locs if locs is not None else [getattr(i, "loc", loc) for i in items]
    return out


def _tagged(tag: str, nodes: list[Any], loc: Loc) -> LocDict:
    out = LocDict(nodes=_list(nodes, loc))
    out.loc, out.tag = loc, tag
    out.key_locs, out.value_locs = {"nodes": loc}, {"nodes": loc}
    return out


def _is_storage(node: LocDict) -> bool:
    attrs = node.get("attributes")
    if isinstance(attrs, LocDict) and "depth" in attrs:
        return True
    klass = f"{node.get('class', '')} {node.get('subclass', '')}".lower()
    return any(word in klass for word in STORAGE_CLASS_WORDS)


def _read_file(path: str | Path, values: Mapping[str, Any], variables: LocDict | None) -> _File:
    source = str(path)
    data = load_yaml(path, values)
    top = Loc(source, 1, 1)
    if not isinstance(data, LocDict) or "architecture" not in data:
        raise SpecError("a Timeloop architecture file needs a top-level 'architecture:'", top)
    for key in data:
        if key not in ("architecture", "variables") + IGNORED_SECTIONS:
            raise SpecError(
                f"unsupported top-level section '{key}' in a Timeloop architecture file",
                data.key_locs[key],
            )
    spec = data["architecture"]
    if not isinstance(spec, LocDict):
        raise SpecError(
            "'architecture:' must be a mapping with 'nodes:'", data.loc_of("architecture")
        )
    for key in ("subtree", "local"):
        if key in spec:
            raise SpecError(
                f"Timeloop v0.3-style '{key}:' architecture trees are not supported "
                "(write v0.4 'nodes:' with !Container/!Component)",
                spec.key_locs[key],
            )
    version = spec.get("version")
    if version is not None and str(version).rstrip(".") not in ("0.4", "0.4.0"):
        raise SpecError(
            f"Timeloop architecture version {version} is not supported (use 0.4)",
            spec.loc_of("version"),
        )
    nodes = spec.get("nodes")
    if not isinstance(nodes, LocList):
        raise SpecError("architecture has no 'nodes:' list", spec.loc)
    merged_vars = LocDict(variables or {})
    merged_vars.loc = top
    merged_vars.key_locs = dict(variables.key_locs) if variables else {}
    merged_vars.value_locs = dict(variables.value_locs) if variables else {}
    own = data.get("variables")
    if isinstance(own, LocDict):
        merged_vars.update(own)
        merged_vars.key_locs.update(own.key_locs)
        merged_vars.value_locs.update(own.value_locs)
    data = _copy_dict(data, variables=merged_vars)
    split = next(
        (
            i
            for i, n in enumerate(nodes)
            if isinstance(n, LocDict) and n.tag == "Container" and "spatial" in n
        ),
        None,
    )
    prefix = list(nodes) if split is None else list(nodes[:split])
    array = [] if split is None else list(nodes[split:])
    array_loc = nodes.loc_of(split) if split is not None else nodes.loc
    return _File(source, data, prefix, array, array_loc)


def _components(nodes: list[Any]) -> list[LocDict]:
    """Every !Component in a node list, !Parallel / !Hierarchical included, in order."""
    out: list[LocDict] = []
    for node in nodes:
        if not isinstance(node, LocDict):
            continue
        if node.tag == "Component":
            out.append(node)
        elif node.tag in ("Parallel", "Hierarchical") and isinstance(node.get("nodes"), list):
            out += _components(list(node["nodes"]))
    return out


def _containers(nodes: list[Any]) -> list[LocDict]:
    out: list[LocDict] = []
    for node in nodes:
        if not isinstance(node, LocDict):
            continue
        if node.tag == "Container":
            out.append(node)
        elif node.tag in ("Parallel", "Hierarchical") and isinstance(node.get("nodes"), list):
            out += _containers(list(node["nodes"]))
    return out


def _rewrite(nodes: list[Any], replace: Mapping[int, LocDict | None]) -> list[Any]:
    """The node list with some nodes (by id) replaced or dropped (None)."""
    out: list[Any] = []
    for node in nodes:
        if id(node) in replace:
            if replace[id(node)] is not None:
                out.append(replace[id(node)])
            continue
        if isinstance(node, LocDict) and node.tag in ("Parallel", "Hierarchical"):
            inner = node.get("nodes")
            if isinstance(inner, LocList):
                node = _copy_dict(node, nodes=_list(_rewrite(list(inner), replace), inner.loc))
        out.append(node)
    return out


_PLACEHOLDER_OPS = "operations"


def _placeholder_operations(loc: Loc) -> LocDict:
    entry = LocDict(cycles=1, unit="compute")
    entry.loc, entry.key_locs, entry.value_locs = loc, {}, {}
    ops = LocDict(compute=entry)
    ops.loc, ops.key_locs, ops.value_locs = loc, {}, {}
    return ops


def _variables_file(path: str | Path, values: Mapping[str, Any]) -> LocDict:
    data = load_yaml(path, values)
    if not isinstance(data, LocDict) or not isinstance(data.get("variables"), LocDict):
        raise SpecError(
            "a variables file needs a top-level 'variables:' mapping", Loc(str(path), 1, 1)
        )
    return data["variables"]


def import_architecture(
    files: Sequence[str | Path],
    like: Architecture | None = None,
    variables_files: Sequence[str | Path] = (),
    values: Mapping[str, Any] | None = None,
    bandwidth_bytes_per_s: float | None = None,
    name: str | None = None,
) -> ImportedArchitecture:
    """One Architecture from Timeloop v0.4 architecture files (see the module docstring).

    `values` are the Jinja variables (`datawidth_jinja: 16`); `variables_files` Timeloop
    `variables:` files (expressions in the architecture may use their names)."""
    if not files:
        raise SpecError("no Timeloop architecture file to import")
    values = dict(values or {})
    variables: LocDict | None = None
    for vf in variables_files:
        part = _variables_file(vf, values)
        if variables is None:
            variables = part
        else:
            variables = _copy_dict(variables, **part)
    parsed = [_read_file(f, values, variables) for f in files]
    first = parsed[0]
    top = Loc(first.path, 1, 1)

    # Roles of the arrays, to pair them with `like`'s.
    like_arrays = list(like.arrays) if like is not None else []
    used: set[str] = set()
    names: list[list[tuple[str, str]]] = []
    plan: list[tuple[str, Any]] = []  # per file: (array name, like array or None)
    for f in parsed:
        if not f.array:
            if any(isinstance(n, LocDict) and n.tag == "Parallel" for n in f.prefix):
                raise SpecError(
                    "PE arrays side by side in a !Parallel: import one file per array (as the "
                    "artifact writes them), or load this file as a project architecture",
                    Loc(f.path, 1, 1),
                )
            if f is first:
                raise SpecError(
                    "no PE array: the architecture needs a !Container with 'spatial:'", top
                )
            raise SpecError(
                "no PE array in this file (a !Container with 'spatial:')", Loc(f.path, 1, 1)
            )
        containers = _containers(f.array)
        mesh_y = 1
        for c in containers:
            spatial = c.get("spatial")
            if isinstance(spatial, LocDict):
                try:
                    mesh_y *= int(spatial.get("meshY", 1))
                except (TypeError, ValueError):
                    pass  # an expression: the loader evaluates it; only the role is guessed here
        match = None
        if like is not None:
            match = next(
                (a for a in like_arrays if a.name not in used and ((a.mesh_y > 1) == (mesh_y > 1))),
                None,
            )
            if match is None:
                raise SpecError(
                    f"no {'2D' if mesh_y > 1 else '1D'} PE array left in '{like.name}' to take "
                    "the operations of this file's array from",
                    f.array_loc,
                )
            used.add(match.name)
        plan.append((str(containers[0].get("name", "")), match))

    array_names = [m.name if m is not None else n for n, m in plan]
    if len(set(array_names)) != len(array_names):
        raise SpecError(
            f"PE arrays of the imported files share the name '{array_names[0]}'; import them "
            "with like= (the project's names) or rename one",
            top,
        )
    own_ops: list[bool] = []  # per file: its compute components carry `operations`
    all_registers: list[str] = []
    for f in parsed:
        all_registers += [str(c.get("name")) for c in _components(f.array) if _is_storage(c)]
    for index, (f, (orig_name, match)) in enumerate(zip(parsed, plan, strict=True)):
        mapping: list[tuple[str, str]] = []
        array_name = array_names[index]
        replace: dict[int, LocDict | None] = {}
        containers = _containers(f.array)
        taken = {array_name}
        for c in containers:
            cname = str(c.get("name", ""))
            if c is containers[0]:
                new = array_name
            else:
                # An inner container (the artifact's PE inside PE_col) must not share a name
                # with another file's containers: arrays are found by container name.
                others = set(array_names) | {
                    str(o.get("name")) for g in parsed if g is not f for o in _containers(g.array)
                }
                new = cname if cname not in others | taken else f"{array_name}_{cname}"
            taken.add(new)
            if new != cname:
                replace[id(c)] = _copy_dict(c, name=new)
        comps = _components(f.array)
        computes = [c for c in comps if not _is_storage(c)]
        storages = [c for c in comps if _is_storage(c)]
        if not computes:
            raise SpecError(f"PE array '{orig_name}' has no compute component", f.array_loc)
        has_ops = all(
            isinstance(c.get("attributes"), LocDict) and "operations" in c["attributes"]
            for c in computes
        )
        own_ops.append(has_ops)
        if not has_ops and match is None:
            raise SpecError(
                "a Timeloop architecture does not say which operations a PE executes: import it "
                "with a project architecture to take them from (like=, e.g. arch/fusemax.yaml)",
                computes[0].loc,
            )
        if not has_ops:
            # One compute node per array with placeholder operations; `like`'s table replaces
            # them below. The units keep their Timeloop names for the energy tables.
            keep = _copy_dict(
                computes[0],
                attributes=_attr_dict(
                    {_PLACEHOLDER_OPS: _placeholder_operations(computes[0].loc)}, computes[0].loc
                ),
            )
            replace[id(computes[0])] = keep
            for c in computes[1:]:
                replace[id(c)] = None
        for c in computes:
            mapping.append((str(c.get("name")), f"{array_name}.{c.get('name')}"))
        for s in storages:
            sname = str(s.get("name"))
            if match is not None and match.register_component:
                new = (
                    match.register_component
                    if s is storages[0]
                    else f"{match.register_component}_{sname}"
                )
            elif all_registers.count(sname) > 1:
                new = f"{sname}_{array_name}"
            else:
                new = sname
            mapping.append((sname, new))
            if new != sname:
                replace[id(s)] = _copy_dict(s, name=new)
        f.array = _rewrite(f.array, replace)
        names.append(mapping)

    # The combined tree: the first file's nodes outside its array, then every file's array
    # side by side.
    parallel = _tagged(
        "Parallel",
        [_tagged("Hierarchical", f.array, f.array_loc) for f in parsed],
        first.array_loc,
    )
    prefix = list(first.prefix)
    shared_words = _dram_shared_bandwidth(prefix)
    for p in _components(prefix):
        names[0].append((str(p.get("name")), str(p.get("name"))))
    # The loader needs a bandwidth to build DRAM; the real one is set below.
    prefix = _rewrite(
        prefix, {id(d): _with_attr(d, "bandwidth_bytes_per_s", 1) for d in _drams(prefix)}
    )
    if not any(
        isinstance(n, LocDict)
        and n.tag == "Container"
        and isinstance(n.get("attributes"), LocDict)
        and ("global_cycle_seconds" in n["attributes"] or "frequency_hz" in n["attributes"])
        for n in prefix[:1]
    ):
        gcs = (first.data.get("variables") or {}).get("global_cycle_seconds")
        if gcs is not None and prefix and isinstance(prefix[0], LocDict):
            prefix[0] = _with_attr(prefix[0], "global_cycle_seconds", gcs)
    spec = _copy_dict(
        first.data["architecture"],
        version="0.4",
        nodes=_list(prefix + [parallel], first.data["architecture"].loc),
    )
    tree = _copy_dict(first.data, architecture=spec)
    for key in IGNORED_SECTIONS:
        tree.pop(key, None)
    built = arch_mod.build_architecture(tree, first.path)

    arrays = []
    for array, (_orig, match), has_ops in zip(built.arrays, plan, own_ops, strict=True):
        if match is not None and not has_ops:
            array = dataclasses.replace(
                array,
                operations=match.operations,
                composites=match.composites,
                reduction_latency=match.reduction_latency,
                broadcast_latency=match.broadcast_latency,
                operand_latches=match.operand_latches,
                compute_component=match.compute_component or array.compute_component,
                precisions=match.precisions,
                multiplier_units=match.multiplier_units,
            )
        arrays.append(array)
    arrays_by_name = {a.name: a for a in arrays}
    arrays = [arrays_by_name[n] for n in array_names]
    frequency = built.frequency_hz
    if bandwidth_bytes_per_s is not None:
        bandwidth = float(bandwidth_bytes_per_s)
        check_bandwidth(bandwidth, "bandwidth_bytes_per_s", None)
    elif shared_words is not None:
        # Timeloop's DRAM `shared_bandwidth` is in words per cycle.
        bandwidth = float(shared_words) * built.dram.datawidth_bits / 8 * frequency
    elif like is not None:
        bandwidth = like.dram.bandwidth_bytes_per_s
    else:
        dram_node = _drams(first.prefix)
        raise SpecError(
            "DRAM has no bandwidth: give Timeloop's 'shared_bandwidth' (words per cycle), "
            "'bandwidth_bytes_per_s', or import with like=",
            dram_node[0].loc if dram_node else top,
        )
    result = dataclasses.replace(
        built,
        name=name or built.name,
        arrays=tuple(arrays),
        dram=dataclasses.replace(built.dram, bandwidth_bytes_per_s=bandwidth),
    )
    if like is not None:
        # `like`'s tables name its DRAM and buffer: the imported ones take those names.
        renamed = {built.dram.name: like.dram.name, built.buffer.name: like.buffer.name}
        names[0] = [(old, renamed.get(old, new)) for old, new in names[0]]
        result = dataclasses.replace(
            result,
            dram=dataclasses.replace(result.dram, name=like.dram.name),
            buffer=dataclasses.replace(result.buffer, name=like.buffer.name),
            energy_table=built.energy_table or like.energy_table,
            area_table=built.area_table or like.area_table,
            published_energy_table=built.published_energy_table or like.published_energy_table,
            published_area_table=built.published_area_table or like.published_area_table,
            # the value format `like` names, when the file's width is one `like` lists
            precision=built.precision
            or next(
                (p.name for a in arrays for p in a.precisions if p.bits == built.datawidth_bits),
                "",
            ),
        )
    return ImportedArchitecture(result, tuple(tuple(m) for m in names))


def _attr_dict(items: dict[str, Any], loc: Loc) -> LocDict:
    out = LocDict(items)
    out.loc, out.key_locs, out.value_locs = loc, {k: loc for k in items}, {k: loc for k in items}
    return out


def _with_attr(node: LocDict, key: str, value: Any) -> LocDict:
    attrs = node.get("attributes")
    base = attrs if isinstance(attrs, LocDict) else _attr_dict({}, node.loc)
    return _copy_dict(node, attributes=_copy_dict(base, **{key: value}))


def _drams(nodes: list[Any]) -> list[LocDict]:
    return [c for c in _components(nodes) if str(c.get("class", "")).upper() == "DRAM"]


def _dram_shared_bandwidth(nodes: list[Any]) -> float | None:
    """The DRAM's Timeloop `shared_bandwidth` (words per cycle; a number or an expression
    over its numeric attributes), checked positive."""
    for d in _drams(nodes):
        attrs = d.get("attributes")
        if (
            isinstance(attrs, LocDict)
            and "bandwidth_bytes_per_s" not in attrs
            and "shared_bandwidth" in attrs
        ):
            loc = attrs.loc_of("shared_bandwidth")
            context = {
                str(k): v
                for k, v in attrs.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
            value = float(expr.evaluate(attrs["shared_bandwidth"], context, loc))
            check_bandwidth(value, "DRAM shared_bandwidth (words per cycle)", loc)
            return value
    return None


def check_bandwidth(value: float, what: str, loc: Loc | None) -> None:
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"{what} must be a positive number, got {value:g}", loc)


# --------------------------------------------------------------------------------------
# The import description file (`--arch FILE` with a top-level `timeloop_import:`), read by
# simulator.spec.arch_file

MANIFEST_KEYS = ("architecture", "like", "variables_files", "variables", "bandwidth_bytes_per_s")


# --------------------------------------------------------------------------------------
# Accelergy energy / area tables


def _timeloop_dummy(name: str) -> bool:
    """Timeloop's `inter_<container>_spatial` levels, which Accelergy lists with unit area."""
    return name.startswith("inter_") and name.endswith("_spatial")


def import_tables(
    tables: Sequence[tuple[str | Path, str | Path, Mapping[str, str]]],
) -> tuple[EnergyTable, AreaTable]:
    """Accelergy ERT/ART outputs (one pair per architecture file, with that file's name map
    from :class:`ImportedArchitecture`) as one energy and one area table in the project's
    component names. A component named in an earlier pair keeps that pair's values; a table
    entry of a component the file does not have is an error naming it."""
    energy: list[tuple[str, tuple[tuple[str, float | str], ...]]] = []
    area: list[tuple[str, float | str]] = []
    seen_e: set[str] = set()
    seen_a: set[str] = set()
    paths = []
    for ert_path, art_path, names in tables:
        ert = load_energy_table(ert_path)
        art = load_area_table(art_path)
        paths.append((str(ert_path), str(art_path)))
        for comp, actions in ert.entries:
            if _timeloop_dummy(comp):
                continue
            if comp not in names:
                raise SpecError(
                    f"ERT component '{comp}' is not in the imported architecture file "
                    f"(components: {', '.join(sorted(names))})",
                    Loc(str(ert_path)),
                )
            new = names[comp]
            if new not in seen_e:
                seen_e.add(new)
                energy.append((new, actions))
        for comp, value in art.entries:
            if _timeloop_dummy(comp):
                continue
            if comp not in names:
                raise SpecError(
                    f"ART component '{comp}' is not in the imported architecture file "
                    f"(components: {', '.join(sorted(names))})",
                    Loc(str(art_path)),
                )
            new = names[comp]
            if new not in seen_a:
                seen_a.add(new)
                area.append((new, value))
    ert_label = " + ".join(p[0] for p in paths)
    art_label = " + ".join(p[1] for p in paths)
    return EnergyTable(ert_label, tuple(energy)), AreaTable(art_label, tuple(area))


# --------------------------------------------------------------------------------------
# Storage levels and spatial containers (what a Timeloop mapping file refers to)


def storage_levels(path: str | Path, values: Mapping[str, Any] | None = None) -> list[str]:
    """The storage levels of a Timeloop architecture file, outermost first (the order a
    mapping's levels take)."""
    f = _read_file(path, values or {}, None)
    return [str(c.get("name")) for c in _components(f.prefix + f.array) if _is_storage(c)]


def spatial_anchors(path: str | Path, values: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Each spatial container of a Timeloop architecture file -> the storage level above
    it: where a mapping's spatial entry for that container attaches, wherever the entry
    stands in the mapping file."""
    f = _read_file(path, values or {}, None)
    out: dict[str, str] = {}
    last: list[str] = []

    def walk(nodes: list[Any]) -> None:
        for node in nodes:
            if not isinstance(node, LocDict):
                continue
            if node.tag == "Component" and _is_storage(node):
                last.append(str(node.get("name")))
            elif node.tag == "Container" and "spatial" in node and last:
                out[str(node.get("name"))] = last[-1]
            elif node.tag in ("Parallel", "Hierarchical") and isinstance(node.get("nodes"), list):
                walk(list(node["nodes"]))

    walk(f.prefix + f.array)
    return out
