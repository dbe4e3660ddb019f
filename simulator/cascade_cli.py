"""`python -m simulator.cascade`: analyse, execute and compare cascades before any mapping.

    passes  FILE [--shape M=4096,...] [--format table|json]   passes and live footprint
    ops     FILE [--shape ...] [--baseline FILE] [--format ...] operation counts per Einsum
    compare FILE_A FILE_B [--shape ...] [--scale S] [--seed N]  numerical equivalence (exit 0/1)
    compare FILE --reference [--shape ...] [--scale S] [--seed N]   FILE against its `reference:`
    eval    FILE [--shape ...] [--scale S] [--seed N]           run on random inputs
    graph   FILE [--format text|dot]                            dependencies and recurrences
    show    FILE [--canonical]                                  the cascade (canonical form)
    rewrite FILE [--target-passes N] [--allow-unstable] [-o OUT]  an equivalent cascade with
                                                                fewer passes, rules and checks
    rewrite FILE --arch A [--model M] [--seq S] [--batch B] [--heads H] [--kv-heads G]
                          [--at R=N,...]
            [--objective latency|energy|edp|traffic|passes]     every candidate mapped and
                                                                timed on A; the best written
    list                                                        the shipped cascades

FILE is a path or the name of a shipped cascade (`attention-1pass`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from simulator.cascade.draft import without_dead
from simulator.cascade.execute import (
    MAX_EVALUATION_BYTES,
    Comparison,
    compare,
    compare_reference,
    evaluate,
    evaluation_bytes,
    random_inputs,
)
from simulator.cascade.graph import to_dot, to_text
from simulator.cascade.ir import Cascade
from simulator.cascade.ops import KINDS, cascade_ops, totals
from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade.rewrite import RewriteResult, rewrite
from simulator.cascade.rewrite.canonical import canonical
from simulator.cascade.rewrite.rule_search import Candidate
from simulator.cascade.runs_on import missing_by_architecture, runs_on_line
from simulator.cascade.shapes import MissingShapes, parse_shape_arg, resolve_shapes
from simulator.cascade.write import to_yaml
from simulator.drivers.configs import Specs
from simulator.drivers.rewrite_cost import OBJECTIVES, best, rank, render
from simulator.spec.workload import make_workload, parse_shape
from simulator.support.atomic import check_writable, output_path, write_text
from simulator.support.cli import ArgumentParser, guarded
from simulator.support.errors import SpecError
from simulator.support.paths import data_dir, resolve_spec
from simulator.support.pool import jobs_option, local_jobs
from simulator.support.textfmt import table
from simulator.support.units import format_count, whole_number

_seed = whole_number("--seed", 0)


def _count(option: str) -> Callable[[str], int]:
    return whole_number(option)


def _positive(option: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise SpecError(f"{option}: '{text}' is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise SpecError(f"{option} must be a positive number, got {text}")
        return value

    return parse


def _load(name: str) -> Cascade:
    return load_cascade(resolve_spec("cascades", name))


def _shapes(cascade: Cascade, text: str | None) -> dict[str, int]:
    return resolve_shapes(cascade, parse_shape_arg(text) if text else None)


def _symbolic_value(symbol: str, shapes: dict[str, int] | None) -> int | None:
    if shapes is None:
        return None
    value = 1
    for part in symbol.split("*"):
        if part == "1":
            continue
        if part not in shapes:
            return None
        value *= shapes[part]
    return value


def cmd_passes(args: argparse.Namespace) -> int:
    cascade = _load(args.file)
    report = analyze_passes(cascade)
    try:
        shapes = _shapes(cascade, args.shape)
    except MissingShapes:
        if args.shape:
            raise
        shapes = None  # symbolic only: the file gives no (or not all) default shapes
    if args.format == "json":
        data = report.to_json()
        for fiber in data["fibers"]:
            fiber["live_footprint_values"] = _symbolic_value(fiber["live_footprint"], shapes)
        data["operations_missing"] = missing_by_architecture(cascade)
        print(json.dumps(data, indent=2))
        return 0
    print(f"cascade {cascade.name}: {report.max_passes} pass(es) (max over ranks)")
    print(runs_on_line(cascade))
    print()
    print(
        table(
            ["rank", "passes", "pass boundaries (full reductions)"],
            [(g, n, ", ".join(why) or "-") for g, n, why in report.per_rank],
        )
    )
    print()
    rows = []
    for f in report.fibers:
        values = _symbolic_value(f.live_footprint, shapes)
        rows.append(
            (
                f.tensor,
                f.rank,
                "x".join(f.components),
                f.passes,
                f.live_footprint,
                "-" if values is None else values,
            )
        )
    print(
        table(
            ["tensor", "rank", "indexed as", "passes", "live footprint", "values"],
            rows,
            right=[False, False, False, True, False, True],
        )
    )
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    cascade = _load(args.file)
    shapes = _shapes(cascade, args.shape)
    ops = cascade_ops(cascade, shapes)
    base = None
    if args.baseline:
        other = _load(args.baseline)
        names = {r for t in other.tensors for r in t.ranks} | set(other.params)
        overrides = {k: v for k, v in shapes.items() if k in names}
        base = totals(cascade_ops(other, resolve_shapes(other, overrides)))
    total = totals(ops)
    if args.format == "json":
        data = {
            "cascade": cascade.name,
            "shapes": shapes,
            "einsums": [
                {
                    "einsum": o.einsum,
                    "kind": o.kind,
                    "points": o.points,
                    **{k: o.count(k) for k in KINDS},
                }
                for o in ops
            ],
            "total": {k: total.get(k, 0) for k in KINDS},
        }
        if base is not None:
            data["baseline"] = {k: base.get(k, 0) for k in KINDS}
        print(json.dumps(data, indent=2))
        return 0
    kinds = [k for k in KINDS if total.get(k) or (base and base.get(k))]
    rows = [(o.einsum, o.points, *[o.count(k) for k in kinds]) for o in ops if o.kind == "compute"]
    rows.append(("total", "", *[total.get(k, 0) for k in kinds]))
    if base is not None:
        rows.append((f"baseline ({args.baseline})", "", *[base.get(k, 0) for k in kinds]))
        rows.append(("difference", "", *[f"{total.get(k, 0) - base.get(k, 0):+d}" for k in kinds]))
    print(f"cascade {cascade.name}, shapes {', '.join(f'{k}={v}' for k, v in shapes.items())}")
    print(table(["einsum", "points", *kinds], rows, right=[False] + [True] * (1 + len(kinds))))
    return 0


def _comparison(args: argparse.Namespace) -> Comparison:
    """`compare A B` (two cascades) or `compare A --reference` (A against the numpy
    reference its file names); either way the same report."""
    prog = "python -m simulator.cascade compare"
    if args.reference and args.file_b is not None:
        raise SpecError(f"{prog}: give one cascade with --reference, or two without it")
    if not args.reference and args.file_b is None:
        raise SpecError(f"{prog}: the following arguments are required: file_b")
    overrides = parse_shape_arg(args.shape) if args.shape else None
    a = _load(args.file_a)
    if args.reference:
        return compare_reference(a, overrides, seed=args.seed, scale=args.scale, rtol=args.rtol)
    b = _load(args.file_b)
    return compare(a, b, overrides, seed=args.seed, scale=args.scale, rtol=args.rtol)


def cmd_compare(args: argparse.Namespace) -> int:
    result = _comparison(args)
    if args.format == "json":
        print(
            json.dumps(
                {
                    "a": result.cascade_a,
                    "b": result.cascade_b,
                    "equivalent": result.equivalent,
                    "rtol": result.rtol,
                    "shapes": dict(result.shapes),
                    "outputs": [
                        {
                            "tensor": o.tensor,
                            "max_rel_error": o.max_rel_error,
                            "nonfinite_a": o.nonfinite_a,
                            "nonfinite_b": o.nonfinite_b,
                        }
                        for o in result.outputs
                    ],
                },
                indent=2,
            )
        )
    else:
        for o in result.outputs:
            status = (
                "ok"
                if o.max_rel_error <= result.rtol and not (o.nonfinite_a or o.nonfinite_b)
                else "DIFFER"
            )
            print(
                f"{o.tensor}: max relative error {o.max_rel_error:.3g} (rtol {result.rtol:g})"
                f"  {status}"
            )
            for name, count in (
                (result.cascade_a, o.nonfinite_a),
                (result.cascade_b, o.nonfinite_b),
            ):
                if count:
                    print(
                        f"  {name}: {o.tensor} has {count} non-finite value(s): the cascade "
                        "overflows (inf/nan) at these input magnitudes"
                    )
        verdict = "equivalent" if result.equivalent else "NOT equivalent"
        print(
            f"{result.cascade_a} vs {result.cascade_b}: {verdict} on random inputs "
            f"(seed {args.seed}, scale {args.scale:g})"
        )
    return 0 if result.equivalent else 1


# A cascade whose own shapes are past the evaluation's budget is evaluated at shapes scaled
# down to this many bytes of tensors: a check in about a second, not a machine's memory.
EVALUATION_TARGET_BYTES = 16 * 2**20


def _evaluable(cascade: Cascade, shapes: dict[str, int]) -> dict[str, int]:
    """Shapes a numerical evaluation can hold: `shapes` when they fit its budget, else the
    cascade's own scaled down to EVALUATION_TARGET_BYTES (a vocabulary of 128K is the
    cascade's point, not a check's) -- the largest extent its file gives halved, again and
    again, where the halves stay whole and its chunks divide."""
    if evaluation_bytes(cascade, shapes) <= MAX_EVALUATION_BYTES:
        return shapes
    own = dict(cascade.shapes)
    while evaluation_bytes(cascade, shapes) > EVALUATION_TARGET_BYTES:
        for name in sorted(own, key=lambda r: (-own[r], r)):
            if own[name] % 2:
                continue
            try:
                smaller = resolve_shapes(cascade, {**own, name: own[name] // 2})
            except SpecError:
                continue
            own[name] //= 2
            shapes = smaller
            break
        else:
            return shapes  # nothing halves: the evaluation says it does not fit
    return shapes


def cmd_eval(args: argparse.Namespace) -> int:
    cascade = _load(args.file)
    shapes = _shapes(cascade, args.shape)
    if not args.shape:
        fitted = _evaluable(cascade, shapes)
        if fitted != shapes:
            scaled = ", ".join(f"{r}={format_count(fitted[r])}" for r, _v in cascade.shapes)
            print(
                f"{cascade.name}'s own shapes hold "
                f"{evaluation_bytes(cascade, shapes) / 2**30:.3g} GiB of float64 tensors: "
                f"evaluated at {scaled} instead (--shape sets them)"
            )
            shapes = fitted
    inputs = random_inputs(cascade, shapes, args.seed, args.scale)
    arrays = evaluate(cascade, inputs, shapes)
    rows = []
    status = 0
    for name in cascade.outputs:
        value = arrays[name]
        bad = int((~np.isfinite(value)).sum())
        finite = value[np.isfinite(value)]
        rows.append(
            (
                name,
                "x".join(map(str, value.shape)) or "scalar",
                f"{finite.min():.6g}" if finite.size else "-",
                f"{finite.max():.6g}" if finite.size else "-",
                bad,
            )
        )
        status |= int(bad > 0)
    print(f"cascade {cascade.name} on random inputs (seed {args.seed}, scale {args.scale:g})")
    print(table(["output", "shape", "min", "max", "non-finite"], rows))
    if status:
        print("some outputs are not finite: the cascade overflows at these input magnitudes")
    return status


def cmd_graph(args: argparse.Namespace) -> int:
    cascade = _load(args.file)
    print(to_dot(cascade) if args.format == "dot" else to_text(cascade))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    rows = []
    for path in sorted(data_dir("cascades").glob("*.yaml")):
        cascade = load_cascade(path)
        report = analyze_passes(cascade)
        rows.append(
            (
                path.stem,
                report.max_passes,
                len([e for e in cascade.einsums if e.kind == "compute"]),
                _first_words(cascade.description, 60),
            )
        )
    print(
        table(
            ["cascade", "passes", "einsums", "description"], rows, right=[False, True, True, False]
        )
    )
    return 0


def _passes_text(n: int) -> str:
    return f"{n} pass" if n == 1 else f"{n} passes"


def _as_result(result: RewriteResult, chosen: Candidate) -> RewriteResult:
    """The search's result with `chosen` (a candidate ranked on a chip) as its answer."""
    return replace(
        result,
        cascade=chosen.cascade,
        draft=chosen.draft,
        steps=chosen.steps,
        passes_after=chosen.report,
        checks=chosen.checks,
        unstable=chosen.unstable,
    )


