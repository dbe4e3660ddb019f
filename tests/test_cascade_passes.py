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


# --------------------------------------------------------------------------------------
# Small cascades written inline (expected values worked out by hand, see each comment).


def _report(decl: dict[str, str], exprs: list[str], shapes: str = ""):
    from simulator.cascade.parse import loads_cascade

    text = (
        (f"shapes: {shapes}\n" if shapes else "")
        + "einsum:\n  declaration:\n"
        + "".join(f"    {k}: {v}\n" for k, v in decl.items())
        + "  expressions:\n"
        + "".join(f'    - "{e}"\n' for e in exprs)
    )
    return analyze_passes(loads_cascade(text, "inline.yaml"))


def _ranks(report) -> dict[str, int]:
    return {g: n for g, n, _ in report.per_rank}


CAUSAL = (
    {
        "Q": "[E, P]",
        "K": "[E, M]",
        "V": "[F, M]",
        "QK": "[M, P]",
        "GM": "[P]",
        "SN": "[M, P]",
        "SD": "[P]",
        "A": "[M, P]",
        "AV": "[F, P]",
    },
    [
        "QK[m, p] = Q[e, p] * K[e, m]",
        "GM[p] = QK[m : m <= p, p] :: max(m)",
        "SN[m, p] = exp(QK[m, p] - GM[p])",
        "SD[p] = SN[m : m <= p, p]",
        "A[m, p] = SN[m : m <= p, p] / SD[p]",
        "AV[f, p] = A[m, p] * V[f, m]",
    ],
)


def test_causal_filtered_reductions_still_separate_passes():
    # For the last query p the prefix m <= p is the whole fibre: GM and SD are full
    # reductions there, exactly as in the unmasked 3-pass cascade.
    report = _report(*CAUSAL)
    assert report.max_passes == 3
    assert dict((g, why) for g, _, why in report.per_rank)["M"] == ("GM", "SD")
    qk = _fiber(report, "QK", "M")
    assert (qk.passes, qk.live_footprint) == (3, "M")


def test_filter_keeping_the_whole_fibre_is_a_full_reduction():
    # Cascade 1 with a filter that keeps every k: still 2 passes over k of A.
    report = _report(
        {"A": "[K]", "B": "[K]", "Y": "[]", "Z": "[]"},
        ["Y = A[k : k >= 0] * B[k]", "Z = Y * A[k]"],
    )
    assert _ranks(report) == {"K": 2}
    a = _fiber(report, "A", "K")
    assert (a.passes, a.live_footprint) == (2, "K")


def test_initialisation_dependencies_count():
    # R starts from Y = A.B, a full reduction over k; R's loop then reads A[k] again.
    report = _report(
        {"A": "[K]", "B": "[K]", "Y": "[]", "R": "[K]", "Z": "[]"},
        ["Y = A[k] * B[k]", "R[0] = Y", "R[k+1] = R[k] + A[k]   until k == K", "Z = R[K]"],
    )
    assert _ranks(report) == {"K": 2}
    assert dict((g, why) for g, _, why in report.per_rank)["K"] == ("Y",)
    a = _fiber(report, "A", "K")
    assert (a.passes, a.live_footprint) == (2, "K")


def test_input_first_read_in_a_later_pass_is_streamed():
    # C is read once, by Z in the second pass over k: one pass, nothing kept live.
    report = _report(
        {"A": "[K]", "B": "[K]", "C": "[K]", "Y": "[]", "Z": "[]"},
        ["Y = A[k] * B[k]", "Z = Y * C[k]"],
    )
    assert _ranks(report) == {"K": 2}  # the rank k is still walked twice
    for tensor in ("A", "B", "C"):
        fiber = _fiber(report, tensor, "K")
        assert (fiber.passes, fiber.live_footprint) == (1, "1"), tensor


