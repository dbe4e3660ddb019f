"""The dependency graph between Einsums and its strongly connected components.

An edge runs from the Einsum producing a tensor to each Einsum reading it. A read of the
previous step of an iterative tensor (`RD[m1, p]` in `SPD[m1, p] = RD[m1, p] * PRM[m1, p]`)
is a *loop-carried* edge: it closes a cycle that only the iterative rank can carry. The SCCs
of the graph with those edges are the recurrences of the cascade (for 1-pass attention:
{RM}, {RD, SPD}, {RNV, SPNV}, each carried by m1); everything else is a DAG and can be
evaluated or fused freely. An iterative Einsum with filters keeps its previous step where
they remove a point (causal attention's RD on a fully masked chunk), so it reads that step
even when its expression does not: a loop-carried edge to itself, and one from the
initialisation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from simulator.cascade.ir import Access, Cascade, Einsum, reads_previous_step


@dataclass(frozen=True)
class Edge:
    src: str  # producing Einsum
    dst: str  # consuming Einsum
    tensor: str
    carried_by: str | None  # iterative variable carrying the edge, or None


@dataclass(frozen=True)
class Graph:
    nodes: tuple[str, ...]
    edges: tuple[Edge, ...]

    def successors(self, node: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.dst for e in self.edges if e.src == node))


def carried_var(cascade: Cascade, reader: Einsum, access: Access) -> str | None:
    """The iterative variable if `access` (in `reader`) reads the previous step of an
    iterative tensor; a reduction over every step (`Y = R[k]`) is an ordinary edge."""
    info = cascade.iterative_tensors().get(access.tensor)
    if info is None:
        return None
    pos, var = info
    return var if reads_previous_step(access, pos, var, reader.reduced) else None


def producer_of_read(cascade: Cascade, access: Access) -> Einsum | None:
    """The Einsum whose value a read sees: the init for a carried read, else the main producer."""
    producers = cascade.producers(access.tensor)
    if not producers:
        return None
    mains = [p for p in producers if p.kind != "init"]
    return mains[0] if mains else producers[0]


def dependency_graph(cascade: Cascade) -> Graph:
    edges: list[Edge] = []
    for consumer in cascade.einsums:
        for access in consumer.reads():
            producers = cascade.producers(access.tensor)
            carried = carried_var(cascade, consumer, access)
            for producer in producers:
                if producer.kind == "init" and carried is None:
                    continue  # a non-carried read sees the iterated value, not the initial one
                edge = Edge(
                    producer.name,
                    consumer.name,
                    access.tensor,
                    carried if producer.kind != "init" else None,
                )
                if edge not in edges:
                    edges.append(edge)
        for edge in _masked_step_edges(cascade, consumer):
            if edge not in edges:
                edges.append(edge)
    return Graph(tuple(e.name for e in cascade.einsums), tuple(edges))


def _masked_step_edges(cascade: Cascade, e: Einsum) -> list[Edge]:
    """The implicit read of the previous step by a filtered iterative Einsum."""
    if not e.keeps_masked_steps or e.iterative is None:
        return []
    tensor = e.output.tensor
    inits = [p for p in cascade.producers(tensor) if p.kind == "init"]
    return [Edge(p.name, e.name, tensor, None) for p in inits] + [
        Edge(e.name, e.name, tensor, e.iterative)
    ]


def components(nodes: Iterable[str], successors: Callable[[str], Iterable[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan's, iteratively: no recursion limit on a long
    cascade), in the order they complete: every component after all it reaches (children
    first). Members in the order they left the stack."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(successors(root)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(successors(child))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                result.append(component)
    return result


def strongly_connected(graph: Graph) -> list[tuple[str, ...]]:
    """SCCs (Tarjan), in topological order of the condensation (producers first)."""
    succ = {n: graph.successors(n) for n in graph.nodes}
    order = {n: i for i, n in enumerate(graph.nodes)}
    found = components(graph.nodes, succ.__getitem__)
    return [tuple(sorted(c, key=order.__getitem__)) for c in reversed(found)]


@dataclass(frozen=True)
class Recurrence:
    """An SCC closed by loop-carried edges: a recurrence over an iterative rank."""

    einsums: tuple[str, ...]
    carried_by: tuple[str, ...]


def recurrences(cascade: Cascade, graph: Graph | None = None) -> list[Recurrence]:
    """The cyclic SCCs (more than one Einsum, or a self-loop), each with its carrying ranks."""
    graph = graph or dependency_graph(cascade)
    out = []
    for comp in strongly_connected(graph):
        members = set(comp)
        inner = [e for e in graph.edges if e.src in members and e.dst in members]
        if len(comp) > 1 or inner:
            carried = tuple(sorted({e.carried_by for e in inner if e.carried_by}))
            out.append(Recurrence(comp, carried))
    return out


def to_text(cascade: Cascade) -> str:
    graph = dependency_graph(cascade)
    lines = [f"cascade {cascade.name}: {len(graph.nodes)} Einsums, {len(graph.edges)} edges"]
    kinds = {e.name: e.kind for e in cascade.einsums}
    for node in graph.nodes:
        outs = [e for e in graph.edges if e.src == node]
        tag = "" if kinds[node] == "compute" else f" ({kinds[node]})"
        if not outs:
            lines.append(f"  {node}{tag}")
        for edge in outs:
            carried = f"  [carried by {edge.carried_by}]" if edge.carried_by else ""
            lines.append(f"  {node}{tag} -> {edge.dst}  via {edge.tensor}{carried}")
    recs = recurrences(cascade, graph)
    lines.append(
        "recurrences (strongly connected components):"
        if recs
        else "recurrences: none (the graph is acyclic)"
    )
    for rec in recs:
        lines.append(f"  {{{', '.join(rec.einsums)}}} carried by {', '.join(rec.carried_by)}")
    return "\n".join(lines)


def to_dot(cascade: Cascade) -> str:
    graph = dependency_graph(cascade)
    kinds = {e.name: e.kind for e in cascade.einsums}
    lines = [f'digraph "{cascade.name}" {{', "  rankdir=TB;", "  node [shape=box];"]
    for i, rec in enumerate(recurrences(cascade, graph)):
        lines.append(
            f'  subgraph "cluster_{i}" {{ label="carried by {", ".join(rec.carried_by)}";'
            f" style=dashed; {'; '.join(chr(34) + n + chr(34) for n in rec.einsums)}; }}"
        )
    for node in graph.nodes:
        style = "" if kinds[node] == "compute" else " [style=dotted]"
        lines.append(f'  "{node}"{style};')
    for edge in graph.edges:
        attrs = [f'label="{edge.tensor}"']
        if edge.carried_by:
            attrs += ["style=dashed", "constraint=false", f'xlabel="{edge.carried_by}"']
        lines.append(f'  "{edge.src}" -> "{edge.dst}" [{", ".join(attrs)}];')
    lines.append("}")
    return "\n".join(lines)
