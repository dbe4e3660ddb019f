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
