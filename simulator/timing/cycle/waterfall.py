"""Cycle-level simulation of a pipelined (waterfall) phase.

Pipeline: timing, cycle engine -- runs a program (:mod:`simulator.timing.cycle.program`);
knows nothing of cascades or mappings.

Time advances in whole cycles from event to event. Each array issues one operation at a
time; when it is free it starts, among the operations whose inputs have arrived, the one of
the oldest epoch (then program order) -- so while an old tile waits for a reduction to drain
or a value to come back from the other array, the array works on younger tiles: the
waterfall. Timing of one operation started at cycle s with `steps` cycles of work:

* its array's issue slot is busy over [s, s + steps);
* on a 2D array it is a wavefront: PE (i, j) works over [s + i + j, s + i + j + steps), so it
  completes everywhere at s + steps + skew (skew = rows + columns - 2);
* a consumer on the same array may start at s + steps (its wavefront trails this one), a
  consumer on the 1D array after the reduction down the columns (s + steps + reduction), a
  2D consumer of a 1D value after the broadcast (s + steps + broadcast).

Registers bound the tiles in flight: a tile holds registers in every 2D PE from its first
2D operation until its last one has completed everywhere; a new tile starts only when one
of `tiles_in_flight` slots is free (one slot: strictly sequential tiles, fill and drain
exposed). DRAM delivers each epoch's data at the phase's average rate, at most a few epochs
ahead (double buffering); when the architecture gives the global buffer port bandwidths, the
buffer's ports then carry the epoch's accesses at theirs (a second stream behind DRAM's).

Steady state: at the start of every epoch the scheduler's state, relative to that moment,
is compared with the previous epoch's; when equal and the coming epochs are of the same
kind (same first/last position in the loops that matter), the run repeats exactly, and the
simulation jumps to the end of the run, advancing time, epochs and every counter by whole
periods. Whole blocks (an outer-loop iteration, e.g. one P2 block or head) are skipped the
same way. The result equals a full simulation exactly (tested), and the cost does not grow
with the sequence length.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from fractions import Fraction

from simulator.support.errors import CannotSimulate, SimulationLimit
from simulator.support.units import format_duration
from simulator.timing.cycle.program import DepKind, OpSpec, Program
from simulator.timing.options import UNLIMITED, TimingOptions

DRAM_RESOLUTION = 64  # DRAM time kept in 1/64 cycle
# Block periods looked for: the state at a block's start may alternate, and a fractional
# DRAM step (1/DRAM_RESOLUTION cycles) comes back to the same phase within that many blocks.
MAX_BLOCK_PERIOD = 2 * DRAM_RESOLUTION
REASONS = ("dependencies", "memory", "fill/drain", "idle")
# Scheduler steps between two looks at the clock (the wall-time limit and the progress
# report): about a hundredth of a second of simulation, so neither costs anything.
CLOCK_EVERY = 2048


@dataclass(eq=False, slots=True)  # an operation is itself: found and hashed by identity
class _Op:
    spec: OpSpec
    epoch: int
    unresolved: int = 0
    ready: int = 0
    start: int | None = None
    dependents: list = field(default_factory=list)  # (key, kind)


@dataclass
class TraceEvent:
    array: str
    einsum: str
    epoch: int
    start: int
    end: int  # issue end (start + steps)
    complete: int  # completes everywhere (wavefront skew included)


@dataclass
class WaterfallResult:
    cycles: int
    epochs: int
    simulated_epochs: int  # epochs actually stepped through (the rest extrapolated)
    busy: dict[str, int]  # einsum -> issue cycles
    stalls: dict[tuple[str, str], int]  # (array, reason) -> cycles
    trace: list[TraceEvent]
    periods: list[tuple[int, int, int]]  # (epoch, period cycles, epochs skipped)


class Waterfall:
    def __init__(
        self,
        program: Program,
        functional=None,
        trace_epochs: int = 0,
        extrapolate: bool = True,
        broken: tuple[str, str] | None = None,
        options: TimingOptions = UNLIMITED,
    ) -> None:
        self.p = program
        self.options = options
        self.functional = functional
        self.trace_epochs = trace_epochs
        self.extrapolate = extrapolate and functional is None
        self.broken = broken  # (consumer, source) dependency dropped on purpose (tests)
        self.arrays = sorted({s.array for s in program.ops})
        self.names = [n for n, _ in program.loops]
        self.extent = dict(program.loops)
        self.stride = {}
        acc = 1
        for name, n in reversed(program.loops):
            self.stride[name] = acc
            acc *= n
        self.spec_of = {s.einsum: s for s in program.ops}
        # operations are created in program order, so that an epoch's come out sorted
        self.in_order = sorted(program.ops, key=lambda s: s.order)
        self.orders_unique = len({s.order for s in program.ops}) == len(program.ops)
        self.two_d_first = next((s.einsum for s in program.ops if s.two_d), None)
        self.two_d_last = next((s.einsum for s in reversed(program.ops) if s.two_d), None)
        relevant = set()
        for s in program.ops:
            relevant.update(loop for loop, _ in s.presence)
            for d in s.deps:
                relevant.update(loop for loop, how in d.rule if how != "same")
        self.relevant = [n for n in self.names if n in relevant]
        self.block = (
            math.prod(self.extent[n] for n in self.names[self.names.index(self.relevant[0]) :])
            if self.relevant
            else program.epochs_per_instance
        )
        self.max_back = max(
            [
                self.stride[loop]
                for s in program.ops
                for d in s.deps
                for loop, how in d.rule
                if how == "prev"
            ]
            or [0]
        )
        # Periods of the steady state looked for within a run of epochs: the pipeline's
        # depth, the DRAM step's fractional phase, and the reach of a dependency on an
        # earlier tile (a row of P1 tiles back: the state may cycle with that row), and the
        # drift of an array slower by a few cycles per epoch than the other, which comes
        # back to the same state once it has lost a whole operation (up to `steps` epochs:
        # e.g. a 1D array 1 cycle per epoch behind a 2D array of 128-cycle operations).
        longest = max((s.steps for s in program.ops), default=0)
        self.max_period = (
            2 * program.tiles_in_flight + 8 + DRAM_RESOLUTION + self.max_back + 2 * longest
        )

    # ---------------------------------------------------------------- epoch structure
    def _coords(self, epoch: int) -> dict[str, int]:
        return self.p.coords(epoch)

    def _present(self, spec: OpSpec, c: dict[str, int]) -> bool:
        for loop, how in spec.presence:
            want = self.extent[loop] - 1 if how == "last" else 0
            if c[loop] != want:
                return False
        return True

    def _target(self, spec: OpSpec, dep, epoch: int, c: dict[str, int]) -> int | None:
        t = dict(c)
        for loop, how in dep.rule:
            if how == "prev":
                if c[loop] == 0:
                    return None  # the previous step is the initialisation
                t[loop] = c[loop] - 1
            elif how == "last":
                t[loop] = self.extent[loop] - 1
            elif how == "first":
                t[loop] = 0
        src = self.spec_of[dep.source]
        if not self._present(src, t):
            for loop, how in src.presence:
                t[loop] = self.extent[loop] - 1 if how == "last" else 0
        idx = self.p.index(t)
        if idx > epoch or (idx == epoch and dep.source == spec.einsum):
            return None
        return idx

    def _class(self, epoch: int) -> tuple:
        c = self._coords(epoch)
        return tuple((c[n] == 0, c[n] == self.extent[n] - 1) for n in self.relevant)

    # ---------------------------------------------------------------- latency
    def _avail(self, start: int, spec: OpSpec, kind: DepKind) -> int:
        end = start + spec.steps
        if kind is DepKind.REDUCE:
            return end + self.p.reduce_cycles
        if kind is DepKind.BROADCAST:
            return end + self.p.broadcast_cycles
        return end

    # ---------------------------------------------------------------- main loop
    def run(self) -> WaterfallResult:
        p = self.p
        total = p.total_epochs
        self.t = 0
        self.free = dict.fromkeys(self.arrays, 0)
        self.ops: dict[tuple[int, str], _Op] = {}
        self.by_epoch: dict[int, list[_Op]] = {}
        self.unstarted: dict[int, int] = {}  # epoch -> operations not yet started
        self.waiting: set[_Op] = set()  # every operation not yet started
        self.oldest = 0  # oldest epoch still holding records
        self.recent: deque[_Op] = deque()  # started operations, in start order
        self.max_steps = max(s.steps for s in p.ops)
        # how long a started operation can still make another wait (the `recent` window)
        self.reach = self.max_steps + max(p.reduce_cycles, p.broadcast_cycles) + 1
        self.pending = {a: [] for a in self.arrays}
        self.skew_of = {a: p.skew.get(a, 0) for a in self.arrays}
        # a dependent may start this long after its source's issue ends (see _avail)
        self.latency = {
            DepKind.CHAIN: 0,
            DepKind.REDUCE: p.reduce_cycles,
            DepKind.BROADCAST: p.broadcast_cycles,
        }
        self.open_tiles: dict[int, int | None] = {}  # epoch -> close time (None: unknown)
        self.dram_done: dict[int, int] = {}
        self.dram_next = 0  # epochs below it have had their DRAM transfer issued
        self.next_epoch = 0
        self.lowest = 0  # oldest epoch with an unstarted operation
        self.busy: dict[str, int] = defaultdict(int)
        self.stalls: dict[tuple[str, str], int] = defaultdict(int)
        self.trace: list[TraceEvent] = []
        self.checkpoints: dict[int, tuple] = {}
        self.last_seen: dict[tuple, int] = {}  # (kind of epoch, state) -> latest epoch
        self.outlines: dict[tuple, int] = {}  # (kind of epoch, outline) -> latest epoch
        self.block_seen: dict[tuple, int] = {}  # state at a block's start -> latest block
        self.periods: list[tuple[int, int, int]] = []
        self.simulated = 0
        self.end_time = 0
        self.started_first: set[int] = set()
        window = p.tiles_in_flight + 2
        every_epoch = [s for s in p.ops if not s.presence]
        busiest = max(
            (sum(s.steps for s in every_epoch if s.array == a) for a in self.arrays), default=0
        )
        self.dram_step = _stream_step(p.dram_cycles_per_epoch, busiest)
        # The global buffer's ports carry each epoch's operands on from the buffer: a second
        # stream behind DRAM's (zero when the architecture gives the buffer no bandwidth).
        self.port_step = _stream_step(p.port_cycles_per_epoch, busiest)
        self.streams = bool(self.dram_step or self.port_step)  # memory paces the epochs
        self.dram_free = Fraction(0)
        self.port_free = Fraction(0)
        clock = _Clock(self.options, p.phase, total)
        steps = 0
        while True:
            steps += 1
            if steps % CLOCK_EVERY == 0:
                clock.tick(self.lowest)
            while self.next_epoch < min(total, self.lowest + window):
                self._materialize(self.next_epoch)
                self.next_epoch += 1
            self._issue_dram(total)
            started = True
            while started:
                started = False
                for array in self.arrays:
                    if self.free[array] <= self.t:
                        op = self._pick(array)
                        if op is not None:
                            self._start(op)
                            started = True
                            if self.extrapolate and op.spec.order == 0:
                                self._maybe_jump(op.epoch, total)
            nxt = self._next_time()
            if nxt is None:
                break
            self._account(nxt)
            self.t = nxt
        clock.done()
        if self.lowest < total:  # operations left that can never start: no result
            raise CannotSimulate(
                f"phase '{p.phase}': the cycle engine cannot order its operations (epoch "
                f"{self.lowest} of {total} waits on a dependency never met)"
            )
        cycles = max(self.end_time, self.t)
        # The last wavefront drains after the last issue: every array's time after its last
        # operation is fill/drain, so busy + stalls add up to the cycles on each array.
        for array in self.arrays:
            tail = cycles - max(self.t, self.free[array])
            if tail > 0:
                self.stalls[(array, "fill/drain")] += tail
        return WaterfallResult(
            cycles,
            total,
            self.simulated,
            dict(self.busy),
            dict(self.stalls),
            self.trace,
            self.periods,
        )

    def _materialize(self, epoch: int) -> None:
        c = self._coords(epoch)
        created = []
        for spec in self.in_order:
            if self._present(spec, c):
                op = _Op(spec, epoch)
                self.ops[(epoch, spec.einsum)] = op
                self.waiting.add(op)
                created.append(op)
        self.by_epoch[epoch] = created
        self.unstarted[epoch] = len(created)
        for op in created:
            spec = op.spec
            for dep in spec.deps:
                if self.broken == (spec.einsum, dep.source):
                    continue
                target = self._target(spec, dep, epoch, c)
                if target is None:
                    continue
                src = self.ops.get((target, dep.source))
                if src is None:
                    continue  # retired long ago: its value is there
                if src.start is not None:
                    op.ready = max(op.ready, self._avail(src.start, src.spec, dep.kind))
                else:
                    src.dependents.append(((epoch, spec.einsum), dep.kind))
                    op.unresolved += 1
        for op in created:
            if op.unresolved == 0:
                self.pending[op.spec.array].append(op)

    def _issue_dram(self, total: int) -> None:
        if not self.streams:
            return
        ahead = self.p.tiles_in_flight + 1
        # Issued epochs run without a gap from the oldest kept (those below lowest - 1
        # are dropped), so the next to issue is the later of dram_next and lowest.
        for epoch in range(max(self.lowest, self.dram_next), min(total, self.lowest + ahead + 1)):
            # double buffering: data for an epoch may arrive `ahead` epochs before it runs
            if epoch - ahead > 0 and (epoch - ahead) not in self.started_first:
                break
            start = max(self.dram_free, Fraction(self.t))
            self.dram_free = start + self.dram_step
            arrived = self.dram_free
            if self.port_step:
                self.port_free = max(self.port_free, arrived) + self.port_step
                arrived = self.port_free
            self.dram_done[epoch] = math.ceil(arrived)
            self.dram_next = epoch + 1

    def _blocked(self, op: _Op) -> str | None:
        if op.ready > self.t:
            return "dependencies"
        if self.streams and op.spec.order == 0:
            done = self.dram_done.get(op.epoch)
            if done is None:  # not requested yet: the pipeline ahead holds the buffers
                return "dependencies"
            if done > self.t:
                return "memory"
        if op.spec.two_d and op.spec.einsum == self.two_d_first and op.epoch not in self.open_tiles:
            busy = sum(1 for close in self.open_tiles.values() if close is None or close > self.t)
            if busy >= self.p.tiles_in_flight:
                return "fill/drain"
        return None

    def _pick(self, array: str) -> _Op | None:
        best = None
        for op in self.pending[array]:
            if best is not None and (op.epoch, op.spec.order) >= (best.epoch, best.spec.order):
                continue  # older ones first: only a younger-than-best one is looked at
            if self._blocked(op) is None:
                best = op
        return best

    def _start(self, op: _Op) -> None:
        t = self.t
        spec = op.spec
        epoch = op.epoch
        end = t + spec.steps
        op.start = t
        self.waiting.remove(op)
        self.pending[spec.array].remove(op)
        self.recent.append(op)
        self.unstarted[epoch] -= 1
        self.free[spec.array] = end
        self.busy[spec.einsum] += spec.steps
        complete = end + self.skew_of[spec.array]
        if complete > self.end_time:
            self.end_time = complete
        if spec.order == 0:
            self.started_first.add(epoch)
        if spec.two_d:
            if spec.einsum == self.two_d_first:
                self.open_tiles[epoch] = None
            if spec.einsum == self.two_d_last:
                # Every PE frees the tile's registers when its own share of the last
                # operation ends; the wavefront skew shifts a PE's first and last use alike,
                # so the slot is free for the next tile's (equally skewed) wavefront at issue
                # end -- plus, if the outputs leave the array, the cycles to shift them out.
                self.open_tiles[epoch] = end + self.p.drain_cycles
        if epoch < self.trace_epochs:
            self.trace.append(TraceEvent(spec.array, spec.einsum, epoch, t, end, complete))
        if self.functional is not None:
            self.functional.execute(spec, epoch, t)
        if op.dependents:
            ops, latency, pending = self.ops, self.latency, self.pending
            for dkey, kind in op.dependents:
                dep = ops.get(dkey)
                if dep is None:
                    continue
                ready = end + latency[kind]  # what _avail says
                if ready > dep.ready:
                    dep.ready = ready
                dep.unresolved -= 1
                if dep.unresolved == 0:
                    pending[dep.spec.array].append(dep)
            op.dependents = []
        # retire: the oldest epoch with unstarted operations, and records nobody needs
        unstarted = self.unstarted
        while self.lowest < self.next_epoch and not unstarted.get(self.lowest):
            self.lowest += 1
        horizon = self.lowest - self.max_back - 1
        while self.oldest < horizon:
            for old in self.by_epoch.pop(self.oldest, ()):
                del self.ops[(old.epoch, old.spec.einsum)]
            unstarted.pop(self.oldest, None)
            self.oldest += 1
        recent, reach = self.recent, self.reach
        while recent and recent[0].start + reach <= t:
            recent.popleft()
        open_tiles = self.open_tiles
        for e in [e for e, close in open_tiles.items() if close is not None and close <= t]:
            del open_tiles[e]
        dram_done, floor = self.dram_done, self.lowest - 1
        while dram_done and (oldest := next(iter(dram_done))) < floor:
            del dram_done[oldest]  # issued in epoch order: the oldest come first
        if len(self.started_first) > 4 * self.p.tiles_in_flight + 8:
            floor = self.lowest - 2 - self.p.tiles_in_flight
            self.started_first = {e for e in self.started_first if e >= floor}
        if spec.order == 0:
            self.simulated += 1

    def _next_time(self) -> int | None:
        t = self.t
        soonest = None
        waiting = False
        for array, pending in self.pending.items():
            if pending:
                waiting = True
                free = self.free[array]
                if free > t and (soonest is None or free < soonest):
                    soonest = free
                for op in pending:
                    ready = op.ready
                    if ready > t and (soonest is None or ready < soonest):
                        soonest = ready
        for close in self.open_tiles.values():
            if close is not None and close > t and (soonest is None or close < soonest):
                soonest = close
        for done in self.dram_done.values():
            if done > t and (soonest is None or done < soonest):
                soonest = done
        if soonest is None and (waiting or self.waiting):
            later = [self.free[a] for a in self.arrays if self.free[a] > t]
            return min(later) if later else None
        return soonest

    def _account(self, nxt: int) -> None:
        span = nxt - self.t
        for array in self.arrays:
            idle = max(0, nxt - max(self.t, self.free[array]))
            if idle <= 0:
                continue
            reasons = [self._blocked(op) for op in self.pending[array]]
            if any(r == "fill/drain" for r in reasons):
                reason = "fill/drain"
            elif any(r == "memory" for r in reasons):
                reason = "memory"
            elif self.pending[array] or self._unstarted_on(array):
                reason = "dependencies"
            else:
                reason = "idle"
            self.stalls[(array, reason)] += min(idle, span)

    def _unstarted_on(self, array: str) -> bool:
        return any(op.spec.array == array for op in self.waiting)

    # ---------------------------------------------------------------- steady state
    def _snapshot(self, epoch: int) -> tuple:
        """The scheduler's state relative to this moment and this epoch (what the future
        depends on). Taken at many epochs' starts, so written for speed."""
        t = self.t
        ops = []
        append = ops.append
        by_epoch = self.by_epoch
        # the unstarted operations, in (epoch, program order): every epoch from the lowest
        # with one to the newest, each epoch's operations created in program order
        for e in range(self.lowest, self.next_epoch):
            for op in by_epoch[e]:
                if op.start is not None:
                    continue
                deps = op.dependents
                if not deps:
                    waits: tuple = ()
                elif len(deps) == 1:
                    waits = ((deps[0][0][0] - epoch, deps[0][0][1]),)
                else:
                    waits = tuple(sorted([(k[0] - epoch, k[1]) for k, _ in deps]))
                ready = op.ready - t
                append((e - epoch, op.spec.order, ready if ready > 0 else 0, op.unresolved, waits))
        if not self.orders_unique:  # (a hand-written program may repeat an order)
            ops.sort()
        latency = max(self.p.reduce_cycles, self.p.broadcast_cycles)
        recent = sorted(
            (op.epoch - epoch, op.spec.order, op.start - t)
            for op in self.recent
            if op.start + op.spec.steps + latency > t
        )
        tiles = sorted(
            (e - epoch, -1 if close is None else close - t)
            for e, close in self.open_tiles.items()
            if close is None or close > t
        )
        dram = sorted((e - epoch, d - t) for e, d in self.dram_done.items() if d > t)
        return (
            tuple(ops),
            tuple(recent),
            tuple(max(0, self.free[a] - t) for a in self.arrays),
            tuple(tiles),
            tuple(dram),
            max(0, self.dram_free - t),
            max(0, self.port_free - t),
            self.next_epoch - epoch,
            self.lowest - epoch,
        )

    def _outline(self, epoch: int) -> tuple:
        """A few numbers of :meth:`_snapshot`'s, cheap to take: equal snapshots have equal
        outlines."""
        t = self.t
        return (
            len(self.waiting),
            tuple(max(0, self.free[a] - t) for a in self.arrays),
            max(0, self.dram_free - t),
            self.next_epoch - epoch,
            self.lowest - epoch,
        )

    def _counters(self) -> tuple:
        return (dict(self.busy), dict(self.stalls), self.end_time - self.t)

    def _maybe_jump(self, epoch: int, total: int) -> None:
        if epoch < 1 or epoch in self.checkpoints:
            return
        if epoch < self.trace_epochs + self.p.tiles_in_flight + 4:
            return  # the traced epochs are simulated, never extrapolated
        kind = self._class(epoch)
        # A state can repeat only where its outline (a few numbers of the snapshot) has been
        # seen before: the whole snapshot is taken there and at block starts, and skipped
        # in a transient, where every epoch's outline is new (a run is then found one
        # period later than it could be; what is extrapolated is the same).
        outline = (kind, self._outline(epoch))
        again = outline in self.outlines
        self.outlines[outline] = epoch
        window = self.p.tiles_in_flight + 4
        limit = min(total, (epoch // self.block + 1) * self.block)
        # the furthest a run through this epoch is looked at: by this epoch, or by a later
        # one (within a period) that finds this epoch's state again, in its own block
        reach = min(total, ((epoch + self.max_period) // self.block + 1) * self.block)
        if epoch % self.block == 0:
            snap = self._snapshot(epoch)
        elif again and self._run_end(epoch, reach, kind) - window - epoch > 0:
            snap = self._snapshot(epoch)
        else:
            # Nor is one taken where the run has no room left for a jump: its state could
            # neither start one nor be the earlier end of one (a jump from a later epoch of
            # this run would have even less room, and a run of another kind starts afresh).
            snap = None
        self.checkpoints[epoch] = (self.t, snap, self._counters())
        # the latest epoch at which each state was seen: a repeat is one lookup away
        last_seen = None
        if snap is not None:
            key = (kind, snap)
            last_seen = self.last_seen.get(key)
            self.last_seen[key] = epoch
        for e in [
            e for e in self.checkpoints if e < epoch - self.max_period - 1 and e % self.block
        ]:
            del self.checkpoints[e]
        for e in [e for e in self.checkpoints if e < epoch - MAX_BLOCK_PERIOD * self.block]:
            del self.checkpoints[e]
        if len(self.last_seen) > 4 * (self.max_period + MAX_BLOCK_PERIOD):
            self.last_seen = {k: e for k, e in self.last_seen.items() if e in self.checkpoints}
        if len(self.outlines) > 4 * (self.max_period + MAX_BLOCK_PERIOD):
            self.outlines = {k: e for k, e in self.outlines.items() if e in self.checkpoints}
        # Whole blocks: this epoch starts a block whose state repeats that of the start of
        # the block k blocks earlier; every k-block period from here repeats exactly.
        if epoch % self.block == 0:
            prev_block = self.block_seen.get(snap)
            self.block_seen[snap] = epoch
            if len(self.block_seen) > 2 * MAX_BLOCK_PERIOD:
                self.block_seen = {
                    k: e for k, e in self.block_seen.items() if e in self.checkpoints
                }
            if prev_block is not None and prev_block in self.checkpoints:
                t0, _snap0, counters0 = self.checkpoints[prev_block]
                k = (epoch - prev_block) // self.block
                periods = ((total - epoch) // self.block - 1) // k
                if periods > 0:
                    self._jump(
                        periods * k * self.block, periods * (self.t - t0), counters0, periods
                    )
                return
        # Runs of epochs of the same kind: the state repeats with a period of k epochs.
        if last_seen is not None and 0 < epoch - last_seen <= self.max_period:
            prev = last_seen
            k = epoch - prev
            if prev not in self.checkpoints:
                return
            t0, snap0, counters0 = self.checkpoints[prev]
            if snap0 is None or snap0 != snap or self._class(prev) != kind:
                return
            end = self._run_end(prev, limit, self._class(prev))
            periods = (end - window - epoch) // k
            if periods > 0:
                self._jump(periods * k, periods * (self.t - t0), counters0, periods)
            return

    def _run_end(self, start: int, limit: int, kind: tuple) -> int:
        """First epoch at or after `start` (below `limit`) of another kind. Kinds depend on
        whether relevant loops are at their first or last value, so they can only change
        where the innermost relevant loop changes; whole middle stretches are skipped."""
        if not self.relevant:
            return limit
        loop = self.relevant[-1]
        step, n = self.stride[loop], self.extent[loop]
        e = start
        while e < limit:
            if self._class(e) != kind:
                return e
            c = self._coords(e)[loop]
            if 0 < c < n - 2:
                e = (e // step + (n - 1 - c)) * step
            else:
                e = (e // step + 1) * step
        return limit

    def _jump(self, epochs: int, cycles: int, counters0: tuple, periods: int) -> None:
        busy0, stalls0, _ = counters0
        for name in set(self.busy) | set(busy0):
            self.busy[name] += periods * (self.busy.get(name, 0) - busy0.get(name, 0))
        for key in set(self.stalls) | set(stalls0):
            self.stalls[key] += periods * (self.stalls.get(key, 0) - stalls0.get(key, 0))
        self.periods.append((self.lowest, cycles // max(1, periods), epochs))
        self.t += cycles
        self.end_time += cycles
        self.dram_free += cycles
        self.port_free += cycles
        for a in self.arrays:
            self.free[a] += cycles
        new_ops = {}
        for (e, name), op in self.ops.items():
            op.epoch = e + epochs
            if op.start is not None:
                op.start += cycles
            op.ready += cycles
            op.dependents = [((k[0] + epochs, k[1]), kind) for k, kind in op.dependents]
            new_ops[(e + epochs, name)] = op
        self.ops = new_ops
        self.by_epoch = {e + epochs: v for e, v in self.by_epoch.items()}
        self.unstarted = {e + epochs: v for e, v in self.unstarted.items()}
        self.oldest += epochs
        self.open_tiles = {
            e + epochs: (None if c is None else c + cycles) for e, c in self.open_tiles.items()
        }
        self.dram_done = {e + epochs: d + cycles for e, d in self.dram_done.items()}
        self.dram_next += epochs
        self.started_first = {e + epochs for e in self.started_first}
        self.next_epoch += epochs
        self.lowest += epochs


class _Clock:
    """The wall-clock side of a run: progress reports and the `max_sim_s` refusal. Only
    looked at every CLOCK_EVERY scheduler steps; never changes what is simulated."""

    def __init__(self, options: TimingOptions, name: str, total: int) -> None:
        self.options, self.name, self.total = options, name, total
        self.t0 = time.monotonic()
        self.reported = False

    def tick(self, done: int) -> None:
        elapsed = time.monotonic() - self.t0
        if self.options.progress is not None:
            self.options.progress(self.name, done, self.total, elapsed)
            self.reported = True
        limit = self.options.max_sim_s
        if limit is not None and elapsed > limit:
            rate = done / elapsed if done else 0.0
            left = (
                f"at this rate about {format_duration((self.total - done) / rate)} to finish"
                if rate
                else "no estimate yet"
            )
            raise SimulationLimit(
                f"cycle simulation of phase {self.name} stopped at --max-sim-s {limit:g}: "
                f"{done} of {self.total} epochs done in {elapsed:.1f} s, {left} (no steady "
                "state found so far); raise --max-sim-s, or use --engine analytic"
            )

    def done(self) -> None:
        if self.reported and self.options.progress is not None:
            self.options.progress(self.name, self.total, self.total, time.monotonic() - self.t0)


def _stream_step(cycles_per_epoch: float, busiest: int) -> Fraction:
    """A memory stream's time per epoch as an exact fraction of a cycle, rounded up to the
    next 1/64 (never down: a memory-bound stream of 10^9 epochs would otherwise finish
    before its bytes could cross the bus), so it still repeats. A stream with at least 2x
    slack under every epoch's busiest array is rounded up to whole cycles: it stays hidden,
    and the state repeats every epoch instead of every 64 (only the very first transfer can
    take up to a cycle longer)."""
    step = Fraction(math.ceil(Fraction(cycles_per_epoch) * DRAM_RESOLUTION), DRAM_RESOLUTION)
    if 0 < math.ceil(step) * 2 <= busiest:
        step = Fraction(math.ceil(step))
    return step
