"""The `segments` template: a cascade's FLAT-shaped span fused, the rest kernel by kernel.

A layer written whole (a norm, the Q/K/V projections, a 3-pass softmax between its score and
value contractions, the output projection, a residual) is neither one fusable block nor
best run kernel by kernel: its attention's scores make a fibre per query that the softmax
walks three times, which a block of rows keeps on chip (FLAT's fusion), while the
projections around it are GEMMs of their own. This template finds the span (graph, not
names): a contraction whose result carries a rank that an Einsum after it reduces without
being a contraction (the row maximum over the keys), up to the contraction that reduces
that rank (A V), and every Einsum between the two; then the next such span among the
Einsums left (a decoder layer's self- and cross-attention). Each span is bound by FLAT's
rule (:func:`simulator.strategies.flat.flat_mapping`, its knobs passed on) as one phase;
the other Einsums keep the unfused strategy's kernels (:func:`unfused_mapping`), and what a
span reads from them or hands to them goes through DRAM. Where one span is the whole
cascade (attention alone) FLAT's own template is the same mapping: not offered again.
With `layer`, each span is widened by the Einsums around it that walk its rows (a layer's
query norm and projection, its output projection and residual:
:mod:`simulator.strategies.layer`), and with `ahead: blocks` what the spans need first (the
keys' side) is made in blocks of its own rows by the fused strategy's blocks rule.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from simulator.cascade.ir import Cascade, rank_of
from simulator.cascade.recompute import recomputed
from simulator.spec.arch import Architecture
from simulator.strategies.context import BindContext, mapping_head
from simulator.strategies.flat import _contraction, flat_mapping
from simulator.strategies.fused import fused_mapping
from simulator.strategies.fusemax import arrays_of
from simulator.strategies.layer import ahead_of, layer_spans, remade_ahead
from simulator.strategies.roles import cascade_roles, reduced_ranks
from simulator.strategies.together import any_independent, run_together
from simulator.strategies.unfused import unfused_mapping
from simulator.support.errors import SpecError

AHEAD = ("kernels", "blocks")


def fusable_span(cascade: Cascade, compute: tuple[str, ...]) -> tuple[str, ...] | None:
    """The Einsums FLAT's shape fuses, in cascade order (None: no such span). The first
    non-contraction reducing a rank that an earlier contraction's result carries opens it
    at that contraction; the first later contraction reducing the rank closes it, with what
    else reads the fibre beside it (:func:`_completed`)."""
    order = {n: i for i, n in enumerate(compute)}
    producer = {cascade.einsum(n).output.tensor: n for n in compute}

    def before(name: str) -> set[str]:  # every compute Einsum `name` depends on
        seen: set[str] = set()
        todo = [a.tensor for a in cascade.einsum(name).reads()]
        while todo:
            made = producer.get(todo.pop())
            if made is not None and made not in seen:
                seen.add(made)
                todo += [a.tensor for a in cascade.einsum(made).reads()]
        return seen

    for name in compute:
        if _contraction(cascade, name):
            continue
        for rank in reduced_ranks(cascade.einsum(name)):
            opening = [
                n
                for n in before(name)
                if _contraction(cascade, n)
                and rank in {rank_of(v) for v in cascade.einsum(n).output.vars()}
            ]
            closing = [
                n
                for n in compute
                if order[n] > order[name]
                and _contraction(cascade, n)
                and rank in {rank_of(v) for v in cascade.einsum(n).reduced}
                and name in before(n)
            ]
            if not opening or not closing:
                continue
            # the scores: the contractions whose result carries the rank and every row the
            # reduction keeps (MLA's latent scores and its RoPE scores, both `[m, h, p]`;
            # not the keys' up-projection `[e, h, m]`), else the nearest
            rows = {rank_of(v) for v in cascade.einsum(name).output.vars()}
            scores = [
                n for n in opening if rows <= {rank_of(v) for v in cascade.einsum(n).output.vars()}
            ] or [max(opening, key=order.__getitem__)]
            last = min(closing, key=order.__getitem__)
            upto = before(last) | {last}
            span = [
                n
                for n in compute
                if n in upto and (n in scores or any(f in before(n) for f in scores))
            ]
            return tuple(_completed(cascade, compute, span, closing, rank))
    return None


def _completed(
    cascade: Cascade,
    compute: tuple[str, ...],
    span: list[str],
    closing: list[str],
    rank: str,
) -> list[str]:
    """The span with what reads its fibre beside its first closing contraction: the other
    closing contractions reading what it makes (linear attention's numerator beside its
    denominator, both over the features), the other reductions of the rank reading only
    what it makes or the cascade's inputs (the features' sum beside their product with V),
    then the map Einsums after it reading only that (the division of the numerator by
    the denominator), and the Einsums before it that only it reads, made from its own
    inputs (a query's norm) -- each would otherwise cross DRAM as a kernel of its own."""
    order = {n: i for i, n in enumerate(compute)}
    inside = set(span)

    def made() -> set[str]:
        return {cascade.einsum(n).output.tensor for n in inside}

    def reads(n: str) -> set[str]:
        return {a.tensor for a in cascade.einsum(n).reads()}

    inside |= {n for n in closing if reads(n) & made()}
    sources = made() | set(cascade.inputs)
    inside |= {
        n
        for n in compute
        if n not in inside and rank in reduced_ranks(cascade.einsum(n)) and reads(n) <= sources
    }
    last = max(order[n] for n in inside)
    for n in compute:
        if order[n] > last and not reduced_ranks(cascade.einsum(n)) and reads(n) <= made():
            inside.add(n)
    # and what only it reads, made from the inputs it reads itself (a query's norm from the
    # queries: computed in the block rather than a kernel reading the queries again)
    inputs = {t for n in inside for t in reads(n)} & set(cascade.inputs)
    readers = {
        t: {n for n in compute if t in reads(n)}
        for t in {cascade.einsum(n).output.tensor for n in compute}
    }
    # the largest such set: every one read only inside the span or by another of the set,
    # reading only the span's inputs and what the span or the set makes
    extra = {
        n
        for n in compute
        if n not in inside
        and order[n] < last
        and cascade.einsum(n).output.tensor not in cascade.outputs
    }
    while True:
        both = inside | extra
        makes = {cascade.einsum(n).output.tensor for n in both}
        keep = {
            n
            for n in extra
            if readers[cascade.einsum(n).output.tensor] <= both and reads(n) <= inputs | makes
        }
        if keep == extra:
            break
        extra = keep
    inside |= extra
    return [n for n in compute if n in inside]


def fusable_spans(cascade: Cascade, compute: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every span FLAT's shape fuses, in cascade order, disjoint (a decoder layer's self-
    and cross-attention): the first, then the first among the Einsums left, and so on."""
    return list(_fusable_spans(cascade, tuple(compute)))


@functools.lru_cache(maxsize=256)
def _fusable_spans(cascade: Cascade, compute: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """:func:`fusable_spans`, kept per cascade (every `segments` template of a search asks)."""
    spans: list[tuple[str, ...]] = []
    left = compute
    while (span := fusable_span(cascade, left)) is not None:
        spans.append(span)
        left = tuple(n for n in left if n not in span)
    return tuple(spans)


def sub_cascade(cascade: Cascade, names: tuple[str, ...]) -> Cascade:
    """The cascade of `names` alone: what they read from the others are its inputs, what
    the others (or nobody) read of theirs its outputs."""
    keep = set(names)
    einsums = tuple(e for e in cascade.einsums if e.name in keep)
    used = {a.tensor for e in einsums for a in e.reads()} | {e.output.tensor for e in einsums}
    return dataclasses.replace(
        cascade,
        name=f"{cascade.name}[{names[0]}..{names[-1]}]",
        tensors=tuple(t for t in cascade.tensors if t.name in used),
        einsums=einsums,
        reference=None,
    )


def segments_mapping(
    ctx: BindContext,
    *,
    reuse: bool = True,
    kernels: str = "library",
    together: bool = False,
    layer: bool = False,
    ahead: str = "kernels",
    recompute: bool = False,
    **flat: Any,
) -> dict[str, Any]:
    """The mapping data (module docstring); `flat` are FLAT's rule's knobs for the spans,
    `kernels` the unfused kernels' (:data:`simulator.strategies.unfused.KERNELS`);
    `together`: spans that need nothing of each other and walk the same blocks of rows run
    in one phase (:func:`simulator.strategies.together.run_together`); `layer`: each span
    widened by the Einsums around it that walk its rows (:func:`simulator.strategies.layer.
    widened`: a layer's query norm and projection, its output projection and residual);
    `ahead`: what the spans need before them runs as `kernels`, or in `blocks` of its own
    rows (:func:`simulator.strategies.layer.ahead_of`: a layer's keys and values, each
    token read once; the fused strategy's blocks rule, the reduction's rows whole);
    `recompute` (with `ahead: blocks`): what the block would make but for a statistic's
    kernel reading it too is made again in the block (:func:`simulator.strategies.layer.
    remade_ahead`: a group norm's centred features), the mapping's `recompute:`."""
    cascade = ctx.cascade
    spans = fusable_spans(cascade, ctx.roles.compute)
    if not spans:
        raise SpecError(f"'{cascade.name}' has no span FLAT's shape fuses")
    if layer:
        spans = layer_spans(cascade, ctx.roles.compute, spans)
    if ahead not in AHEAD:
        raise ValueError(f"ahead must be one of {AHEAD}, got {ahead!r}")
    if recompute:
        return _remade(ctx, spans, ahead, reuse, kernels, together, layer, flat)
    first_block: tuple[str, ...] | None = None
    if ahead == "blocks":
        first_block = ahead_of(cascade, ctx.roles.compute, spans, ctx.extents) or None
        if first_block is None:
            raise SpecError(f"'{cascade.name}': no block of rows makes what its spans need first")
    if len(spans) == 1 and len(spans[0]) == len(ctx.roles.compute):
        raise SpecError(f"'{cascade.name}' is one span: FLAT's template binds it whole")
    if together and not any_independent(cascade, spans):
        raise SpecError(f"'{cascade.name}': no two of its spans are independent")
    if first_block:  # the other Einsums' kernels formed without the block's (a kernel of a
        # group norm's statistics would otherwise make the block's first map too)
        others = sub_cascade(cascade, tuple(n for n in ctx.roles.compute if n not in first_block))
        apart = dataclasses.replace(
            ctx, cascade=others, roles=cascade_roles(others), extents=dict(ctx.extents)
        )
        rest = unfused_mapping(apart, reuse=reuse, kernels=kernels)["mapping"]
    else:
        rest = unfused_mapping(ctx, reuse=reuse, kernels=kernels)["mapping"]
    kernels = [set(phase["schedule"]) for phase in rest["phases"]]
    fused: list[dict[str, Any]] = []
    kept: list[tuple[str, ...]] = []
    internal: set[str] = set()  # what a span makes and only it reads
    for span in [first_block, *spans] if first_block else spans:
        if any(k & set(span) and not k <= set(span) for k in kernels):
            continue  # a library kernel runs part of it with other Einsums: kernels there
        part = sub_cascade(cascade, span)
        within = dataclasses.replace(
            ctx, cascade=part, roles=cascade_roles(part), extents=dict(ctx.extents)
        )
        try:
            if span is first_block:
                body = fused_mapping(within, rule="blocks", reduction="whole")["mapping"]
                for i, phase in enumerate(body["phases"]):  # named apart from the spans'
                    phase["name"] = "ahead" if len(body["phases"]) == 1 else f"ahead{i + 1}"
            else:
                body = flat_mapping(within, reuse=reuse, **flat)["mapping"]
        except SpecError:
            continue  # not FLAT's shape after all: kernel by kernel
        for phase in body["phases"]:  # each span's spread its own (another span's rows
            for array, names in body["binding"].items():  # or fibre may differ)
                for n in [n for n in names if n in _scheduled(phase["schedule"])]:
                    override = phase.setdefault("einsums", {}).setdefault(n, {})
                    override.setdefault("spatial", list(body["spatial"].get(array, [])))
        reconciled = _in_earlier_parts(body, fused, ctx.arch)
        if reconciled is None:
            continue  # it splits a rank as an earlier span cannot: kernel by kernel
        body, fused = reconciled
        fused.append(body)
        kept.append(span)
        internal |= {cascade.einsum(n).output.tensor for n in span} - set(part.outputs)
    if not kept:
        raise SpecError(f"'{cascade.name}': no span FLAT's rule binds apart from the kernels")
    if first_block and kept[0] is not first_block:
        raise SpecError(f"'{cascade.name}': the blocks rule cannot bind what its spans need first")
    if first_block and len(kept) == 1:
        raise SpecError(f"'{cascade.name}': no span FLAT's rule binds beside the keys' blocks")
    spans = kept
    span_of = {n: i for i, span in enumerate(spans) for n in span}
    one = arrays_of(ctx.arch)[1]
    units: list[tuple[set[str], list[dict[str, Any]]]] = []  # (Einsums, phases) in order
    placed: set[int] = set()
    if first_block:  # no kernel of `rest` runs it: placed first
        units.append((set(first_block), fused[0]["phases"]))
        placed.add(0)
    for phase in rest["phases"]:
        names = set(phase["schedule"])
        owners = {span_of.get(n) for n in names}
        if len(owners) == 1 and None not in owners:
            (i,) = owners
            if i not in placed:
                units.append((set(spans[i]), fused[i]["phases"]))
                placed.add(i)
            continue
        if "mapper" not in phase and "einsums" not in phase:
            # the kernel's own spread over the 1D PEs (the mapping-level one is a span's)
            spread = rest.get("spatial", {}).get(one.name)
            if spread:
                bound_1d = [n for n in phase["schedule"] if n in rest["binding"].get(one.name, [])]
                phase = {**phase, "einsums": {n: {"spatial": list(spread)} for n in bound_1d}}
        units.append((names, [phase]))
    ordered = _in_dependency_order(cascade, units)
    if together:
        ordered = run_together(cascade, ordered, [set(span) for span in spans], fused)
    phases = [p for _names, unit in ordered for p in unit]
    binding: dict[str, list[str]] = {}
    for n in ctx.roles.compute:
        source = fused[span_of[n]] if n in span_of else rest
        array = next(a for a, ns in source["binding"].items() if n in ns)
        binding.setdefault(array, []).append(n)
    tensors = {t: v for t, v in rest.get("tensors", {}).items() if t not in internal}
    factors, partitions, spatial = (
        dict(rest.get("factors", {})),
        dict(rest.get("partitions", {})),
        dict(rest.get("spatial", {})),
    )
    # a tensor two spans both place (one span's result, the next one's input: Performer's
    # K'^T V, kept for the keys' block of features, held whole for the queries' blocks of
    # rows) is placed by each span in its own phases
    placed_by = [set(body.get("tensors", {})) for body in fused]
    shared = {t for i, a in enumerate(placed_by) for b in placed_by[i + 1 :] for t in a & b}
    for body in fused:
        own = {t: v for t, v in body.get("tensors", {}).items() if t in shared}
        if own:
            for phase in body["phases"]:
                phase["tensors"] = {**own, **phase.get("tensors", {})}
    for body in fused:
        tensors.update(body.get("tensors", {}))
        factors.update(body.get("factors", {}))
        partitions.update(body.get("partitions", {}))
        spatial.update(body.get("spatial", {}))
    phases = [_walking_parts(phase, partitions) for phase in phases]
    first, last = spans[0], spans[-1]
    out = mapping_head(
        ctx,
        "auto: segments",
        f"{cascade.name} bound in segments: {first[0]}..{last[-1]} in {len(spans)} span(s) "
        "fused by FLAT's rule, the rest kernel by kernel",
        factors,
        partitions,
        spatial,
        binding,
    )
    chaining = next((b["chaining"] for b in fused if "chaining" in b), None)
    if chaining is not None:
        out["chaining"] = chaining
    out["tensors"] = tensors
    out["phases"] = phases
    return {"mapping": out}


def _remade(
    ctx: BindContext,
    spans: list[tuple[str, ...]],
    ahead: str,
    reuse: bool,
    kernels: str,
    together: bool,
    layer: bool,
    flat: dict[str, Any],
) -> dict[str, Any]:
    """The mapping of :func:`segments_mapping` with `recompute`: the keys' block's
    element-wise Einsums that a kernel also reads made again in the block."""
    cascade = ctx.cascade
    if ahead != "blocks":
        raise ValueError("recompute needs ahead: blocks")
    copies = remade_ahead(cascade, ctx.roles.compute, spans, ctx.extents)
    if not copies:
        raise SpecError(f"'{cascade.name}': its keys' blocks need nothing made again")
    remade = recomputed(cascade, copies)
    again = {e.name for e in remade.einsums} - {e.name for e in cascade.einsums}
    within = dataclasses.replace(ctx, cascade=remade, roles=cascade_roles(remade))
    data = segments_mapping(
        within, reuse=reuse, kernels=kernels, together=together, layer=layer, ahead=ahead, **flat
    )
    body = data["mapping"]
    aheads = [p for p in body["phases"] if p["name"].startswith("ahead")]
    blocks = {n for p in aheads for n in _scheduled(p["schedule"])}
    if not again <= blocks:
        raise SpecError(f"'{cascade.name}': what its keys' blocks would make again runs apart")
    body["recompute"] = {n: list(readers) for n, readers in copies}
    return data


def _scheduled(schedule: Any) -> set[str]:
    """The Einsums a phase's schedule names (`[A, {par: [[B], [C]]}]` -> A, B, C)."""
    if isinstance(schedule, str):
        return {schedule}
    if isinstance(schedule, dict):
        return {n for v in schedule.values() for n in _scheduled(v)}
    return {n for item in schedule for n in _scheduled(item)}


def _in_earlier_parts(
    body: dict[str, Any], earlier: list[dict[str, Any]], arch: Architecture
) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The span's mapping and the earlier spans' in one split of each rank, where two split
    a rank differently: the rows of one (`L -> L2 x L1 x L0`, Luna's packed tokens in the
    pack's softmax; Performer's features in its keys' span) and the fibre of another
    (`L -> L1 x L0`, the unpack's; the features in Performer's queries' span). The fibre's
    span walks the rows' outer parts where it walked its own outer part, when both spread
    the same number of PEs (a square array). None: the splits cannot be reconciled."""
    square = all(a.mesh_x == a.mesh_y for a in arch.arrays if a.mesh_y > 1)
    meshes = {f"{a.name}.meshX": a.mesh_x for a in arch.arrays} | {
        f"{a.name}.meshY": a.mesh_y for a in arch.arrays
    }

    def side(factor: Any) -> Any:
        # a tile spanning an array's side (`PE1D.meshX`, `PE2D.meshY / 2`) as the PEs it
        # spans: the same tile whichever array's side names it
        text, _slash, by = str(factor).partition(" / ")
        if text in meshes:
            return meshes[text] // (int(by) if by else 1)
        if isinstance(factor, int):
            return factor
        return str(factor).replace("meshY", "meshX") if square else factor

    def fits(two: dict[str, Any], three: dict[str, Any], rank: str) -> bool:
        a, b = two["partitions"][rank], three["partitions"][rank]
        return (
            len(a) == 2
            and len(b) == 3
            and a[-1] == b[-1]
            and side(two["factors"].get(a[-1])) == side(three["factors"].get(b[-1]))
            and a[0] not in two["factors"]
        )

    def searched(blocks: dict[str, Any], fixed: dict[str, Any], rank: str) -> bool:
        # two splits in three: one's middle part searched (the keys' blocks), the other's a
        # fixed width (FLAT's fibre chunks walked side by side), the same innermost tile
        a, b = blocks["partitions"][rank], fixed["partitions"][rank]
        return (
            len(a) == len(b) == 3
            and blocks["factors"].get(a[1]) == "search"
            and isinstance(fixed["factors"].get(b[1]), int)
            and side(blocks["factors"].get(a[2])) == side(fixed["factors"].get(b[2]))
            and a[0] not in blocks["factors"]
        )

    earlier = list(earlier)
    for rank, comps in body.get("partitions", {}).items():
        for i, other in enumerate(earlier):
            before = other.get("partitions", {}).get(rank)
            if before is None or before == comps:
                continue
            if fits(body, other, rank):
                body = _walking(body, rank, before)
            elif fits(other, body, rank):
                earlier[i] = _walking(other, rank, comps)
            elif searched(other, body, rank):
                earlier[i] = _renamed(other, rank, comps)
            elif searched(body, other, rank):
                body = _renamed(body, rank, before)
            else:
                return None
    return body, earlier


def _renamed(body: dict[str, Any], rank: str, three: list[str]) -> dict[str, Any]:
    """A mapping whose split of `rank` in three, its middle part searched, takes another's
    three parts' names (its middle part then the other's fixed width: no longer searched)."""
    names = dict(zip(body["partitions"][rank], three, strict=True))
    out = _with_parts(body, {a: [b] for a, b in names.items()}, names)
    factors = {names.get(k, k): v for k, v in body["factors"].items()}
    del factors[three[1]]  # the other's width
    out["factors"] = factors
    out["partitions"] = {**body["partitions"], rank: list(three)}
    return out


def _walking(body: dict[str, Any], rank: str, three: list[str]) -> dict[str, Any]:
    """A span's mapping with its split of `rank` in two (`X1 x X0`) replaced by `three`
    (`X2 x X1 x X0`): its outer part walked as the outer two."""
    outer = body["partitions"][rank][0]
    out = _with_parts(body, {outer: three[:-1]}, {outer: three[-2]})
    out["partitions"] = {**out["partitions"], rank: list(three)}
    return out


def _with_parts(
    body: dict[str, Any], lists: dict[str, list[str]], keeps: dict[str, str]
) -> dict[str, Any]:
    """A mapping whose loops, inner loops and spreads name each component of `lists` as the
    components it maps to, and whose keep points name each of `keeps` as it maps to."""

    def rewrite(node: Any, key: str = "") -> Any:
        if isinstance(node, dict):
            return {k: rewrite(v, k) for k, v in node.items()}
        if isinstance(node, list) and key in ("loops", "inner", "spatial"):
            return [c for n in node for c in lists.get(n, [n])]
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        if key == "keep":
            return keeps.get(node, node)
        return node

    return rewrite(body)


def _in_dependency_order(
    cascade: Cascade, units: list[tuple[set[str], list[dict[str, Any]]]]
) -> list[tuple[set[str], list[dict[str, Any]]]]:
    """The spans and kernels in an order their data allows, the given one where it does: a
    span reading what a later kernel or span makes runs after it (a mixture of heads' router
    span ends in the heads' gated sum, which reads the attention span's output). Spans
    needing each other's results cannot be phases: a one-line error."""
    made = [{cascade.einsum(n).output.tensor for n in names} for names, _ in units]
    reads = [{a.tensor for n in names for a in cascade.einsum(n).reads()} for names, _ in units]
    needs = [
        {k for k in range(len(units)) if k != j and reads[j] & made[k]} for j in range(len(units))
    ]
    order: list[int] = []
    while len(order) < len(units):
        ready = [j for j in range(len(units)) if j not in order and needs[j] <= set(order)]
        if not ready:
            raise SpecError(f"'{cascade.name}': its fused spans need each other's results")
        order.append(ready[0])
    return [units[j] for j in order]


def _walking_parts(phase: dict[str, Any], partitions: dict[str, list[str]]) -> dict[str, Any]:
    """A phase whose loops or spread name a rank another span splits (a mixture of heads'
    attention walks its heads `H` outermost and spreads its values' `F`; its router span
    splits both, `H -> H1 x H0`) names the parts, outer first: the components the Einsums
    iterate (a name that is none is no loop at all)."""

    def parts(rank: str) -> list[str]:
        comps = partitions.get(rank)
        return [c for x in comps for c in parts(x)] if comps else [rank]

    def walk(loops: list[str]) -> list[str]:
        return [c for r in loops for c in parts(r)]

    lists = ("loops", "inner", "spatial")
    out = {k: walk(v) if k in lists else v for k, v in phase.items()}
    if "einsums" in out:
        out["einsums"] = {
            n: {k: walk(v) if k in lists else v for k, v in over.items()}
            for n, over in out["einsums"].items()
        }
    return out
