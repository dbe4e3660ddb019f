"""Running maximum with correction (online softmax): sums of terms scaled by exp(-max)
follow the running maximum instead of waiting for the final one.

With RM[k] the running maximum after k chunks (RM[0] = -inf, RM[k+1] = max(RM[k], LM[k]))
and RM[M1] the final one, a sum of scaled terms

    S[o] = sum_{m1, m0} exp(X[m1, m0] - RM[M1]) * Y[m1, m0]

equals R[M1], where R[0] = 0 and

    R[k+1] = sum_{m0} exp(X[k, m0] - RM[k+1]) * Y[k, m0]  +  R[k] * exp(RM[k] - RM[k+1])

by induction: R[k] = sum over the first k chunks of exp(X - RM[k]) * Y, and rescaling by
exp(RM[k] - RM[k+1]) moves every earlier term to the new maximum. Each chunk is read once:
the pass the final maximum forced disappears (Cascade 5, FlashAttention-2's update). Over
a rank iterated element by element (RM[m+1] = max(RM[m], X[m]): a row softmax, whose
output is indexed by the rank and so cannot be chunked) a chunk is one element and the
sum over m0 disappears: RS[m+1] = exp(X[m] - RM[m+1]) + RS[m] * exp(RM[m] - RM[m+1]),
Milakov and Gimelshein's online normaliser. Never exp of a positive number: every
exponent is a value minus a maximum over it, so it is stable at any logit magnitude.

Conditions checked: RM is an iterative maximum (`RM[.., m1+1, ..] = max(RM[.., m1, ..],
..)` from -inf); a scaled factor is `exp(X - RM[.., M1, ..])` with X free of RM, written in
the sum or read from a plain map SN (whose argument may itself be a plain map `D = X -
RM[.., M1, ..]`) that iterates m1 and reads RM only there; a sum that follows the running
maximum is a plain sum over m1 (and others) of a product with exactly one scaled factor,
no other read of RM or SN, and keeps the ranks RM is indexed by (the correction is per
those ranks). Any other reader of SN (the normalised terms of a softmax, a sum of the
squared terms) is not such a sum and would see terms scaled by an intermediate maximum:
it keeps SN, scaled by the final maximum, and the sums read a copy scaled by the running
one (SN itself changes only when every reader is such a sum). A sum that reads another
such sum's result is left as it is (it reads that result's final step).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from simulator.cascade.draft import (
    at_int,
    at_next,
    at_sym,
    at_var,
    edited,
    expr_tensors,
    factors,
    final_step,
    fresh,
    inline,
    is_plain_map,
    is_plain_sum,
    names_in_use,
    plain_vars,
    product,
    read,
    readers,
    restated,
    statement,
    step_position,
    with_step,
)
from simulator.cascade.ir import (
    Access,
    Cascade,
    Einsum,
    Expr,
    IndexPos,
    ISym,
    IVar,
    Num,
    Op,
    Read,
    index_vars,
)
from simulator.cascade.rewrite.rules.base import Context, Rewrite
from simulator.cascade.write import einsum_text

NAME = "running-max"
STABLE = True
AT_EVERY_SITE = False


@dataclass(frozen=True)
class RunningMax:
    """`RM[.., r+1, ..] = max(RM[.., r, ..], L)` from -inf: the tensor, the position of its
    step rank, the step variable and its bound."""

    tensor: str
    pos: int
    step: str
    bound: str


@dataclass(frozen=True)
class Scaled:
    """A map `SN = exp(X - RM[.., M1, ..])`: its Einsum and the argument `X - RM[final]`
    at SN's variables (a plain map D producing the argument is inlined)."""

    einsum: Einsum
    arg: Op


# A sum following the running maximum: its Einsum, the index of its scaled factor and the
# factor's argument `X - RM[final]` at the sum's variables.
Summed = tuple[Einsum, int, Op]


