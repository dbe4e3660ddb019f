"""The cascade IR: small immutable classes for a cascade of Extended Einsums.

A cascade is a list of Einsums over declared tensors. Each tensor is declared by its ranks
(upper-case names, `QK: [M, P]`); an Einsum indexes ranks with lower-case variables whose
upper-case spelling is the rank they range over (`m1` ranges over rank `M1`). The IR is
built and checked by :mod:`simulator.cascade.parse`; analyses are functions from it.

EDGE extensions carried here:

* index expressions (`m1*M0 + m0`, `m1+1`, `0`, `M1`) -- :class:`Index` trees;
* rank filters (`A[k : k <= i]`) -- :class:`Cond` on an index position;
* explicit reductions with another operator (`:: max(m0)`) -- :attr:`Einsum.reduce_op`;
* iterative ranks (`RM[m1+1, p] = ... until m1 == M1`, initialised by `RM[0, p] = -inf`);
* index variables read as values (`SLOPE * (m - p)`) -- :class:`VarValue`;
* element-wise functions by name (`tanh`, `sigmoid`, ...) -- the table :data:`FUNCTIONS`.
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from simulator.support.errors import Loc
from simulator.support.hashing import HashedOnce

# --------------------------------------------------------------------------------------
# Index expressions (inside brackets): integers, shape symbols and variables.


@dataclass(frozen=True)
class IInt:
    value: int


@dataclass(frozen=True)
class ISym:
    """An upper-case shape symbol (`M0`, `M1`): the extent of that rank."""

    name: str


@dataclass(frozen=True)
class IVar:
    """A lower-case index variable (`m1`): ranges over rank `M1`."""

    name: str


@dataclass(frozen=True)
class IBin:
    op: str  # "+", "-", "*"
    left: Index
    right: Index


Index = IInt | ISym | IVar | IBin


def index_vars(ix: Index) -> tuple[str, ...]:
    """Variables of an index expression, in order of first appearance."""
    if isinstance(ix, IVar):
        return (ix.name,)
    if isinstance(ix, IBin):
        seen = list(index_vars(ix.left))
        seen += [v for v in index_vars(ix.right) if v not in seen]
        return tuple(seen)
    return ()


def index_syms(ix: Index) -> tuple[str, ...]:
    if isinstance(ix, ISym):
        return (ix.name,)
    if isinstance(ix, IBin):
        return index_syms(ix.left) + index_syms(ix.right)
    return ()


def index_str(ix: Index) -> str:
    if isinstance(ix, IInt):
        return str(ix.value)
    if isinstance(ix, ISym | IVar):
        return ix.name
    left, right = index_str(ix.left), index_str(ix.right)
    return f"{left}*{right}" if ix.op == "*" else f"{left}{ix.op}{right}"


def eval_index(ix: Index, env: Mapping[str, object]):
    """Value of an index expression; `env` maps variables and shape symbols to ints or arrays."""
    if isinstance(ix, IInt):
        return ix.value
    if isinstance(ix, ISym | IVar):
        return env[ix.name]
    left, right = eval_index(ix.left, env), eval_index(ix.right, env)
    if ix.op == "+":
        return left + right
    if ix.op == "-":
        return left - right
    return left * right


@dataclass(frozen=True)
class Cond:
    """A comparison between index expressions: a rank filter or a stopping condition."""

    left: Index
    op: str  # <=, <, >=, >, ==, !=
    right: Index

    def __str__(self) -> str:
        return f"{index_str(self.left)} {self.op} {index_str(self.right)}"


@dataclass(frozen=True)
class IndexPos:
    """One index position of an access: the expression and an optional filter."""

    expr: Index
    filter: Cond | None = None

    def __str__(self) -> str:
        text = index_str(self.expr)
        return f"{text} : {self.filter}" if self.filter is not None else text


# --------------------------------------------------------------------------------------
# Value expressions (right-hand sides).


@dataclass(frozen=True)
class Access:
    """A read or write of a tensor at index positions (empty for a scalar tensor)."""

    tensor: str
    indices: tuple[IndexPos, ...]
    loc: Loc = field(compare=False, default=Loc("<cascade>"))

    def vars(self) -> tuple[str, ...]:
        out: list[str] = []
        for pos in self.indices:
            names = list(index_vars(pos.expr))
            if pos.filter is not None:
                names += index_vars(pos.filter.left) + index_vars(pos.filter.right)
            for v in names:
                if v not in out:
                    out.append(v)
        return tuple(out)

    def __str__(self) -> str:
        if not self.indices:
            return self.tensor
        return f"{self.tensor}[{', '.join(str(i) for i in self.indices)}]"


@dataclass(frozen=True)
class Num:
    value: float

    def __str__(self) -> str:
        if self.value == float("inf"):
            return "inf"
        if self.value == float("-inf"):
            return "-inf"
        return repr(self.value) if self.value != int(self.value) else str(int(self.value))


@dataclass(frozen=True)
class Read:
    access: Access

    def __str__(self) -> str:
        return str(self.access)


@dataclass(frozen=True)
class Op:
    """A map action: `add`, `sub`, `mul`, `div`, `neg` or a function (`exp`, `max`, ...)."""

    name: str
    args: tuple[Expr, ...]

    def __str__(self) -> str:
        infix = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
        if self.name in infix:
            return f"({self.args[0]} {infix[self.name]} {self.args[1]})"
        if self.name == "neg":
            return f"-{self.args[0]}"
        return f"{self.name}({', '.join(str(a) for a in self.args)})"


@dataclass(frozen=True)
class Size:
    """A rank's extent (or a size parameter) used as a number: `MU[p] = S[p] / E`. It takes
    the extent the shapes give, so `--shape E=...` changes it like any other."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class VarValue(Size):
    """An index variable used as a value (`SLOPE * (m - p)`, ALiBi's distance): at each
    point of the Einsum's iteration space, the variable's value there (0 .. extent-1; an
    iterative variable's step). The PE's loop counter holds it, so it reads no tensor and
    costs nothing; the arithmetic around it counts as usual (`m - p` is one add).

    A subclass of :class:`Size` because both are a name read as a number, and what prints
    or walks an expression (the writer, the rewrite rules) treats them alike; only the
    value differs -- an extent is one number per cascade, an index one per point, so
    :func:`bind_sizes` leaves it for the evaluator. The checks make sure the variable is
    one the Einsum iterates (it indexes its output or one of its reads)."""

    loc: Loc = field(compare=False, default=Loc("<cascade>"))


