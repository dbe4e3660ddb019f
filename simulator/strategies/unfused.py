"""The unfused strategy: every kernel a library would call its own phase, everything handed
over through DRAM (the paper's unfused baseline), for any cascade.

* **GEMM phases** -- an Einsum shaped `OUT = L * R` summed over one rank runs alone on the
  2D array, mapped by the GEMM mapper under the binder's facts (`unfused.gemm`: the FuseMax
  artifact's constraints, in workload roles -- queries over X, keys over Y; a GEMM whose
  ranks the facts give no role takes its rows over X and its columns over Y); several ranks
  in a role are one GEMM dimension (grouped-query attention: the group's `G x P` rows
  share every K/V tile), which is why `no-reuse` does not apply to a grouped cascade;
* **streamed phases** -- the other Einsums between GEMMs, split into the kernels a library
  would call (a softmax; LayerNorm's statistics; a matmul's epilogue: a new kernel where an
  Einsum walks rows the kernel so far does not), each walks its rows one at a time on the
  array whose PEs have all their operations (the 1D array first): the rank they reduce (the
  fibre, `M`) -- or, when they reduce none, their widest rank -- spreads over the PEs in
  chunks; every other rank is a temporal loop, a recurrence's step innermost so its state
  stays in the PEs. A fibre read from DRAM, or made in one pass and read in a later one,
  stays on chip for the row (spilling what does not fit); per-row values stay in registers;
  what a later phase reads goes back to DRAM;
* **chaining** -- an array whose operations each have their own functional unit chains them
  (`pipelined`: one element per cycle through subtract, exp, ...), as FLAT's softmax unit.
"""

from __future__ import annotations

from typing import Any

from simulator.cascade.gemm import ROLES, batched_gemm_shape
from simulator.cascade.ir import Access, Cascade, index_vars, rank_of
from simulator.cascade.passes import pass_index
from simulator.spec.arch import Array, missing_operations
from simulator.strategies.binder_facts import BinderFacts
from simulator.strategies.context import BindContext, mapping_head
from simulator.strategies.fusemax import arrays_of, supports
from simulator.strategies.roles import Roles, einsum_ranks, is_gemm, own_chunk, reduced_ranks, tile
from simulator.strategies.spatial import einsum_time, registers_hold
from simulator.support.errors import SpecError


def gemm_dims(cascade: Cascade, einsum: str) -> dict[str, str] | None:
    """rank -> GEMM dim (rows, cols, reduction) of `OUT[m, n] = L[k, m] * R[k, n]`, or None
    (several ranks may share a dim: G x P rows of grouped-query attention; a rank in all
    three accesses repeats the GEMM: `SLNV[f, m1, p]`, a GEMM per chunk m1)."""
    if not is_gemm(cascade.einsum(einsum)):
        return None
    found = batched_gemm_shape(cascade, einsum)
    return None if found is None else found[0].role_of()


def indexed_vars(access: Access) -> set[str]:
    """The variables an access indexes with (a filter's variables only select points)."""
    return {v for pos in access.indices for v in index_vars(pos.expr)}


def chained(array: Array) -> bool:
    """Its operations use distinct functional units (a multiply shares the MAC's)."""
    return array.chains


