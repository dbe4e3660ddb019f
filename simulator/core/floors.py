"""Floors from the workload alone: what no cascade, mapping or flag can beat.

The bounds of :mod:`simulator.core.bounds` are the planned point's own (its cascade's Einsums,
its mapping's arrays); these trust nothing but the workload and the chip: the MACs the
model card says a computation takes (attention's Q K and A V over the (query, key) pairs
its mask keeps; a layer's projections and FFN at the card's widths) at the chip's peak MAC
rate -- every array of every core, each PE a MAC per cycle of its slowest unit --, and the
bytes it must move at least once (the attention's Q, K, V and output; the layer's weights
and its input and output activations) at the DRAM's bandwidth. A result under either is a
bug of the tool (:func:`simulator.core.evaluate.check_floor`).

Pipeline: beside the point's bounds (below the orchestrator).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.spec.arch import Architecture
from simulator.spec.workload import Workload


@dataclass(frozen=True)
class WorkloadFloor:
    what: str  # what the floor is of: "attention", "linear layers"
    macs: float
    compulsory_bytes: float
    latency_s: float  # max(MACs / peak MAC rate, compulsory bytes / bandwidth)


def peak_macs_per_s(arch: Architecture) -> float:
    """The chip's MACs per second at best: every PE of every array of every core, one MAC
    per cycle of the slowest unit a MAC occupies (units pipelined), at its clock."""
    total = 0.0
    for array in arch.arrays:
        mac = array.op("mac")
        if mac is None:
            continue
        per_pe = 1.0 / max(c for _unit, c in mac.unit_cycles())
        total += array.pes * per_pe
    return total * arch.cores * arch.frequency_hz


def attended_pairs(workload: Workload) -> int:
    """(query, key) pairs the workload's mask keeps per (batch, head): the queries are the
    last P of the M key positions (a decoded token after its whole cache)."""
    p, m = workload.queries, workload.keys
    if workload.mask == "none" or workload.phase == "decode" and workload.mask == "causal":
        return p * m
    base = m - p + 1  # keys the first query sees under a causal mask
    if workload.mask == "causal":
        return p * base + p * (p - 1) // 2
    w = workload.window
    below = min(max(w - base, 0), p)  # queries that see fewer than W keys
    return below * base + below * (below - 1) // 2 + (p - below) * min(w, m)


def attention_floor(workload: Workload, arch: Architecture) -> WorkloadFloor:
    """Attention's floor: per (batch, head) E MACs a kept pair for Q K and F for A V; Q, K,
    V (of the keys some query attends, per K/V head) and the output moved once."""
    shape = dict(workload.rank_overrides)
    e, f = shape.get("E", workload.embed), shape.get("F", workload.value_embed)
    b, h, kv = workload.batch, workload.heads, workload.kv
    macs = b * h * attended_pairs(workload) * (e + f)
    values = b * (h * workload.queries * (e + f) + kv * workload.attended_keys * (e + f))
    return _floor("attention", macs, values * arch.value_bytes, arch)


def linear_floor(workload: Workload, arch: Architecture) -> WorkloadFloor:
    """A layer's linear layers at their least: the Q, K, V and output projections and two
    FFN GEMMs (a gated FFN has a third) over the tokens the layer processes (batch x
    queries); every weight and the layer's input and output activations moved once."""
    d, s = workload.dmodel, workload.ffn
    h, kv, e, f = workload.heads, workload.kv, workload.embed, workload.value_embed
    weights = d * h * e + d * kv * (e + f) + h * f * d + 2 * d * s
    tokens = workload.batch * workload.queries
    values = weights + 2 * tokens * d
    return _floor("linear layers", tokens * weights, values * arch.value_bytes, arch)


def _floor(what: str, macs: float, compulsory: float, arch: Architecture) -> WorkloadFloor:
    latency = max(macs / peak_macs_per_s(arch), compulsory / arch.dram.bandwidth_bytes_per_s)
    return WorkloadFloor(what, macs, compulsory, latency)
