"""Counts, sizes and divisors: the parsing every CLI value and spec size goes through."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import SpecError
from simulator.units import MAX_EXPONENT, divisors, parse_bytes, parse_count


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

    from simulator.errors import SpecError
    from simulator.spec.expr import evaluate

    assert evaluate("(64/64) ** 1.56", {}, None) == 1.0
    with pytest.raises(SpecError, match="fractional power"):
        evaluate("(-2) ** 0.5", {}, None)
