"""A GEMM mapper for a 2D PE array: the best tiling, loop order and buffer use of one GEMM.

Pipeline: planning -- the plan of a `mapper:` phase (:mod:`simulator.plan.phases`) and of
the linear layers (:mod:`simulator.drivers.endtoend`).

A GEMM-shaped Einsum `OUT[m, n] = L[k, m] * R[k, n]` has three dims by role: `rows` (m),
`cols` (n) and `reduction` (k); its tensors are `left`, `right` and `output`. A mapping
over the storage hierarchy

    DRAM  ->  global buffer  ->  spatial fan-out (X, Y)  ->  PE registers

splits every dim into a DRAM factor, a buffer factor, a spatial factor (one dim per mesh
axis, or the same dim on both) and a register factor; orders the DRAM and buffer loops;
and says which tensors the buffer keeps (the others bypass it). The registers keep every
tensor. Stationarity is the order's consequence: the tensor that does not vary with the
buffer's innermost loop stays in the PE registers (cols innermost: the left operand is
stationary; rows: the right; reduction: the output).

Access counts follow Timeloop's semantics -- the rules of :mod:`simulator.plan.accesses`,
which the chosen mapping is finally run through. The search evaluates those rules on numpy
arrays of candidates instead of one mapping at a time. Only the innermost non-trivial loop
of a level changes any count (a tile is refilled on every iteration above it except the
innermost run of loops that do not index it, and a GEMM tensor misses exactly one dim), so
three orders per level cover every distinct outcome.

Objective: least latency (max of compute cycles / clock and DRAM traffic / bandwidth), then
least energy (accesses priced by the architecture's energy table) and DRAM traffic, in the
order the settings give; without a table, DRAM traffic and then global-buffer accesses.
Candidates are spatial choices in increasing compute time; one whose compute time already
exceeds the best latency found is never expanded (branch and bound). Ties keep the first
candidate in a fixed enumeration order, so the result is deterministic. Only exact
divisors are used, or a dim padded to whole rows of an array's axis that does not divide it
(the padded work counted). No mapping fits -> SpecError ("no valid mapping").
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from simulator.cascade.gemm import batched_gemm_shape, flat_name
from simulator.cascade.ir import Cascade
from simulator.plan.accesses import AccessReport, DataSpace, LevelMapping, Loop, Problem, analyze
from simulator.spec.arch import Architecture, Array
from simulator.spec.linear import DIMS, TENSORS, MapperSettings
from simulator.spec.tables import EnergyTable, load_energy_table
from simulator.support.errors import SpecError
from simulator.support.units import divisors

ROWS, COLS, RED = 0, 1, 2
INDEXED = {"left": (ROWS, RED), "right": (COLS, RED), "output": (ROWS, COLS)}
MISSING = {"left": COLS, "right": ROWS, "output": RED}
STATIONARY = {ROWS: "right", COLS: "left", RED: "output"}  # buffer innermost -> stays put


@dataclass(frozen=True)
class Gemm:
    """One GEMM-shaped Einsum: rank names and extents by role, tensors by role."""

    einsum: str
    ranks: tuple[str, str, str]  # rows, cols, reduction
    extents: tuple[int, int, int]
    tensors: tuple[str, str, str]  # left, right, output
    instances: tuple[tuple[str, int], ...] = ()  # independent copies (outer dims)
    # Of those, the batch ranks inside one (batch, head) instance (a GEMM per chunk m1).
    batch: tuple[tuple[str, int], ...] = ()

    @property
    def copies(self) -> int:
        return math.prod(n for _, n in self.instances)

    @property
    def per_instance(self) -> int:
        """GEMMs per (batch, head) instance: the product of the batch ranks."""
        return math.prod(n for _, n in self.batch)

    @property
    def macs(self) -> int:
        return math.prod(self.extents) * self.copies


def gemm_of(
    cascade: Cascade,
    einsum: str,
    extents: Mapping[str, int],
    instances: tuple[tuple[str, int], ...] = (),
) -> Gemm:
    """Recognise `OUT[m, n] = L[k, m] * R[k, n]` (any index order; several ranks in a role
    flatten into one dim, :mod:`simulator.cascade.gemm`); anything else is an error: the
    mapper maps GEMMs only. A filter on an operand (a causal mask) is computed whole: the
    mapper maps the dense GEMM, as a GEMM library computes QK and then masks it."""
    e = cascade.einsum(einsum)
    found = batched_gemm_shape(cascade, einsum)
    if found is None:
        raise SpecError(
            f"the GEMM mapper maps Einsums shaped OUT[m, n] = L[k, m] * R[k, n]; "
            f"'{e.name}: {e.text}' is not one",
            e.loc,
        )
    shape, batch_ranks = found
    roles = (shape.rows, shape.cols, shape.reduction)
    missing = [r for ranks in (*roles, batch_ranks) for r in ranks if r not in extents]
    if missing:
        raise SpecError(f"no extent for rank(s) {', '.join(missing)} of '{e.name}'", e.loc)
    # A batch rank (in every access) repeats the GEMM within an instance: more copies.
    batch = tuple((r, int(extents[r])) for r in batch_ranks)
    return Gemm(
        e.name,
        tuple(flat_name(ranks) for ranks in roles),  # type: ignore[arg-type]
        tuple(math.prod(int(extents[r]) for r in ranks) for ranks in roles),  # type: ignore[arg-type]
        (shape.left, shape.right, shape.output),
        instances + batch,
        batch,
    )


@dataclass(frozen=True)
class Prices:
    """Energy of one value access per level (pJ): the ERT's per-access energy divided by the
    values one access carries (as :mod:`simulator.pricing.energy` prices them)."""

    dram_read: float
    dram_write: float
    buffer_read: float
    buffer_write: float
    reg_read: float
    reg_write: float


def prices_of(arch: Architecture, array: Array, table: EnergyTable) -> Prices:
    dram, buf = arch.dram, arch.buffer
    reg = array.register_component
    return Prices(
        table.energy(dram.name, "read") / dram.values_per_access,
        table.energy(dram.name, "write") / dram.values_per_access,
        table.energy(buf.name, "read") / buf.values_per_access,
        table.energy(buf.name, "write") / buf.values_per_access,
        table.energy(reg, "read") if reg else 0.0,
        table.energy(reg, "write") if reg else 0.0,
    )


@dataclass(frozen=True)
class GemmMapping:
    """The mapping the mapper chose and what it costs (counts from `accesses.analyze`)."""

    gemm: Gemm
    array: str
    factors: tuple[tuple[int, int, int], ...]  # per dim (rows, cols, reduction): DRAM, buffer, regs
    spatial: tuple[tuple[str, str, int], ...]  # (axis, dim, factor)
    dram_order: tuple[str, ...]  # dims, outermost first
    buffer_order: tuple[str, ...]
    keep: tuple[str, ...]  # tensors (by role) the buffer keeps
    problem: Problem
    levels: tuple[LevelMapping, ...]
    report: AccessReport
    cycles: float  # all copies, at the array's clock
    compute_s: float
    memory_s: float
    latency_s: float
    traffic_bytes: float
    utilization: float
    candidates: int  # mappings evaluated
    objective: tuple[float, ...] = ()  # the search's key: latency, then the objectives

    @property
    def stationary(self) -> str:
        """The tensor (by role) that stays in the PE registers across the innermost
        non-trivial loop above them (the one loop that does not index it)."""
        above = [(d, 0) for d in self.dram_order] + [(d, 1) for d in self.buffer_order]
        inner = [d for d, level in above if self.factors[DIMS.index(d)][level] > 1]
        return STATIONARY[DIMS.index(inner[-1])] if inner else "-"

    def describe(self) -> str:
        def level(i: int, order: tuple[str, ...]) -> str:
            parts = [f"{d}={self.factors[DIMS.index(d)][i]}" for d in order]
            return " ".join(parts)

        spatial = " ".join(f"{axis}:{d}={f}" for axis, d, f in self.spatial if f > 1)
        return (
            f"DRAM[{level(0, self.dram_order)}] buffer[{level(1, self.buffer_order)}] "
            f"spatial[{spatial or '-'}] registers[{level(2, DIMS)}]; "
            f"buffer keeps {','.join(self.keep) or 'nothing'}; {self.stationary} stationary"
        )


# --------------------------------------------------------------------------------------
# Search


@functools.lru_cache(maxsize=512)
def map_gemm(
    gemm: Gemm,
    arch: Architecture,
    settings: MapperSettings,
    table: EnergyTable | None = None,
    array: str | None = None,
) -> GemmMapping:
    """The best mapping of `gemm` on `array` (default: the 2D array) under `settings`.

    `table` (an ERT bound to `arch`) prices the energy objective; it is the objective only,
    the caller prices the chosen mapping with whichever accounting it reports. Without a
    table the objective is least latency, then DRAM traffic, then buffer accesses; ties
    beyond the objective keep the first candidate in enumeration order.

    Kept per process for the last 512 questions (every argument is an immutable value): a
    layer's Q, K and V projections, and every configuration of a chip, ask the same. The
    search itself sees only the extents and the copies (:func:`_choose`, kept apart): GEMMs
    that differ only in their names share it, and each is counted under its own names."""
    arr = _array(arch, array, settings)
    _mac_cycles(arr, gemm, settings)  # the array computes MACs (else: named, one line)
    chosen = _choose(gemm.extents, gemm.copies, arch, settings, table, array)
    if chosen is None:
        raise SpecError(
            f"no valid mapping for GEMM '{gemm.einsum}' ({_shape(gemm)}) on {arr.name}: no "
            f"tile fits the {arch.buffer.capacity_bytes}-byte {arch.buffer.name} and the "
            f"{arr.register_words}-word PE registers under the mapper's rules",
            settings.source,
        )
    choice, ext, evaluated, key = chosen
    if ext != gemm.extents:  # padded to whole rows of the array: the padded work counts
        gemm = dataclasses.replace(gemm, extents=ext)
    return _finish(gemm, arr, arch, choice, evaluated, key)


def forget_gemm_mappings() -> None:
    """Empty the process's kept GEMM mappings and searches (a benchmark's fresh search)."""
    map_gemm.cache_clear()
    _choose.cache_clear()


@functools.lru_cache(maxsize=512)
def _choose(
    extents: tuple[int, int, int],
    copies: int,
    arch: Architecture,
    settings: MapperSettings,
    table: EnergyTable | None,
    array: str | None,
) -> tuple[_Choice, tuple[int, int, int], int, tuple] | None:
    """The search of :func:`map_gemm` over a GEMM's extents and copies: the chosen mapping,
    the (padded) extents, the candidates evaluated and the objective's key; None when no
    tile fits."""
    arr = _array(arch, array, settings)
    secondary = settings.objective[1] if len(settings.objective) > 1 else "traffic"
    if table is None:
        # No ERT: least DRAM traffic, then least global-buffer traffic (the next level's).
        secondary = "traffic"
        prices = Prices(0.0, 0.0, 1.0, 1.0, 0.0, 0.0)
    else:
        prices = prices_of(arch, arr, table)
    capacity = arch.buffer_values
    words = arr.register_words
    f = arch.frequency_hz
    per_value_s = arch.value_bytes * copies / arch.dram.bandwidth_bytes_per_s
    best: tuple | None = None
    evaluated = 0
    per_mac = arr.op("mac").cycles
    for cycles, spatial, ext in _spatial_options(extents, arr, settings):
        compute_s = cycles * per_mac * copies / f
        if best is not None and compute_s > best[0][0]:
            break  # sorted by compute time: nothing later can be faster
        if _least_buffer(ext, spatial, settings) > capacity:
            continue  # not even the smallest tiles the rules allow fit
        cands = _candidates(ext, spatial, settings, words)
        if cands is None:
            continue
        f0, f1, f2 = cands
        s = np.array([_spatial_of(spatial, d) for d in range(3)], dtype=float)
        forced = np.zeros(f0.shape[1])
        for t in settings.buffer.keep:
            a, b = INDEXED[t]
            forced = forced + f1[a] * s[a] * f2[a] * f1[b] * s[b] * f2[b]
        fits = forced <= capacity  # the tensors every keep choice holds must fit
        if not fits.any():
            continue
        f0, f1, f2 = f0[:, fits], f1[:, fits], f2[:, fits]
        split = _Split.of(ext, s, f0, f1, f2)
        found = _best_in(split, settings, prices, capacity, compute_s, per_value_s, secondary)
        evaluated += found[1]
        if found[0] is None:
            continue
        key, j, o0, o1, keep = found[0]
        if best is None or key < best[0]:
            best = (key, spatial, (f0[:, j], f1[:, j], f2[:, j]), o0, o1, keep, cycles, ext)
    if best is None:
        return None
    key, spatial, (b0, b1, b2), o0, o1, keep, cycles, ext = best
    factors = tuple((int(b0[d]), int(b1[d]), int(b2[d])) for d in range(3))
    return _Choice(factors, spatial, o0, o1, keep, cycles), ext, evaluated, key


@functools.lru_cache(maxsize=64)
def objective_table(arch: Architecture, settings: MapperSettings) -> EnergyTable | None:
    """The energy table a phase's mapper needs for an energy objective: the architecture's
    own (corrected) table, whatever accounting prices the result -- the chosen mapping
    does not depend on the accounting. None when the objective prices no energy."""
    if "energy" not in settings.objective[1:] or arch.energy_table is None:
        return None
    return load_energy_table(arch.energy_table).bind(arch.component_attributes())


def _mac_cycles(arr: Array, gemm: Gemm, settings: MapperSettings) -> float:
    """PE cycles of one MAC on the array (its operation table)."""
    op = arr.op("mac")
    if op is None:
        raise SpecError(
            f"GEMM '{gemm.einsum}' needs 'mac', which the PEs of array '{arr.name}' do not support",
            settings.source,
        )
    return op.cycles


def _shape(gemm: Gemm) -> str:
    dims = " x ".join(f"{r}={e}" for r, e in zip(gemm.ranks, gemm.extents, strict=True))
    return dims + (f", {gemm.copies} copies" if gemm.copies > 1 else "")


def _array(arch: Architecture, name: str | None, settings: MapperSettings) -> Array:
    if name is not None:
        try:
            return arch.array(name)
        except KeyError:
            raise SpecError(
                f"unknown array '{name}' (the architecture has "
                f"{', '.join(a.name for a in arch.arrays)})",
                settings.source,
            ) from None
    for a in arch.arrays:
        if a.mesh_y > 1:
            return a
    raise SpecError(f"architecture {arch.name} has no 2D PE array for the GEMMs", settings.source)


def _divisors(n: int) -> list[int]:
    return divisors(n)  # bounded work for any extent (simulator.support.units)


def _spatial_of(spatial: tuple[tuple[str, int, int], ...], dim: int) -> int:
    return math.prod(fac for _axis, d, fac in spatial if d == dim)


def _spatial_options(
    ext: tuple[int, int, int], arr: Array, settings: MapperSettings
) -> list[tuple[int, tuple[tuple[str, int, int], ...], tuple[int, int, int]]]:
    """(compute cycles per copy, ((axis, dim, factor), ...), extents) in increasing compute
    time. A dim longer than an axis that the axis does not divide (a sequence of 1023) may
    also be padded to whole rows of it, as a GEMM library pads its last tile: the extents
    are then the padded ones, and the padded work counts."""
    per_axis = []
    for axis, mesh in (("X", arr.mesh_x), ("Y", arr.mesh_y)):
        opts = [(axis, ROWS, 1)]
        for name in settings.allowed(axis):
            d = DIMS.index(name)
            opts += [(axis, d, v) for v in _divisors(ext[d]) if 1 < v <= mesh]
            if 1 < mesh < ext[d] and ext[d] % mesh:
                opts.append((axis, d, mesh))
        per_axis.append(opts)
    out = []
    seen = set()
    for combo in itertools.product(*per_axis):
        spread = [1, 1, 1]
        for _axis, d, v in combo:
            spread[d] *= v
        padded = tuple(-(-ext[d] // spread[d]) * spread[d] for d in range(3))
        if padded != ext and any(
            padded[d] != ext[d] and spread[d] not in (arr.mesh_x, arr.mesh_y) for d in range(3)
        ):
            continue  # only an axis's whole width pads a dim
        # Counts do not depend on which axis carries a dim, only on the spatial factor of
        # each dim: a swap of X and Y is the same mapping (when it fits either way).
        signature = tuple(spread)
        if signature in seen:
            continue
        seen.add(signature)
        cycles = math.prod(padded) // math.prod(spread)
        out.append((cycles, combo, padded))  # type: ignore[arg-type]
    out.sort(key=lambda item: item[0])  # stable: enumeration order breaks ties
    return out


def _least_buffer(
    ext: tuple[int, int, int], spatial: tuple[tuple[str, int, int], ...], settings: MapperSettings
) -> int:
    """A lower bound on the buffer the tensors the rules keep there need (values)."""
    least = []
    for d in range(3):
        rest = ext[d] // _spatial_of(spatial, d)
        fixed0 = settings.dram.factor(DIMS[d])
        if fixed0 is not None:
            inner = rest // fixed0 if rest % fixed0 == 0 else rest
        else:
            inner = (settings.buffer.factor(DIMS[d]) or 1) * (
                settings.registers.factor(DIMS[d]) or 1
            )
        least.append(_spatial_of(spatial, d) * inner)
    return sum(math.prod(least[d] for d in INDEXED[t]) for t in settings.buffer.keep)


def _candidates(
    ext: tuple[int, int, int],
    spatial: tuple[tuple[str, int, int], ...],
    settings: MapperSettings,
    words: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Every (DRAM, buffer, register) factor split of the three dims that the rules allow
    and whose register tiles fit: three (3, n) arrays."""
    rules = (settings.dram, settings.buffer, settings.registers)
    per_dim: list[dict[int, list[tuple[int, int]]]] = []
    for d in range(3):
        rest = ext[d] // _spatial_of(spatial, d)
        fixed = [r.factor(DIMS[d]) for r in rules]
        groups: dict[int, list[tuple[int, int]]] = {}
        for r2 in [fixed[2]] if fixed[2] else _divisors(rest):
            if rest % r2 or r2 > words:
                continue
            for r1 in [fixed[1]] if fixed[1] else _divisors(rest // r2):
                if (rest // r2) % r1:
                    continue
                r0 = rest // r2 // r1
                if fixed[0] is not None and r0 != fixed[0]:
                    continue
                groups.setdefault(r2, []).append((r0, r1))
        if not groups:
            return None
        per_dim.append(groups)
    blocks = []
    for r2 in itertools.product(*(sorted(g) for g in per_dim)):
        tiles = r2[ROWS] * r2[RED] + r2[COLS] * r2[RED] + r2[ROWS] * r2[COLS]
        if tiles > words:
            continue
        lists = [np.array(per_dim[d][r2[d]], dtype=float) for d in range(3)]
        idx = np.meshgrid(*(np.arange(len(x)) for x in lists), indexing="ij")
        flat = [i.ravel() for i in idx]
        f0 = np.stack([lists[d][flat[d], 0] for d in range(3)])
        f1 = np.stack([lists[d][flat[d], 1] for d in range(3)])
        f2 = np.broadcast_to(np.array(r2, dtype=float)[:, None], f0.shape)
        blocks.append((f0, f1, f2))
    if not blocks:
        return None
    return tuple(np.concatenate([b[i] for b in blocks], axis=1) for i in range(3))  # type: ignore[return-value]


def _orders(rule_order: tuple[str, ...]) -> list[tuple[int, ...]]:
    """Loop orders to try (dim indices, outermost first): the rule's, or one per innermost dim
    (the only position that changes a count)."""
    if rule_order:
        return [tuple(DIMS.index(d) for d in rule_order)]
    return [tuple([d for d in range(3) if d != inner] + [inner]) for inner in range(3)]


def _keeps(settings: MapperSettings) -> list[tuple[str, ...]]:
    options = []
    for t in TENSORS:
        if t in settings.buffer.keep:
            options.append((True,))
        elif t in settings.buffer.bypass:
            options.append((False,))
        else:
            options.append((True, False))
    return [
        tuple(t for t, k in zip(TENSORS, flags, strict=True) if k)
        for flags in itertools.product(*options)
    ]


def _innermost(f: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """Per candidate, the innermost non-trivial loop of a level (its dim; -1 if none)."""
    inner = np.full(f.shape[1], -1)
    for d in order:  # outermost first: an inner non-trivial loop overrides
        inner = np.where(f[d] > 1, d, inner)
    return inner


def _tile_visits(
    t: str, f0: np.ndarray, f1: np.ndarray, inner0: np.ndarray, inner1: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Timeloop's visits of the buffer and register tiles of tensor `t`: the product of the
    loops above, except the innermost run of non-trivial loops over `u`, the one dim that
    does not index it -- the buffer's innermost loop if it is over u, and then the DRAM's
    innermost if it is over u too and the buffer has no other non-trivial loop."""
    u = MISSING[t]
    a, b = INDEXED[t]
    p0 = f0[0] * f0[1] * f0[2]
    vis1 = p0 / np.where(inner0 == u, f0[u], 1.0)
    only_u = (f1[a] == 1) & (f1[b] == 1)
    vis2 = (
        p0
        * (f1[0] * f1[1] * f1[2])
        / np.where(inner1 == u, f1[u], 1.0)
        / np.where(only_u & (inner0 == u), f0[u], 1.0)
    )
    return vis1, vis2


@dataclass(frozen=True)
class _Split:
    """The candidates of one spatial choice: its (padded) extents, the spatial factor of
    each dim, every candidate's DRAM, buffer and register factors ((3, n) arrays), the PEs
    holding a register tile (the spatial factors' product) and the computes."""

    ext: tuple[int, int, int]
    s: np.ndarray
    f0: np.ndarray
    f1: np.ndarray
    f2: np.ndarray
    inst2: float
    computes: float

    @staticmethod
    def of(ext, s, f0, f1, f2) -> _Split:
        return _Split(ext, s, f0, f1, f2, float(np.prod(s)), float(math.prod(ext)))


def _best_in(split, settings, prices, capacity, compute_s, per_value_s, secondary):
    """The best candidate of one spatial choice: ((key, index, o0, o1, keep) | None, count)."""
    s, f0, f1, f2 = split.s, split.f0, split.f1, split.f2
    tile1 = {}
    for t in TENSORS:
        a, b = INDEXED[t]
        tile1[t] = f1[a] * s[a] * f2[a] * f1[b] * s[b] * f2[b]
    n = f0.shape[1]
    best = None
    count = 0
    keeps = _keeps(settings)
    inner1s = [(o1, _innermost(f1, o1)) for o1 in _orders(settings.buffer.order)]
    for o0 in _orders(settings.dram.order):
        inner0 = _innermost(f0, o0)
        for o1, inner1 in inner1s:
            terms = {}
            for t in TENSORS:
                vis1, vis2 = _tile_visits(t, f0, f1, inner0, inner1)
                for kept in (True, False):
                    if (kept and t in settings.buffer.bypass) or (
                        not kept and t in settings.buffer.keep
                    ):
                        continue
                    terms[(t, kept)] = _terms(t, kept, vis1, vis2, split, prices)
            for keep in keeps:
                count += n
                used = sum(tile1[t] for t in keep) if keep else np.zeros(n)
                valid = used <= capacity
                if not valid.any():
                    continue
                traffic = sum(terms[(t, t in keep)][0] for t in TENSORS)
                latency = np.maximum(compute_s, traffic * per_value_s)
                latency = np.where(valid, latency, np.inf)
                low = latency.min()
                if best is not None and low > best[0][0]:
                    continue
                energy = sum(terms[(t, t in keep)][1] for t in TENSORS)
                second, third = (traffic, energy) if secondary == "traffic" else (energy, traffic)
                second = np.where(latency == low, second, np.inf)
                least = second.min()
                third = np.where(second == least, third, np.inf)
                j = int(np.argmin(third))
                key = (float(low), float(least), float(third[j]))
                if best is None or key < best[0]:
                    best = (key, j, o0, o1, keep)
    return best, count


def _terms(t, kept, vis1, vis2, split, prices):
    """DRAM traffic (values) and access energy (pJ) of tensor `t` per copy, for every
    candidate of a spatial choice (`split`): the rules of `accesses.analyze` for DRAM ->
    buffer -> spatial -> registers. `vis1`, `vis2`: visits of its buffer and register tiles
    (loops above them)."""
    f0, f1, f2, s, ext = split.f0, split.f1, split.f2, split.s, split.ext
    inst2, computes = split.inst2, split.computes
    rel = INDEXED[t]
    u = MISSING[t]
    size = float(ext[rel[0]] * ext[rel[1]])
    tile1 = f1[rel[0]] * s[rel[0]] * f2[rel[0]] * f1[rel[1]] * s[rel[1]] * f2[rel[1]]
    tile2 = f2[rel[0]] * f2[rel[1]]
    child2 = tile2 * vis2 * inst2  # register fills, all PEs
    fan = s[u]  # spatial loops that do not index t: multicast / spatial reduction
    zero = np.zeros_like(tile1)
    if t != "output":
        dram_r = tile1 * vis1 if kept else child2 / fan
        dram_w = zero
        buf_r = child2 / fan if kept else zero
        buf_w = tile1 * vis1 if kept else zero
        reg_r = computes
        reg_w = child2
    else:
        dist1 = f0[rel[0]] * f0[rel[1]]
        dist2 = dist1 * f1[rel[0]] * f1[rel[1]]
        dram_w = tile1 * vis1 if kept else child2 / fan
        dram_r = np.maximum(0.0, dram_w - size)
        if kept:
            up1 = child2 / fan
            buf_w = up1 + tile1 * (vis1 - dist1)
            buf_r = np.maximum(0.0, up1 - tile1 * dist1) + tile1 * vis1
        else:
            buf_w = buf_r = zero
        reg_w = computes + tile2 * (vis2 - dist2) * inst2
        reg_r = np.maximum(0.0, computes - tile2 * dist2 * inst2) + tile2 * vis2 * inst2
    traffic = dram_r + dram_w
    if prices is None:
        return traffic, traffic
    energy = (
        dram_r * prices.dram_read
        + dram_w * prices.dram_write
        + buf_r * prices.buffer_read
        + buf_w * prices.buffer_write
        + reg_r * prices.reg_read
        + reg_w * prices.reg_write
    )
    return traffic, energy


def with_gemm(m: GemmMapping, gemm: Gemm, arch: Architecture) -> GemmMapping:
    """The same mapping choices applied to another GEMM of the same extents (the Q, K and V
    projections): mapped once, counted under each Einsum's own names."""
    spans = zip(gemm.extents, m.gemm.extents, _spreads(m), strict=True)
    if gemm.instances != m.gemm.instances or any(e > p or p - e >= f for e, p, f in spans):
        raise ValueError("with_gemm needs a GEMM of the same shape")
    gemm = dataclasses.replace(gemm, extents=m.gemm.extents)  # padded alike
    spatial = tuple((axis, DIMS.index(d), fac) for axis, d, fac in m.spatial)
    o0 = tuple(DIMS.index(d) for d in m.dram_order)
    o1 = tuple(DIMS.index(d) for d in m.buffer_order)
    cycles = math.prod(a * b * c for a, b, c in m.factors)
    choice = _Choice(m.factors, spatial, o0, o1, m.keep, cycles)
    return _finish(gemm, arch.array(m.array), arch, choice, m.candidates, m.objective)


def _spreads(m: GemmMapping) -> tuple[int, int, int]:
    """The spatial factor of each dim (rows, cols, reduction) of a chosen mapping."""
    return tuple(  # type: ignore[return-value]
        math.prod(fac for _axis, d, fac in m.spatial if d == name) for name in DIMS
    )


@dataclass(frozen=True)
class _Choice:
    """A chosen mapping in the search's terms: (DRAM, buffer, register) factors per dim,
    the spatial ((axis, dim, factor), ...), the DRAM and buffer loop orders (dim indices,
    outermost first), the tensors the buffer keeps and the compute cycles per copy."""

    factors: tuple[tuple[int, int, int], ...]
    spatial: tuple[tuple[str, int, int], ...]
    o0: tuple[int, ...]
    o1: tuple[int, ...]
    keep: tuple[str, ...]
    cycles: int


def _finish(gemm, arr, arch, choice: _Choice, evaluated, key) -> GemmMapping:
    """Build the chosen mapping as a loop nest and count it with `accesses.analyze`."""
    factors, spatial, o0, o1 = choice.factors, choice.spatial, choice.o0, choice.o1
    keep, cycles = choice.keep, choice.cycles
    ranks = gemm.ranks
    inst_dims = tuple(d for d, _ in gemm.instances)
    tensors = dict(zip(TENSORS, gemm.tensors, strict=True))
    names: dict[str, str] = {}
    for role in TENSORS:
        name = tensors[role]
        names[role] = name if name not in names.values() else f"{name}_{role}"
    dataspaces = tuple(
        DataSpace(names[t], inst_dims + tuple(ranks[d] for d in INDEXED[t]), t == "output")
        for t in TENSORS
    )
    problem = Problem(
        gemm.einsum,
        gemm.instances + tuple(zip(ranks, gemm.extents, strict=True)),
        dataspaces,
    )
    every = frozenset(names.values())
    levels = (
        LevelMapping(
            "DRAM",
            tuple(Loop(d, n) for d, n in gemm.instances)
            + tuple(Loop(ranks[d], factors[d][0]) for d in o0),
            (),
            every,
        ),
        LevelMapping(
            "buffer",
            tuple(Loop(ranks[d], factors[d][1]) for d in o1),
            tuple(Loop(ranks[d], fac, axis) for axis, d, fac in spatial if fac > 1),
            frozenset(names[t] for t in keep),
        ),
        LevelMapping(
            "registers", tuple(Loop(ranks[d], factors[d][2]) for d in range(3)), (), every
        ),
    )
    report = analyze(problem, levels, drain_reads=True)
    traffic_values = sum(
        c.reads + c.fills + c.updates for lv, _ds, c in report.counts if lv == "DRAM"
    )
    traffic = traffic_values * arch.value_bytes
    total_cycles = cycles * gemm.copies * arr.op("mac").cycles
    compute_s = total_cycles / arch.frequency_hz
    memory_s = traffic / arch.dram.bandwidth_bytes_per_s
    latency = max(compute_s, memory_s)
    return GemmMapping(
        gemm,
        arr.name,
        factors,
        tuple((axis, DIMS[d], fac) for axis, d, fac in spatial),
        tuple(DIMS[d] for d in o0),
        tuple(DIMS[d] for d in o1),
        tuple(keep),
        problem,
        levels,
        report,
        total_cycles,
        compute_s,
        memory_s,
        latency,
        traffic,
        gemm.macs / (arr.pes * latency * arch.frequency_hz) if latency > 0 else 0.0,
        evaluated,
        key,
    )
