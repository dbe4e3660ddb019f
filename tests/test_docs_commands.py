"""Every command the README and docs/ show runs (copy-paste never fails): each `python -m`
line of their bash blocks, in a scratch folder that sees the repository's folders (so
relative paths resolve and outputs land in the scratch), page by page in order (a command
may use what the one before it wrote). Left out, each for its reason: commands naming a
placeholder (HOST), the install/test/make/docker/CI commands (CI runs them), and
`--backend timeloop` where `timeloop-model` is not installed."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINKED = ("cascades", "arch", "mappings", "tests", "docs", "experiments", "simulator")


def commands(page: Path) -> list[tuple[str, int]]:
    """The `python -m` command lines of a page's bash blocks (continuations joined) and the
    exit status each should end with: 0, or what its comment says (`# ...: exit 1`)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            command, _, comment = line.partition(" #")
            command = command.strip()
            if command.startswith("python -m "):
                status = re.search(r"exit (\d+)", comment)
                out.append((command, int(status.group(1)) if status else 0))
    return out


def _skip(command: str) -> str:
    if "HOST" in command:
        return "a placeholder"
    if "--backend timeloop" in command and shutil.which("timeloop-model") is None:
        return "needs timeloop-model"
    return ""


def _run_page(page: Path, scratch: Path) -> list[tuple[str, int, str]]:
    folder = scratch / page.stem
    folder.mkdir()
    for name in LINKED:
        (folder / name).symlink_to(ROOT / name)
    failures = []
    for command, status in commands(page):
        if _skip(command):
            continue
        words = shlex.split(command)
        r = subprocess.run(
            [sys.executable, *words[1:]], cwd=folder, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        if r.returncode != status:
            failures.append((command, r.returncode, r.stderr[-300:]))
    return failures


def test_the_pages_show_commands():
    assert sum(len(commands(p)) for p in PAGES) >= 40


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_documented_command_runs(tmp_path, page):
    """A page at a time (its commands in order, each may use what the one before wrote):
    pytest-xdist spreads the pages over the cores."""
    failures = _run_page(page, tmp_path)
    assert not failures, failures
