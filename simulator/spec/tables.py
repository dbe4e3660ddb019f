"""Energy and area reference tables (Accelergy's ERT and ART shapes).

An ERT lists, per component, the energy of each action in pJ (`read`, `write`, `update`,
`leak` for storage; `compute`, `leak` for compute units); an ART lists the area of one
instance in um^2. Component names are this project's: `DRAM`, the global buffer, the
register files, and `ARRAY.unit` for a PE array's functional units (`PE2D.mac`). Names in
Accelergy's own output form (`system_top_level.reg_file[1..256]`) are accepted too and
reduced to the component name. An architecture names its tables (`energy_table`,
`area_table` attributes of its top container); the loader checks the tables against it:
every component the model prices has the actions it needs, energies and areas are
non-negative, and no table entry names a component the architecture lacks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.spec import expr, yamlio
from simulator.spec.yamlio import LocDict, LocList
from simulator.support.errors import Loc, SpecError

STORAGE_ACTIONS = ("read", "write", "update")
COMPUTE_ACTIONS = ("compute",)


@dataclass(frozen=True)
class EnergyTable:
    path: str
    entries: tuple[tuple[str, tuple[tuple[str, float | str], ...]], ...]  # component -> actions

    def bind(self, attributes: dict[str, dict[str, float]]) -> EnergyTable:
        """Numbers for one architecture: expressions evaluated over component attributes."""
        entries = []
        for name, actions in self.entries:
            bound = []
            for action, value in actions:
                _known(name, value, attributes, self.path)
                number = _value(value, attributes.get(name, {}), self.path, name, action)
                bound.append((action, number))
            entries.append((name, tuple(bound)))
        return EnergyTable(self.path, tuple(entries))

    def energy(self, component: str, action: str) -> float:
        for name, actions in self.entries:
            if name == component:
                return dict(actions).get(action, 0.0)
        raise KeyError(component)

    def components(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.entries)

    def actions(self, component: str) -> dict[str, float]:
        return dict(dict(self.entries)[component])


@dataclass(frozen=True)
class AreaTable:
    path: str
    entries: tuple[tuple[str, float | str], ...]

    def bind(self, attributes: dict[str, dict[str, float]]) -> AreaTable:
        for name, value in self.entries:
            _known(name, value, attributes, self.path)
        return AreaTable(
            self.path,
            tuple(
                (name, _value(v, attributes.get(name, {}), self.path, name, "area"))
                for name, v in self.entries
            ),
        )

    def area(self, component: str) -> float:
        return dict(self.entries)[component]

    def components(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.entries)


def _known(
    component: str, value: float | str, attributes: dict[str, dict[str, float]], path: str
) -> None:
    """A price written over a component's attributes needs the component: a table made for
    another architecture (or one whose arrays were renamed) says which it lacks."""
    if component in attributes or not isinstance(value, str):
        return
    if not expr.names_in(value) - {"inf", "infinity"}:  # a number: no attribute read
        return
    raise SpecError(
        f"component '{component}': its price '{value}' reads the attributes of a component "
        f"the architecture does not have (it has {', '.join(attributes)}): name the table's "
        "components as the architecture does, or give the architecture its own table",
        Loc(path),
    )


def _value(
    value: float | str, context: dict[str, float], path: str, component: str, what: str
) -> float:
    if isinstance(value, str):
        try:
            number = float(expr.evaluate(value, context, Loc(path)))
        except SpecError as err:
            raise SpecError(f"component '{component}', {what}: {err.message}", Loc(path)) from None
    else:
        number = float(value)
    if not math.isfinite(number) or number < 0:
        raise SpecError(
            f"component '{component}', {what}: {number} is not a non-negative number", Loc(path)
        )
    return number


def _component_name(raw: str) -> str:
    name = raw
    if name.startswith("system_top_level."):
        name = name[len("system_top_level.") :]
    if "[" in name:
        name = name.split("[", 1)[0]
    return name


def _tables(data: Any, key: str, source: str) -> LocList:
    if not isinstance(data, LocDict) or key not in data:
        raise SpecError(f"expected a top-level '{key}:' with 'tables:'", Loc(source, 1, 1))
    body = data[key]
    if not isinstance(body, LocDict) or not isinstance(body.get("tables"), LocList):
        raise SpecError(f"'{key}' needs a 'tables:' list", data.loc_of(key))
    return body["tables"]


def load_energy_table(path: str | Path) -> EnergyTable:
    source = str(path)
    tables = _tables(yamlio.load(path), "ERT", source)
    entries = []
    seen: set[str] = set()
    for i, table in enumerate(tables):
        loc = tables.loc_of(i)
        if not isinstance(table, LocDict) or "name" not in table:
            raise SpecError("each ERT table needs a 'name' and 'actions'", loc)
        name = _component_name(str(table["name"]))
        if name in seen:
            raise SpecError(f"component '{name}' appears twice", loc)
        seen.add(name)
        actions = table.get("actions")
        if not isinstance(actions, LocList):
            raise SpecError(f"component '{name}' needs an 'actions' list", loc)
        parsed = []
        for j, action in enumerate(actions):
            aloc = actions.loc_of(j)
            if not isinstance(action, LocDict) or "name" not in action or "energy" not in action:
                raise SpecError(f"component '{name}': each action needs 'name' and 'energy'", aloc)
            energy = action["energy"]
            if isinstance(energy, str) and expr.is_arithmetic(energy):
                parsed.append((str(action["name"]), energy))  # evaluated per architecture
                continue
            if isinstance(energy, bool) or not isinstance(energy, int | float):
                raise SpecError(
                    f"component '{name}', action '{action['name']}': energy must "
                    f"be a number of pJ, got {energy!r}",
                    action.loc_of("energy"),
                )
            if not math.isfinite(energy) or energy < 0:
                raise SpecError(
                    f"component '{name}', action '{action['name']}': energy must be a "
                    f"non-negative number of pJ, got {energy}",
                    action.loc_of("energy"),
                )
            parsed.append((str(action["name"]), float(energy)))
        entries.append((name, tuple(parsed)))
    return EnergyTable(source, tuple(entries))


def load_area_table(path: str | Path) -> AreaTable:
    source = str(path)
    tables = _tables(yamlio.load(path), "ART", source)
    entries = []
    seen: set[str] = set()
    for i, table in enumerate(tables):
        loc = tables.loc_of(i)
        if not isinstance(table, LocDict) or "name" not in table or "area" not in table:
            raise SpecError("each ART table needs a 'name' and an 'area'", loc)
        name = _component_name(str(table["name"]))
        if name in seen:
            raise SpecError(f"component '{name}' appears twice", loc)
        seen.add(name)
        area = table["area"]
        if isinstance(area, str) and expr.is_arithmetic(area):
            entries.append((name, area))
            continue
        if (
            isinstance(area, bool)
            or not isinstance(area, int | float)
            or not math.isfinite(area)
            or area < 0
        ):
            raise SpecError(
                f"component '{name}': area must be a non-negative number of um^2, got {area!r}",
                table.loc_of("area"),
            )
        entries.append((name, float(area)))
    return AreaTable(source, tuple(entries))


def check_tables(
    energy: EnergyTable, area: AreaTable, required: dict[str, tuple[str, ...]], known: set[str]
) -> None:
    """Every required component has its actions and an area; no unknown components."""
    for table, kind in ((energy, "ERT"), (area, "ART")):
        for name in table.components():
            if name not in known:
                raise SpecError(
                    f"{kind} names component '{name}', which the architecture does "
                    f"not have (components: {', '.join(sorted(known))})",
                    Loc(table.path),
                )
    for component, actions in required.items():
        if component not in energy.components():
            raise SpecError(f"ERT has no entry for component '{component}'", Loc(energy.path))
        present = energy.actions(component)
        missing = [a for a in actions if a not in present]
        if missing:
            raise SpecError(
                f"ERT component '{component}' lacks action(s) {', '.join(missing)}",
                Loc(energy.path),
            )
        if component not in area.components():
            raise SpecError(f"ART has no entry for component '{component}'", Loc(area.path))