def test_element_wise_products_run_in_the_earliest_pass():
    # The convention of the reference table (2-pass attention: SLN is produced in pass 1 and
    # kept, M): an Einsum runs in the earliest pass its inputs allow. D = 2C runs in pass 1
    # and Z reads it in pass 2, so D's fibre stays live, or C's does if D is recomputed.
    report = _report(
        {"A": "[K]", "B": "[K]", "C": "[K]", "D": "[K]", "Y": "[]", "Z": "[]"},
        ["D[k] = C[k] * 2", "Y = A[k] * B[k]", "Z = Y * D[k]"],
    )
    for tensor in ("C", "D"):
        fiber = _fiber(report, tensor, "K")
        assert (fiber.passes, fiber.live_footprint) == (2, "K"), tensor
    # Read beside Z in the second pass instead, C streams.
    report = _report(
        {"A": "[K]", "B": "[K]", "C": "[K]", "D": "[K]", "Y": "[]", "Z": "[]"},
        ["Y = A[k] * B[k]", "D[k] = C[k] * Y", "Z = D[k]"],
    )
    for tensor in ("C", "D"):
        fiber = _fiber(report, tensor, "K")
        assert (fiber.passes, fiber.live_footprint) == (1, "1"), tensor
    # A product that feeds the first pass and is read again in the second.
    report = _report(
        {"A": "[K]", "B": "[K]", "D": "[K]", "Y": "[]", "Z": "[]"},
        ["D[k] = A[k] * 2", "Y = D[k] * B[k]", "Z = Y * D[k]"],
    )
    for tensor in ("A", "D"):
        fiber = _fiber(report, tensor, "K")
        assert (fiber.passes, fiber.live_footprint) == (2, "K"), tensor


@pytest.mark.parametrize(
    "name", ["attention-3pass", "attention-3pass-deferred-div", "attention-naive"]
)
def test_v_is_streamed_once_in_the_last_pass(name):
    v = _fiber(analyze_passes(load_cascade(CASCADES / f"{name}.yaml")), "V", "M")
    assert (v.passes, v.live_footprint) == (1, "1")


@pytest.mark.parametrize("name", ["attention-2pass", "attention-1pass"])
def test_partition_copies_are_views_not_reads(name):
    # BV[f, m1, m0] = V[f, m1*M0 + m0] moves no data of its own: V and BV are read once,
    # by AV (2-pass, second pass) or SLNV (1-pass), and stream.
    report = analyze_passes(load_cascade(CASCADES / f"{name}.yaml"))
    for tensor in ("V", "BV"):
        fiber = _fiber(report, tensor, "M")
        assert (fiber.passes, fiber.live_footprint) == (1, "1"), tensor


def test_second_linear_weight_is_streamed():
    # W2 is read once, by FFN2; FFN2 runs after FFN1 reduced over d, but W2 is not re-read.
    report = analyze_passes(load_cascade(CASCADES / "linear-layers.yaml"))
    assert _ranks(report)["D"] == 2
    w2 = _fiber(report, "W2", "D")
    assert (w2.passes, w2.live_footprint) == (1, "1")


def test_footprint_is_the_tensors_own_fibre():
    # LM and SLD are [M1, P]: a whole fibre of theirs is M1 values, not M = M1 x M0.
    report = analyze_passes(load_cascade(CASCADES / "attention-2pass.yaml"))
    for tensor in ("LM", "SLD"):
        fiber = _fiber(report, tensor, "M")
        assert (fiber.passes, fiber.live_footprint) == (2, "M1"), tensor
    sln = _fiber(report, "SLN", "M")
    assert (sln.passes, sln.live_footprint) == (2, "M")  # M1 x M0 is the whole of M


def test_recurrence_with_a_full_reduction_per_step_fails_loudly():
    # Every step of k reduces T over j before the next step can read it: K + 1 passes over
    # j, a count that grows with K. The analysis refuses instead of reporting a capped count.
    from simulator.support.errors import SpecError

    with pytest.raises(SpecError, match="grows with"):
        _report(
            {"A": "[J]", "T": "[K, J]", "S": "[K]", "Z": "[J]"},
            [
                "T[0, j] = A[j]",
                "S[k] = T[k, j]",
                "T[k+1, j] = T[k, j] + S[k]   until k == K",
                "Z[j] = T[K, j]",
            ],
        )
