"""`python -m simulator.run`: formats, other points, user specs, and clean errors."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from simulator.drivers import configs as configs_module
from simulator.run import main

from .conftest import ROOT

REQUIRED = {
    "accelerator",
    "model",
    "seq_len",
    "latency_s",
    "traffic_bytes",
    "util_2d",
    "util_1d",
    "util_2d_per_einsum",
    "speedup_vs_unfused",
    "speedup_vs_flat",
}


def _json(run_cli, *argv):
    code, out, err = run_cli(main, [*argv, "--format", "json"])
    assert code == 0, err
    return json.loads(out)


def test_default_runs_the_five_configurations(run_cli):
    code, out, err = run_cli(main, ["--model", "bert", "--seq", "1M"])
    assert code == 0, err
    for label in ("Unfused", "FLAT", "+Cascade", "+Architecture", "+Binding"):
        assert label in out
    assert "2D-array utilisation per Einsum" in out


def test_json_records(run_cli):
    records = _json(run_cli, "--model", "bert", "--seq", "1M")
    assert [r["accelerator"] for r in records] == ["unfused", "flat", "cascade", "arch", "binding"]
    for r in records:
        assert REQUIRED <= set(r)
        assert r["seq_len"] == 2**20 and r["model"] == "BERT"
    by = {r["accelerator"]: r for r in records}
    assert by["unfused"]["speedup_vs_unfused"] == pytest.approx(1.0)
    assert by["flat"]["speedup_vs_flat"] == pytest.approx(1.0)
    fuse = by["binding"]
    assert fuse["speedup_vs_flat"] == pytest.approx(by["flat"]["latency_s"] / fuse["latency_s"])
    assert set(fuse["util_2d_per_einsum"]) == {"QK", "LM", "SLN", "SLD", "SLNV"}


def test_fusemax_alias_and_subset(run_cli):
    records = _json(run_cli, "--model", "t5", "--seq", "64k", "--accel", "flat,fusemax")
    assert [r["accelerator"] for r in records] == ["flat", "binding"]
    assert records[1]["speedup_vs_unfused"] is not None  # baseline evaluated on the side


def test_run_and_sweep_csvs_name_the_same_quantities_alike(run_cli):
    """run's CSV and a sweep's of the same point: every column they share holds the same
    value, and run's names the configuration and length as the sweep does (accel, seq) and
    has its bound columns."""
    from simulator.sweep import main as sweep_main

    code, out, err = run_cli(main, ["--seq", "1K", "--accel", "binding", "--engine",
                                    "analytic", "--format", "csv"])  # fmt: skip
    assert code == 0, err
    (ran,) = list(csv.DictReader(io.StringIO(out)))
    code, out, err = run_cli(sweep_main, ["--grid", "seq=1K", "accel=binding", "--engine",
                                          "analytic", "--no-progress"])  # fmt: skip
    assert code == 0, err
    (swept,) = list(csv.DictReader(io.StringIO(out)))
    bounds = {"latency_bound_s", "traffic_bound_bytes", "fraction_of_bound", "bound_binds"}
    assert {"accel", "model", "seq", "latency_s", "traffic_bytes", *bounds} <= set(ran)
    assert not {"accelerator", "seq_len"} & set(ran)
    shared = set(ran) & set(swept)
    assert {"accel", "seq", *bounds} <= shared
    assert {c: ran[c] for c in shared} == {c: swept[c] for c in shared}


def test_csv_is_deterministic(run_cli):
    # an explicit --max-sim-s: the default 2 s budget is wall-clock, and a loaded machine
    # could send one run, not the other, to the analytic fallback
    argv = ["--model", "xlm", "--seq", "16K", "--format", "csv", "--max-sim-s", "600"]
    first = run_cli(main, argv)
    second = run_cli(main, argv)
    assert first == second
    table = list(csv.DictReader(io.StringIO(first[1])))
    assert len(table) == 5 and "util_2d_QK" in table[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["--seq", "2M"],
        ["--seq", "8K"],
        ["--heads", "32", "--embed", "128", "--seq", "16K"],
        ["--pe-dim", "128", "--seq", "64K"],
        ["--model", "xlm", "--seq", "1048576"],
        ["--buffer-bytes", "8MiB", "--seq", "256K", "--accel", "binding"],
        ["--bandwidth", "100e9", "--seq", "4K"],
    ],
)
def test_other_points(run_cli, argv):
    records = _json(run_cli, *argv)
    for r in records:
        assert r["latency_s"] > 0 and 0 < r["util_2d"] <= 1 + 1e-9 and r["util_1d"] <= 1 + 1e-9


def test_pe_dim_scales_compute_bound_latency(run_cli):
    big = _json(run_cli, "--seq", "64K", "--accel", "binding")[0]
    small = _json(run_cli, "--seq", "64K", "--accel", "binding", "--pe-dim", "128")[0]
    assert small["factors"]["P0"] == 128 and small["factors"]["M0"] == 128
    # A quarter of the PEs: about 4x the cycles while compute-bound.
    assert small["latency_s"] / big["latency_s"] == pytest.approx(4.0, rel=0.05)


def test_smaller_buffer_means_more_kv_rereads(run_cli):
    full = _json(run_cli, "--seq", "1M", "--accel", "binding")[0]
    small = _json(run_cli, "--seq", "1M", "--accel", "binding", "--buffer-bytes", "4MiB")[0]
    assert small["factors"]["P1"] < full["factors"]["P1"]
    assert small["traffic_bytes"] > full["traffic_bytes"]


def test_unpublished_flat_point_says_where_its_dataflow_comes_from(run_cli):
    # No published row at 2M: FLAT's dataflow comes from the FLAT strategy's rule, said so,
    # and no published row is borrowed.
    code, out, err = run_cli(main, ["--seq", "2M", "--accel", "flat"])
    assert code == 0, err
    assert "no published dataflow for models=BERT, seq_len=2097152" in out
    assert "bound by the flat strategy (auto:flat)" in out and "nearest" not in out


def test_new_architecture_and_mapping_need_no_code(tmp_path, run_cli):
    # A 128 x 128 FuseMax with an 8 MB buffer: new YAML files only.
    arch = (ROOT / "arch" / "fusemax.yaml").read_text()
    arch = arch.replace("meshX: 256, meshY: 256", "meshX: 128, meshY: 128")
    arch = arch.replace("meshX: 256}", "meshX: 128}").replace("depth: 32768", "depth: 16384")
    arch = arch.replace("tables/", f"{ROOT / 'arch' / 'tables'}/")  # reuse the shipped tables
    (tmp_path / "fusemax-128.yaml").write_text(arch)
    mapping = (ROOT / "mappings" / "binding.yaml").read_text()
    mapping = mapping.replace("architecture: fusemax", "architecture: ./fusemax-128.yaml")
    mapping = mapping.replace("label: +Binding", "label: FuseMax-128")
    (tmp_path / "fusemax-128-map.yaml").write_text(mapping)
    records = _json(run_cli, "--mapping", str(tmp_path / "fusemax-128-map.yaml"), "--seq", "64K")
    assert records[0]["label"] == "FuseMax-128"
    assert records[0]["factors"]["P0"] == 128
    assert records[0]["util_2d"] > 0.95


def test_deleting_a_mapping_file_removes_that_configuration(tmp_path, monkeypatch, run_cli):
    copy = tmp_path / "mappings"
    shutil.copytree(ROOT / "mappings", copy)
    (copy / "cascade.yaml").unlink()
    real = configs_module.data_dir
    monkeypatch.setattr(
        configs_module, "data_dir", lambda kind: copy if kind == "mappings" else real(kind)
    )
    monkeypatch.setattr(
        "simulator.support.paths.data_dir", lambda kind: copy if kind == "mappings" else real(kind)
    )
    records = _json(run_cli, "--seq", "4K")
    assert [r["accelerator"] for r in records] == ["unfused", "flat", "arch", "binding"]


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["--model", "gpt"], "unknown model 'gpt'"),
        (["--seq", "banana"], "'banana' is not a count"),
        (["--seq", "0"], "must be positive"),
        (["--accel", "cascade", "--seq", "1000"], "not divisible"),
        (["--accel", "tpu"], "unknown configuration 'tpu'"),
        (["--accel", ","], "names no configuration"),
        (["--scope", "layer", "--breakdown"], "use --scope attention"),
        (["--pe-dim", "-3"], "is not a count"),
        (["--pe-dim", "0"], "--pe-dim: '0' must be positive"),
        (["--heads", "x"], "--heads: 'x' is not a count"),
        (["--buffer-bytes", "lots"], "not a size"),
        (["--heads", "8"], ""),  # a bert variant with 8 heads is fine -> exit 0, checked below
    ],
)
def test_bad_arguments(run_cli, argv, fragment):
    code, out, err = run_cli(main, argv)
    if not fragment:
        assert code == 0
        return
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and fragment in err


def _mapping_with(tmp_path, old: str, new: str, name: str = "binding") -> str:
    """The shipped mapping with `old` replaced by `new` (several edits: `|`-separated)."""
    text = (ROOT / "mappings" / f"{name}.yaml").read_text()
    for o, n in zip(old.split("|"), new.split("|"), strict=True):
        assert o in text, o
        text = text.replace(o, n)
    path = tmp_path / f"bad-{name}.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "old,new,fragment",
    [
        (
            "    PE2D: [QK, LM, SLN, SLD, SLNV]",
            "    PE2D: [QK, LM, SLN, SLD, SLNV, RM]",
            "bound to both",
        ),
        # FLAT's 2D array is a MAC array: the max of LM bound there is not declared
        ("  architecture: fusemax", "  architecture: flat", "'LM' needs 'max'"),
        ("par: [[QK, LM], [RD, RNV, AV]]", "par: [[QK], [LM], [RD, RNV, AV]]", "par overlaps"),
        ("  shapes:", "  shapez:", "unknown key 'shapez'"),
        ("    E: embed\n", "    E: embed\n    Z: seq_len\n", "'Z' is no rank"),
        ("        - RM\n", "        - RMX\n", "unknown Einsum 'RMX'"),
        ("        - RM\n", "", "appear in no phase"),
        ("    P1: search", "    P1: banana * 2", "unknown name 'banana'"),
        ("    Q: {home: DRAM, keep: P2}", "    Q: {home: SSD, keep: P2}", "home of 'Q'"),
        ("  architecture: fusemax", "  architecture: nonexistent", "does not exist"),
        ("    P0: min(PE2D.meshX, P)", "    P0: 512", "exceeds PE2D"),
        ("  binding:", "  bindings:", "unknown key 'bindings'"),
        ("      loops: [P2, M1, P1]", "      loops: [P2, M1, P1\n", "YAML syntax error"),
        # names the cascade and the mapping's partitions do not have
        ("    PE2D: [P0, M0]", "    PE2D: [P0, M7]", "spatial of PE2D names 'M7'"),
        ("    Q: {home: DRAM, keep: P2}", "    Q: {home: DRAM, keep: Z9}", "names 'Z9'"),
        ("    Q: {home: DRAM, keep: P2}", "    Q9: {home: DRAM, keep: P2}", "'Q9' is no tensor"),
        ("      loops: [P2, M1, P1]", "      loops: [P2, M1, P9]", "names 'P9'"),
        ("    P: [P2, P1, P0]", "    P: [P1, P0]", "names 'P2'"),
        ("    P: [P2, P1, P0]", "    P: [P2, P1, P0]\n    X: [X1, X0]", "'X' is no rank"),
        # what the mapping makes again (`recompute:`) must be an Einsum and its readers'
        ("  shapes:", "  recompute: {NOPE: [QK]}\n  shapes:", "unknown Einsum 'NOPE'"),
        ("  shapes:", "  recompute: {QK: [SLD]}\n  shapes:", "'SLD' does not read 'BQK'"),
        ("  shapes:", "  recompute: [QK]\n  shapes:", "recompute must map each Einsum"),
    ],
)
def test_bad_mapping_files(tmp_path, run_cli, old, new, fragment):
    path = _mapping_with(tmp_path, old, new)
    code, out, err = run_cli(main, ["--mapping", path, "--seq", "4K"])
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and fragment in err, err
    assert re.search(r"bad-binding\.yaml:\d+(:\d+)?: ", err), err


@pytest.mark.parametrize(
    "old,new,fragment",
    [
        ("      depth: 32768", "      depth: -5", "must be positive"),
        (
            "      bandwidth_bytes_per_s: 400 * 2**30",
            "      bandwidth_bytes_per_s: __import__('os')",
            "bandwidth_bytes_per_s",
        ),
        ("        name: PE2D", "        name: PE2D\n        colour: red", "unknown key 'colour'"),
        ("  - !Component\n    name: DRAM", "  - !Widget\n    name: DRAM", "unsupported YAML tag"),
        (
            "            exp: {cycles: 6, unit: mac, actions: {mac: 6}}\n",
            "            exp: {cycles: 0, unit: mac}\n",
            "positive cycles",
        ),
    ],
)
def test_bad_architecture_files(tmp_path, run_cli, old, new, fragment):
    text = (ROOT / "arch" / "fusemax.yaml").read_text()
    assert old in text, old
    (tmp_path / "bad-arch.yaml").write_text(text.replace(old, new, 1))
    code, out, err = run_cli(
        main, ["--arch", str(tmp_path / "bad-arch.yaml"), "--accel", "binding", "--seq", "4K"]
    )
    assert code == 2 and out == "", err
    assert "bad-arch.yaml:" in err and fragment in err and err.count("\n") == 1, err


def test_option_paths_are_relative_to_the_current_folder(tmp_path, monkeypatch, run_cli):
    """`--arch ../arch/fusemax.yaml` is the user's file, not the shipped one a path relative
    to the mapping's folder would find."""
    (tmp_path / "arch").mkdir()
    (tmp_path / "work").mkdir()
    text = (ROOT / "arch" / "fusemax.yaml").read_text()
    text = text.replace("tables/", f"{ROOT / 'arch' / 'tables'}/")
    text = text.replace("meshX: 256, meshY: 256", "meshX: 128, meshY: 128")
    assert "meshX: 128, meshY: 128" in text
    (tmp_path / "arch" / "fusemax.yaml").write_text(text)
    monkeypatch.chdir(tmp_path / "work")
    argv = ["--accel", "binding", "--seq", "4K", "--engine", "analytic", "--format", "json"]
    code, out, err = run_cli(main, [*argv, "--arch", "../arch/fusemax.yaml"])
    assert code == 0, err
    mine = json.loads(out)[0]
    shipped = json.loads(run_cli(main, argv)[1])[0]
    # a quarter of the PEs: about four times the compute-bound latency
    assert mine["latency_s"] / shipped["latency_s"] == pytest.approx(4, rel=0.05)
    code, _out, err = run_cli(main, [*argv, "--arch", "nosuch.yaml"])
    assert code == 2 and err.startswith("error: --arch nosuch.yaml: no such file")


