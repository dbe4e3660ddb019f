"""Numpy references: what a cascade claims to compute, written without the cascade language.

A cascade file may name the computation it implements with an optional top-level key::

    reference: {algorithm: attention, mask: causal}

and `python -m simulator.cascade compare FILE --reference` then runs the cascade against
the reference below on random inputs (:func:`simulator.cascade.execute.compare_reference`).
The references are plain numpy, independent of the IR and its evaluation, so that a cascade
which is wrong -- a dropped filter, a lost correction factor -- cannot agree with them by
sharing the mistake.

`attention` is stable softmax attention for one key/value head: `Q[E, P]` (or `Q[E, G, P]`
for G query heads sharing the head: grouped-query attention, MQA when G is every head),
`K[E, M]`, `V[F, M]` -> `AV[F, P]` (or `AV[F, G, P]`), optionally masked: `causal` keeps the
keys at or before the query's position `t = p + M - P` (the queries are the last P of the M
positions: `t = p` in prefill, the end of the cache in decode), `window` the keys
`t - W < m <= t` (Mistral's sliding window; W a size parameter of the cascade,
`window: NAME` when it has another name). The tensors are bound
by name (Q, K, V, AV); their ranks may have any names, used consistently (no rank name is
special). The options are checked when the file is read (:func:`check_reference`); an
unknown algorithm, option or value is an error at its file:line:col.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from simulator.cascade.ir import Cascade, Reference
from simulator.support.errors import Loc, SpecError

# algorithm -> option -> allowed values (the first is the default); None: the name of one
# of the cascade's size parameters.
ALGORITHMS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "attention": {"mask": ("none", "causal", "window"), "window": None},
}
# `attention` binds tensors by name; their ranks may have any names, used consistently.
_ATTENTION_TENSORS = ("Q", "K", "V", "AV")
_ATTENTION_FORM = "Q [E, P] or [E, G, P], K [E, M], V [F, M] -> AV [F, P] or [F, G, P]"


def attention_mask(mask: str, m: int, p: int, window: int | None = None) -> np.ndarray:
    """Which (key m, query p) pairs attend: an [M, P] boolean array. The P queries are the
    last P of the M positions (bottom-right alignment): query p sits at position p + M - P,
    so in prefill (P = M) at p, and a decoded token (P = 1) after the whole cache."""
    keys = np.arange(m)[:, None]
    queries = np.arange(p)[None, :] + (m - p)  # each query's position among the keys
    if mask == "causal":
        return np.broadcast_to(keys <= queries, (m, p))
    if mask == "window":
        if window is None:
            raise SpecError("a window mask needs its size W")
        return (keys <= queries) & (queries - window < keys)
    if mask != "none":
        raise SpecError(f"unknown attention mask '{mask}' (known: none, causal, window)")
    return np.ones((m, p), dtype=bool)


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: str = "none", window: int | None = None
) -> np.ndarray:
    """Stable masked softmax attention of one key/value head.

    q: [E, P] or [E, G, P]; k: [E, M]; v: [F, M] -> [F, P] or [F, G, P]. The K and V head is
    repeated for each of the G query heads (grouped-query attention). Each query's masked
    logits are shifted by their maximum before `exp`, so logits of +-1e4 stay finite; a
    query with no key left (a window past the last key) has no softmax and gives NaN."""
    grouped = q.ndim == 3
    qg = q if grouped else q[:, None, :]
    heads = qg.shape[1]
    kg = np.repeat(k[:, None, :], heads, axis=1)  # [E, G, M]
    vg = np.repeat(v[:, None, :], heads, axis=1)  # [F, G, M]
    keep = attention_mask(mask, k.shape[1], q.shape[-1], window)[None, :, :]
    logits = np.where(keep, np.einsum("egm,egp->gmp", kg, qg), -np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        shifted = logits - logits.max(axis=1, keepdims=True)
        weights = np.where(keep, np.exp(shifted), 0.0)
        weights = weights / weights.sum(axis=1, keepdims=True)
    out = np.einsum("fgm,gmp->fgp", vg, weights)
    return out if grouped else out[:, 0, :]


def attention_kind(cascade: Cascade) -> tuple[bool, str] | None:
    """(grouped, mask) of a cascade whose reference is attention: grouped when Q has a
    query-head rank (`Q[E, G, P]`), the mask of its reference; None for other cascades."""
    ref = cascade.reference
    if ref is None or ref.algorithm != "attention":
        return None
    q = _ranks(cascade, "Q")
    return (q is not None and len(q) == 3, str(ref.option("mask", "none")))


def check_reference(cascade: Cascade) -> None:
    """The cascade has what its reference binds (tensors and ranks, the window's W); else a
    SpecError at the `reference:` entry."""
    ref = cascade.reference
    if ref is None:
        return
    if ref.algorithm == "attention":
        _check_attention(cascade, ref)


def _ranks(cascade: Cascade, name: str) -> tuple[str, ...] | None:
    try:
        return cascade.tensor(name).ranks
    except KeyError:
        return None


def attention_ranks_agree(
    q: tuple[str, ...], k: tuple[str, ...], v: tuple[str, ...], av: tuple[str, ...]
) -> bool:
    """Do the ranks have attention's form, whatever their names: Q [e, (g,) p], K [e, m],
    V [f, m], AV [f, (g,) p] -- the same name wherever the same rank is meant?"""
    if len(k) != 2 or len(v) != 2 or len(q) not in (2, 3) or len(av) != len(q):
        return False
    (e, m), (f, m_v) = k, v
    return m_v == m and q[0] == e and av[0] == f and q[1:] == av[1:]


def window_parameter(ref: Reference) -> str:
    """The size parameter holding the window of `mask: window` (`window: W` by default)."""
    return ref.option("window", "W")


def _check_attention(cascade: Cascade, ref: Reference) -> None:
    found = {name: _ranks(cascade, name) for name in _ATTENTION_TENSORS}
    q, k, v, av = found.values()
    ok = set(cascade.inputs) == {"Q", "K", "V"} and "AV" in cascade.outputs
    if not (ok and q and k and v and av and attention_ranks_agree(q, k, v, av)):
        have = ", ".join(f"{n} [{', '.join(r)}]" for n, r in found.items() if r is not None)
        raise SpecError(
            f"reference attention computes {_ATTENTION_FORM}; cascade '{cascade.name}' has "
            f"inputs {', '.join(cascade.inputs) or 'none'}, outputs "
            f"{', '.join(cascade.outputs)} ({have or 'none of these tensors'})",
            ref.loc,
        )
    window = window_parameter(ref)
    if ref.option("mask", "none") != "window":
        if "window" in dict(ref.options):
            raise SpecError("reference attention: 'window' goes with 'mask: window'", ref.loc)
    elif window not in cascade.params:
        raise SpecError(
            f"reference mask 'window' needs the window size {window} as a size parameter: "
            f"'{window}: 256' in shapes: and used in a filter (p < m + {window})",
            ref.loc,
        )


def reference_outputs(
    cascade: Cascade, inputs: Mapping[str, np.ndarray], shapes: Mapping[str, int]
) -> dict[str, np.ndarray]:
    """The reference's value of each output it defines, on the cascade's inputs."""
    ref = cascade.reference
    if ref is None:
        raise SpecError(
            f"cascade '{cascade.name}' names no reference; add e.g. "
            "'reference: {algorithm: attention}' to the file",
            Loc(cascade.path),
        )
    mask = ref.option("mask", "none")
    window = shapes[window_parameter(ref)] if mask == "window" else None
    av = attention(inputs["Q"], inputs["K"], inputs["V"], mask, window)
    return {"AV": av}
