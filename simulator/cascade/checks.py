"""Semantic checks of a cascade's statements: raw statements -> checked Einsums.

Names (declared tensors, ranks and index variables), rank agreement between accesses and
declarations, affine indices, the order of the statements (a tensor is produced before it
is read, except a recurrence's previous step), reductions and iteration (`until`,
iterative ranks), partitions and shapes; names read as numbers (an extent `E`, an index
variable `m` the Einsum iterates). Every problem is a :class:`SpecError` at the
file, line and column of the offending text.
"""

from __future__ import annotations

from typing import Any

from simulator.cascade.ir import (
    CANONICAL_REDUCE,
    Access,
    Cascade,
    Einsum,
    Expr,
    IBin,
    IInt,
    Index,
    IndexPos,
    ISym,
    IVar,
    Num,
    Op,
    Operator,
    Read,
    Size,
    TensorDecl,
    VarValue,
    expr_reads,
    expr_values,
    index_str,
    index_syms,
    index_vars,
    rank_of,
    reads_previous_step,
)
from simulator.cascade.transform import RawStatement, expand
from simulator.support.errors import Loc, SpecError


def _affine_terms(ix: Index, loc: Loc) -> tuple[list[tuple[str, tuple[Any, ...]]], list[Any]]:
    """Split an index into `var * coefficient` terms and constant terms; reject non-affine."""
    if isinstance(ix, IVar):
        return [(ix.name, ())], []
    if isinstance(ix, IInt | ISym):
        return [], [ix]
    if ix.op in ("+", "-"):
        lt, lc = _affine_terms(ix.left, loc)
        rt, rc = _affine_terms(ix.right, loc)
        if ix.op == "-" and rt:
            raise SpecError(f"index '{index_str(ix)}' subtracts a variable (not supported)", loc)
        return lt + rt, lc + rc
    # product: at most one side may hold a variable
    lt, lc = _affine_terms(ix.left, loc)
    rt, rc = _affine_terms(ix.right, loc)
    if lt and rt:
        raise SpecError(f"index '{index_str(ix)}' multiplies two variables (not affine)", loc)
    if (lt and lc) or (rt and rc):
        raise SpecError(
            f"index '{index_str(ix)}' is too complex; write it as a sum of variable*shape terms",
            loc,
        )
    if lt:
        return [(v, c + tuple(rc)) for v, c in lt], []
    if rt:
        return [(v, c + tuple(lc)) for v, c in rt], []
    return [], [ix]


