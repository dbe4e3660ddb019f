"""Every command the README and docs/ show runs (copy-paste never fails): each `python -m`
line of their bash blocks, in a scratch folder that sees the repository's folders (so
relative paths resolve and outputs land in the scratch), page by page in order (a command
may use what the one before it wrote). Left out, each for its reason: commands naming a
placeholder (HOST), the install/test/make/docker/CI commands (CI runs them), and
`--backend timeloop` where `timeloop-model` is not installed.

Each command runs its module's `main` in this process, as `python -m` would call it (the
same argument list, folder and exit status), rather than in a new interpreter: the
modules are imported once for the page, not once a command (half a second each, about
sixty commands). That every module also starts as a command of its own is checked apart
(`test_every_documented_module_starts_as_a_command`), and CI runs the README's first
command in a fresh environment."""

from __future__ import annotations

import contextlib
import importlib
import io
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


def entry_point(module: str):
    """The `main` that `python -m module` calls: the module's own, or its package's
    `__main__`'s."""
    mod = importlib.import_module(module)
    if not hasattr(mod, "main"):
        mod = importlib.import_module(f"{module}.__main__")
    return mod.main


def run_in_process(words: list[str]) -> tuple[int, str]:
    """`python -m module args...` as its `main(args)` in this process: (exit status, the
    end of what it wrote on stderr)."""
    assert words[:2] == ["python", "-m"], words
    main = entry_point(words[2])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(words[3:])
        except SystemExit as stop:  # (argparse's --help and the like)
            code = stop.code if isinstance(stop.code, int) else 1
    return int(code or 0), err.getvalue()[-300:]


def _run_page(page: Path, scratch: Path, monkeypatch) -> list[tuple[str, int, str]]:
    folder = scratch / page.stem
    folder.mkdir()
    for name in LINKED:
        (folder / name).symlink_to(ROOT / name)
    monkeypatch.chdir(folder)
    failures = []
    for command, status in commands(page):
        if _skip(command):
            continue
        code, tail = run_in_process(shlex.split(command))
        if code != status:
            failures.append((command, code, tail))
    return failures


def test_the_pages_show_commands():
    assert sum(len(commands(p)) for p in PAGES) >= 40


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_documented_command_runs(tmp_path, page, monkeypatch):
    """A page at a time (its commands in order, each may use what the one before wrote):
    pytest-xdist spreads the pages over the cores."""
    failures = _run_page(page, tmp_path, monkeypatch)
    assert not failures, failures


def test_every_documented_module_starts_as_a_command(tmp_path):
    """Each module the pages run starts as `python -m` in a new interpreter (its imports,
    its `__main__`): asked for its help, which exits 0 having loaded everything."""
    modules = sorted({shlex.split(c)[2] for p in PAGES for c, _ in commands(p)})
    assert len(modules) >= 5, modules
    for module in modules:
        r = subprocess.run(
            [sys.executable, "-m", module, "--help"], cwd=tmp_path, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        assert r.returncode == 0 and "usage" in r.stdout.lower(), (module, r.stderr[-300:])
