"""Automatic binding: (cascade, architecture, workload, strategy) -> an ordinary mapping file.

The strategies read the cascade's graph (:mod:`simulator.strategies.roles`) and the
architecture's arrays and operation tables:

* `fusemax` (:mod:`simulator.strategies.fusemax`) -- one-pass cascades, fused on a 2D and a 1D
  array, the pipelined waterfall where the arrays are coupled;
* `flat` (:mod:`simulator.strategies.flat`) -- FLAT's fused, row-granular dataflow for cascades
  that normalise whole fibres (3-pass softmax): the contractions on the 2D array, the
  fibre-wide Einsums on the 1D array, fibres kept on chip while they fit;
* `unfused` (:mod:`simulator.strategies.unfused`) -- every GEMM its own phase through the GEMM
  mapper, the Einsums between them a phase walking one fibre at a time, all through DRAM;
* `fused` (:mod:`simulator.strategies.fused`) -- any cascade in as few phases as its passes
  allow: a one-pass recurrence as FuseMax binds it, FLAT's shape as FLAT binds it, anything
  else over blocks of rows with its fibres on chip while they fit; among its templates,
  `segments` (:mod:`simulator.strategies.segments`): a FLAT-shaped span inside a larger
  cascade (a layer's attention) fused, the rest kernel by kernel.

Every template takes the point's context
(:class:`~simulator.strategies.context.BindContext`) and its own knobs. The result is the
data of a mapping file (the shapes the workload sizes come from the binder's facts,
`mappings/auto/binder.yaml`); :func:`mapping_yaml` writes it, and the tools load it like a
hand-written one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from simulator.strategies.chain import chain_mapping
from simulator.strategies.context import BindContext
from simulator.strategies.flat import flat_mapping
from simulator.strategies.fused import fused_mapping
from simulator.strategies.fusemax import fusemax_mapping
from simulator.strategies.segments import segments_mapping
from simulator.strategies.unfused import unfused_mapping
from simulator.support.errors import SpecError

STRATEGIES = ("fusemax", "flat", "unfused", "fused")
# The architecture each strategy binds to when none is given: FuseMax's for its own
# strategy and the general fused one, FLAT's for the baselines (as in the paper's
# evaluation).
DEFAULT_ARCH = {"fusemax": "fusemax", "flat": "flat", "unfused": "flat", "fused": "fusemax"}


def _rule(rule: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A rule called with the point's context (with its own copies of the shapes and
    extents, which it may adjust) and its knobs."""

    def call(ctx: BindContext, **knobs: Any) -> dict[str, Any]:
        return rule(replace(ctx, extents=dict(ctx.extents), shapes=dict(ctx.shapes)), **knobs)

    return call


def _unfused(ctx: BindContext, reuse: bool = True, kernels: str = "library") -> dict[str, Any]:
    # The unfused strategy's library calls get operands sliced to what is attended.
    shapes, extents = dict(ctx.shapes), dict(ctx.extents)
    fields = ctx.workload.fields()
    for role, quantity in ctx.facts.unfused_sizes:
        for rank in [r for r, q in shapes.items() if q == role]:
            shapes[rank] = quantity
            extents[rank] = int(fields[quantity])  # type: ignore[call-overload]
    return unfused_mapping(
        replace(ctx, shapes=shapes, extents=extents), reuse=reuse, kernels=kernels
    )


# A template: a rule writing the mapping data of one structural choice, given its knobs.
TEMPLATES: dict[str, Callable[..., dict[str, Any]]] = {
    "fusemax": _rule(fusemax_mapping),
    "flat": _rule(flat_mapping),
    "unfused": _unfused,
    "fused": _rule(fused_mapping),
    "chain": _rule(chain_mapping),
    "segments": _rule(segments_mapping),
}


def template(ctx: BindContext, name: str, **knobs: Any) -> dict[str, Any]:
    """The mapping data a template writes for the point (tile factors may be `search`)."""
    data = TEMPLATES[name](ctx, **knobs)
    if ctx.normalised:
        data["mapping"]["normalised"] = True
    return data


def bind(
    ctx: BindContext, strategy: str, *, pipelined: bool = True, reuse: bool = True
) -> dict[str, Any]:
    """The mapping data `strategy`'s rule generates for the point (see module docstring)."""
    if strategy not in STRATEGIES:
        raise SpecError(f"unknown strategy '{strategy}' (choose from {', '.join(STRATEGIES)})")
    if strategy == "flat":
        return template(ctx, "flat", reuse=reuse)
    if strategy == "unfused":
        return template(ctx, "unfused", reuse=reuse)
    return template(ctx, strategy, pipelined=pipelined, reuse=reuse)


class _Flow(list):
    """A list written in flow style (`[QK, LM]`)."""


class _FlowDict(dict):
    """A mapping of plain values written in flow style (`{home: DRAM, keep: P2}`)."""


def _flows(node: Any, depth: int = 0) -> Any:
    if isinstance(node, str):
        return str(node)  # LocStr names from the specs: plain text
    if isinstance(node, dict):
        items = {str(k): _flows(v, depth + 1) for k, v in node.items()}
        if depth >= 2 and all(isinstance(v, str | int | float) for v in items.values()):
            return _FlowDict(items)
        return items
    if isinstance(node, list):
        items = [_flows(v, depth + 1) for v in node]
        if all(isinstance(v, str | int | float) or isinstance(v, _Flow) for v in items):
            return _Flow(items)
        return items
    return node


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # libyaml's emitter where present
    """The writer of generated mappings (the same text as PyYAML's own emitter, 4x faster:
    the mapper writes every candidate)."""


_Dumper.add_representer(
    _Flow, lambda d, data: d.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)
)
_Dumper.add_representer(
    _FlowDict,
    lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True),
)


def mapping_yaml(data: dict[str, Any], header: str = "") -> str:
    """The mapping as YAML text, laid out like the hand-written files (short lists inline)."""
    body = yaml.dump(
        _flows(data), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100
    )
    return header + body


def reference(path: Path, shipped_folder: Path, relative_to: Path | None = None) -> str:
    """How a generated mapping names a spec file: a shipped spec by its name; another file
    by its path (relative to the mapping's folder when written to a file)."""
    try:
        if path.resolve().parent == shipped_folder.resolve():
            return path.stem
    except OSError:
        pass
    if relative_to is not None:
        return os.path.relpath(path.resolve(), relative_to.resolve())
    return str(path.resolve())