def _gemm_settings(
    raw: Any, dims: dict[str, str], facts: BinderFacts, cascade: Cascade | None = None
) -> dict[str, Any]:
    """The facts' mapper settings, written in workload roles (`queries`, `keys`, `other`),
    in this GEMM's dims (rows, cols, reduction); a role the GEMM lacks is left out. A rank
    takes its partitioned parent's role (M1, M0 of M: keys). A GEMM whose rows and columns
    the facts name no queries or keys (a linear layer's) takes rows as queries and columns
    as keys (also where the keys are the reduction: linear attention's `phi(K)^T V`)."""
    parent = {c: r for r, comps in (cascade.partitions if cascade else ()) for c in comps}
    by_role = {facts.role_of(parent.get(rank, rank)): d for rank, d in dims.items()}
    sides = ("rows", "cols")
    if by_role.get("queries") not in sides and by_role.get("keys") not in sides:
        # no query or key across the array (a linear layer's GEMM; linear attention's
        # `phi(K)^T V`, whose keys are the reduction): its rows as queries, columns as keys
        by_role = {"queries": "rows", "keys": "cols"}
    for role, other in (("queries", "keys"), ("keys", "queries")):  # one named: the other is
        if by_role.get(role) is None and by_role.get(other) in ("rows", "cols"):  # the other side
            by_role[role] = "cols" if by_role[other] == "rows" else "rows"
    named = {by_role.get("queries"), by_role.get("keys")} - {None}
    rest = [d for d in ROLES if d not in named]

    def dim(role: str) -> str | None:
        if role == "other":
            return rest[0] if len(rest) == 1 else None
        return by_role.get(role)

    def convert(node: Any, key: str = "") -> Any:
        if isinstance(node, dict):
            if key == "factors":
                return {dim(str(r)): v for r, v in node.items() if dim(str(r))}
            return {str(k): convert(v, str(k)) for k, v in node.items()}
        if isinstance(node, list):
            if key in ("X", "Y", "order"):  # two roles in one dim (a GEMM's rows made of
                # both the keys and the queries): the dim once; an order lists every dim
                dims = list(dict.fromkeys(d for d in (dim(str(r)) for r in node) if d))
                if key == "order" and len(dims) < len(node):
                    dims += [d for d in ROLES if d not in dims]
                return dims
            return [convert(v) for v in node]
        return node

    settings = convert(raw)
    spatial = settings.get("spatial") if isinstance(settings, dict) else None
    if isinstance(spatial, dict) and "X" in spatial and "Y" in spatial:
        spatial["Y"] = [d for d in spatial["Y"] if d not in spatial["X"]]  # a dim on one side
    return settings


# The kernels: `library` -- the paper's unfused baseline: the GEMMs under the artifact's
# constraints (the facts' `unfused.gemm`), the other kernels on the 1D array; `free` -- each
# GEMM mapped by the GEMM mapper unconstrained, and a kernel's element-wise Einsums on the
# 2D array where they finish sooner there.
KERNELS = ("library", "free")
FREE_GEMM = {"objective": ["latency", "traffic"]}


