"""Parsing of human-friendly quantities on the command line and in specs.

Counts use binary multiples the way the field writes sequence lengths (`1K` = 1024,
`1M` = 1048576, up to `E` = 2^60). Byte sizes and bandwidths say which they mean: `B`
after the multiple is decimal SI (`400GB` = 400 x 10^9 bytes, `1.6TB` = 1.6 x 10^12),
`iB` binary (`16MiB` = 2^24, the paper's "16 MB" buffer), and a bare multiple binary as in
counts (`4M` = 4MiB). A fraction is accepted when it makes a whole number of bytes
(`1.5KiB` = 1536; `1.6TiB` is not whole). Anything else is a SpecError, never a silent 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from fractions import Fraction

from simulator.support.errors import SpecError

_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50, "E": 2**60}
_DECIMAL = {"K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_COUNT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTPE]?)\s*$", re.IGNORECASE)
_BYTES = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTPE]?)(i?B)?\s*$", re.IGNORECASE)
# Powers: `2^40`, `2**40` (a count or a number of bytes); exponents up to MAX_EXPONENT.
_POWER = re.compile(r"^\s*([0-9]+)\s*(?:\^|\*\*)\s*([0-9]+)\s*$")
MAX_EXPONENT = 64
# The largest count or size a command line or spec may give (2^64: tokens, bytes, PEs).
MAX_COUNT = 2**64


def _power(text: str, what: str) -> int | None:
    match = _POWER.match(text)
    if not match:
        return None
    base, exponent = int(match.group(1)), int(match.group(2))
    if exponent > MAX_EXPONENT:
        raise SpecError(f"{what}: '{text}' has an exponent above {MAX_EXPONENT}")
    return _checked(base**exponent, text, what)


def _scaled(number: str, unit: int, text: str, what: str) -> int:
    """`number` (decimal digits, maybe a fraction) times `unit`, exactly: a whole number."""
    if len(number) > 30:  # beyond MAX_COUNT whatever the suffix
        raise SpecError(f"{what}: '{text[:40]}' is too large (at most 2^64)")
    value = Fraction(number) * unit
    if value.denominator != 1:
        raise SpecError(f"{what}: '{text}' is not a whole number")
    return _checked(int(value), text, what)


def _checked(value: int, text: str, what: str) -> int:
    if value <= 0:
        raise SpecError(f"{what}: '{text}' must be positive")
    if value > MAX_COUNT:
        raise SpecError(f"{what}: '{text[:40]}' is too large (at most 2^64)")
    return value


def whole_number(option: str, least: int | None = None) -> Callable[[str], int]:
    """A command-line option's parser: a plain whole number (`--seed 3`, `--jobs 2`), at
    least `least` where given; one line naming the option else."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise SpecError(f"{option}: '{text}' is not a whole number") from None
        if least is not None and value < least:
            raise SpecError(f"{option} must be {least} or more, got {value}")
        return value

    return parse


def parse_count(text: str | int, what: str = "value") -> int:
    """`1K`, `64k`, `1M`, `2M`, `1048576`, `2^20` -> int (binary multiples)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return _checked(text, str(text), what)
    power = _power(str(text), what)
    if power is not None:
        return power
    match = _COUNT.match(str(text))
    if not match:
        raise SpecError(f"{what}: '{text}' is not a count (examples: 1024, 1K, 64k, 1M, 2^20)")
    return _scaled(match.group(1), _SUFFIX[match.group(2).upper()], str(text), what)


def parse_bytes(text: str | int, what: str = "size") -> int:
    """`16MB` (16 x 10^6), `16MiB` and `16M` (16 x 2^20), `1.6TB`, `4096` -> bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        return _checked(text, str(text), what)
    power = _power(str(text), what)
    if power is not None:
        return power
    match = _BYTES.match(str(text))
    if not match:
        raise SpecError(
            f"{what}: '{text}' is not a size in bytes (examples: 16MiB, 16MB = 16e6, 4096)"
        )
    number, multiple, bytes_unit = match.groups()
    decimal = bool(multiple) and (bytes_unit or "").upper() == "B"
    unit = _DECIMAL[multiple.upper()] if decimal else _SUFFIX[multiple.upper()]
    return _scaled(number, unit, str(text), what)


def parse_bandwidth(text: str | int | float, what: str = "bandwidth") -> float:
    """`400GiB` (x 2^30), `400GB/s` (x 10^9), `4.3e11` -> bytes per second."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        stripped = str(text).strip().removesuffix("/s")
        try:
            value = float(stripped)
        except ValueError:
            value = float(parse_bytes(stripped, what=what))
    if not math.isfinite(value) or value <= 0 or value > MAX_COUNT:
        raise SpecError(f"{what} must be a positive finite number (at most 2^64), got {text}")
    return value


# A count is written with a binary multiple only while that leaves a short number: 2^64
# is `16E`, not `16777216T`; 10^12 is `1000000000000`, not `976562500K`.
SHORT = 10_000


def format_count(n: int) -> str:
    """1024 -> '1K', 1048576 -> '1M', 2^64 -> '16E', 1536 -> '1536': the largest binary
    multiple that divides `n` (what parse_count reads back), when it leaves fewer than five
    digits; the digits otherwise."""
    for suffix in ("E", "P", "T", "G", "M", "K"):
        unit = _SUFFIX[suffix]
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}" if n // unit < SHORT else str(n)
    return str(n)


def parse_seconds(text: str | float, what: str = "time") -> float:
    """`30`, `2.5`, `90s` -> seconds (a positive, finite number)."""
    raw = str(text).strip()
    number = raw[:-1] if raw.lower().endswith("s") else raw
    try:
        value = float(number)
    except ValueError:
        raise SpecError(
            f"{what}: '{text}' is not a number of seconds (examples: 30, 2.5, 90s)"
        ) from None
    if not (0 < value < float("inf")):
        raise SpecError(f"{what}: '{text}' must be a positive number of seconds")
    return value


def format_bytes(value: float) -> str:
    """Bytes in decimal units, three significant digits: `7.52 GB`."""
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def format_duration(seconds: float) -> str:
    """`42 s`, `7.5 min`, `3.2 h`, `12 days`, `3.1e+04 years`: a wait a person can read."""
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.0f} s"


TRIAL_DIVISION_LIMIT = 1 << 20  # primes tried when listing a search factor's divisors


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending, from its factorisation: trial division by the numbers
    below TRIAL_DIVISION_LIMIT (bounded work for any n); a cofactor left above that limit
    is taken whole (prime below LIMIT^2, else its own divisors beyond it are not tried --
    the search then chooses among fewer tile sizes, never a wrong one)."""
    factors: dict[int, int] = {}
    m, p = n, 2
    while p * p <= m and p < TRIAL_DIVISION_LIMIT:
        while m % p == 0:
            factors[p] = factors.get(p, 0) + 1
            m //= p
        p += 1 if p == 2 else 2
    if m > 1:
        factors[m] = factors.get(m, 0) + 1
    out = [1]
    for prime, power in factors.items():
        out = [d * prime**k for d in out for k in range(power + 1)]
    return sorted(out)
