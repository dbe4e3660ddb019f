"""Cascade IR -> cascade file text, the inverse of :mod:`simulator.cascade.parse`.

The rewriter (:mod:`simulator.cascade.rewrite`) builds cascades a user reads and edits, so
expressions print with the precedence a person writes (`SN[m, p] * V[f, m]`, `exp(QK[m, p]
- GM[p])`), not fully parenthesised, and parsing the text back gives the same IR.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from simulator.cascade.ir import (
    Cascade,
    Einsum,
    Expr,
    Num,
    Op,
    Read,
    Reference,
    Size,
)
from simulator.support.errors import SpecError

_INFIX = {"add": ("+", 1), "sub": ("-", 1), "mul": ("*", 2), "div": ("/", 2)}


def expr_text(expr: Expr, parent: int = 0, right: bool = False) -> str:
    """An expression as a person writes it: parentheses only where precedence needs them
    (`a - (b - c)`, `a / (b * c)`); `parent` is the precedence of the enclosing operator."""
    if isinstance(expr, Num):
        text = str(expr)
        return f"({text})" if expr.value < 0 and parent else text
    if isinstance(expr, Read):
        return str(expr.access)
    if isinstance(expr, Size):
        return expr.name
    assert isinstance(expr, Op)
    if expr.name in _INFIX:
        symbol, level = _INFIX[expr.name]
        text = (
            f"{expr_text(expr.args[0], level)} {symbol} "
            f"{expr_text(expr.args[1], level, right=True)}"
        )
        needs = level < parent or (right and level == parent)
        return f"({text})" if needs else text
    if expr.name == "neg":
        return f"-{expr_text(expr.args[0], 3)}"
    return f"{expr.name}({', '.join(expr_text(a) for a in expr.args)})"


def einsum_text(e: Einsum) -> str:
    """One Einsum as it appears under `expressions:` (before YAML quoting)."""
    default_name = f"{e.output.tensor}_init" if e.kind == "init" else e.output.tensor
    label = f"{e.name}: " if e.name != default_name else ""
    text = f"{label}{e.output} = {expr_text(e.expr)}"
    if e.reduced and e.reduce_op != "sum":
        text += f" :: {e.reduce_op}({', '.join(e.reduced)})"
    if e.until is not None:
        text += f" until {e.until}"
    return text


def _yaml_scalar(text: str) -> str:
    """A YAML scalar for `text`: plain where YAML reads it back unchanged, else quoted."""
    plain = (
        text
        and text.strip() == text
        and not any(mark in text for mark in (": ", " #", "\n"))
        and text[0] not in "-?:,[]{}#&*!|>'\"%@`"
        and not text.endswith(":")
    )
    return text if plain else json.dumps(text)


def reference_text(ref: Reference) -> str:
    items = [f"algorithm: {ref.algorithm}"] + [f"{k}: {v}" for k, v in ref.options]
    return "{" + ", ".join(items) + "}"


def cascade_yaml(
    name: str,
    description: str,
    shapes: Sequence[tuple[str, int]],
    declarations: Sequence[tuple[str, Sequence[str]]],
    statements: Sequence[str],
    reference: Reference | None = None,
    header: Sequence[str] = (),
) -> str:
    """A cascade file: `header` lines become comments at the top."""
    lines = [f"# {h}".rstrip() for h in header]
    lines.append(f"name: {_yaml_scalar(name)}")
    if description:
        lines.append("description: >")
        lines += [f"  {part}" for part in _wrap(description, 86)]
    if shapes:
        lines.append("shapes: {" + ", ".join(f"{k}: {v}" for k, v in shapes) + "}")
    if reference is not None:
        lines.append(f"reference: {reference_text(reference)}")
    lines += ["einsum:", "  declaration:"]
    lines += [f"    {t}: [{', '.join(ranks)}]" for t, ranks in declarations]
    lines.append("  expressions:")
    lines += [f"    - {_yaml_scalar(s)}" for s in statements]
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int) -> list[str]:
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    return lines + ([line] if line else [])


def to_yaml(cascade: Cascade, header: Sequence[str] = ()) -> str:
    """The whole cascade as a file that parses back to the same Einsums."""
    return cascade_yaml(
        cascade.name,
        cascade.description,
        cascade.shapes,
        [(t.name, t.ranks) for t in cascade.tensors],
        [einsum_text(e) for e in cascade.einsums],
        cascade.reference,
        header,
    )


def einsum_yaml(cascade: Cascade, name: str) -> str:
    """One Einsum of `cascade` as a cascade of its own (`NAME.EINSUM`): the tensors it reads
    are its inputs, its output the cascade's, the extents its ranks take the file's -- the
    kernel a library runs for that Einsum alone, its operands to and from memory. A cascade
    with chunked or iterative ranks has Einsums that do not stand alone: an error."""
    if cascade.partitions or cascade.iterative:
        raise SpecError(
            f"cascade '{cascade.name}' has chunked or iterative ranks: its Einsums do not "
            "run as kernels of their own"
        )
    e = cascade.einsum(name)
    tensors = [e.output.tensor] + [a.tensor for a in e.reads()]
    tensors = [t for t in dict.fromkeys(tensors)]
    ranks = {r for t in tensors for r in cascade.tensor(t).ranks} | _sizes(e.expr)
    shapes = [(r, n) for r, n in cascade.shapes if r in ranks or r in cascade.params]
    return cascade_yaml(
        f"{cascade.name}.{e.name}",
        f"the Einsum {e.name} of {cascade.name}, alone",
        shapes,
        [(t, cascade.tensor(t).ranks) for t in sorted(tensors)],
        [einsum_text(e)],
    )


def _sizes(expr: Expr) -> set[str]:
    """The extents an expression reads as numbers (`/ E`)."""
    if isinstance(expr, Size):
        return {expr.name}
    if isinstance(expr, Op):
        return set().union(*(_sizes(a) for a in expr.args))
    return set()
