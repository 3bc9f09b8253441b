"""Tensor expressions: the compute definition of every basic op (a small TE-like IR).

A `Tensor` is a placeholder or the result of a `ComputeOp` whose body is an `Expr` over the
op's axis variables; reductions are a `Reduce` at the top of a body. The polyhedral model
reads accesses from these expressions, code generation turns them into TIR, and
`to_te` rebuilds them as TVM TE for the naive-TE and MetaSchedule baselines.
"""

from __future__ import annotations

import itertools
from typing import Callable, Iterable, Sequence

INDEX_DTYPE = "int32"

# op name -> (arity, result dtype rule): "same" keeps the operand dtype, "bool" compares
ARITH = ("add", "sub", "mul", "div", "floordiv", "floormod", "max", "min", "pow")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
LOGIC = ("and", "or")
UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos",
         "floor", "ceil", "round", "sign", "not", "isnan", "isinf")
BOOL_UNARY = ("isnan", "isinf", "not")
REDUCERS = ("sum", "prod", "max", "min", "argmax", "argmin")

_ids = itertools.count()


class Expr:
    """Base of expressions; Python operators build arithmetic nodes."""

    __slots__ = ("dtype",)
    dtype: str

    def __add__(self, o): return call("add", self, o)
    def __radd__(self, o): return call("add", o, self)
    def __sub__(self, o): return call("sub", self, o)
    def __rsub__(self, o): return call("sub", o, self)
    def __mul__(self, o): return call("mul", self, o)
    def __rmul__(self, o): return call("mul", o, self)
    def __truediv__(self, o): return call("div", self, o)
    def __rtruediv__(self, o): return call("div", o, self)
    def __floordiv__(self, o): return call("floordiv", self, o)
    def __mod__(self, o): return call("floormod", self, o)
    def __neg__(self): return call("neg", self)


class Const(Expr):
    __slots__ = ("value",)

    def __init__(self, value, dtype: str):
        self.value, self.dtype = value, dtype

    def __repr__(self) -> str:
        return repr(self.value)


class Var(Expr):
    """An iteration variable (int32) with its extent; `reduce` marks reduction axes."""

    __slots__ = ("name", "extent", "reduce")

    def __init__(self, name: str, extent: int, reduce: bool = False):
        self.name, self.extent, self.reduce, self.dtype = name, int(extent), reduce, INDEX_DTYPE

    def __repr__(self) -> str:
        return self.name


class Load(Expr):
    __slots__ = ("tensor", "indices")

    def __init__(self, tensor: "Tensor", indices: Sequence[Expr]):
        self.tensor, self.indices, self.dtype = tensor, tuple(indices), tensor.dtype

    def __repr__(self) -> str:
        return f"{self.tensor.name}[{', '.join(map(repr, self.indices))}]"


class Call(Expr):
    """A math op on operands (see ARITH, COMPARE, LOGIC, UNARY)."""

    __slots__ = ("op", "args")

    def __init__(self, op: str, args: Sequence[Expr], dtype: str):
        self.op, self.args, self.dtype = op, tuple(args), dtype

    def __repr__(self) -> str:
        return f"{self.op}({', '.join(map(repr, self.args))})"


class Cast(Expr):
    __slots__ = ("value",)

    def __init__(self, dtype: str, value: Expr):
        self.dtype, self.value = dtype, value

    def __repr__(self) -> str:
        return f"{self.dtype}({self.value!r})"


class Select(Expr):
    """cond ? a : b, evaluated lazily (the untaken branch may index out of bounds)."""

    __slots__ = ("cond", "a", "b")

    def __init__(self, cond: Expr, a: Expr, b: Expr):
        self.cond, self.a, self.b, self.dtype = cond, a, b, a.dtype

    def __repr__(self) -> str:
        return f"select({self.cond!r}, {self.a!r}, {self.b!r})"