Expr = Num | Read | Op | Size  # Size includes VarValue


def bind_sizes(expr: Expr, shapes: Mapping[str, int]) -> Expr:
    """The expression with every extent (:class:`Size`) replaced by its value (a
    :class:`Num`); index values (:class:`VarValue`) stay, one per point."""
    if isinstance(expr, VarValue):
        return expr
    if isinstance(expr, Size):
        return Num(float(shapes[expr.name]))
    if isinstance(expr, Op):
        return Op(expr.name, tuple(bind_sizes(a, shapes) for a in expr.args))
    return expr


def is_constant(expr: Expr) -> bool:
    """Numbers and extents alone (`1 / CAP`, `E * E`): the same value at every point of an
    Einsum, so computed once rather than per point (no tensor read, no index value)."""
    if isinstance(expr, VarValue | Read):
        return False
    if isinstance(expr, Op):
        return all(is_constant(a) for a in expr.args)
    return True


def expr_values(expr: Expr) -> Iterator[VarValue]:
    """Every index variable the expression uses as a value, left to right."""
    if isinstance(expr, VarValue):
        yield expr
    elif isinstance(expr, Op):
        for arg in expr.args:
            yield from expr_values(arg)


def expr_reads(expr: Expr) -> Iterator[Access]:
    """Every tensor access of an expression, left to right."""
    if isinstance(expr, Read):
        yield expr.access
    elif isinstance(expr, Op):
        for arg in expr.args:
            yield from expr_reads(arg)


# --------------------------------------------------------------------------------------
# Element-wise functions: what the language knows by name.
#
# The language is hardware-independent: it accepts every function of this table, whose
# numpy implementation is what `evaluate` computes. `ops` counts each call under its own
# kind (its name); whether an array can run a kind, and at what cost, is the
# architecture's `operations:` table (`Array.op(kind)`), never this one.


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1.0 / np.sqrt(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp(-log(1 + exp(-x))): no overflow and full relative precision at both tails.
    return np.exp(-np.logaddexp(0.0, -x))


def _silu(x: np.ndarray) -> np.ndarray:
    return x * _sigmoid(x)


_ERF = np.vectorize(math.erf, otypes=[float])  # numpy has no erf; math.erf is exact


def _erf(x: np.ndarray) -> np.ndarray:
    return _ERF(x)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


_GELU_TANH_SCALE = math.sqrt(2.0 / math.pi)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(_GELU_TANH_SCALE * (x + 0.044715 * x**3)))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


