"""Pass counts and live footprints against the table of the reference notes (section 4)."""

from __future__ import annotations

import json

import pytest

from simulator.cascade.__main__ import main
from simulator.cascade.parse import load_cascade
from simulator.cascade.passes import analyze_passes

from .conftest import CASCADES

# (file, max passes, tensor, rank, passes of that fibre, live footprint) -- reference table.
EXPECTED = [
    ("cascade1-dot", 2, "A", "K", 2, "K"),
    ("cascade2-reassociated", 1, "A", "K", 1, "1"),
    ("cascade3-iterative", 1, "A", "K", 1, "1"),
    ("attention-3pass", 3, "QK", "M", 3, "M"),
    ("attention-3pass", 3, "SN", "M", 2, "M"),
    ("attention-2pass", 2, "BQK", "M", 2, "M"),
    ("attention-2pass", 2, "SLN", "M", 2, "M"),
    ("attention-1pass", 1, "BQK", "M", 1, "M0"),
    ("attention-3pass-deferred-div", 2, "QK", "M", 2, "M"),
]


def _fiber(report, tensor, rank):
    return next(f for f in report.fibers if f.tensor == tensor and f.rank == rank)


@pytest.mark.parametrize("name,max_passes,tensor,rank,passes,footprint", EXPECTED)
def test_reference_pass_table(name, max_passes, tensor, rank, passes, footprint):
    report = analyze_passes(load_cascade(CASCADES / f"{name}.yaml"))
    assert report.max_passes == max_passes
    fiber = _fiber(report, tensor, rank)
    assert (fiber.passes, fiber.live_footprint) == (passes, footprint)


def test_three_pass_boundaries_are_the_two_full_reductions():
    report = analyze_passes(load_cascade(CASCADES / "attention-3pass.yaml"))
    assert dict((g, why) for g, _, why in report.per_rank)["M"] == ("GM", "SD")


def test_iterative_ranks_add_no_pass():
    # RM, RD, RNV iterate over m1 and read only the previous step: no pass over M.
    report = analyze_passes(load_cascade(CASCADES / "attention-1pass.yaml"))
    for tensor in ("RM", "RD", "RNV"):
        assert _fiber(report, tensor, "M").passes == 1


def test_only_the_reduced_rank_gets_passes():
    report = analyze_passes(load_cascade(CASCADES / "attention-3pass.yaml"))
    per_rank = {g: n for g, n, _ in report.per_rank}
    assert per_rank == {"E": 1, "P": 1, "M": 3, "F": 1}


def test_cli_json_shape(run_cli):
    code, out, err = run_cli(
        main,
        [
            "passes",
            str(CASCADES / "attention-1pass.yaml"),
            "--shape",
            "M=4096,P=4096,E=64,F=64",
            "--format",
            "json",
        ],
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["cascade"] == "attention-1pass" and data["max_passes"] == 1
    bqk = next(f for f in data["fibers"] if f["tensor"] == "BQK" and f["rank"] == "M")
    assert bqk["passes"] == 1 and bqk["live_footprint"] == "M0"
    assert bqk["live_footprint_values"] == 256  # default chunk of the file, M0 = 256


def test_cli_table_mentions_max(run_cli):
    code, out, _ = run_cli(main, ["passes", "attention-3pass"])
    assert code == 0 and "3 pass(es)" in out
