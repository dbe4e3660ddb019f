"""Issue 8, point 1: the FuseMax artifact's Timeloop v0.4 architectures and Accelergy tables
import into the project's objects, and the imported FuseMax design is the project's own."""

from __future__ import annotations

import math

import pytest

from simulator.drivers.configs import Specs, evaluate
from simulator.plan.accesses import DataSpace, analyze
from simulator.spec.arch_file import load_architecture
from simulator.spec.tables import check_tables, load_energy_table
from simulator.spec.timeloop_import import (
    import_architecture,
    import_tables,
    render_jinja,
    storage_levels,
)
from simulator.spec.workload import make_workload
from simulator.support.errors import Loc, SpecError
from simulator.timeloop.inputs import read_processed
from simulator.timeloop.problems import load_mapping, load_problem, mapping_from_map_text

from .conftest import DATA, ROOT

ART = DATA / "timeloop-artifact"
SPECS = ART / "specs"
AE = SPECS / "area_energy" / "architecture"

# Every architecture file of the artifact that describes the FLAT or FuseMax arrays, as the
# pairs (2D path, 1D path) the artifact's model combines, with the project design of the same
# accelerator (which supplies only what Timeloop files lack).
PAIRS = [
    ("proposal/arch-2d.yaml", "proposal/arch-1d.yaml", "fusemax"),
    ("proposal/flat_arch-2d.yaml", "proposal/flat_arch-1d.yaml", "fusemax"),
    ("baselines/arch-2d.yaml", "baselines/arch-1d.yaml", "flat"),
    (
        "area_energy/architecture/accel_fusemax/accel-top-2d-path.yaml",
        "area_energy/architecture/accel_fusemax/accel-top-1d-path.yaml",
        "fusemax",
    ),
    (
        "area_energy/architecture/accel_flat/accel-top-2d-path.yaml",
        "area_energy/architecture/accel_flat/accel-top-1d-path.yaml",
        "flat",
    ),
]
SINGLE = [
    "area_energy/architecture/accel_fusemax/accel-top.yaml",
    "area_energy/architecture/accel_fusemax/arch-top.yaml",  # 'version: 0.4.' as written
]


def _project(name: str):
    return load_architecture(ROOT / "arch" / f"{name}.yaml")


@pytest.mark.parametrize("two,one,like", PAIRS)
def test_artifact_pairs_load(two, one, like):
    imported = import_architecture([SPECS / two, SPECS / one], like=_project(like))
    arch = imported.architecture
    shapes = sorted((a.mesh_x, a.mesh_y) for a in arch.arrays)
    assert shapes == [(256, 1), (256, 256)]
    assert arch.frequency_hz == pytest.approx(940e6, rel=1e-9)
    assert arch.datawidth_bits == 16 and arch.dram.width_bits == 64
    assert all(a.register_words > 0 for a in arch.arrays)


@pytest.mark.parametrize("path", SINGLE)
def test_artifact_single_files_load(path):
    arch = import_architecture([SPECS / path], like=_project("fusemax")).architecture
    assert [(a.mesh_x, a.mesh_y, a.register_words) for a in arch.arrays] == [(256, 256, 8)]


def test_fusemax_2d_architecture_matches_the_project_spec():
    """Every parameter the model reads that a Timeloop file carries comes from the artifact's
    file; `like` is FLAT's design here, so none of them can leak in from the project's
    FuseMax spec."""
    ours = _project("fusemax")
    flat = _project("flat")
    arch = import_architecture(
        [SPECS / "proposal/arch-2d.yaml", SPECS / "proposal/arch-1d.yaml"], like=flat
    ).architecture
    # The artifact writes the 940 MHz clock as 1.0638297873e-9 s.
    assert arch.frequency_hz == pytest.approx(ours.frequency_hz, rel=1e-9)
    assert arch.datawidth_bits == ours.datawidth_bits
    for field in ("width_bits", "datawidth_bits", "depth"):
        assert getattr(arch.dram, field) == getattr(ours.dram, field), field
        assert getattr(arch.buffer, field) == getattr(ours.buffer, field), field
    assert arch.buffer.capacity_bytes == ours.buffer.capacity_bytes == 16 * 2**20
    assert arch.buffer.values_per_access == ours.buffer.values_per_access
    assert arch.buffer_values == ours.buffer_values
    for mine, theirs in zip(ours.arrays, arch.arrays, strict=True):
        assert (theirs.mesh_x, theirs.mesh_y) == (mine.mesh_x, mine.mesh_y), mine.name
        assert theirs.register_words == mine.register_words, mine.name
    # FLAT's registers (3 words) differ: the test would see a wrong source.
    assert flat.arrays[0].register_words != arch.arrays[0].register_words