def _running_max(c: Cascade, e: Einsum) -> RunningMax | None:
    if e.iterative is None or e.filters() or not isinstance(e.expr, Op) or e.expr.name != "max":
        return None
    rm = e.output.tensor
    pos = next(i for i, ix in enumerate(e.output.indices) if e.iterative in index_vars(ix.expr))
    own = [a for a in e.expr.args if isinstance(a, Read) and a.access.tensor == rm]
    if len(own) != 1 or not isinstance(own[0].access.indices[pos].expr, IVar):
        return None
    inits = [p for p in c.producers(rm) if p.kind == "init"]
    if len(inits) != 1 or inits[0].expr != Num(float("-inf")):
        return None
    return RunningMax(rm, pos, e.iterative, c.iterative_map[e.iterative])


def _final_read(expr: Expr, run: RunningMax) -> Access | None:
    """The access when `expr` reads RM's final step at plain variables elsewhere."""
    if not isinstance(expr, Read) or expr.access.tensor != run.tensor:
        return None
    final = expr.access
    ix = final.indices[run.pos]
    if not (isinstance(ix.expr, ISym) and ix.expr.name == run.bound) or ix.filter is not None:
        return None
    others = [p for i, p in enumerate(final.indices) if i != run.pos]
    if any(not isinstance(p.expr, IVar) or p.filter is not None for p in others):
        return None
    return final


def _shifted(arg: Expr, run: RunningMax) -> Op | None:
    """`X - RM[.., M1, ..]` with X free of RM, else None."""
    if not isinstance(arg, Op) or arg.name != "sub" or _final_read(arg.args[1], run) is None:
        return None
    return None if run.tensor in expr_tensors(arg.args[0]) else arg


def _scaled_expr(c: Cascade, expr: Expr, run: RunningMax) -> Op | None:
    """The argument `X - RM[final]` when `expr` is `exp(X - RM[final])` or `exp(D)` with D a
    plain map `D = X - RM[final]` read at plain variables."""
    if not isinstance(expr, Op) or expr.name != "exp":
        return None
    arg = expr.args[0]
    if isinstance(arg, Read) and arg.access.tensor != run.tensor:
        producers = c.producers(arg.access.tensor)
        if len(producers) != 1 or not is_plain_map(producers[0]):
            return None
        arg = inline(producers[0], arg.access)
    return _shifted(arg, run) if arg is not None else None


def _scaled_map(c: Cascade, e: Einsum, run: RunningMax) -> Scaled | None:
    if not is_plain_map(e) or run.step not in e.output_vars:
        return None
    arg = _scaled_expr(c, e.expr, run)
    return Scaled(e, arg) if arg is not None else None


def _kept_ranks(arg: Op, run: RunningMax) -> set[str]:
    """The variables RM[final] is read at besides its step: a sum must keep them."""
    final = arg.args[1].access
    return {p.expr.name for i, p in enumerate(final.indices) if i != run.pos}


def _scaled_factor(
    c: Cascade, s: Einsum, maps: dict[str, Scaled], run: RunningMax, shunned: set[str]
) -> tuple[int, Op] | None:
    """(the index of the one scaled factor, its argument) when `s` is a plain sum over the
    step of a product with one scaled factor -- a read of a map of `maps` at its own
    variables, or `exp(X - RM[final])` written in the sum -- and no other factor reading
    a `shunned` tensor (RM, the maps, what reads RM), keeping the ranks of RM."""
    if not is_plain_sum(s) or run.step not in s.reduced:
        return None
    parts = factors(s.expr)
    hits: list[tuple[int, Op]] = []
    for i, part in enumerate(parts):
        if isinstance(part, Read) and part.access.tensor in maps:
            sn = maps[part.access.tensor]
            if plain_vars(part.access) != plain_vars(sn.einsum.output):
                return None
            hits.append((i, sn.arg))
        elif (arg := _scaled_expr(c, part, run)) is not None:
            hits.append((i, arg))
    if len(hits) != 1:
        return None
    index, arg = hits[0]
    if not _kept_ranks(arg, run) <= set(s.output_vars):
        return None
    rest = parts[:index] + parts[index + 1 :]
    return None if any(shunned & expr_tensors(p) for p in rest) else hits[0]


