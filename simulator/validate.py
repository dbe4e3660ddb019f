"""`python -m simulator.validate`: predictions against attention measured on a real chip.

    python -m simulator.validate --arch h100 --measured experiments/data/h100-attention.csv

The measured file (written by `experiments/silicon/measure_attention.py` on the GPU) holds,
per shape, the time of each fused backend and of the unfused path, and three ceilings: a
large matrix product, a device-to-device copy, an exp2 loop. The ceilings replace the
architecture's peaks (`simulator.spec.sustained`) -- the only numbers taken from the device;
nothing is fitted per shape. For every measured shape the tool predicts, with the analytic
engine:

* **fused**: the best of the fused configurations (`FUSED`: the architecture's own
  FlashAttention mapping, and the automatic fused and FLAT strategies) against the fastest
  fused backend that passed its accuracy check;
* **unfused**: the unfused strategy (QK, the softmax, AV through DRAM) against the unfused
  path, at the batch it ran.

It prints the relative error of each, the array (or DRAM) that bounds the prediction, the
tensor-core utilisation measured (achieved matrix FLOP/s over the measured matrix ceiling)
and predicted (the 2D array's busy share), and the summary: mean, median and largest
absolute relative error per group and per family (MHA, GQA, MQA; head dimension; batches
that do not fill the chip; decode by how long its K/V cache streams), the causal/full time
ratio and the fused/unfused speedup, measured and predicted. `--split FILE` (written by
experiments/silicon/split.py before any error was looked at) reports a design and a
held-out half apart; `--kernels NAME` names the folder of mapping files that describe the
measured kernels when the architecture's own name has none (an H200 running the H100's
kernels). `--format json|csv`; `--plot FILE` draws predicted against measured (log-log,
the y = x line, the shapes off by more than 10% numbered and named in a key).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import io
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from simulator.cascade.parse import load_cascade
from simulator.cascade.write import einsum_yaml
from simulator.core.evaluate import evaluate_mapping
from simulator.core.result import Result
from simulator.drivers.configs import Specs, prepare
from simulator.spec.arch import Architecture
from simulator.spec.ceilings import Ceilings, parse_ceilings, positive
from simulator.spec.workload import Workload, make_workload, parse_shape
from simulator.support.atomic import check_writable, output_path, write_text
from simulator.support.cli import ArgumentParser, guarded
from simulator.support.errors import Loc, SpecError
from simulator.support.figures import SMALL_PT, TEXT_PT, WIDE_IN, pyplot, save_figures
from simulator.support.paths import data_dir, is_file, resolve_spec
from simulator.support.pool import jobs_option, local_jobs, ordered_map
from simulator.support.progress import Steps
from simulator.support.textfmt import table
from simulator.support.units import format_count

# The fused configurations tried at every shape: the architecture's FlashAttention mapping
# (`mappings/<arch>/flash*.yaml`, by mask) and the automatic strategies that fuse.
FUSED_AUTO = ("auto:fused", "auto:flat")
UNFUSED = "auto:unfused"
REQUIRED = ("kind", "impl", "backend", "time_s", "ok", "rate")
# the columns an attention row needs, and a cascade row's (`kind` = `cascade`)
ATTENTION = ("batch", "q_heads", "kv_heads", "queries", "keys", "head_dim")
CASCADE = ("cascade", "shape")
RATES = ("mac_per_s", "dram_bytes_per_s", "exp_per_s")
# a measured cascade: the mapper's fused strategy for `fused`; for `unfused`, one kernel per
# Einsum -- each Einsum a cascade of its own, bound by the unfused strategy, in turn
CASCADE_FUSED = "auto:fused"
CASCADE_UNFUSED = "auto:unfused per Einsum"
# The H100 measurements committed with the project (a source checkout; a wheel ships no
# experiments: give --measured).
DEFAULT_MEASURED_NAME = "experiments/data/h100-attention.csv"


# A device's model in the measured file's `gpu` column ("NVIDIA H100 80GB HBM3": H100), and
# in an architecture's name (h100, my-h200).
_DEVICE = re.compile(r"\b([A-Z]{1,3}\d{2,4})\b")
_ARCH_DEVICE = re.compile(r"[a-z]{1,3}\d{2,4}")


def check_device(measured: Measured, arch: Architecture, given: str) -> str | None:
    """Does the architecture describe the measured device? Silent when its name names the
    device's model (h100 for an H100); one line (SpecError) when it names another device's,
    or when it is no GPU (a single core: FuseMax, FLAT); otherwise a warning to print (a
    file of the user's whose name says nothing)."""
    found = _DEVICE.search(measured.device)
    if found is None:  # the file names no device model: nothing to compare
        return None
    model = found.group(1)
    names = {arch.name.lower(), Path(arch.path).stem.lower()}
    if any(model.lower() in n for n in names):
        return None
    others = sorted({t for n in names for t in _ARCH_DEVICE.findall(n)})
    if others:
        raise SpecError(
            f"--arch {given} describes the {others[0].upper()}, but {measured.path} was "
            f"measured on the {measured.device}: give that device's measurements (--measured), "
            "or its architecture (--arch)"
        )
    if arch.cores <= 1:
        raise SpecError(
            f"--arch {given}: '{arch.name}' is no GPU (one core, no fan-out of SMs), so it has "
            f"no measured counterpart: validate compares a GPU's architecture with attention "
            f"measured on that GPU ({measured.device}: --arch {model.lower()})"
        )
    return (
        f"warning: nothing says architecture '{arch.name}' describes the {measured.device} "
        f"of {measured.path}: its predictions use that device's measured ceilings"
    )


def default_measured() -> Path:
    path = Path(__file__).resolve().parent.parent / DEFAULT_MEASURED_NAME
    if not is_file(path):
        raise SpecError(f"no {DEFAULT_MEASURED_NAME} beside this installation: give --measured")
    return path


@dataclass(frozen=True)
class Shape:
    """One measured attention problem."""

    kind: str  # prefill | decode
    batch: int
    q_heads: int
    kv_heads: int
    queries: int
    keys: int
    head_dim: int
    causal: bool

    @property
    def label(self) -> str:
        seq = format_count(self.keys)
        mask = " causal" if self.causal else ""
        if self.kind == "decode":
            return f"decode d{self.head_dim} ctx {seq} b{self.batch}"
        return f"d{self.head_dim} {seq}{mask} b{self.batch}"

    def workload(self) -> Workload:
        overrides: dict[str, int | bool | None] = {
            "batch": self.batch,
            "heads": self.q_heads,
            "kv_heads": self.kv_heads,
            "embed": self.head_dim,
            "causal": self.causal,
        }
        if self.kind == "decode":
            return make_workload("custom", self.keys, overrides, phase="decode", context=self.keys)
        return make_workload("custom", self.keys, overrides)

    @property
    def family(self) -> str:
        """MHA (a K/V head per query head), MQA (one K/V head) or GQA (groups between)."""
        if self.kv_heads == self.q_heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    @property
    def kv_bytes(self) -> float:
        """Bytes of K and V the shape reads once (BF16)."""
        return 2.0 * 2 * self.batch * self.kv_heads * self.keys * self.head_dim

    @property
    def split_key(self) -> tuple[str, int, int, int, int, int, int]:
        """The shape as a split file names it (full and causal runs together)."""
        return (
            self.kind,
            self.batch,
            self.q_heads,
            self.kv_heads,
            self.queries,
            self.keys,
            self.head_dim,
        )

    @property
    def matmul_flops(self) -> float:
        """QK^T and AV: 2 x 2 x queries x keys x head_dim per head (the kept pairs where
        causal, queries aligned to the last keys)."""
        pairs = self.queries * self.keys
        if self.causal:
            pairs = (
                self.queries * (self.keys - self.queries) + self.queries * (self.queries + 1) / 2
            )
        return 4.0 * self.batch * self.q_heads * pairs * self.head_dim


@dataclass(frozen=True)
class CascadeShape:
    """One measured cascade problem: a cascade file at a `--shape`, `batch` instances."""

    cascade: str  # the file, as the measured file names it
    shape: str  # `--shape`: RANK=N,... (every rank of the cascade)
    batch: int
    path: str = field(default="", compare=False)  # the file found for `cascade`
    flops: float = field(default=0.0, compare=False)  # matrix FLOPs the row counted (0: none)

    kind = "cascade"

    @property
    def name(self) -> str:
        return Path(self.cascade).stem

    @property
    def label(self) -> str:
        return f"{self.name} {self.shape}" + (f" b{self.batch}" if self.batch > 1 else "")

    @property
    def family(self) -> str:
        return self.name

    @property
    def split_key(self) -> tuple[str, str, int]:
        return (self.cascade, self.shape, self.batch)

    @property
    def matmul_flops(self) -> float:
        return self.flops

    def workload(self, ranks: frozenset[str] | None = None) -> Workload:
        """The workload: `batch` instances of one head, the ranks at `shape` (only `ranks`
        where given: an Einsum run alone has fewer)."""
        extents = parse_shape([self.shape], what=f"shape of {self.label}")
        if ranks is not None:
            extents = {r: n for r, n in extents.items() if r in ranks}
        overrides: dict[str, int | bool | None] = {"batch": self.batch, "heads": 1, "embed": 64}
        return make_workload("custom", 1, overrides, shape=extents)


@dataclass(frozen=True)
class Measurement:
    shape: Shape | CascadeShape
    impl: str  # fused | unfused
    backend: str  # the fastest passing backend (fused), or the unfused path's
    time_s: float


@dataclass(frozen=True)
class Measured:
    """A measured file: the device, its three ceilings and the fastest time per shape."""

    path: str
    device: str
    ceilings: dict[str, float]  # mac_per_s, dram_bytes_per_s, exp_per_s
    measurements: tuple[Measurement, ...]
    cores: int = 0  # the device's cores (`sm_count`; 0: not recorded)
    # every ceiling row read (the three rates, and the launch and DRAM latency where
    # measured): what the architecture runs at (simulator.spec.ceilings)
    limits: Ceilings = Ceilings()


@dataclass(frozen=True)
class Validation:
    """One shape: measured, predicted, and what bounds the prediction."""

    measurement: Measurement
    config: str  # the configuration whose prediction stands (the best fused one)
    predicted_s: float
    bound_by: str  # the array, or DRAM
    util_2d_predicted: float
    util_2d_measured: float

    @property
    def error(self) -> float:
        """Relative error of the prediction: (predicted - measured) / measured."""
        return self.predicted_s / self.measurement.time_s - 1.0

    def record(self) -> dict[str, object]:
        s = self.measurement.shape
        if isinstance(s, CascadeShape):
            head: dict[str, object] = {
                "shape": s.label,
                "kind": s.kind,
                "impl": self.measurement.impl,
                "cascade": s.cascade,
                "ranks": s.shape,
                "batch": s.batch,
            }
        else:
            head = {
                "shape": s.label,
                "kind": s.kind,
                "impl": self.measurement.impl,
                "batch": s.batch,
                "q_heads": s.q_heads,
                "kv_heads": s.kv_heads,
                "queries": s.queries,
                "keys": s.keys,
                "head_dim": s.head_dim,
                "causal": int(s.causal),
            }
        return {
            **head,
            "measured_backend": self.measurement.backend,
            "measured_s": self.measurement.time_s,
            "config": self.config,
            "predicted_s": self.predicted_s,
            "rel_error": self.error,
            "bound_by": self.bound_by,
            "util_2d_measured": self.util_2d_measured,
            "util_2d_predicted": self.util_2d_predicted,
        }


# --------------------------------------------------------------------------------------
# Reading the measured file


def read_measured(path: str | Path) -> Measured:
    """The measured CSV: rows that passed their accuracy check (`ok` = 1) only. Attention
    rows (`kind` prefill or decode) name their shape by batch, heads, queries, keys and head
    dimension; cascade rows (`kind` = `cascade`) by a cascade file, its `--shape` and its
    instances (`batch`, default 1). The ceiling rows: :mod:`simulator.spec.ceilings`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(f"cannot read the measured file: {err.strerror}", Loc(str(p))) from None
    except UnicodeDecodeError:
        raise SpecError("the measured file is not UTF-8 text", Loc(str(p))) from None
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or ()
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise SpecError(f"measured file lacks column(s) {', '.join(missing)}", Loc(str(p), 1))
    limits = parse_ceilings(text, str(p), "measured file", require=RATES)
    fastest: dict[tuple[Shape | CascadeShape, str], Measurement] = {}
    for line, row in enumerate(reader, start=2):
        loc = Loc(str(p), line)
        if row.get("ok") != "1" or row["kind"] == "ceiling":
            continue
        if row["impl"] not in ("fused", "unfused"):
            continue  # the unfused path's phases, timed alone: read by the docs, not here
        needed = CASCADE if row["kind"] == "cascade" else ATTENTION
        lacking = [c for c in needed if c not in header]
        if lacking:
            raise SpecError(
                f"measured file lacks column(s) {', '.join(lacking)} for a {row['kind']} row",
                loc,
            )
        shape = (
            _cascade_shape(row, p, loc) if row["kind"] == "cascade" else _attention_shape(row, loc)
        )
        m = Measurement(shape, row["impl"], row["backend"], _number(row["time_s"], "time_s", loc))
        key = (shape, m.impl)
        if key not in fastest or m.time_s < fastest[key].time_s:
            fastest[key] = m
    if not fastest:
        raise SpecError("measured file has no passing measurement", Loc(str(p)))
    return Measured(
        str(p), limits.device, limits.rates, tuple(fastest.values()), limits.cores, limits
    )


def _attention_shape(row: dict[str, str], loc: Loc) -> Shape:
    if row["kind"] not in ("prefill", "decode"):
        raise SpecError(
            f"kind must be prefill, decode, cascade or ceiling, got {row['kind']!r}", loc
        )
    return Shape(
        row["kind"],
        int(_number(row["batch"], "batch", loc)),
        int(_number(row["q_heads"], "q_heads", loc)),
        int(_number(row["kv_heads"], "kv_heads", loc)),
        int(_number(row["queries"], "queries", loc)),
        int(_number(row["keys"], "keys", loc)),
        int(_number(row["head_dim"], "head_dim", loc)),
        row.get("causal") == "1",
    )


def _cascade_shape(row: dict[str, str], measured: Path, loc: Loc) -> CascadeShape:
    """A cascade row's shape; its file found as written (from the current folder), beside
    the measured file, or as a shipped cascade of that file name (`cascades/NAME.yaml`)."""
    name = (row.get("cascade") or "").strip()
    if not name:
        raise SpecError("column 'cascade' is empty: name a cascade file", loc)
    batch = int(_number(row.get("batch") or "1", "batch", loc))
    flops = float(row.get("flops") or 0) if (row.get("flops") or "").strip() else 0.0
    text = "".join((row.get("shape") or "").split())
    found = None
    for candidate in (Path(name), measured.parent / name):
        if is_file(candidate):
            found = candidate
            break
    try:
        path = found or resolve_spec("cascades", Path(name).name)
        cascade = load_cascade(path)
    except SpecError as err:
        raise SpecError(f"cascade {name!r}: {err.message}", loc) from None
    extents = parse_shape([text], what=f"shape {text!r}")
    missing = sorted(cascade.shape_names() - set(extents))
    unknown = sorted(set(extents) - cascade.shape_names())
    if missing or unknown:
        say = [f"lacks {', '.join(missing)}"] if missing else []
        say += [f"names no rank of it: {', '.join(unknown)}"] if unknown else []
        raise SpecError(f"shape {text!r} of cascade {cascade.name}: {'; '.join(say)}", loc)
    return CascadeShape(name, text, batch, str(path), flops)


SPLIT_COLUMNS = ("kind", "batch", "q_heads", "kv_heads", "queries", "keys", "head_dim", "half")
# a split of measured cascades names each shape by its cascade, `--shape` and instances
CASCADE_SPLIT_COLUMNS = ("cascade", "shape", "batch", "half")
HALVES = ("design", "held-out")


def read_split(path: str | Path) -> dict[tuple, str]:
    """A split file (experiments/silicon/split.py): shape -> `design` or `held-out`. Its
    columns name attention shapes (`SPLIT_COLUMNS`) or measured cascades
    (`CASCADE_SPLIT_COLUMNS`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(f"cannot read the split file: {err.strerror}", Loc(str(p))) from None
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or ()
    columns = CASCADE_SPLIT_COLUMNS if "cascade" in header else SPLIT_COLUMNS
    missing = [c for c in columns if c not in header]
    if missing:
        raise SpecError(f"split file lacks column(s) {', '.join(missing)}", Loc(str(p), 1))
    out: dict[tuple, str] = {}
    for line, row in enumerate(reader, start=2):
        loc = Loc(str(p), line)
        if row["half"] not in HALVES:
            raise SpecError(f"half must be {' or '.join(HALVES)}, got {row['half']!r}", loc)
        if columns is CASCADE_SPLIT_COLUMNS:
            key: tuple = (
                row["cascade"].strip(),
                "".join(row["shape"].split()),
                int(_number(row["batch"] or "1", "batch", loc)),
            )
        else:
            key = (row["kind"],) + tuple(int(_number(row[c], c, loc)) for c in SPLIT_COLUMNS[1:-1])
        out[key] = row["half"]
    return out


def _number(text: str | None, column: str, loc: Loc) -> float:
    return positive(text, column, loc)


# --------------------------------------------------------------------------------------
# Predicting


def fused_configs(arch: str, shape: Shape) -> tuple[tuple[str, ...], ...]:
    """The fused configurations tried at a shape, in order of preference: the mapping files
    the architecture ships (`mappings/<arch>/*.yaml`: the kernels that were measured; one
    computing another attention than the shape's -- a mask it lacks -- refuses the point
    and is passed over), then -- where none runs the shape -- the mapper's fused
    strategies. Which file is which is in the files, not here."""
    folder = data_dir("mappings") / Path(arch).stem
    own = (
        sorted(f"{folder.name}/{p.stem}" for p in folder.glob("*.yaml")) if folder.is_dir() else []
    )
    return (tuple(own), FUSED_AUTO) if own else (FUSED_AUTO,)


def at_ceilings(specs: Specs, ceilings: Ceilings | dict[str, float]) -> Specs:
    """`specs` reading every architecture at the measured ceilings (the files read so far
    are shared: their caches key on the ceilings)."""
    limits = ceilings if isinstance(ceilings, Ceilings) else Ceilings.of(ceilings)
    return specs if specs.ceilings == limits else dataclasses.replace(specs, ceilings=limits)


def predict(
    specs: Specs, config: str, shape: Shape, ceilings: Ceilings | dict[str, float]
) -> Result:
    """One configuration at one shape, on the architecture running at the measured rates
    (and fixed costs, where measured): the mapper searches the chip as measured."""
    workload = shape.workload()
    cascade, mapping, arch = prepare(at_ceilings(specs, ceilings), config, workload)
    return evaluate_mapping(cascade, mapping, arch, workload)


def einsum_files(path: str) -> list[tuple[str, Path]]:
    """Each Einsum of the cascade file as a cascade of its own (:func:`einsum_yaml`), written
    once to the temporary folder under a digest of its text: (Einsum, file)."""
    cascade = load_cascade(path)
    folder = Path(tempfile.gettempdir()) / "fusemax-sim-einsums"
    out = []
    for e in cascade.einsums:
        text = einsum_yaml(cascade, e.name)
        file = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:20]}.yaml"
        if not is_file(file):
            folder.mkdir(parents=True, exist_ok=True)
            write_text(file, text)
        out.append((e.name, file))
    return out