def test_imported_fusemax_runs_like_the_project_spec(run_cli):
    """The import description (artifact files + like: fusemax) through the whole model."""
    specs = Specs(arch_override=str(ART / "fusemax.yaml"))
    workload = make_workload("bert", "4K")
    imported = evaluate(specs, "binding", workload)
    own = evaluate(Specs(), "binding", workload)
    assert imported.latency_s == pytest.approx(own.latency_s, rel=1e-9)
    assert imported.traffic_bytes == own.traffic_bytes
    assert imported.util_2d == pytest.approx(own.util_2d, rel=1e-9)
    assert imported.energy_pj == pytest.approx(own.energy_pj, rel=1e-9)
    assert imported.area_um2 == pytest.approx(own.area_um2, rel=1e-12)


def test_the_artifacts_accelergy_tables_import_complete():
    """The artifact's Accelergy outputs import in the project's component names and price
    every action the imported architecture needs. (They are no longer the corrected tables'
    source: current Accelergy, with the register depth honoured, is --
    tests/test_accelergy_tables.py checks those through the same importer.)"""
    ours = _project("fusemax")
    imported = import_architecture(
        [AE / "accel_fusemax/accel-top-2d-path.yaml", AE / "accel_fusemax/accel-top-1d-path.yaml"],
        like=ours,
    )
    acc = ART / "accelergy"
    ert, art = import_tables(
        [
            (
                acc / "outputs-2d-fusemax/ERT.yaml",
                acc / "outputs-2d-fusemax/ART.yaml",
                imported.name_map(0),
            ),
            (
                acc / "outputs-1d-fusemax/ERT.yaml",
                acc / "outputs-1d-fusemax/ART.yaml",
                imported.name_map(1),
            ),
        ]
    )
    arch = imported.architecture
    attrs = arch.component_attributes()
    check_tables(
        ert.bind(attrs), art.bind(attrs), arch.required_actions(), set(arch.priced_components())
    )
    # the artifact's MAC: 17.16 pJ per compute (the FuseMax artifact's energy table)
    assert ert.energy("PE2D.mac", "compute") == pytest.approx(17.16, abs=0.01)


def test_jinja_variables_and_blocks():
    """The artifact's Timeloop-exercise files: `{{DATAWIDTH}}` from a variables file and
    `{% if reg_enabled|default(True) %}` around a component."""
    like = _project("fusemax")
    files = [AE / "accel_fusemax/arch.yaml"]
    variables = [AE / "accel_fusemax/variables.yaml"]
    arch = import_architecture(files, like=like, variables_files=variables).architecture
    assert arch.datawidth_bits == 8  # {{datawidth_jinja|default(8)}}
    assert arch.arrays[0].mesh_x == 8 and arch.arrays[0].register_words == 1
    wide = import_architecture(
        files, like=like, variables_files=variables, values={"datawidth_jinja": 16}
    ).architecture
    assert wide.datawidth_bits == 16
    bare = import_architecture(
        files, like=like, variables_files=variables, values={"reg_enabled": False}
    ).architecture
    assert bare.arrays[0].register_words == 0


def test_jinja_keeps_line_numbers():
    text = "a: 1\n{% if x %}\nb: 2\n{% else %}\nb: 3\n{% endif %}\nc: {{ y|default(4) }}\n"
    out = render_jinja(text, {"x": False}, "t.yaml")
    assert out.count("\n") == text.count("\n")
    assert [line.strip() for line in out.splitlines()] == ["a: 1", "", "", "", "b: 3", "", "c: 4"]


@pytest.mark.parametrize(
    "text,construct",
    [
        ("{% for x in y %}\n{% endfor %}\n", "{% for x in y %}"),
        ("{% include 'other.yaml' %}\n", "{% include 'other.yaml' %}"),
        ("a: {{ x + 1 }}\n", "{{ x + 1 }}"),
    ],
)
def test_unsupported_jinja_is_named(tmp_path, text, construct):
    path = tmp_path / "arch.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match="unsupported jinja construct") as err:
        import_architecture([path])
    assert construct in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize(
    "body,needle",
    [
        (
            "architecture:\n  version: 0.4\n  nodes:\n  - !Nothing {}\n",
            "unsupported YAML tag '!Nothing'",
        ),
        ("architecture:\n  version: 0.3\n  subtree: []\n", "v0.3-style 'subtree:'"),
        ("architecture:\n  version: 0.5\n  nodes: []\n", "version 0.5 is not supported"),
        ("architecture: {nodes: []}\nsparse_optimizations: {}\n", "section 'sparse_optimizations'"),
    ],
)
def test_unsupported_constructs_are_named(tmp_path, body, needle):
    path = tmp_path / "arch.yaml"
    path.write_text(body)
    with pytest.raises(SpecError, match=needle):
        import_architecture([path])


