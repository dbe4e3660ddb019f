"""The mapspace: the mappings the search may evaluate for one (cascade, architecture,
workload), under a strategy's constraints.

A point of the space is an ordinary mapping -- the mapping language is the mapper's
representation, so every hand-written file in `mappings/` is a point of it and the mapping
found is a file a user can read, edit and run again. The space is spanned by

* **templates** -- the structural choices (which Einsums share a phase, which ranks go
  across each array's PEs and the cores, the array each Einsum runs on, where each tensor
  lives and which loop it is kept below, the schedule), each written by a rule of
  :mod:`simulator.strategies` from the cascade's graph and the architecture, with its knobs
  (reuse across a group's heads; pipelined or one tile at a time; whole fibres on chip or
  through DRAM; output- or weight-stationary contractions; the lanes of a 1D array
  spreading rows or chunks ...);
* **tile factors** -- every `search` factor a template leaves takes each value that divides
  what its rank's other components leave (:func:`tile_choices`), larger tiles first.

A strategy is a constraint on the templates: `fusemax`, `flat` and `unfused` admit what
those designs can do, `fused` admits every template (the unconstrained search).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from simulator.cascade.ir import Cascade
from simulator.plan.extents import fixed_extents, search_candidates
from simulator.plan.nest import resolve_extents
from simulator.spec.arch import Architecture
from simulator.spec.mapping import Mapping
from simulator.spec.workload import Workload
from simulator.strategies.auto import template
from simulator.strategies.context import BindContext
from simulator.strategies.roles import scales
from simulator.support.errors import Loc, SpecError

STRATEGIES = ("fusemax", "flat", "unfused", "fused")
TURN = "turn"  # an offer's search turn (not a template knob): see Template.turn
RARELY = 8  # a rarely tried template takes a turn every 8 x scale rounds


@dataclass(frozen=True)
class Template:
    """One structural choice: the rule that wrote it, its knobs, the mapping data (tile
    factors may still be `search`)."""

    rule: str
    knobs: tuple[tuple[str, Any], ...]
    data: dict[str, Any]
    # every how many rounds of the search it takes a turn (0: as often as its `scale` says)
    turn: int = 0

    @property
    def label(self) -> str:
        if not self.knobs:
            return self.rule
        return f"{self.rule} ({', '.join(f'{k}={_text(v)}' for k, v in self.knobs)})"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _offers(
    strategy: str, pipelined: bool, reuse: bool, arch: Architecture
) -> list[tuple[str, dict[str, Any]]]:
    """(rule, knobs) of every template a strategy admits, the strategy's own rule first.
    `pipelined=False` (one tile at a time) and `reuse=False` (no K/V reuse across a group's
    heads) are constraints: they narrow the knobs, never widen them."""
    reuses = [True, False] if reuse else [False]
    two = next((a for a in arch.arrays if a.mesh_y > 1), None)
    # blocks down to 64 PEs a side (a quarter of the paper's 256): a chip twice as wide can
    # run every block a chip half its width runs (more PEs never slower)
    side = math.gcd(two.mesh_x, two.mesh_y) if two is not None else 1
    parts = scales(side, max(4, side // 64)) if two is not None else [1]
    fusemax = [
        ("fusemax", {"pipelined": pipelined, "reuse": r, "lanes": lanes, "scale": s, "handoff": h})
        for s in parts
        for r in reuses
        for h in ("buffer", "registers")
        for lanes in ("rows", "fill")
    ]
    flat = [
        ("flat", {"reuse": r, "scale": s, "chunk_scale": c, "fibres": f})
        for s in parts
        for c in parts[:2]
        for r in reuses
        for f in ("fit", "dram")
    ]
    unfused = [("unfused", {"reuse": reuse})]
    if strategy == "fusemax":
        return fusemax
    if strategy == "flat":  # a layer: FLAT's attention fused, the projections as GEMMs
        return flat + [("segments", dict(knobs)) for _rule, knobs in flat]
    if strategy == "unfused":
        return unfused
    # beyond FLAT's designs: the fibre Einsums where the block finishes soonest, and the last
    # contraction's reduction spread over the PEs
    soonest = [
        (rule, {**knobs, "soonest": True, "spread": w})
        for rule, knobs in flat
        for w in ("columns", "fibre")
    ]
    rule = [("fused", {"pipelined": pipelined, "reuse": reuse})]
    # blocks over part of an array, down to 256 PEs a side ...
    wide = [s for s in parts if s == 1 or two is not None and two.mesh_x // s >= 256]
    blocks = [
        ("fused", {"rule": "blocks", "reduction": r, "scale": s})
        for s in wide
        for r in ("chunks", "whole")
    ]
    # ... and narrower, down to 64 (a chip twice as wide does what the chip half its width
    # does), offered last and taking a turn rarely: they win where a wide block spills
    narrow = [
        ("fused", {"rule": "blocks", "reduction": r, "scale": s, TURN: RARELY * s})
        for s in parts
        if s not in wide
        for r in ("chunks", "whole")
    ]
    # ... and with the fibre's chunk over part of the 1D array, rarely too: a chip twice as
    # wide runs a block of the chip half its width at twice the scale and chunk scale
    # (at most the block's own scale: what the half-width chip's blocks need)
    chunked = [
        ("fused", {"rule": "blocks", "reduction": r, "scale": s, "chunk_scale": c,
                   TURN: RARELY * s * c})
        for s in parts
        for c in parts[1:]
        if c <= s
        for r in ("chunks", "whole")
    ]  # fmt: skip
    chain = [("chain", {"reuse": r, "scale": s}) for s in parts for r in reuses]
    # ... and with every Einsum but the contractions on the array that runs it fastest (its
    # arrays take turns where they hand each other no tile through the buffer)
    chain += [("chain", {**knobs, "arrays": "fastest"}) for _rule, knobs in chain]
    # ... and on a chip of many cores sharing a cache, with the work that walks no row
    # (linear attention's key-value summary) before the blocks, split over the cores
    if arch.cores > 1 and arch.buffer.cache:
        chain += [("chain", {**knobs, "keys": "split"}) for _rule, knobs in chain]
    # a layer's FLAT-shaped span (its attention) fused, the rest kernel by kernel
    segments = [
        ("segments", {**knobs, "soonest": True, "spread": w, "kernels": "free"})
        for rule_, knobs in flat
        if knobs["fibres"] == "fit"
        for w in ("columns", "fibre")
    ]
    # the keys and values an instance reads held whole on chip (fetched once; what does not
    # fit spilled), not streamed per block of rows: a window's band crosses DRAM once
    fit = [("flat", knobs) for _r, knobs in soonest if knobs["fibres"] == "fit"]
    held = [(r, {**knobs, "hold": "whole"}) for r, knobs in (*fit, *segments)]
    # kernels mapped freely (GEMMs unconstrained, element-wise Einsums on the 2D array where
    # sooner), not as the paper's library calls; the spans' kernels always so
    free = [(r, {**knobs, "kernels": "free"}) for r, knobs in unfused]
    # spans that need nothing of each other in one phase over the blocks of rows (a layer's
    # attention to its context and to retrieved memories): the memories stream while the
    # context's scores compute
    together = [
        (r, {**knobs, "together": True}) for r, knobs in (*segments, *held) if r == "segments"
    ]
    # each span widened by the Einsums around it walking its rows (a layer's query norm and
    # projection, its output projection and residual in the attention's blocks of rows), and
    # what they need first (the keys' side) in blocks of its own rows; the keys and values
    # held whole (every layer found so far held them: streamed, they never won)
    layer = [
        (r, {**knobs, "layer": True, "ahead": a})
        for r, knobs in held
        if r == "segments"
        for a in ("kernels", "blocks")
    ]
    # ... and with what the keys' blocks would make but for a statistic's kernel reading it
    # too made again in the blocks (a group norm's centred features: one subtraction a
    # value, where kept they cross DRAM between the kernel and the blocks)
    layer += [(r, {**knobs, "recompute": True}) for r, knobs in layer if knobs["ahead"] == "blocks"]
    return [*rule, *fusemax, *chain, *blocks, *soonest, *flat, *unfused, *segments, *held, *free,
            *together, *layer, *narrow, *chunked]  # fmt: skip


def templates(ctx: BindContext, strategy: str, pipelined: bool, reuse: bool) -> list[Template]:
    """The templates a strategy admits at the point (duplicates dropped). None: the
    strategy's own rule's reason stands (one line)."""
    if strategy not in STRATEGIES:
        raise SpecError(f"unknown strategy '{strategy}' (choose from {', '.join(STRATEGIES)})")
    out: list[Template] = []
    seen: set[str] = set()
    first_error: SpecError | None = None
    for rule, offered in _offers(strategy, pipelined, reuse, ctx.arch):
        knobs = {k: v for k, v in offered.items() if k != TURN}
        try:
            data = template(ctx, rule, **knobs)
        except SpecError as err:
            first_error = first_error or err
            continue
        key = _structure(data)
        if key in seen:
            continue
        seen.add(key)
        out.append(Template(rule, tuple(knobs.items()), data, offered.get(TURN, 0)))
    if not out:
        assert first_error is not None
        raise first_error
    return out


def _structure(data: dict[str, Any]) -> str:
    """A template's mapping without its words (label, description): what it computes."""
    body = {k: v for k, v in data["mapping"].items() if k not in ("label", "description")}
    return repr(body)


