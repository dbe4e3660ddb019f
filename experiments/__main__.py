"""`python -m experiments` (`make experiments`): the paper's figures, result CSVs and a report.

    python -m experiments                          everything into experiments/out/
    python -m experiments --models bert --seqs 1K,4K --out /tmp/x   a subset
    python -m experiments --compare                published values as markers on figures
    python -m experiments --only attention,cascades --jobs 1

Writes results/*.csv, fig*.pdf/png and report.md (last).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from experiments.experiment import Selection
from experiments.run import RunOptions, default_experiments, run
from simulator.spec.workload import default_sequence_lengths, load_models, workloads_file
from simulator.support.atomic import check_writable
from simulator.support.cli import ArgumentParser, guarded
from simulator.support.errors import SpecError
from simulator.support.units import format_count, parse_count

DEFAULT_OUT = Path(__file__).resolve().parent / "out"


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m experiments", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    p.add_argument("--models", help="comma-separated model keys (default: all four)")
    p.add_argument("--seqs", help="comma-separated sequence lengths, e.g. 1K,4K (default: six)")
    p.add_argument(
        "--only", help=f"comma-separated experiments ({', '.join(default_experiments())})"
    )
    p.add_argument(
        "--jobs",
        type=lambda t: parse_count(t, what="--jobs"),
        default=os.cpu_count() or 1,
        help="worker processes (default: one per core; 1 = no pool)",
    )
    p.add_argument("--compare", action="store_true", help="overlay published values on figures")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def options_from(args: argparse.Namespace) -> RunOptions:
    models = load_models(workloads_file())  # the paper's models
    chosen = [m.lower() for m in _split(args.models)] or list(models)
    for m in chosen:
        if m not in models:
            raise SpecError(f"--models: unknown model '{m}' (known: {', '.join(models)})")
    seqs = [parse_count(s, what="--seqs") for s in _split(args.seqs)] or default_sequence_lengths()
    names = _split(args.only) or list(default_experiments())
    for n in names:
        if n not in default_experiments():
            raise SpecError(
                f"--only: unknown experiment '{n}' (known: {', '.join(default_experiments())})"
            )
    order = [n for n in default_experiments() if n in names]
    check_out_folder(args.out)
    return RunOptions(
        out=args.out,
        selection=Selection(tuple(dict.fromkeys(chosen)), tuple(dict.fromkeys(seqs))),
        experiments=tuple(order),
        jobs=max(1, args.jobs),
        compare=args.compare,
        progress=not args.no_progress,
    )


def check_out_folder(out: Path) -> None:
    """Before any work: `--out` is a folder that exists or can be made (its parent exists)
    and that takes files -- one line otherwise, not a traceback after a minute's work."""
    if out.exists() and not out.is_dir():
        raise SpecError(f"--out {out}: a file, not a folder")
    if not out.exists() and not out.parent.is_dir():
        raise SpecError(f"--out {out}: folder {out.parent} does not exist")
    if out.exists():
        check_writable(out / "report.md")
    elif not os.access(out.parent, os.W_OK):
        raise SpecError(f"--out {out}: cannot create it in {out.parent} (no write permission)")


def _terminate(signum, frame) -> None:  # noqa: ARG001
    # SIGTERM unwinds like Ctrl-C, so every file being written is removed, not left partial.
    raise KeyboardInterrupt


@guarded
def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m experiments`."""
    options = options_from(build_parser().parse_args(argv))
    signal.signal(signal.SIGTERM, _terminate)
    try:
        summary = run(options)
    except KeyboardInterrupt:
        print("interrupted: no partial result file was left", file=sys.stderr)
        return 130
    print(
        f"{summary.points} points, {len(summary.written)} files in {options.out} "
        f"({summary.seconds:.1f} s); report: {summary.report}"
    )
    sel = options.selection
    print(f"models {', '.join(sel.models)}; seqs {', '.join(format_count(s) for s in sel.seqs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