def unfused_mapping(
    ctx: BindContext,
    *,
    reuse: bool = True,
    kernels: str = "library",
) -> dict[str, Any]:
    cascade, arch, roles, extents = ctx.cascade, ctx.arch, ctx.roles, ctx.extents
    facts = ctx.facts
    two, one = arrays_of(arch)
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
    if not reuse and "group" in ctx.shapes.values():
        raise SpecError(
            f"cannot bind '{cascade.name}' with the unfused strategy without reuse: its GEMMs "
            "run a group's query heads as rows of one GEMM, whose K/V tiles serve them all "
            "(no-reuse applies to the fusemax and flat strategies)"
        )
    passes = pass_index(cascade)
    binding: dict[str, str] = {}
    phases: list[dict[str, Any]] = []
    run: list[str] = []
    groups: list[tuple[str, list[str]]] = []
    for name in roles.compute:
        if gemm_dims(cascade, name) is not None and not supports(two, cascade, name):
            groups += [("fibre", k) for k in _kernels(cascade, run)]
            run = []
            groups.append(("gemm", [name]))
        else:
            run.append(name)
    groups += [("fibre", k) for k in _kernels(cascade, run)]
    phase_of = {n: i for i, (_k, names) in enumerate(groups) for n in names}
    factors: dict[str, Any] = {}
    partitions: dict[str, list[str]] = {}
    # The cascade's own chunked ranks (`K[e, m1*M0 + m0]`): the chunk the workload sizes
    # (agent attention's segments of the queries, `--shape S=16`), else one spanning the 2D
    # array's rows, as FuseMax's (the chunk is what a library kernel of a later phase reads
    # whole).
    for rank, comps in cascade.partitions:
        partitions[rank] = list(comps)
        if len(comps) == 2:
            factors[comps[1]] = own_chunk(two, rank, comps[1], extents)
    spatial: dict[str, list[str]] = {}
    tensors: dict[str, dict[str, Any]] = {}
    producer = {cascade.einsum(n).output.tensor: n for n in roles.compute}
    held_rows: dict[str, int] = {}  # split rank -> rows its phases' fibres fit the buffer
    for i, (kind, names) in enumerate(groups):
        if kind == "gemm":
            (name,) = names
            binding[name] = two.name
            dims = gemm_dims(cascade, name)
            assert dims is not None
            phases.append(
                {
                    "name": name,
                    "mapper": _gemm_settings(facts.unfused_gemm, dims, facts, cascade)
                    if kernels == "library"
                    else dict(FREE_GEMM),
                    "schedule": [name],
                }
            )
            continue
        fibre = _fibre_rank(cascade, names) or _widest_rank(cascade, names, extents, roles)
        for name in names:
            binding[name] = _fibre_array(cascade, name, two, one)
        loops = [
            r
            for name in names
            for r in einsum_ranks(cascade.einsum(name))
            if r != fibre and r in extents
        ]
        loops = list(dict.fromkeys(loops))
        # a recurrence's step innermost: its state stays in the PEs from step to step
        steps = [r for r in loops if r == roles.outer or _iterated(cascade, names, r)]
        loops = [r for r in loops if r not in steps] + steps
        local: dict[str, dict[str, Any]] = {}
        if fibre is not None:
            f1, f0 = f"{fibre}1", f"{fibre}0"
            partitions[fibre] = [f1, f0]
            factors[f0] = tile(one.name, "meshX", one.mesh_x, fibre, extents)
            spatial[one.name] = [f0]
            row = loops[-1] if loops else "top"
            for name in names:
                for acc in cascade.einsum(name).reads():
                    t = acc.tensor
                    if fibre not in cascade.tensor(t).ranks or t in local:
                        continue
                    made = producer.get(t)
                    if made is None or phase_of[made] != i:
                        local[t] = {"home": "DRAM", "keep": row, "spill": "auto"}
                    elif passes[made] != passes[name]:
                        local[t] = {"home": "buffer", "keep": row, "spill": "auto"}
                        tensors.setdefault(t, {"home": "buffer"})
        phase: dict[str, Any] = {"name": f"fibre{i + 1}" if len(groups) > 3 else "softmax"}
        own: dict[str, dict[str, Any]] = {}
        if fibre is not None and sum(kind == "fibre" for kind, _ in groups) > 1:
            # each phase spreads its own fibre over the PEs (the mapping-level spatial
            # names the last one's)
            own = {n: {"spatial": [f"{fibre}0"]} for n in names if binding[n] == one.name}
        if fibre is not None:
            on_two = set()
            if kernels == "free":
                on_two = _sooner_on_two(cascade, names, fibre, binding, (two, one), extents)
            on_one = {n for n in names if binding[n] == one.name and n not in on_two}
            split, spread = _rows_spread(
                cascade, names, fibre, loops, (on_one, on_two), partitions, extents
            )

            # the tiles spread (an extent unknown here: the 1D array's width, as `tile` has it)
            def width(rank: str) -> int:
                return min(extents.get(rank, one.mesh_x), one.mesh_x)

            fits = split is not None and width(split) <= two.mesh_x and width(fibre) <= two.mesh_y
            for n in on_two:
                if n in spread and fits:
                    binding[n] = two.name
                else:  # no row to spread across the 2D array's other side: it stays
                    spread.pop(n, None)
            if split is not None:
                partitions[split] = [f"{split}1", f"{split}0"]
                rows = tile(one.name, "meshX", one.mesh_x, split, extents)
                if kernels == "free" and local and fibre in extents:
                    # free kernels: no more rows than their fibres fit the buffer (a
                    # wider chip's whole width of rows would spill them); the rank's
                    # parts are the mapping's, so every phase splitting it takes the
                    # fewest rows any of them holds
                    fit = int(arch.buffer_values) // (extents[fibre] * len(local))
                    width = min(one.mesh_x, extents.get(split, one.mesh_x))
                    if 1 <= fit < width:
                        rows = 1 << (fit.bit_length() - 1)
                        held_rows[split] = min(held_rows.get(split, rows), rows)
                factors.setdefault(f"{split}0", rows)
                loops = [
                    c for x in loops for c in ((f"{split}1", f"{split}0") if x == split else (x,))
                ]
                own.update(spread)
                for held in local.values():  # a row's tiles are still kept per row
                    if held["keep"] == split:
                        held["keep"] = f"{split}0"
        phase["loops"] = loops
        if own:
            phase["einsums"] = own
        if local:
            phase["tensors"] = local
        phase["schedule"] = list(names)
        phases.append(phase)
    for split, rows in held_rows.items():
        factors[f"{split}0"] = rows
    # what one phase hands to a later one goes through DRAM, streamed
    computed = set(roles.compute)
    for name in roles.compute:
        t = cascade.einsum(name).output.tensor
        readers = [r.name for r in cascade.readers(t) if r.name in computed]
        if any(phase_of[r] != phase_of[name] for r in readers):
            tensors[t] = {"home": "DRAM", "keep": "stream"}
    chaining = {a.name: "pipelined" for a in (one,) if chained(a)}
    by_array: dict[str, list[str]] = {two.name: [], one.name: []}
    for n in roles.compute:
        by_array[binding[n]].append(n)
    body = mapping_head(
        ctx,
        "auto: unfused",
        f"{cascade.name} bound by the unfused strategy (phases through DRAM)",
        factors,
        partitions,
        spatial,
        {a: ns for a, ns in by_array.items() if ns},
    )
    if chaining:
        body["chaining"] = chaining
    body["tensors"] = tensors
    body["phases"] = phases
    return {"mapping": body}