class Checker:
    """Turns raw statements into Einsums, checking names, ranks, order and iteration."""

    def __init__(
        self,
        name: str,
        description: str,
        source: str,
        decls: tuple[TensorDecl, ...],
        shapes: tuple[tuple[str, int], ...],
        ops: dict[str, Operator],
        statements: list[RawStatement],
        shape_locs: tuple[tuple[str, Loc], ...] = (),
    ) -> None:
        self.name, self.description, self.source = name, description, source
        self.decls = {d.name: d for d in decls}
        self.decl_order = decls
        self.shapes = shapes
        self.shape_locs = shape_locs
        self.ops = ops
        self.statements = statements
        self.declared_ranks = {r for d in decls for r in d.ranks}
        # Names of `shapes:`; one that is no rank may still be a size parameter of a filter.
        self.shape_names = {r for r, _ in shapes}
        self.filter_syms: set[str] = set()
        self.value_syms: set[str] = set()  # extents used as numbers in expressions
        self.partitions: dict[str, tuple[str, ...]] = {}
        self.partition_locs: dict[str, Loc] = {}
        self.offset_indices: list[tuple[Access, int, bool]] = []

    # ---- helpers ----
    def known_rank(self, rank: str) -> bool:
        return rank in self.declared_ranks or any(rank in c for c in self.partitions.values())

    def check_access(self, access: Access, is_output: bool) -> None:
        decl = self.decls.get(access.tensor)
        if decl is None:
            raise SpecError(
                f"unknown tensor '{access.tensor}' (declare it under einsum.declaration)",
                access.loc,
            )
        if len(access.indices) != len(decl.ranks):
            raise SpecError(
                f"'{access.tensor}' has {len(decl.ranks)} rank(s) "
                f"[{', '.join(decl.ranks)}] but is indexed with "
                f"{len(access.indices)}",
                access.loc,
            )
        for pos, (ix, rank) in enumerate(zip(access.indices, decl.ranks, strict=True)):
            self.check_index(access, pos, ix, rank, is_output)

    def check_index(
        self, access: Access, pos: int, ix: IndexPos, rank: str, is_output: bool
    ) -> None:
        loc = access.loc
        terms, consts = _affine_terms(ix.expr, loc)
        # a split's parts are the ranks of its own variables (`n*S + s`: S is s's rank, named
        # by this very index where no tensor declares it)
        own = {rank_of(v) for v in index_vars(ix.expr)} if len(terms) > 1 else set()
        for sym in index_syms(ix.expr):
            if not self.known_rank(sym) and sym not in own:
                raise SpecError(
                    f"undeclared rank '{sym}' in index '{index_str(ix.expr)}' of '{access.tensor}'",
                    loc,
                )
        if ix.filter is not None:
            if is_output:
                raise SpecError(f"a filter is not allowed on the output '{access.tensor}'", loc)
            for side in (ix.filter.left, ix.filter.right):
                _affine_terms(side, loc)
                for sym in index_syms(side):
                    if not self.known_rank(sym) and sym not in self.shape_names:
                        raise SpecError(f"undeclared rank '{sym}' in filter '{ix.filter}'", loc)
                    self.filter_syms.add(sym)
                for var in index_vars(side):
                    if not self.known_rank(rank_of(var)):
                        raise SpecError(
                            f"undeclared rank '{rank_of(var)}' (variable '{var}') "
                            f"in filter '{ix.filter}'",
                            loc,
                        )
        if not terms:
            for c in consts:
                if isinstance(c, ISym) and c.name != rank:
                    raise SpecError(
                        f"constant index '{c.name}' at rank '{rank}' of "
                        f"'{access.tensor}': a rank used with two different shapes "
                        f"('{c.name}' and '{rank}')",
                        loc,
                    )
            return
        if len(terms) == 1:
            var, coef = terms[0]
            if coef:
                raise SpecError(
                    f"index '{index_str(ix.expr)}' of '{access.tensor}' scales a "
                    "variable; use a partitioned index like m1*M0 + m0",
                    loc,
                )
            if not self.known_rank(rank_of(var)):
                raise SpecError(
                    f"undeclared rank '{rank_of(var)}' (variable '{var}' in '{access}')", loc
                )
            if rank_of(var) != rank:
                raise SpecError(
                    f"variable '{var}' ranges over rank '{rank_of(var)}' but indexes "
                    f"rank '{rank}' of '{access.tensor}': a rank used with two "
                    f"different shapes",
                    loc,
                )
            if consts:
                # `r+1`: the output of an iterative Einsum, or a read of the current step of an
                # iterative tensor; both are checked once iterative tensors are known.
                self.offset_indices.append((access, pos, is_output))
            return
        # Partitioned index: m1*M0 + m0 (outer first), coefficients = product of inner extents.
        if is_output:
            raise SpecError(
                f"output index '{index_str(ix.expr)}' of '{access.tensor}' must be a "
                "variable; split ranks on the right-hand side",
                loc,
            )
        if consts:
            raise SpecError(f"partitioned index '{index_str(ix.expr)}' has a constant term", loc)
        comps: list[str] = []
        for var, _ in terms:
            comp = rank_of(var)
            if not comp[0].isalpha():
                raise SpecError(f"bad variable '{var}'", loc)
            comps.append(comp)
        if len(set(comps)) != len(comps):
            raise SpecError(f"partitioned index '{index_str(ix.expr)}' repeats a variable", loc)
        order = sorted(range(len(terms)), key=lambda i: -len(terms[i][1]))
        comps = [comps[i] for i in order]
        for k, i in enumerate(order):
            inner = sorted(comps[k + 1 :])
            coef = terms[i][1]
            if any(not isinstance(c, ISym) for c in coef) or sorted(c.name for c in coef) != inner:
                expected = " + ".join(
                    "*".join([terms[j][0]] + comps[kk + 1 :]) for kk, j in enumerate(order)
                )
                raise SpecError(
                    f"partitioned index '{index_str(ix.expr)}' of rank '{rank}' must "
                    f"read {expected}",
                    loc,
                )
        existing = self.partitions.get(rank)
        if existing is not None and existing != tuple(comps):
            raise SpecError(
                f"rank '{rank}' is split as {'x'.join(comps)} here but as "
                f"{'x'.join(existing)} at {self.partition_locs[rank]}",
                loc,
            )
        if rank in comps:
            raise SpecError(f"rank '{rank}' cannot be a component of itself", loc)
        self.partitions[rank] = tuple(comps)
        self.partition_locs.setdefault(rank, loc)

    # ---- main ----
    def build(self) -> Cascade:
        expanded: list[tuple[RawStatement, Expr]] = []
        for st in self.statements:
            expanded.append((st, expand(st.expr, self.ops)))
        # Pass 1: accesses, partitions, iterative outputs.
        iterative_tensors: dict[str, tuple[int, str, Loc]] = {}
        for st, expr in expanded:
            self.check_access(st.output, is_output=True)
            for acc in expr_reads(expr):
                if not self._may_be_value(acc):
                    self.check_access(acc, is_output=False)
            for pos, ix in enumerate(st.output.indices):
                if isinstance(ix.expr, IBin):
                    terms, consts = _affine_terms(ix.expr, st.output.loc)
                    if not (
                        len(terms) == 1
                        and len(consts) == 1
                        and ix.expr.op == "+"
                        and isinstance(consts[0], IInt)
                        and consts[0].value == 1
                    ):
                        raise SpecError(
                            f"output index '{index_str(ix.expr)}' must be a variable,"
                            " 'var+1' (iterative) or a constant",
                            st.output.loc,
                        )
                    var = terms[0][0]
                    prev = iterative_tensors.get(st.output.tensor)
                    if prev is not None:
                        raise SpecError(
                            f"iterative tensor '{st.output.tensor}' is produced "
                            f"twice (also at {prev[2]})",
                            st.loc,
                        )
                    iterative_tensors[st.output.tensor] = (pos, var, st.loc)
        for acc, pos, is_output in self.offset_indices:
            ix = acc.indices[pos].expr
            plus_one = (
                isinstance(ix, IBin)
                and ix.op == "+"
                and isinstance(ix.left, IVar)
                and ix.right == IInt(1)
            )
            if is_output:
                continue  # checked above
            it = iterative_tensors.get(acc.tensor)
            if not plus_one or it is None or it[0] != pos or it[1] != ix.left.name:
                raise SpecError(
                    f"index '{index_str(ix)}' of '{acc.tensor}': an offset index is "
                    "only allowed as 'r+1' on the iterative rank of an iterative "
                    "tensor",
                    acc.loc,
                )
        for rank in list(self.partitions):
            if rank not in self.declared_ranks:
                raise SpecError(f"undeclared rank '{rank}'", self.partition_locs[rank])
        self._check_partition_cycles()

        # Extents and index variables used as numbers (`S[p] / E`, `SLOPE * (m - p)`) once
        # the partitions are known.
        expanded = [(st, self._values(expr)) for st, expr in expanded]

        # Pass 2: build Einsums.
        einsums: list[Einsum] = []
        names: dict[str, Loc] = {}
        stops: dict[str, tuple[str, Loc]] = {}
        for st, expr in expanded:
            e = self._einsum(st, expr, iterative_tensors, stops)
            if e.name in names:
                raise SpecError(
                    f"Einsum name '{e.name}' is used twice (first at {names[e.name]});"
                    " give one a label, 'NAME: ...'",
                    st.loc,
                )
            names[e.name] = e.loc
            einsums.append(e)
        self._check_producers(einsums, iterative_tensors, stops)
        cascade = Cascade(
            name=self.name,
            description=self.description,
            path=self.source,
            tensors=self.decl_order,
            einsums=tuple(einsums),
            operators=tuple(self.ops.values()),
            partitions=tuple(sorted(self.partitions.items())),
            iterative=tuple(sorted((v, b) for v, (b, _) in stops.items())),
            shapes=self.shapes,
            shape_locs=self.shape_locs,
            params=self._size_parameters(),
        )
        for rank, _ in self.shapes:
            if not (self.known_rank(rank)) and rank not in cascade.params:
                raise SpecError(f"shapes: unknown rank '{rank}'", cascade.shape_loc(rank))
        return cascade

    def _size_parameters(self) -> tuple[str, ...]:
        """Names of `shapes:` that are no rank but appear in a filter (a window `W`) or as a
        number in an expression: they take a value like an extent. Any other unknown name
        stays an error (see `build`)."""
        used = self.filter_syms | self.value_syms
        return tuple(r for r, _ in self.shapes if not self.known_rank(r) and r in used)

    def _may_be_value(self, acc: Access) -> bool:
        """A bare name that is no tensor: perhaps an extent (upper-case) or an index variable
        (lower-case) used as a number, decided by `_values` once the partitions are known."""
        return not acc.indices and acc.tensor not in self.decls

    def _values(self, expr: Expr) -> Expr:
        """Reads of extents (`E` in `S[p] / E`: a rank, a partition component or a name of
        `shapes:`) become :class:`Size`, reads of index variables (`m` in `SLOPE * (m - p)`)
        :class:`VarValue`; any other undeclared upper-case name is an unknown tensor."""
        if isinstance(expr, Read) and self._may_be_value(expr.access):
            acc = expr.access
            name = acc.tensor
            if not name[:1].isupper():
                if not self.known_rank(rank_of(name)):
                    raise SpecError(
                        f"'{name}' used as a value is an index variable, but its rank "
                        f"'{rank_of(name)}' is not declared (a tensor's name is upper-case)",
                        acc.loc,
                    )
                return VarValue(name, acc.loc)
            if self.known_rank(name) or name in self.shape_names:
                self.value_syms.add(name)
                return Size(name)
            self.check_access(acc, is_output=False)
        if isinstance(expr, Op):
            return Op(expr.name, tuple(self._values(a) for a in expr.args))
        return expr

    def _check_partition_cycles(self) -> None:
        for rank in self.partitions:
            seen = {rank}
            stack = list(self.partitions[rank])
            while stack:
                comp = stack.pop()
                if comp in seen:
                    raise SpecError(
                        f"rank '{rank}' is partitioned into itself", self.partition_locs[rank]
                    )
                seen.add(comp)
                stack += list(self.partitions.get(comp, ()))

    def _einsum(
        self,
        st: RawStatement,
        expr: Expr,
        iterative_tensors: dict[str, tuple[int, str, Loc]],
        stops: dict[str, tuple[str, Loc]],
    ) -> Einsum:
        out = st.output
        out_vars = list(out.vars())
        iterative_var = None
        it = iterative_tensors.get(out.tensor)
        is_init = False
        if it is not None:
            pos, var, _ = it
            ix = out.indices[pos].expr
            if isinstance(ix, IBin):
                iterative_var = var
            elif isinstance(ix, IInt) and ix.value == 0:
                is_init = True
            else:
                raise SpecError(
                    f"iterative tensor '{out.tensor}' can only be written at index 0 "
                    f"(initialisation) or {var}+1",
                    out.loc,
                )
        elif any(isinstance(ix.expr, IInt | ISym) for ix in out.indices):
            raise SpecError(
                f"constant output index in '{out}': only iterative tensors "
                "(written elsewhere as T[r+1, ...]) have an initialisation",
                out.loc,
            )
        read_vars: list[str] = []
        for acc in expr_reads(expr):
            read_vars += [v for v in acc.vars() if v not in read_vars]
        iteration = tuple(out_vars + [v for v in read_vars if v not in out_vars])
        reduced = tuple(v for v in read_vars if v not in out_vars)
        for value in expr_values(expr):
            if value.name not in iteration:
                raise SpecError(
                    f"index variable '{value.name}' used as a value is not a variable of this "
                    f"Einsum: it must index its output or one of its reads "
                    f"(iterated: {', '.join(iteration) or 'none'})",
                    value.loc,
                )
        reduce_op = "sum"
        if st.reduction is not None:
            op_name, rvars, rloc = st.reduction
            if op_name in CANONICAL_REDUCE:
                reduce_op = CANONICAL_REDUCE[op_name]
            elif op_name in self.ops:
                op = self.ops[op_name]
                if len(op.params) != 2 or op.identity is None:
                    raise SpecError(
                        f"operator '{op_name}' cannot reduce: a reduction operator "
                        "takes 2 arguments and declares an 'identity'",
                        rloc,
                    )
                reduce_op = op_name
            else:
                raise SpecError(
                    f"unknown reduction operator '{op_name}' (known: "
                    f"{', '.join(sorted(set(CANONICAL_REDUCE) | set(self.ops)))})",
                    rloc,
                )
            for v in rvars:
                if v not in iteration:
                    raise SpecError(f"'{v}' is reduced but is not a variable of this Einsum", rloc)
                if v in out_vars:
                    raise SpecError(f"'{v}' is reduced but appears in the output '{out}'", rloc)
            missing = [v for v in reduced if v not in rvars]
            if missing:
                raise SpecError(
                    f"'{', '.join(missing)}' absent from the output must be listed "
                    f"in the reduction '{op_name}({', '.join(rvars)})'",
                    rloc,
                )
        if st.until is not None:
            cond = st.until
            if iterative_var is None:
                raise SpecError(
                    "'until' belongs to an iterative Einsum (output index 'r+1')", st.until_loc
                )
            if not (
                cond.op == "=="
                and isinstance(cond.left, IVar)
                and cond.left.name == iterative_var
                and isinstance(cond.right, IInt | ISym)
            ):
                raise SpecError(
                    f"stopping condition must read '{iterative_var} == BOUND', got '{cond}'",
                    st.until_loc,
                )
            bound = index_str(cond.right)
            if isinstance(cond.right, ISym) and not self.known_rank(cond.right.name):
                raise SpecError(f"undeclared rank '{bound}' in stopping condition", st.until_loc)
            prev = stops.get(iterative_var)
            if prev is not None and prev[0] != bound:
                raise SpecError(
                    f"iterative rank '{iterative_var}' stops at '{bound}' here but at "
                    f"'{prev[0]}' at {prev[1]}",
                    st.until_loc,
                )
            stops[iterative_var] = (bound, st.until_loc or st.loc)
        if is_init:
            kind = "init"
        elif isinstance(expr, Read) and st.reduction is None and not reduced:
            kind = "copy"
        elif isinstance(expr, Num | Size):
            kind = "init" if it is not None else "copy"
        else:
            kind = "compute"
        name = st.label or (f"{out.tensor}_init" if is_init else out.tensor)
        text = (
            f"{out} = {expr}"
            if st.reduction is None
            else (f"{out} = {expr} :: {reduce_op}({', '.join(reduced)})")
        )
        return Einsum(
            name=name,
            output=out,
            expr=expr,
            reduce_op=reduce_op,
            reduced=reduced,
            iteration=iteration,
            iterative=iterative_var,
            until=st.until,
            kind=kind,
            text=text,
            loc=st.loc,
        )

    def _check_producers(
        self,
        einsums: list[Einsum],
        iterative_tensors: dict[str, tuple[int, str, Loc]],
        stops: dict[str, tuple[str, Loc]],
    ) -> None:
        main: dict[str, int] = {}
        init: dict[str, int] = {}
        for i, e in enumerate(einsums):
            table = init if e.kind == "init" else main
            t = e.output.tensor
            if t in table:
                other = einsums[table[t]]
                raise SpecError(
                    f"tensor '{t}' is produced twice (also by '{other.name}' at {other.loc})", e.loc
                )
            table[t] = i
        for t, (_pos, var, loc) in iterative_tensors.items():
            if t not in init:
                raise SpecError(
                    f"iterative tensor '{t}' (rank '{var}') has no initialisation; "
                    f"add e.g. '{t}[0, ...] = 0'",
                    loc,
                )
            if var not in stops:
                raise SpecError(
                    f"iterative rank '{var}' has no stopping condition; add "
                    f"'until {var} == {rank_of(var)}' to its Einsum",
                    loc,
                )
        for t, i in init.items():
            if t not in iterative_tensors:
                raise SpecError(
                    f"'{t}' is initialised but never iterated (no '{t}[r+1, ...]')", einsums[i].loc
                )
        # Dependency cycles (edges that are not carried by an iterative rank).
        edges: dict[int, list[tuple[int, str]]] = {i: [] for i in range(len(einsums))}
        for j, e in enumerate(einsums):
            for acc in e.reads():
                t = acc.tensor
                if t not in main and t not in init:
                    continue
                carried = _is_carried_read(e, acc, iterative_tensors.get(t))
                if carried and t in init:
                    edges[init[t]].append((j, t))
                elif t in main:
                    edges[main[t]].append((j, t))
        cycle = _find_cycle(edges)
        if cycle:
            path = " -> ".join(einsums[i].name for i in cycle + [cycle[0]])
            raise SpecError(
                f"dependency cycle: {path} (only an iterative rank, 'T[r+1] = f(T[r])',"
                " may carry a value around a loop)",
                einsums[cycle[0]].loc,
            )
        # Reads must follow production in file order (the order is an execution order).
        for j, e in enumerate(einsums):
            for acc in e.reads():
                t = acc.tensor
                if t not in main and t not in init:
                    continue  # an input of the cascade
                carried = _is_carried_read(e, acc, iterative_tensors.get(t))
                if carried:
                    if init.get(t, len(einsums)) > j:
                        raise SpecError(
                            f"'{e.name}' reads '{acc}' (previous step) before '{t}' is initialised",
                            acc.loc,
                        )
                    if e.iterative is None and not _iterates(e, iterative_tensors[t][1]):
                        raise SpecError(
                            f"'{acc}' reads a step of iterative rank "
                            f"'{iterative_tensors[t][1]}' outside its loop",
                            acc.loc,
                        )
                elif main.get(t, len(einsums)) >= j and t in main:
                    producer = einsums[main[t]]
                    raise SpecError(
                        f"'{t}' is read before it is produced (by '{producer.name}' "
                        f"at {producer.loc})",
                        acc.loc,
                    )
                elif t not in main:
                    raise SpecError(
                        f"'{acc}' reads beyond the initialisation of '{t}', which is "
                        "never iterated",
                        acc.loc,
                    )


