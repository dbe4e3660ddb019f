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

import bisect
import math
import time
from collections import defaultdict, deque
from dataclasses import dataclass
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


class _Op:
    """One operation of one epoch; an operation is itself: found and hashed by identity."""

    __slots__ = (
        "dependents",
        "epoch",
        "opens",
        "order",
        "ready",
        "spec",
        "start",
        "unresolved",
        "waits",
    )

    def __init__(self, spec: OpSpec, epoch: int, order: int, opens: bool) -> None:
        self.spec = spec
        self.epoch = epoch
        self.order = order  # spec.order, at hand in the scheduler's inner loops
        self.opens = opens  # the tile's first 2D operation: it opens the tile (takes a slot)
        self.unresolved = 0
        self.ready = 0
        self.start: int | None = None
        # (operation, latency): an operation waiting for this one, and the cycles after this
        # one's issue end it may start (a waiting operation is not started, so never retired)
        self.dependents: list[tuple[_Op, int]] = []
        # the dependents' (epoch relative to this one's, Einsum), sorted, for the snapshot
        # (None: to work out again)
        self.waits: tuple | None = None

    def depend_on(self, src: _Op, latency: int) -> None:
        """Wait for `src`: ready `latency` cycles after its issue ends if it has started,
        else one of its dependents until it starts."""
        begun = src.start
        if begun is not None:
            ready = begun + src.spec.steps + latency
            if ready > self.ready:
                self.ready = ready
        else:
            src.dependents.append((self, latency))
            src.waits = None
            self.unresolved += 1


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
        self.rev_loops = tuple(reversed(program.loops))
        self.tiles_in_flight = program.tiles_in_flight
        self.drain_cycles = program.drain_cycles
        self.keep_first = 4 * program.tiles_in_flight + 8  # epochs kept in started_first
        self.relevant_loops = tuple((self.stride[n], self.extent[n]) for n in self.relevant)
        self.plan = self._compile()

    # ---------------------------------------------------------------- epoch structure
    def _coords(self, epoch: int) -> dict[str, int]:
        return self.p.coords(epoch)

    def _class(self, epoch: int) -> tuple:
        """Whether each relevant loop is at its first and at its last value."""
        out = []
        for stride, n in self.relevant_loops:
            c = epoch // stride % n  # the loop's coordinate
            out.append((c == 0, c == n - 1))
        return tuple(out)

    def _compile(self) -> list[tuple]:
        """What :meth:`_materialize` needs of each operation of an epoch (program order),
        worked out once: the coordinates that make it present (loop -> value), and for each
        dependency the loops its rule moves (loop, previous step?, value otherwise), the
        coordinates that make its source present, and its latency."""
        p = self.p
        extent = self.extent
        latency = {
            DepKind.CHAIN: 0,
            DepKind.REDUCE: p.reduce_cycles,
            DepKind.BROADCAST: p.broadcast_cycles,
        }

        def wanted(presence: tuple) -> tuple:
            return tuple((loop, extent[loop] - 1 if how == "last" else 0) for loop, how in presence)

        plan = []
        for spec in self.in_order:
            deps = []
            for dep in spec.deps:
                if self.broken == (spec.einsum, dep.source):
                    continue
                rule = tuple(
                    (loop, how == "prev", extent[loop] - 1 if how == "last" else 0)
                    for loop, how in dep.rule
                    if how in ("prev", "last", "first")
                )
                src = self.spec_of[dep.source]
                deps.append(
                    (
                        dep.source,
                        rule,
                        wanted(src.presence),
                        dep.source == spec.einsum,
                        latency[dep.kind],
                    )
                )
            opens = spec.two_d and spec.einsum == self.two_d_first
            plan.append((spec, spec.einsum, spec.order, opens, wanted(spec.presence), deps))
        return plan

    # ---------------------------------------------------------------- main loop
    def run(self) -> WaterfallResult:
        p = self.p
        total = p.total_epochs
        self.t = 0
        self.free = dict.fromkeys(self.arrays, 0)
        # epoch -> Einsum -> operation, in program order (epochs from `oldest` on)
        self.by_epoch: dict[int, dict[str, _Op]] = {}
        self.unstarted: dict[int, int] = {}  # epoch -> operations not yet started
        self.waiting: set[_Op] = set()  # every operation not yet started
        self.oldest = 0  # oldest epoch still holding records
        self.recent: deque[_Op] = deque()  # started operations, in start order
        self.max_steps = max(s.steps for s in p.ops)
        # how long a started operation can still make another wait (the `recent` window)
        self.reach = self.max_steps + max(p.reduce_cycles, p.broadcast_cycles) + 1
        self.pending = {a: [] for a in self.arrays}
        self.skew_of = {a: p.skew.get(a, 0) for a in self.arrays}
        self.open_tiles: dict[int, int | None] = {}  # epoch -> close time (None: unknown)
        # at most the earliest close time of an open tile (None: none known)
        self.first_close: int | None = None
        self.dram_done: dict[int, int] = {}
        self.dram_next = 0  # epochs below it have had their DRAM transfer issued
        self.next_epoch = 0
        self.lowest = 0  # oldest epoch with an unstarted operation
        self.busy: dict[str, int] = defaultdict(int)
        self.stalls: dict[tuple[str, str], int] = defaultdict(int)
        self.trace: list[TraceEvent] = []
        self.checkpoints: dict[int, tuple] = {}
        # the checkpoints' epochs, ascending: those at a block's start, and the others
        self.block_marks: list[int] = []
        self.plain_marks: list[int] = []
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
        self._loop(clock, total, window)
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

    def _loop(self, clock: _Clock, total: int, window: int) -> None:  # noqa: C901, PLR0912, PLR0915
        """The scheduler, event to event: materialize the epochs in the window, issue their
        memory transfers, start what each free array can (the oldest unblocked operation,
        :meth:`_blocked`), then advance to the next event and account the idle time.

        The hot loop of the engine, so written for speed: the choice of an operation
        (:meth:`_blocked` without its reasons), the next event's time and the accounting of
        idle arrays are inline, on local names (the dictionaries they read are only ever
        changed in place)."""
        arrays = self.arrays
        free = self.free
        queues = [(a, self.pending[a]) for a in arrays]
        open_tiles = self.open_tiles
        dram_done = self.dram_done
        waiting = self.waiting
        stalls = self.stalls
        extrapolate = self.extrapolate
        streams = self.streams
        tiles_in_flight = self.p.tiles_in_flight
        ahead = tiles_in_flight + 1  # (see _issue_dram)
        materialize = self._materialize
        issue_dram = self._issue_dram
        start = self._start
        maybe_jump = self._maybe_jump
        blocked = self._blocked
        t = self.t
        steps = 0
        while True:
            steps += 1
            if steps % CLOCK_EVERY == 0:
                clock.tick(self.lowest)
            epoch = self.next_epoch
            until = self.lowest + window
            if until > total:
                until = total
            if epoch < until:
                while epoch < until:
                    materialize(epoch)
                    epoch += 1
                self.next_epoch = epoch
            if streams:
                lowest = self.lowest
                epoch = self.dram_next
                if epoch < lowest:
                    epoch = lowest
                if (
                    epoch < total
                    and epoch < lowest + ahead + 1
                    and (epoch - ahead <= 0 or (epoch - ahead) in self.started_first)
                ):
                    issue_dram(total)  # an epoch's transfer to issue (the first's test)
            started = True
            while started:
                started = False
                for array, queue in queues:
                    if not queue or free[array] > t:
                        continue
                    # the oldest (epoch, then program order) operation not blocked
                    best = None
                    best_epoch = best_order = 0
                    busy = -1  # tiles open (counted once needed)
                    for op in queue:
                        e = op.epoch
                        order = op.order
                        if best is not None and (
                            e > best_epoch or (e == best_epoch and order >= best_order)
                        ):
                            continue  # older ones first: only a younger-than-best one is looked at
                        if op.ready > t:
                            continue
                        if streams and order == 0:
                            done = dram_done.get(e)
                            if done is None or done > t:
                                continue
                        if op.opens and e not in open_tiles:
                            if busy < 0:
                                busy = 0
                                for close in open_tiles.values():
                                    if close is None or close > t:
                                        busy += 1
                            if busy >= tiles_in_flight:
                                continue
                        best, best_epoch, best_order = op, e, order
                    if best is not None:
                        start(best)
                        started = True
                        if extrapolate and best_order == 0:
                            maybe_jump(best_epoch, total)
                            t = self.t
            # the next event: an array freed, an operation ready, a tile closed, data arrived
            soonest = None
            queued = False
            for array, queue in queues:
                if queue:
                    queued = True
                    at = free[array]
                    if at > t and (soonest is None or at < soonest):
                        soonest = at
                    for op in queue:
                        at = op.ready
                        if at > t and (soonest is None or at < soonest):
                            soonest = at
            for at in open_tiles.values():
                if at is not None and at > t and (soonest is None or at < soonest):
                    soonest = at
            for at in dram_done.values():
                if at > t and (soonest is None or at < soonest):
                    soonest = at
            if soonest is None:
                if not (queued or waiting):
                    break
                later = [free[a] for a in arrays if free[a] > t]
                if not later:
                    break
                soonest = min(later)
            nxt = soonest
            # account the idle arrays' time until then, by the reason they wait
            span = nxt - t
            for array, queue in queues:
                at = free[array]
                idle = nxt - (at if at > t else t)
                if idle <= 0:
                    continue
                reason = None
                memory = False
                for op in queue:
                    why = blocked(op, t)
                    if why == "fill/drain":
                        reason = why
                        break
                    if why == "memory":
                        memory = True
                if reason is None:
                    if memory:
                        reason = "memory"
                    elif queue or self._unstarted_on(array):
                        reason = "dependencies"
                    else:
                        reason = "idle"
                stalls[(array, reason)] += idle if idle < span else span
            t = nxt
            self.t = t

    def _materialize(self, epoch: int) -> None:
        c = {}
        rest = epoch
        for name, n in self.rev_loops:
            c[name] = rest % n
            rest //= n
        ops: dict[str, _Op] = {}
        waiting = self.waiting
        created = []
        made = []
        for spec, einsum, order, opens, presence, deps in self.plan:
            for loop, want in presence:
                if c[loop] != want:
                    break
            else:
                op = _Op(spec, epoch, order, opens)
                ops[einsum] = op
                waiting.add(op)
                created.append(op)
                if deps:
                    made.append((op, deps))
        by_epoch = self.by_epoch
        by_epoch[epoch] = ops
        self.unstarted[epoch] = len(created)
        stride = self.stride
        for op, deps in made:
            for source, rule, src_presence, own, latency in deps:
                # the epoch of the source's operation this one reads: the rule's coordinates
                # (moved: loop -> value), then the source's own presence if it is absent there
                if not rule and not src_presence:  # the same epoch's
                    if own:
                        continue
                    src = ops.get(source)
                    if src is None:
                        continue
                    op.depend_on(src, latency)
                    continue
                moved = {}
                for loop, prev, want in rule:
                    if prev:
                        v = c[loop]
                        if v == 0:
                            break  # the previous step is the initialisation
                        moved[loop] = v - 1
                    else:
                        moved[loop] = want
                else:
                    for loop, want in src_presence:
                        if moved.get(loop, c[loop]) != want:
                            moved.update(src_presence)
                            break
                    target = epoch
                    for loop, v in moved.items():
                        target += (v - c[loop]) * stride[loop]
                    if target > epoch or (target == epoch and own):
                        continue
                    src = by_epoch.get(target)
                    if src is not None:
                        src = src.get(source)
                    if src is None:
                        continue  # retired long ago: its value is there
                    op.depend_on(src, latency)
        pending = self.pending
        for op in created:
            if op.unresolved == 0:
                pending[op.spec.array].append(op)

    def _issue_dram(self, total: int) -> None:
        if not self.streams:
            return
        ahead = self.p.tiles_in_flight + 1
        lowest = self.lowest
        # Issued epochs run without a gap from the oldest kept (those below lowest - 1
        # are dropped), so the next to issue is the later of dram_next and lowest.
        for epoch in range(max(lowest, self.dram_next), min(total, lowest + ahead + 1)):
            # double buffering: data for an epoch may arrive `ahead` epochs before it runs
            if epoch - ahead > 0 and (epoch - ahead) not in self.started_first:
                break
            # max(dram_free, Fraction(t)), the comparison in integers
            start = self.dram_free
            t = self.t
            if start.numerator < t * start.denominator:
                start = Fraction(t)
            self.dram_free = start + self.dram_step
            arrived = self.dram_free
            if self.port_step:
                self.port_free = max(self.port_free, arrived) + self.port_step
                arrived = self.port_free
            self.dram_done[epoch] = math.ceil(arrived)
            self.dram_next = epoch + 1

    def _blocked(self, op: _Op, t: int) -> str | None:
        """Why an operation cannot start at cycle `t` (None: it can)."""
        if op.ready > t:
            return "dependencies"
        if self.streams and op.order == 0:
            done = self.dram_done.get(op.epoch)
            if done is None:  # not requested yet: the pipeline ahead holds the buffers
                return "dependencies"
            if done > t:
                return "memory"
        if op.opens and op.epoch not in self.open_tiles:
            busy = 0
            for close in self.open_tiles.values():
                if close is None or close > t:
                    busy += 1
            if busy >= self.p.tiles_in_flight:
                return "fill/drain"
        return None

    def _start(self, op: _Op) -> None:  # noqa: PLR0912
        t = self.t
        spec = op.spec
        epoch = op.epoch
        array = spec.array
        steps = spec.steps
        end = t + steps
        op.start = t
        self.waiting.remove(op)
        self.pending[array].remove(op)
        self.recent.append(op)
        unstarted = self.unstarted
        unstarted[epoch] -= 1
        self.free[array] = end
        self.busy[spec.einsum] += steps
        complete = end + self.skew_of[array]
        if complete > self.end_time:
            self.end_time = complete
        first = op.order == 0
        if first:
            self.started_first.add(epoch)
        if spec.two_d:
            if op.opens:
                self.open_tiles[epoch] = None
            if spec.einsum == self.two_d_last:
                # Every PE frees the tile's registers when its own share of the last
                # operation ends; the wavefront skew shifts a PE's first and last use alike,
                # so the slot is free for the next tile's (equally skewed) wavefront at issue
                # end -- plus, if the outputs leave the array, the cycles to shift them out.
                close = end + self.drain_cycles
                self.open_tiles[epoch] = close
                if self.first_close is None or close < self.first_close:
                    self.first_close = close
        if epoch < self.trace_epochs:
            self.trace.append(TraceEvent(array, spec.einsum, epoch, t, end, complete))
        if self.functional is not None:
            self.functional.execute(spec, epoch, t)
        if op.dependents:
            pending = self.pending
            for dep, latency in op.dependents:
                ready = end + latency  # the source's issue end, plus the latency between
                if ready > dep.ready:
                    dep.ready = ready
                dep.unresolved -= 1
                if dep.unresolved == 0:
                    pending[dep.spec.array].append(dep)
            op.dependents = []
        # retire: the oldest epoch with unstarted operations, and records nobody needs
        lowest = self.lowest
        if lowest < self.next_epoch and not unstarted.get(lowest):
            lowest += 1
            while lowest < self.next_epoch and not unstarted.get(lowest):
                lowest += 1
            self.lowest = lowest
            # (what follows depends on `lowest` alone, and is done each time it moves:
            # the epochs added in between are above it)
            horizon = lowest - self.max_back - 1
            if self.oldest < horizon:
                oldest, by_epoch = self.oldest, self.by_epoch
                while oldest < horizon:
                    by_epoch.pop(oldest, None)
                    unstarted.pop(oldest, None)
                    oldest += 1
                self.oldest = oldest
            dram_done, floor = self.dram_done, lowest - 1
            while dram_done and (oldest_done := next(iter(dram_done))) < floor:
                del dram_done[oldest_done]  # issued in epoch order: the oldest come first
        recent, reach = self.recent, self.reach
        while recent and recent[0].start + reach <= t:
            recent.popleft()
        first_close = self.first_close
        if first_close is not None and first_close <= t:  # a tile closed by now
            open_tiles = self.open_tiles
            for e in [e for e, close in open_tiles.items() if close is not None and close <= t]:
                del open_tiles[e]
            closes = [close for close in open_tiles.values() if close is not None]
            self.first_close = min(closes) if closes else None
        if len(self.started_first) > self.keep_first:
            floor = lowest - 2 - self.tiles_in_flight
            self.started_first = {e for e in self.started_first if e >= floor}
        if first:
            self.simulated += 1

    def _unstarted_on(self, array: str) -> bool:
        return any(op.spec.array == array for op in self.waiting)

    # ---------------------------------------------------------------- steady state
    def _snapshot(self, epoch: int) -> tuple:
        """The scheduler's state relative to this moment and this epoch (what the future
        depends on). Taken at many epochs' starts, so written for speed: an operation's
        dependents are relative to its own epoch (itself relative to this one), so they
        are sorted once, not at every snapshot."""
        t = self.t
        ops = []
        append = ops.append
        by_epoch = self.by_epoch
        # the unstarted operations, in (epoch, program order): every epoch from the lowest
        # with one to the newest, each epoch's operations created in program order
        for e in range(self.lowest, self.next_epoch):
            rel = e - epoch
            for op in by_epoch[e].values():
                if op.start is not None:
                    continue
                waits = op.waits
                if waits is None:
                    deps = op.dependents
                    if not deps:
                        waits = ()
                    elif len(deps) == 1:
                        d = deps[0][0]
                        waits = ((d.epoch - e, d.spec.einsum),)
                    else:
                        waits = tuple(sorted([(d.epoch - e, d.spec.einsum) for d, _ in deps]))
                    op.waits = waits
                ready = op.ready - t
                append((rel, op.order, ready if ready > 0 else 0, op.unresolved, waits))
        if not self.orders_unique:  # (a hand-written program may repeat an order)
            ops.sort()
        latency = max(self.p.reduce_cycles, self.p.broadcast_cycles)
        recent = [
            (op.epoch - epoch, op.order, op.start - t)
            for op in self.recent
            if op.start + op.spec.steps + latency > t
        ]
        recent.sort()
        tiles = [
            (e - epoch, -1 if close is None else close - t)
            for e, close in self.open_tiles.items()
            if close is None or close > t
        ]
        tiles.sort()
        dram = [(e - epoch, d - t) for e, d in self.dram_done.items() if d > t]
        dram.sort()
        free = self.free
        return (
            tuple(ops),
            tuple(recent),
            tuple([max(0, free[a] - t) for a in self.arrays]),
            tuple(tiles),
            tuple(dram),
            _after(self.dram_free, t),
            _after(self.port_free, t),
            self.next_epoch - epoch,
            self.lowest - epoch,
        )

    def _outline(self, epoch: int) -> tuple:
        """A few numbers of :meth:`_snapshot`'s, cheap to take: equal snapshots have equal
        outlines."""
        t = self.t
        free = self.free
        return (
            len(self.waiting),
            tuple([max(0, free[a] - t) for a in self.arrays]),
            _after(self.dram_free, t),
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
        # Checkpoints kept: within a period of epochs, and at a block's start within the
        # longest period of blocks (the marks, ascending, find the others at their front).
        marks = self.plain_marks if epoch % self.block else self.block_marks
        if marks and marks[-1] > epoch:
            bisect.insort(marks, epoch)
        else:
            marks.append(epoch)
        block_floor = epoch - MAX_BLOCK_PERIOD * self.block
        _drop_below(
            self.checkpoints, self.plain_marks, max(epoch - self.max_period - 1, block_floor)
        )
        _drop_below(self.checkpoints, self.block_marks, block_floor)
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
            c = e // step % n
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
        for e, ops in self.by_epoch.items():
            for op in ops.values():
                op.epoch = e + epochs
                if op.start is not None:
                    op.start += cycles
                op.ready += cycles
                # (its dependents move on with it, and its `waits` are relative to its epoch)
        self.by_epoch = {e + epochs: v for e, v in self.by_epoch.items()}
        self.unstarted = {e + epochs: v for e, v in self.unstarted.items()}
        self.oldest += epochs
        # changed in place: the scheduler's loop holds them
        _shift(self.open_tiles, lambda c: None if c is None else c + cycles, epochs)
        _shift(self.dram_done, lambda d: d + cycles, epochs)
        if self.first_close is not None:
            self.first_close += cycles
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


def _after(free: Fraction, t: int) -> Fraction | int:
    """`max(0, free - t)`, the time a memory stream is still busy after cycle `t`, without
    the subtraction of fractions where it is not (exactly: the denominator is positive)."""
    return free - t if free.numerator > t * free.denominator else 0


def _drop_below(checkpoints: dict[int, tuple], marks: list[int], floor: int) -> None:
    """Drop the checkpoints of the epochs below `floor` among `marks` (ascending)."""
    n = 0
    for e in marks:
        if e >= floor:
            break
        del checkpoints[e]
        n += 1
    if n:
        del marks[:n]


def _shift(by_epoch: dict, value, epochs: int) -> None:
    """Move a dictionary keyed by epoch `epochs` on, its values through `value`, in place
    (in the same order)."""
    items = list(by_epoch.items())
    by_epoch.clear()
    for e, v in items:
        by_epoch[e + epochs] = value(v)


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
