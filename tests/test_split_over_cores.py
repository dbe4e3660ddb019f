"""A reduction split over a chip's cores (split-K, issue 44): a phase's `split:` loops.

Linear attention (`cascades/linear-attention.yaml`) on the H100 (132 SMs): with 16
instances and blocks of query rows as the units, every block made the key-value summary
over all 64K keys itself -- one SM per block the whole rank long. The chain template's
`keys: split` makes the summary once, in a phase of its own whose chunks of keys are dealt
to the SMs in parts. The checks are against the SMs' count and the compulsory DRAM traffic,
not against the model's own earlier outputs.
"""

from __future__ import annotations

import pytest

from simulator.cascade.parse import load_cascade
from simulator.core.evaluate import evaluate_mapping
from simulator.drivers.configs import Specs, evaluate
from simulator.mapper.resolve import resolved
from simulator.mapper.space import with_factors
from simulator.plan.waves import unit_loops
from simulator.spec.arch_file import load_architecture
from simulator.spec.mapping import loads_mapping
from simulator.spec.workload import make_workload
from simulator.strategies.auto import mapping_yaml, template
from simulator.strategies.context import bind_context
from simulator.support.errors import SpecError
from simulator.support.paths import resolve_spec


def _keys_split(seq: str = "64K", batch: int = 16, arch_name: str = "h100"):
    arch = load_architecture(resolve_spec("arch", arch_name))
    path = resolve_spec("cascades", "linear-attention")
    w = make_workload("bert", seq, {"batch": batch, "heads": 1}, shape={"E": 64, "F": 64})
    ctx = bind_context(load_cascade(path), arch, w, str(path), arch_name)
    data = template(ctx, "chain", keys="split")
    spec = loads_mapping(mapping_yaml(data), "<template>", "template")
    return arch, w, ctx, data, resolved(spec, ctx.cascade, arch, w)


def test_the_keys_phase_is_split_and_the_rows_are_not():
    _arch, _w, ctx, data, mapping = _keys_split()
    keys, rows = data["mapping"]["phases"]
    assert keys["split"] == ["M2"] and keys["loops"][0] == "M2"
    assert set(keys["einsums"]) == {"PK", "KS", "KV"}
    assert "split" not in rows and "PQ" in rows["einsums"]
    phase = next(p for p in mapping.phases if p.name == "keys")
    assert unit_loops(ctx.cascade, phase, dict(mapping.partitions))[0] == "M2"


def test_splitting_the_keys_over_more_cores_divides_their_compute():
    """16 instances on 132 SMs: in one part an instance's summary runs on one SM (16 busy);
    in 8 parts on 8 (128 busy). The keys phase's compute time falls 8-fold; its DRAM
    traffic (K and V once, the summary written once) does not change."""
    arch, w, ctx, _data, mapping = _keys_split()
    one = evaluate_mapping(ctx.cascade, with_factors(mapping, {"P1": 512, "M2": 1}), arch, w)
    eight = evaluate_mapping(ctx.cascade, with_factors(mapping, {"P1": 512, "M2": 8}), arch, w)
    k1 = next(p for p in one.phases if p.name == "keys")
    k8 = next(p for p in eight.phases if p.name == "keys")
    assert k8.compute_s == pytest.approx(k1.compute_s / 8, rel=1e-6)
    assert k8.traffic_bytes == k1.traffic_bytes
    # K and V (64K x 64 bf16 each, 16 instances) and the summary, no more
    kv_bytes = 2 * 65536 * 64 * 2 * 16
    assert kv_bytes <= k8.traffic_bytes <= kv_bytes * 1.01


def _dram_floor_s(arch, seq: int, batch: int) -> float:
    """Q, K, V read and AV written once (64 columns of bf16 each): linear attention's
    compulsory traffic over the chip's DRAM bandwidth."""
    return 4 * seq * 64 * 2 * batch / arch.dram.bandwidth_bytes_per_s


def test_the_mapper_finds_the_split_near_the_dram_floor():
    """The search at 64K keys with 16 instances: the chain with the summary in every block
    was 2.46x its latency bound (116 of the 132 SMs idle while the blocks made it); with
    the summary split over the SMs, within 1.25x of the compulsory traffic's time."""
    arch = load_architecture(resolve_spec("arch", "h100"))
    w = make_workload("custom", "64K", {"embed": 64, "batch": 16, "heads": 1})
    specs = Specs(cascade_override="linear-attention", arch_override="h100")
    r = evaluate(specs, "auto", w)
    floor = _dram_floor_s(arch, 65536, 16)
    assert floor <= r.latency_s <= 1.25 * floor, (r.latency_s, floor)
    assert "keys=split" in r.search.found


def test_one_core_has_nothing_to_split():
    arch = load_architecture(resolve_spec("arch", "fusemax"))
    path = resolve_spec("cascades", "linear-attention")
    w = make_workload("bert", "4K", {"heads": 1}, shape={"E": 64, "F": 64})
    ctx = bind_context(load_cascade(path), arch, w, str(path), "fusemax")
    with pytest.raises(SpecError, match="no cores sharing a cache"):
        template(ctx, "chain", keys="split")


def test_a_split_loop_must_be_outermost():
    arch, w, ctx, data, _mapping = _keys_split()
    keys = data["mapping"]["phases"][0]
    keys["loops"] = ["M1", "M2"]
    spec = loads_mapping(mapping_yaml(data), "<template>", "template")
    with pytest.raises(SpecError, match="split of phase 'keys' must name its outermost loops"):
        resolved(spec, ctx.cascade, arch, w)


def test_a_recurrence_cannot_be_split():
    """FuseMax's one-pass attention steps its running maximum through the chunks of keys in
    order: a split of that loop is refused, one line naming the Einsum."""
    arch = load_architecture(resolve_spec("arch", "h100"))
    path = resolve_spec("cascades", "attention-gqa-1pass")
    mapping_path = resolve_spec("mappings", "h100/flash-decode")
    text = mapping_path.read_text().replace(
        "    loops: [G1, P, M1]\n", "    loops: [M1, G1, P]\n    split: [M1]\n"
    )
    assert "split: [M1]" in text
    spec = loads_mapping(text, str(mapping_path), "flash-decode")
    w = make_workload("llama3-8b", "4K", phase="decode")
    cascade = load_cascade(path)
    mapping = resolved(spec, cascade, arch, w)
    with pytest.raises(SpecError, match="steps through M1 in order"):
        evaluate_mapping(cascade, mapping, arch, w)


def test_no_split_beats_the_dram_floor():
    arch, w, ctx, _data, mapping = _keys_split(seq="16K", batch=8)
    floor = _dram_floor_s(arch, 16384, 8)
    for parts in (1, 2, 16, 128):
        r = evaluate_mapping(ctx.cascade, with_factors(mapping, {"P1": 256, "M2": parts}), arch, w)
        assert r.latency_s >= floor * (1 - 1e-9), (parts, r.latency_s, floor)
