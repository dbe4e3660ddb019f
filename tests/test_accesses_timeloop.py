"""Issue 4, point 2: the access-count model reproduces a real Timeloop run exactly."""

from __future__ import annotations

import re

import pytest

from simulator.plan.accesses import DataSpace, LevelMapping, Loop, Problem, analyze
from simulator.support.errors import SpecError
from simulator.timeloop.backend import LevelEnergy, energy_pj
from simulator.timeloop.problems import mapping_from_map_text, mapping_from_timeloop

from .conftest import DATA

CHECK = DATA / "timeloop-check"
LEVELS = ["DRAM", "L3", "reg_file_1d", "reg_file"]
PROBLEM = Problem(
    "QK",
    (("B", 64), ("E", 256), ("H", 16), ("M", 16), ("N", 256), ("P", 4096)),
    (
        DataSpace("Q", ("B", "E", "H", "P")),
        DataSpace("BK", ("B", "E", "H", "M", "N")),
        DataSpace("QK", ("B", "H", "M", "N", "P"), read_write=True),
    ),
)


def _stats() -> dict:
    """Per (level, tensor): Timeloop's counts and energy; plus totals (parsed from stats)."""
    text = (CHECK / "timeloop-model.stats.txt").read_text()
    out: dict = {"levels": {}}
    for block in re.split(r"\nLevel \d+\n-+\n", text)[1:]:
        name = re.search(r"=== (\w+) ===", block).group(1)
        level: dict = {"tensors": {}}
        leak = re.search(r"Leakage energy \(total\)\s*: ([\d.]+) pJ", block)
        level["leak"] = float(leak.group(1)) if leak else 0.0
        for tensor, body in re.findall(r"^    (\w+):\n((?:        .*\n)+)", block, re.M):
            fields = dict(re.findall(r"        ([A-Za-z ()-]+?)\s*: ([\d.]+)", body))
            level["tensors"][tensor] = fields
        if name == "mac":
            level["computes"] = int(re.search(r"Computes \(total\)\s*: (\d+)", block).group(1))
            level["energy"] = float(re.search(r"Energy \(total\)\s*: ([\d.]+)", block).group(1))
        out["levels"][name] = level
    out["energy_uj"] = float(re.search(r"Energy: ([\d.]+) uJ", text).group(1))
    out["fj"] = dict(re.findall(r"\n    (\w+)\s+= ([\d.]+)", text.split("fJ/Compute")[1]))
    return out


@pytest.fixture(scope="module")
def report():
    text = (CHECK / "timeloop-model.map.txt").read_text()
    return analyze(PROBLEM, mapping_from_map_text(text, LEVELS))


@pytest.fixture(scope="module")
def stats():
    return _stats()


def test_every_count_matches_timeloop(report, stats):
    compared = 0
    for level, tensors in ((lv, s["tensors"]) for lv, s in stats["levels"].items()):
        for tensor, fields in tensors.items():
            ours = report.of(level, tensor)
            inst = ours.instances
            assert ours.reads // inst == int(fields["Scalar reads (per-instance)"]), (level, tensor)
            assert ours.fills // inst == int(fields["Scalar fills (per-instance)"]), (level, tensor)
            assert ours.updates // inst == int(fields["Scalar updates (per-instance)"]), (
                level,
                tensor,
            )
            assert ours.capacity == int(fields["Utilized capacity"]), (level, tensor)
            assert inst == int(fields["Utilized instances (max)"]), (level, tensor)
            compared += 1
    assert compared == 7
    assert report.computes == stats["levels"]["mac"]["computes"]
    assert report.cycles == 67108864


def _derived_energies(stats) -> dict[str, LevelEnergy]:
    """Per-scalar energies of the run, solved from its per-tensor energies and counts.

    A level with an input and an output separates read from write (reg_file); a level whose
    tensors all have the same counts (L3) only fixes their weighted sum, so the write is
    taken as Timeloop's reported vector access energy and the read solved from the rest."""
    levels = stats["levels"]
    per = {}
    for name, level in levels.items():
        if name == "mac":
            continue
        rows = [
            (
                float(f["Scalar reads (per-instance)"]),
                float(f["Scalar fills (per-instance)"]) + float(f["Scalar updates (per-instance)"]),
                float(f["Energy (per-instance)"]),
            )
            for f in level["tensors"].values()
        ]
        (r1, w1, e1) = rows[0]
        distinct = [row for row in rows if (row[0], row[1]) != (r1, w1)]
        if distinct:
            r2, w2, e2 = distinct[0]
            det = r1 * w2 - r2 * w1
            read = (e1 * w2 - e2 * w1) / det
            write = (r1 * e2 - r2 * e1) / det
        elif w1 == 0:
            read, write = e1 / r1, 0.0
        else:
            write = 2759.44 / 256 if name == "L3" else e1 / (r1 + w1)
            read = (e1 - w1 * write) / r1
        per[name] = LevelEnergy(read, write, write, 1, 0.0)
    return per


