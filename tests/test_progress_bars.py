"""Progress bars (simulator/support/progress.py): off a terminal none is drawn and tqdm is
not imported for it; on a terminal a real bar is drawn."""

from __future__ import annotations

import io
import subprocess
import sys

from simulator.support.progress import new_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_no_bar_is_drawn():
    out = io.StringIO()
    bar = new_bar(total=10, file=out, disable=None, leave=False)
    bar.update(5)
    bar.close()
    assert out.getvalue() == "" and bar.n == 0  # tqdm's disabled bar counts nothing either


def test_on_a_terminal_a_bar_is_drawn():
    out = _Terminal()
    bar = new_bar(total=10, file=out, disable=None, leave=True)
    bar.update(5)
    bar.close()
    assert "5/10" in out.getvalue()


def test_off_a_terminal_tqdm_is_not_imported():
    code = (
        "import io, sys\n"
        "from simulator.support.progress import new_bar\n"
        "new_bar(total=3, file=io.StringIO(), disable=None).update(1)\n"
        "print('tqdm' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