@dataclass(frozen=True)
class Function:
    """An element-wise function of the language: its arity, what it computes (`numpy`,
    which the evaluator runs) and its definition in words (`doc`, listed in
    cascades/README.md). `max` and `min` take two or more arguments (folded pairwise)."""

    name: str
    arity: int
    numpy: Callable[..., np.ndarray]
    doc: str


FUNCTIONS: Mapping[str, Function] = types.MappingProxyType(
    {
        f.name: f
        for f in (
            Function("exp", 1, np.exp, "e^x"),
            Function("log", 1, np.log, "natural logarithm"),
            Function("sqrt", 1, np.sqrt, "square root"),
            Function("abs", 1, np.abs, "|x|"),
            Function("max", 2, np.maximum, "the larger of a and b"),
            Function("min", 2, np.minimum, "the smaller of a and b"),
            Function("rsqrt", 1, _rsqrt, "1 / sqrt(x)"),
            Function("tanh", 1, np.tanh, "hyperbolic tangent"),
            Function("sigmoid", 1, _sigmoid, "1 / (1 + exp(-x))"),
            Function("silu", 1, _silu, "x * sigmoid(x) (swish)"),
            Function("erf", 1, _erf, "the error function"),
            Function("gelu", 1, _gelu, "x * (1 + erf(x / sqrt(2))) / 2, the exact GELU"),
            Function(
                "gelu_tanh",
                1,
                _gelu_tanh,
                "x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) / 2, GELU's tanh approximation",
            ),
            Function("softplus", 1, _softplus, "log(1 + exp(x))"),
        )
    }
)

# Arithmetic operators (the grammar's `+ - * /` and unary `-`): the kind each counts as.
ARITHMETIC_KIND = {"add": "add", "sub": "add", "neg": "add", "mul": "mul", "div": "divide"}


def kind_of(op: str) -> str:
    """The operation kind a map action counts as: a function is its own kind (`tanh`),
    an arithmetic operator its unit's (`sub` is an `add`)."""
    return ARITHMETIC_KIND.get(op, op)


# Reduction operators: name -> (primitive map kind, identity).
REDUCE_OPS = {
    "sum": ("add", 0.0),
    "add": ("add", 0.0),
    "prod": ("mul", 1.0),
    "mul": ("mul", 1.0),
    "max": ("max", float("-inf")),
    "min": ("min", float("inf")),
}
CANONICAL_REDUCE = {
    "sum": "sum",
    "add": "sum",
    "prod": "prod",
    "mul": "prod",
    "max": "max",
    "min": "min",
}


# --------------------------------------------------------------------------------------
# Cascade structure.


@dataclass(frozen=True)
class TensorDecl:
    name: str
    ranks: tuple[str, ...]
    loc: Loc = field(compare=False, default=Loc("<cascade>"))


@dataclass(frozen=True)
class Operator:
    """A user-defined map (or binary reduce) operator, expanded inline where it is called."""

    name: str
    params: tuple[str, ...]
    body: Expr
    identity: float | None = None  # needed when used as a reduction
    loc: Loc = field(compare=False, default=Loc("<cascade>"))


@dataclass(frozen=True)
class Einsum(HashedOnce):
    """One Einsum: `output = expr`, reduced over `reduced` variables with `reduce_op`.

    `kind` is `compute` for Einsums that do arithmetic, `init` for the initialisation of an
    iterative tensor (`RM[0, p] = -inf`) and `copy` for data movement without arithmetic
    (the partitioning `BK[e, m1, m0] = K[e, m1*M0 + m0]`).
    """

    name: str
    output: Access
    expr: Expr
    reduce_op: str  # canonical reduce name or a user operator name
    reduced: tuple[str, ...]  # variables absent from the output, reduced with reduce_op
    iteration: tuple[str, ...]  # every variable of the iteration space
    iterative: str | None  # the variable r of an output index `r+1`
    until: Cond | None
    kind: str
    text: str
    loc: Loc = field(compare=False, default=Loc("<cascade>"))

    @property
    def output_vars(self) -> tuple[str, ...]:
        return self.output.vars()

    def reads(self) -> tuple[Access, ...]:
        return self._reads

    __hash__ = HashedOnce.__hash__  # (a frozen dataclass would write its own)

    @functools.cached_property
    def _reads(self) -> tuple[Access, ...]:
        """The Einsum's reads, worked out once (the IR is immutable; planners ask often)."""
        return tuple(expr_reads(self.expr))

    def filters(self) -> tuple[Cond, ...]:
        """The filters on the Einsum's reads; they are ANDed over its iteration space."""
        return self._filters

    @functools.cached_property
    def iteration_ranks(self) -> tuple[str, ...]:
        """The ranks the Einsum iterates (its variables' ranks), in order of appearance."""
        return tuple(dict.fromkeys(rank_of(v) for v in self.iteration))

    @functools.cached_property
    def _filters(self) -> tuple[Cond, ...]:
        return tuple(pos.filter for acc in self.reads() for pos in acc.indices if pos.filter)

    @property
    def keeps_masked_steps(self) -> bool:
        """An iterative Einsum with filters: where they remove a point, the step keeps the
        previous one, so it reads its own previous step even if its expression does not."""
        return self.iterative is not None and bool(self.filters())


