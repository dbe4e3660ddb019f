"""The cascade as a mapper sees it: the same Einsums in an order that no notation decides.

Two cascades that differ only in how they are written -- the operands of a product or a sum
swapped, the Einsums in another valid order, other names -- compute the same thing at the
same cost, so a mapper must give them the same answer. A mapper reads the operands of a
contraction in order (which side holds the rows) and the Einsums in order (which kernel
starts a phase, which array an Einsum goes to first); this module settles both from the
cascade's structure alone:

* **operands of a commutative operation** (`*`, `+`, `max`, `min`) in one order: by the
  output positions their index variables reach, the operand indexing the later output
  position first (`QK[m, p] = Q[e, p] * K[e, m]`: Q, which carries the rows `p`, before K),
  then by the operand's structural signature;
* **Einsums in one topological order**: each next Einsum is a ready one (everything it
  reads is made) that reads the most recently made tensor -- a producer is followed by
  its consumers, as people write a cascade --, then the least signature;
* **a sum scaled by a constant is the sum, then the scaling** (`MU[p] = X[e, p] / E` is
  `MUS[p] = X[e, p]; MU[p] = MUS[p] / E`; `S[m, p] = Q[e, p] * K[e, m] / sqrt(E)` is a
  contraction, then a scaling): the scaling happens once per result, not at every point of
  the sum, and a contraction stays one whatever constant the notation folds into it. The
  sum gets a fresh tensor (`MUS`), the scaling keeps the Einsum's name;
* **an exponential of a sum of terms over different variables is two exponentials**
  (:mod:`simulator.cascade.exponentials`: AFT-full's `exp(K[d, m] + w[m, p])`), its readers
  reading their product;
* **a contraction of a sum of GEMM-shaped products is one contraction per product, then
  their sum** (RoPE's `QR1 * KR1 + QR2 * KR2`), under the contraction's filters;
* **a contraction over a compound operand makes the operand first** (`(X + P) W`).

An Einsum's **signature** hashes how it computes (its expression's structure, each index
variable as its output position or as reduced, the reduction's operator) together with
where its operands come from (their producers' signatures; an input by how every Einsum
reads it) and where its result goes (its consumers' signatures and how they read it). No
tensor, rank or Einsum name enters it, so a renamed cascade has the same signatures. Two
Einsums with equal signatures are interchangeable in structure; their written order stands.

The result computes the same values under the same Einsum names (to rounding, where an
exponential is split or a sum distributed); the order of its Einsums and of commutative
operands aside, it differs only where one of the last four steps applies (Einsums more, an
exponential's tensor gone). A mapping generated for it says so (`normalised: yes`), and it
is evaluated on it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable

from simulator.cascade.draft import (
    edited,
    fresh,
    names_in_use,
    plain_vars,
    restate,
    restated,
    statement,
)
from simulator.cascade.exponentials import exponentials_factored
from simulator.cascade.graph import carried_var, recurrences
from simulator.cascade.ir import (
    Access,
    Cascade,
    Cond,
    Einsum,
    Expr,
    Index,
    IndexPos,
    IVar,
    Num,
    Op,
    Read,
    Size,
    VarValue,
    expr_reads,
    index_vars,
    is_constant,
    rank_of,
)
from simulator.cascade.parse import loads_cascade

COMMUTATIVE = frozenset({"add", "mul", "max", "min"})


@functools.lru_cache(maxsize=256)
def mapping_view(cascade: Cascade) -> Cascade:
    """The cascade as the module docstring describes it."""
    split = _sums_of_gemms_split(exponentials_factored(_scaled_sums_split(cascade)))
    made = _compound_operands_made(split)
    return _ordered(split_reads_viewed(_split_reads_copied(made)))


def _compound_operands_made(cascade: Cascade) -> Cascade:
    """Each contraction over a compound operand as the operand made first, then a plain
    product (`Q[e, p] = (X[d, p] + PE[d, p]) * WQ[d, e]`, Shortformer's position-infused
    queries, is `QA[d, p] = X[d, p] + PE[d, p]; Q[e, p] = QA[d, p] * WQ[d, e]`): a GEMM,
    the sum made once per value rather than at every point of the contraction, as if it
    were written so. Only a product whose sides each index a variable the other does not (a
    GEMM's rows and columns) is split, and an operand is taken out where every tensor it
    reads is read at plain indices (no filter), all of them among one read's: it is no
    larger than what it reads."""
    return _each_einsum_edited(cascade, _operands_made)


def _sums_of_gemms_split(cascade: Cascade) -> Cascade:
    """Each contraction of a sum or difference of GEMM-shaped products as one contraction
    per product, then their sum (`QK[m, p] = QR1[h, p] * KR1[h, m] + QR2[h, p] * KR2[h, m]`,
    RoPE's rotated halves, is `QKA = QR1 * KR1; QKB = QR2 * KR2; QK = QKA + QKB`): two
    GEMMs, where as written the contraction was no GEMM at all (the distributive law over
    a finite sum). Only where each product's two sides each index a variable the other does
    not and each product varies along every variable the contraction reduces."""
    return _each_einsum_edited(cascade, _sum_split)


def _sum_split(
    cascade: Cascade, e: Einsum, taken: set[str], added: list[tuple[str, tuple[str, ...]]]
) -> list[str] | None:
    """:func:`_sums_of_gemms_split` of one Einsum: its new lines (None: as written)."""
    x = e.expr
    plain = e.kind == "compute" and e.reduce_op == "sum" and e.reduced and e.iterative is None
    if not plain or not isinstance(x, Op) or x.name not in ("add", "sub"):
        return None
    if not all(_gemm_shaped(term, set(e.iteration)) for term in x.args):
        return None
    at = _filters_at(e, x.args)
    if at is None:
        return None
    ranks = cascade.tensor(e.output.tensor).ranks
    lines, parts = [], []
    for term, tag in zip(x.args, "AB", strict=True):
        name = fresh(f"{e.output.tensor}{tag}", taken)
        added.append((name, ranks))
        made = dataclasses.replace(e.output, tensor=name)
        lines.append(statement(made, term))
        indices = tuple(dataclasses.replace(pos, filter=at.get(pos.expr)) for pos in made.indices)
        parts.append(Read(dataclasses.replace(made, indices=indices)))
    return [*lines, statement(e.output, Op(x.name, tuple(parts)), label=e.name)]


def _filters_at(e: Einsum, terms: tuple[Expr, ...]) -> dict[Index, Cond] | None:
    """Where a filtered contraction's sum reads its products: each filter at the output
    variable it is written on (`KR1[h, m : m <= p + M - P]`: at m). The filters of an
    Einsum hold over all of it, so each product must carry all of them, each on an output
    variable (else None: not split)."""
    conds = set(e.filters())
    if not conds:
        return {}
    outputs = {pos.expr for pos in e.output.indices}
    at: dict[Index, Cond] = {}
    for term in terms:
        found = {
            (pos.expr, pos.filter)
            for acc in expr_reads(term)
            for pos in acc.indices
            if pos.filter is not None
        }
        if {cond for _v, cond in found} != conds or any(v not in outputs for v, _c in found):
            return None
        for v, cond in found:
            if at.setdefault(v, cond) != cond:
                return None  # two filters on one variable: no one position holds both
    return at


def _gemm_shaped(term: Expr, iteration: set[str]) -> bool:
    """A product of two sides, each indexing a variable the other does not, that varies
    along every variable of the iteration."""
    if not isinstance(term, Op) or term.name != "mul" or len(term.args) != 2:
        return False
    return _sides_apart(term) and _vars_of(term) == iteration


def _sides_apart(x: Op) -> bool:
    """Each side of a product indexes a variable the other does not (a GEMM's rows and
    columns)."""
    left, right = (_vars_of(arg) for arg in x.args)
    return not (left <= right or right <= left)


def _operands_made(
    cascade: Cascade, e: Einsum, taken: set[str], added: list[tuple[str, tuple[str, ...]]]
) -> list[str] | None:
    """:func:`_compound_operands_made` of one Einsum: its new lines (None: as written)."""
    x = e.expr
    plain = e.kind == "compute" and e.reduce_op == "sum" and e.reduced and e.iterative is None
    if not plain or not isinstance(x, Op) or x.name != "mul" or len(x.args) != 2:
        return None
    if not _sides_apart(x):
        return None  # no GEMM either way: a squared deviation summed, a dot product
    lines: list[str] = []
    args = []
    for arg in x.args:
        first = _operand_read(cascade, arg)
        if first is None:
            args.append(arg)
            continue
        name = fresh(f"{e.output.tensor}A", taken)
        added.append((name, cascade.tensor(first.tensor).ranks))
        made = Read(dataclasses.replace(first, tensor=name))
        lines.append(statement(made, arg))
        args.append(made)
    return [*lines, restate(e, Op("mul", tuple(args)))] if lines else None


def _each_einsum_edited(
    cascade: Cascade,
    edit: Callable[
        [Cascade, Einsum, set[str], list[tuple[str, tuple[str, ...]]]], list[str] | None
    ],
) -> Cascade:
    """The cascade with each Einsum `edit` restates replaced by its lines (new tensors
    declared as `edit` adds them, named apart from every name in use); itself where none
    is."""
    if cascade.operators:
        return cascade  # (user operators do not survive the text round trip)
    taken = names_in_use(cascade)
    replacements: dict[str, list[str]] = {}
    added: list[tuple[str, tuple[str, ...]]] = []
    for e in cascade.einsums:
        lines = edit(cascade, e, taken, added)
        if lines is not None:
            replacements[e.name] = lines
    if not replacements:
        return cascade
    draft = edited(cascade, replacements, new_declarations=added)
    return loads_cascade(draft.text(), cascade.path)


def _operand_read(cascade: Cascade, arg: Expr) -> Access | None:
    """The widest read of a compound operand whose reads all index plainly, each by some of
    that read's variables (a gain `G[d]` beside `X[d, p]`): the operand takes its shape.
    None for a plain read, a constant, or any other."""
    if isinstance(arg, Read) or is_constant(arg):
        return None
    reads = list(expr_reads(arg))
    if not reads or any(plain_vars(r) is None for r in reads):
        return None
    widest = max(reads, key=lambda r: len(plain_vars(r)))  # the first of the widest
    shape = plain_vars(widest)
    if len(set(shape)) != len(shape) or any(not set(plain_vars(r)) <= set(shape) for r in reads):
        return None
    if not _expr_vars_within(arg, set(shape)):
        return None
    return widest


def _vars_of(x: Expr) -> set[str]:
    """The index variables an operand's reads index by (their filters' aside)."""
    return {v for acc in expr_reads(x) for pos in acc.indices for v in index_vars(pos.expr)}


def _expr_vars_within(x: Expr, names: set[str]) -> bool:
    """Every index variable read as a value (`m - p`) is one of `names`."""
    if isinstance(x, VarValue):
        return x.name in names
    if isinstance(x, Op):
        return all(_expr_vars_within(arg, names) for arg in x.args)
    return True


def _split_ranks(cascade: Cascade, acc: Access) -> set[str]:
    """The ranks the access indexes through a split (`K[e, m1*M0 + m0]`: M)."""
    split = dict(cascade.partitions)
    decl = cascade.tensor(acc.tensor).ranks
    positions = zip(decl, acc.indices, strict=True)
    return {r for r, p in positions if r in split and not isinstance(p.expr, IVar)}


def _split_reads_copied(cascade: Cascade) -> Cascade:
    """Each read through a split of a rank inside an Einsum that computes, as a view copy
    and a plain read, as FuseMax's cascades write it (`BK[e, m1, m0] = K[e, m1*M0 + m0]`,
    then `BK[e, m1, m0]`): a convolution over windows of the tokens `KC[e, g] = K[d, g*S +
    s] * WCK[d, s, e]` is a GEMM over `BK[d, g, s]`, the same data. Reads with a filter or
    another non-plain index are left as written."""
    if cascade.operators or not cascade.partitions:
        return cascade
    split = dict(cascade.partitions)
    taken = names_in_use(cascade)
    copies: dict[str, tuple[str, str, tuple[str, ...]]] = {}  # read -> (view, copy, ranks)
    replacements: dict[str, list[str]] = {}
    for e in cascade.einsums:
        if e.kind != "compute":
            continue
        made = len(copies)
        hits: list[Access] = []
        text = restated(e, _viewer(cascade, split, taken, copies, hits))
        if hits:
            replacements[e.name] = [t for _v, t, _r in list(copies.values())[made:]] + [text]
    if not replacements:
        return cascade
    added = [(view, ranks) for view, _t, ranks in copies.values()]
    draft = edited(cascade, replacements, new_declarations=added)
    return loads_cascade(draft.text(), cascade.path)


def _viewer(
    cascade: Cascade,
    split: dict[str, tuple[str, ...]],
    taken: set[str],
    copies: dict[str, tuple[str, str, tuple[str, ...]]],
    hits: list[Access],
) -> Callable[[Access], Expr | None]:
    """A read replacer for :func:`_split_reads_copied`: a split read becomes a plain read of
    its view (made once per read text, kept in `copies`); `hits` collects those replaced."""

    def as_view(acc: Access) -> Expr | None:
        if not _split_ranks(cascade, acc):
            return None
        ranks: list[str] = []
        out: list[str] = []
        for r, pos in zip(cascade.tensor(acc.tensor).ranks, acc.indices, strict=True):
            if pos.filter is not None:
                return None
            if isinstance(pos.expr, IVar):
                ranks.append(r)
                out.append(pos.expr.name)
                continue
            by_rank = {rank_of(v): v for v in index_vars(pos.expr)}
            if r not in split or set(by_rank) != set(split[r]):
                return None
            ranks += split[r]
            out += [by_rank[c] for c in split[r]]
        key = str(acc)
        if key not in copies:
            view = fresh(f"B{acc.tensor}", taken)
            copies[key] = (view, f"{view}[{', '.join(out)}] = {key}", tuple(ranks))
        hits.append(acc)
        return Read(Access(copies[key][0], tuple(IndexPos(IVar(v)) for v in out), acc.loc))

    return as_view


def split_reads_viewed(cascade: Cascade) -> Cascade:
    """Each input read both whole and through a split of one of its ranks, read where split
    as a view of its own over a rank of its own. Agent attention reads its queries whole in
    the scores (`Q[e, p]`) and split into the agents' segments where it pools them
    (`BQ[e, l, s] = Q[e, l*S + s]`): a split is the whole cascade's, so the rows of every
    Einsum iterating `p` were the agents and their segments (`P = L x S`), and no mapping
    could tile them its own way. The split read becomes `QV[e, l*S + s]`, QV over
    `[E, PV]`, PV sized as P (`tied_ranks`) and QV Q's data (`input_views`: read once as
    far as any bound is concerned). Only inputs: an intermediate has one producer writing
    one layout. A cascade whose split ranks no Einsum iterates whole is returned as it is."""
    if cascade.operators or not cascade.partitions:
        return cascade
    whole = {rank_of(v) for e in cascade.einsums for v in e.iteration}
    inputs = set(cascade.inputs)
    sites: dict[str, dict[int, set[str]]] = {}  # Einsum -> read position -> split ranks
    ranks_split_where: dict[str, set[str]] = {}  # rank -> tensors read split over it
    for e in cascade.einsums:
        for k, acc in enumerate(e.reads()):
            for rank in _split_ranks(cascade, acc):
                sites.setdefault(e.name, {}).setdefault(k, set()).add(rank)
                ranks_split_where.setdefault(rank, set()).add(acc.tensor)
    written = {r for e in cascade.einsums for r in _split_ranks(cascade, e.output)}
    chosen = {
        rank
        for rank, tensors in ranks_split_where.items()
        if rank in whole and tensors <= inputs and rank not in written
    }
    if not chosen:
        return cascade
    taken = names_in_use(cascade)
    new_rank = {r: fresh(f"{r}V", taken) for r in sorted(chosen)}
    viewed: dict[str, str] = {}  # input -> its view
    for e in cascade.einsums:
        for k, acc in enumerate(e.reads()):
            if sites.get(e.name, {}).get(k, set()) & chosen and acc.tensor not in viewed:
                viewed[acc.tensor] = fresh(f"{acc.tensor}V", taken)
    replacements = {}
    for e in cascade.einsums:
        positions = {k for k, ranks in sites.get(e.name, {}).items() if ranks & chosen}
        if positions:
            replacements[e.name] = [_restated_reads(e, positions, viewed)]
    added = [
        (view, tuple(new_rank.get(r, r) for r in cascade.tensor(src).ranks))
        for src, view in viewed.items()
    ]
    shapes = [(new_rank[r], v) for r, v in cascade.shapes if r in new_rank]
    draft = edited(cascade, replacements, new_declarations=added, shapes=shapes)
    out = loads_cascade(draft.text(), cascade.path)
    return dataclasses.replace(
        out,
        tied_ranks=(*cascade.tied_ranks, *((n, r) for r, n in new_rank.items())),
        input_views=(*cascade.input_views, *((v, t) for t, v in viewed.items())),
    )


def _restated_reads(e: Einsum, positions: set[int], viewed: dict[str, str]) -> str:
    """The Einsum's text with its reads at those positions (in `e.reads()` order) reading
    the inputs' views."""
    order = {id(acc): k for k, acc in enumerate(e.reads())}

    def to_view(acc: Access) -> Expr | None:
        if order.get(id(acc)) in positions:
            return Read(dataclasses.replace(acc, tensor=viewed[acc.tensor]))
        return None

    return restated(e, to_view)