class Reduce(Expr):
    """`reducer` over `axes` of `source`; only at the top of a compute body.

    arg-reducers (argmax/argmin) produce the int32 position of the first extreme value
    along their single axis.
    """

    __slots__ = ("reducer", "source", "axes")

    def __init__(self, reducer: str, source: Expr, axes: Sequence[Var]):
        if reducer not in REDUCERS:
            raise ValueError(f"unknown reducer {reducer}")
        self.reducer, self.source, self.axes = reducer, source, tuple(axes)
        self.dtype = "int32" if reducer.startswith("arg") else source.dtype

    def __repr__(self) -> str:
        return f"{self.reducer}({self.source!r}, axes=[{', '.join(a.name for a in self.axes)}])"


# --- tensors and ops --------------------------------------------------------------------------


PHASES = "NCHPW"  # `Tensor.layout` of an image whose columns are split in phases (`padded_phases`)


class Tensor:
    """A placeholder (op None) or the output of a ComputeOp; indexing builds a Load. `layout`
    names what the indices are where the shape alone does not say it (PHASES), else None."""

    __slots__ = ("name", "shape", "dtype", "op", "layout", "__weakref__")

    def __init__(self, name: str, shape: Sequence[int], dtype: str, op: "ComputeOp | None" = None,
                 layout: str | None = None):
        self.name, self.shape, self.dtype, self.op = name, tuple(int(d) for d in shape), dtype, op
        self.layout = layout

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> Load:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise ValueError(f"{self.name} has rank {len(self.shape)}, indexed with {len(indices)}")
        return Load(self, [as_expr(i, INDEX_DTYPE) for i in indices])

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {list(self.shape)}, {self.dtype})"


class ComputeOp:
    """out[axes] = body; the output Tensor is `self.output`."""

    __slots__ = ("name", "axes", "body", "output")

    def __init__(self, name: str, axes: Sequence[Var], body: Expr, layout: str | None = None):
        self.name, self.axes, self.body = name, tuple(axes), body
        self.output = Tensor(name, [a.extent for a in self.axes], body.dtype, self, layout)

    @property
    def reduce(self) -> Reduce | None:
        return self.body if isinstance(self.body, Reduce) else None

    def __repr__(self) -> str:
        return f"{self.name}[{', '.join(a.name for a in self.axes)}] = {self.body!r}"


def placeholder(shape: Sequence[int], dtype: str, name: str) -> Tensor:
    return Tensor(name, shape, dtype)


def fresh(prefix: str) -> str:
    return f"{prefix}{next(_ids)}"


def compute(shape: Sequence[int], fcompute: Callable[..., Expr], name: str, layout: str | None = None) -> Tensor:
    """Tensor of `shape` with out[i...] = fcompute(i...) (`layout`: see `Tensor`)."""
    axes = [Var(f"{name}.i{d}", n) for d, n in enumerate(shape)]
    body = as_expr(fcompute(*axes))
    return ComputeOp(name, axes, body, layout).output


def reduce_axis(extent: int, name: str) -> Var:
    return Var(name, extent, reduce=True)


def reduce(reducer: str, source: Expr, axes: Iterable[Var]) -> Reduce:
    return Reduce(reducer, as_expr(source), list(axes))


# --- construction helpers ---------------------------------------------------------------------


def as_expr(x, dtype: str | None = None) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        return Const(x, "bool")
    if isinstance(x, int):
        return Const(x, dtype or INDEX_DTYPE)
    if isinstance(x, float):
        return Const(x, dtype or "float32")
    raise TypeError(f"cannot use {x!r} in an expression")


def const(value, dtype: str) -> Const:
    if dtype == "bool":
        return Const(bool(value), dtype)
    if dtype.startswith(("int", "uint")):
        return Const(int(value), dtype)
    return Const(float(value), dtype)


def _coerce_pair(a, b) -> tuple[Expr, Expr]:
    if isinstance(a, Expr) and not isinstance(b, Expr):
        return a, const(b, a.dtype)
    if isinstance(b, Expr) and not isinstance(a, Expr):
        return const(a, b.dtype), b
    return as_expr(a), as_expr(b)