def _renamed_rank(tmp_path, old: str, new: str, shapes: bool = True) -> str:
    """The 1-pass cascade and the +Binding mapping with rank `old` renamed `new`, its
    components and index variables too (M -> N, M1 -> N1, m1 -> n1), side by side."""
    upper = (re.compile(rf"\b{old}(\d?)\b"), rf"{new}\1")
    lower = (re.compile(rf"\b{old.lower()}(\d?)\b"), rf"{new.lower()}\1")
    cascade = (ROOT / "cascades" / "attention-1pass.yaml").read_text()
    cascade = lower[0].sub(lower[1], upper[0].sub(upper[1], cascade))
    (tmp_path / "renamed.yaml").write_text(cascade)
    mapping = (ROOT / "mappings" / "binding.yaml").read_text()
    mapping = upper[0].sub(upper[1], mapping)
    mapping = mapping.replace("cascade: attention-1pass", "cascade: renamed.yaml")
    if not shapes:  # the workload sizes no rank: the cascade's example shapes stay
        mapping = re.sub(r"  shapes:[^\n]*\n(    \w+: \w+[^\n]*\n)+", "  shapes: {}\n", mapping)
        assert "shapes: {}" in mapping
    path = tmp_path / "renamed-binding.yaml"
    path.write_text(mapping)
    return str(path)


