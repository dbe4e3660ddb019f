"""A full reduction over a partitioned rank becomes an iterative one over its outer part.

    S[o] = op_{m1, m0} T[.., m1, m0, ..]
    ->  LS[o, m1] = op_{m0} T[.., m1, m0, ..]                      (one chunk)
        RS[o, 0] = identity(op)
        RS[o, m1+1] = op(RS[o, m1], LS[o, m1])   until m1 == M1     (running result)
        readers of S read RS[o, M1]

Over a rank that cannot be chunked -- one a result is indexed by, as a row softmax's
output is indexed by the row's rank -- a maximum folds over its elements instead (a chunk
of one: no local reduction over m0):

    S[o] = max_{m, ..} T[.., m, ..]
    ->  RS[o, 0] = -inf
        RS[o, m+1] = max(RS[o, m], max_{..} T[.., m, ..])   until m == M

Holds for an associative reduction with an identity (sum, prod, max, min): folding the
chunks (or elements) left to right from the identity gives the same value. On its own it
changes no pass count (the readers still wait for the final step); it gives the running
maximum rule the running value it corrects against.

Conditions checked: S is a compute Einsum, not iterative and without filters, reducing
with a built-in operator both components m1 and m0 of one partition -- or, element by
element, a maximum over a rank m with more than one pass that partition-rank cannot split
(where it can, the chunked form is the one to find; see ELEMENTWISE for why only the
maximum); its output is written at plain variables and it is its tensor's only producer.
"""

from __future__ import annotations

from collections.abc import Iterator

from simulator.cascade.draft import (
    at_int,
    at_next,
    at_sym,
    at_var,
    edited,
    final_step,
    fresh,
    names_in_use,
    plain_vars,
    read,
    readers,
    restated,
    statement,
    step_position,
    with_step,
)
from simulator.cascade.ir import Cascade, Einsum, Num, Op
from simulator.cascade.rewrite.rules.base import Context, Rewrite
from simulator.cascade.rewrite.rules.partition_rank import unchunkable

NAME = "iterative-reduction"
STABLE = True
AT_EVERY_SITE = False

IDENTITY = {"sum": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}
COMBINE = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}
# Element by element, only the fold a later rule builds on: the running maximum that
# running-max corrects against (it makes the running sums itself, Welford's rule its own
# statistics). A running sum per element lowers nothing on its own, and offering one for
# every sum would multiply the candidates the search checks.
ELEMENTWISE = ("max",)


def candidates(context: Context) -> Iterator[Rewrite]:
    c = context.cascade
    for e in c.einsums:
        if (
            e.kind != "compute"
            or e.iterative is not None
            or e.filters()
            or e.reduce_op not in IDENTITY
            or plain_vars(e.output) is None
            or len(c.producers(e.output.tensor)) != 1
        ):
            continue
        for parent, comps in c.partitions:
            if len(comps) != 2:
                continue
            outer, inner = (comps[0].lower(), comps[1].lower())
            if outer in e.reduced and inner in e.reduced:
                yield _rewrite(c, e, parent, comps[0])
        if e.reduce_op not in ELEMENTWISE:
            continue
        for v in e.reduced:
            rank = unchunkable(context, v)
            if rank is not None:
                yield _rewrite(c, e, rank, rank)


def _rewrite(c: Cascade, e: Einsum, parent: str, bound: str) -> Rewrite:
    """The fold over `bound`: the outer component of `parent`'s partition (chunks), or
    `parent` itself (elements)."""
    outer = bound.lower()
    taken = names_in_use(c)
    s = e.output.tensor
    local, running = fresh(f"L{s}", taken), fresh(f"R{s}", taken)
    ranks = c.tensor(s).ranks
    at = step_position(ranks)
    step_ranks = ranks[:at] + (bound,) + ranks[at:]
    out = e.output.indices
    here = with_step(out, at, at_var(outer))
    first = with_step(out, at, at_int(0))
    nxt = with_step(out, at, at_next(outer))
    final = with_step(out, at, at_sym(bound))
    rest = [v for v in e.reduced if v != outer]
    texts = [statement(read(running, first), Num(IDENTITY[e.reduce_op]))]
    if rest:
        texts.append(statement(read(local, here), e.expr, reduce_op=e.reduce_op, reduced=rest))
        term = read(local, here)
    else:
        term = e.expr  # one element: nothing left to reduce locally
    texts.append(
        statement(
            read(running, nxt),
            Op(COMBINE[e.reduce_op], (read(running, here), term)),
            until=f"{outer} == {bound}",
        )
    )
    if s in c.outputs:
        texts.append(statement(e.output, read(running, final), label=e.name))
    replacements = {e.name: texts}

    to_final = final_step({s: (running, at, bound)})
    for r in readers(c, s):
        replacements[r.name] = [restated(r, to_final)]
    per = f"{local} per {bound} chunk" if rest else f"element by element of {bound}"
    detail = (
        f"{e.name} = {e.reduce_op} over {parent} -> {per}, running {running} "
        f"(from {IDENTITY[e.reduce_op]:g}); readers take {running}[{bound}]"
    )
    declarations = [(local, step_ranks)] if rest else []
    return Rewrite(
        NAME,
        e.name,
        detail,
        edited(c, replacements, new_declarations=[*declarations, (running, step_ranks)]),
    )
