"""Energy and area: tables are validated, the breakdown adds up, outputs carry the fields."""

from __future__ import annotations

import json
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
            "    - {name: read, energy: 12512.78}\n",
            "",
            "'global_buffer' lacks action(s) read",
        ),
        (
            "ERT",
            "{name: compute, energy: 17.1645}",
            "{name: compute, energy: -1.0}",
            "negative energy",
        ),
        ("ERT", "  - name: PE2D.max\n", "  - name: PE2D.maximum\n", "component 'PE2D.maximum'"),
        ("ART", "{name: PE2D.mac, area: 1545.0}", "{name: PE2D.mac, area: -3}", "'PE2D.mac'"),
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
