"""Issue 8, point 2: `python -m simulator.export timeloop` writes valid Timeloop v0.4 inputs
for every Einsum, they import back to identical results, and their access counts are the
ones the energy model prices."""

from __future__ import annotations

import math
import re

import pytest
import yaml

from simulator.drivers.configs import EvalOptions, Specs, evaluate, prepare
from simulator.export import main as export_main
from simulator.plan.accesses import analyze
from simulator.pricing.energy import action_counts, price
from simulator.spec.workload import make_workload
from simulator.support.errors import SpecError
from simulator.timeloop.inputs import (
    FILES,
    PROCESSED,
    SIDECAR,
    configuration_views,
    processed_storage_levels,
    read_einsum,
    spelling_for_version,
)
from simulator.timeloop.problems import load_mapping, load_problem

from .conftest import DATA

BINDING_EINSUMS = {"QK", "LM", "RM", "SLN", "SLD", "SLNV", "PRM", "SPD", "RD", "SPNV", "RNV", "AV"}


class _TimeloopLoader(yaml.SafeLoader):
    """A plain reader of Timeloop's tags, independent of the project's importer."""


for _tag in ("Container", "Component", "Parallel", "Hierarchical"):
    _TimeloopLoader.add_constructor(
        f"!{_tag}",
        lambda loader, node, tag=_tag: {"!": tag, **loader.construct_mapping(node, deep=True)},
    )


def _load(path):
    return yaml.load(path.read_text(), Loader=_TimeloopLoader)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("timeloop")
    code = export_main(
        ["timeloop", "--accel", "binding", "--model", "bert", "--seq", "4K", "-o", str(out)]
    )
    assert code == 0
    return out


@pytest.fixture(scope="module")
def original():
    specs = Specs()
    workload = make_workload("bert", "4K")
    cascade, mapping, arch = prepare(specs, "binding", workload)
    views, costs = configuration_views(cascade, mapping, arch, workload)
    return specs, workload, cascade, mapping, arch, {v.einsum: v for v in views}, costs


def test_one_directory_per_einsum(exported):
    assert {p.name for p in exported.iterdir()} == BINDING_EINSUMS
    for d in exported.iterdir():
        assert sorted(p.name for p in d.iterdir()) == sorted((*FILES, PROCESSED, SIDECAR))


def _factor_map(entry) -> dict[str, int]:
    out = {}
    for item in entry["factors"]:
        m = re.fullmatch(r"([A-Z])=(\d+)", item)
        assert m, item
        out[m.group(1)] = int(m.group(2))
    return out


