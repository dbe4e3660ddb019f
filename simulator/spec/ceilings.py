"""A measured chip's ceilings and fixed costs, applied to an architecture before any cascade.

A measured file (`experiments/data/h100-*.csv`, written on the device by the scripts of
`experiments/silicon/`) holds, beside its measurements, rows of `kind` = `ceiling`, each
one microbenchmark that passed its check (`ok` = 1):

| `impl` | column read | what it sets |
| --- | --- | --- |
| `matmul` | `rate` (FLOP/s) | the MAC rate of the array with the most MACs (`rate` / 2) |
| `copy` | `rate` (bytes read + written per s) | DRAM bandwidth |
| `exp2` | `rate` (results/s) | the rate of the array computing `exp` fastest |
| `launch` | `time_s` | a kernel's fixed cost, added to every phase |
| `dram-latency` | `time_s` | DRAM's latency, added to every phase (its first load) |

Other ceiling rows (`launch-eager`, `l2-latency`, ...) are for the record and not read. A
file measured over several calls holds each call's rows: the median of each is taken. The
three rates replace the peaks they measure (:func:`simulator.spec.sustained.with_sustained`:
a rate above the architecture's peak is an error); the two fixed costs are new numbers no
datasheet gives: each phase of every cascade -- a kernel on a GPU -- takes the launch time
and one DRAM latency on top of its timed work. This is the one step every command applies
(`--ceilings FILE` on `simulator.run`, `compare` and `sweep`; `simulator.validate`'s
measured file), before the mapper searches and the engines time.
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path

from simulator.spec.arch import Architecture
from simulator.spec.sustained import with_sustained
from simulator.support.errors import Loc, SpecError

# impl -> (field, column, scale): the rates, then the fixed costs
RATES = {
    "matmul": ("mac_per_s", "rate", 0.5),  # FLOP/s: two per multiply-accumulate
    "copy": ("dram_bytes_per_s", "rate", 1.0),
    "exp2": ("exp_per_s", "rate", 1.0),
}
FIXED = {
    "launch": ("launch_s", "time_s", 1.0),
    "dram-latency": ("dram_latency_s", "time_s", 1.0),
}
REQUIRED_COLUMNS = ("kind", "impl", "ok", "rate", "time_s")
CEILINGS_HELP = (
    "a measured CSV (experiments/data/h100-*.csv): the architecture runs at its ceilings "
    "(matrix, copy, exp2 rates) and pays its launch time and DRAM latency per phase"
)


@dataclass(frozen=True)
class Ceilings:
    """What a chip was measured to sustain, and its fixed costs (None: not measured)."""

    path: str = ""
    device: str = ""
    mac_per_s: float | None = None
    dram_bytes_per_s: float | None = None
    exp_per_s: float | None = None
    launch_s: float | None = None
    dram_latency_s: float | None = None
    cores: int = 0  # the device's cores (`sm_count`; 0: not recorded)

    @property
    def rates(self) -> dict[str, float]:
        """The measured rates by `with_sustained`'s names."""
        return {
            name: value
            for name in ("mac_per_s", "dram_bytes_per_s", "exp_per_s")
            if (value := getattr(self, name)) is not None
        }

    @property
    def phase_s(self) -> float:
        """The fixed cost of one phase: a launch and one DRAM latency."""
        return (self.launch_s or 0.0) + (self.dram_latency_s or 0.0)

    def apply(self, arch: Architecture) -> Architecture:
        """`arch` at these rates, with these fixed costs."""
        try:
            arch, _ = with_sustained(arch, **self.rates)
        except SpecError as err:
            where = f"{self.path}: " if self.path else ""
            raise SpecError(
                f"{where}{err.message.replace(': the file' + chr(39) + 's peak is wrong', '')}"
                f" (ceilings measured on another chip than '{arch.name}'?)"
            ) from None
        if self.launch_s is not None:
            arch = dataclasses.replace(arch, launch_s=self.launch_s)
        if self.dram_latency_s is not None:
            arch = dataclasses.replace(
                arch, dram=dataclasses.replace(arch.dram, latency_s=self.dram_latency_s)
            )
        return arch

    @staticmethod
    def of(rates: dict[str, float]) -> Ceilings:
        """Ceilings from a dict of rates and fixed costs by field name."""
        known = {f.name for f in dataclasses.fields(Ceilings)}
        unknown = sorted(set(rates) - known)
        if unknown:
            raise SpecError(f"unknown ceiling(s) {', '.join(unknown)}")
        return Ceilings(**rates)


def read_ceilings(
    path: str | Path, what: str = "ceilings file", require: tuple[str, ...] = ()
) -> Ceilings:
    """The ceiling rows of a measured CSV (`require`: fields that must be there)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(f"cannot read the {what}: {err.strerror}", Loc(str(p))) from None
    except UnicodeDecodeError:
        raise SpecError(f"the {what} is not UTF-8 text", Loc(str(p))) from None
    return parse_ceilings(text, str(p), what, require)


def parse_ceilings(
    text: str, source: str, what: str = "ceilings file", require: tuple[str, ...] = ()
) -> Ceilings:
    try:
        reader = csv.DictReader(text.splitlines())
        header = reader.fieldnames or ()
    except csv.Error as err:
        raise SpecError(f"the {what} is not CSV: {err}", Loc(source)) from None
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise SpecError(f"{what} lacks column(s) {', '.join(missing)}", Loc(source, 1))
    values: dict[str, list[float]] = {}
    device, cores = "", 0
    try:
        for line, row in enumerate(reader, start=2):
            if row.get("ok") != "1":
                continue
            device = device or (row.get("gpu") or "")
            if not cores and (row.get("sm_count") or "").isdigit():
                cores = int(row["sm_count"])
            if row.get("kind") != "ceiling":
                continue
            found = RATES.get(row.get("impl") or "") or FIXED.get(row.get("impl") or "")
            if found is None:
                continue
            name, column, scale = found
            value = positive(row.get(column), column, Loc(source, line))
            values.setdefault(name, []).append(value * scale)
    except csv.Error as err:
        raise SpecError(f"the {what} is not CSV: {err}", Loc(source)) from None
    absent = [name for name in require if name not in values]
    if absent:
        raise SpecError(f"{what} has no passing ceiling for {', '.join(absent)}", Loc(source))
    if not values:
        raise SpecError(
            f"{what} has no passing ceiling row (kind 'ceiling', impl one of "
            f"{', '.join((*RATES, *FIXED))})",
            Loc(source),
        )
    # a file measured over several calls holds each call's ceilings: their median (the
    # chip's clock moves with its power state between calls)
    medians = {name: statistics.median(v) for name, v in sorted(values.items())}
    return Ceilings(source, device, cores=cores, **medians)


def positive(text: str | None, column: str, loc: Loc) -> float:
    """A positive number from a CSV cell (one line otherwise)."""
    try:
        value = float(text or "")
    except ValueError:
        raise SpecError(f"column '{column}' is not a number: {text!r}", loc) from None
    if not value > 0 or value == float("inf"):
        raise SpecError(f"column '{column}' must be a positive number, got {text!r}", loc)
    return value
