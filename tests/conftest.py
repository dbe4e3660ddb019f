"""Shared fixtures: paths to the shipped specs and a CLI runner capturing exit codes."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASCADES = ROOT / "cascades"
DATA = Path(__file__).resolve().parent / "data"

# The mapper's cache (simulator/mapper/cache.py) in a folder of this test session's own:
# tests never read answers a developer's earlier runs left, and leave none behind them.
os.environ.setdefault("FUSEMAX_SIM_CACHE", tempfile.mkdtemp(prefix="fusemax-sim-tests-"))


@pytest.fixture
def run_cli():
    """Run a CLI `main(argv)` in-process; return (exit code, stdout, stderr)."""

    def runner(main, argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
        return code, out.getvalue(), err.getvalue()

    return runner