def candidates(context: Context) -> Iterator[Rewrite]:
    c = context.cascade
    for u in c.einsums:
        run = _running_max(c, u)
        if run is None:
            continue
        maps: dict[str, Scaled] = {}
        for e in c.einsums:
            if (sn := _scaled_map(c, e, run)) is not None:
                maps[e.output.tensor] = sn
        shunned = {run.tensor, *maps} | {e.output.tensor for e in readers(c, run.tensor)}
        sums = []
        for s in c.einsums:
            if (found := _scaled_factor(c, s, maps, run, shunned)) is not None:
                sums.append((s, *found))
        # a sum reading another's result would read a tensor the rewrite replaces: it stays
        outs = {s.output.tensor for s, _, _ in sums}
        sums = [x for x in sums if not outs & expr_tensors(x[0].expr)]
        if sums:
            yield _rewrite(c, run, maps, sums)


def _at_step(access: Access, run: RunningMax, step: IndexPos) -> tuple[IndexPos, ...]:
    """RM's indices of `access` with the step position replaced."""
    return access.indices[: run.pos] + (step,) + access.indices[run.pos + 1 :]


def _step_scaled(arg: Op, run: RunningMax) -> Op:
    """`exp(X - RM[.., m1+1, ..])`: the term scaled by the maximum so far."""
    final = arg.args[1].access
    now = read(run.tensor, _at_step(final, run, at_next(run.step)))
    return Op("exp", (Op("sub", (arg.args[0], now)),))


def _rescaled_maps(
    c: Cascade, run: RunningMax, maps: dict[str, Scaled], sums: list[Summed], taken: set[str]
) -> tuple[dict[str, str], dict[str, list[str]], list[tuple[str, tuple[str, ...]]]]:
    """The maps the sums read, scaled by the running maximum: in place when only these
    sums read them, else a copy (`LSN`) beside the map, which keeps the final scaling for
    its other readers. Returns map -> what the sums read, the texts and the new tensors."""
    summed = {s.name for s, _, _ in sums}
    renamed: dict[str, str] = {}
    texts: dict[str, list[str]] = {}
    declarations: list[tuple[str, tuple[str, ...]]] = []
    for s, index, _arg in sums:
        part = factors(s.expr)[index]
        if not isinstance(part, Read) or part.access.tensor not in maps:
            continue
        name = part.access.tensor
        if name in renamed:
            continue
        sn = maps[name].einsum
        scaled = _step_scaled(maps[name].arg, run)
        if all(r.name in summed for r in readers(c, name)):
            renamed[name] = name
            texts[sn.name] = [statement(sn.output, scaled, label=sn.name)]
        else:
            copy = fresh(f"L{name}", taken)
            renamed[name] = copy
            texts[sn.name] = [einsum_text(sn), statement(read(copy, sn.output.indices), scaled)]
            declarations.append((copy, c.tensor(name).ranks))
    return renamed, texts, declarations


def _correction(run: RunningMax, name: str, final: Access) -> str:
    """`PRM[.., m1, ..] = exp(RM[.., m1, ..] - RM[.., m1+1, ..])` at the variables of a read
    of RM's final step."""
    now = _at_step(final, run, at_var(run.step))
    nxt = _at_step(final, run, at_next(run.step))
    return statement(
        read(name, now), Op("exp", (Op("sub", (read(run.tensor, now), read(run.tensor, nxt))),))
    )


@dataclass(frozen=True)
class RunningSum:
    """A sum rewritten to follow the running maximum: its texts, new tensors, and the
    running tensor with the position of its step rank (its readers take the last step)."""

    texts: list[str]
    declarations: list[tuple[str, tuple[str, ...]]]
    running: str
    at: int