@pytest.mark.parametrize("einsum", sorted(BINDING_EINSUMS))
def test_exported_inputs_are_valid_timeloop_v04(exported, einsum):
    d = exported / einsum
    problem = _load(d / "problem.yaml")
    assert set(problem) == {"problem"}
    body = problem["problem"]
    assert str(body["version"]) == "0.4" and set(body) == {"version", "shape", "instance"}
    dims = body["shape"]["dimensions"]
    assert len(set(dims)) == len(dims)
    assert all(re.fullmatch(r"[A-Z]", x) for x in dims)  # Timeloop reads one character
    instance = body["instance"]
    assert set(instance) == set(dims) and all(
        isinstance(v, int) and v > 0 for v in instance.values()
    )
    spaces = body["shape"]["data_spaces"]
    names = [s["name"] for s in spaces]
    assert len(set(names)) == len(names) and not set(names) & set(dims)
    assert sum(bool(s.get("read_write")) for s in spaces) == 1
    indexed = {}
    for s in spaces:
        for term in s["projection"]:
            assert len(term) == 1 and len(term[0]) == 1 and term[0][0] in dims
        indexed[s["name"]] = {t[0][0] for t in s["projection"]}

    arch = _load(d / "architecture.yaml")["architecture"]
    assert str(arch["version"]) == "0.4"
    nodes = arch["nodes"]
    assert nodes[0]["!"] == "Container" and nodes[0]["attributes"]["global_cycle_seconds"] > 0
    storages = [
        n
        for n in nodes
        if n["!"] == "Component" and "depth" in n.get("attributes", {}) or n.get("class") == "DRAM"
    ]
    levels = [n["name"] for n in storages]
    assert [n["class"] for n in storages][0] == "DRAM" and len(levels) == 3
    spatial = [n for n in nodes if n["!"] == "Container" and "spatial" in n]
    meshes = {n["name"]: n["spatial"] for n in spatial}
    if len(spatial) == 2:  # a 2D array: X then Y, nested as the artifact's PE_col / PE
        assert [set(m) for m in meshes.values()] == [{"meshX"}, {"meshY"}]
        assert spatial[0]["name"] == spatial[1]["name"] + "_col"
    else:
        assert len(spatial) == 1 and meshes[spatial[0]["name"]].get("meshY", 1) == 1
    assert nodes[-1]["!"] == "Component" and nodes[-1]["class"] == "intmac"

    entries = _load(d / "mapping.yaml")["mapping"]
    product = {x: 1 for x in dims}
    for level in levels:
        temporal = [e for e in entries if e["target"] == level and e["type"] == "temporal"]
        keep = [e for e in entries if e["target"] == level and e["type"] == "dataspace"]
        assert len(temporal) == 1 and len(keep) == 1, level
        assert sorted(temporal[0]["permutation"]) == sorted(dims)
        assert set(keep[0]["keep"]).isdisjoint(keep[0]["bypass"])
        assert set(keep[0]["keep"]) | set(keep[0]["bypass"]) == set(names)
    for e in entries:
        assert e["target"] in levels or e["target"] in meshes
        assert e["type"] in ("temporal", "spatial", "dataspace")
        if e["type"] == "dataspace":
            continue
        factors = _factor_map(e)
        assert set(factors) == set(dims)
        for x, f in factors.items():
            product[x] *= f
        if e["type"] == "spatial":
            mesh = meshes[e["target"]]
            order, split = e["permutation"], e["split"]
            x_axis = math.prod(factors[x] for x in order[:split])
            y_axis = math.prod(factors[x] for x in order[split:])
            assert x_axis <= mesh.get("meshX", 1) and y_axis <= mesh.get("meshY", 1)
    assert sorted(e["target"] for e in entries if e["type"] == "spatial") == sorted(meshes)
    assert product == instance  # the factors of every dimension multiply to its extent

    # Capacity: each level's kept tiles fit (tile = factors at and below the level).
    words = {
        n["name"]: n["attributes"]["depth"]
        * n["attributes"]["width"]
        // n["attributes"]["datawidth"]
        for n in storages
        if n["class"] != "DRAM"
    }
    for level, capacity in words.items():
        start = next(
            i for i, e in enumerate(entries) if e["target"] == level and e["type"] == "temporal"
        )
        below = [_factor_map(e) for e in entries[start:] if e["type"] != "dataspace"]
        keep = next(e for e in entries if e["target"] == level and e["type"] == "dataspace")["keep"]
        used = sum(math.prod(f[x] for f in below for x in indexed[ds]) for ds in keep)
        assert used <= capacity, (level, used, capacity)

    for kind in ("ERT", "ART"):
        table = _load(d / f"{kind}.yaml")[kind]
        assert str(table["version"]) == "0.4"
        got = {
            re.fullmatch(r"system_top_level\.(\w+)\[1\.\.(\d+)\]", t["name"]).group(1)
            for t in table["tables"]
        }
        assert got == set(levels) | {nodes[-1]["name"]}


# What the recorded real run's front end handed `timeloop-model` (tests/data/timeloop-check).
RECORDED = DATA / "timeloop-check" / "parsed-processed-input.yaml"
# Timeloop's class names (src/model/topology.hpp): a level is storage when its class names
# one of these, arithmetic when it is one of the compute classes.
BUFFER_CLASSES = ("DRAM", "SRAM", "regfile", "smartbuffer", "storage")
COMPUTE_CLASSES = ("mac", "intmac", "fpmac", "compute")


def _recorded() -> dict:
    return yaml.safe_load(RECORDED.read_text())


