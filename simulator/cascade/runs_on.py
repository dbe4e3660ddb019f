"""Which shipped architectures can run a cascade: the operations its Einsums need that no
PE array of an architecture declares (`operations:` of the compute components).

Said before any binding (`python -m simulator.cascade passes`), so a cascade that needs an
operation a design lacks -- `log`, with no unit that gives a value's exponent as a number
on FuseMax's or FLAT's PEs -- is known when it is written, not when it is bound.
"""

from __future__ import annotations

from simulator.cascade.ir import Cascade
from simulator.cascade.ops import ops_per_point
from simulator.spec.arch_file import load_architecture
from simulator.support.paths import data_dir


def needed_operations(cascade: Cascade) -> list[str]:
    """The operation kinds the cascade's compute Einsums perform, in first-use order."""
    kinds: dict[str, None] = {}
    for e in cascade.einsums:
        if e.kind != "compute":
            continue
        for kind, n in ops_per_point(cascade, e).items():
            if n:
                kinds[kind] = None
    return list(kinds)


def missing_by_architecture(cascade: Cascade) -> dict[str, list[str]]:
    """Shipped architecture name -> the operations it cannot run (empty: it can)."""
    kinds = needed_operations(cascade)
    out: dict[str, list[str]] = {}
    for path in sorted(data_dir("arch").glob("*.yaml")):
        arch = load_architecture(path)
        out[path.stem] = [k for k in kinds if all(a.op(k) is None for a in arch.arrays)]
    return out


def runs_on_line(cascade: Cascade) -> str:
    """One line: the shipped architectures that can run the cascade, and why the others
    cannot."""
    missing = missing_by_architecture(cascade)
    able = [name for name, ops in missing.items() if not ops]
    unable = [
        f"{name} (no array declares {', '.join(ops)})" for name, ops in missing.items() if ops
    ]
    line = f"runs on the shipped architectures: {', '.join(able) or 'none'}"
    if unable:
        line += f"; not on {'; '.join(unable)}"
    return line
