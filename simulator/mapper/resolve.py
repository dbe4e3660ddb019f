"""A mapping file fixed to a point: (mapping spec, cascade, architecture, workload) -> Mapping.

What every evaluation of a mapping file starts from -- a hand-written one in
:mod:`simulator.drivers.configs` and each candidate of the search alike: the workload's names
(`shapes:`, `instances:`), the architecture's parameters (`PE2D.meshX`) and the cascade's
ranks and tensors, against which every name the file uses is checked.
"""

from __future__ import annotations

from simulator.cascade.ir import Cascade
from simulator.spec.arch import Architecture
from simulator.spec.mapping import CascadeNames, Mapping, MappingSpec, mapping_shapes, resolve
from simulator.spec.workload import Workload


def workload_fields(workload: Workload) -> dict[str, object]:
    """The names a mapping may use for a workload (`shapes:`, `instances:`, table match)."""
    return workload.fields()


def rank_shapes(spec: MappingSpec, workload: Workload) -> dict[str, int]:
    """The rank extents a workload gives a configuration: the mapping's `shapes:`, then any
    explicit rank override of the workload (a plain GEMM's M != P)."""
    shapes = mapping_shapes(spec, workload_fields(workload))
    shapes.update(workload.rank_overrides)
    return shapes


def cascade_names(cascade: Cascade) -> CascadeNames:
    """The ranks, rank components and tensors of a cascade, which a mapping may name."""
    components = {r for t in cascade.tensors for r in t.ranks} | set(cascade.params)
    for rank, comps in cascade.partitions:
        components.add(rank)
        components.update(comps)
    tensors = {t.name for t in cascade.tensors} | {e.output.tensor for e in cascade.einsums}
    reads = tuple(
        (e.name, tuple(dict.fromkeys(a.tensor for a in e.reads()))) for e in cascade.einsums
    )
    producers = tuple((e.output.tensor, e.name) for e in cascade.einsums if e.kind == "compute")
    return CascadeNames(frozenset(components), frozenset(tensors), reads, producers)


def resolved(
    spec: MappingSpec, cascade: Cascade, arch: Architecture, workload: Workload
) -> Mapping:
    """The mapping file at this point, every name checked against the cascade."""
    compute = [e.name for e in cascade.einsums if e.kind == "compute"]
    context = dict(arch.parameters())
    context.update(rank_shapes(spec, workload))
    return resolve(
        spec,
        workload_fields(workload),
        context,
        compute,
        [a.name for a in arch.arrays],
        cascade_names(cascade),
    )