def _shape_of(entries: list[dict]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for e in entries:
        out.setdefault(e["type"], set()).update(e)
    return out


@pytest.mark.parametrize("einsum", sorted(BINDING_EINSUMS))
def test_processed_form_has_the_shape_timeloop_model_reads(exported, einsum):
    """`timeloop-model.yaml` is laid out like the input the real run's front end gave the
    C++ binary: a flat list of `name[1..N]` instances under `system_top_level`, a dummy
    storage level for the spatial container, factor and permutation strings, bypass
    entries, and the problem of problem.yaml."""
    rec = _recorded()
    ours = yaml.safe_load((exported / einsum / PROCESSED).read_text())  # no tags: plain YAML
    assert set(ours) == {"architecture", "problem", "mapping"} and set(ours) <= set(rec)
    assert ours["problem"] == _load(exported / einsum / "problem.yaml")["problem"]

    arch = ours["architecture"]
    assert set(arch) == set(rec["architecture"]) == {"version", "subtree"}
    (tree,) = arch["subtree"]
    (rec_tree,) = rec["architecture"]["subtree"]
    assert tree["name"] == rec_tree["name"] == "system_top_level"
    assert set(tree) == set(rec_tree) == {"name", "attributes", "local"}
    local = tree["local"]
    rec_keys = set().union(*(set(e) for e in rec_tree["local"]))
    instances = {}
    for e in local:
        assert set(e) - {"enabled", "required_actions"} <= rec_keys, e
        m = re.fullmatch(r"(\w+)\[1\.\.(\d+)\]", e["name"])
        assert m, e["name"]
        instances[m.group(1)] = int(m.group(2))
        attrs = e["attributes"]
        klass = e["class"]
        assert any(c in klass for c in BUFFER_CLASSES) or klass in COMPUTE_CLASSES, klass
        if klass != "dummy_storage":
            # N instances sit on the meshX x meshY grid they name
            assert attrs["meshX"] * attrs["meshY"] == int(m.group(2)), e
    assert local[-1]["class"] in COMPUTE_CLASSES and local[0]["class"] == "DRAM"
    # one dummy level per spatial container of architecture.yaml, outermost first; a 2D
    # array's two (X, then Y) sit on the grid the recorded front end's PE_col / PE do
    dummies = [e for e in local if e["class"] == "dummy_storage"]
    containers = [
        n["name"]
        for n in _load(exported / einsum / "architecture.yaml")["architecture"]["nodes"]
        if n["!"] == "Container" and "spatial" in n
    ]
    assert [re.sub(r"\[.*", "", e["name"]) for e in dummies] == [
        f"inter_{c}_spatial" for c in containers
    ]
    rec_dummies = [e for e in rec_tree["local"] if e["class"] == "dummy_storage"]
    if len(dummies) == 2:

        def grid(entries):
            return [(e["name"].split("[")[1], e["attributes"]["meshX"]) for e in entries]

        assert grid(dummies) == grid(rec_dummies) == [("1..1]", 1), ("1..256]", 256)]
    assert {e["class"] for e in rec_tree["local"]} >= {"dummy_storage", "DRAM"}

    mapping = ours["mapping"]
    shape, rec_shape = _shape_of(mapping), _shape_of(rec["mapping"])
    assert set(shape) <= set(rec_shape)
    for kind, keys in shape.items():
        assert keys <= rec_shape[kind], (kind, keys - rec_shape[kind])
    dims = ours["problem"]["shape"]["dimensions"]
    product = {x: 1 for x in dims}
    for e in mapping:
        assert e["target"] in instances, e["target"]
        if e["type"] == "bypass":
            continue
        assert isinstance(e["factors"], str) and isinstance(e["permutation"], str)
        factors = dict(f.split("=") for f in e["factors"].split(","))
        assert sorted(factors) == sorted(dims) == sorted(e["permutation"])
        for x, f in factors.items():
            product[x] *= int(f)
    assert product == ours["problem"]["instance"]
    # every storage level has its temporal and bypass entries, in the architecture's order
    order = [re.sub(r"\[.*", "", e["name"]) for e in local[:-1]]
    seen = [e["target"] for e in mapping if e["type"] == "temporal"]
    assert seen == order
    # each dummy level's entries laid out as the recorded front end lays out its own:
    # spatial, temporal, bypass, one after the other
    for layout in (rec["mapping"], mapping):
        for dummy in {e["target"] for e in layout if e["target"].startswith("inter_")}:
            at = [i for i, e in enumerate(layout) if e["target"] == dummy]
            assert at == list(range(at[0], at[0] + 3)), dummy
            assert [layout[i]["type"] for i in at] == ["spatial", "temporal", "bypass"]


def test_processed_form_gives_the_same_access_counts(exported, tmp_path):
    """Read back through the importer, the processed mapping of every Einsum counts the
    same reads, fills and updates as its v0.4 mapping: one mapping in two forms."""
    for d in sorted(exported.iterdir()):
        data = yaml.safe_load((d / PROCESSED).read_text())
        levels = processed_storage_levels(data)
        problem = load_problem(d / PROCESSED)
        processed = analyze(problem, load_mapping(d / PROCESSED, levels))
        v04 = read_einsum(d).view
        original = analyze(v04.problem, v04.mapping)
        assert processed.computes == original.computes, d.name
        counts = [(lv, ds, c) for lv, ds, c in processed.counts]
        names = {"DRAM": levels[0], "buffer": levels[1], "registers": levels[-1]}
        assert [(names[lv], ds, c) for lv, ds, c in original.counts] == counts, d.name


def test_recorded_processed_input_reproduces_the_real_run():
    """Our reading of the processed form is Timeloop's: the recorded input, read with the
    levels `processed_storage_levels` finds, gives the counts of the real run's mapping."""
    from simulator.timeloop.problems import mapping_from_map_text

    levels = processed_storage_levels(_recorded())
    assert levels == ["DRAM", "L3", "reg_file_1d", "reg_file"]
    problem = load_problem(RECORDED)
    ours = analyze(problem, load_mapping(RECORDED, levels))
    printed = (DATA / "timeloop-check" / "timeloop-model.map.txt").read_text()
    real = analyze(problem, mapping_from_map_text(printed, levels))
    assert ours.counts == real.counts and ours.computes == real.computes


def test_round_trip_gives_identical_results(exported, original):
    _specs, workload, cascade, _mapping, arch, views, costs = original
    points = {c.einsum: c.points for c in costs}
    for einsum, view in views.items():
        back = read_einsum(exported / einsum)
        assert back.view.problem == view.problem
        assert back.view.dataspace_tensor == view.dataspace_tensor
        assert analyze(back.view.problem, back.view.mapping) == analyze(view.problem, view.mapping)
        imported = back.architecture
        array = imported.array(view.array)
        assert array == arch.array(view.array)
        for field in ("frequency_hz", "datawidth_bits", "dram", "buffer"):
            assert getattr(imported, field) == getattr(arch, field), field
        args = (cascade, points, workload.instances, 0.0, "corrected", 0.0)
        # (the imported design holds only this Einsum's array: no zero leak of the other)
        mine = {k: v for k, v in action_counts([back.view], imported, *args).items() if v}
        assert mine == {k: v for k, v in action_counts([view], arch, *args).items() if v}
        assert mine


def test_exported_tables_price_like_the_design(exported, original):
    specs, _w, cascade, _m, arch, views, _c = original
    ert, _art = specs.tables(arch, "corrected")
    for einsum in views:
        back = read_einsum(exported / einsum)
        for component in (
            arch.dram.name,
            arch.buffer.name,
            arch.array(views[einsum].array).register_component,
        ):
            assert back.energy.actions(component) == {
                a: v
                for a, v in ert.actions(component).items()
                if a in ("read", "write", "update", "leak")
            }


@pytest.mark.parametrize("accounting", ["published", "corrected"])
def test_exported_counts_are_the_energy_models(exported, original, accounting):
    """One source of truth: the accesses of the exported (re-imported) mappings, priced as
    the energy model prices them, give exactly the energy `simulator.run` reports."""
    specs, workload, cascade, mapping, arch, views, costs = original
    result = evaluate(specs, "binding", workload, options=EvalOptions(accounting=accounting))
    assert all(t.spill_bytes == 0 for t in result.tensors)
    back = [read_einsum(exported / e).view for e in views]
    counts = action_counts(
        back,
        arch,
        cascade,
        {c.einsum: c.points for c in costs},
        workload.instances,
        0.0,
        accounting,
        result.cycles,
    )
    ert, _art = specs.tables(arch, accounting)
    report = price(counts, ert, accounting, frozenset(mapping.unpriced))
    assert report.total_pj == pytest.approx(result.energy_pj, rel=1e-12)
    for component, pj in result.energy_per_component:
        assert report.of(component) == pytest.approx(pj, rel=1e-12), component
    # Dropping one Einsum's accesses must show: the check is not vacuous.
    fewer = action_counts(
        back[1:],
        arch,
        cascade,
        {c.einsum: c.points for c in costs},
        workload.instances,
        0.0,
        accounting,
        result.cycles,
    )
    assert price(fewer, ert, accounting, frozenset(mapping.unpriced)).total_pj < result.energy_pj


def test_export_bad_input_is_one_line(tmp_path, run_cli):
    code, out, err = run_cli(
        export_main, ["timeloop", "--accel", "nonesuch", "-o", str(tmp_path / "x")]
    )
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("config", ["unfused", "flat", "cascade", "arch"])
def test_every_configuration_exports_and_comes_back(tmp_path, config):
    """Not only +Binding: each shipped configuration (the unfused baseline's GEMM-mapped
    QK and AV included) exports, and every Einsum reads back to its own access counts in
    both forms (v0.4 files and the processed form)."""
    out = tmp_path / config
    assert export_main(["timeloop", "--accel", config, "--seq", "1K", "-o", str(out)]) == 0
    specs = Specs()
    workload = make_workload("bert", "1K")
    cascade, mapping, arch = prepare(specs, config, workload)
    views, _costs = configuration_views(cascade, mapping, arch, workload)
    assert sorted(p.name for p in out.iterdir()) == sorted(v.einsum for v in views)
    for v in views:
        d = out / v.einsum
        back = read_einsum(d).view
        assert analyze(back.problem, back.mapping) == analyze(v.problem, v.mapping), v.einsum
        data = yaml.safe_load((d / PROCESSED).read_text())
        processed = analyze(
            load_problem(d / PROCESSED),
            load_mapping(d / PROCESSED, processed_storage_levels(data)),
        )
        assert processed.computes == math.prod(e for _x, e in v.problem.instance), v.einsum


def test_an_imported_architecture_exports_and_comes_back(tmp_path):
    """The export's way back names the architecture it came from; for an architecture
    imported from Timeloop files that is the import description, which loads again."""
    manifest = DATA / "timeloop-artifact" / "fusemax.yaml"
    argv = ["timeloop", "--accel", "binding", "--seq", "1K", "--arch", str(manifest)]
    assert export_main([*argv, "-o", str(tmp_path)]) == 0
    back = read_einsum(tmp_path / "QK")
    assert back.architecture.dram.bandwidth_bytes_per_s == pytest.approx(400 * 2**30)
    assert back.architecture.array("PE2D").pes == 256 * 256


@pytest.mark.parametrize(
    "version, keys",
    [
        (None, ("data_spaces", "read_write")),
        ("4", ("data_spaces", "read_write")),
        ("4.1.2", ("data_spaces", "read_write")),
        ("3.0.3", ("data-spaces", "read-write")),
        ("v3.0.3", ("data-spaces", "read-write")),
        ("3", ("data-spaces", "read-write")),
        ("2.0", ("data-spaces", "read-write")),
    ],
)
def test_spelling_for_version(version, keys):
    """Timeloop's problem keys lost their hyphens in February 2024, after v3.0.3 (its last
    tagged release); what a `timeloop-model` reads depends on which it is."""
    spelling = spelling_for_version(version)
    assert (spelling.data_spaces, spelling.read_write) == keys


@pytest.mark.parametrize("version", ["3.1", "3.0.4", "0.4", "three", "", "3.0.3.1", "4.x"])
def test_spelling_of_no_timeloop_release_is_an_error(version):
    with pytest.raises(SpecError):
        spelling_for_version(version)


def _keys(data) -> set[str]:
    if isinstance(data, dict):
        return set(data) | set().union(*(_keys(v) for v in data.values()))
    if isinstance(data, list):
        return set().union(*(_keys(v) for v in data))
    return set()


def test_export_writes_the_targeted_timeloops_spelling(tmp_path):
    """`--timeloop-version 3.0.3` writes the problem keys as v3.0.3 reads them and nothing
    else differs; the files read back (the import takes both spellings) to the same counts."""
    dirs = {}
    for version in (None, "3.0.3"):
        d = tmp_path / str(version)
        extra = ["--timeloop-version", version] if version else []
        argv = ["timeloop", "--accel", "unfused", "--seq", "1K", "-o", str(d), *extra]
        assert export_main(argv) == 0
        dirs[version] = d
    einsums = sorted(p.name for p in dirs[None].iterdir())
    assert einsums and einsums == sorted(p.name for p in dirs["3.0.3"].iterdir())
    renamed = {"data_spaces": "data-spaces", "read_write": "read-write"}
    for einsum in einsums:
        for name in ("problem.yaml", PROCESSED):
            new = (dirs[None] / einsum / name).read_text()
            old = (dirs["3.0.3"] / einsum / name).read_text()
            assert {"data-spaces", "read-write"} <= _keys(yaml.safe_load(old))
            assert not {"data_spaces", "read_write"} & _keys(yaml.safe_load(old))
            for key, spelled in renamed.items():
                new = new.replace(f"{key}:", f"{spelled}:")
            assert old == new
        back_old = read_einsum(dirs["3.0.3"] / einsum).view
        back_new = read_einsum(dirs[None] / einsum).view
        assert back_old.problem == back_new.problem
        assert any(ds.read_write for ds in back_old.problem.dataspaces)
        assert analyze(back_old.problem, back_old.mapping) == analyze(
            back_new.problem, back_new.mapping
        )


@pytest.mark.parametrize("version", ["3.1", "0.4", "latest"])
def test_bad_timeloop_version_is_one_line(tmp_path, run_cli, version):
    out_dir = tmp_path / "x"
    argv = ["timeloop", "--seq", "1K", "--timeloop-version", version, "-o", str(out_dir)]
    code, out, err = run_cli(export_main, argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--timeloop-version" in err and version in err
    assert not out_dir.exists()
