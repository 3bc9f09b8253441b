"""Matrix products: matmul (2-D), batch_matmul (broadcast batch dims), dense (linear layer)."""

from __future__ import annotations

import numpy as np

from akg.errors import ShapeError
from akg.graph.ops.registry import COMPOSITE, LINALG, Attr, defop
from akg.graph.types import TensorType, broadcast_shapes, is_float

_TRANSPOSE_ATTRS = [Attr("transpose_a", "bool", False), Attr("transpose_b", "bool", False)]


def _numeric_pair(a: TensorType, b: TensorType) -> None:
    if a.dtype != b.dtype or a.dtype == "bool":
        raise ShapeError(f"operands must share one numeric dtype, got {a} and {b}")


def _mk(t: TensorType, transposed: bool) -> tuple[int, int]:
    rows, cols = t.shape[-2:]
    return (cols, rows) if transposed else (rows, cols)


def _matmul_infer(a: TensorType, b: TensorType, transpose_a, transpose_b) -> TensorType:
    _numeric_pair(a, b)
    if a.rank != 2 or b.rank != 2:
        raise ShapeError(f"needs 2-D operands (use batch_matmul for more), got {a} and {b}")
    (m, k), (k2, n) = _mk(a, transpose_a), _mk(b, transpose_b)
    if k != k2:
        raise ShapeError(f"contraction sizes differ: {a} @ {b} (k={k} vs {k2})")
    return TensorType((m, n), a.dtype)


def _matmul_flops(ins, outs, attrs) -> int:
    a = ins[0]
    k = a.shape[-2] if attrs["transpose_a"] else a.shape[-1]
    return 2 * outs[0].size * k


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _t(x: np.ndarray, flag: bool) -> np.ndarray:
    return np.swapaxes(x, -1, -2) if flag else x


@defop("matmul", kind=LINALG, infer=_matmul_infer, attrs=_TRANSPOSE_ATTRS, flops=_matmul_flops)
def matmul(a, b, transpose_a, transpose_b):
    """op(a) @ op(b) for 2-D a, b; op transposes when its flag is set (fp16 accumulates in fp32)."""
    return (_wide(_t(a, transpose_a)) @ _wide(_t(b, transpose_b))).astype(a.dtype)


def _batch_matmul_infer(a: TensorType, b: TensorType, transpose_a, transpose_b) -> TensorType:
    _numeric_pair(a, b)
    if a.rank < 3 and b.rank < 3 or a.rank < 2 or b.rank < 2:
        raise ShapeError(f"needs operands of rank >= 2, one of them >= 3, got {a} and {b}")
    (m, k), (k2, n) = _mk(a, transpose_a), _mk(b, transpose_b)
    if k != k2:
        raise ShapeError(f"contraction sizes differ: {a} @ {b} (k={k} vs {k2})")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return TensorType((*batch, m, n), a.dtype)


@defop("batch_matmul", kind=LINALG, infer=_batch_matmul_infer, attrs=_TRANSPOSE_ATTRS,
       flops=_matmul_flops)
def batch_matmul(a, b, transpose_a, transpose_b):
    """Batched op(a) @ op(b) over the leading axes, which broadcast (fp16 accumulates in fp32)."""
    return np.matmul(_wide(_t(a, transpose_a)), _wide(_t(b, transpose_b))).astype(a.dtype)


def _dense_infer(x: TensorType, w: TensorType, *bias: TensorType) -> TensorType:
    if not is_float(x.dtype):
        raise ShapeError(f"needs floating-point input, got {x}")
    _numeric_pair(x, w)
    if x.rank < 1 or w.rank != 2 or x.shape[-1] != w.shape[1]:
        raise ShapeError(f"needs x[..., in] and weight[out, in], got {x} and {w}")
    if bias and (bias[0].shape != (w.shape[0],) or bias[0].dtype != x.dtype):
        raise ShapeError(f"bias must be {TensorType((w.shape[0],), x.dtype)}, got {bias[0]}")
    return x.with_shape((*x.shape[:-1], w.shape[0]))


