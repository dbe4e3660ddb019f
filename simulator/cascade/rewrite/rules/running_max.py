"""Running maximum with correction (online softmax): sums of terms scaled by exp(-max)
follow the running maximum instead of waiting for the final one.

With RM[k] the running maximum after k chunks (RM[0] = -inf, RM[k+1] = max(RM[k], LM[k]))
and RM[M1] the final one, a sum of scaled terms

    S[o] = sum_{m1, m0} exp(X[m1, m0] - RM[M1]) * Y[m1, m0]

equals R[M1], where R[0] = 0 and

    R[k+1] = sum_{m0} exp(X[k, m0] - RM[k+1]) * Y[k, m0]  +  R[k] * exp(RM[k] - RM[k+1])

by induction: R[k] = sum over the first k chunks of exp(X - RM[k]) * Y, and rescaling by
exp(RM[k] - RM[k+1]) moves every earlier term to the new maximum. Each chunk is read once:
the pass the final maximum forced disappears (Cascade 5, FlashAttention-2's update).

Conditions checked: RM is an iterative maximum (`RM[.., m1+1, ..] = max(RM[.., m1, ..],
..)` from -inf); the scaled term is a plain map `SN = exp(X - RM[.., M1, ..])` that iterates
m1 and reads RM only there; *every* reader of SN is a plain sum over m1 (and others) of a
product with SN as one factor and no other read of RM or SN, and keeps the ranks RM is
indexed by. A reader that is not such a sum (a maximum of the scaled terms, a division by
their total before summing) would see terms scaled by an intermediate maximum: the rule
does not apply.
"""

from __future__ import annotations

from collections.abc import Iterator

from simulator.cascade.ir import Access, Cascade, Einsum, ISym, IVar, Num, Op, Read, index_vars
from simulator.cascade.rewrite.draft import (
    at_int,
    at_next,
    at_sym,
    at_var,
    edited,
    expr_tensors,
    factors,
    final_step,
    fresh,
    is_plain_map,
    is_plain_sum,
    names_in_use,
    plain_vars,
    read,
    readers,
    restated,
    statement,
    step_position,
    with_step,
)
from simulator.cascade.rewrite.rules.base import Context, Rewrite

NAME = "running-max"
STABLE = True


def _running_max(c: Cascade, e: Einsum) -> tuple[int, str, str] | None:
    """(step position, step variable, bound) when `e` is `RM[.., r+1, ..] = max(RM[.., r,
    ..], L)` with RM starting at -inf."""
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
    return pos, e.iterative, c.iterative_map[e.iterative]


def _scaled(e: Einsum, rm: str, pos: int, bound: str) -> tuple[Op, Access] | None:
    """`SN = exp(X - RM[.., M1, ..])`: (the sub, the final read) when `e` has that form."""
    if not is_plain_map(e) or not isinstance(e.expr, Op) or e.expr.name != "exp":
        return None
    sub = e.expr.args[0]
    if not isinstance(sub, Op) or sub.name != "sub" or not isinstance(sub.args[1], Read):
        return None
    final = sub.args[1].access
    if final.tensor != rm or rm in expr_tensors(sub.args[0]):
        return None
    ix = final.indices[pos]
    if not (isinstance(ix.expr, ISym) and ix.expr.name == bound) or ix.filter is not None:
        return None
    others = [p for i, p in enumerate(final.indices) if i != pos]
    if any(not isinstance(p.expr, IVar) or p.filter is not None for p in others):
        return None
    return sub, final


def _sum_of_scaled(s: Einsum, sn: Einsum, rm: str, step: str, keep: set[str]) -> bool:
    """Is `s` a plain sum over the step variable of a product with one factor SN?"""
    if not is_plain_sum(s) or step not in s.reduced or not keep <= set(s.output_vars):
        return False
    parts = factors(s.expr)
    hits = [p for p in parts if isinstance(p, Read) and p.access.tensor == sn.output.tensor]
    if len(hits) != 1 or plain_vars(hits[0].access) != plain_vars(sn.output):
        return False
    rest = [p for p in parts if p is not hits[0]]
    return not any({rm, sn.output.tensor} & expr_tensors(p) for p in rest)


def candidates(context: Context) -> Iterator[Rewrite]:
    c = context.cascade
    for u in c.einsums:
        found = _running_max(c, u)
        if found is None:
            continue
        pos, step, bound = found
        rm = u.output.tensor
        for sn in readers(c, rm):
            scaled = _scaled(sn, rm, pos, bound)
            if scaled is None or step not in sn.output_vars:
                continue
            sums = readers(c, sn.output.tensor)
            keep = {p.expr.name for i, p in enumerate(scaled[1].indices) if i != pos}
            if sums and all(_sum_of_scaled(s, sn, rm, step, keep) for s in sums):
                yield _rewrite(c, sn, sums, scaled, pos, step, bound)


def _rewrite(c, sn, sums, scaled, pos, step, bound) -> Rewrite:
    sub, final = scaled
    rm = final.tensor
    taken = names_in_use(c)
    at_step = final.indices[:pos] + (at_var(step),) + final.indices[pos + 1 :]
    at_next_step = final.indices[:pos] + (at_next(step),) + final.indices[pos + 1 :]
    correction = fresh(f"P{rm}", taken)
    new_sn = statement(
        sn.output,
        Op("exp", (Op("sub", (sub.args[0], read(rm, at_next_step))),)),
        label=sn.name,
    )
    replacements: dict[str, list[str]] = {
        sn.name: [
            new_sn,
            statement(
                read(correction, at_step),
                Op("exp", (Op("sub", (read(rm, at_step), read(rm, at_next_step))),)),
            ),
        ]
    }
    declarations = [(correction, c.tensor(rm).ranks)]
    finals: dict[str, tuple[str, int]] = {}
    for s in sums:
        name = s.output.tensor
        ranks = c.tensor(name).ranks
        at = step_position(ranks)
        step_ranks = ranks[:at] + (bound,) + ranks[at:]
        local, running = fresh(f"L{name}", taken), fresh(f"R{name}", taken)
        scaled_prev = fresh(f"P{name}", taken)
        out = s.output.indices
        here = with_step(out, at, at_var(step))
        texts = [
            statement(read(running, with_step(out, at, at_int(0))), Num(0.0)),
            statement(
                read(local, here),
                s.expr,
                reduced=[v for v in s.reduced if v != step],
            ),
            statement(
                read(scaled_prev, here),
                Op("mul", (read(running, here), read(correction, at_step))),
            ),
            statement(
                read(running, with_step(out, at, at_next(step))),
                Op("add", (read(local, here), read(scaled_prev, here))),
                until=f"{step} == {bound}",
            ),
        ]
        if name in c.outputs:
            texts.append(
                statement(s.output, read(running, with_step(out, at, at_sym(bound))), label=s.name)
            )
        replacements[s.name] = texts
        declarations += [(n, step_ranks) for n in (local, scaled_prev, running)]
        finals[name] = (running, at)

    to_final = final_step({t: (running, at, bound) for t, (running, at) in finals.items()})
    for s in sums:
        for r in readers(c, s.output.tensor):
            if r.name not in replacements:
                replacements[r.name] = [restated(r, to_final)]
    detail = (
        f"{sn.name} follows {rm}[{step}+1] with correction {correction} = exp({rm}[{step}] - "
        f"{rm}[{step}+1]); " + ", ".join(f"{s.name} -> {finals[s.output.tensor][0]}" for s in sums)
    )
    return Rewrite(NAME, sn.name, detail, edited(c, replacements, new_declarations=declarations))