def _scaled_sums_split(cascade: Cascade) -> Cascade:
    """Each sum of a term scaled by a constant as the sum, then the scaling."""
    return _each_einsum_edited(cascade, _scaled_split)


def _scaled_split(
    cascade: Cascade, e: Einsum, taken: set[str], added: list[tuple[str, tuple[str, ...]]]
) -> list[str] | None:
    """:func:`_scaled_sums_split` of one Einsum: the sum and the scaling (None: not one)."""
    split = _scaled(e)
    if split is None:
        return None
    body, op, scale = split
    name = fresh(f"{e.output.tensor}S", taken)
    added.append((name, cascade.tensor(e.output.tensor).ranks))
    total = Read(dataclasses.replace(e.output, tensor=name))
    return [
        statement(total, body),
        statement(e.output, Op(op, (total, scale)), label=e.name),
    ]


def _scaled(e: Einsum) -> tuple[Expr, str, Expr] | None:
    """(term, `div` or `mul`, constant) of a sum of a term scaled by a constant."""
    x = e.expr
    plain = e.kind == "compute" and e.reduce_op == "sum" and e.reduced and e.iterative is None
    if not plain or not isinstance(x, Op) or plain_vars(e.output) is None:
        return None
    if x.name == "div" and is_constant(x.args[1]) and not is_constant(x.args[0]):
        return x.args[0], "div", x.args[1]
    if x.name == "mul":
        constants = [a for a in x.args if is_constant(a)]
        terms = [a for a in x.args if not is_constant(a)]
        if len(constants) == 1 and len(terms) == 1:
            return terms[0], "mul", constants[0]
    return None


