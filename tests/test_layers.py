"""The pipeline's layers and the absence of import cycles, checked by import-linter with
the contracts in pyproject.toml -- and shown to catch a back-import when one is added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

LINT = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    if not LINT.exists():
        pytest.fail(f"lint-imports not installed beside {sys.executable}: pip install -e '.[test]'")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_contracts_hold():
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


def _copy(tmp_path: Path) -> Path:
    for name in ("simulator", "experiments"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("out"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("module", "back_import", "contract"),
    [
        # planning reaching up into the orchestrator
        ("simulator/plan/facts.py", "from simulator.core import evaluate", "pipeline's layers"),
        # a spec reader needing a configuration
        ("simulator/spec/mapping.py", "from simulator.drivers import configs", "pipeline's layers"),
        # one timing engine importing the other
        (
            "simulator/timing/cycle/simulate.py",
            "from simulator.timing import analytic",
            "never import each other",
        ),
        # an experiment importing the registry that imports it
        ("experiments/attention.py", "from experiments import registry", "no import cycle"),
        # the package importing its experiments
        ("simulator/core/result.py", "import experiments.published", "never the other way"),
    ],
)
def test_a_back_import_breaks_a_contract(tmp_path, module, back_import, contract):
    root = _copy(tmp_path)
    path = root / module
    path.write_text(path.read_text() + f"\n{back_import}  # noqa: E402, F401\n")
    run = _lint(root)
    assert run.returncode != 0
    broken = run.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, run.stdout


def test_the_top_of_the_package_holds_the_entry_points():
    """Every module at the top of simulator/ is a `python -m` entry point; the rest lives in
    a folder named for what it is (pyproject.toml's layers name them)."""
    top = sorted(p.name for p in (ROOT / "simulator").glob("*.py") if p.name != "__init__.py")
    assert top, "no modules at the top of simulator/"
    for name in top:
        text = (ROOT / "simulator" / name).read_text(encoding="utf-8")
        assert 'if __name__ == "__main__":' in text, f"simulator/{name} is no entry point"


def test_no_two_modules_share_a_name():
    """A module's or a package's name says which one it is, wherever it is imported from
    (the package markers `__init__` and `__main__` aside)."""
    package = ROOT / "simulator"
    seen: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts or rel.parts[0] == "_data":
            continue
        if path.is_dir() and (path / "__init__.py").exists():
            name = path.name
        elif path.suffix == ".py" and path.stem not in ("__init__", "__main__"):
            name = path.stem
        else:
            continue
        seen.setdefault(name, []).append(str(rel))
    shared = {name: where for name, where in seen.items() if len(where) > 1}
    assert not shared, shared