def test_pe_operations_must_come_from_somewhere(tmp_path, run_cli):
    with pytest.raises(SpecError, match="which operations a PE executes"):
        import_architecture([SPECS / "proposal/arch-2d.yaml", SPECS / "proposal/arch-1d.yaml"])
    from simulator.run import main

    manifest = tmp_path / "m.yaml"
    manifest.write_text(f"timeloop_import:\n  architecture: [{SPECS / 'proposal/arch-2d.yaml'}]\n")
    code, out, err = run_cli(main, ["--accel", "binding", "--seq", "1K", "--arch", str(manifest)])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "operations a PE executes" in err


def test_artifact_problem_and_mapping_reproduce_the_real_timeloop_run():
    """The artifact's QK problem and mapping, read by the importer, give the counts of the
    real Timeloop run of that mapping (tests/data/timeloop-check)."""
    levels = storage_levels(SPECS / "proposal/arch-2d.yaml")
    assert levels == ["DRAM", "L3", "reg_file_1d", "reg_file"]
    problem = load_problem(SPECS / "proposal/problems/qk.yaml")
    mapping = load_mapping(SPECS / "proposal/mappings/qk.yaml", levels)
    printed = (DATA / "timeloop-check" / "timeloop-model.map.txt").read_text()
    real = analyze(problem, mapping_from_map_text(printed, levels))
    ours = analyze(problem, mapping)
    assert ours.counts == real.counts and ours.computes == real.computes
    assert ours.computes == math.prod(e for _d, e in problem.instance)


@pytest.mark.parametrize(
    "name", ["qk", "lm", "rm", "sln", "sld", "slnv", "prm", "spd", "rd", "spnv", "rnv", "av"]
)
def test_every_artifact_binding_problem_and_mapping_imports(name):
    levels2d = storage_levels(SPECS / "proposal/arch-2d.yaml")
    levels1d = storage_levels(SPECS / "proposal/arch-1d.yaml")
    problem = load_problem(SPECS / f"proposal/problems/{name}.yaml")
    text = (SPECS / f"proposal/mappings/{name}.yaml").read_text()
    levels = levels2d if "PE_col" in text else levels1d
    report = analyze(problem, load_mapping(SPECS / f"proposal/mappings/{name}.yaml", levels))
    assert report.computes == math.prod(e for _d, e in problem.instance)


def test_window_projections_are_rejected(tmp_path):
    path = tmp_path / "conv.yaml"
    path.write_text(
        "problem:\n  version: '0.4'\n  shape:\n    name: C\n    dimensions: [P, R]\n"
        "    data_spaces:\n    - name: I\n      projection:\n      - [[P], [R]]\n"
        "  instance: {P: 4, R: 3}\n"
    )
    with pytest.raises(SpecError, match="not a single dimension"):
        load_problem(path)


def test_flat_tables_import_with_the_projects_spelling():
    """FLAT's Accelergy outputs: the artifact's misspelled exp unit ('exponentiatial') is an
    error naming it until the name map spells it as the project does; then every entry but
    the global buffer and the registers equals the project's published FLAT table."""
    flat = _project("flat")
    imported = import_architecture(
        [AE / "accel_flat/accel-top-2d-path.yaml", AE / "accel_flat/accel-top-1d-path.yaml"],
        like=flat,
    )
    acc = ART / "accelergy"
    pairs = [
        (acc / "outputs-2d-flat/ERT.yaml", acc / "outputs-2d-flat/ART.yaml", imported.name_map(0)),
        (acc / "outputs-1d-flat/ERT.yaml", acc / "outputs-1d-flat/ART.yaml", imported.name_map(1)),
    ]
    arch = imported.architecture
    attrs = arch.component_attributes()
    ert, art = import_tables(pairs)
    with pytest.raises(SpecError, match="PE1D.exponentiatial"):
        check_tables(
            ert.bind(attrs), art.bind(attrs), arch.required_actions(), set(arch.priced_components())
        )
    fixed = {k: v.replace("exponentiatial", "exponential") for k, v in imported.name_map(1).items()}
    ert, art = import_tables([pairs[0], (pairs[1][0], pairs[1][1], fixed)])
    check_tables(
        ert.bind(attrs), art.bind(attrs), arch.required_actions(), set(arch.priced_components())
    )
    # the artifact's published accounting priced with these outputs, but the buffer (its
    # energies back-solved from the published results) and the registers (a newer
    # Accelergy's, which ignored register depth): arch/tables/README.md
    project_ert = load_energy_table(ROOT / "arch/tables/published/flat.ERT.yaml").bind(
        flat.component_attributes()
    )
    bound = ert.bind(attrs)
    compared = 0
    for component in project_ert.components():
        if component == flat.buffer.name or component.startswith("reg_file"):
            continue
        compared += 1
        assert bound.actions(component) == project_ert.actions(component), component
    assert compared >= 5