def _ordered(cascade: Cascade) -> Cascade:
    """The cascade with its Einsums and commutative operands in one order."""
    deps = _dependencies(cascade)
    blocks = _blocks(cascade)
    topo = _kahn(cascade, deps, blocks, lambda e, _made: (0,))
    if topo is None:
        return cascade  # not a DAG once carried reads are set aside: leave it as written
    sigs = _signatures(cascade, deps, topo)

    def urgency(e: Einsum, made_at: dict[str, int]) -> tuple:
        recent = max((made_at.get(a.tensor, -1) for a in e.reads()), default=-1)
        return (-recent, len(e.output.indices), sigs.of[e.name])

    order = _kahn(cascade, deps, blocks, urgency)
    assert order is not None
    einsums = tuple(_with_operands(e, sigs) for e in order)
    if einsums == cascade.einsums:
        return cascade
    return dataclasses.replace(cascade, einsums=einsums)


def _dependencies(cascade: Cascade) -> dict[str, set[str]]:
    """Einsum -> the Einsums it must follow: the producers of what it reads (for a read of
    the previous step of an iterative tensor, its initialisation only), and the earlier
    statements of its own output (an initialisation before its steps)."""
    index = {e.name: i for i, e in enumerate(cascade.einsums)}
    deps: dict[str, set[str]] = {e.name: set() for e in cascade.einsums}
    for e in cascade.einsums:
        for access in e.reads():
            carried = carried_var(cascade, e, access)
            for p in cascade.producers(access.tensor):
                if p.name == e.name or (carried is not None and p.kind != "init"):
                    continue
                deps[e.name].add(p.name)
        for p in cascade.producers(e.output.tensor):
            if index[p.name] < index[e.name]:
                deps[e.name].add(p.name)
    return deps


