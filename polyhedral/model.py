"""Polyhedral model of a Program: statements with iteration domains and access relations.

Each compute op becomes one statement (`S3[i, j]`), or two for a reduction: an init
statement over the output axes and an update statement over output and reduction axes
(`S3_init[i, j]`, `S3[i, j, k]`). Accesses with quasi-affine indices (sums, constant
multiples, floor division and modulo by constants) are exact; an index that depends on
data (gather) is over-approximated by the whole extent of that tensor dimension.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from akg.graph.compute.expr import Call, Cast, ComputeOp, Const, Expr, Load, Reduce, Tensor, Var, walk
from akg.graph.compute.lower import Program

ROLES = ("assign", "init", "update")


@dataclass(eq=False)
class Access:
    tensor: Tensor
    relation: isl.Map  # statement instance -> tensor element
    exact: bool
    indices: tuple[Expr, ...] = ()  # the index expressions, over the statement's iterators


@dataclass(eq=False)
class Statement:
    """One polyhedral statement. `iters` are the compute op's axes, then its reduction axes
    for an update; `expr` is what the statement stores (the reduce source for an update)."""

    name: str
    op: ComputeOp
    role: str
    iters: tuple[Var, ...]
    domain: isl.Set
    write: Access
    reads: list[Access]
    position: int  # program order, used for the original (sequential) schedule

    @property
    def reduce(self) -> Reduce | None:
        return self.op.reduce

    @property
    def expr(self) -> Expr:
        body = self.op.body
        return body.source if isinstance(body, Reduce) else body


@dataclass(eq=False)
class PolyModel:
    program: Program
    ctx: isl.Context
    statements: list[Statement]
    tensor_ids: dict[Tensor, str] = field(default_factory=dict)  # tensor -> isl tuple name

    @property
    def domain(self) -> isl.UnionSet:
        out = isl.UnionSet.empty(isl.Space.params_alloc(self.ctx, 0))
        for s in self.statements:
            out = out.union(isl.UnionSet.from_set(s.domain))
        return out

    def writes(self) -> isl.UnionMap:
        return self._union(a.relation for s in self.statements for a in [s.write])

    def reads(self) -> isl.UnionMap:
        return self._union(a.relation for s in self.statements for a in s.reads)

    def _union(self, maps) -> isl.UnionMap:
        out = isl.UnionMap.empty(isl.Space.params_alloc(self.ctx, 0))
        for m in maps:
            out = out.union(isl.UnionMap.from_map(m))
        return out

    def original_schedule(self) -> isl.UnionMap:
        """Program order: op by op, init before update, loops in axis order."""
        width = max((len(s.iters) for s in self.statements), default=0) + 2
        out = isl.UnionMap.empty(isl.Space.params_alloc(self.ctx, 0))
        for s in self.statements:
            names = [f"i{k}" for k in range(len(s.iters))]
            dims = [str(s.position), "1" if s.role == "update" else "0", *names]
            dims += ["0"] * (width - len(dims))
            out = out.union(isl.UnionMap(
                f"{{ {s.name}[{', '.join(names)}] -> [{', '.join(dims)}] }}", context=self.ctx))
        return out

    def statement(self, name: str) -> Statement:
        return next(s for s in self.statements if s.name == name)

    def tensor_by_id(self) -> dict[str, Tensor]:
        return {v: k for k, v in self.tensor_ids.items()}


# --- affine index conversion ----------------------------------------------------------------------


def affine(e: Expr, names: dict[Var, str]) -> str | None:
    """isl text of a quasi-affine integer expression, or None when it is not one."""
    if isinstance(e, Const):
        return str(int(e.value)) if isinstance(e.value, (int, bool)) else None
    if isinstance(e, Var):
        return names.get(e)
    if isinstance(e, Cast) and e.dtype.startswith("int") and e.value.dtype.startswith("int"):
        return affine(e.value, names)
    if not isinstance(e, Call):
        return None
    args = [affine(a, names) for a in e.args]
    if any(a is None for a in args):
        return None
    a, b = args
    const_b = isinstance(e.args[1], Const)
    if e.op == "add":
        return f"({a} + {b})"
    if e.op == "sub":
        return f"({a} - {b})"
    if e.op == "mul" and (const_b or isinstance(e.args[0], Const)):
        return f"({a} * {b})"
    if e.op in ("floordiv", "floormod") and const_b and int(e.args[1].value) > 0:
        return f"floor(({a}) / {b})" if e.op == "floordiv" else f"(({a}) mod {b})"
    if e.op in ("max", "min"):
        return f"{e.op}({a}, {b})"
    return None


def linear_coefficients(e: Expr) -> dict[Var, int] | None:
    """Coefficients of the iterators in an index that is a sum of constant multiples of
    iterators plus a constant; None for anything else (division, data-dependent...)."""
    if isinstance(e, Const):
        return {}
    if isinstance(e, Var):
        return {e: 1}
    if isinstance(e, Cast):
        return linear_coefficients(e.value)
    if isinstance(e, Call) and e.op in ("add", "sub", "mul"):
        a, b = (linear_coefficients(x) for x in e.args)
        if a is None or b is None:
            return None
        if e.op == "mul":
            for scale, other in ((e.args[0], b), (e.args[1], a)):
                if isinstance(scale, Const):
                    return {v: c * int(scale.value) for v, c in other.items()}
            return None
        sign = 1 if e.op == "add" else -1
        out = dict(a)
        for v, c in b.items():
            out[v] = out.get(v, 0) + sign * c
        return {v: c for v, c in out.items() if c}
    return None


def _iter_names(iters) -> dict[Var, str]:
    return {v: f"i{k}" for k, v in enumerate(iters)}


def _box(names: list[str], extents: list[int]) -> str:
    return " and ".join(f"0 <= {n} < {x}" for n, x in zip(names, extents)) or "true"


def _access(ctx, stmt: str, iters, domain: isl.Set, load_or_tensor, indices, tid: str, shape) -> Access:
    names = _iter_names(iters)
    outs, conds, exact = [], [], True
    for d, idx in enumerate(indices):
        text = affine(idx, names)
        outs.append(f"o{d}")
        if text is None:
            exact = False  # data-dependent: any element along this dimension
        else:
            conds.append(f"o{d} = {text}")
    conds.append(_box(outs, list(shape)))
    src = f"{stmt}[{', '.join(names[v] for v in iters)}]"
    rel = isl.Map(f"{{ {src} -> {tid}[{', '.join(outs)}] : {' and '.join(conds)} }}", context=ctx)
    return Access(load_or_tensor, rel.intersect_domain(domain), exact, tuple(indices))


def build_model(program: Program, ctx: isl.Context | None = None) -> PolyModel:
    """Statements, domains and accesses of every compute op of the program."""
    ctx = ctx or isl.Context()
    model = PolyModel(program, ctx, [])
    for k, t in enumerate(program.placeholders):
        model.tensor_ids[t] = f"A{k}"
    ops = program.ops()
    for k, op in enumerate(ops):
        model.tensor_ids[op.output] = f"T{k}"
    for k, op in enumerate(ops):
        if 0 in op.output.shape:
            continue  # an empty tensor: nothing to compute
        tid = model.tensor_ids[op.output]
        red = op.reduce
        roles = [("init", op.axes), ("update", op.axes + red.axes)] if red else [("assign", op.axes)]
        for role, iters in roles:
            name = f"S{k}_init" if role == "init" else f"S{k}"
            names = [f"i{d}" for d in range(len(iters))]
            domain = isl.Set(f"{{ {name}[{', '.join(names)}] : {_box(names, [v.extent for v in iters])} }}",
                             context=ctx)
            if domain.is_empty():
                continue
            write = _access(ctx, name, iters, domain, op.output, op.axes, tid, op.output.shape)
            reads = []
            if role == "update":
                reads.append(_access(ctx, name, iters, domain, op.output, op.axes, tid, op.output.shape))
            if role != "init":
                source = red.source if red else op.body
                for ld in (n for n in walk(source) if isinstance(n, Load)):
                    reads.append(_access(ctx, name, iters, domain, ld.tensor, ld.indices,
                                         model.tensor_ids[ld.tensor], ld.tensor.shape))
            model.statements.append(Statement(name, op, role, tuple(iters), domain, write, reads, k))
    return model