def _iterates(e: Einsum, var: str) -> bool:
    return var in e.iteration


def _is_carried_read(e: Einsum, acc: Access, iterative: tuple[int, str, Loc] | None) -> bool:
    """A read `T[r, ...]` of an iterative tensor at the plain variable, not reduced by `e`:
    the previous step (see :func:`reads_previous_step`)."""
    if iterative is None:
        return False
    pos, var, _ = iterative
    return reads_previous_step(acc, pos, var, e.reduced)


def _find_cycle(edges: dict[int, list[tuple[int, str]]]) -> list[int]:
    """Some cycle of the graph (nodes in order), or [] if it is acyclic."""
    color = dict.fromkeys(edges, 0)
    parent: dict[int, int] = {}
    for root in sorted(edges):
        if color[root]:
            continue
        stack = [(root, iter(sorted(edges[root])))]
        color[root] = 1
        while stack:
            node, children = stack[-1]
            advanced = False
            for child, _t in children:
                if color[child] == 0:
                    color[child] = 1
                    parent[child] = node
                    stack.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if color[child] == 1:
                    cycle = [node]
                    while cycle[-1] != child:
                        cycle.append(parent[cycle[-1]])
                    return list(reversed(cycle))
            if not advanced:
                color[node] = 2
                stack.pop()
    return []
