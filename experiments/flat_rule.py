"""FLAT's dataflow rule against FLAT's published choices: results/flat-rule.csv and a report
section.

FLAT's configuration reads the dataflow FLAT's own search chose at the published points
(`mappings/flat-dataflow.csv`, from the artifact); every other point -- another model or
length, another buffer, array or value format, another attention -- takes the FLAT
strategy's rule (`simulator/strategies/flat.py`: the block's score fibres on chip while they fit,
output-stationary GEMMs then, weight-stationary with the fibres through DRAM otherwise; the
rows per block searched for least traffic; tensors that overflow spill what does not fit).
This experiment applies the rule at the published points too and sets each of its choices
beside the published one, with both latencies: where the rule reproduces FLAT and where not,
and by how much that moves the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from experiments.compare import md_table
from experiments.experiment import Context, Experiment, Selection
from experiments.output import write_csv
from simulator.drivers.configs import EvalOptions, Specs, evaluate, prepare
from simulator.plan.facts import cascade_facts, placement_of
from simulator.spec.workload import make_workload
from simulator.support.units import format_count

CHOICES = ("Q_loc", "QK_loc", "A_loc", "AV_loc", "QK_stationarity", "rows_per_block")
COLUMNS = (
    "model",
    "seq_len",
    *(f"{side}_{c}" for c in CHOICES for side in ("published", "rule")),
    "published_latency_s",
    "rule_latency_s",
    "latency_ratio",
)


@dataclass(frozen=True)
class RuleRow:
    model: str
    seq_len: int
    published: tuple[str, ...]  # the choices, in CHOICES order
    rule: tuple[str, ...]
    published_latency_s: float
    rule_latency_s: float

    @property
    def agrees(self) -> tuple[bool, ...]:
        return tuple(a == b for a, b in zip(self.published, self.rule, strict=True))


def points(selection: Selection) -> list[tuple[str, int]]:
    return [(m, s) for m in selection.models for s in selection.seqs]


def _rule_choices(specs: Specs, workload) -> tuple[str, ...]:
    cascade, mapping, _arch = prepare(specs, "auto:flat", workload)
    facts = cascade_facts(cascade)
    phase = mapping.phases[0]

    def loc(tensor: str) -> str:
        p = placement_of(phase, facts, tensor)
        return "onchip" if p.home == "buffer" or p.keep not in (None, "stream") else "offchip"

    def fibre(tensor: str) -> str:  # handed between the passes: on chip in the buffer
        return "onchip" if placement_of(phase, facts, tensor).home == "buffer" else "offchip"

    qk = next(em for em in phase.einsums if em.einsum == "QK")
    # output-stationary: the reduction (E) streams through the PEs holding the scores
    stationarity = "output" if "E" in (qk.inner or ()) else "weight"
    r = evaluate(specs, "auto:flat", workload, options=EvalOptions(engine="analytic"))
    factors = dict(r.factors)
    rows = factors.get("P1", 1) * factors.get("P0", 1)
    return (loc("Q"), fibre("QK"), fibre("A"), loc("AV"), stationarity, str(rows))


def compute(specs: Specs, point: tuple[str, int]) -> RuleRow:
    model, seq = point
    w = make_workload(model, seq)
    _c, mapping, _a = prepare(specs, "flat", w)
    row = dict(mapping.dataflow)
    published = (
        row["Q_loc"],
        row["QK_loc"],
        row["A_loc"],
        row["AV_loc"],
        row["QK_stationarity"],
        str(int(row["P1"]) if row["QK_stationarity"] == "weight" else 256),
    )
    flat = evaluate(specs, "flat", w, options=EvalOptions(engine="analytic"))
    rule = evaluate(specs, "auto:flat", w, options=EvalOptions(engine="analytic"))
    return RuleRow(
        str(flat.model), seq, published, _rule_choices(specs, w), flat.latency_s, rule.latency_s
    )


def write(rows: Sequence[RuleRow], ctx: Context) -> list[Path]:
    table = [
        [
            r.model,
            r.seq_len,
            *(v for pair in zip(r.published, r.rule, strict=True) for v in pair),
            r.published_latency_s,
            r.rule_latency_s,
            r.rule_latency_s / r.published_latency_s,
        ]
        for r in rows
    ]
    return [write_csv(ctx.results / "flat-rule.csv", COLUMNS, table)]


def report(rows: Sequence[RuleRow], ctx: Context) -> str:
    n = len(rows)
    agree = [sum(r.agrees[i] for r in rows) for i in range(len(CHOICES))]
    differ = []
    for i, choice in enumerate(CHOICES):
        where = [
            f"{r.model} {format_count(r.seq_len)} ({r.published[i]} vs {r.rule[i]})"
            for r in rows
            if not r.agrees[i]
        ]
        if where:
            differ.append(f"- {choice}: {', '.join(where)}")
    ratios = [r.rule_latency_s / r.published_latency_s for r in rows]
    same = sum(abs(x - 1) <= 1e-9 for x in ratios)
    table = [
        (
            r.model,
            format_count(r.seq_len),
            *(
                f"{a}" if a == b else f"{a} / **{b}**"
                for a, b in zip(r.published, r.rule, strict=True)
            ),
            f"{r.rule_latency_s / r.published_latency_s:.3f}",
        )
        for r in rows
    ]
    return "\n".join(
        [
            "## FLAT's dataflow: the rule against the published choices (`results/flat-rule.csv`)",
            "",
            "FLAT reads its published per-point dataflow where the artifact gives one (the "
            "paper's points on its 32 MB, 256 x 256, 16-bit design); everywhere else its "
            "dataflow comes from the FLAT strategy's rule (`simulator/strategies/flat.py`: a block "
            "of rows keeps its score fibres on chip while they fit, with output-stationary "
            "GEMMs; otherwise the fibres go through DRAM and K, V stay in the PEs; rows per "
            "block searched for least traffic). Here the rule runs at the published points "
            "too. Cells show published / **rule** where they differ; the last column is the "
            "rule's latency over the published dataflow's (analytic engine).",
            "",
            md_table(["model", "length", *CHOICES, "latency rule/published"], table),
            "",
            "Agreement over the "
            + f"{n} points: "
            + ", ".join(f"{c} {a}/{n}" for c, a in zip(CHOICES, agree, strict=True))
            + f"; the same latency at {same}/{n} points, within "
            + f"{100 * max(abs(x - 1) for x in ratios):.1f}% at all. Where they differ:",
            "",
            *differ,
            "",
            "Why they differ. Up to 16K the 1D array bounds FLAT (four softmax operations "
            "per score on 256 PEs), so where Q and the output rows live and how many rows a "
            "block holds move no latency: the rule keeps a block's Q and output rows on chip "
            "beside its fibres, FLAT streams them. At 64K FLAT keeps a block of 256 rows' "
            "score fibres on chip -- 256 x 64K x 2 B, the whole 32 MB buffer -- and accepts "
            "spilling 0.8% of their accesses (its `proportion_spilled`); the rule asks the "
            "block's QK, SN and A fibres to fit together (96 MB) and otherwise sends them "
            "through DRAM with weight-stationary GEMMs, 12% slower than FLAT's choice. From "
            "256K both send the fibres through DRAM; the rule's least-traffic search holds "
            "more rows per block than FLAT's 1024, which re-reads K and V less: 3-6% faster.",
            "",
        ]
    )


EXPERIMENT = Experiment(
    name="flat-rule",
    title="FLAT's dataflow rule against its published choices",
    points=points,
    compute=compute,
    write=write,
    report=report,
    chunk=6,
    outputs=("results/flat-rule.csv",),
)