def _blocks(cascade: Cascade) -> dict[str, int]:
    """Einsum -> its block: the Einsums of one recurrence (a cycle through a loop-carried
    read: RNV and SPNV) stay together, one after the other; every other Einsum is a block
    of its own."""
    out = {e.name: i for i, e in enumerate(cascade.einsums)}
    for rec in recurrences(cascade):
        first = min(out[n] for n in rec.einsums)
        for n in rec.einsums:
            out[n] = first
    return out


def _kahn(
    cascade: Cascade,
    deps: dict[str, set[str]],
    blocks: dict[str, int],
    key: Callable[[Einsum, dict[str, int]], tuple],
) -> list[Einsum] | None:
    """A topological order taking, among the ready Einsums, the least by `key` (then the
    written order), the rest of a recurrence's block right after its first; None when the
    dependencies have a cycle."""
    done: set[str] = set()
    made_at: dict[str, int] = {}  # tensor -> step it was (last) made
    out: list[Einsum] = []
    written = {e.name: i for i, e in enumerate(cascade.einsums)}
    members: dict[int, set[str]] = {}
    for name, b in blocks.items():
        members.setdefault(b, set()).add(name)
    outside = {
        b: {d for n in ns for d in deps[n]} - ns for b, ns in members.items()
    }  # what a block waits for
    current: int | None = None  # the block being laid out
    while len(out) < len(cascade.einsums):
        ready = [
            e
            for e in cascade.einsums
            if e.name not in done
            and deps[e.name] <= done
            and (
                blocks[e.name] == current
                if current is not None
                else outside[blocks[e.name]] <= done
            )
        ]
        if not ready:
            return None
        pick = min(ready, key=lambda e: (key(e, made_at), written[e.name]))
        done.add(pick.name)
        made_at[pick.output.tensor] = len(out)
        out.append(pick)
        rest = members[blocks[pick.name]] - done
        current = blocks[pick.name] if rest else None
    return out