def _sooner_on_two(
    cascade: Cascade,
    names: list[str],
    fibre: str,
    binding: dict[str, str],
    arrays: tuple[Array, Array],
    extents: dict[str, int],
) -> set[str]:
    """A kernel's Einsums on the 1D array that walk the fibre -- element-wise ones (a norm's
    scaled values, a softmax's division), sums over the fibre (a cumulative sum of gates,
    `C[m] = G[j : j <= m]`) or over its rows (slot attention's column sums over the inputs,
    its fibre the 8 slots) -- that would finish sooner spread over the 2D array's PEs: its
    multipliers build a division or a square root the 1D array's units do in fewer cycles,
    on 256 times the PEs, and a sum is reduced down its PEs as a GEMM's is."""
    two, one = arrays
    out: set[str] = set()
    for n in names:
        e = cascade.einsum(n)
        if binding[n] != one.name or fibre not in einsum_ranks(e):
            continue
        if supports(two, cascade, n) or not registers_hold(cascade, n, two):
            continue
        if einsum_time(cascade, n, two, extents) < einsum_time(cascade, n, one, extents):
            out.add(n)
    return out


def _rows_spread(
    cascade: Cascade,
    names: list[str],
    fibre: str,
    loops: list[str],
    placed: tuple[set[str], set[str]],
    partitions: dict[str, list[str]],
    extents: dict[str, int],
) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """A kernel's Einsums on the 1D array that do not walk the fibre (a norm's square root
    of each row's sum, after the sum: `placed[0]`) spread their rows over the PEs, as a
    library kernel's threads take a row each, instead of running one point at a time; the
    element-wise ones moving to the 2D array (`placed[1]`) spread their rows across its
    columns and the fibre down its rows. The widest row rank the first of them iterates is
    split (`M -> M1 x M0`, M0 spread), and every one of them iterating it spreads M0.
    Returns the rank split (None: none) and each such Einsum's loops and spatial, the
    phase's loops with the split rank's parts in its place."""
    on_one, on_two = placed
    steps = {rank_of(v) for v in cascade.iterative_map}
    taken = {c for _r, comps in cascade.partitions for c in comps}
    split: str | None = None
    own: dict[str, dict[str, Any]] = {}
    for name in names:
        mine = einsum_ranks(cascade.einsum(name))
        if not (name in on_one and fibre not in mine or name in on_two):
            continue
        if split is None:
            rows = [
                r
                for r in loops
                if r in mine
                and r != fibre
                and r not in steps
                and extents.get(r, 1) > 1
                and r not in dict(cascade.partitions)
                and {f"{r}1", f"{r}0"}.isdisjoint(taken)
                and partitions.get(r, [f"{r}1", f"{r}0"]) == [f"{r}1", f"{r}0"]
            ]
            if not rows:
                continue
            split = max(rows, key=lambda x: extents[x])
        if split in mine:
            parted = [c for x in loops for c in ((f"{split}1",) if x == split else (x,))]
            spread = [f"{split}0", f"{fibre}0"] if name in on_two else [f"{split}0"]
            own[name] = {"loops": parted, "spatial": spread}
    return split, own


