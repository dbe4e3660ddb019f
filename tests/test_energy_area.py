"""Energy and area: tables are validated, the breakdown adds up, outputs carry the fields."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from simulator.run import main

from .conftest import ROOT


def _run_json(run_cli, *argv):
    code, out, err = run_cli(main, [*argv, "--format", "json"])
    assert code == 0, err
    return json.loads(out)


def test_breakdown_sums_to_total(run_cli):
    for accounting in ("corrected", "published"):
        for r in _run_json(run_cli, "--seq", "16K", "--accounting", accounting):
            assert r["energy_accounting"] == accounting
            parts = r["energy_per_component_pj"]
            assert sum(parts.values()) == pytest.approx(r["energy_pj"], rel=1e-12)
            assert min(parts.values()) >= 0


def test_energy_ratios_and_area(run_cli):
    records = {r["accelerator"]: r for r in _run_json(run_cli, "--seq", "4K")}
    fuse, flat, unfused = records["binding"], records["flat"], records["unfused"]
    assert fuse["energy_vs_flat"] == pytest.approx(fuse["energy_pj"] / flat["energy_pj"])
    assert fuse["energy_vs_unfused"] == pytest.approx(fuse["energy_pj"] / unfused["energy_pj"])
    assert flat["area_um2"] == unfused["area_um2"]  # the same hardware
    assert fuse["area_um2"] > 0


def test_published_accounting_leaves_cascade_exp_unpriced(run_cli):
    corrected = _run_json(run_cli, "--seq", "1K", "--accel", "cascade")[0]
    published = _run_json(
        run_cli, "--seq", "1K", "--accel", "cascade", "--accounting", "published"
    )[0]
    assert corrected["energy_per_component_pj"]["PE1D.exponential"] > 0
    assert "PE1D.exponential" not in published["energy_per_component_pj"]


def test_breakdown_table(run_cli):
    code, out, _ = run_cli(main, ["--seq", "4K", "--accel", "binding", "--breakdown"])
    assert code == 0 and "energy by component" in out and "PE2D.mac" in out


def _arch_with_table(tmp_path, old: str, new: str, kind: str = "ERT") -> str:
    tables = tmp_path / "tables"
    shutil.copytree(ROOT / "arch" / "tables", tables)
    path = tables / f"fusemax.{kind}.yaml"
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    shutil.copy(ROOT / "arch" / "fusemax.yaml", tmp_path / "fusemax.yaml")
    return str(tmp_path / "fusemax.yaml")


@pytest.mark.parametrize(
    "kind,old,new,fragment",
    [
        (
            "ERT",
            "    - {name: read, energy: 12512.7}\n",
            "",
            "'global_buffer' lacks action(s) read",
        ),
        (
            "ERT",
            "{name: compute, energy: 12.938 * (datawidth / 16) ** 2}",
            "{name: compute, energy: -1.0}",
            "non-negative number of pJ, got -1.0",
        ),
        (
            "ERT",
            "{name: compute, energy: 12.938 * (datawidth / 16) ** 2}",
            "{name: compute, energy: .nan}",
            "got nan",
        ),
        (
            "ERT",
            "{name: compute, energy: 12.938 * (datawidth / 16) ** 2}",
            "{name: compute, energy: 1e400}",
            "inf is not",
        ),
        ("ART", "{name: PE2D.mac, area: 2257.5}", "{name: PE2D.mac, area: .inf}", "'PE2D.mac'"),
        (
            "ERT",
            "    - {name: compute, energy: 12.938 * (datawidth / 16) ** 2}\n"
            "    - {name: leak, energy: 0.081719}\n",
            "    - {name: compute, energy: 12.938 * (datawidth / 16) ** 2}\n",
            "'PE2D.mac' lacks action(s) leak",
        ),
        ("ERT", "  - name: PE2D.max\n", "  - name: PE2D.maximum\n", "component 'PE2D.maximum'"),
        ("ART", "{name: PE2D.mac, area: 2257.5}", "{name: PE2D.mac, area: -3}", "'PE2D.mac'"),
        (
            "ART",
            "  - {name: PE1D.divide, area: 23740.9375}\n",
            "",
            "no entry for component 'PE1D.divide'",
        ),
    ],
)
def test_malformed_tables_are_clean_errors(tmp_path, run_cli, kind, old, new, fragment):
    arch = _arch_with_table(tmp_path, old, new, kind)
    code, out, err = run_cli(main, ["--arch", arch, "--accel", "binding", "--seq", "4K"])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and fragment in err and f"fusemax.{kind}.yaml" in err, err


def test_updates_are_priced_as_updates(tmp_path, run_cli):
    """Timeloop prices a partial sum written back as an `update`, not a `write`: zero the
    updates' energy and the energy falls (the shipped tables have update = write, so the
    shipped numbers do not move)."""
    tables = tmp_path / "tables"
    shutil.copytree(ROOT / "arch" / "tables", tables)
    path = tables / "fusemax.ERT.yaml"
    text, n = re.subn(
        r"\{name: update, energy: [^}]*\}", "{name: update, energy: 0.0}", path.read_text()
    )
    assert n >= 3
    path.write_text(text)
    shutil.copy(ROOT / "arch" / "fusemax.yaml", tmp_path / "fusemax.yaml")
    argv = ["--accel", "binding", "--seq", "4K", "--engine", "analytic", "--format", "json"]
    shipped = json.loads(run_cli(main, argv)[1])[0]["energy_pj"]
    code, out, err = run_cli(main, [*argv, "--arch", str(tmp_path / "fusemax.yaml")])
    assert code == 0, err
    assert json.loads(out)[0]["energy_pj"] < shipped * (1 - 1e-6)


def test_an_array_without_registers_prices_none(tmp_path, run_cli):
    """The register file is optional in an architecture; energy then prices none for that
    array (it crashed on a missing component)."""
    tables = tmp_path / "tables"
    shutil.copytree(ROOT / "arch" / "tables", tables)
    for path in tables.rglob("fusemax.ERT.yaml"):
        path.write_text(
            re.sub(r"  - name: reg_file_1d\n(    .*\n)+?(?=  - name)", "", path.read_text())
        )
    for path in tables.rglob("fusemax.ART.yaml"):
        path.write_text(re.sub(r"  - \{name: reg_file_1d.*\n", "", path.read_text()))
    text = (ROOT / "arch" / "fusemax.yaml").read_text()
    component = (
        "      - !Component\n        name: reg_file_1d\n        class: storage\n"
        "        subclass: aladdin_register\n"
        "        attributes: {depth: 32, width: 16, datawidth: 16}\n"
    )
    assert component in text
    (tmp_path / "fusemax.yaml").write_text(text.replace(component, ""))
    argv = ["--accel", "binding", "--seq", "4K", "--format", "json", "--breakdown"]
    code, out, err = run_cli(main, [*argv, "--arch", str(tmp_path / "fusemax.yaml")])
    assert code == 0, err
    mine = json.loads(out)[0]
    shipped = json.loads(run_cli(main, argv)[1])[0]
    assert mine["energy_pj"] < shipped["energy_pj"] and mine["area_um2"] < shipped["area_um2"]
    assert not any("reg_file_1d" in name for name in dict(mine["energy_per_component_pj"]))


def test_a_composite_operation_is_priced_as_its_steps(run_cli):
    """FLAT's 1D PEs compute tanh via {add: 3, exp: 1, divide: 1}: each soft-capped logit
    costs one more divider action, priced by the divider's existing entry (36.251153 pJ,
    no leakage), so the divider's energy grows by exactly that per logit."""

    def divide_pj(cascade: str) -> float:
        argv = ["--cascade", cascade, "--mapping", "auto:flat", "--model", "bert", "--seq", "1K"]
        (record,) = _run_json(run_cli, *argv, "--engine", "analytic")
        return record["energy_per_component_pj"]["PE1D.divide"]

    logits = 64 * 12 * 1024 * 1024  # BERT: batch 64 x 12 heads, M = P = 1K
    capped, plain = divide_pj("attention-softcap-3pass"), divide_pj("attention-3pass")
    assert plain == pytest.approx(logits * 36.251153, rel=1e-9)  # A = SN / SD
    assert capped - plain == pytest.approx(logits * 36.251153, rel=1e-9)