def test_a_file_with_its_own_operations_keeps_them(tmp_path):
    """An exported path of FuseMax's 2D array with the project's `operations` written in:
    `like` (FLAT, whose 2D PEs have no exp) supplies names only, not operations."""
    from simulator.timeloop.inputs import architecture_yaml, dump

    own = _project("fusemax")
    text = dump(architecture_yaml(own, "PE2D")).replace(
        "      adder_width: 16\n",
        "      adder_width: 16\n      operations:\n"
        "        mac: {cycles: 1, unit: mac}\n"
        "        exp: {cycles: 6, unit: mac, actions: {mac: 6}}\n",
    )
    path = tmp_path / "arch.yaml"
    path.write_text(text)
    arch = import_architecture([path], like=_project("flat")).architecture
    assert arch.arrays[0].op("exp").cycles == 6
    with pytest.raises(SpecError, match="!Parallel"):
        import_architecture([ROOT / "arch" / "fusemax.yaml"])


# ------------------------------------------- DRAM bandwidth, mapping order, bad entries


def _with_shared_bandwidth(tmp_path, value: str):
    """The artifact's FuseMax pair with its DRAM's shared_bandwidth given (it is commented
    out in the artifact's file), and an import description of it."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    text = (SPECS / "proposal/arch-2d.yaml").read_text()
    marker = "      # shared_bandwidth: 215"
    assert marker in text
    (tmp_path / "arch-2d.yaml").write_text(text.replace(marker, f"      shared_bandwidth: {value}"))
    (tmp_path / "arch-1d.yaml").write_text((SPECS / "proposal/arch-1d.yaml").read_text())
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "timeloop_import:\n  architecture: [arch-2d.yaml, arch-1d.yaml]\n  like: fusemax\n"
    )
    return manifest


@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_non_positive_dram_bandwidth_is_an_error(tmp_path, value):
    manifest = _with_shared_bandwidth(tmp_path, value)
    with pytest.raises(SpecError, match="shared_bandwidth .* must be a positive number") as info:
        load_architecture(manifest)
    assert info.value.loc.path.endswith("arch-2d.yaml") and info.value.loc.line > 1


def test_dram_bandwidth_expressions_are_evaluated(tmp_path):
    plain = load_architecture(_with_shared_bandwidth(tmp_path / "a", "2"))
    expression = load_architecture(_with_shared_bandwidth(tmp_path / "b", "1 + 1"))
    # 2 words of 16 bits per cycle at the artifact's clock, not like=fusemax's 400 GiB/s
    words = 2 * plain.dram.datawidth_bits / 8 * plain.frequency_hz
    assert plain.dram.bandwidth_bytes_per_s == pytest.approx(words)
    assert expression.dram.bandwidth_bytes_per_s == plain.dram.bandwidth_bytes_per_s


def test_a_manifests_bandwidth_must_be_positive(tmp_path):
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        f"timeloop_import:\n  architecture: [{SPECS / 'proposal/arch-2d.yaml'}, "
        f"{SPECS / 'proposal/arch-1d.yaml'}]\n  like: fusemax\n  bandwidth_bytes_per_s: 0\n"
    )
    with pytest.raises(SpecError, match="bandwidth_bytes_per_s must be a positive number"):
        load_architecture(manifest)


def test_spatial_entries_attach_where_the_architecture_puts_them(tmp_path):
    """Timeloop places a spatial container by the architecture, not by where its entry
    stands in the mapping file: moved to the end, the artifact's QK mapping still counts the
    same (the fan-out stays below reg_file_1d)."""
    from simulator.spec.timeloop_import import spatial_anchors

    arch = SPECS / "proposal/arch-2d.yaml"
    levels, anchors = storage_levels(arch), spatial_anchors(arch)
    assert anchors == {"PE_col": "reg_file_1d", "PE": "reg_file_1d"}
    problem = load_problem(SPECS / "proposal/problems/qk.yaml")
    original = analyze(problem, load_mapping(SPECS / "proposal/mappings/qk.yaml", levels, anchors))
    text = (SPECS / "proposal/mappings/qk.yaml").read_text()
    head, spatial_and_rest = text.split("- target: PE_col", 1)
    spatial, rest = spatial_and_rest.split("- target: reg_file\n", 1)
    moved = tmp_path / "qk.yaml"
    moved.write_text(head + "- target: reg_file\n" + rest + "\n- target: PE_col" + spatial)
    reordered = analyze(problem, load_mapping(moved, levels, anchors))
    assert reordered.counts == original.counts


@pytest.mark.parametrize(
    "entry, needle",
    [
        ("{target: DRAM, type: temporal, factors: 5}", "'factors' must be a list"),
        ("{target: DRAM, type: temporal, permutation: 5}", "'permutation' must be a list"),
        ("{target: DRAM, type: dataspace, keep: QK}", "'keep' must be a list"),
        ("{target: PE, type: spatial, factors: [P=2], split: x}", "'split' must be a whole"),
    ],
)
def test_malformed_mapping_entries_are_named(tmp_path, entry, needle):
    path = tmp_path / "map.yaml"
    path.write_text(f"mapping:\n- {entry}\n")
    with pytest.raises(SpecError, match=needle) as info:
        load_mapping(path, ["DRAM", "L3", "reg_file"])
    assert info.value.loc.line == 2


PROBLEM = """problem:
  version: '0.4'
  shape:
    name: T
    dimensions: [M, K]
    {data_spaces}:
    - name: A
      projection: [[[M]], [[K]]]
    - name: Z
      projection: [[[M]]]
      {read_write}: true
  instance: {{M: 4, K: 8}}
