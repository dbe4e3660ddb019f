"""Parsing of human-friendly quantities on the command line and in specs.

Counts use binary multiples the way the field writes sequence lengths (`1K` = 1024,
`1M` = 1048576); byte sizes accept `16MB`/`16MiB` (both binary, as in the paper's 16 MB
buffer = 2^24 bytes). Anything else is a SpecError, never a silent 0.
"""

from __future__ import annotations

import math
import re

from simulator.errors import SpecError

_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_COUNT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)\s*$", re.IGNORECASE)
_BYTES = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(i?B)?\s*$", re.IGNORECASE)


def _scaled(number: str, suffix: str, text: str, what: str) -> int:
    value = float(number) * _SUFFIX[suffix.upper()]
    if value != int(value):
        raise SpecError(f"{what}: '{text}' is not a whole number")
    if int(value) <= 0:
        raise SpecError(f"{what}: '{text}' must be positive")
    return int(value)


def parse_count(text: str | int, what: str = "value") -> int:
    """`1K`, `64k`, `1M`, `2M`, `1048576` -> int (binary multiples)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise SpecError(f"{what}: '{text}' must be positive")
        return text
    match = _COUNT.match(str(text))
    if not match:
        raise SpecError(f"{what}: '{text}' is not a count (examples: 1024, 1K, 64k, 1M)")
    return _scaled(match.group(1), match.group(2), str(text), what)


def parse_bytes(text: str | int, what: str = "size") -> int:
    """`16MB`, `16MiB`, `32M`, `4096` -> bytes (binary multiples)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise SpecError(f"{what}: '{text}' must be positive")
        return text
    match = _BYTES.match(str(text))
    if not match:
        raise SpecError(f"{what}: '{text}' is not a size in bytes (examples: 16MB, 8MiB, 4096)")
    return _scaled(match.group(1), match.group(2), str(text), what)


def parse_bandwidth(text: str | int | float, what: str = "bandwidth") -> float:
    """`400GiB`, `400GB/s`, `4.3e11` -> bytes per second."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        stripped = str(text).strip().removesuffix("/s")
        try:
            value = float(stripped)
        except ValueError:
            value = float(parse_bytes(stripped, what=what))
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"{what} must be a positive finite number, got {text}")
    return value


def format_count(n: int) -> str:
    """1024 -> '1K', 1048576 -> '1M', 1536 -> '1536'."""
    for suffix in ("T", "G", "M", "K"):
        unit = _SUFFIX[suffix]
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)