def predict_cascade(
    specs: Specs, m: Measurement, arch: str, limits: Ceilings
) -> tuple[float, str, float]:
    """A measured cascade: (predicted seconds, what bounds it, the 2D array's busy share).
    Fused: the mapper's fused strategy on the whole cascade. Unfused: each Einsum a kernel
    of its own, in turn -- a cascade of that Einsum alone, bound by the unfused strategy
    (its operands from DRAM, its result to DRAM), each paying the fixed costs."""
    shape = m.shape
    assert isinstance(shape, CascadeShape)
    specs = at_ceilings(specs, limits)
    if m.impl == "fused":
        parts = [(shape.path, CASCADE_FUSED)]
    else:
        parts = [(str(f), UNFUSED) for _einsum, f in einsum_files(shape.path)]
    results = []
    for file, config in parts:
        one = specs.with_cascade(file, arch)
        workload = shape.workload(load_cascade(file).shape_names())
        cascade, mapping, chip = prepare(one, config, workload)
        results.append(evaluate_mapping(cascade, mapping, chip, workload))
    total = sum(r.latency_s for r in results)
    util = sum(r.util_2d * r.latency_s for r in results) / total
    return total, _bound_by_all(results, total, limits.phase_s), util


def _bound_by_all(results: list[Result], total: float, fixed_s: float) -> str:
    """:func:`bound_by` over kernels run in turn; `launch` where the fixed costs (`fixed_s`
    per phase: a launch and a DRAM latency) take half the time or more."""
    if fixed_s * sum(len(r.phases) for r in results) * 2 >= total:
        return "launch"
    memory = sum(p.latency_s for r in results for p in r.phases if p.memory_s >= p.compute_s)
    if memory * 2 >= total:
        return "DRAM"
    busy: dict[str, float] = {}
    for r in results:
        for name, u in r.util:
            busy[name] = busy.get(name, 0.0) + u * r.latency_s
    return str(max(busy, key=busy.__getitem__))