@dataclasses.dataclass(frozen=True)
class _Signatures:
    of: dict[str, str]  # Einsum -> its signature
    source: dict[str, str]  # tensor -> what made it (or how an input is read)


def _digest(parts: object) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def _signatures(cascade: Cascade, deps: dict[str, set[str]], topo: list[Einsum]) -> _Signatures:
    """Each Einsum's signature: how it computes, from what, for whom (module docstring)."""
    source: dict[str, str] = {}
    for t in cascade.inputs:  # an input by its ranks and how each Einsum reads it
        uses = sorted(
            f"{_skeleton(e)}@{_pattern(a, _positions(e))}"
            for e in cascade.readers(t)
            for a in e.reads()
            if a.tensor == t
        )
        source[t] = _digest(("input", len(cascade.tensor(t).ranks), tuple(uses)))
    down: dict[str, str] = {}
    for e in topo:  # producers first
        made = [down[p] for p in sorted(deps[e.name]) if p in down]
        down[e.name] = _digest((_skeleton(e), _expr_text(e.expr, _positions(e), source, e)))
        source[e.output.tensor] = _digest(("made", down[e.name], tuple(sorted(made))))
    up: dict[str, str] = {}
    for e in reversed(topo):  # consumers first
        users = sorted(
            f"{down[c.name]}{up[c.name]}@{_pattern(a, _positions(c))}"
            for c in cascade.readers(e.output.tensor)
            if c.name != e.name and e.name in deps[c.name]
            for a in c.reads()
            if a.tensor == e.output.tensor
        )
        up[e.name] = _digest(tuple(users))
    return _Signatures({n: _digest((down[n], up[n])) for n in down}, source)