@pytest.mark.parametrize("old,new", [("M", "N"), ("E", "H"), ("E", "B")])
def test_a_cascades_rank_names_are_its_own(tmp_path, run_cli, old, new):
    """No rank name is special in Python: renamed (N for the keys, H or B for the embedding,
    which also name the batch and head loops inside the model), the cascade and a mapping
    that says which rank the workload sizes give the shipped numbers."""
    argv = ["--seq", "4K", "--engine", "analytic", "--format", "json"]
    mine = run_cli(main, [*argv, "--mapping", _renamed_rank(tmp_path, old, new)])
    shipped = run_cli(main, [*argv, "--accel", "binding"])
    assert mine[0] == 0, mine[2]
    a, b = json.loads(mine[1])[0], json.loads(shipped[1])[0]
    for key in ("latency_s", "traffic_bytes", "util_2d", "util_1d", "energy_pj"):
        assert a[key] == pytest.approx(b[key], rel=1e-12), key


def test_a_rank_the_workload_does_not_size_is_noted(tmp_path, run_cli):
    path = _renamed_rank(tmp_path, "M", "N", shapes=False)
    code, out, err = run_cli(main, ["--seq", "512", "--engine", "analytic", "--mapping", path])
    assert code == 0, err
    assert "rank N = 1024 is the cascade's example shape" in out
    # under the workload's own floor (1024 of 4096 keys): refused, one line
    code, out, err = run_cli(main, ["--seq", "4K", "--engine", "analytic", "--mapping", path])
    assert code == 2 and not out and err.count("\n") == 1
    assert "rank N = 1024 is the cascade's example shape" in err and "floor" in err
    without = Path(path).read_text().replace("  shapes: {}\n", "")
    Path(path).write_text(without)
    code, out, err = run_cli(main, ["--seq", "4K", "--engine", "analytic", "--mapping", path])
    assert code == 2 and "needs 'shapes:'" in err and err.count("\n") == 1


def test_a_copied_architecture_names_the_line_of_a_missing_table(tmp_path, run_cli):
    """fusemax.yaml copied alone: its tables are named relative to its folder and are not
    there. One line naming the copy's line that names the table, not only the missing
    path."""
    text = (ROOT / "arch" / "fusemax.yaml").read_text()
    copy = tmp_path / "mine.yaml"
    copy.write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "energy_table:" in t)
    code, out, err = run_cli(main, ["--arch", str(copy), "--accel", "binding", "--seq", "1K",
                                    "--engine", "analytic"])  # fmt: skip
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: {copy}:{line}:") and "energy_table" in err
    assert str(tmp_path / "tables" / "fusemax.ERT.yaml") in err