def needs_padding(
    cascade: Cascade, mapping: Mapping, arch: Architecture, workload: Workload
) -> list[str]:
    """The partitioned ranks whose extent the template's fixed tiles do not divide (a
    sequence of 1000 tokens in tiles of 256): rounded up to whole tiles, the last one partly
    empty, its padded work counted (`padded:`)."""
    known, search, partitions = fixed_extents(cascade, mapping, arch, workload)
    out = []
    for rank, comps in partitions.items():
        if rank not in known or rank in mapping.padded:
            continue
        fixed = [c for c in comps if c in known and c not in search]
        if len(fixed) == len(comps):
            fixed = fixed[1:]  # one component is what the others leave
        tile = math.prod(known[c] for c in fixed)
        if tile > 1 and known[rank] % tile:
            out.append(rank)
    return out


def padded(tmpl: Template, ranks: list[str]) -> Template:
    """The template with those ranks rounded up to whole tiles."""
    body = {**tmpl.data["mapping"], "padded": sorted(ranks)}
    return Template(
        tmpl.rule,
        (*tmpl.knobs, ("padded", ",".join(sorted(ranks)))),
        {"mapping": body},
        tmpl.turn,
    )


def search_factors(mapping: Mapping) -> list[str]:
    return [name for name, raw in mapping.factors if str(raw) == "search"]


