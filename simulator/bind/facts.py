"""The automatic binder's given facts (`mappings/auto/binder.yaml`): what a cascade's rank
names mean in a workload, how often a cascade repeats, and the constraints a baseline
strategy keeps. Read once; everything else the binder decides from the cascade's graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.errors import Loc, SpecError
from simulator.paths import data_dir
from simulator.spec import yamlio
from simulator.spec.yamlio import LocDict

ROLES = ("keys", "queries", "embed", "value_embed", "group", "window")


@dataclass(frozen=True)
class BinderFacts:
    shapes: tuple[tuple[str, str], ...]  # rank name -> workload quantity
    grouped_instances: tuple[tuple[str, str], ...]  # (batch|heads) -> workload expression
    default_instances: tuple[tuple[str, str], ...]
    unfused_gemm: Any  # the `mapper:` settings of the unfused strategy's GEMM phases (roles)
    path: str

    def role_of(self, rank: str) -> str | None:
        return dict(self.shapes).get(rank)

    def rank_of(self, role: str) -> str | None:
        return next((r for r, q in self.shapes if q == role), None)


def facts_file() -> Path:
    return data_dir("mappings") / "auto" / "binder.yaml"


def load_facts(path: str | Path | None = None) -> BinderFacts:
    path = Path(path) if path is not None else facts_file()
    data = yamlio.load(path)
    top = Loc(str(path), 1, 1)
    if not isinstance(data, LocDict) or not isinstance(data.get("binder"), LocDict):
        raise SpecError("the binder's facts file needs a top-level 'binder:' mapping", top)
    body = data["binder"]
    for key in body:
        if key not in ("shapes", "instances", "unfused"):
            raise SpecError(
                f"unknown key '{key}' in binder (allowed: shapes, instances, unfused)",
                body.key_locs[key],
            )
    shapes = body.get("shapes")
    if not isinstance(shapes, LocDict):
        raise SpecError("binder.shapes must map rank names to workload quantities", body.loc)
    for rank, role in shapes.items():
        if role not in ROLES:
            raise SpecError(
                f"binder.shapes: '{role}' is no workload quantity ({', '.join(ROLES)})",
                shapes.loc_of(rank),
            )
    inst = body.get("instances")
    if not isinstance(inst, LocDict) or set(inst) != {"grouped", "default"}:
        raise SpecError("binder.instances needs 'grouped' and 'default'", body.loc)
    for key in ("grouped", "default"):
        if not isinstance(inst[key], LocDict):
            raise SpecError(f"binder.instances.{key} must map batch/heads", inst.loc_of(key))
    unfused = body.get("unfused")
    if not isinstance(unfused, LocDict) or not isinstance(unfused.get("gemm"), LocDict):
        raise SpecError("binder.unfused needs 'gemm:' (GEMM mapper settings)", body.loc)
    return BinderFacts(
        tuple((str(k), str(v)) for k, v in shapes.items()),
        tuple((str(k), str(v)) for k, v in inst["grouped"].items()),
        tuple((str(k), str(v)) for k, v in inst["default"].items()),
        unfused["gemm"],
        str(path),
    )