def _rewritten_draft(
    result: RewriteResult, source: str, out: str | None, chosen: Candidate | None = None
):
    """The result (or one `chosen` candidate of it) as a file: named after OUT (or
    `<name>-rewritten`), its description and header saying where it comes from and which
    rules made it."""
    original = result.original
    if chosen is not None:
        result = _as_result(result, chosen)
    if out:
        name = Path(out).stem
    else:
        name = f"{original.name}-rewritten" if result.steps else original.name
    chain = ", ".join(f"{s.rule} at {s.site}" for s in result.steps) or "no rule"
    before = result.passes_before.max_passes
    after = result.passes_after.max_passes
    description = (
        f"{original.name} rewritten by `python -m simulator.cascade rewrite`: "
        f"{_passes_text(before)} -> {_passes_text(after)} ({chain})."
    )
    header = [f"Rewritten from {source} by python -m simulator.cascade rewrite."]
    header += [
        f"{i}. {s.rule} at {s.site} -> {_passes_text(s.max_passes)}: {s.detail}"
        for i, s in enumerate(result.steps, 1)
    ]
    if result.unstable:
        header.append(f"Uses {', '.join(result.unstable)}: may lose precision (--allow-unstable).")
    return replace(result.draft, name=name, description=description), header


def _first_words(text: str, width: int) -> str:
    """The first sentence of `text`, cut at a word boundary to `width` characters."""
    first = " ".join(text.split(".")[0].split())
    if len(first) <= width:
        return first
    return first[: width - 3].rsplit(" ", 1)[0] + "..."


