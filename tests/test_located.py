"""spec/yamlio.located: generated plain data as a located tree, every position the source."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.spec.yamlio import LocDict, LocList, LocStr, located
from simulator.support.errors import Loc

SOURCE = "<generated mapping>"
SCALARS = st.one_of(
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.sampled_from(["PE2D", "M", "P", "buffer"]),
)
DATA = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["M", "P", "loops", "arrays", "x"]), inner, max_size=4)
    ),
    max_leaves=30,
)


def _check(plain, tree, strings: dict[str, LocStr]) -> None:
    assert tree == plain
    if isinstance(plain, dict):
        assert type(tree) is LocDict and tree.loc == Loc(SOURCE) and tree.tag is None
        assert tree.key_locs == tree.value_locs == dict.fromkeys(plain, Loc(SOURCE))
        tree.key_locs["probe"] = Loc("elsewhere")  # the two tables are not one dict
        assert "probe" not in tree.value_locs
        for key, value in plain.items():
            _check(value, tree[key], strings)
    elif isinstance(plain, list):
        assert type(tree) is LocList and tree.loc == Loc(SOURCE)
        assert tree.item_locs == [Loc(SOURCE)] * len(plain)
        for value, item in zip(plain, tree, strict=True):
            _check(value, item, strings)
    elif isinstance(plain, str):
        assert type(tree) is LocStr and tree.loc == Loc(SOURCE)
        assert strings.setdefault(plain, tree) is tree  # equal strings share one object
    else:
        assert type(tree) is type(plain)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(DATA)
def test_located_tree_is_the_data_with_the_source_everywhere(plain):
    _check(plain, located(plain, SOURCE), {})