@defop("dense", kind=COMPOSITE, arity=(2, 3), infer=_dense_infer,
       flops=lambda ins, outs, attrs: 2 * outs[0].size * ins[1].shape[1] + outs[0].size * (len(ins) - 2))
def dense(x, w, *bias):
    """Linear layer: x @ weight.T (+ bias), weight laid out [out_features, in_features]."""
    y = x @ w.T
    return y + bias[0] if bias else y


# --- compute definitions ----------------------------------------------------------------------

from akg.graph.compute.expr import cast, compute, reduce, reduce_axis  # noqa: E402
from akg.graph.ops.reduce import accumulate_dtype  # noqa: E402
from akg.graph.ops.registry import defcompute  # noqa: E402


@defcompute("matmul", "batch_matmul")
def _matmul_compute(ctx, a, b, transpose_a, transpose_b):
    out = ctx.out.shape
    k_extent = a.shape[-2] if transpose_a else a.shape[-1]
    acc = accumulate_dtype(a.dtype)
    batch = len(out) - 2

    def operand(t, row, col, transposed, batch_index):
        lead = tuple(0 if d == 1 else v for d, v in zip(t.shape[:-2], batch_index[len(batch_index) - (t.ndim - 2):]))
        return t[lead + ((col, row) if transposed else (row, col))]

    def body(*i):
        k = reduce_axis(k_extent, f"{ctx.name}.k")
        bi, m, n = i[:batch], i[batch], i[batch + 1]
        x = cast(acc, operand(a, m, k, transpose_a, bi)) * cast(acc, operand(b, k, n, transpose_b, bi))
        return reduce("sum", x, [k])

    name = ctx.name if acc == a.dtype else ctx.name + ".acc"
    total = compute(out, body, name)
    if acc != a.dtype:
        total = compute(out, lambda *i: cast(a.dtype, total[i]), ctx.name)
    return total


# --- expanders ----------------------------------------------------------------------------------

from akg.graph.ops.registry import defexpand  # noqa: E402


@defexpand("dense")
def _expand_dense(e, x, w, *bias):
    """x @ w.T (+ bias): matmul for 2-D x, batch_matmul with a broadcast weight otherwise."""
    vector = x.type.rank == 1
    if vector:
        x = e.op("reshape", x, shape=[1, x.shape[0]], hint="row")
    op = "matmul" if x.type.rank == 2 else "batch_matmul"
    y = e.op(op, x, w, transpose_b=True, hint="matmul", final=not bias and not vector)
    if bias:
        y = e.op("add", y, bias[0], hint="biased", final=not vector)
    return e.op("reshape", y, shape=[w.shape[0]], final=True) if vector else y


# --- VJP rules ----------------------------------------------------------------------------------

from akg.graph.ops.registry import defvjp  # noqa: E402


@defvjp("matmul", "batch_matmul")
def _vjp_matmul(e, g, a, b, transpose_a, transpose_b):
    """C = op(A) op(B): dop(A) = g op(B)^T and dop(B) = op(A)^T g, written with the transpose
    flags so that no explicit transpose is needed; batch dims that broadcast are summed."""
    op = "batch_matmul" if g.type.rank > 2 else "matmul"
    if transpose_a:
        ga = e.op(op, b, g, transpose_a=transpose_b, transpose_b=True, hint="da")
    else:
        ga = e.op(op, g, b, transpose_b=not transpose_b, hint="da")
    if transpose_b:
        gb = e.op(op, g, a, transpose_a=True, transpose_b=transpose_a, hint="db")
    else:
        gb = e.op(op, a, g, transpose_a=not transpose_a, hint="db")
    return e.unbroadcast(ga, a.shape), e.unbroadcast(gb, b.shape)


@defvjp("dense")
def _vjp_dense(e, g, x, w, *bias):
    """y = x w^T + b over rows x[..., in]: dx = g w, dw = g^T x, db = sum of g's rows."""
    n_out, n_in = w.shape
    rows = x.type.size // n_in if n_in else 0
    x2 = x if x.type.rank == 2 else e.op("reshape", x, shape=[rows, n_in], hint="rows")
    g2 = g if g.type.rank == 2 else e.op("reshape", g, shape=[rows, n_out], hint="grows")
    gx = e.op("matmul", g2, w, hint="dx")
    if x.type.rank != 2:
        gx = e.op("reshape", gx, shape=list(x.shape), hint="dx")
    gw = e.op("matmul", g2, x2, transpose_a=True, hint="dw")
    return (gx, gw, *(e.op("sum", g2, axes=[0], hint="db") for _ in bias))


