"""A 2D array's fan-out exported as two nested spatial levels (X, then Y), as the FuseMax
artifact writes its arrays and as the real Timeloop v3.0.3 runs of
`tests/data/timeloop-real/` took them: one 65,536-way level never finishes in Timeloop's
multicast analysis. The export writes what those runs read, the import reads those inputs
back to Timeloop's own access counts, and the nested form counts what the flat one does."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml

from simulator.drivers.configs import Specs, prepare
from simulator.export import main as export_main
from simulator.export import write
from simulator.plan.accesses import analyze
from simulator.spec.workload import make_workload
from simulator.support.errors import SpecError
from simulator.timeloop.inputs import (
    PROCESSED,
    configuration_views,
    export_configuration,
    read_einsum,
    read_processed,
)

from .conftest import DATA

REAL = DATA / "timeloop-real" / "timeloop-v3.0.3"
# Points whose exports the real runs read (full 256 x 256 arrays), as --accel / --seq.
EXPORTED = {"binding-bert-4K": "binding", "unfused-bert-4K": "unfused", "flat-bert-4K": "flat"}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    out = {}
    for point, accel in EXPORTED.items():
        d = tmp_path_factory.mktemp(point)
        argv = ["timeloop", "--accel", accel, "--model", "bert", "--seq", "4K", "-o", str(d)]
        assert export_main(argv) == 0
        out[point] = d
    return out


def _entries(mapping: list[dict]) -> dict[tuple[str, str], dict]:
    """Mapping entries by (target, type): Timeloop reads a mapping by target, so the order
    of its entries carries nothing (the hand-edited inputs list both spatial entries first,
    the front end each dummy level's entries together)."""
    out = {}
    for e in mapping:
        key = (e["target"], e["type"])
        assert key not in out, key
        out[key] = e
    return out


@pytest.mark.parametrize("point", sorted(EXPORTED))
def test_processed_form_is_the_input_the_real_runs_read(exports, point):
    """Every Einsum's `timeloop-model.yaml` is the input real Timeloop ran: the same
    architecture (two dummy levels for the 2D array), problem, and mapping entries --
    spatial factors per level, permutations, splits, bypasses."""
    ours_dir, ref_dir = exports[point], REAL / point
    einsums = sorted(p.name for p in ref_dir.iterdir() if p.is_dir())
    assert sorted(p.name for p in ours_dir.iterdir()) == einsums
    for einsum in einsums:
        ours = yaml.safe_load((ours_dir / einsum / PROCESSED).read_text())
        ref = yaml.safe_load((ref_dir / einsum / "timeloop-model.yaml").read_text())
        assert ours["architecture"] == ref["architecture"], einsum
        assert ours["problem"] == ref["problem"], einsum
        assert _entries(ours["mapping"]) == _entries(ref["mapping"]), einsum


def test_no_spatial_level_is_wider_than_a_side_of_the_array(exports):
    """The point of nesting: each 2D Einsum's 65,536 PEs are reached through two levels of
    at most 256 instances each (X: meshX 256, then Y: meshY 256), never through one."""
    for einsum_dir in sorted(exports["binding-bert-4K"].iterdir()):
        data = yaml.safe_load((einsum_dir / PROCESSED).read_text())
        (tree,) = data["architecture"]["subtree"]
        counts = {}
        for e in tree["local"]:
            name, n = re.fullmatch(r"(\w+)\[1\.\.(\d+)\]", e["name"]).groups()
            counts[name] = int(n)
        fanouts = []
        for e in data["mapping"]:
            if e["type"] == "spatial":
                factors = [int(f.split("=")[1]) for f in e["factors"].split(",")]
                fanouts.append(math.prod(factors))
        assert all(f <= 256 for f in fanouts), einsum_dir.name
        if "reg_file_2d" in counts:
            assert counts["reg_file_2d"] == 256 * 256 and len(fanouts) == 2
            assert math.prod(fanouts) == 256 * 256
        else:
            assert counts["reg_file_1d"] == 256 and len(fanouts) == 1


def _dummy_levels(path) -> list[str]:
    (tree,) = yaml.safe_load(path.read_text())["architecture"]["subtree"]
    return [e["name"].split("[")[0] for e in tree["local"] if e["class"] == "dummy_storage"]


@pytest.mark.parametrize("config", ["binding", "unfused", "flat"])
def test_nested_and_flat_forms_count_the_same(tmp_path, config):
    """One mapping, two layouts of the array: exported flat (one meshX x meshY container)
    and nested, every Einsum reads back -- v0.4 files and processed form -- to the access
    counts of the plan's own view."""
    specs, workload = Specs(), make_workload("bert", "4K")
    cascade, mapping, arch = prepare(specs, config, workload)
    tables = specs.tables(arch, "corrected")
    views, _costs = configuration_views(cascade, mapping, arch, workload)
    dirs = {}
    for nested in (False, True):
        d = tmp_path / ("nested" if nested else "flat")
        write(
            export_configuration(
                cascade, mapping, arch, workload, tables, mapping.name, nested=nested
            ),
            d,
        )
        dirs[nested] = d
    two_d = 0
    for view in views:
        original = analyze(view.problem, view.mapping)
        back = {n: read_einsum(d / view.einsum).view for n, d in dirs.items()}
        processed = {n: read_processed(d / view.einsum / PROCESSED) for n, d in dirs.items()}
        for nested in (False, True):
            assert analyze(back[nested].problem, back[nested].mapping) == original
        assert analyze(processed[True].problem, processed[True].mapping) == analyze(
            processed[False].problem, processed[False].mapping
        )
        assert processed[True].array == processed[False].array == view.array
        dummies = {n: _dummy_levels(d / view.einsum / PROCESSED) for n, d in dirs.items()}
        assert dummies[False] == [f"inter_{view.array}_spatial"]
        if arch.array(view.array).mesh_y > 1:  # not vacuous: the forms do differ
            two_d += 1
            assert dummies[True] == [f"inter_{view.array}_col_spatial", *dummies[False]]
        else:
            assert dummies[True] == dummies[False]
    assert two_d >= 2


def _records(point: str) -> dict[str, dict]:
    return {r["einsum"]: r for r in json.loads((REAL / point / "comparison.json").read_text())}


def _check_counts(view, record: dict, levels: set[str] | None = None) -> int:
    """The view's counts per level and data space against Timeloop's `tl_levels`
    ([reads, fills, updates, instances]); `levels`: only those. Returns how many compared.
    (The access model counts with Timeloop's semantics: no read for a drained value.)"""
    report = analyze(view.problem, view.mapping)
    assert report.computes == record["tl_computes"]
    storage = [lm.level for lm in view.mapping]
    compared = 0
    for level in storage:
        if levels is not None and level not in levels:
            continue
        theirs = record["tl_levels"][level]
        ours = {ds: c for lv, ds, c in report.counts if lv == level}
        assert set(ours) == set(theirs), (level, sorted(ours), sorted(theirs))
        for ds, counts in theirs.items():
            c = ours[ds]
            assert [c.reads, c.fills, c.updates, c.instances] == counts, (level, ds)
            compared += 1
    return compared


@pytest.mark.parametrize(
    "point, einsum",
    [
        ("binding-bert-4K", "QK"),
        ("binding-bert-4K", "SLN"),
        ("binding-bert-4K", "RD"),
        ("unfused-bert-4K", "QK"),
        ("flat-bert-4K", "AV"),
    ],
)
def test_real_inputs_import_to_timeloops_counts(point, einsum):
    """The input a real run read, imported, counts what Timeloop counted at every level:
    reads, fills, updates and utilised instances."""
    view = read_processed(REAL / point / einsum / "timeloop-model.yaml")
    assert view.einsum == einsum and view.array == _records(point)[einsum]["array"]
    assert [lm.level for lm in view.mapping][:2] == ["DRAM", "global_buffer"]
    assert _check_counts(view, _records(point)[einsum]) >= 3


@pytest.mark.parametrize("point", sorted(p.name for p in REAL.glob("*-4K")))
def test_every_real_4k_input_imports_to_timeloops_counts(point):
    """Every Einsum of every 4K run, every level."""
    for einsum, record in _records(point).items():
        view = read_processed(REAL / point / einsum / "timeloop-model.yaml")
        assert _check_counts(view, record) >= 2, einsum


def test_every_real_input_imports_to_timeloops_dram_and_buffer_counts():
    """All recorded runs (both models, 4K to 1M; runs Timeloop refused carry no counts):
    DRAM and the global buffer count as Timeloop did. (Register counts of the 64K-1M QK runs
    hit Timeloop's partition-size overflow, see README there.)"""
    compared = 0
    for point_dir in sorted(p for p in REAL.iterdir() if p.is_dir()):
        for einsum, record in _records(point_dir.name).items():
            if "tl_levels" not in record:
                assert record["rc"] != 0
                continue
            view = read_processed(point_dir / einsum / "timeloop-model.yaml")
            compared += _check_counts(view, record, {"DRAM", "global_buffer"})
    assert compared > 150


def test_a_v04_file_is_not_the_processed_form(exports):
    """read_processed takes the binary's input only; the v0.4 files have their own reader."""
    path = exports["binding-bert-4K"] / "QK" / "architecture.yaml"
    with pytest.raises(SpecError, match="not Timeloop's processed form") as info:
        read_processed(path)
    assert len(str(info.value).splitlines()) == 1 and str(path) in str(info.value)