@dataclass(frozen=True)
class Reference:
    """What a cascade claims to compute, from its optional `reference:` key
    (`{algorithm: attention, mask: causal}`): `compare FILE --reference` runs the cascade
    against this numpy computation (:mod:`simulator.cascade.references`). Options are
    kept as written, checked against the algorithm's table when the file is read."""

    algorithm: str
    options: tuple[tuple[str, str], ...] = ()
    loc: Loc = field(compare=False, default=Loc("<cascade>"))

    def option(self, key: str, default: str) -> str:
        return dict(self.options).get(key, default)

    def __str__(self) -> str:
        extra = "".join(f", {k}: {v}" for k, v in self.options)
        return f"{self.algorithm}{extra}"


@dataclass(frozen=True)
class Cascade(HashedOnce):
    """A checked cascade.

    `partitions` maps a rank to its components, outer first (`M -> (M1, M0)`); `iterative`
    maps an iterative variable to its stop bound (`m1 -> M1`, from `until m1 == M1`);
    `shapes` holds default rank extents from the file (overridable by the user) and
    `shape_locs` where each is written, so a bad extent is reported at its entry.
    `params` are the size parameters: names of `shapes:` that are no tensor's rank but
    appear in a filter (the window `W` of `Q[e, p : p < m + W]`); they take a value like a
    rank extent (`--shape W=...`) but index nothing. `reference` is the computation the
    file claims to compute, if it names one.
    """

    name: str
    description: str
    path: str
    tensors: tuple[TensorDecl, ...]
    einsums: tuple[Einsum, ...]
    operators: tuple[Operator, ...] = ()
    partitions: tuple[tuple[str, tuple[str, ...]], ...] = ()
    iterative: tuple[tuple[str, str], ...] = ()
    shapes: tuple[tuple[str, int], ...] = ()
    shape_locs: tuple[tuple[str, Loc], ...] = field(default=(), compare=False)
    params: tuple[str, ...] = ()
    reference: Reference | None = None
    # Only in the mapper's view of a cascade (:func:`simulator.cascade.normal.mapping_view`):
    # ranks it added, each sized as another (`PV` as `P`), and inputs it reads under a name
    # of their own, each another input's data (`QV` is `Q`): read once, however named
    tied_ranks: tuple[tuple[str, str], ...] = ()
    input_views: tuple[tuple[str, str], ...] = ()

    __hash__ = HashedOnce.__hash__  # (a frozen dataclass would write its own)

    # ---- lookups (derived, cheap) ----
    def tensor(self, name: str) -> TensorDecl:
        return self._tensor_by_name[name]  # KeyError for an unknown name, as before

    @functools.cached_property
    def _tensor_by_name(self) -> dict[str, TensorDecl]:
        """The declarations by name, built once (a lookup per access of every analysis)."""
        out: dict[str, TensorDecl] = {}
        for decl in self.tensors:
            out.setdefault(decl.name, decl)
        return out

    def shape_loc(self, rank: str) -> Loc:
        """Where the file gives the rank's default extent (else the file itself)."""
        return dict(self.shape_locs).get(rank, Loc(self.path))

    def einsum(self, name: str) -> Einsum:
        return self._einsum_by_name[name]  # KeyError for an unknown name

    @functools.cached_property
    def _einsum_by_name(self) -> dict[str, Einsum]:
        """The Einsums by name, built once (every stage looks them up by name)."""
        out: dict[str, Einsum] = {}
        for e in self.einsums:
            out.setdefault(e.name, e)
        return out

    def shape_names(self) -> frozenset[str]:
        """Every name that takes an extent: declared ranks, partition components and the
        size parameters (what `--shape` may set)."""
        names = {r for t in self.tensors for r in t.ranks} | set(self.params)
        for parent, comps in self.partitions:
            names.add(parent)
            names.update(comps)
        return frozenset(names)

    @property
    def partition_map(self) -> dict[str, tuple[str, ...]]:
        return dict(self.partitions)

    @property
    def iterative_map(self) -> dict[str, str]:
        return dict(self.iterative)

    def producers(self, tensor: str) -> tuple[Einsum, ...]:
        return self._producers_by_tensor.get(tensor, ())

    @functools.cached_property
    def _producers_by_tensor(self) -> dict[str, tuple[Einsum, ...]]:
        out: dict[str, list[Einsum]] = {}
        for e in self.einsums:
            out.setdefault(e.output.tensor, []).append(e)
        return {k: tuple(v) for k, v in out.items()}

    def readers(self, tensor: str) -> tuple[Einsum, ...]:
        """The Einsums reading `tensor`, in cascade order."""
        return self._readers_by_tensor.get(tensor, ())

    @functools.cached_property
    def _readers_by_tensor(self) -> dict[str, tuple[Einsum, ...]]:
        out: dict[str, dict[str, Einsum]] = {}
        for e in self.einsums:
            for a in e.reads():
                out.setdefault(a.tensor, {})[e.name] = e
        return {k: tuple(v.values()) for k, v in out.items()}

    @functools.cached_property
    def inputs(self) -> tuple[str, ...]:
        """Tensors read but never produced, in declaration order."""
        produced = {e.output.tensor for e in self.einsums}
        read = {a.tensor for e in self.einsums for a in e.reads()}
        return tuple(t.name for t in self.tensors if t.name in read and t.name not in produced)

    @functools.cached_property
    def outputs(self) -> tuple[str, ...]:
        """Tensors produced but never read: the results of the cascade."""
        read = {a.tensor for e in self.einsums for a in e.reads()}
        produced = [e.output.tensor for e in self.einsums]
        return tuple(dict.fromkeys(t for t in produced if t not in read))

    def iterative_tensors(self) -> dict[str, tuple[int, str]]:
        """Tensor -> (rank position, variable) of its iterative rank (output index `r+1`)."""
        return dict(self._iterative_tensors)

    @functools.cached_property
    def _iterative_tensors(self) -> dict[str, tuple[int, str]]:
        result: dict[str, tuple[int, str]] = {}
        for e in self.einsums:
            if e.iterative is None:
                continue
            for pos, ix in enumerate(e.output.indices):
                if e.iterative in index_vars(ix.expr):
                    result[e.output.tensor] = (pos, e.iterative)
        return result

    def rank_group(self, rank: str) -> str:
        """The original rank a (possibly partitioned) rank belongs to: `M1 -> M`."""
        for parent, comps in self.partitions:
            if rank in comps:
                return self.rank_group(parent)
        return rank

    def rank_groups(self) -> tuple[str, ...]:
        """The original ranks of the cascade, in declaration order (M, not M1 and M0)."""
        groups: list[str] = []
        for t in self.tensors:
            for r in t.ranks:
                g = self.rank_group(r)
                if g not in groups:
                    groups.append(g)
        return tuple(groups)

    def group_components(self, group: str) -> tuple[str, ...]:
        """Leaf ranks of a rank group: `M -> (M1, M0)`; an unpartitioned rank is its own leaf."""
        parts = self.partition_map.get(group)
        if not parts:
            return (group,)
        leaves: list[str] = []
        for part in parts:
            leaves += self.group_components(part)
        return tuple(leaves)


def reads_previous_step(access: Access, pos: int, var: str, reduced: tuple[str, ...]) -> bool:
    """Does `access` read the previous step of an iterative tensor (rank position `pos`,
    iterative variable `var`) from an Einsum reducing `reduced`?

    `T[r, ...]` at the plain variable is the previous step while `r` is a point of the
    reader's output (`RD[m1+1, p] = ... RD[m1, p]`, `SPD[m1, p] = RD[m1, p] * ...`): the loop
    carries that value. Reduced over `r` (`Y = R[k]`), the read takes every step at once, so
    it depends on the whole recurrence -- it is not carried, and inside the loop it closes a
    real cycle."""
    ix = access.indices[pos].expr
    return isinstance(ix, IVar) and ix.name == var and var not in reduced


def rank_of(var: str) -> str:
    """The rank a variable ranges over: its upper-case spelling (`m1 -> M1`)."""
    return var.upper()
