"""LLM attention: results/llm-attention.csv and figure `llm-attention` (beyond the paper).

Llama-3-8B, Llama-3-70B and Mistral-7B, prefill at 4K..128K tokens and decode of one
token against a 32K cache (batch 64), on the unfused baseline, FLAT and FuseMax, each bound
automatically (`auto:STRATEGY`, cycle engine) to the model's own attention -- grouped K/V
heads (8 per layer), causal (Mistral: a sliding window of 4096) -- the cascade the binder's
facts name for it: FuseMax the 1-pass cascade, FLAT and unfused the 3-pass one
(`attention-gqa-causal-*`, `attention-gqa-window-*`; `python -m simulator.run --model M`
runs the same).

What each strategy skips under a mask (stated in the report): the fused dataflows (FLAT,
FuseMax) skip every tile -- a block of query rows x a chunk of keys -- that holds no kept
point, and fetch nothing for it; the unfused baseline's phases are library calls that
compute what they are given dense and mask afterwards, on operands sliced to the keys some
query attends (a decode step's window: its last W keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from experiments import plots
from experiments.compare import md_table
from experiments.experiment import Context, Experiment, Selection
from experiments.output import write_csv
from experiments.plots import Point, Series
from simulator.drivers.configs import EvalOptions, Specs, evaluate
from simulator.spec.workload import make_workload
from simulator.support.units import format_count

MODELS = ("llama3-8b", "llama3-70b", "mistral-7b")
PREFILL = ("4K", "16K", "64K", "128K")
DECODE_CONTEXT = "32K"
STRATEGIES = ("unfused", "flat", "fusemax")
LABELS = {"unfused": "Unfused", "flat": "FLAT", "fusemax": "FuseMax"}
COLUMNS = (
    "model",
    "phase",
    "tokens",
    "strategy",
    "cascade",
    "latency_s",
    "traffic_bytes",
    "util_2d",
    "util_1d",
    "energy_pj",
    "skipped_fraction",
)


@dataclass(frozen=True)
class LlmRow:
    model: str  # label
    phase: str
    tokens: int  # prefill: the sequence; decode: the cache
    strategy: str
    cascade: str
    latency_s: float
    traffic_bytes: float
    util_2d: float
    util_1d: float
    energy_pj: float
    skipped_fraction: float

    @property
    def point(self) -> Point:
        return (self.model, "dec." if self.phase == "decode" else format_count(self.tokens))


def _workload(model: str, phase: str, tokens: str):
    if phase == "decode":
        return make_workload(model, "1", phase="decode", context=tokens)
    return make_workload(model, tokens)


def points(selection: Selection) -> list[tuple[str, str, str, str]]:
    """Every (model, phase, tokens, strategy); beyond the paper, so only in a full run."""
    if not selection.is_full:
        return []
    out = []
    for model in MODELS:
        for seq in PREFILL:
            out += [(model, "prefill", seq, s) for s in STRATEGIES]
        out += [(model, "decode", DECODE_CONTEXT, s) for s in STRATEGIES]
    return out


def compute(specs: Specs, point: tuple[str, str, str, str]) -> LlmRow:
    model, phase, tokens, strategy = point
    workload = _workload(model, phase, tokens)
    r = evaluate(specs, f"auto:{strategy}", workload, options=EvalOptions(engine="cycle"))
    return LlmRow(
        workload.label,
        phase,
        workload.keys,
        strategy,
        r.cascade,
        r.latency_s,
        r.traffic_bytes,
        r.util_2d,
        r.util_1d,
        r.energy_pj or 0.0,
        r.skipped_fraction,
    )


def write(rows: Sequence[LlmRow], ctx: Context) -> list[Path]:
    if not rows:
        return []
    table = [[getattr(r, c) for c in COLUMNS] for r in rows]
    return [write_csv(ctx.results / "llm-attention.csv", COLUMNS, table)]


def _speedups(rows: Sequence[LlmRow]) -> tuple[list[Series], list[Point]]:
    base = {r.point: r.latency_s for r in rows if r.strategy == "unfused"}
    series = [
        Series(
            s,
            LABELS[s],
            {r.point: base[r.point] / r.latency_s for r in rows if r.strategy == s},
            {},
        )
        for s in STRATEGIES
    ]
    pts = list(dict.fromkeys(r.point for r in rows))
    return series, pts


def figures(rows: Sequence[LlmRow], ctx: Context) -> list[Path]:
    if not rows:
        return []
    series, pts = _speedups(rows)
    # the paper's colours: Unfused red, FLAT blue, FuseMax (+Binding) orange
    colours = (plots.CONFIG_COLOURS[0], plots.CONFIG_COLOURS[1], plots.CONFIG_COLOURS[4])
    return plots.grouped_bars(
        series,
        pts,
        "speedup over\nUnfused",
        ctx.out / "llm-attention",
        colours=colours,
        log=True,
        title=f"LLM attention: prefill at 4K-128K tokens; dec. = decode of one token against "
        f"a {DECODE_CONTEXT} cache",
    )


def report(rows: Sequence[LlmRow], ctx: Context) -> str:
    title = "## Extra: LLM attention (`llm-attention`, `results/llm-attention.csv`)"
    if not rows:
        return f"{title}\n\nRuns with the full selection of models and lengths.\n"
    by = {(r.point, r.strategy): r for r in rows}
    table = []
    for point in dict.fromkeys(r.point for r in rows):
        f, u, x = (by[(point, s)] for s in ("fusemax", "flat", "unfused"))
        table.append(
            (
                point[0],
                point[1],
                f"{x.latency_s:.4g}",
                f"{u.latency_s:.4g}",
                f"{f.latency_s:.4g}",
                f"{u.latency_s / f.latency_s:.2f}x",
                f"{100 * f.util_2d:.1f}%",
                f"{100 * f.skipped_fraction:.0f}%",
                f"{f.energy_pj / u.energy_pj:.2f}",
            )
        )
    header = [
        "model",
        "point",
        "unfused (s)",
        "FLAT (s)",
        "FuseMax (s)",
        "FuseMax vs FLAT",
        "FuseMax util 2D",
        "skipped",
        "E FuseMax/FLAT",
    ]
    return "\n".join(
        [
            title,
            "",
            "Beyond the paper: decoder attention of three LLMs, each configuration bound "
            "automatically (`--mapping auto:STRATEGY`, cycle engine) to the model's own "
            "attention -- grouped K/V heads, causal (Mistral: a sliding window of 4096) -- "
            "in prefill and in the decode of one token per request against a "
            f"{DECODE_CONTEXT} cache (the decoded token sits after the whole cache).",
            "",
            "What each strategy skips under a mask: FLAT and FuseMax, fused row-block "
            "dataflows, skip every tile (a block of query rows x a chunk of keys) that holds "
            "no kept point and fetch nothing for it; diagonal tiles count whole. The unfused "
            "baseline's phases are library calls: they compute what they are given dense and "
            "mask afterwards, on operands sliced to the keys some query attends (in decode "
            "the window's last 4096 keys; in prefill every key). The skipped column is "
            "FuseMax's share of array work skipped.",
            "",
            md_table(header, table),
            "",
        ]
    )


EXPERIMENT = Experiment(
    name="llm",
    title="Extra: LLM attention (GQA, causal, sliding window, decode)",
    points=points,
    compute=compute,
    write=write,
    figures=figures,
    report=report,
    # one model and strategy at every length: its cascade's planning once
    share=lambda point: (point[0], point[3]),
    chunk=len(PREFILL) + 1,
    outputs=("llm-attention", "results/llm-attention.csv"),
)
