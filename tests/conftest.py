"""Shared fixtures: paths to the shipped specs and a CLI runner capturing exit codes."""

from __future__ import annotations

import compileall
import contextlib
import io
import os
import tempfile
from pathlib import Path

import pytest

from simulator.support import collector

ROOT = Path(__file__).resolve().parent.parent
CASCADES = ROOT / "cascades"
DATA = Path(__file__).resolve().parent / "data"

# The mapper's cache (simulator/mapper/cache.py) in a folder of this test session's own:
# tests never read answers a developer's earlier runs left, and leave none behind them.
os.environ.setdefault("FUSEMAX_SIM_CACHE", tempfile.mkdtemp(prefix="fusemax-sim-tests-"))

# The package compiled once, beside its sources as Python keeps it, for the Python processes
# the tests start (the CLIs, the documented commands, pytest-xdist's workers): where
# PYTHONDONTWRITEBYTECODE is set, as on CI, each would compile it afresh (half a second of
# CPU a process, about 15 s of the suite). A tree that cannot be written is left as it is.
if "PYTEST_XDIST_WORKER" not in os.environ:
    for _package in ("simulator", "experiments"):
        compileall.compile_dir(ROOT / _package, quiet=2)


def pytest_configure(config):
    # The collector's thresholds the command-line tools run under (simulator/support/
    # collector.py), in this session's processes too: the suite runs what the tools run.
    collector.tune()


@pytest.fixture
def run_cli():
    """Run a CLI `main(argv)` in-process; return (exit code, stdout, stderr)."""

    def runner(main, argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
        return code, out.getvalue(), err.getvalue()

    return runner
