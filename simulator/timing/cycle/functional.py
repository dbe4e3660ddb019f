"""Functional mode: carry real values through the simulated schedule.

Each array sees the data through its own view. An operation, when the simulator starts it,
reads its inputs from its array's view, computes its tile of the Einsum (the cascade's own
semantics, :mod:`simulator.cascade.execute`, restricted to the tile the epoch's loops
select) and writes the results, which become visible on its own array when the operation
ends and on the other array after the reduction or broadcast latency. Values that have not
arrived are NaN. So a schedule that starts an operation before its inputs arrive -- a
dependency broken on purpose in a test, or a binding that is wrong -- produces a wrong AV,
and a correct schedule reproduces softmax attention: the schedule is shown to compute
attention, not only to take time.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass

import numpy as np

from simulator.cascade.execute import (
    random_inputs,
    relative_error,
    run_tile,
    softmax_attention,
    tensor_shape,
)
from simulator.cascade.ir import rank_of
from simulator.support.errors import SpecError
from simulator.timing.cycle.program import OpSpec
from simulator.timing.cycle.simulate import PipelinedPoint
from simulator.timing.cycle.waterfall import Waterfall


class FunctionalState:
    """The values each array sees, and the writes still travelling between arrays."""

    def __init__(self, point: PipelinedPoint, inputs: dict[str, np.ndarray]) -> None:
        cascade, program, shapes = point.cascade, point.program, point.shapes
        self.cascade = cascade
        self.program = program
        self.shapes = shapes
        self.extents = point.extents
        self.partitions = point.partitions
        self.arch = point.arch
        self.arrays = sorted({s.array for s in program.ops})
        base = {name: np.asarray(v, dtype=np.float64) for name, v in inputs.items()}
        for e in cascade.einsums:
            base.setdefault(
                e.output.tensor, np.full(tensor_shape(cascade, e.output.tensor, shapes), np.nan)
            )
        # Einsums outside the program (initial values RM[0], the splitting of K into BK)
        # run before it if they depend on nothing it computes, and after it otherwise.
        inside = {s.einsum for s in program.ops}
        produced_inside = {cascade.einsum(n).output.tensor for n in inside}
        self.after = []
        tainted = set(produced_inside)
        for e in cascade.einsums:
            if e.name in inside:
                continue
            if any(acc.tensor in tainted for acc in e.reads()):
                self.after.append(e)
                tainted.add(e.output.tensor)
            else:
                run_tile(cascade, e, base, shapes, {}, {})
        self.views = {a: {t: v.copy() for t, v in base.items()} for a in self.arrays}
        self.in_flight: list[tuple[int, int, str, str, np.ndarray, np.ndarray]] = []
        self.seq = itertools.count()

    def _deliver(self, until: int) -> None:
        while self.in_flight and self.in_flight[0][0] <= until:
            _, _, array, tensor, mask, values = heapq.heappop(self.in_flight)
            self.views[array][tensor][mask] = values[mask]

    def execute(self, spec: OpSpec, epoch: int, start: int) -> None:
        self._deliver(start)
        e = self.cascade.einsum(spec.einsum)
        fixed, ranges = self._tile(e, self.program.coords(epoch))
        view = self.views[spec.array]
        old = view[e.output.tensor]
        out = old.copy()  # an iterative tensor reads its own previous step
        run_tile(self.cascade, e, {**view, e.output.tensor: out}, self.shapes, fixed, ranges)
        mask = ~((out == old) | (np.isnan(out) & np.isnan(old)))
        view[e.output.tensor] = old  # this array sees the result when the operation ends
        end = start + spec.steps
        src = self.arch.array(spec.array)
        for array in self.arrays:
            dst = self.arch.array(array)
            arrive = end
            if src.mesh_y > 1 and dst.mesh_y == 1:
                arrive += self.program.reduce_cycles
            elif src.mesh_y == 1 and dst.mesh_y > 1:
                arrive += self.program.broadcast_cycles
            heapq.heappush(
                self.in_flight, (arrive, next(self.seq), array, e.output.tensor, mask, out)
            )

    def finish(self) -> dict[str, np.ndarray]:
        self._deliver(math.inf)  # type: ignore[arg-type]
        values = self.views[self.arrays[0]]
        for e in self.after:
            run_tile(self.cascade, e, values, self.shapes, {}, {})
        return values

    def _tile(self, e, coords: dict[str, int]) -> tuple[dict[str, int], dict[str, tuple]]:
        """The iteration-variable values (iterative rank) and ranges an epoch selects."""
        fixed: dict[str, int] = {}
        ranges: dict[str, tuple[int, int]] = {}
        for v in e.iteration:
            rank = rank_of(v)
            if rank in coords:
                if v == e.iterative:
                    fixed[v] = coords[rank]
                else:
                    ranges[v] = (coords[rank], coords[rank] + 1)
                continue
            comps = self.partitions.get(rank)
            if not comps or not any(c in coords for c in comps):
                continue
            lo, stride, bounded = 0, 1, True
            span = 1
            for c in reversed(comps):
                if c in coords:
                    if not bounded:
                        raise SpecError(
                            f"functional mode: the loops select no box of rank {rank} "
                            f"({', '.join(comps)})"
                        )
                    lo += coords[c] * stride
                else:
                    if lo:
                        bounded = False
                    span *= self.extents[c]
                stride *= self.extents[c]
            ranges[v] = (lo, min(lo + span, self.shapes[rank]))
        return fixed, ranges


@dataclass(frozen=True)
class FunctionalResult:
    error: float  # relative error of AV against numpy softmax attention
    cycles: int
    av: np.ndarray


def check_attention(
    point: PipelinedPoint, seed: int = 0, broken: tuple[str, str] | None = None
) -> FunctionalResult:
    """Run a point's program (one attention instance) on random Q, K, V; compare its AV."""
    if point.program.instances != 1:
        raise SpecError("functional mode runs one (batch, head) instance: use --batch/--heads 1")
    cascade = point.cascade
    inputs = random_inputs(cascade, point.shapes, seed)
    state = FunctionalState(point, inputs)
    r = Waterfall(point.program, functional=state, broken=broken).run()
    values = state.finish()
    want = softmax_attention(*(inputs[n] for n in ("Q", "K", "V")))
    got = values[cascade.outputs[0]]
    error = relative_error(got, want) if np.isfinite(got).all() else math.inf
    return FunctionalResult(error, r.cycles, got)
