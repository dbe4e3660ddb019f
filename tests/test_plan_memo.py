"""The phase-plan memo (simulator/plan/memo.py): a plan kept under the extents it read is
handed only to extents that agree on those names, and a search with it gives every
candidate the result a search planning each afresh gives."""

from __future__ import annotations

import pytest

from simulator.cascade.parse import load_cascade
from simulator.mapper import search as search_module
from simulator.mapper.search import SearchOptions, search
from simulator.plan.memo import PhaseMemo, ReadExtents
from simulator.spec.arch_file import load_architecture
from simulator.spec.workload import make_workload
from simulator.strategies.context import bind_context
from simulator.support.paths import resolve_spec

from .conftest import DATA


class _Phase:
    """A stand-in phase: the memo keys phases by identity."""


def _counting(reads):
    calls = []

    def make(extents):
        calls.append(dict(dict.items(extents)))
        return reads(extents)

    return make, calls


def test_a_plan_is_kept_under_the_names_it_read_only():
    memo, phase, ctx = PhaseMemo(), _Phase(), ("m", (("QK", "PE2D"),))
    make, calls = _counting(lambda x: x["M1"] * 10 + x.get("P1", 0))
    assert memo.plan(phase, ctx, {"M1": 2, "P1": 3, "E": 64}, make) == 23
    assert memo.plan(phase, ctx, {"M1": 2, "P1": 3, "E": 128}, make) == 23  # E unread
    assert len(calls) == 1 and memo.hits == 1
    assert memo.plan(phase, ctx, {"M1": 2, "P1": 4, "E": 64}, make) == 24  # P1 read
    assert memo.plan(phase, ctx, {"M1": 2, "E": 64}, make) == 20  # P1 absent is a value
    assert len(calls) == 3


def test_a_name_tested_for_is_a_name_read():
    memo, phase = PhaseMemo(), _Phase()
    make, calls = _counting(lambda x: 1 if "W" in x else 0)
    assert memo.plan(phase, (), {"M": 4}, make) == 0
    assert memo.plan(phase, (), {"M": 4, "W": 8}, make) == 1
    assert len(calls) == 2


@pytest.mark.parametrize(
    "whole",
    [lambda x: sum(x.values()), lambda x: len(x), lambda x: dict(x)["A"], lambda x: {**x}["A"]],
)
def test_a_plan_that_read_everything_is_kept_for_the_same_extents_only(whole):
    memo, phase = PhaseMemo(), _Phase()
    make, calls = _counting(whole)
    memo.plan(phase, (), {"A": 1, "B": 2}, make)
    memo.plan(phase, (), {"A": 1, "B": 2}, make)
    memo.plan(phase, (), {"A": 1, "B": 3}, make)
    memo.plan(phase, (), {"A": 1, "B": 2, "C": 0}, make)
    assert len(calls) == 3


def test_another_context_or_phase_is_planned_afresh():
    memo, one, two = PhaseMemo(), _Phase(), _Phase()
    make, calls = _counting(lambda x: x["A"])
    arch_a, arch_b = object(), object()
    memo.plan(one, ("m", arch_a), {"A": 1}, make)
    memo.plan(two, ("m", arch_a), {"A": 1}, make)  # another phase
    memo.plan(one, ("m", arch_b), {"A": 1}, make)  # another architecture (by identity)
    memo.plan(one, ("n", arch_b), {"A": 1}, make)  # another mapping name (by value)
    memo.plan(one, ("n", arch_b), {"A": 1}, make)
    assert len(calls) == 4


def test_read_extents_records_reads_and_stays_a_dict():
    x = ReadExtents({"A": 1, "B": 2})
    assert x["A"] == 1 and x.get("C", 5) == 5 and "B" in x
    assert x.read == {"A", "B", "C"} and not x.everything
    assert list(x) == ["A", "B"] and x.everything
    assert isinstance(x, dict) and x == {"A": 1, "B": 2}


class _Afresh(PhaseMemo):
    """A memo that keeps nothing: every phase planned for every candidate."""

    def plan(self, phase, context, extents, make):
        return make(extents)


CASES = [
    (DATA / "paper_cascades_heldout" / "palm-parallel-layer-3pass.yaml", "4K", "fused"),
    (resolve_spec("cascades", "attention-gqa-causal-3pass"), "16K", "fused"),
    (resolve_spec("cascades", "rmsnorm-ffn"), "4K", "fused"),
]


@pytest.mark.parametrize(("path", "seq", "strategy"), CASES, ids=lambda v: getattr(v, "stem", v))
def test_every_candidate_of_a_search_is_what_planning_it_afresh_gives(
    path, seq, strategy, monkeypatch
):
    """Each candidate the search evaluates (its result, or the error it raised) is the same
    with the memo as with every phase planned afresh; so is the mapping found."""
    monkeypatch.setenv("FUSEMAX_SIM_CACHE", "off")
    c = load_cascade(path)
    arch = load_architecture(resolve_spec("arch", "fusemax"))
    shape = {"D": 4096, "H": 32, "N": 16384} if "palm" in path.name else {}
    if path.stem == "rmsnorm-ffn":
        shape = {"E": 4096, "F": 14336, "O": 4096}
    w = make_workload("llama3-8b", seq, shape=shape)
    ctx = bind_context(c, arch, w, str(path), "fusemax")
    options = SearchOptions(strategy=strategy, search_s=0.5)
    kept: list = []
    found = search(ctx, options, "auto-test", log=kept)
    monkeypatch.setattr(search_module, "PhaseMemo", _Afresh)
    afresh: list = []
    again = search(ctx, options, "auto-test", log=afresh)
    assert len(kept) == len(afresh) > 10
    for (label, a), (label_b, b) in zip(kept, afresh, strict=True):
        assert label == label_b
        assert (a == b) if not isinstance(a, Exception) else str(a) == str(b), label
    assert found.data == again.data
