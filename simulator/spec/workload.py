"""Workloads: a transformer's attention shapes at one sequence length.

The models are data (`cascades/workloads/transformers.yaml`); the command line can override
any field (`--heads 32 --embed 128`) or describe a custom model. A workload turns into the
rank extents of an attention cascade (M = P = sequence length, E, F) and the number of
independent (batch, head) instances.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import Loc, SpecError
from simulator.paths import data_dir
from simulator.spec import yamlio
from simulator.spec.yamlio import LocDict, LocList
from simulator.units import format_count, parse_count

FIELDS = ("batch", "heads", "embed", "value_embed", "dmodel", "ffn")


@dataclass(frozen=True)
class Workload:
    name: str  # key, e.g. "bert"
    label: str  # display name, e.g. "BERT"
    batch: int
    heads: int
    embed: int  # E
    value_embed: int  # F
    dmodel: int  # D
    ffn: int  # S
    seq_len: int  # M = P
    # Extents that replace the mapping's rank shapes (e.g. M != P for a plain GEMM cascade).
    rank_overrides: tuple[tuple[str, int], ...] = ()

    @property
    def instances(self) -> int:
        """Independent attention problems: batch x heads."""
        return self.batch * self.heads

    @property
    def seq_label(self) -> str:
        return format_count(self.seq_len)

    def describe(self) -> str:
        return (
            f"{self.label} (B={self.batch}, H={self.heads}, E={self.embed}, "
            f"F={self.value_embed}, D={self.dmodel}, S={self.ffn}) at {self.seq_label} tokens"
        )


def workloads_file() -> Path:
    return data_dir("cascades") / "workloads" / "transformers.yaml"


def load_models(path: str | Path | None = None) -> dict[str, Workload]:
    """The models of a workloads file (sequence length 0 until one is chosen)."""
    path = Path(path) if path is not None else workloads_file()
    data = yamlio.load(path)
    if not isinstance(data, LocDict) or not isinstance(data.get("workloads"), LocDict):
        raise SpecError("a workloads file needs a 'workloads:' mapping", Loc(str(path), 1, 1))
    out = {}
    models = data["workloads"]
    for key, entry in models.items():
        loc = models.loc_of(key)
        if not isinstance(entry, LocDict):
            raise SpecError(f"workload '{key}' must be a mapping of its fields", loc)
        for field in entry:
            if field not in (*FIELDS, "label", "description"):
                raise SpecError(
                    f"unknown field '{field}' of workload '{key}' (allowed: "
                    f"{', '.join(FIELDS)}, label, description)",
                    entry.key_locs[field],
                )
        values = {}
        for field in FIELDS:
            if field == "value_embed" and field not in entry:
                continue
            if field not in entry:
                raise SpecError(f"workload '{key}' needs '{field}'", entry.loc)
            value = entry[field]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SpecError(
                    f"'{field}' of workload '{key}' must be a positive integer", entry.loc_of(field)
                )
            values[field] = value
        values.setdefault("value_embed", values["embed"])
        out[str(key).lower()] = Workload(
            str(key).lower(), str(entry.get("label", key)), seq_len=0, **values
        )
    return out


def default_sequence_lengths(path: str | Path | None = None) -> list[int]:
    path = Path(path) if path is not None else workloads_file()
    data = yamlio.load(path)
    raw = data.get("sequence_lengths") if isinstance(data, LocDict) else None
    if not isinstance(raw, LocList):
        return []
    return [parse_count(v, "sequence_lengths") for v in raw]


def make_workload(
    model: str | None,
    seq: str | int,
    overrides: dict[str, int | None] | None = None,
    models: dict[str, Workload] | None = None,
) -> Workload:
    """A workload from a model name (or `custom`), a sequence length and field overrides."""
    models = models if models is not None else load_models()
    seq_len = parse_count(seq, what="--seq")
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    for key, value in given.items():
        if key not in FIELDS:
            raise SpecError(f"unknown workload field '{key}'")
        if value <= 0:
            raise SpecError(f"--{key.replace('_', '-')} must be positive, got {value}")
    name = (model or "custom").lower()
    if name == "custom":
        missing = [f for f in ("heads", "embed") if f not in given]
        if missing:
            raise SpecError(f"a custom model needs {' and '.join('--' + m for m in missing)}")
        base = Workload(
            "custom",
            "custom",
            batch=given.get("batch", 64),
            heads=given["heads"],
            embed=given["embed"],
            value_embed=given.get("value_embed", given["embed"]),
            dmodel=given.get("dmodel", given["heads"] * given["embed"]),
            ffn=given.get("ffn", 4 * given.get("dmodel", given["heads"] * given["embed"])),
            seq_len=seq_len,
        )
        return base
    if name not in models:
        raise SpecError(f"unknown model '{model}' (known: {', '.join(sorted(models))}, custom)")
    base = dataclasses.replace(models[name], seq_len=seq_len)
    if given:
        if "embed" in given and "value_embed" not in given:
            given["value_embed"] = given["embed"]
        label = base.label + "(" + ",".join(f"{k}={v}" for k, v in sorted(given.items())) + ")"
        base = dataclasses.replace(base, label=label, **given)
    return base