def bound_by(result: Result) -> str:
    """What sets the prediction: DRAM where the phases' memory time dominates, otherwise the
    array with the largest busy share."""
    memory = sum(p.latency_s for p in result.phases if p.memory_s >= p.compute_s)
    if memory * 2 >= result.latency_s:
        return "DRAM"
    return str(max(result.util, key=lambda u: u[1])[0])  # a plain str: rows are pickled


def validate_one(
    specs: Specs,
    m: Measurement,
    arch: str,
    ceilings: Ceilings | dict[str, float],
    kernels: str | None = None,
) -> Validation:
    """One measured shape: the fastest prediction of the first configurations that run it
    (the architecture's own mapping files, else the mapper's); a measured cascade by
    :func:`predict_cascade`."""
    limits = ceilings if isinstance(ceilings, Ceilings) else Ceilings.of(ceilings)
    mac_per_s = limits.mac_per_s or 0.0
    if isinstance(m.shape, CascadeShape):
        try:
            latency, bound, util = predict_cascade(specs, m, arch, limits)
        except SpecError as err:
            raise SpecError(f"cannot predict {m.shape.label} ({m.impl}): {err}") from None
        config = CASCADE_FUSED if m.impl == "fused" else CASCADE_UNFUSED
        measured_util = m.shape.matmul_flops / m.time_s / (2 * mac_per_s) if mac_per_s else 0.0
        return Validation(m, config, latency, bound, util, measured_util)
    tiers = fused_configs(kernels or arch, m.shape) if m.impl == "fused" else ((UNFUSED,),)
    best: tuple[Result, str] | None = None
    errors: list[str] = []
    for configs in tiers:
        for config in configs:
            try:
                r = predict(specs, config, m.shape, limits)
            except SpecError as err:
                errors.append(f"{config}: {err}")
                continue
            if best is None or r.latency_s < best[0].latency_s:
                best = (r, config)
        if best is not None:
            break
    if best is None:
        raise SpecError(f"no configuration predicts {m.shape.label}: {'; '.join(errors)}")
    r, config = best
    return Validation(
        m,
        config,
        r.latency_s,
        bound_by(r),
        r.util_2d,
        m.shape.matmul_flops / m.time_s / (2 * mac_per_s),
    )


