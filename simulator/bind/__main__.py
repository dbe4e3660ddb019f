"""`python -m simulator.bind`: write the mapping the mapper finds.

    python -m simulator.bind attention-1pass --arch fusemax --strategy fusemax -o my.yaml
    python -m simulator.bind my-cascade.yaml --strategy unfused --model llama3-8b --seq 32K
    python -m simulator.bind layernorm-matmul --shape E=4096,F=14336 --objective energy
    python -m simulator.run --mapping my.yaml --seq 64K      # the file is an ordinary mapping

CASCADE and --arch are shipped names or paths; the mapping names a path relative to its
own folder when written with -o, and absolute on standard output (it may be saved
anywhere). The mapping is searched for a workload
(default BERT at 1M tokens) under a strategy (default `fused`: no constraint), and written
with its tile factors as found; the header says what the search evaluated and how far the
mapping is from the point's lower bound. `--rule` writes the strategy's rule instead, its
tile factors left to `search` at every point.
"""

from __future__ import annotations

import argparse
import sys

from simulator.cascade.parse import load_cascade
from simulator.drivers.configs import Specs, check_shape, workload_from_args
from simulator.mapper.search import DEFAULT_SEARCH_S, OBJECTIVES, SearchOptions, search
from simulator.spec.arch_file import load_architecture
from simulator.spec.workload import PHASES
from simulator.strategies.auto import (
    DEFAULT_ARCH,
    STRATEGIES,
    bind,
    mapping_yaml,
    reference,
)
from simulator.strategies.context import bind_context
from simulator.support.atomic import check_writable, output_path, write_text
from simulator.support.cli import ArgumentParser, guarded
from simulator.support.paths import data_dir, resolve_spec
from simulator.support.progress import SearchProgress
from simulator.support.units import parse_count


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m simulator.bind",
        description="Generate the mapping (binding, tiling, tensors, schedule) of a cascade "
        "on an architecture with a binding strategy.",
    )
    p.add_argument("cascade", help="cascade file or shipped name")
    p.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="fused",
        help="the constraint searched under (default fused: none)",
    )
    p.add_argument(
        "--arch", help="architecture (default: fusemax for fusemax and fused, else flat)"
    )
    p.add_argument(
        "--objective", choices=OBJECTIVES, default="latency", help="what the search minimises"
    )
    p.add_argument(
        "--search-s",
        type=float,
        default=DEFAULT_SEARCH_S,
        help=f"the search's budget in seconds of evaluations (default {DEFAULT_SEARCH_S:g})",
    )
    p.add_argument(
        "--rule",
        action="store_true",
        help="write the strategy's rule (tile factors searched at every point) instead",
    )
    p.add_argument("-o", "--out", help="write the mapping here (default: standard output)")
    p.add_argument(
        "--sequential",
        action="store_true",
        help="fusemax: one tile at a time (no pipelining across tiles)",
    )
    p.add_argument(
        "--no-reuse",
        action="store_true",
        help="fusemax: no K/V reuse across a group's query heads (they run outermost)",
    )
    p.add_argument("--model", default="bert", help="workload the mapping is generated for")
    p.add_argument("--seq", help="sequence length (default 1M; decode: --context)")
    p.add_argument("--phase", choices=PHASES, default="prefill")
    p.add_argument("--context", help="--phase decode: cached tokens")
    for name in ("batch", "heads", "kv-heads", "embed", "window"):
        p.add_argument(f"--{name}", type=lambda t, n=name: parse_count(t, what=f"--{n}"))
    p.add_argument(
        "--shape",
        action="append",
        metavar="RANK=N[,RANK=N]",
        help="extents of cascade ranks no workload field sizes (e.g. --shape E=4096,F=14336)",
    )
    return p


@guarded
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    workload = workload_from_args(args, default_seq="1M")
    out = output_path(args.out, "mapping.yaml") if args.out else None
    if out is not None:
        check_writable(out)
    cascade_path = resolve_spec("cascades", args.cascade)
    arch_path = resolve_spec("arch", args.arch or DEFAULT_ARCH[args.strategy])
    cascade = load_cascade(cascade_path)
    check_shape([cascade], workload)
    arch = load_architecture(arch_path)
    # a file: its specs named relative to its folder; standard output: by absolute path
    folder = out.parent if out is not None else None
    cascade_ref = reference(cascade_path, data_dir("cascades"), folder)
    arch_ref = reference(arch_path, data_dir("arch"), folder)
    pipelined, reuse = not args.sequential, not args.no_reuse
    if args.rule:
        ctx = bind_context(cascade, arch, workload, cascade_ref, arch_ref)
        data = bind(ctx, args.strategy, pipelined=pipelined, reuse=reuse)
        how = f"the {args.strategy} strategy's rule"
    else:
        options = SearchOptions(args.strategy, pipelined, reuse, args.objective, args.search_s)
        tables = None
        if args.objective in ("energy", "edp"):
            tables = Specs().tables(arch)
        ctx = bind_context(cascade, arch, workload, cascade_ref, arch_ref)
        found = search(ctx, options, f"auto-{args.strategy}", tables, SearchProgress())
        data, s = found.data, found.stats
        how = (
            f"the mapper ({args.strategy} strategy, {args.objective}): {s.found}; "
            f"{s.evaluated} of {s.space} candidates evaluated, {s.distance:.1%} above the "
            "point's latency bound"
            + (
                f"; {s.unevaluated} not evaluated within the budget (raise --search-s)"
                if s.unevaluated
                else ""
            )
        )
    header = (
        f"# Generated by python -m simulator.bind {args.cascade} --strategy {args.strategy}"
        f" for {workload.describe()}:\n# {how}.\n# An ordinary mapping file: edit it and run"
        " it with python -m simulator.run --mapping FILE.\n"
    )
    text = mapping_yaml(data, header)
    if out is None:
        sys.stdout.write(text)
    else:
        write_text(out, text)
        print(f"mapping -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
