"""`python -m simulator.export timeloop`: write every Einsum of a configuration as a Timeloop
v0.4 input (problem, architecture, mapping, ERT, ART) for Timeloop's front end, and the
same in the processed form the `timeloop-model` binary reads (`timeloop-model.yaml`).

    python -m simulator.export timeloop --accel binding --model bert --seq 4K -o out/tl
    python -m simulator.export timeloop --mapping my-mapping.yaml --seq 64K -o out/mine

One directory per Einsum (`DIR/QK/`, `DIR/LM/`, ...); see simulator/timeloop/inputs.py
for what each file holds. `--timeloop-version 3.0.3` writes the problem keys as Timeloop
releases up to v3.0.3 read them (`data-spaces`, `read-write`); the default is the spelling
of Timeloop since February 2024 (`data_spaces`, `read_write`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulator.drivers.configs import ALIASES, Specs
from simulator.spec.workload import make_workload
from simulator.support.atomic import write_text
from simulator.support.cli import ArgumentParser, guarded
from simulator.support.errors import SpecError
from simulator.support.units import parse_count
from simulator.timeloop.backend import export_fitting
from simulator.timeloop.inputs import (
    ExportedEinsum,
    Spelling,
    dump,
    spelling_for_version,
)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m simulator.export", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(
        dest="format", metavar="timeloop", required=True, parser_class=ArgumentParser
    )
    t = sub.add_parser("timeloop", help="Timeloop v0.4 inputs, one directory per Einsum")
    t.add_argument("--accel", default="binding", help="configuration (default: binding)")
    t.add_argument("--mapping", help="a mapping file instead of --accel")
    t.add_argument("--arch", help="architecture file replacing the mapping's own")
    t.add_argument("--cascade", help="cascade file replacing the mapping's own")
    t.add_argument("--model", default="bert", help="bert, trxl, t5, xlm or custom")
    t.add_argument("--seq", default="4K", help="sequence length (1K, 64k, 1M ...)")
    for name in ("batch", "heads", "embed", "ffn", "dmodel"):
        t.add_argument(f"--{name}", type=lambda s, o=f"--{name}": parse_count(s, what=o))
    t.add_argument(
        "--timeloop-version",
        metavar="VERSION",
        help="the Timeloop release the files are for (3.0.3 or earlier: 'data-spaces', "
        "'read-write'; 4, the default: 'data_spaces', 'read_write')",
    )
    t.add_argument("-o", "--out", required=True, help="output directory")
    return p


def target_spelling(version: str | None) -> Spelling:
    """The problem-key spelling for `--timeloop-version`, a bad one an error naming it."""
    try:
        return spelling_for_version(version)
    except SpecError as err:
        raise SpecError(f"--timeloop-version: {err.message}") from None


def exported(args: argparse.Namespace) -> list[ExportedEinsum]:
    """Every Einsum of the configuration the arguments name, exported in memory."""
    spelling = target_spelling(args.timeloop_version)  # checked before any work
    overrides = {k: getattr(args, k) for k in ("batch", "heads", "embed", "ffn", "dmodel")}
    workload = make_workload(args.model, args.seq, overrides)
    specs = Specs(cascade_override=args.cascade, arch_override=args.arch)
    config = args.mapping or ALIASES.get(args.accel, args.accel)
    ex = export_fitting(specs, config, workload, spelling)
    if ex.note:
        print(f"note: {ex.note}", file=sys.stderr)
    return ex.einsums


def write(einsums: list[ExportedEinsum], out: Path) -> None:
    """Write every Einsum's directory; each file appears whole (written aside, renamed)."""
    texts = [(e.einsum, [(n, dump(data)) for n, data in e.files]) for e in einsums]
    for einsum, files in texts:
        for name, text in files:
            write_text(out / einsum / name, text)


@guarded
def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m simulator.export`."""
    args = build_parser().parse_args(argv)
    einsums = exported(args)
    out = Path(args.out)
    write(einsums, out)
    listing = ", ".join(f"{e.einsum} ({e.array})" for e in einsums)
    print(f"wrote {len(einsums)} Einsums to {out}: {listing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