def _positions(e: Einsum) -> dict[str, int]:
    return {v: i for i, v in enumerate(e.output.vars())}


def _skeleton(e: Einsum) -> str:
    """How an Einsum computes, its operands' origins left out."""
    positions = _positions(e)
    return _digest(
        (
            e.kind,
            e.reduce_op,
            len(e.reduced),
            e.iterative is not None,
            _pattern(e.output, positions),
            _expr_text(e.expr, positions, {}, e),
        )
    )


def _expr_text(x: Expr, positions: dict[str, int], source: dict[str, str], e: Einsum) -> str:
    if isinstance(x, Read):
        origin = source.get(x.access.tensor, "")
        return f"read({origin}:{_pattern(x.access, positions)})"
    if isinstance(x, Op):
        args = [_expr_text(a, positions, source, e) for a in x.args]
        if x.name in COMMUTATIVE:
            args.sort()
        return f"{x.name}({','.join(args)})"
    if isinstance(x, Num):
        return f"num({x.value!r})"
    if isinstance(x, VarValue):
        return f"var(o{positions[x.name]})" if x.name in positions else "var(r)"
    if isinstance(x, Size):
        return "size"
    return "?"


def _pattern(access: Access, positions: dict[str, int]) -> str:
    """The access's index positions with each variable as its output position (`o0`) or
    as reduced (`r`), and whether a filter sits there: no name."""
    out = []
    for pos in access.indices:
        names = [f"o{positions[v]}" if v in positions else "r" for v in index_vars(pos.expr)]
        out.append(f"{type(pos.expr).__name__}({'.'.join(names)}){'|f' if pos.filter else ''}")
    return ",".join(out)


def _with_operands(e: Einsum, sigs: _Signatures) -> Einsum:
    if e.kind != "compute":
        return e
    expr = _sorted_operands(e.expr, _positions(e), sigs.source, e)
    return e if expr == e.expr else dataclasses.replace(e, expr=expr)


def _sorted_operands(x: Expr, positions: dict[str, int], source: dict[str, str], e: Einsum) -> Expr:
    if not isinstance(x, Op):
        return x
    args = tuple(_sorted_operands(a, positions, source, e) for a in x.args)
    if x.name in COMMUTATIVE and len(args) > 1:

        def key(a: Expr) -> tuple[tuple[int, ...], str]:
            reach = sorted({positions[v] for v in _expr_vars(a) if v in positions}, reverse=True)
            return (tuple(-p for p in reach), _expr_text(a, positions, source, e))

        args = tuple(sorted(args, key=key))
    return Op(x.name, args)


def _expr_vars(x: Expr) -> list[str]:
    if isinstance(x, Read):
        return [v for pos in x.access.indices for v in index_vars(pos.expr)]
    if isinstance(x, Op):
        return [v for a in x.args for v in _expr_vars(a)]
    if isinstance(x, VarValue):
        return [x.name]
    return []
