"""Shared fixtures: paths to the shipped specs and a CLI runner capturing exit codes."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASCADES = ROOT / "cascades"
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def run_cli():
    """Run a CLI `main(argv)` in-process; return (exit code, stdout, stderr)."""

    def runner(main, argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
        return code, out.getvalue(), err.getvalue()

    return runner