def _kernels(cascade: Cascade, names: list[str]) -> list[list[str]]:
    """A run of Einsums between GEMMs, split where a library starts another kernel: at an
    Einsum with rows (the ranks it neither reduces, steps through nor spreads as the
    kernel's fibre) the kernel so far does not walk. A softmax's max, exp, sum and divide
    share the rows `P` (their fibre `M` spread); LayerNorm's statistics (rows `P`), a
    weight's column sums (rows `F`) and a matmul's epilogue (rows `F, P`) are three."""
    kernels: list[list[str]] = []
    for name in names:
        if kernels:
            now = kernels[-1]
            fibre = _fibre_rank(cascade, [*now, name])
            walked = [_rows(cascade, m, fibre) for m in now]
            if _rows(cascade, name, fibre) <= set().union(*walked) or not any(walked):
                now.append(name)
                continue
        kernels.append([name])
    return kernels


def _rows(cascade: Cascade, name: str, fibre: str | None) -> set[str]:
    e = cascade.einsum(name)
    steps = {rank_of(v) for v in cascade.iterative_map}
    return {
        r for r in einsum_ranks(e) if r not in reduced_ranks(e) and r not in steps and r != fibre
    }


def _fibre_rank(cascade: Cascade, names: list[str]) -> str | None:
    """The rank a run of Einsums reduces (the fibre the softmax normalises); not a
    recurrence's step, which walks in order."""
    for name in names:
        e = cascade.einsum(name)
        for rank in reduced_ranks(e):
            if not _iterated(cascade, [name], rank):
                return rank
    return None


def _iterated(cascade: Cascade, names: list[str], rank: str) -> bool:
    """Is `rank` a recurrence's step (an iterative variable) of one of the Einsums?"""
    steps = {rank_of(v) for v in cascade.iterative_map}
    return rank in steps and any(rank in einsum_ranks(cascade.einsum(n)) for n in names)


def _widest_rank(
    cascade: Cascade, names: list[str], extents: dict[str, int], roles: Roles
) -> str | None:
    """A run that reduces nothing spreads its widest rank over the PEs: the widest that
    every Einsum of the run iterates and no recurrence steps through."""
    common: list[str] | None = None
    for name in names:
        ranks = [r for r in einsum_ranks(cascade.einsum(name)) if r in extents]
        common = ranks if common is None else [r for r in common if r in ranks]
    candidates = [r for r in common or [] if not _iterated(cascade, names, r)]
    return max(candidates, key=lambda r: extents[r], default=None)


def _fibre_array(cascade: Cascade, name: str, two: Array, one: Array) -> str:
    if not supports(one, cascade, name):
        return one.name
    if not supports(two, cascade, name):
        return two.name
    lacking = supports(one, cascade, name)
    why = missing_operations(lacking, (two, one)) or (
        f"it needs {', '.join(lacking)}, which no array's PEs support"
    )
    raise SpecError(f"cannot bind Einsum '{name}': {why}", cascade.einsum(name).loc)
