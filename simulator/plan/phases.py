"""One phase planned: its loop nests, the tiles the global buffer keeps, its DRAM traffic.

Planning step 2 (after the extents): for every phase of the mapping,

* **traffic** -- each DRAM-homed tensor access crosses DRAM `size x transfer_factor` times
  (see :mod:`simulator.plan.nest`); accesses with the same reuse signature share one
  buffered copy. Outputs refetched around a reduction loop are written and read back. A
  tensor with a spill fraction `s` sends `s` of its extra buffer accesses to DRAM: re-reads
  beyond the first fill of a DRAM-homed tensor, and every buffer write and read of a
  buffer-homed one (a consumer on the producer's array in the same pass takes the value
  directly, without the buffer).
* **capacity** -- every tile resident in the buffer together must fit it: the tiles kept on
  chip (times their copies), a tensor with a fixed `spill: s` holding `1 - s` of its tile
  (the spilled part lives in DRAM), and a tensor placed `over` another taking that tile's
  slot (computed in place: FLAT's SN over QK, A over SN); tensors with `spill: auto` give
  up the fraction that does not fit.

A phase with `mapper:` is a GEMM planned by the GEMM mapper (:mod:`simulator.plan.gemm_mapper`):
its traffic is the chosen mapping's DRAM access counts.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from simulator.plan.facts import CascadeFacts, canonical, placement_of
from simulator.plan.gemm_mapper import GemmMapping, gemm_of, map_gemm, objective_table
from simulator.plan.masks import Constraint, active_fraction, constraints, peak_fraction
from simulator.plan.nest import (
    Nest,
    build_nest,
    held_loops,
    reuse_signature,
    tensor_components,
    tensor_size,
    tile_values,
    transfer_factor,
)
from simulator.plan.waves import (
    SharedRead,
    cached_values,
    hit_share,
    sharing_group,
    unit_loops,
)
from simulator.spec.arch import Architecture
from simulator.spec.mapping import Mapping, Phase
from simulator.support.errors import DoesNotFit, Loc

# Einsums under distinct filters sharing one copy of a tensor, counted exactly (inclusion and
# exclusion over their subsets); more are bounded above by the sum of their fractions.
MAX_UNION = 4
VALUE_COUNT_LIMIT = 1 << 16  # combinations a held tile's count by value may enumerate


@dataclass
class _TensorTally:
    read: float = 0.0
    write: float = 0.0
    spill: float = 0.0


@dataclass(frozen=True)
class PhasePlan:
    phase: Phase
    nests: dict[str, Nest]
    tallies: dict[str, tuple[float, float, float]]  # tensor -> (read, write, spill) values
    buffer_values: float
    fits: bool
    gemm: GemmMapping | None = None  # a `mapper:` phase: the GEMM mapper's choice
    # Filtered Einsums: the fraction of their tiles computed (a tile with no kept point is
    # skipped; see simulator.plan.masks). Unfiltered Einsums are not listed (all tiles).
    activity: tuple[tuple[str, float], ...] = ()
    resident_values: float = 0.0  # the tiles resident together (the capacity check's count)

    def active(self, einsum: str) -> float:
        return dict(self.activity).get(einsum, 1.0)

    @property
    def traffic_values(self) -> float:
        return sum(r + w + s for r, w, s in self.tallies.values())


def plan_phase(
    phase: Phase,
    mapping: Mapping,
    facts: CascadeFacts,
    arch: Architecture,
    extents: dict[str, int],
    partitions: dict[str, tuple[str, ...]],
    instances: tuple[tuple[str, int], ...] = (),
) -> PhasePlan:
    if phase.mapper is not None:
        return _mapped_phase(phase, mapping, facts, arch, extents, instances)
    cascade = facts.cascade
    by_name = {e.name: e for e in cascade.einsums}
    nests = {
        em.einsum: build_nest(
            by_name[em.einsum], phase.loops, em.loops, em.inner, em.spatial, partitions
        )
        for em in phase.einsums
    }
    # Filters (causal, windows): which tiles each Einsum computes, and fetches for.
    masks = {
        em.einsum: constraints(by_name[em.einsum], partitions, extents) for em in phase.einsums
    }
    activity = {
        name: active_fraction(cons, nests[name].tile_loops, extents)
        for name, cons in masks.items()
        if cons
    }
    check_register_handoffs(phase, mapping, facts, arch, extents, partitions, nests)
    tallies: dict[str, _TensorTally] = {}
    whole = dense_reads(mapping, facts)  # written whole: a library GEMM reads every value
    # A cache shared by a fan-out of cores (simulator.plan.waves): reads the units of a
    # wave may share, priced once the phase's working set is known.
    units = unit_loops(cascade, phase, partitions) if arch.cores > 1 and arch.buffer.cache else ()
    items = math.prod(n for _, n in instances) * math.prod(extents.get(u, 1) for u in units)
    shareable: list[SharedRead] = []
    shared: set[tuple] = set()
    buffer_tiles: dict[str, float] = {}
    spilled_tiles: dict[str, float] = {}  # fixed spill: the resident part of the tile
    auto_tiles: dict[str, float] = {}
    # Accesses of each tensor: (einsum, is_write)
    accesses: dict[str, list[tuple[str, bool]]] = {}
    for em in phase.einsums:
        e = by_name[em.einsum]
        for acc in e.reads():
            accesses.setdefault(canonical(facts, acc.tensor), []).append((e.name, False))
        accesses.setdefault(canonical(facts, e.output.tensor), []).append((e.name, True))
    for tensor, uses in accesses.items():
        place = placement_of(phase, facts, tensor)
        if place.home == "register":
            continue
        comps, iterative = tensor_components(cascade, tensor, partitions)
        size = tensor_size(comps, extents)
        tally = tallies.setdefault(tensor, _TensorTally())
        keep = place.keep if place.keep is not None else "top"
        if place.home == "buffer" or keep != "stream":
            tile = max(
                _held(nests[n], comps, iterative, keep, extents, masks, uses) for n, _ in uses
            )
            if place.spill == "auto":
                auto_tiles[tensor] = tile * place.copies
            elif place.spill is None:
                buffer_tiles[tensor] = tile * place.copies
            else:
                spilled_tiles[tensor] = tile * place.copies * (1 - float(place.spill))
        if place.home == "buffer":
            continue
        signatures = {
            (name, is_write): reuse_signature(nests[name], comps, keep, extents)
            for name, is_write in uses
        }
        for name, is_write in uses:
            nest = nests[name]
            factor = transfer_factor(nest, comps, keep, extents)
            signature = signatures[name, is_write]
            key = (tensor, is_write, signature)
            if key in shared:
                continue
            shared.add(key)
            # one copy for every access with this signature: its tiles are fetched where
            # any of them computes (only the tiles with kept points fetch, or write, theirs)
            sharers = [n for n, w in uses if w == is_write and signatures[n, w] == signature]
            fetched = _fetched(sharers, masks, nests, comps, signature, extents)
            if is_write and tensor in whole:
                fetched = 1.0  # a library GEMM reads it whole: the masked part written too
            if is_write:
                tally.write += size * factor * fetched
                tally.read += size * (factor - 1) * fetched  # partial results read back
                continue
            group = sharing_group(units, signature, comps) if units else 1
            if group > 1:  # the units of a wave may share it (priced below)
                held = tile_values(nest, comps, iterative, keep, extents)
                in_flight = size if masks[name] else 2 * held
                union = size * factor / group * min(1.0, fetched * group)
                shareable.append(
                    SharedRead(tensor, size * factor * fetched, group, union, in_flight)
                )
            else:
                tally.read += size * factor * fetched
    if shareable:
        room = max(0.0, arch.buffer_values - _resident(buffer_tiles, phase, facts))
        hits = hit_share(shareable, items, arch.cores, room)
        for read in shareable:
            tallies[read.tensor].read += cached_values(read, arch.cores, hits)
    # An output that is a view of a recurrence's final step (`Y = RY[K]`) leaves the chip
    # once, from the phase that runs the recurrence, when the state stays on chip.
    in_phase = {em.einsum for em in phase.einsums}
    for e in cascade.einsums:
        out = e.output.tensor
        if e.kind != "copy" or out not in cascade.outputs:
            continue
        state = canonical(facts, out)
        if facts.producers.get(state) not in in_phase:
            continue
        if placement_of(phase, facts, state).home == "DRAM":
            continue  # the state's own traffic writes it
        comps, _ = tensor_components(cascade, out, partitions)
        tallies.setdefault(out, _TensorTally()).write += tensor_size(comps, extents)
    capacity = arch.buffer_values
    fixed = sum(buffer_tiles.values())
    resident = _resident({**buffer_tiles, **spilled_tiles}, phase, facts)
    fits = resident <= capacity
    auto_fraction = 0.0
    total_auto = 0.0
    if auto_tiles:
        room = max(0.0, capacity - fixed)
        # what the auto tiles add to the fixed ones, a tile computed in place over another
        # (`over`) taking its slot
        together = _resident({**buffer_tiles, **auto_tiles}, phase, facts)
        total_auto = together - _resident(buffer_tiles, phase, facts)
        auto_fraction = max(0.0, 1.0 - room / total_auto) if total_auto > 0 else 0.0
    # Spills: the fraction of buffer accesses that go to DRAM.
    for tensor, uses in accesses.items():
        place = placement_of(phase, facts, tensor)
        if place.home == "register" or place.spill is None:
            continue
        fraction = auto_fraction if place.spill == "auto" else float(place.spill)
        if fraction == 0:
            continue
        if any(n in activity for n, _w in uses):  # spills of skipped tiles do not happen
            fraction *= max(activity.get(n, 1.0) for n, _w in uses)
        comps, _ = tensor_components(cascade, tensor, partitions)
        size = tensor_size(comps, extents)
        keep = place.keep if place.keep is not None else "top"
        if place.home == "DRAM":
            extra = 0.0
            for name, _is_write in uses:
                nest = nests[name]
                extra += transfer_factor(nest, comps, "stream", extents) - transfer_factor(
                    nest, comps, keep, extents
                )
            tallies[tensor].spill += fraction * size * extra
        else:
            accesses_ = _buffer_accesses(tensor, uses, facts, mapping, nests, comps, extents)
            tallies[tensor].spill += fraction * size * accesses_
    used = fixed + (min(total_auto, max(0.0, capacity - fixed)) if auto_tiles else 0.0)
    return PhasePlan(
        phase,
        nests,
        {t: (v.read, v.write, v.spill) for t, v in tallies.items()},
        used,
        fits,
        activity=tuple(sorted(activity.items())),
        resident_values=resident,
    )


def _held(
    nest: Nest,
    comps: tuple[str, ...],
    iterative: frozenset[str],
    keep: str,
    extents: dict[str, int],
    masks: dict[str, tuple[Constraint, ...]],
    uses: list[tuple[str, bool]],
) -> float:
    """Values of a tensor's tile held at its keep point for one of its Einsums: under a
    filter every Einsum of the tensor shares, only the tiles of the spanned loops that hold a
    kept point at the fullest iteration of the loops above (a block of rows keeps the scores
    of the band of keys it computes, not of every key); else the whole tile."""
    tile = tile_values(nest, comps, iterative, keep, extents)
    cons = masks[nest.einsum]
    if not cons or any(set(masks[n]) != set(cons) for n, _ in uses):
        return tile
    outside, spanned = held_loops(nest, comps, iterative, keep)
    share = peak_fraction(cons, outside, spanned, extents) if spanned else 1.0
    # counted by value as well as by tile: a region of 16 rows in a tile of 256 spread
    # over the PEs holds those 16 rows, not the tile (both counts are at least the truth;
    # by value where it enumerates few combinations)
    values = tuple(c for c in comps if c not in outside and c not in iterative)
    if len(values) > len(spanned):
        share = min(share, peak_fraction(cons, outside, values, extents, VALUE_COUNT_LIMIT))
    return tile * share


def dense_reads(mapping: Mapping, facts: CascadeFacts) -> frozenset[str]:
    """The tensors a library GEMM reads (a phase the GEMM mapper maps: it reads every value
    of its operands, masked or not). A kernel writing one through DRAM writes it whole --
    the masked part as the zeros the GEMM reads -- not only its kept tiles."""
    return frozenset(
        canonical(facts, acc.tensor)
        for ph in mapping.phases
        if ph.mapper is not None
        for em in ph.einsums
        for acc in facts.cascade.einsum(em.einsum).reads()
    )


def _fetched(
    names: list[str],
    masks: dict[str, tuple[Constraint, ...]],
    nests: dict[str, Nest],
    comps: tuple[str, ...],
    signature: tuple[tuple[str, int], ...],
    extents: dict[str, int],
) -> float:
    """The fraction of a shared copy's tiles fetched: a tile where at least one of the
    Einsums reading the copy (`names`) has a kept point. The loops are those that refetch
    (the signature) and those inside the kept tile that split its values: only the kept
    parts of a tile are fetched. Einsums under different filters (two disjoint regions of
    one key range) fetch the union of their tiles, by inclusion and exclusion: a tile
    active under each of several filter sets is one active under all their constraints."""
    if any(not masks[n] for n in names):
        return 1.0  # one of them computes every tile

    def loops_of(name: str) -> tuple[str, ...]:
        parts = [lv for lv in nests[name].tile_loops if lv in comps]
        return tuple(dict.fromkeys([*(lv for lv, _ in signature), *parts]))

    first = names[0]
    distinct = list(dict.fromkeys(masks[n] for n in names))
    if len(distinct) == 1:  # one filter: its tiles
        return active_fraction(masks[first], loops_of(first), extents)
    loops = tuple(dict.fromkeys(lv for n in names for lv in loops_of(n)))
    if len(distinct) > MAX_UNION:  # an upper bound: never fewer tiles than fetched
        return min(1.0, sum(active_fraction(m, loops, extents) for m in distinct))
    union = 0.0
    for k in range(1, len(distinct) + 1):
        for subset in itertools.combinations(distinct, k):
            together = tuple(dict.fromkeys(c for m in subset for c in m))
            union += (-1) ** (k + 1) * active_fraction(together, loops, extents)
    return min(1.0, max(0.0, union))


def _mapped_phase(
    phase: Phase,
    mapping: Mapping,
    facts: CascadeFacts,
    arch: Architecture,
    extents: dict[str, int],
    instances: tuple[tuple[str, int], ...],
) -> PhasePlan:
    """A GEMM phase planned by the GEMM mapper: its DRAM traffic per tensor (per instance)
    from the chosen mapping's access counts."""
    (em,) = phase.einsums
    gemm = gemm_of(facts.cascade, em.einsum, extents, instances)
    m = map_gemm(gemm, arch, phase.mapper, objective_table(arch, phase.mapper), em.array)
    copies = max(1, gemm.copies // gemm.per_instance)  # (batch, head) instances
    tallies: dict[str, tuple[float, float, float]] = {}
    used = 0.0
    for level, ds, c in m.report.counts:
        if level == "buffer":
            used += c.capacity
        if level != "DRAM":
            continue
        tensor = canonical(facts, ds)
        r, w, sp = tallies.get(tensor, (0.0, 0.0, 0.0))
        tallies[tensor] = (r + c.reads / copies, w + (c.fills + c.updates) / copies, sp)
    return PhasePlan(phase, {}, tallies, used, True, m)


def _resident(tiles: dict[str, float], phase: Phase, facts: CascadeFacts) -> float:
    """The values of `tiles` resident in the buffer together: a tensor placed `over` another
    (computed in place over its tile, as FLAT's softmax writes SN over QK and A over SN) takes
    that tile's slot, so the two count once (the larger)."""
    slot = {t: t for t in tiles}

    def root(t: str) -> str:
        while slot[t] != t:
            t = slot[t]
        return t

    for tensor in tiles:
        over = placement_of(phase, facts, tensor).over
        target = canonical(facts, over) if over else None
        if target in tiles and root(target) != root(tensor):
            slot[root(tensor)] = root(target)
    sizes: dict[str, float] = {}
    for t, v in tiles.items():
        r = root(t)
        sizes[r] = max(sizes.get(r, 0.0), v)
    return sum(sizes.values())


def _buffer_accesses(
    tensor: str,
    uses: list[tuple[str, bool]],
    facts: CascadeFacts,
    mapping: Mapping,
    nests: dict[str, Nest],
    comps: tuple[str, ...],
    extents: dict[str, int],
) -> float:
    """Writes + reads of a buffer-homed tensor (values, in units of its size): each reader
    reads it as often as its loops fetch its tiles from the buffer (a matmul's operand once
    per block of the other operand: the part that spilled comes from DRAM every time)."""
    producer = facts.producers.get(tensor)
    readers = [n for n, is_write in uses if not is_write]

    def fetches(n: str) -> int:
        return transfer_factor(nests[n], comps, "stream", extents) if n in nests else 1

    if producer is None:
        return sum(fetches(n) for n in readers)
    p_array, p_pass = mapping.array_of(producer), facts.passes[producer]
    buffered = [n for n in readers if mapping.array_of(n) != p_array or facts.passes[n] != p_pass]
    writes = 1 if buffered else 0
    return writes + sum(fetches(n) for n in buffered)


def check_register_handoffs(
    phase: Phase,
    mapping: Mapping,
    facts: CascadeFacts,
    arch: Architecture,
    extents: dict[str, int],
    partitions: dict[str, tuple[str, ...]],
    nests: dict[str, Nest],
) -> None:
    """A value handed between Einsums in the PEs' registers (no placement) lives from its
    Einsum to its readers: where a reader walks a tile loop its maker does not (a weight's
    scaled columns, made once per chunk of inputs, read by every block of token rows), the
    registers would keep the maker's whole tile across that loop. More than the arrays'
    registers hold cannot be so handed: the mapping does not fit (it must place the tensor
    in the buffer or DRAM, or the maker walk the loop too). A mapping of arrays whose
    registers the architecture leaves out is not checked."""
    if not all(a.register_component for a in arch.arrays):
        return
    capacity = sum(a.pes * a.register_words for a in arch.arrays)
    cascade = facts.cascade
    made_here = {canonical(facts, cascade.einsum(n).output.tensor): n for n in nests}
    for name, nest in nests.items():
        for acc in cascade.einsum(name).reads():
            tensor = canonical(facts, acc.tensor)
            maker = made_here.get(tensor)
            if maker is None or maker == name:
                continue
            if placement_of(phase, facts, tensor).home != "register":
                continue
            across = [
                lv
                for lv in nest.tile_loops
                if extents.get(lv, 1) > 1 and lv not in nests[maker].comps
            ]
            if not across:
                continue
            comps, iterative = tensor_components(cascade, tensor, partitions)
            held = tile_values(nest, comps, iterative, across[0], extents)
            if held > capacity:
                raise DoesNotFit(
                    f"mapping '{mapping.name}': phase '{phase.name}' hands {tensor} from "
                    f"{maker} to {name} in registers, but {name} reuses it across {across[0]}, "
                    f"which {maker} does not walk: {held:.0f} values held, the registers "
                    f"hold {capacity}",
                    Loc(mapping.path),
                )
