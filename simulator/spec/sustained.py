"""Sustained rates over an architecture's peaks: the chip as measured, not as datasheeted.

A datasheet gives peaks; a real chip sustains less (a GPU's tensor cores under their power
limit reach ~70% of the quoted matrix rate, HBM ~90% of its quoted bandwidth). A
validation against silicon takes three measured rates -- a large matrix product, a
device-to-device copy, an exp2 loop -- and this module puts them in place of the peaks they
measure, nothing else:

* the MAC rate of the array with the most MACs per second, and the exponential rate of
  the array that computes `exp` as a primitive operation fastest: every operation of that
  array takes `peak / sustained` times its cycles. A unit's results per clock are fixed
  by its design, so a loop running below its peak measures the clock (or the issue rate)
  the array ran at -- a GPU's lanes and special-function units share the SM's clock,
  which boosts and throttles with power -- and the array's other units slow alike;
* DRAM bandwidth: the copy's bytes (read + written) per second.

A sustained rate above its peak -- at the clock that array runs at (`frequency_hz` of
its own, else the system's) -- is an error: the file's peak would be wrong.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from simulator.spec.arch import Architecture, Array
from simulator.support.errors import SpecError


@dataclass(frozen=True)
class Derating:
    """What one measured rate did to the architecture."""

    rate: str  # mac_per_s | exp_per_s | dram_bytes_per_s
    array: str  # the array (or DRAM) it applies to
    peak: float
    sustained: float

    @property
    def factor(self) -> float:
        """Cycles (or time) multiplier: peak / sustained."""
        return self.peak / self.sustained


def _unit_rate(arch: Architecture, array: Array, op: str) -> float:
    """Operations per second the whole chip's copies of `array` do of `op`."""
    cost = array.op(op)
    assert cost is not None
    return arch.cores * array.pes * arch.frequency_hz / cost.cycles


def _scaled(array: Array, factor: float) -> Array:
    """`array` with every operation `factor` times longer."""
    ops = tuple(dataclasses.replace(o, cycles=o.cycles * factor) for o in array.operations)
    return dataclasses.replace(array, operations=ops)


def _fastest(arch: Architecture, op: str) -> Array | None:
    having = [a for a in arch.arrays if any(o.name == op for o in a.operations)]
    return max(having, key=lambda a: _unit_rate(arch, a, op)) if having else None


def with_sustained(
    arch: Architecture,
    *,
    mac_per_s: float | None = None,
    exp_per_s: float | None = None,
    dram_bytes_per_s: float | None = None,
) -> tuple[Architecture, tuple[Derating, ...]]:
    """`arch` running at the measured rates given (None keeps the peak)."""
    done: list[Derating] = []
    for rate, op, value in (("mac_per_s", "mac", mac_per_s), ("exp_per_s", "exp", exp_per_s)):
        if value is None:
            continue
        array = _fastest(arch, op)
        if array is None:
            raise SpecError(f"architecture '{arch.name}' has no array computing '{op}'")
        peak = _unit_rate(arch, array, op)
        _check(rate, value, peak, arch.name)
        scaled = _scaled(array, peak / value)
        arch = dataclasses.replace(
            arch, arrays=tuple(scaled if a.name == array.name else a for a in arch.arrays)
        )
        done.append(Derating(rate, array.name, peak, value))
    if dram_bytes_per_s is not None:
        peak = arch.dram.bandwidth_bytes_per_s
        _check("dram_bytes_per_s", dram_bytes_per_s, peak, arch.name)
        arch = arch.with_overrides(bandwidth_bytes_per_s=dram_bytes_per_s)
        done.append(Derating("dram_bytes_per_s", arch.dram.name, peak, dram_bytes_per_s))
    return arch, tuple(done)


def _check(rate: str, value: float, peak: float, name: str) -> None:
    if not value > 0:
        raise SpecError(f"sustained {rate} must be positive, got {value}")
    if value > peak * (1 + 1e-9):
        raise SpecError(
            f"sustained {rate} {value:.4g} exceeds architecture '{name}''s peak {peak:.4g}: "
            "the rates were measured on a faster device than the architecture describes, or "
            "its peak is wrong"
        )
