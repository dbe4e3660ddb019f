"""`--backend timeloop`: run the real `timeloop-model` on the exported inputs of every Einsum
and set its cycles, accesses and energy next to the project's own, like for like.

The project's side of each row:

* cycles -- as Timeloop counts them, the Einsum's compute cycles (all batch x head
  instances: its points x cycles per point / the PEs working on it) throttled by DRAM
  bandwidth (its DRAM words over the words DRAM moves per cycle). One documented difference
  stays: Timeloop charges one cycle per compute whatever the operation, the project charges
  an operation its PE cycles (exp = 6 MACs + 1 add on FuseMax's PEs: SLN, PRM);
* accesses -- scalar reads + fills + updates over DRAM, buffer and registers, with Timeloop's
  semantics (`plan/accesses.py`: no read for a value drained to its parent, which the
  corrected energy accounting adds);
* energy -- those counts priced by the exported ERT as Timeloop prices them: dynamic energy
  only. Timeloop v3.0.3 charges no leakage; later versions charge it on storage levels, never
  on compute units; `storage_leak_pj` gives the storage leakage over the cycles apart (the
  corrected accounting's leakage of compute units has no counterpart in any Timeloop).

When `timeloop-model` is not on PATH, or a run fails, the user gets one line (SpecError,
exit code 2) saying so and how to get it, before anything is computed.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from simulator.drivers.configs import Specs, is_auto, prepare
from simulator.plan.accesses import AccessReport, analyze
from simulator.spec.arch import Architecture
from simulator.spec.tables import EnergyTable
from simulator.spec.workload import Workload
from simulator.support.errors import Loc, SpecError
from simulator.support.textfmt import table
from simulator.timeloop.inputs import (
    MODEL_INPUTS,
    ExportedEinsum,
    Spelling,
    dump,
    export_configuration,
    spelling_for_version,
)

BINARY = "timeloop-model"
IMAGE = "timeloopaccelergy/timeloop-accelergy-pytorch"
HOW_TO_GET = (
    f"install Timeloop and Accelergy, or run inside the official Docker image, e.g. "
    f"`docker run -it --rm -v $PWD:/home/workspace {IMAGE}`"
)
TIMEOUT_S = 600


# --------------------------------------------------------------------------------------
# Timeloop's own pricing of its access counts (to set its energy beside this model's)


@dataclass(frozen=True)
class LevelEnergy:
    """Energy per action of one storage level (pJ per access of `block` scalars)."""

    read_pj: float
    write_pj: float
    update_pj: float
    block: int = 1
    leak_pj_per_cycle: float = 0.0


def energy_pj(
    report: AccessReport, levels: Mapping[str, LevelEnergy], compute_pj: float
) -> dict[str, float]:
    """Dynamic energy per level (and 'compute'), Timeloop's way: scalars / block x energy
    per access, computes x energy per compute."""
    out: dict[str, float] = {}
    for level, _ds, c in report.counts:
        e = levels[level]
        dyn = (c.reads * e.read_pj + c.fills * e.write_pj + c.updates * e.update_pj) / e.block
        out[level] = out.get(level, 0.0) + dyn
    out["compute"] = report.computes * compute_pj
    return out


def storage_leak_pj(
    report: AccessReport, levels: Mapping[str, LevelEnergy], cycles: float
) -> float:
    """Leakage of the storage levels over `cycles`, per utilised instance (as Timeloop's
    master charges it; v3.0.3 charges none, and no version charges compute units)."""
    return sum(
        levels[level].leak_pj_per_cycle * cycles * inst
        for level, inst in report.level_instances
        if level in levels
    )


def bandwidth_bound_cycles(
    report: AccessReport, compute_cycles: float, arch: Architecture
) -> float:
    """Timeloop's cycles of an Einsum: its compute cycles, or the DRAM words it moves over
    the words DRAM moves per cycle when more."""
    words = sum(c.reads + c.fills + c.updates for lv, _ds, c in report.counts if lv == "DRAM")
    per_cycle = arch.dram.bandwidth_bytes_per_s / arch.frequency_hz / arch.value_bytes
    return max(compute_cycles, words / per_cycle)


def find_timeloop() -> str:
    """Path of `timeloop-model`, or a one-line SpecError telling how to get it."""
    path = shutil.which(BINARY)
    if path is None:
        raise SpecError(f"--backend timeloop: '{BINARY}' is not on PATH; {HOW_TO_GET}")
    return path


@dataclass(frozen=True)
class TimeloopStats:
    cycles: int
    computes: int
    energy_pj: float
    accesses: int  # scalar reads + fills + updates, all levels and instances


_FIELD = r"^\s*{}\s*:\s*([\d.eE+-]+)"


def parse_stats(text: str, source: str = "timeloop-model.stats.txt") -> TimeloopStats:
    """The totals of Timeloop's `timeloop-model.stats.txt`."""

    def total(pattern: str) -> str:
        match = re.search(pattern, text, re.M)
        if match is None:
            raise SpecError(f"no '{pattern}' in Timeloop's statistics", Loc(source))
        return match.group(1)

    summary = text.split("Summary Stats", 1)[-1]
    cycles_match = re.search(r"^Cycles: (\d+)", summary, re.M)
    cycles = int(cycles_match.group(1)) if cycles_match else int(total(_FIELD.format("Cycles")))
    energy = re.search(r"^Energy: ([\d.eE+-]+) uJ", summary, re.M)
    if energy is None:
        raise SpecError("no 'Energy: ... uJ' summary in Timeloop's statistics", Loc(source))
    computes = int(total(r"^Computes = (\d+)"))
    accesses = 0
    for body in re.findall(r"^    \w+:\n((?:        .*\n?)+)", text, re.M):
        fields = dict(re.findall(r"        ([A-Za-z ()-]+?)\s*: ([\d.]+)", body))
        if "Scalar reads (per-instance)" not in fields:
            continue
        inst = int(float(fields.get("Utilized instances (max)", 1)))
        for key in ("Scalar reads", "Scalar fills", "Scalar updates"):
            accesses += int(float(fields.get(f"{key} (per-instance)", 0))) * inst
    return TimeloopStats(cycles, computes, float(energy.group(1)) * 1e6, accesses)