def cmd_show(args: argparse.Namespace) -> int:
    cascade = _load(args.file)
    if not args.canonical:
        print(to_yaml(cascade), end="")
        return 0
    canon = canonical(cascade)
    header = [f"{args.file} in canonical form (python -m simulator.cascade show --canonical)"]
    header += [f"- {c}" for c in canon.changes] or ["- already canonical"]
    draft = without_dead(canon.cascade, cascade.outputs)
    print(draft.text(header), end="")
    return 0


def cmd_rewrite(args: argparse.Namespace) -> int:
    cascade = _load(args.file)
    if args.output:  # checked before the search: a typo costs a second, not a search
        args.output = str(output_path(args.output, f"{cascade.name}-rewritten.yaml"))
        check_writable(Path(args.output))
    overrides = parse_shape_arg(args.shape) if args.shape else None
    if args.target_passes is not None and args.target_passes < 1:
        raise SpecError(f"--target-passes must be 1 or more, got {args.target_passes}")
    by_cost = args.arch is not None
    workload_flags = (args.at, args.model, args.seq, args.batch, args.heads, args.kv_heads)
    if not by_cost and (
        args.objective or args.jobs is not None or any(f is not None for f in workload_flags)
    ):
        raise SpecError(
            "--objective, --at, --model, --seq, --batch, --heads, --kv-heads and --jobs rank "
            "the candidates on a chip: add --arch (without it the rewrite ranks by passes)"
        )
    workload = None
    if by_cost:
        # an unknown or bad chip: one line, before any search
        Specs(arch_override=args.arch).check_arch_override()
        at = parse_shape([args.at] if args.at else None, "--at")
        unknown = sorted(set(at) - set(cascade.shape_names()))
        if unknown:
            raise SpecError(
                f"--at: {cascade.name} has no rank {', '.join(unknown)} (its ranks: "
                f"{', '.join(sorted(cascade.shape_names()))})"
            )
        workload = make_workload(
            args.model or "bert",
            args.seq or "4K",
            {"batch": args.batch, "heads": args.heads, "kv_heads": args.kv_heads},
            shape=parse_shape([args.at] if args.at else None, "--at"),
        )
    result = rewrite(
        cascade,
        target_passes=args.target_passes or 1,
        allow_unstable=args.allow_unstable,
        overrides=overrides,
        seed=args.seed,
        every=by_cost,
    )
    chosen = None
    if by_cost:
        assert workload is not None
        objective = args.objective or "latency"
        texts = [_rewritten_draft(result, args.file, None, c)[0].text([]) for c in result.reached]
        jobs = local_jobs(args.jobs, len(texts))
        ranked = rank(result, args.arch, workload, objective, texts, jobs=jobs)
        winner = best(ranked, objective)
        chosen = winner.candidate
        ranking = render(ranked, winner, objective, f"{args.arch} at {workload.label}")
        if args.format != "json":
            print(ranking)
    elif args.format != "json":
        print("ranked by passes (--arch ranks the candidates by their cost on a chip)")
    draft, header = _rewritten_draft(result, args.file, args.output, chosen)
    if chosen is not None:
        result = _as_result(result, chosen)
    text = draft.text(header)
    loads_cascade(text, draft.name)  # what is written parses back (else a bug, not a file)
    before, after = result.passes_before, result.passes_after
    reached = args.target_passes is None or after.max_passes <= args.target_passes
    if args.format == "json":
        report = {
            "cascade": cascade.name,
            "passes_before": before.max_passes,
            "passes_after": after.max_passes,
            "improved": result.improved,
            "target_reached": reached,
            "steps": [
                {"rule": s.rule, "site": s.site, "passes": s.max_passes, "detail": s.detail}
                for s in result.steps
            ],
            "unstable_rules": list(result.unstable),
            "checks": [
                {"scale": c.scale, "max_rel_error": c.max_rel_error, "note": c.note}
                for c in result.checks
            ],
            "rejected": [
                {"rule": r.rule, "site": r.site, "reason": r.reason} for r in result.rejected
            ],
            "expanded": result.expanded,
            "candidates": result.candidates,
            "output": args.output,
        }
        if not args.output:
            report["cascade_file"] = text
        print(json.dumps(report, indent=2))
    else:
        per_rank = ", ".join(f"{g} {n}" for g, n, _ in before.per_rank if n > 1)
        print(
            f"{cascade.name}: {_passes_text(before.max_passes)}"
            + (f" ({per_rank})" if per_rank else "")
        )
        for i, s in enumerate(result.steps, 1):
            print(f"  {i}. {s.rule} at {s.site} -> {_passes_text(s.max_passes)}: {s.detail}")
        if by_cost and not result.steps:
            print(f"the input is the best on {args.arch}: returned unchanged")
        elif not result.improved and not by_cost:
            hint = "" if args.allow_unstable else " (stable rules; --allow-unstable adds more)"
            print(f"no rule lowers the passes{hint}: returned unchanged")
        checks = ", ".join(
            f"scale {c.scale:g}: "
            + (
                f"max relative error {c.max_rel_error:.2g}"
                if c.max_rel_error is not None
                else c.note
            )
            for c in result.checks
        )
        print(
            f"{draft.name}: {_passes_text(after.max_passes)}; equal to {cascade.name} within "
            f"1e-05 on random inputs (seed {args.seed}; {checks})"
        )
        if result.unstable:
            print(
                f"warning: uses {', '.join(result.unstable)}, which loses precision when the "
                "values' mean is large against their spread"
            )
        for r in result.rejected:
            print(f"bug: {r.rule} at {r.site} made a candidate the checks refused: {r.reason}")
        if not reached:
            print(f"target of {_passes_text(args.target_passes)} not reached")
        print(
            f"search: {result.expanded} cascade(s) expanded, {result.candidates} rewrite(s) tried"
        )
        if not args.output:
            print()
            print(text, end="")
    if args.output:
        write_text(Path(args.output), text)
        if args.format != "json":
            print(f"wrote {args.output}")
    return 0 if reached else 1


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m simulator.cascade",
        description="Analyse, execute and compare cascades of Extended Einsums.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    shape_help = "rank extents, e.g. M=4096,P=4096,E=64,F=64 (K/M suffixes allowed)"

    p = sub.add_parser("passes", help="passes per rank and minimum live footprint per fibre")
    p.add_argument("file")
    p.add_argument("--shape", help=shape_help)
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_passes)

    p = sub.add_parser("ops", help="operation counts per Einsum (mac, mul, add, max, exp, ...)")
    p.add_argument("file")
    p.add_argument("--shape", help=shape_help)
    p.add_argument("--baseline", help="another cascade to compare totals with")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_ops)

    p = sub.add_parser("compare", help="prove two cascades compute the same outputs")
    p.add_argument("file_a")
    p.add_argument("file_b", nargs="?")
    p.add_argument(
        "--reference",
        action="store_true",
        help="compare FILE_A with the numpy reference its 'reference:' names",
    )
    p.add_argument("--shape", help=shape_help)
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument(
        "--scale",
        type=_positive("--scale"),
        default=1.0,
        help="standard deviation of the random inputs (large values probe overflow)",
    )
    p.add_argument("--rtol", type=_positive("--rtol"), default=1e-5)
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("eval", help="run a cascade on random inputs and summarise its outputs")
    p.add_argument("file")
    p.add_argument("--shape", help=shape_help)
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--scale", type=_positive("--scale"), default=1.0)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("graph", help="dependency graph and recurrences (text or Graphviz DOT)")
    p.add_argument("file")
    p.add_argument("--format", choices=["text", "dot"], default="text")
    p.set_defaults(func=cmd_graph)

    p = sub.add_parser(
        "rewrite", help="an equivalent cascade with fewer passes, found by rewrite rules"
    )
    p.add_argument("file")
    p.add_argument("--target-passes", type=_count("--target-passes"), default=None)
    p.add_argument(
        "--allow-unstable",
        action="store_true",
        help="also use rules that may lose precision (the one-pass variance)",
    )
    p.add_argument("-o", "--output", help="write the rewritten cascade here (else print it)")
    p.add_argument("--shape", help=shape_help + "; the numerical checks run at these")
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument(
        "--arch",
        help="rank every equivalent candidate by its cost on this architecture (the mapper, "
        "analytic engine) and write the best; without it the rewrite ranks by passes",
    )
    p.add_argument("--objective", choices=OBJECTIVES, help="with --arch: default latency")
    p.add_argument("--model", help="with --arch: the workload's model (default bert)")
    p.add_argument("--seq", help="with --arch: the sequence length (default 4K)")
    p.add_argument("--batch", type=_count("--batch"), help="with --arch: requests")
    p.add_argument("--heads", type=_count("--heads"), help="with --arch: attention heads")
    p.add_argument(
        "--kv-heads", type=_count("--kv-heads"), help="with --arch: key/value heads (grouped)"
    )
    p.add_argument("--at", help="with --arch: the workload's rank extents, e.g. E=4096,P=16K")
    p.add_argument(
        "--jobs",
        "-j",
        type=jobs_option,
        help="with --arch: processes ranking the candidates (default: all cores; the same "
        "ranking whatever their number)",
    )
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_rewrite)

    p = sub.add_parser("show", help="the cascade as a file (--canonical: in canonical form)")
    p.add_argument("file")
    p.add_argument(
        "--canonical",
        action="store_true",
        help="one way to write its algebra: literal extents named, scaled sums folded, "
        "single-use maps inlined, invariants hoisted, operands ordered, duplicates shared",
    )
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("list", help="the shipped cascades")
    p.set_defaults(func=cmd_list)
    return parser


@guarded
def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m simulator.cascade`."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
