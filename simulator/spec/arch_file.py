"""An architecture file of either kind -> :class:`~simulator.spec.arch.Architecture`.

A file is the project's Timeloop-v0.4-style description (:mod:`simulator.spec.arch`) or a
description of Timeloop files to import (`timeloop_import:`, read by
:mod:`simulator.spec.timeloop_import`). This module is the one entry point that tells them
apart, above both readers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from simulator.spec import expr, yamlio
from simulator.spec import timeloop_import as ti
from simulator.spec.arch import Architecture, build_architecture
from simulator.spec.yamlio import LocDict
from simulator.support.errors import SpecError
from simulator.support.paths import is_file, resolve_spec


def load_architecture(path: str | Path) -> Architecture:
    data = yamlio.load(path)
    if isinstance(data, LocDict) and "timeloop_import" in data:
        return load_manifest(data, str(path))
    return build_architecture(data, str(path))


def load_manifest(data: LocDict, source: str) -> Architecture:
    """An Architecture from a project file describing a Timeloop import:

    timeloop_import:
      architecture: [arch-2d.yaml, arch-1d.yaml]   # relative to this file
      like: fusemax                 # shipped name or path: what Timeloop files lack
      variables_files: [...]        # optional Timeloop variables files
      variables: {datawidth_jinja: 16}              # optional Jinja values
      bandwidth_bytes_per_s: 400 * 2**30            # optional
    """
    body = data["timeloop_import"]
    loc = data.loc_of("timeloop_import")
    if not isinstance(body, LocDict):
        raise SpecError("'timeloop_import:' must be a mapping", loc)
    for key in body:
        if key not in ti.MANIFEST_KEYS:
            raise SpecError(
                f"unknown key '{key}' in timeloop_import (allowed: {', '.join(ti.MANIFEST_KEYS)})",
                body.key_locs[key],
            )
    base = Path(source).parent

    def paths(key: str) -> list[Path]:
        raw = body.get(key, [])
        items = [raw] if isinstance(raw, str) else raw
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise SpecError(f"'{key}' must be a file name or a list of them", body.loc_of(key))
        return [base / i for i in items]

    files = paths("architecture")
    if not files:
        raise SpecError("timeloop_import needs 'architecture:' (one or more files)", loc)
    like = None
    if "like" in body:
        ref = str(body["like"])
        local = base / ref
        path = local if is_file(local) else resolve_spec("arch", ref)
        like = load_architecture(path)
    bandwidth = None
    if "bandwidth_bytes_per_s" in body:
        where = body.loc_of("bandwidth_bytes_per_s")
        bandwidth = float(expr.evaluate(body["bandwidth_bytes_per_s"], {}, where))
        ti.check_bandwidth(bandwidth, "bandwidth_bytes_per_s", where)
    values = body.get("variables", {})
    if not isinstance(values, dict):
        raise SpecError("'variables' must map Jinja names to values", body.loc_of("variables"))
    imported = ti.import_architecture(
        files,
        like=like,
        variables_files=paths("variables_files"),
        values=dict(values),
        bandwidth_bytes_per_s=bandwidth,
        name=Path(source).stem,
    )
    # The description is the architecture's file: loading it again gives the same design
    # (an export's way back names it).
    return dataclasses.replace(imported.architecture, path=source)
