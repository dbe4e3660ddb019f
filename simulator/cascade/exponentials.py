"""The mapper's view of an exponential of a sum: two exponentials over fewer points.

    exp(a + b) = exp(a) * exp(b)        exp(a - b) = exp(a) * exp(-b)

Where the two terms index different variables, neither all of the result's, each
exponential is taken over the points of its own term, and the readers multiply them. The
Attention Free Transformer's AFT-full writes its weights as

    EW[d, m, p] = exp(K[d, m] + WB[m, p])      NUM[d, p] = EW * V[d, m]      DEN[d, p] = EW

-- an exponential at each of D x M x P points, feeding two sums over m. Its view is

    EWA[d, m] = exp(K[d, m])      EWB[m, p] = exp(WB[m, p])
    NUM[d, p] = (EWA * V) * EWB   DEN[d, p] = EWA * EWB

D x M + M x P exponentials, and each sum a GEMM over m (the compound-operand step of
:mod:`simulator.cascade.normal` then makes `EWA * V` first): the paper's own
implementation, `exp(w) (exp(K) * V)`. The 3-D tensor is never made.

Conditions: the exponential is a plain map (no reduction, filter or iteration) of a sum or
difference of two terms -- written in its argument, or a plain map it alone reads -- whose
reads all index plainly; each term indexes a variable the other does not (so neither
indexes all of the result's: the stable softmax's `exp(S - M)`, whose S indexes every
point, stays as written); the result is no output and every Einsum reading it is a plain
sum reading it plainly. A reader whose expression is a product has its factors grouped by
side -- those within the first term's variables, then those within the second's -- where
every factor falls on one of them (a GEMM's two operands).

The view computes the same values up to rounding; the cascade a user wrote is unchanged
(this is how the mapper sees it, see :func:`simulator.cascade.normal.mapping_view`).
"""

from __future__ import annotations

from simulator.cascade.draft import (
    edited,
    factors,
    fresh,
    is_plain_map,
    is_plain_sum,
    map_reads,
    names_in_use,
    plain_vars,
    product,
    read,
    readers,
    restate,
    statement,
    var,
    without_dead,
)
from simulator.cascade.ir import Access, Cascade, Einsum, Expr, Op, Read, expr_reads, expr_values
from simulator.cascade.parse import loads_cascade


def exponentials_factored(cascade: Cascade) -> Cascade:
    """The cascade with every exponential of a sum the module docstring describes taken as
    two exponentials; itself where there is none."""
    if cascade.operators:
        return cascade  # (user operators do not survive the text round trip)
    taken = names_in_use(cascade)
    replacements: dict[str, list[str]] = {}
    added: list[tuple[str, tuple[str, ...]]] = []
    for e in cascade.einsums:
        if e.name in replacements:
            continue
        found = _factored(cascade, e)
        if found is None:
            continue
        first, second, inlined = found
        if any(r.name in replacements for r in readers(cascade, e.output.tensor)):
            continue
        _edit(cascade, e, first, second, taken, replacements, added)
        if inlined is not None:
            replacements[inlined.name] = []
    if not replacements:
        return cascade
    draft = edited(cascade, replacements, new_declarations=added)
    whole = loads_cascade(draft.text(), cascade.path)
    return loads_cascade(without_dead(whole, cascade.outputs).text(), cascade.path)


def _factored(cascade: Cascade, e: Einsum) -> tuple[Expr, Expr, Einsum | None] | None:
    """(first term, second term as the exponent it takes, the plain map the argument was
    read from or None) of an exponential the module docstring's conditions admit."""
    x = e.expr
    if not is_plain_map(e) or not isinstance(x, Op) or x.name != "exp":
        return None
    out = e.output.tensor
    if out in cascade.outputs or any(a.tensor == out for a in e.reads()):
        return None
    arg, inlined = x.args[0], None
    if isinstance(arg, Read):
        inlined = _sole_map(cascade, arg.access, e)
        if inlined is None:
            return None
        arg = inlined.expr
    if not isinstance(arg, Op) or arg.name not in ("add", "sub"):
        return None
    first, second = arg.args
    if arg.name == "sub":
        second = Op("neg", (second,))
    own = set(plain_vars(e.output) or ())
    if inlined is not None and set(plain_vars(inlined.output) or ()) != own:
        return None  # (read at other variables than it writes: not inlined here)
    sides = [_vars(first), _vars(second)]
    if any(s is None or not s for s in sides) or sides[0] <= sides[1] or sides[1] <= sides[0]:
        return None
    if sides[0] | sides[1] != own:
        return None
    users = readers(cascade, out)
    if not users or any(not is_plain_sum(r) for r in users):
        return None
    if any(plain_vars(a) is None for r in users for a in r.reads() if a.tensor == out):
        return None
    return first, second, inlined


