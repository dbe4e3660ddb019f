"""The project's promises about itself: README commands, CI script, shipped specs."""

from __future__ import annotations

import re

from simulator.paths import data_dir, resolve_spec

from .conftest import ROOT


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.match(r"```bash\n(.*?)```", text, re.S)
    assert block, "README must start with a bash block of the two commands"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_starts_with_install_and_test_commands():
    install, tests = _readme_commands()
    assert install.startswith("pip install -e .") and "python -m simulator.run" in install
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
