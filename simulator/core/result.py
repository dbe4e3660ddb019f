"""The result of evaluating one configuration at one workload point (engine-independent).

Pipeline: the product, built by :mod:`simulator.core.evaluate` from a plan, its phase timings and
its price; the command-line tools, sweeps and experiments read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.plan.costs import EinsumCost


@dataclass(frozen=True)
class TensorTraffic:
    tensor: str
    read_bytes: float
    write_bytes: float
    spill_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.read_bytes + self.write_bytes + self.spill_bytes


@dataclass(frozen=True)
class PhaseCost:
    name: str
    compute_cycles: float  # per instance, from the schedule
    compute_s: float
    memory_s: float
    latency_s: float
    traffic_bytes: float
    buffer_bytes: float  # buffer the phase's tiles occupy
    buffer_s: float = 0.0  # time the global buffer's ports need (0: unlimited bandwidth)


@dataclass(frozen=True)
class SearchStats:
    """How the mapper found an automatic configuration's mapping (:mod:`simulator.mapper`)."""

    strategy: str  # the constraint searched under (fused: none)
    objective: str  # latency | energy | edp | traffic
    found: str  # the template that won, its knobs and tile factors
    space: int  # candidate mappings in the space the strategy admits
    evaluated: int  # planned and timed (infeasible ones included)
    infeasible: int  # did not fit the buffer or could not run the point
    pruned: int  # not evaluated, and need not be: the best was already within
    # `stop_within` of the bound, or larger tiles than one that did not fit
    budget: int  # evaluations allowed (--search-s x the mapper's fixed rate)
    bound_s: float  # the least latency bound of the candidates evaluated
    distance: float  # the best latency over that bound, less one
    seconds: float = 0.0  # wall-clock time of the search (0 when reused from the cache)
    cached: bool = False  # reused from the mapper's cache
    unevaluated: int = 0  # not evaluated because the budget ran out (a larger --search-s)
    breaches: int = 0  # candidates that came out below their own bound (a model bug)


@dataclass(frozen=True)
class LevelAccess:
    """One tensor at one storage level for one Einsum, as Timeloop counts it (values over
    the whole run): reads sent to the child level, fills from the parent, updates of
    partial results written back."""

    einsum: str
    tensor: str
    level: str  # DRAM | buffer | registers
    reads: float
    fills: float
    updates: float


@dataclass(frozen=True)
class Result:
    accelerator: str  # mapping name (unfused, flat, cascade, arch, binding, ...)
    label: str
    model: str
    seq_len: int
    instances: int
    latency_s: float
    traffic_bytes: float
    cycles: float  # total, at the architecture's clock
    util: tuple[tuple[str, float], ...]  # per array
    util_2d: float
    util_1d: float
    util_per_einsum: tuple[tuple[str, str, float], ...]  # (einsum, array, share of time)
    phases: tuple[PhaseCost, ...]
    einsums: tuple[EinsumCost, ...]
    tensors: tuple[TensorTraffic, ...]
    factors: tuple[tuple[str, int], ...]  # tile extents chosen
    array_2d: str | None = None  # the array reported as util_2d (meshY > 1)
    array_1d: str | None = None
    engine: str = "analytic"
    notes: tuple[str, ...] = field(default=())
    energy_pj: float | None = None
    energy_accounting: str = ""
    energy_per_component: tuple[tuple[str, float], ...] = ()
    area_um2: float | None = None
    area_per_component: tuple[tuple[str, float], ...] = ()
    # component -> (dynamic energy as Timeloop counts it, the corrected accounting's reads
    # of drained values, its leakage), pJ
    energy_parts: tuple[tuple[str, float, float, float], ...] = ()
    # Cycle engine only: idle cycles of each array by reason, and how much was simulated.
    stalls: tuple[tuple[str, str, int], ...] = ()  # (array, reason, cycles)
    epochs: int = 0
    simulated_epochs: int = 0
    # Lower bounds of any schedule on the same arrays, buffer and bandwidth
    # (simulator.core.bounds): useful work on the busiest array, and the DRAM traffic no buffer
    # of this size avoids; `bound_binds` says which of the two sets the latency bound.
    ops: float = 0.0  # useful operations (the cascade's counts of kept points), all instances
    executed_ops: float = 0.0  # operations the arrays execute (masked points of whole tiles too)
    cores: int = 1  # copies of the arrays working side by side (Architecture.cores)
    latency_bound_s: float = 0.0
    traffic_bound_bytes: float = 0.0
    compute_bound_s: float = 0.0
    bound_binds: str = ""
    # Per tensor, level and Einsum (priced results only: the statistics the energy prices)
    accesses: tuple[LevelAccess, ...] = ()
    cascade: str = ""  # the name of the cascade that ran
    search: SearchStats | None = None  # automatic configurations: how the mapper found it

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: useful operations per DRAM byte."""
        return self.ops / self.traffic_bytes if self.traffic_bytes else float("inf")

    @property
    def throughput(self) -> float:
        """Attained useful operations per second."""
        return self.ops / self.latency_s if self.latency_s else 0.0

    @property
    def fraction_of_bound(self) -> float:
        """The latency bound over the latency achieved (1: at the limit)."""
        return self.latency_bound_s / self.latency_s if self.latency_s else 1.0

    @property
    def skipped_fraction(self) -> float:
        """The share of the arrays' work a filter (a causal mask, a window) skipped: whole
        tiles with no kept point."""
        dense = sum(c.cycles / (1 - c.skipped) for c in self.einsums if c.skipped < 1)
        done = sum(c.cycles for c in self.einsums if c.skipped < 1)
        return 1 - done / dense if dense else 0.0

    def einsum_shares(self) -> tuple[tuple[str, str, float, float], ...]:
        """(Einsum, its array, PE cycles per point, share of the run its array spends on
        it): which Einsum makes a configuration slow."""
        total = self.cycles
        return tuple(
            (
                c.einsum,
                c.array,
                c.cycles_per_point,
                c.cycles * self.instances / total / self.cores if total else 0.0,
            )
            for c in self.einsums
        )

    def dominant_einsum(self) -> tuple[str, str, float] | None:
        """The Einsum its array spends the largest share of the run on: (name, array,
        share)."""
        shares = self.einsum_shares()
        if not shares:
            return None
        name, array, _cpp, share = max(shares, key=lambda s: s[3])
        return name, array, share

    def util_2d_per_einsum(self) -> dict[str, float]:
        """Share of the total time each Einsum keeps the 2D array busy."""
        return {e: u for e, a, u in self.util_per_einsum if a == self.array_2d}
