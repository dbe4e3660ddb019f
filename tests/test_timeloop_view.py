"""One source of truth: the per-Einsum Timeloop views of a configuration move exactly the
DRAM data the phase-level traffic model counts (spills aside)."""

from __future__ import annotations

import pytest

from simulator.drivers.configs import Specs, evaluate, prepare
from simulator.plan.accesses import analyze
from simulator.plan.extents import choose_extents
from simulator.plan.facts import cascade_facts
from simulator.plan.views import phase_views
from simulator.spec.workload import make_workload


@pytest.mark.parametrize("config", ["unfused", "flat", "cascade", "arch", "binding"])
@pytest.mark.parametrize(
    "model,seq", [("bert", "1K"), ("bert", "1M"), ("xlm", "4K"), ("t5", "64K")]
)
def test_views_reproduce_dram_traffic(config, model, seq):
    specs = Specs()
    workload = make_workload(model, seq)
    cascade, mapping, arch = prepare(specs, config, workload)
    facts = cascade_facts(cascade)
    extents, partitions, plans = choose_extents(cascade, mapping, facts, arch, workload)
    from_views: dict[str, list[int]] = {}
    for plan in plans:
        for view in phase_views(plan, mapping, facts, arch, extents, partitions, workload):
            report = analyze(view.problem, view.mapping)
            for dataspace, tensor in view.dataspace_tensor:
                counts = report.of("DRAM", dataspace)
                acc = from_views.setdefault(tensor, [0, 0])
                acc[0] += counts.reads
                acc[1] += counts.updates
    result = evaluate(specs, config, workload)
    for t in result.tensors:
        read, write = from_views.get(t.tensor, [0, 0])
        assert (read * 2, write * 2) == (t.read_bytes, t.write_bytes), t.tensor