def _sole_map(cascade: Cascade, acc: Access, reader: Einsum) -> Einsum | None:
    """The plain map that writes `acc`'s tensor when `reader` alone reads it, at the
    variables it writes; else None."""
    producers = cascade.producers(acc.tensor)
    if len(producers) != 1 or not is_plain_map(producers[0]):
        return None
    if acc.tensor in cascade.outputs or readers(cascade, acc.tensor) != [reader]:
        return None
    if plain_vars(acc) != plain_vars(producers[0].output):
        return None
    return producers[0]


def _vars(x: Expr) -> set[str] | None:
    """The index variables a term uses (its reads' and those read as values); None when a
    read does not index plainly."""
    out: set[str] = set()
    for acc in expr_reads(x):
        names = plain_vars(acc)
        if names is None:
            return None
        out |= set(names)
    return out | {v.name for v in expr_values(x)}


def _edit(
    cascade: Cascade,
    e: Einsum,
    first: Expr,
    second: Expr,
    taken: set[str],
    replacements: dict[str, list[str]],
    added: list[tuple[str, tuple[str, ...]]],
) -> None:
    """The exponential as two (replacing `e`) and each of its readers reading their
    product."""
    out = e.output
    names = plain_vars(out) or ()
    ranks = cascade.tensor(out.tensor).ranks
    made = []
    for term in (first, second):
        keep = _vars(term) or set()
        tensor = fresh(f"{out.tensor}{'AB'[len(made)]}", taken)
        at = [k for k, v in enumerate(names) if v in keep]
        added.append((tensor, tuple(ranks[k] for k in at)))
        made.append((tensor, at))
    replacements[e.name] = [
        statement(read(t, [var(names[k]) for k in at]), Op("exp", (term,)))
        for (t, at), term in zip(made, (first, second), strict=True)
    ]
    for r in readers(cascade, out.tensor):
        replacements[r.name] = [restate(r, _read_as_product(r, out.tensor, made))]


def _read_as_product(r: Einsum, tensor: str, made: list[tuple[str, list[int]]]) -> Expr:
    """The reader's expression with each read of `tensor` the product of the two
    exponentials at its variables, the factors of a product grouped by side."""

    def parts(acc: Access) -> tuple[Read, Read]:
        got = plain_vars(acc) or ()
        a, b = (read(t, [var(got[k]) for k in at]) for t, at in made)
        return a, b

    items = factors(r.expr)
    hits = [k for k, f in enumerate(items) if isinstance(f, Read) and f.access.tensor == tensor]
    if len(hits) == 1 and sum(1 for a in r.reads() if a.tensor == tensor) == 1:
        hit = items[hits[0]]
        assert isinstance(hit, Read)
        a, b = parts(hit.access)
        rest = [f for k, f in enumerate(items) if k != hits[0]]
        sides = [_vars(a) or set(), _vars(b) or set()]
        on = [next((s for s in (0, 1) if (_vars(f) or set()) <= sides[s]), None) for f in rest]
        if None not in on:
            left = [a, *(f for f, s in zip(rest, on, strict=True) if s == 0)]
            right = [b, *(f for f, s in zip(rest, on, strict=True) if s == 1)]
            return Op("mul", (product(left), product(right)))
    return map_reads(r.expr, lambda acc: Op("mul", parts(acc)) if acc.tensor == tensor else None)