# --- sharding rules ---------------------------------------------------------------------------

from akg.graph.ops.registry import defsharding  # noqa: E402


@defsharding("matmul")
def _matmul_sharding(call, mesh):
    """Each mesh axis splits m (rows of a and out), n (columns of b and out), k (the
    contraction: out is a partial sum over that axis), or nothing."""
    from akg.graph.parallel.sharding import Sharding
    from akg.graph.parallel.strategy import Strategy, axis_assignments

    ta, tb = call.attrs["transpose_a"], call.attrs["transpose_b"]
    a_dim = {"m": 1 if ta else 0, "k": 0 if ta else 1}
    b_dim = {"k": 1 if tb else 0, "n": 0 if tb else 1}
    out_dim = {"m": 0, "n": 1}
    roles = ("m", "n", "k")
    found = []
    for combo in axis_assignments(mesh, len(roles)):
        a, b, o, partial, words = [[], []], [[], []], [[], []], [], []
        for axis, c in zip(mesh.names, combo):
            if c is None:
                continue
            role = roles[c]
            words.append(f"{role}({axis})")
            if role in a_dim:
                a[a_dim[role]].append(axis)
            if role in b_dim:
                b[b_dim[role]].append(axis)
            if role in out_dim:
                o[out_dim[role]].append(axis)
            else:
                partial.append(axis)
        found.append(Strategy(" ".join(words), (Sharding(tuple(map(tuple, a))), Sharding(tuple(map(tuple, b)))),
                              (Sharding(tuple(map(tuple, o)), tuple(partial)),)))
    return found


@defsharding("batch_matmul")
def _batch_matmul_sharding(call, mesh):
    """Each mesh axis splits one batch dim (of both operands where they are not broadcast
    there), m, n, or k (the contraction: the output a partial sum over that axis)."""
    from akg.graph.parallel.rules import Role, assign_roles

    a, b = call.ins
    out = call.outs[0]
    ta, tb = call.attrs["transpose_a"], call.attrs["transpose_b"]
    nb = out.rank - 2
    roles = []
    for j in range(nb):
        ins = []
        for i, t in enumerate((a, b)):
            d = j - (nb - (t.rank - 2))
            if d >= 0 and t.shape[d] == out.shape[j]:
                ins.append((i, d))
        roles.append(Role(f"b{j}", ins=tuple(ins), outs=((0, j),)))
    ra, rb = a.rank, b.rank
    roles += [Role("m", ins=((0, ra - 1 if ta else ra - 2),), outs=((0, nb),)),
              Role("n", ins=((1, rb - 2 if tb else rb - 1),), outs=((0, nb + 1),)),
              Role("k", ins=((0, ra - 2 if ta else ra - 1), (1, rb - 1 if tb else rb - 2)), partial_outs=(0,))]
    return assign_roles(call, mesh, roles)


@defsharding("dense")
def _dense_sharding(call, mesh):
    """Each mesh axis splits a leading dim of x, the output features (weight rows and bias),
    or the input features (x's last dim and the weight's columns: a partial sum, the bias
    taken as a partial sum too, so that it is added once)."""
    from akg.graph.parallel.rules import Role, assign_roles

    x = call.ins[0]
    has_bias = len(call.ins) == 3
    roles = [Role(f"d{d}", ins=((0, d),), outs=((0, d),)) for d in range(x.rank - 1)]
    roles += [Role("n", ins=((1, 0),) + (((2, 0),) if has_bias else ()), outs=((0, x.rank - 1),)),
              Role("k", ins=((0, x.rank - 1), (1, 1)), partial_ins=(2,) if has_bias else (), partial_outs=(0,))]
    return assign_roles(call, mesh, roles)
