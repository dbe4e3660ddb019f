"""The project's promises about itself: README commands, CI script, shipped specs."""

from __future__ import annotations

import re

from simulator.support.paths import data_dir, resolve_spec

from .conftest import ROOT


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.match(r"```bash\n(.*?)```", text, re.S)
    assert block, "README must start with a bash block of the two commands"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_starts_with_install_and_test_commands():
    install, tests = _readme_commands()
    assert install.startswith("pip install -c constraints.txt -e .")
    assert "python -m simulator.run" in install
    assert "--model bert --seq 1M" in install
    assert "pytest" in tests


def test_ci_runs_the_readme_commands_verbatim():
    ci = (ROOT / ".ci" / "run").read_text()
    for command in _readme_commands():
        assert command in ci, command


def test_shipped_spec_folders_resolve():
    for kind in ("cascades",):
        assert any(data_dir(kind).glob("*.yaml"))
    assert resolve_spec("cascades", "attention-1pass").name == "attention-1pass.yaml"


def _tour() -> list[str]:
    """The commands of the README's tour, in order (comments dropped)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## A ten-minute tour", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the tour is a bash block"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_is_a_guide():
    """At most about 200 lines, with a tour of at least eight commands (run, like every
    command of the docs, by tests/test_docs_commands.py); the long reference lives in
    docs/, every page it links exists."""
    assert len(_tour()) >= 8
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 220
    for link in re.findall(r"\]\(([^)#]+)", text):
        assert (ROOT / link).exists(), link


def _python_floor() -> str:
    """The oldest Python pyproject.toml claims (`requires-python = ">=3.X"`)."""
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r'^requires-python = ">=(3\.\d+)"$', text, re.M)
    assert found, "requires-python must be a plain floor, >=3.X"
    return found.group(1)


def test_the_python_floor_is_one_claim_the_pins_support():
    """The Python the project claims (pyproject's requires-python) is the one the README,
    the docs and ruff's target name, and every version pinned in constraints.txt supports
    it: each installed pin's own Requires-Python admits the floor (numpy 2.4, pandas 3 and
    contourpy 1.3.3 have no Python 3.10 wheels)."""
    from importlib import metadata

    from packaging.specifiers import SpecifierSet

    floor = _python_floor()
    assert f"Requires Python >= {floor}." in (ROOT / "README.md").read_text()
    assert f"needs Python >= {floor}" in (ROOT / "docs" / "timeloop-interop.md").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'target-version = "py{floor.replace(".", "")}"' in pyproject
    image = re.search(r"^FROM python:(\d+\.\d+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert image and tuple(map(int, image.group(1).split("."))) >= tuple(map(int, floor.split(".")))
    checked = 0
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" not in line or line.startswith("#"):
            continue
        name, version = line.split("#")[0].strip().split("==")
        try:
            meta = metadata.metadata(name)
        except metadata.PackageNotFoundError:
            continue
        if meta["Version"] != version or not meta.get("Requires-Python"):
            continue
        checked += 1
        assert SpecifierSet(meta["Requires-Python"]).contains(floor), (
            f"{name}=={version} needs Python {meta['Requires-Python']}, the project claims "
            f">={floor}"
        )
    assert checked >= 10  # the pins are installed here: the check is not vacuous


def test_a_command_starts_without_what_it_may_never_use():
    """`python -m simulator.run` loads no progress-bar library (tqdm reads its own version
    through importlib.metadata) and no plotting library until one is drawn: start-up is
    most of a one-point run."""
    import subprocess
    import sys

    probe = "import sys, simulator.run; print(sorted({'tqdm', 'matplotlib'} & set(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-300:]
    assert r.stdout.strip() == "[]", r.stdout
