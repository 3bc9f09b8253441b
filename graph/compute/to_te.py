"""Program -> TVM TE: the same tensor expressions as TVM compute ops, so that TVM's own
paths (the unscheduled "naive TE" build, MetaSchedule) compile exactly what akg compiles."""

from __future__ import annotations

from akg.errors import UnsupportedOpError
from akg.graph.compute.expr import Call, Cast, Const, Expr, Load, Select, Var
from akg.graph.compute.float8 import tir_cast
from akg.graph.compute.lower import Program


def to_te(program: Program) -> list:
    """TE tensors: the program's placeholders (inputs, then parameters) then its outputs."""
    import tvm
    from tvm import te, tirx

    tensors: dict[int, object] = {}
    for t in program.placeholders:
        tensors[id(t)] = te.placeholder(t.shape, t.dtype, name=_name(t.name))

    unary = {"exp": tirx.exp, "log": tirx.log, "sqrt": tirx.sqrt, "rsqrt": tirx.rsqrt,
             "tanh": tirx.tanh, "sigmoid": tirx.sigmoid, "erf": tirx.erf, "sin": tirx.sin,
             "cos": tirx.cos, "floor": tirx.floor, "ceil": tirx.ceil, "round": tirx.nearbyint,
             "abs": tirx.abs, "isnan": tirx.isnan, "isinf": tirx.isinf}
    binary = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
              "div": tirx.Div, "floordiv": tirx.floordiv, "max": tirx.Max, "min": tirx.Min,
              "pow": tirx.power, "and": tirx.And, "or": tirx.Or, "eq": tirx.EQ, "ne": tirx.NE,
              "lt": tirx.LT, "le": tirx.LE, "gt": tirx.GT, "ge": tirx.GE}

    def convert(e: Expr, env: dict) -> object:
        if isinstance(e, Const):
            return tirx.const(e.value, e.dtype)
        if isinstance(e, Var):
            return env[e]
        if isinstance(e, Load):
            return tensors[id(e.tensor)][tuple(convert(i, env) for i in e.indices)]
        if isinstance(e, Cast):
            return tir_cast(e.dtype, convert(e.value, env))
        if isinstance(e, Select):
            return tirx.if_then_else(convert(e.cond, env), convert(e.a, env), convert(e.b, env))
        if isinstance(e, Call):
            args = [convert(a, env) for a in e.args]
            if e.op == "neg":
                return -args[0]
            if e.op == "not":
                return tirx.Not(args[0])
            if e.op == "floormod":
                a, b = args
                return a - tirx.floor(a / b) * b if e.dtype.startswith("float") else tirx.floormod(a, b)
            fn = unary.get(e.op) or binary.get(e.op)
            if fn is None:
                raise UnsupportedOpError(e.op, reason="no TE form")
            return fn(*args)
        raise UnsupportedOpError(type(e).__name__, reason="no TE form")

    for op in program.ops():
        red = op.reduce
        if red is not None and red.reducer.startswith("arg"):
            raise UnsupportedOpError(red.reducer, reason="arg-reductions have no TE form here")

        tensors[id(op.output)] = te.compute(op.output.shape, _body(op, red, convert, te, tvm),
                                            name=_name(op.name))
    return [tensors[id(t)] for t in program.placeholders] + [tensors[id(t)] for t in program.outputs]


def _body(op, red, convert, te, tvm):
    """The fcompute of one op (TE forbids keyword arguments, so no default-bound closures)."""

    def body(*axes):
        env = dict(zip(op.axes, axes))
        if red is None:
            return convert(op.body, env)
        raxes = [te.reduce_axis((0, v.extent), name=_name(v.name)) for v in red.axes]
        env.update(zip(red.axes, raxes))
        source = convert(red.source, env)
        reducer = {"sum": te.sum, "max": te.max, "min": te.min,
                   "prod": te.comm_reducer(lambda a, b: a * b, lambda t: tvm.tirx.const(1, t),
                                           name="prod")}[red.reducer]
        return reducer(source, axis=raxes)

    return body


def _name(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name) or "t"