def tile_choices(
    cascade: Cascade, mapping: Mapping, arch: Architecture, workload: Workload
) -> Iterator[dict[str, int]]:
    """Every assignment of the mapping's `search` factors (each a divisor of what its
    rank's other components leave), larger tiles first; one empty assignment when it has
    none."""
    names = search_factors(mapping)
    if not names:
        yield {}
        return
    known, _search, partitions = fixed_extents(cascade, mapping, arch, workload)
    known = resolve_extents(
        known, partitions, mapping.name, Loc(mapping.path), frozenset(mapping.padded)
    )
    locs = dict(mapping.factor_locs)
    choices = [
        sorted(
            search_candidates(n, known, partitions, locs.get(n), frozenset(mapping.padded)),
            reverse=True,
        )
        for n in names
    ]
    # larger tiles first: the product of the factors, then each in order
    combos = sorted(itertools.product(*choices), key=lambda c: (-math.prod(c), [-v for v in c]))
    for combo in combos:
        yield dict(zip(names, combo, strict=True))


def spread_order(n: int) -> list[int]:
    """0 .. n-1 as the first, the last, then the midpoints of the spans left, breadth
    first (7: 0, 6, 3, 1, 4, 2, 5): the order the search tries a template's tile choices
    in, so that a budget ending early has seen the largest tiles, the smallest and the
    middle (a block of rows that must be small to fit is not the last one tried)."""
    out = list(range(min(n, 1))) + ([n - 1] if n > 1 else [])
    spans = [(0, n - 1)]
    while spans:
        halves = []
        for lo, hi in spans:
            if hi - lo > 1:
                mid = (lo + hi) // 2
                out.append(mid)
                halves += [(lo, mid), (mid, hi)]
        spans = halves
    return out


def with_factors(mapping: Mapping, values: dict[str, int]) -> Mapping:
    """The mapping with those `search` factors fixed."""
    if not values:
        return mapping
    factors = tuple((n, values.get(n, raw)) for n, raw in mapping.factors)
    return dataclasses.replace(mapping, factors=factors)


def data_with_factors(data: dict[str, Any], values: dict[str, int]) -> dict[str, Any]:
    """The template's mapping data with those factors fixed (what the mapping file says)."""
    body = dict(data["mapping"])
    body["factors"] = {**body.get("factors", {}), **values}
    return {"mapping": body}