def _running_sum(
    c: Cascade,
    run: RunningMax,
    summed: Summed,
    renamed: dict[str, str],
    correction: str,
    taken: set[str],
) -> RunningSum:
    """R[0] = 0; L[k] = the chunk's terms scaled by RM[k+1]; R[k+1] = L[k] + R[k] * PRM[k]
    (per element, L is the term itself: nothing is left to sum within a step)."""
    s, index, arg = summed
    step, bound = run.step, run.bound
    name = s.output.tensor
    ranks = c.tensor(name).ranks
    at = step_position(ranks)
    step_ranks = ranks[:at] + (bound,) + ranks[at:]
    local, running = fresh(f"L{name}", taken), fresh(f"R{name}", taken)
    scaled_prev = fresh(f"P{name}", taken)
    out = s.output.indices
    here = with_step(out, at, at_var(step))
    parts = factors(s.expr)
    part = parts[index]
    if isinstance(part, Read) and part.access.tensor in renamed:
        parts[index] = Read(replace(part.access, tensor=renamed[part.access.tensor]))
    else:
        parts[index] = _step_scaled(arg, run)
    rest = [v for v in s.reduced if v != step]
    texts = [statement(read(running, with_step(out, at, at_int(0))), Num(0.0))]
    declarations = []
    if rest:
        texts.append(statement(read(local, here), product(parts), reduced=rest))
        declarations.append((local, step_ranks))
        term: Expr = read(local, here)
    else:
        term = product(parts)
    prev_correction = read(correction, _at_step(arg.args[1].access, run, at_var(step)))
    texts += [
        statement(read(scaled_prev, here), Op("mul", (read(running, here), prev_correction))),
        statement(
            read(running, with_step(out, at, at_next(step))),
            Op("add", (term, read(scaled_prev, here))),
            until=f"{step} == {bound}",
        ),
    ]
    if name in c.outputs:
        final = read(running, with_step(out, at, at_sym(bound)))
        texts.append(statement(s.output, final, label=s.name))
    declarations += [(scaled_prev, step_ranks), (running, step_ranks)]
    return RunningSum(texts, declarations, running, at)


def _rewrite(c: Cascade, run: RunningMax, maps: dict[str, Scaled], sums: list[Summed]) -> Rewrite:
    rm, step, bound = run.tensor, run.step, run.bound
    taken = names_in_use(c)
    correction = fresh(f"P{rm}", taken)
    renamed, replacements, declarations = _rescaled_maps(c, run, maps, sums, taken)
    declarations.insert(0, (correction, c.tensor(rm).ranks))
    correction_text = _correction(run, correction, sums[0][2].args[1].access)
    running = {
        s.name: _running_sum(c, run, (s, i, a), renamed, correction, taken) for s, i, a in sums
    }
    # The correction right after the first rescaled map (Cascade 5's SLN, PRM), else before
    # the first sum.
    if replacements:
        replacements[next(iter(replacements))].append(correction_text)
    else:
        running[sums[0][0].name].texts.insert(0, correction_text)
    for name, r in running.items():
        replacements[name] = r.texts
        declarations += r.declarations
    finals = {
        s.output.tensor: (running[s.name].running, running[s.name].at, bound) for s, _, _ in sums
    }
    to_final = final_step(finals)
    for s, _, _ in sums:
        for r in readers(c, s.output.tensor):
            if r.name not in replacements:
                replacements[r.name] = [restated(r, to_final)]
    site = next(iter(renamed), sums[0][0].name)
    scaled = ", ".join(renamed) or f"exp(.. - {rm}[{bound}]) in {site}"
    detail = (
        f"{scaled} follows {rm}[{step}+1] with correction {correction} = exp({rm}[{step}] - "
        f"{rm}[{step}+1]); "
        + ", ".join(f"{s.name} -> {running[s.name].running}" for s, _, _ in sums)
        + "".join(
            f"; {name} kept for its other readers, the sums read {copy}"
            for name, copy in renamed.items()
            if copy != name
        )
    )
    return Rewrite(NAME, site, detail, edited(c, replacements, new_declarations=declarations))