def test_energy_and_fj_per_compute_within_half_percent(report, stats):
    energies = _derived_energies(stats)
    mac_pj = stats["levels"]["mac"]["energy"] / stats["levels"]["mac"]["computes"]
    by_level = energy_pj(report, energies, mac_pj)
    leak = sum(level["leak"] for level in stats["levels"].values())
    total_uj = (sum(by_level.values()) + leak) / 1e6
    assert total_uj == pytest.approx(stats["energy_uj"], rel=0.005)
    fj = {
        lv: (by_level.get(lv, 0.0) + stats["levels"].get(lv, {}).get("leak", 0.0))
        * 1000
        / report.computes
        for lv in ("reg_file", "L3", "DRAM")
    }
    fj["mac"] = by_level["compute"] * 1000 / report.computes
    for level, value in fj.items():
        assert value == pytest.approx(float(stats["fj"][level]), rel=0.005), level
    assert total_uj * 1e9 / report.computes == pytest.approx(float(stats["fj"]["Total"]), rel=0.005)


def test_yaml_mapping_equals_printed_mapping(report):
    entries = [
        {
            "target": "DRAM",
            "type": "temporal",
            "factors": ["B=64", "H=16", "M=16", "E=1"],
            "permutation": ["E", "M", "H", "B"],
        },
        {"target": "DRAM", "type": "dataspace", "keep": ["Q", "BK"], "bypass": ["QK"]},
        {
            "target": "L3",
            "type": "temporal",
            "factors": ["P=16", "E=256"],
            "permutation": ["E", "P"],
        },
        {"target": "L3", "type": "dataspace", "keep": ["Q", "BK"], "bypass": ["QK"]},
        {"target": "reg_file_1d", "type": "dataspace", "keep": [], "bypass": ["Q", "BK", "QK"]},
        {
            "target": "PE_col",
            "type": "spatial",
            "factors": ["P=256"],
            "permutation": ["P"],
            "split": 1,
        },
        {"target": "PE", "type": "spatial", "factors": ["N=256"], "permutation": ["N"], "split": 0},
        {"target": "reg_file", "type": "dataspace", "keep": ["Q", "BK", "QK"]},
    ]
    ours = analyze(PROBLEM, mapping_from_timeloop(entries, LEVELS))
    assert ours.counts == report.counts


def test_factors_must_multiply_to_the_problem():
    bad = (LevelMapping("DRAM", (Loop("B", 64),), (), frozenset({"Q"})),)
    with pytest.raises(SpecError, match="multiply to"):
        analyze(PROBLEM, bad)


def test_output_revisits_are_filled_back_and_drained():
    # Z[m] += A[k, m]: k outside m at the buffer's parent forces partial sums back and forth.
    problem = Problem(
        "GEMV",
        (("K", 4), ("M", 8)),
        (DataSpace("A", ("K", "M")), DataSpace("Z", ("M",), read_write=True)),
    )
    mapping = (
        LevelMapping("DRAM", (Loop("K", 4), Loop("M", 2)), (), frozenset({"A", "Z"})),
        LevelMapping("buf", (Loop("M", 4),), (), frozenset({"Z"})),
    )
    r = analyze(problem, mapping)
    z = r.of("buf", "Z")
    # 4 x 2 visits of a 4-element tile; 2 distinct tiles; 32 updates from the computes.
    assert (z.updates, z.fills, z.capacity) == (32, 4 * 6, 4)
    assert z.reads == 32 - 8  # Timeloop: accumulation reads only, no read for a drain
    assert r.of("DRAM", "Z").updates == 32
    # physically each of the 8 visits drains its 4 values out of the buffer: 32 more reads
    drained = analyze(problem, mapping, drain_reads=True).of("buf", "Z")
    assert drained.reads == (32 - 8) + 32
    assert (drained.updates, drained.fills) == (z.updates, z.fills)