def run_einsum(binary: str, directory: Path) -> TimeloopStats:
    """Run `timeloop-model` on one exported Einsum directory -- the processed form
    (`timeloop-model.yaml`, what the C++ binary reads) and the ERT/ART; its outputs go to
    `DIR/timeloop/`. A failure is a one-line SpecError with Timeloop's last message."""
    out = directory / "timeloop"
    out.mkdir(exist_ok=True)
    missing = [f for f in MODEL_INPUTS if not (directory / f).is_file()]
    if missing:
        raise SpecError(
            f"{directory} lacks {', '.join(missing)}: not a directory written by "
            "`python -m simulator.export timeloop`"
        )
    command = [binary, *[str((directory / f).resolve()) for f in MODEL_INPUTS]]
    try:
        done = subprocess.run(
            command, cwd=out, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise SpecError(f"{BINARY} took over {TIMEOUT_S} s on {directory}") from None
    except OSError as err:
        raise SpecError(f"cannot run {binary}: {err.strerror or err}") from None
    if done.returncode != 0:
        lines = [ln.strip() for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        last = lines[-1] if lines else "no output"
        raise SpecError(
            f"{BINARY} failed on {directory} (exit code {done.returncode}): {last} "
            "(`python -m simulator.export timeloop` writes these inputs to inspect)"
        )
    stats = sorted(out.glob("*.stats.txt"))
    if not stats:
        raise SpecError(f"{BINARY} wrote no *.stats.txt in {out}")
    return parse_stats(stats[0].read_text(encoding="utf-8", errors="replace"), str(stats[0]))


@dataclass(frozen=True)
class EinsumComparison:
    configuration: str
    einsum: str
    array: str
    cycles: float
    timeloop_cycles: int
    accesses: int
    timeloop_accesses: int
    energy_pj: float  # dynamic
    timeloop_energy_pj: float
    storage_leak_pj: float = 0.0  # this model's storage leakage over its cycles, apart


def own_numbers(e: ExportedEinsum, arch: Architecture, ert: EnergyTable, instances: int):
    """The project's cycles, accesses, dynamic energy and storage leakage of one exported
    Einsum, like for like with Timeloop's (see module doc)."""
    report = analyze(e.view.problem, e.view.mapping)
    accesses = sum(c.reads + c.fills + c.updates for _lv, _ds, c in report.counts)
    array = arch.array(e.array)
    widths = {
        "DRAM": (arch.dram.name, arch.dram.values_per_access),
        "buffer": (arch.buffer.name, arch.buffer.values_per_access),
        "registers": (array.register_component, 1),
    }
    levels = {}
    for level, (component, block) in widths.items():
        if not component:
            continue
        act = ert.actions(component)
        levels[level] = LevelEnergy(
            act.get("read", 0.0),
            act.get("write", 0.0),
            act.get("update", 0.0),
            block,
            act.get("leak", 0.0),
        )
    tables = dict(e.files)["ERT.yaml"]["ERT"]["tables"]
    compute = next(t for t in tables if f".{array.compute_component}[" in t["name"])
    per = {a["name"]: a["energy"] for a in compute["actions"]}
    energy = energy_pj(report, levels, per["compute"])
    cycles = bandwidth_bound_cycles(report, e.cost.cycles * instances, arch)
    return cycles, accesses, sum(energy.values()), storage_leak_pj(report, levels, cycles)


def compare_with_timeloop(
    binary: str,
    einsums: list[ExportedEinsum],
    mapping,
    arch: Architecture,
    tables,
    workdir: Path,
) -> list[EinsumComparison]:
    """Run Timeloop on each exported Einsum of one configuration, pair the numbers."""
    ert = tables[0]
    rows = []
    for e in einsums:
        d = workdir / mapping.name / e.einsum
        d.mkdir(parents=True, exist_ok=True)
        for name, data in e.files:
            (d / name).write_text(dump(data), encoding="utf-8")
        stats = run_einsum(binary, d)
        cycles, accesses, energy, leak = own_numbers(e, arch, ert, mapping.instances)
        rows.append(
            EinsumComparison(
                mapping.name,
                e.einsum,
                e.array,
                cycles,
                stats.cycles,
                accesses,
                stats.accesses,
                energy,
                stats.energy_pj,
                leak,
            )
        )
    return rows


def held_in_buffer(e: ExportedEinsum) -> int:
    """The values an exported Einsum's mapping keeps in the global buffer at once (the
    tile sizes Timeloop checks against its capacity)."""
    report = analyze(e.view.problem, e.view.mapping)
    return sum(c.capacity for level, _ds, c in report.counts if level == "buffer")


@dataclass(frozen=True)
class Export:
    """A configuration exported for Timeloop, and why it is not the file's own mapping."""

    einsums: list[ExportedEinsum]
    mapping: object
    arch: Architecture
    tables: tuple
    note: str | None = None


def export_fitting(
    specs: Specs,
    config: str,
    workload: Workload,
    spelling: Spelling | None = None,
    **overrides,
) -> Export:
    """Export a configuration as Timeloop mappings that fit its buffer. Timeloop holds whole
    tiles; a mapping whose plan fits only by spilling part of a tile (FLAT's published 64K
    dataflow spills 1/129 of its score block) oversubscribes the buffer there, so the point
    is exported as the file's `otherwise:` configuration binds it (FLAT's rule), the mapper
    holding every tile whole, with a note (an automatic configuration: itself so searched);
    without one, a one-line error."""
    spelling = spelling or spelling_for_version(None)

    def attempt(name: str, whole: bool = False) -> Export:
        mine = dataclasses.replace(specs, whole_tiles=True) if whole else specs
        cascade, mapping, arch = prepare(mine, name, workload, **overrides)
        tables = specs.tables(arch, "corrected")
        einsums = export_configuration(
            cascade, mapping, arch, workload, tables, mapping.name, spelling=spelling
        )
        return Export(einsums, mapping, arch, tables)

    first = attempt(config)
    over = [(e.einsum, held_in_buffer(e)) for e in first.einsums]
    over = [(n, v) for n, v in over if v > first.arch.buffer_values]
    if not over:
        return first
    name, held = over[0]
    why = (
        f"{first.mapping.label}: Einsum {name} keeps {held:,} values in the "
        f"{first.arch.buffer_values:,}-value buffer as a Timeloop mapping (its plan spills part "
        "of a tile, which a Timeloop mapping cannot)"
    )
    instead = config if is_auto(config) else specs.mapping(config).otherwise
    if instead is None:
        raise SpecError(f"{why}; no fitting mapping to export")
    fitting = attempt(instead, whole=is_auto(instead))
    if any(held_in_buffer(e) > fitting.arch.buffer_values for e in fitting.einsums):
        raise SpecError(f"{why}; {instead} does not fit either")
    whole = " with every tile whole" if is_auto(instead) else ""
    note = f"{why}: exported as {instead} binds it{whole}"
    return Export(fitting.einsums, fitting.mapping, fitting.arch, fitting.tables, note)


def compare_configurations(
    binary: str,
    specs: Specs,
    configs: list[str],
    workload: Workload,
    timeloop_version: str | None = None,
    **overrides,
) -> list[EinsumComparison]:
    """`compare_with_timeloop` for each configuration (exported to fit: `export_fitting`),
    in a temporary directory; `timeloop_version`: the installed release (its problem-key
    spelling; None: current)."""
    spelling = timeloop_spelling(timeloop_version)
    rows: list[EinsumComparison] = []
    with tempfile.TemporaryDirectory(prefix="fusemax-timeloop-") as tmp:
        for config in configs:
            ex = export_fitting(specs, config, workload, spelling, **overrides)
            rows += compare_with_timeloop(
                binary, ex.einsums, ex.mapping, ex.arch, ex.tables, Path(tmp)
            )
    return rows


def timeloop_spelling(version: str | None) -> Spelling:
    """The problem-key spelling of `--timeloop-version`; a bad version is one line (before
    any work: `timeloop-model` has no version flag to ask)."""
    try:
        return spelling_for_version(version)
    except SpecError as err:
        raise SpecError(f"--timeloop-version: {err.message}") from None


def _rel(ours: float, theirs: float) -> str:
    if theirs == 0:
        return "-" if ours == 0 else "inf"
    return f"{100 * (ours - theirs) / theirs:+.2f}%"


def render(rows: list[EinsumComparison]) -> str:
    body = [
        (
            r.configuration,
            r.einsum,
            r.array,
            f"{r.cycles:.4g}",
            f"{r.timeloop_cycles:.4g}",
            _rel(r.cycles, r.timeloop_cycles),
            f"{r.accesses:.4g}",
            f"{r.timeloop_accesses:.4g}",
            _rel(r.accesses, r.timeloop_accesses),
            f"{r.energy_pj * 1e-12:.4g}",
            f"{r.timeloop_energy_pj * 1e-12:.4g}",
            _rel(r.energy_pj, r.timeloop_energy_pj),
        )
        for r in rows
    ]
    head = [
        "config",
        "einsum",
        "array",
        "cycles",
        "timeloop",
        "diff",
        "accesses",
        "timeloop",
        "diff",
        "energy (J)",
        "timeloop",
        "diff",
    ]
    return "\n".join(
        [
            "",
            "Timeloop (timeloop-model) vs this model, per Einsum (diff = ours / Timeloop - 1): "
            "cycles throttled by DRAM bandwidth (this model charges exp its PE cycles, "
            "Timeloop one), accesses with Timeloop's semantics, dynamic energy",
            table(head, body, right=[False, False, False] + [True] * 9),
        ]
    )


def records(rows: list[EinsumComparison]) -> list[dict]:
    return [
        {
            "configuration": r.configuration,
            "einsum": r.einsum,
            "array": r.array,
            "cycles": r.cycles,
            "timeloop_cycles": r.timeloop_cycles,
            "accesses": r.accesses,
            "timeloop_accesses": r.timeloop_accesses,
            "energy_pj": r.energy_pj,
            "timeloop_energy_pj": r.timeloop_energy_pj,
            "storage_leak_pj": r.storage_leak_pj,
            "cycles_rel_diff": _ratio(r.cycles, r.timeloop_cycles),
            "accesses_rel_diff": _ratio(r.accesses, r.timeloop_accesses),
            "energy_rel_diff": _ratio(r.energy_pj, r.timeloop_energy_pj),
        }
        for r in rows
    ]


def _ratio(ours: float, theirs: float) -> float | None:
    return None if theirs == 0 else (ours - theirs) / theirs if math.isfinite(ours) else None
