"""The cascade language: lark grammar -> frozen IR, and mapping-independent analyses.

* :func:`load_cascade` parses and checks a cascade file;
* :func:`analyze_passes` -- passes per rank and the minimum live footprint per fibre;
* :func:`cascade_ops` -- operation counts per Einsum by kind;
* :func:`dependency_graph`, :func:`recurrences` -- dependencies and loop-carried SCCs;
* :func:`evaluate`, :func:`compare` -- numerical execution and equivalence checking;
* :func:`compare_reference` -- a cascade against the numpy reference its file names.
"""

from simulator.cascade.execute import compare, compare_reference, evaluate, random_inputs
from simulator.cascade.graph import dependency_graph, recurrences
from simulator.cascade.ir import Cascade, Einsum
from simulator.cascade.ops import cascade_ops
from simulator.cascade.parse import load_cascade, loads_cascade
from simulator.cascade.passes import analyze_passes
from simulator.cascade.shapes import resolve_shapes

__all__ = [
    "Cascade",
    "Einsum",
    "analyze_passes",
    "cascade_ops",
    "compare",
    "compare_reference",
    "dependency_graph",
    "evaluate",
    "load_cascade",
    "loads_cascade",
    "random_inputs",
    "recurrences",
    "resolve_shapes",
]
