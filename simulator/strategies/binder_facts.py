"""The automatic binder's given facts (`mappings/auto/binder.yaml`): what a cascade's rank
names mean in a workload, how often a cascade repeats, and the constraints a baseline
strategy keeps. Read once; everything else the binder decides from the cascade's graph.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.spec import yamlio
from simulator.spec.yamlio import LocDict
from simulator.support.errors import Loc, SpecError
from simulator.support.paths import data_dir

ROLES = ("keys", "queries", "embed", "value_embed", "group", "window")
# Quantities a strategy may size a role by instead (`unfused.sizes`).
SIZES = ("attended_keys",)
HEADS = ("multi-head", "grouped")  # a model's K/V heads: one per query head, or shared
MASKS = ("none", "causal", "window")


@dataclass(frozen=True)
class BinderFacts:
    shapes: tuple[tuple[str, str], ...]  # rank name -> workload quantity
    grouped_instances: tuple[tuple[str, str], ...]  # (batch|heads) -> workload expression
    default_instances: tuple[tuple[str, str], ...]
    unfused_gemm: Any  # the `mapper:` settings of the unfused strategy's GEMM phases (roles)
    path: str
    # (strategy, heads, mask) -> the cascade that runs a model's attention (a shipped name)
    cascades: tuple[tuple[tuple[str, str, str], str], ...] = ()
    # role -> the workload quantity sizing it in the unfused strategy's library calls
    unfused_sizes: tuple[tuple[str, str], ...] = ()
    # how often a cascade with no rank sized by `keys` repeats (no attention: per request)
    keyless_instances: tuple[tuple[str, str], ...] = ()

    def attention_cascade(self, strategy: str, grouped: bool, mask: str) -> str:
        """The cascade `strategy` binds for attention with this K/V sharing and mask."""
        key = (strategy, HEADS[int(grouped)], mask)
        found = dict(self.cascades).get(key)
        if found is None:
            raise SpecError(
                f"the binder's facts name no cascade for {strategy} with {HEADS[int(grouped)]}"
                f" attention and mask '{mask}' (binder.cascades in {self.path})"
            )
        return found

    def role_of(self, rank: str) -> str | None:
        return dict(self.shapes).get(rank)

    def rank_of(self, role: str) -> str | None:
        return next((r for r, q in self.shapes if q == role), None)


def facts_file() -> Path:
    return data_dir("mappings") / "auto" / "binder.yaml"


def load_facts(path: str | Path | None = None) -> BinderFacts:
    """The facts file's facts: parsed once per text (every automatic point asks for them)."""
    path = Path(path) if path is not None else facts_file()
    return _parsed(str(path), yamlio.read(path))


@functools.lru_cache(maxsize=4)
def _parsed(path: str, text: str) -> BinderFacts:
    data = yamlio.loads(text, path)
    top = Loc(path, 1, 1)
    if not isinstance(data, LocDict) or not isinstance(data.get("binder"), LocDict):
        raise SpecError("the binder's facts file needs a top-level 'binder:' mapping", top)
    body = data["binder"]
    for key in body:
        if key not in ("shapes", "instances", "unfused", "cascades"):
            raise SpecError(
                f"unknown key '{key}' in binder (allowed: shapes, instances, unfused, cascades)",
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
    if not isinstance(inst, LocDict) or not {"grouped", "default"} <= set(inst) <= {
        "grouped",
        "default",
        "without_keys",
    }:
        raise SpecError(
            "binder.instances needs 'grouped' and 'default' (and may give 'without_keys')",
            body.loc,
        )
    for key in inst:
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
        path,
        _cascades(body.get("cascades"), body.loc),
        _sizes(unfused.get("sizes"), unfused.loc),
        tuple((str(k), str(v)) for k, v in inst.get("without_keys", {}).items()),
    )


def _sizes(raw: Any, loc: Loc) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, LocDict) or not all(
        k in ROLES and v in (*ROLES, *SIZES) for k, v in raw.items()
    ):
        raise SpecError(
            f"binder.unfused.sizes must map roles ({', '.join(ROLES)}) to workload "
            f"quantities ({', '.join((*ROLES, *SIZES))})",
            getattr(raw, "loc", loc),
        )
    return tuple((str(k), str(v)) for k, v in raw.items())


def _cascades(raw: Any, loc: Loc) -> tuple[tuple[tuple[str, str, str], str], ...]:
    """binder.cascades: strategy -> heads (multi-head, grouped) -> mask -> cascade name."""
    if raw is None:
        return ()
    if not isinstance(raw, LocDict):
        raise SpecError("binder.cascades must map strategies to their cascades", loc)
    out = []
    for strategy, by_heads in raw.items():
        if not isinstance(by_heads, LocDict) or not set(by_heads) <= set(HEADS):
            raise SpecError(
                f"binder.cascades.{strategy} must map {' and '.join(HEADS)} to masks",
                raw.loc_of(strategy),
            )
        for heads, by_mask in by_heads.items():
            if not isinstance(by_mask, LocDict) or not set(by_mask) <= set(MASKS):
                raise SpecError(
                    f"binder.cascades.{strategy}.{heads} must map masks ({', '.join(MASKS)}) "
                    "to cascade names",
                    by_heads.loc_of(heads),
                )
            for mask, name in by_mask.items():
                if not isinstance(name, str):
                    raise SpecError("a cascade name is text", by_mask.loc_of(mask))
                out.append(((str(strategy), str(heads), str(mask)), str(name)))
    return tuple(out)
