"""Counting a filter's computed tiles (`simulator.plan.masks.active_count`) against the
definition, by enumerating every point: a combination of the loops counts when, for each
constraint, some point of its box (the other components over their full ranges) meets it."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cascade.parse import load_cascade
from simulator.plan.masks import Constraint, active_count, peak_fraction
from simulator.strategies.regions import block_values, kept_extent


def _brute(cons, loops, extents) -> int:
    names = sorted(extents)
    count = 0
    for fixed in itertools.product(*(range(extents[lp]) for lp in loops)):
        at = dict(zip(loops, fixed, strict=True))
        free = [n for n in names if n not in at]
        ok = True
        for con in cons:
            coef = dict(con.coef)
            met = False
            for rest in itertools.product(*(range(extents[n]) for n in free)):
                point = {**at, **dict(zip(free, rest, strict=True))}
                if sum(a * point[c] for c, a in coef.items()) + con.const <= 0:
                    met = True
                    break
            ok = ok and met
        count += ok
    return count


@st.composite
def _cases(draw):
    """Two ranks split into tile components (`m = m2*M1*M0 + m1*M0 + m0`), constraints on
    a weighted difference of the ranks (causal, windows, strides) and a stray component with
    its own coefficient; some components looped over, the rest free."""
    extents: dict[str, int] = {}
    rank_parts: list[list[tuple[str, int]]] = []
    for rank in "MP":
        levels = draw(st.integers(1, 3))
        sizes = [draw(st.integers(1, 4)) for _ in range(levels)]
        stride, parts = 1, []
        for i, size in reversed(list(enumerate(sizes))):
            name = f"{rank}{i}"
            extents[name] = size
            parts.append((name, stride))
            stride *= size
        rank_parts.append(parts)
    extents["X"] = draw(st.integers(1, 3))
    cons = []
    for _ in range(draw(st.integers(1, 3))):
        wm, wp = draw(st.sampled_from([(1, -1), (-1, 1), (2, -1), (1, -3), (1, 0), (0, -2)]))
        coef: dict[str, int] = {}
        for w, parts in ((wm, rank_parts[0]), (wp, rank_parts[1])):
            for name, stride in parts:
                if w:
                    coef[name] = w * stride
        x = draw(st.integers(-2, 2))
        if x:
            coef["X"] = x
        const = draw(st.integers(-6, 6))
        cons.append(Constraint(tuple(sorted(coef.items())), const))
    names = sorted(extents)
    loops = tuple(draw(st.permutations(names))[: draw(st.integers(0, len(names)))])
    return tuple(cons), loops, extents


@settings(max_examples=300, deadline=None)
@given(_cases())
def test_active_count_is_the_count_of_boxes_holding_a_kept_point(case):
    cons, loops, extents = case
    assert active_count(cons, loops, extents) == _brute(cons, loops, extents)


def test_a_causal_mask_over_two_level_tiles():
    """m = m1*4 + m0 against p = p1*2 + p0, kept where m <= p; tiles of (m1, p1), m0 and p0
    inside: tile (m1, p1) is computed when 4*m1 <= 2*p1 + 1."""
    cons = (Constraint((("M0", 1), ("M1", 4), ("P0", -1), ("P1", -2)), 0),)
    extents = {"M0": 4, "M1": 3, "P0": 2, "P1": 6}
    expected = sum(4 * m1 <= 2 * p1 + 1 for m1 in range(3) for p1 in range(6))
    assert active_count(cons, ("M1", "P1"), extents) == expected == 12
    # every loop enumerated: the points themselves, m <= p
    loops = ("M1", "M0", "P1", "P0")
    assert active_count(cons, loops, extents) == sum(m <= p for m in range(12) for p in range(12))


def _box_kept(cons, at, extents) -> bool:
    """Some point of the box (`at` fixed, every other component over its range) meets each
    constraint (one by one, as the counting defines it)."""
    free = [n for n in sorted(extents) if n not in at]
    for con in cons:
        coef = dict(con.coef)
        if not any(
            sum(a * {**at, **dict(zip(free, rest, strict=True))}[c] for c, a in coef.items())
            + con.const
            <= 0
            for rest in itertools.product(*(range(extents[n]) for n in free))
        ):
            return False
    return True


@settings(max_examples=200, deadline=None)
@given(_cases(), st.integers(0, 4))
def test_peak_fraction_is_the_fullest_outer_iterations_share_of_kept_inner_tiles(case, cut):
    """What a tile kept across the inner loops holds at its fullest: over every combination
    of the outer loops, the most inner combinations holding a kept point."""
    cons, loops, extents = case
    outer, inner = loops[:cut], loops[cut:]
    total = 1
    for lp in inner:
        total *= extents[lp]
    peak = 0
    for o in itertools.product(*(range(extents[lp]) for lp in outer)):
        at = dict(zip(outer, o, strict=True))
        kept = sum(
            _box_kept(cons, {**at, **dict(zip(inner, i, strict=True))}, extents)
            for i in itertools.product(*(range(extents[lp]) for lp in inner))
        )
        peak = max(peak, kept)
    expected = peak / total if total else 1.0
    assert peak_fraction(cons, outer, inner, extents) == (expected if inner else 1.0)


def _scores(expr: str, tmp_path):
    """The scores Einsum `S[m, p]` of a one-line cascade (16 keys, 16 queries)."""
    path = tmp_path / "c.yaml"
    sink = ", SINK: 4" if "SINK" in expr else ""
    path.write_text(
        f"name: c\nshapes: {{M: 16, P: 16, E: 4{sink}}}\neinsum:\n  declaration:\n"
        "    Q: [E, P]\n    K: [E, M]\n    S: [M, P]\n"
        f'  expressions:\n    - "{expr}"\n'
    )
    return load_cascade(path).einsum("S")


@pytest.mark.parametrize(
    ("expr", "kept"),
    [
        ("S[m, p] = Q[e, p] * K[e, m : m < SINK]", 4),  # StreamingLLM's sinks
        ("S[m, p] = Q[e, p] * K[e, m : m >= 2]", 14),
        ("S[m, p] = Q[e, p] * K[e, m : 2 * m < 9]", 5),  # m = 0 .. 4
        ("S[m, p] = Q[e, p] * K[e, m : SINK <= m + 1]", 13),  # m >= 3
        ("S[m, p] = Q[e, p] * K[e, m : m == 5]", 1),
        ("S[m, p] = Q[e, p] * K[e, m : m <= p]", 16),  # a band: every key for some query
        ("S[m, p] = Q[e, p] * K[e, m]", 16),
    ],
)
def test_the_region_a_filter_keeps_of_a_rank(expr, kept, tmp_path):
    """How many of a rank's values an Einsum's filters on that index alone keep (a region a
    tile can be shaped to); a filter relating it to another index bounds nothing."""
    e = _scores(expr, tmp_path)
    assert kept_extent(e, "M", {"M": 16, "P": 16, "E": 4, "SINK": 4}) == kept


@pytest.mark.parametrize(
    ("expr", "kept"),
    [
        ("S[m, p] = Q[e, p] * K[e, m : m <= p]", 13 + 14 + 15 + 16),  # causal: the last block
        ("S[m, p] = Q[e, p : p <= m + 2] * K[e, m : m <= p + 2]", 4 * 5),  # a band of 5 keys
        ("S[m, p] = Q[e, p : p < 2] * K[e, m]", 2 * 16),  # two global query rows
        ("S[m, p] = Q[e, p] * K[e, m : m < SINK]", 4 * 4),  # four sink keys a row
        ("S[m, p] = Q[e : e < 2, p] * K[e, m : m <= p]", 58),  # another rank's filter: more
        ("S[m, p] = Q[e, p] * K[e, m]", 4 * 16),
    ],
)
def test_the_points_a_block_of_rows_keeps(expr, kept, tmp_path):
    """How many (query, key) points a block of 4 query rows keeps at its fullest: a band
    keeps its band, a few global rows their rows, a causal block its triangle's widest
    rows (16 x 16, blocks of 4 starting at 0)."""
    e = _scores(expr, tmp_path)
    assert block_values(e, "M", "P", 4, {"M": 16, "P": 16, "E": 4, "SINK": 4}) == kept


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=4),
    st.lists(
        st.tuples(st.lists(st.integers(-5, 5), min_size=4, max_size=4), st.integers(-20, 20)),
        min_size=1,
        max_size=3,
    ),
    st.booleans(),
)
def test_a_few_combinations_counted_in_python_are_numpys_counts(sizes, drawn, with_axis):
    """The spans of a few enumerated combinations, counted one at a time in Python, are
    the vectorised count's, element by element (the choice between them changes no
    number)."""
    from simulator.plan import masks

    names = ["a", "b", "c", "d"][: len(sizes)]
    extents = dict(zip(names, sizes, strict=True))
    axis = (names[-1],) if with_axis else ()
    others = [c for c in names if c not in axis]
    rows = [({c: a for c, a in zip(names, co, strict=False) if a}, base) for co, base in drawn]
    n = math.prod(extents[c] for c in axis)
    few = masks._few_spans(rows, axis, others, extents, n)
    saved = masks.FEW_COMBINATIONS
    try:
        masks.FEW_COMBINATIONS = -1  # every count vectorised
        vectorised = masks._spans(rows, axis, others, extents)
    finally:
        masks.FEW_COMBINATIONS = saved
    assert few == vectorised.tolist()
    # and by brute force: each combination's axis values that meet every row
    for i, values in enumerate(itertools.product(*(range(extents[c]) for c in others))):
        point = dict(zip(others, values, strict=True))

        def holds(x: int, point=point) -> bool:
            at = {**point, **({axis[0]: x} if axis else {})}
            return all(sum(a * at[c] for c, a in co.items()) + base <= 0 for co, base in rows)

        kept = sum(holds(x) for x in range(n))
        assert few[i] == kept
