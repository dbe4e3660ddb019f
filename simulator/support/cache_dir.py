"""Where the simulator keeps what only saves time: the mapper's answers, the cascade parser.

`$FUSEMAX_SIM_CACHE` (a folder; `off`, `0` or empty turns every cache off), else
`$XDG_CACHE_HOME/fusemax-sim`, else `~/.cache/fusemax-sim`; each cache in a folder of its
own below it. What is kept there is only ever read back after checking it is current (a
digest of its inputs), and one that cannot be read or written is ignored.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "FUSEMAX_SIM_CACHE"


def cache_folder(kind: str) -> Path | None:
    """The folder of one cache (`mapper`, `parser`), or None when caching is off."""
    given = os.environ.get(ENV)
    if given is not None:
        return None if given.strip().lower() in ("off", "0", "") else Path(given) / kind
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fusemax-sim" / kind