def validate(
    measured: Measured,
    arch: str,
    specs: Specs | None = None,
    kernels: str | None = None,
    jobs: int = 1,
) -> tuple[Validation, ...]:
    """Every measured shape, in the file's order. With `jobs` > 1 (and no `specs` given),
    the shapes left once PARALLEL_AFTER_S has passed are predicted on `jobs` processes, in
    runs of consecutive shapes with specs of their own: the same rows (a file of hand-mapped
    shapes is done before worker processes would have started)."""
    shapes = measured.measurements
    parallel = specs is None and jobs > 1
    specs = specs or Specs(arch_override=arch)
    limits = measured.limits if measured.limits.rates else Ceilings.of(measured.ceilings)
    rows: list[Validation] = []
    start = time.perf_counter()
    # a bar on a terminal: a cold cache maps every shape (about a minute for the wide grid)
    with Steps("predicting", len(shapes), "shape", every=1) as progress:
        for m in shapes:
            if parallel and time.perf_counter() - start > PARALLEL_AFTER_S:
                break
            rows.append(validate_one(specs, m, arch, limits, kernels))
            progress.update(len(rows))
        rest = shapes[len(rows) :]
        if rest:  # (a few runs a process: one slow run does not leave the others idle)
            size = -(-len(rest) // (jobs * RUNS_PER_JOB))
            runs = [rest[i : i + size] for i in range(0, len(rest), size)]
            done = len(rows)
            parts = ordered_map(
                _validate_run,
                [(run, arch, limits, kernels) for run in runs],
                jobs,
                lambda k: progress.update(done + min(len(rest), k * size)),
            )
            rows += [row for part in parts for row in part]
    return tuple(rows)


# A parallel `validate` predicts in this process for this long first (seconds), then hands
# what is left to worker processes in this many runs of consecutive shapes a process.
PARALLEL_AFTER_S = 1.0
RUNS_PER_JOB = 4


def _validate_run(
    shapes: tuple[Measurement, ...], arch: str, limits: Ceilings, kernels: str | None
) -> tuple[Validation, ...]:
    """A run of shapes in a worker process (a task of :func:`validate`; the parent draws
    the bar)."""
    specs = Specs(arch_override=arch)
    return tuple(validate_one(specs, m, arch, limits, kernels) for m in shapes)


# --------------------------------------------------------------------------------------
# Summaries


@dataclass(frozen=True)
class Summary:
    group: str
    shapes: int
    mean: float  # absolute relative errors
    median: float
    largest: float


# (name, kind, implementation, fewest keys) of each summarised group
GROUPS = (
    ("fused prefill, S >= 4K", "prefill", "fused", 4096),
    ("fused prefill, all", "prefill", "fused", 0),
    ("fused decode", "decode", "fused", 0),
    ("unfused prefill", "prefill", "unfused", 0),
    ("unfused decode", "decode", "unfused", 0),
)


def summaries(rows: Sequence[Validation]) -> tuple[Summary, ...]:
    out = []
    for name, kind, impl, min_keys in GROUPS:
        out += _summary(
            name,
            [
                r
                for r in rows
                if r.measurement.shape.kind == kind
                and r.measurement.impl == impl
                and r.measurement.shape.keys >= min_keys
            ],
        )
    return tuple(out)


def _summary(name: str, rows: Sequence[Validation]) -> list[Summary]:
    errors = [abs(r.error) for r in rows]
    if not errors:
        return []
    return [
        Summary(name, len(errors), statistics.mean(errors), statistics.median(errors), max(errors))
    ]


def families(rows: Sequence[Validation], cores: int, copy_rate: float = 0.0) -> tuple[Summary, ...]:
    """Fused errors by family: prefill from 4K tokens per head family (MHA, GQA, MQA), per
    head dimension, and at batches that do not fill the chip (batch x query heads below
    its `cores`); decode per family, and (given the copy rate, bytes/s) by how long its
    K/V cache takes to stream."""
    fused = [r for r in rows if r.measurement.impl == "fused"]
    prefill = [
        r
        for r in fused
        if r.measurement.shape.kind == "prefill" and r.measurement.shape.keys >= 4096
    ]
    decode = [r for r in fused if r.measurement.shape.kind == "decode"]
    out: list[Summary] = []
    for fam in ("MHA", "GQA", "MQA"):
        out += _summary(
            f"{fam} prefill, S >= 4K", [r for r in prefill if r.measurement.shape.family == fam]
        )
    for d in sorted({r.measurement.shape.head_dim for r in prefill}):
        out += _summary(
            f"d{d} prefill, S >= 4K", [r for r in prefill if r.measurement.shape.head_dim == d]
        )
    if cores:
        out += _summary(
            f"small batch (B x H < {cores}) prefill, S >= 4K",
            [r for r in prefill if r.measurement.shape.batch * r.measurement.shape.q_heads < cores],
        )
    for fam in ("MHA", "GQA", "MQA"):
        out += _summary(f"{fam} decode", [r for r in decode if r.measurement.shape.family == fam])
    if copy_rate:
        for lo, hi in DECODE_STREAM_US:
            label = f"{lo:g}-{hi:g} us" if hi != float("inf") else f">= {lo:g} us"
            out += _summary(
                f"decode, K/V stream {label}",
                [r for r in decode if lo <= r.measurement.shape.kv_bytes / copy_rate * 1e6 < hi],
            )
    return tuple(out)


def cascade_summaries(rows: Sequence[Validation]) -> tuple[Summary, ...]:
    """Measured cascades: fused, unfused and both, then each cascade's fused and unfused."""
    picked = [r for r in rows if isinstance(r.measurement.shape, CascadeShape)]
    out = []
    for impl in ("fused", "unfused"):
        out += _summary(f"cascades, {impl}", [r for r in picked if r.measurement.impl == impl])
    out += _summary("cascades, all", picked)
    for name in dict.fromkeys(r.measurement.shape.family for r in picked):
        for impl in ("fused", "unfused"):
            out += _summary(
                f"{name}, {impl}",
                [
                    r
                    for r in picked
                    if r.measurement.shape.family == name and r.measurement.impl == impl
                ],
            )
    return tuple(out)


# Decode by the time its K/V cache takes to stream at the measured copy rate (microseconds):
# below ~100 us the fixed costs of a call (its kernels' launches, the split-KV combine),
# which the model does not have, weigh against the stream.
DECODE_STREAM_US = ((0.0, 20.0), (20.0, 100.0), (100.0, float("inf")))


def halves(
    rows: Sequence[Validation], split: dict[tuple, str]
) -> tuple[tuple[str, tuple[Validation, ...]], ...]:
    """The rows of each half of a split (shapes the split does not name: in neither)."""
    return tuple(
        (half, tuple(r for r in rows if split.get(r.measurement.shape.split_key) == half))
        for half in HALVES
    )


@dataclass(frozen=True)
class Pair:
    """A ratio of two times, measured and predicted: causal / full at one shape, or the
    fused kernel's speedup over the unfused path (per request, each at its own batch)."""

    what: str  # causal/full | fused speedup
    shape: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def attention_rows(rows: Sequence[Validation]) -> list[Validation]:
    """The rows of measured attention (not of measured cascades)."""
    return [r for r in rows if isinstance(r.measurement.shape, Shape)]


def _key(s: Shape) -> tuple[str, int, int, int, int, int]:
    return (s.kind, s.head_dim, s.queries, s.keys, s.q_heads, s.kv_heads)


def causal_ratios(rows: Sequence[Validation], min_seq: int = 8192) -> tuple[Pair, ...]:
    """Causal over full time of the fused kernels at the same shape, from `min_seq` keys."""
    rows = attention_rows(rows)
    fused = {(_key(r.measurement.shape), r.measurement.shape.causal, r.measurement.shape.batch): r
             for r in rows if r.measurement.impl == "fused"}  # fmt: skip
    out = []
    for (key, causal, batch), r in sorted(fused.items()):
        full = fused.get((key, False, batch))
        if not causal or full is None or key[0] != "prefill" or key[3] < min_seq:
            continue
        out.append(
            Pair(
                "causal/full",
                r.measurement.shape.label,
                r.measurement.time_s / full.measurement.time_s,
                r.predicted_s / full.predicted_s,
            )
        )
    return tuple(out)


def speedups(rows: Sequence[Validation]) -> tuple[Pair, ...]:
    """The fused kernel's speedup over the unfused path, per request, at every shape where
    both ran (the unfused path may have run fewer requests: its scores must fit)."""
    rows = attention_rows(rows)
    fused = {(_key(r.measurement.shape), r.measurement.shape.causal): r
             for r in rows if r.measurement.impl == "fused"}  # fmt: skip
    out = []
    for u in rows:
        s = u.measurement.shape
        f = fused.get((_key(s), s.causal))
        if u.measurement.impl != "unfused" or f is None:
            continue
        bu, bf = s.batch, f.measurement.shape.batch
        out.append(
            Pair(
                "fused speedup",
                f.measurement.shape.label,
                (u.measurement.time_s / bu) / (f.measurement.time_s / bf),
                (u.predicted_s / bu) / (f.predicted_s / bf),
            )
        )
    return tuple(out)


def utilisation_by_head_dim(
    rows: Sequence[Validation], min_seq: int = 4096
) -> tuple[tuple[int, float, float], ...]:
    """(head dimension, measured, predicted) mean tensor-core utilisation of the fused
    kernels at full (non-causal) prefill from `min_seq` keys."""
    rows = attention_rows(rows)
    dims = sorted({r.measurement.shape.head_dim for r in rows})
    out = []
    for d in dims:
        picked = [
            r
            for r in rows
            if r.measurement.impl == "fused"
            and r.measurement.shape.kind == "prefill"
            and r.measurement.shape.head_dim == d
            and not r.measurement.shape.causal
            and r.measurement.shape.keys >= min_seq
        ]
        if picked:
            out.append(
                (
                    d,
                    statistics.mean(r.util_2d_measured for r in picked),
                    statistics.mean(r.util_2d_predicted for r in picked),
                )
            )
    return tuple(out)


# --------------------------------------------------------------------------------------
# Output


def _summary_rows(items: Sequence[Summary], prefix: str = "") -> list[tuple]:
    return [
        (
            prefix + s.group,
            s.shapes,
            f"{100 * s.mean:.1f}%",
            f"{100 * s.median:.1f}%",
            f"{100 * s.largest:.1f}%",
        )
        for s in items
    ]


def fixed_costs(limits: Ceilings) -> str:
    """The measured fixed costs, as the table's header says them ('' where none)."""
    out = ""
    if limits.launch_s is not None:
        out += f", launch {limits.launch_s * 1e6:.3g} us"
    if limits.dram_latency_s is not None:
        out += f", DRAM latency {limits.dram_latency_s * 1e9:.3g} ns"
    return out + (" per phase" if out else "")


SUMMARY_HEADER = ["group", "shapes", "mean |error|", "median |error|", "largest |error|"]


def render_table(
    measured: Measured,
    arch: str,
    rows: Sequence[Validation],
    split: dict[tuple, str] | None = None,
) -> str:
    head = [
        f"{measured.device or 'measured'} ({measured.path}) against arch '{arch}' at its "
        f"measured ceilings: matrix {2 * measured.ceilings['mac_per_s'] / 1e12:.4g} TFLOP/s, "
        f"copy {measured.ceilings['dram_bytes_per_s'] / 1e12:.4g} TB/s, "
        f"exp2 {measured.ceilings['exp_per_s'] / 1e12:.4g} T/s{fixed_costs(measured.limits)}; "
        "analytic engine",
        "",
    ]
    shape_rows = [
        (
            r.measurement.impl,
            r.measurement.shape.label,
            r.measurement.backend,
            f"{r.measurement.time_s * 1e3:.4g}",
            r.config,
            f"{r.predicted_s * 1e3:.4g}",
            f"{100 * r.error:+.1f}%",
            r.bound_by,
            f"{100 * r.util_2d_measured:.0f}%",
            f"{100 * r.util_2d_predicted:.0f}%",
        )
        for r in rows
    ]
    parts = [
        "\n".join(head)
        + table(
            [
                "impl",
                "shape",
                "measured by",
                "measured ms",
                "predicted by",
                "predicted ms",
                "error",
                "bound by",
                "TC util meas",
                "TC util pred",
            ],
            shape_rows,
        ),  # fmt: skip
        table(
            SUMMARY_HEADER,
            _summary_rows(summaries(rows))
            + _summary_rows(families(rows, measured.cores, measured.ceilings["dram_bytes_per_s"]))
            + _summary_rows(cascade_summaries(rows)),
        ),
    ]
    ratios = (*causal_ratios(rows), *speedups(rows))
    if ratios:
        parts.append(
            table(
                ["ratio", "shape", "measured", "predicted", "error"],
                [
                    (
                        p.what,
                        p.shape,
                        f"{p.measured:.3f}",
                        f"{p.predicted:.3f}",
                        f"{100 * p.error:+.1f}%",
                    )
                    for p in ratios
                ],
            )
        )
    util = utilisation_by_head_dim(rows)
    if util:
        parts.append(
            table(
                ["head dim", "tensor-core util measured", "predicted"],
                [(d, f"{100 * m:.0f}%", f"{100 * p:.0f}%") for d, m, p in util],
            )
        )
    if split:
        lines: list[tuple] = []
        for half, picked in halves(rows, split):
            lines += _summary_rows(summaries(picked), f"{half}: ")
            lines += _summary_rows(
                families(picked, measured.cores, measured.ceilings["dram_bytes_per_s"]), f"{half}: "
            )
            lines += _summary_rows(cascade_summaries(picked), f"{half}: ")
        parts.append(
            f"Split ({len(split)} shapes named, design and held-out at random):\n"
            + table(SUMMARY_HEADER, lines)
        )
    return "\n\n".join(parts) + "\n"


def to_json(
    measured: Measured,
    arch: str,
    rows: Sequence[Validation],
    split: dict[tuple, str] | None = None,
) -> str:
    doc: dict[str, object] = {
        "device": measured.device,
        "measured": measured.path,
        "arch": arch,
        "ceilings": measured.ceilings,
        "shapes": [r.record() for r in rows],
        "summary": [s.__dict__ for s in summaries(rows)],
        "ratios": [
            {**p.__dict__, "error": p.error} for p in (*causal_ratios(rows), *speedups(rows))
        ],
        "tensor_core_utilisation": [
            {"head_dim": d, "measured": m, "predicted": p}
            for d, m, p in utilisation_by_head_dim(rows)
        ],
        "families": [
            s.__dict__
            for s in families(rows, measured.cores, measured.ceilings["dram_bytes_per_s"])
        ],
    }
    if any(isinstance(r.measurement.shape, CascadeShape) for r in rows):
        doc["cascades"] = [s.__dict__ for s in cascade_summaries(rows)]
        doc["fixed_costs"] = {
            "launch_s": measured.limits.launch_s,
            "dram_latency_s": measured.limits.dram_latency_s,
        }
    if split:
        doc["halves"] = {
            half: {
                "summary": [s.__dict__ for s in summaries(picked)],
                "families": [
                    s.__dict__
                    for s in families(picked, measured.cores, measured.ceilings["dram_bytes_per_s"])
                ],
                "cascades": [s.__dict__ for s in cascade_summaries(picked)],
            }
            for half, picked in halves(rows, split)
        }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def to_csv(rows: Sequence[Validation]) -> str:
    records = [r.record() for r in rows]
    columns = list(dict.fromkeys(k for rec in records for k in rec))
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, restval="", lineterminator="\n")
    writer.writeheader()
    for rec in records:
        writer.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in rec.items()})
    return out.getvalue()