def call(op: str, *args) -> Expr:
    """Build a math node, folding the index arithmetic that tiling produces (x+0, x*1...)."""
    if op in UNARY:
        (x,) = args
        x = as_expr(x)
        return Call(op, (x,), "bool" if op in BOOL_UNARY else x.dtype)
    a, b = _coerce_pair(*args)
    if a.dtype != b.dtype:
        raise TypeError(f"{op}: operand dtypes differ ({a.dtype} vs {b.dtype})")
    if op in COMPARE or op in LOGIC:
        return Call(op, (a, b), "bool")
    if op not in ARITH:
        raise ValueError(f"unknown op {op}")
    folded = _fold(op, a, b)
    return folded if folded is not None else Call(op, (a, b), a.dtype)


def _fold(op: str, a: Expr, b: Expr) -> Expr | None:
    if a.dtype != INDEX_DTYPE:
        return None
    ca = a.value if isinstance(a, Const) else None
    cb = b.value if isinstance(b, Const) else None
    if ca is not None and cb is not None:
        value = {"add": ca + cb, "sub": ca - cb, "mul": ca * cb, "max": max(ca, cb), "min": min(ca, cb),
                 "floordiv": ca // cb if cb else None, "floormod": ca % cb if cb else None}.get(op)
        return Const(value, a.dtype) if value is not None else None
    if op == "add" and ca == 0 or op == "mul" and ca == 1:
        return b
    if op in ("add", "sub") and cb == 0 or op in ("mul", "floordiv") and cb == 1:
        return a
    if op == "mul" and (ca == 0 or cb == 0):
        return Const(0, a.dtype)
    if op == "floormod" and cb == 1:
        return Const(0, a.dtype)
    return None


def cast(dtype: str, x: Expr) -> Expr:
    x = as_expr(x)
    return x if x.dtype == dtype else Cast(dtype, x)


def select(cond: Expr, a, b) -> Expr:
    a, b = _coerce_pair(a, b)
    if isinstance(cond, Const):
        return a if cond.value else b
    return Select(cond, a, b)


def all_of(conds: Iterable[Expr]) -> Expr:
    out: Expr | None = None
    for c in conds:
        out = c if out is None else call("and", out, c)
    return out if out is not None else Const(True, "bool")


# --- traversal --------------------------------------------------------------------------------


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Load):
        return e.indices
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, Reduce):
        return (e.source,)
    return ()


def walk(e: Expr):
    """Every node of e, parents before children."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def loads(e: Expr) -> list[Load]:
    return [n for n in walk(e) if isinstance(n, Load)]


def rebuild(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Bottom-up rewrite: fn(node) returns a replacement or None to keep (rebuilt) node."""
    memo: dict[int, Expr] = {}

    def go(node: Expr) -> Expr:
        key = id(node)
        if key in memo:
            return memo[key]
        if isinstance(node, Load):
            new = Load(node.tensor, [go(i) for i in node.indices])
        elif isinstance(node, Call):
            args = [go(a) for a in node.args]
            new = call(node.op, *args) if node.op in ARITH else Call(node.op, args, node.dtype)
        elif isinstance(node, Cast):
            new = Cast(node.dtype, go(node.value))
        elif isinstance(node, Select):
            new = Select(go(node.cond), go(node.a), go(node.b))
        elif isinstance(node, Reduce):
            new = Reduce(node.reducer, go(node.source), node.axes)
        else:
            new = node
        out = fn(new)
        memo[key] = out if out is not None else new
        return memo[key]

    return go(e)


def substitute(e: Expr, mapping: dict[Var, Expr]) -> Expr:
    return rebuild(e, lambda n: mapping.get(n) if isinstance(n, Var) else None)


def size(e: Expr) -> int:
    return sum(1 for _ in walk(e))