"""


@pytest.mark.parametrize(
    "data_spaces, read_write",
    [("data_spaces", "read_write"), ("data-spaces", "read-write")],
    ids=["since-2024", "up-to-v3.0.3"],
)
def test_problem_keys_read_in_either_spelling(tmp_path, data_spaces, read_write):
    """Timeloop releases up to v3.0.3 spell the problem keys `data-spaces`/`read-write`,
    later ones `data_spaces`/`read_write`; both import, and the output stays the output
    (read as an input, every count of it would silently change)."""
    path = tmp_path / "problem.yaml"
    path.write_text(PROBLEM.format(data_spaces=data_spaces, read_write=read_write))
    problem = load_problem(path)
    assert problem.dataspaces == (
        DataSpace("A", ("M", "K")),
        DataSpace("Z", ("M",), read_write=True),
    )


@pytest.mark.parametrize(
    "old, new, line",
    [("data-spaces", "data_spaces", 6), ("read-write", "read_write", 11)],
)
def test_a_key_in_both_spellings_is_an_error(tmp_path, old, new, line):
    text = PROBLEM.format(data_spaces="data_spaces", read_write="read_write")
    indent = " " * (6 if old == "read-write" else 4)
    lines = text.splitlines(keepends=True)
    lines.insert(line - 1, f"{indent}{old}: {'[]' if old == 'data-spaces' else 'true'}\n")
    path = tmp_path / "problem.yaml"
    path.write_text("".join(lines))
    with pytest.raises(SpecError, match=f"both '{old}' and '{new}'") as info:
        load_problem(path)
    assert info.value.loc == Loc(str(path), line, len(indent) + 1)
    assert len(str(info.value).splitlines()) == 1


def test_a_real_input_in_the_old_spelling_imports_alike(tmp_path):
    """The input a real v3.0.3 run read, its problem keys in v3.0.3's spelling, imports to
    the same problem and the same counts."""
    real = DATA / "timeloop-real/timeloop-v3.0.3/binding-bert-4K/QK/timeloop-model.yaml"
    text = real.read_text()
    assert text.count("data_spaces:") == 1 and text.count("read_write: true") == 1
    old = tmp_path / "timeloop-model.yaml"
    old.write_text(
        text.replace("data_spaces:", "data-spaces:").replace("read_write:", "read-write:")
    )
    new, back = read_processed(real), read_processed(old)
    assert back.problem == new.problem
    assert [ds.name for ds in back.problem.dataspaces if ds.read_write] == ["BQK"]
    assert analyze(back.problem, back.mapping) == analyze(new.problem, new.mapping)
