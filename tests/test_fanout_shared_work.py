"""A fan-out of cores and the work its units share (issue 44), and the chain template's
contraction with a small output over a long reduction.

Linear attention (`cascades/linear-attention.yaml`) on the H100 (132 SMs, tensor cores of
16 x 128 PEs per SM): its key-value summary `KV[e, f] = PK[e, m] V[f, m]` -- a 64 x 64
output reduced over every key -- is made once per instance and read by every block of
query rows. The blocks are the units the SMs share; none can finish before that summary is
made, and this mapping does not split its keys over the SMs. The checks are against what
one SM's arrays take for that work, counted from the result's own per-Einsum cycles, and
against the array's PEs.
"""

from __future__ import annotations

import pytest

from simulator.cascade.parse import load_cascade
from simulator.core.evaluate import evaluate_mapping
from simulator.mapper.resolve import resolved
from simulator.mapper.space import with_factors
from simulator.spec.arch_file import load_architecture
from simulator.spec.mapping import loads_mapping
from simulator.spec.workload import make_workload
from simulator.strategies.auto import mapping_yaml, template
from simulator.strategies.context import bind_context
from simulator.support.paths import resolve_spec

SHARED = ("PK", "KS", "KV")  # what every block of query rows needs: no P among its ranks


def _chain(shape: dict[str, int], seq: str = "64K", batch: int = 16):
    arch = load_architecture(resolve_spec("arch", "h100"))
    path = resolve_spec("cascades", "linear-attention")
    w = make_workload("bert", seq, {"batch": batch, "heads": 1}, shape=shape)
    ctx = bind_context(load_cascade(path), arch, w, str(path), "h100")
    data = template(ctx, "chain")
    spec = loads_mapping(mapping_yaml(data), "<template>", "template")
    return arch, w, ctx, resolved(spec, ctx.cascade, arch, w)


def test_a_unit_holds_the_work_no_unit_loop_indexes():
    """16 instances of 8 blocks of 8,192 query rows: 128 units for 132 SMs. Dividing the
    summary's work among an instance's 8 blocks (as before) put the point at 0.18 ms, under
    the 0.20 ms one SM's 1D array takes for phi(K) alone."""
    arch, w, ctx, mapping = _chain({"E": 64, "F": 64})
    r = evaluate_mapping(ctx.cascade, with_factors(mapping, {"P1": 512}), arch, w)
    per_array: dict[str, float] = {}
    for e in r.einsums:
        if e.einsum in SHARED:
            per_array[e.array] = per_array.get(e.array, 0.0) + e.cycles
    floor_s = max(per_array.values()) / arch.frequency_hz
    assert r.latency_s >= floor_s * (1 - 1e-9), (r.latency_s, floor_s)


def test_one_unit_an_instance_is_as_before():
    """One block of rows an instance (no unit shares an instance's work): the rule takes
    nothing away and adds nothing -- the latency is the instances' work dealt to the SMs."""
    arch, w, ctx, mapping = _chain({"E": 64, "F": 64}, seq="4K", batch=256)
    r = evaluate_mapping(ctx.cascade, with_factors(mapping, {"P1": 256}), arch, w)
    (phase,) = r.phases
    cycles = sum(e.cycles for e in r.einsums)  # the chain's schedule runs them in turn
    waves = -(-256 // arch.cores)
    assert phase.compute_s == pytest.approx(cycles * waves / arch.frequency_hz)


def test_the_summary_spreads_over_the_whole_array():
    """KV's output (64 x 64) is wider than the tensor cores' 16 columns: part of it across
    them, the keys' chunk down the 128 rows -- 2,048 PEs, where the chunk alone took 128."""
    arch, w, ctx, mapping = _chain({"E": 64, "F": 64})
    r = evaluate_mapping(ctx.cascade, with_factors(mapping, {"P1": 512}), arch, w)
    two = next(a for a in arch.arrays if a.mesh_y > 1)
    par = {e.einsum: e.parallelism for e in r.einsums}
    assert par["KV"] == two.pes == 2048
    # the Einsums that spread the split rank whole spread both its parts (phi(Q) over E)
    assert par["PQ"] >= 64 and par["DEN"] >= 16 * 64


def test_a_rank_that_fits_the_columns_goes_across_them():
    """E = F = 16 fit the tensor cores' 16 columns whole: KV spreads E across them and the
    keys' chunk down the rows. It was put first in the list after the chunk -- the chunk
    across the 16 columns -- and the chain template did not run the cascade at all."""
    arch, w, ctx, mapping = _chain({"E": 16, "F": 16})
    r = evaluate_mapping(ctx.cascade, with_factors(mapping, {"P1": 512}), arch, w)
    assert {e.einsum: e.parallelism for e in r.einsums}["KV"] == 16 * 128