def draw(rows: Sequence[Validation], title: str, out: Path) -> list[Path]:
    """Predicted against measured, log-log, the y = x line, each point labelled by its
    shape; fused and unfused apart. `out`.png and .pdf."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(WIDE_IN, 5.6))
    values = [v for r in rows for v in (r.measurement.time_s, r.predicted_s)]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, label="y = x")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.9", label="±10%")
    styles = {"fused": ("o", "tab:blue"), "unfused": ("s", "tab:orange")}
    named: list[Validation] = []
    for impl, (marker, color) in styles.items():
        picked = [r for r in rows if r.measurement.impl == impl]
        ax.scatter([r.measurement.time_s for r in picked], [r.predicted_s for r in picked],
                   marker=marker, color=color, s=18, label=impl, zorder=3)  # fmt: skip
        if impl == "fused":  # shapes off by more than 10% by number, named in a key
            named += [r for r in picked if abs(r.error) > 0.10]
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    # Numbers at the points, the names in a key: close shapes (a few percent apart) would
    # print their names over each other. Neighbours take turns above and below.
    named.sort(key=lambda r: r.measurement.time_s)
    offsets = ((4, -9), (4, 3), (-9, -9), (-9, 3))
    for i, r in enumerate(named, 1):
        xy = (r.measurement.time_s, r.predicted_s)
        ax.annotate(str(i), xy, fontsize=SMALL_PT, xytext=offsets[(i - 1) % len(offsets)],
                    textcoords="offset points")  # fmt: skip
    if named:
        key = "\n".join(
            f"{i}  {r.measurement.shape.label} ({100 * r.error:+.0f}%)"
            for i, r in enumerate(named, 1)
        )
        ax.text(0.98, 0.02, key, transform=ax.transAxes, fontsize=SMALL_PT, ha="right",
                va="bottom", multialignment="left",
                bbox={"facecolor": "white", "edgecolor": "0.8", "pad": 3})  # fmt: skip
    ax.set_xlabel("measured (s)", fontsize=TEXT_PT)
    ax.set_ylabel("predicted (s)", fontsize=TEXT_PT)
    ax.tick_params(axis="both", labelsize=SMALL_PT)
    ax.set_title(
        title + "\n(fused shapes off by more than 10% numbered, named in the key)", fontsize=TEXT_PT
    )
    ax.legend(fontsize=SMALL_PT, loc="upper left")
    fig.tight_layout()
    return save_figures(fig, out)


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m simulator.validate",
        description="Predictions of an architecture against attention measured on the chip "
        "it describes (experiments/silicon/measure_attention.py wrote the file).",
    )
    p.add_argument("--arch", default="h100", help="architecture (shipped name or file)")
    p.add_argument("--measured", help=f"the measured CSV (default: {DEFAULT_MEASURED_NAME})")
    p.add_argument(
        "--kernels",
        help="the folder of mapping files under mappings/ that describe the measured kernels "
        "(default: the architecture's name: mappings/h100/ for --arch h100)",
    )
    p.add_argument(
        "--split",
        help="a split file (experiments/silicon/split.py): report its design and held-out "
        "halves apart",
    )
    p.add_argument("--format", choices=["table", "json", "csv"], default="table")
    p.add_argument("-o", "--out", help="write here instead of standard output")
    p.add_argument("--plot", help="figure stem: predicted vs measured (.png and .pdf)")
    p.add_argument(
        "--jobs",
        "-j",
        type=jobs_option,
        help="processes predicting the shapes (default: all cores; the same rows whatever "
        "their number)",
    )
    return p


@guarded
def main(argv: list[str] | None = None) -> int:
    """Validate an architecture's predictions against measured attention."""
    args = _parser().parse_args(argv)
    out = output_path(args.out, f"validate.{args.format}") if args.out else None
    plot = output_path(args.plot, "validate") if args.plot else None
    if out is not None:
        check_writable(out)
    if plot is not None:
        for suffix in (".png", ".pdf"):
            check_writable(plot.with_name(plot.name + suffix))
    measured = read_measured(args.measured or default_measured())
    split = read_split(args.split) if args.split else None
    arch = args.arch
    warning = check_device(measured, Specs(arch_override=arch).check_arch_override(), arch)
    if warning is not None:
        print(warning, file=sys.stderr)
    if args.kernels and not (data_dir("mappings") / args.kernels).is_dir():
        raise SpecError(f"--kernels: no folder mappings/{args.kernels}")
    jobs = local_jobs(args.jobs, len(measured.measurements))
    rows = validate(measured, arch, kernels=args.kernels, jobs=jobs)
    if args.format == "json":
        text = to_json(measured, arch, rows, split)
    elif args.format == "csv":
        text = to_csv(rows)
    else:
        text = render_table(measured, arch, rows, split)
    if out is not None:
        write_text(out, text)
    else:
        sys.stdout.write(text)
    if plot is not None:
        title = (
            f"{measured.device or 'measured'}: attention, predicted ({Path(arch).stem}) vs measured"
        )
        draw(rows, title, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
