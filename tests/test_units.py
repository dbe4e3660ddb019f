"""Counts, sizes and divisors: the parsing every CLI value and spec size goes through."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.support.errors import SpecError
from simulator.support.units import MAX_EXPONENT, divisors, parse_bytes, parse_count


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1K", 1024),
        ("64k", 65536),
        ("1M", 1 << 20),
        ("10T", 10 << 40),
        ("2^40", 1 << 40),
        ("2**20", 1 << 20),
    ],
)
def test_counts(text: str, value: int) -> None:
    assert parse_count(text) == value


def test_power_sizes() -> None:
    assert parse_bytes("2^30") == 1 << 30
    assert parse_bytes("1T") == 1 << 40


@pytest.mark.parametrize(
    "text", ["banana", "0", "0^3", f"2^{MAX_EXPONENT + 1}", "-4", "2^", "1.5.2K"]
)
def test_bad_counts_are_one_line_errors(text: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_count(text, "--seq")
    assert "\n" not in str(err.value) and "--seq" in str(err.value)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=10**5))
def test_divisors_match_brute_force(n: int) -> None:
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


def test_divisors_of_huge_numbers_are_bounded_and_correct() -> None:
    n = (1 << 40) * 3**5 * 1_000_003  # 1_000_003 is prime, above nothing in the limit
    ds = divisors(n)
    assert len(ds) == 41 * 6 * 2
    assert all(n % d == 0 for d in ds) and ds == sorted(ds)
    big_prime = (1 << 61) - 1  # Mersenne prime beyond the trial-division limit
    assert divisors(big_prime) == [1, big_prime]


def test_spec_expressions_stay_real() -> None:
    """A table expression such as `sqrt(depth/64)**1.56` with a negative base (a mutated
    spec) is one line, not a complex number deep in pricing."""
    import pytest

    from simulator.spec.expr import evaluate
    from simulator.support.errors import SpecError

    assert evaluate("(64/64) ** 1.56", {}, None) == 1.0
    with pytest.raises(SpecError, match="fractional power"):
        evaluate("(-2) ** 0.5", {}, None)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("400GB", 400 * 10**9),  # decimal SI: B after the multiple
        ("400GiB", 400 * 2**30),  # binary: iB
        ("400G", 400 * 2**30),  # a bare multiple: binary, as in counts
        ("1.6TB", 16 * 10**11),  # a fraction that makes whole bytes
        ("16MiB", 2**24),
        ("16MB", 16 * 10**6),
        ("1.5KiB", 1536),
        ("2PB", 2 * 10**15),
    ],
)
def test_decimal_and_binary_sizes_are_distinct(text: str, value: int) -> None:
    assert parse_bytes(text) == value


def test_a_fraction_of_bytes_is_refused_and_bandwidths_follow_sizes() -> None:
    from simulator.support.units import parse_bandwidth

    with pytest.raises(SpecError, match="not a whole number"):
        parse_bytes("1.6TiB")  # 1759218604441.6 bytes
    assert parse_bandwidth("400GB/s") == 4e11
    assert parse_bandwidth("400GiB") == 400 * 2**30
    assert parse_bandwidth("1.6TB/s") == 1.6e12


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=2**64))
def test_counts_print_short_and_read_back(n: int) -> None:
    """A count prints with a binary multiple only while the number stays short (2^64 is
    16E, not 16777216T), else as its digits; either way it reads back exactly."""
    from simulator.support.units import format_count

    text = format_count(n)
    assert parse_count(text) == n
    assert text == str(n) or (len(text) <= 5 and text[-1] in "KMGTPE")


def test_the_largest_count_is_short() -> None:
    from simulator.support.units import format_count

    assert format_count(2**64) == "16E"
    assert format_count(10**12) == "1000000000000"  # not 976562500K
    assert format_count(3 * 2**40) == "3T"
