"""The ATen op table of the torch.fx importer (graph stage): each ATen op, by packet name, as
registry ops. Results are checked against torch's recorded types by FxContext.conform."""

from __future__ import annotations

import numpy as np

from akg.graph.io.torch_fx import ATEN_OPS, FxContext, Unavailable
from akg.graph.ir import Value
from akg.graph.types import TensorType

# --- elementwise --------------------------------------------------------------------------------

_UNARY = {"relu": "relu", "erf": "erf", "exp": "exp", "log": "log", "tanh": "tanh", "sigmoid": "sigmoid",
          "neg": "neg", "sqrt": "sqrt", "rsqrt": "rsqrt", "abs": "abs", "reciprocal": "reciprocal",
          "sin": "sin", "cos": "cos", "floor": "floor", "ceil": "ceil", "sign": "sign",
          "logical_not": "logical_not"}

for _aten, _op in _UNARY.items():
    ATEN_OPS.add(f"aten.{_aten}", _op, lambda ctx, op=_op: ctx.emit(op, [ctx.tensor(ctx.args[0])]))


@ATEN_OPS.register_op("aten.gelu", "gelu")
def _gelu(ctx: FxContext):
    return ctx.emit("gelu", [ctx.tensor(ctx.args[0])], approximate=ctx.arg(1, "approximate", "none"))


def _alpha(ctx: FxContext, y):
    alpha = ctx.attrs.get("alpha", 1)
    return y if alpha == 1 else ctx.emit("mul", [ctx.tensor(y), ctx.tensor(alpha)], "alpha")


@ATEN_OPS.register_op("aten.add aten.sub", "add, sub")
def _add_sub(ctx: FxContext):
    op = ctx.op.split(".")[1]
    return ctx.emit(op, [ctx.tensor(ctx.args[0]), ctx.tensor(_alpha(ctx, ctx.args[1]))])


@ATEN_OPS.register_op("aten.rsub", "sub (operands swapped)")
def _rsub(ctx: FxContext):
    return ctx.emit("sub", [ctx.tensor(_alpha(ctx, ctx.args[1])), ctx.tensor(ctx.args[0])])


_BINARY = {"aten.mul": "mul", "aten.maximum": "maximum", "aten.minimum": "minimum",
           "aten.pow": "pow", "aten.logical_and": "logical_and", "aten.logical_or": "logical_or"}

for _aten, _op in _BINARY.items():
    ATEN_OPS.add(_aten, _op, lambda ctx, op=_op: ctx.emit(op, [ctx.tensor(ctx.args[0]), ctx.tensor(ctx.args[1])]))


@ATEN_OPS.register_op("aten.hardtanh aten.clamp aten.clamp_min aten.clamp_max",
                      "relu6 (hardtanh 0..6, torch's ReLU6), maximum / minimum with the bounds")
def _clamp(ctx: FxContext):
    x = ctx.tensor(ctx.args[0])
    if ctx.op == "aten.hardtanh":
        lo, hi = ctx.arg(1, "min_val", -1.0), ctx.arg(2, "max_val", 1.0)
    elif ctx.op == "aten.clamp_min":
        lo, hi = ctx.arg(1, "min"), None
    elif ctx.op == "aten.clamp_max":
        lo, hi = None, ctx.arg(1, "max")
    else:
        lo, hi = ctx.arg(1, "min"), ctx.arg(2, "max")
    if lo == 0 and hi == 6 and not isinstance(lo, Value) and x.dtype.startswith("float"):
        return ctx.emit("relu6", [x])
    y = x
    if lo is not None:
        y = ctx.emit("maximum", [y, ctx.tensor(lo, x.dtype)], "clamped_below")
    if hi is not None:
        y = ctx.emit("minimum", [y, ctx.tensor(hi, x.dtype)], "clamped")
    return y


@ATEN_OPS.register_op("aten.div", "div (true division only)")
def _div(ctx: FxContext):
    if ctx.attrs.get("rounding_mode") is not None:
        raise ctx.unsupported(f"rounding_mode={ctx.attrs['rounding_mode']!r}")
    return ctx.emit("div", [ctx.tensor(ctx.args[0]), ctx.tensor(ctx.args[1])])


_COMPARE = {"aten.eq": "equal", "aten.ne": "not_equal", "aten.lt": "less", "aten.le": "less_equal",
            "aten.gt": "greater", "aten.ge": "greater_equal"}


def _compare(ctx: FxContext, op: str):
    a, b = ctx.args[0], ctx.args[1]
    dtypes = [x.dtype for x in (a, b) if isinstance(x, Value)]
    floating = any(isinstance(x, float) for x in (a, b)) or any(d.startswith("float") for d in dtypes)
    dtype = next((d for d in dtypes if d.startswith("float")), "float32") if floating else dtypes[0]
    return ctx.emit(op, [ctx.tensor(a, dtype), ctx.tensor(b, dtype)])


for _aten, _op in _COMPARE.items():
    ATEN_OPS.add(_aten, _op, lambda ctx, op=_op: _compare(ctx, op))


@ATEN_OPS.register_op("aten.where", "where")
def _where(ctx: FxContext):
    cond = ctx.tensor(ctx.args[0], "bool")
    return ctx.emit("where", [cond, ctx.tensor(ctx.args[1]), ctx.tensor(ctx.args[2])])


@ATEN_OPS.register_op("aten.clone aten.alias aten.detach aten.lift_fresh_copy aten.contiguous", "(the input)")
def _identity(ctx: FxContext):
    return ctx.args[0]


@ATEN_OPS.register_op("aten._to_copy aten.to", "cast (dtype changes only)")
def _to_copy(ctx: FxContext):
    return ctx.tensor(ctx.args[0], ctx.out_type().dtype)


@ATEN_OPS.register_op("aten.scalar_tensor aten.full aten.zeros aten.ones aten.new_zeros aten.new_ones "
                      "aten.new_full aten.full_like aten.zeros_like aten.ones_like", "a constant")
def _fill(ctx: FxContext):
    out = ctx.out_type()
    name = ctx.op.split(".")[1]
    if name == "scalar_tensor":
        value = ctx.args[0]
    elif name in ("full", "full_like"):
        value = ctx.args[1]
    elif name == "new_full":
        value = ctx.args[2]
    else:
        value = 1 if "ones" in name else 0
    return ctx.const(np.full(out.shape, value, dtype=out.dtype), out.dtype, "fill")


@ATEN_OPS.register_op("aten.empty aten.empty_like aten.empty_strided", "(nothing: an error if used)")
def _empty(ctx: FxContext):
    return Unavailable("an uninitialised tensor")


# --- linear algebra -----------------------------------------------------------------------------


@ATEN_OPS.register_op("aten.mm", "matmul")
def _mm(ctx: FxContext):
    return ctx.emit("matmul", [ctx.tensor(ctx.args[0]), ctx.tensor(ctx.args[1])])


@ATEN_OPS.register_op("aten.bmm", "batch_matmul")
def _bmm(ctx: FxContext):
    return ctx.emit("batch_matmul", [ctx.tensor(ctx.args[0]), ctx.tensor(ctx.args[1])])


@ATEN_OPS.register_op("aten.addmm", "matmul + add")
def _addmm(ctx: FxContext):
    bias, a, b = ctx.args[:3]
    beta, alpha = ctx.attrs.get("beta", 1), ctx.attrs.get("alpha", 1)
    y = ctx.emit("matmul", [ctx.tensor(a), ctx.tensor(b)], "mm")
    if alpha != 1:
        y = ctx.emit("mul", [y, ctx.tensor(alpha)], "alpha")
    bias = ctx.tensor(bias)
    if beta != 1:
        bias = ctx.emit("mul", [bias, ctx.tensor(beta)], "beta")
    return ctx.emit("add", [y, bias])


# --- layout -------------------------------------------------------------------------------------


@ATEN_OPS.register_op("aten.view aten._unsafe_view aten.reshape", "reshape")
def _view(ctx: FxContext):
    return ctx.emit("reshape", [ctx.tensor(ctx.args[0])], shape=ctx.out_type().shape)


@ATEN_OPS.register_op("aten.permute", "transpose")
def _permute(ctx: FxContext):
    x = ctx.tensor(ctx.args[0])
    perm = [d % max(len(x.shape), 1) for d in ctx.args[1]]
    return ctx.emit("transpose", [x], perm=perm)


@ATEN_OPS.register_op("aten.t aten.transpose", "transpose")
def _transpose(ctx: FxContext):
    x = ctx.tensor(ctx.args[0])
    rank = len(x.shape)
    if rank < 2:
        return x
    d0, d1 = (ctx.args[1] % rank, ctx.args[2] % rank) if len(ctx.args) > 2 else (0, 1)
    perm = list(range(rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return ctx.emit("transpose", [x], perm=perm)


@ATEN_OPS.register_op("aten.expand", "broadcast_to")
def _expand(ctx: FxContext):
    x, shape = ctx.tensor(ctx.args[0]), ctx.out_type().shape
    return x if x.shape == shape else ctx.emit("broadcast_to", [x], shape=shape)


@ATEN_OPS.register_op("aten.unsqueeze", "expand_dims")
def _unsqueeze(ctx: FxContext):
    x = ctx.tensor(ctx.args[0])
    return ctx.emit("expand_dims", [x], axis=ctx.args[1] % (len(x.shape) + 1))


@ATEN_OPS.register_op("aten.squeeze", "reshape")
def _squeeze(ctx: FxContext):
    return ctx.emit("reshape", [ctx.tensor(ctx.args[0])], shape=ctx.out_type().shape)


@ATEN_OPS.register_op("aten.cat", "concat")
def _cat(ctx: FxContext):
    out = ctx.out_type()
    parts = [ctx.tensor(x, out.dtype) for x in ctx.args[0] if not (isinstance(x, Value) and x.shape == (0,))]
    axis = ctx.arg(1, "dim", 0) % len(out.shape)
    return parts[0] if len(parts) == 1 else ctx.emit("concat", parts, axis=axis)


@ATEN_OPS.register_op("aten.split_with_sizes aten.split", "split")
def _split(ctx: FxContext):
    x = ctx.tensor(ctx.args[0])
    axis = ctx.arg(2, "dim", 0) % len(x.shape)
    size = ctx.args[1]
    if isinstance(size, int):
        n = x.shape[axis]
        sizes = [min(size, n - i) for i in range(0, n, size)]
    else:
        sizes = list(size)
    if len(sizes) == 1:
        return (x,)
    out = ctx.emit("split", [x], axis=axis, sizes=sizes)
    return out if isinstance(out, tuple) else (out,)


@ATEN_OPS.register_op("aten.slice", "strided_slice")
def _slice(ctx: FxContext):
    x = ctx.tensor(ctx.args[0])
    axis = ctx.arg(1, "dim", 0) % len(x.shape)
    start, end, step = ctx.arg(2, "start", None), ctx.arg(3, "end", None), ctx.arg(4, "step", 1)
    n = x.shape[axis]
    lo, hi, _ = slice(start, end, step).indices(n)
    if hi <= lo:
        raise ctx.unsupported("an empty slice")
    begin, stop, strides = [0] * len(x.shape), list(x.shape), [1] * len(x.shape)
    begin[axis], stop[axis], strides[axis] = lo, hi, step
    if lo == 0 and hi == n and step == 1:
        return x
    return ctx.emit("strided_slice", [x], begin=begin, end=stop, strides=strides)


@ATEN_OPS.register_op("aten.gather", "reshape, mul, add, gather (flat indices)")
def _gather(ctx: FxContext):
    x, index = ctx.tensor(ctx.args[0]), ctx.arg(2, "index")
    if not isinstance(index, Value) or len(index.shape) != len(x.shape) or not x.shape:
        raise ctx.unsupported("gather needs an index tensor of the input's rank (>= 1)")
    axis = ctx.arg(1, "dim") % len(x.shape)
    if index.dtype != "int64":
        index = ctx.emit("cast", [index], "index64", to="int64")
    return ctx.gather_along(x, index, axis, index.shape)


@ATEN_OPS.register_op("aten.select", "slice + reshape")
def _select(ctx: FxContext):
    x = ctx.tensor(ctx.args[0])
    axis = ctx.args[1] % len(x.shape)
    i = ctx.args[2] % x.shape[axis]
    begin, end = [0] * len(x.shape), list(x.shape)
    begin[axis], end[axis] = i, i + 1
    y = ctx.emit("slice", [x], "slice", begin=begin, end=end)
    return ctx.emit("reshape", [y], shape=ctx.out_type().shape)


# --- reductions ---------------------------------------------------------------------------------


def _axes(ctx: FxContext, x: Value, dims) -> list[int]:
    rank = len(x.shape)
    if dims is None or dims == []:
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else dims
    return sorted(d % max(rank, 1) for d in dims)


def _reduce(ctx: FxContext, op: str):
    x = ctx.tensor(ctx.args[0])
    dims = ctx.arg(1, "dim", None)
    keep = ctx.arg(2, "keepdim", False)
    if len(x.shape) == 0:
        return x
    return ctx.emit(op, [x], axes=_axes(ctx, x, dims), keepdims=bool(keep))


for _aten, _op in {"aten.sum": "sum", "aten.mean": "mean", "aten.amax": "max", "aten.amin": "min",
                   "aten.prod": "prod"}.items():
    ATEN_OPS.add(_aten, _op, lambda ctx, op=_op: _reduce(ctx, op))


@ATEN_OPS.register_op("aten.var", "variance (times n/(n - correction))")
def _var(ctx: FxContext):
    x = ctx.tensor(ctx.args[0])
    if isinstance(ctx.arg(1, "dim", None), bool):  # var(x, unbiased): the old overload
        raise ctx.unsupported("the `unbiased` overload (var.correction is mapped)")
    axes = _axes(ctx, x, ctx.arg(1, "dim", None))
    correction = ctx.attrs.get("correction", 1)
    correction = 1 if correction is None else correction
    y = ctx.emit("variance", [x], "var", axes=axes, keepdims=bool(ctx.attrs.get("keepdim", False)))
    n = int(np.prod([x.shape[a] for a in axes]))
    if correction == 0:
        return y
    if n - correction <= 0:
        raise ctx.unsupported(f"correction {correction} over {n} elements")
    return ctx.emit("mul", [y, ctx.tensor(n / (n - correction))])


@ATEN_OPS.register_op("aten._softmax aten.softmax", "softmax")
def _softmax(ctx: FxContext):
    return ctx.emit("softmax", [ctx.tensor(ctx.args[0])], axis=ctx.args[1])


@ATEN_OPS.register_op("aten._log_softmax aten.log_softmax", "log_softmax")
def _log_softmax(ctx: FxContext):
    return ctx.emit("log_softmax", [ctx.tensor(ctx.args[0])], axis=ctx.args[1])


# --- nn -----------------------------------------------------------------------------------------


def _channel(ctx: FxContext, v: Value, rank: int, what: str) -> Value:
    """A per-channel vector as [1, C, 1, ...] for axis 1 of a rank-`rank` tensor."""
    return ctx.emit("reshape", [ctx.tensor(v)], what, shape=(1, v.shape[0]) + (1,) * (rank - 2))


@ATEN_OPS.register_op("aten.convolution", "conv2d (+ add of the bias)")
def _convolution(ctx: FxContext):
    x, w, b, stride, padding, dilation, transposed, _, groups = ctx.args[:9]
    x, w = ctx.tensor(x), ctx.tensor(w)
    if transposed:
        raise ctx.unsupported("transposed convolution")
    if len(x.shape) != 4:
        raise ctx.unsupported(f"a {len(x.shape) - 2}-d convolution (conv2d only)")
    y = ctx.emit("conv2d", [x, w], None if b is None else "conv", strides=list(stride), padding=list(padding),
                 dilation=list(dilation), groups=groups)
    return y if b is None else ctx.emit("add", [y, _channel(ctx, b, 4, "bias")])


@ATEN_OPS.register_op("aten._native_batch_norm_legit_no_training", "batch norm with running statistics, "
                      "in basic ops (the saved statistics are not computed)")
def _batch_norm_eval(ctx: FxContext):
    return _batch_norm(ctx, *ctx.args[:5], ctx.arg(6, "eps", 1e-5))


@ATEN_OPS.register_op("aten.native_batch_norm", "batch norm with running statistics (training=False only)")
def _native_batch_norm(ctx: FxContext):
    if ctx.arg(5, "training", False):
        raise ctx.unsupported("batch norm in training mode (batch statistics and running-stat updates)")
    return _batch_norm(ctx, *ctx.args[:5], ctx.arg(7, "eps", 1e-5))


def _batch_norm(ctx: FxContext, x, w, b, mean, var, eps):
    """akg's `batch_norm` where the affine weights are given (its expansion folds x * a + c
    per channel, as a model file's batch norm compiles: the same kernels through every
    door); basic ops without them. The saved statistics are not computed."""
    x = ctx.tensor(x)
    rank = len(x.shape)
    saved = (Unavailable("the saved mean of a batch norm"), Unavailable("the saved inverse std of a batch norm"))
    params = [ctx.tensor(v) for v in (w, b, mean, var) if v is not None]
    if rank >= 2 and len(params) == 4 and all(p.type == TensorType((x.shape[1],), x.dtype) for p in params):
        return (ctx.emit("batch_norm", [x, *params], "bn", axis=1, epsilon=float(eps)), *saved)
    inv = ctx.emit("rsqrt", [ctx.emit("add", [_channel(ctx, var, rank, "var"), ctx.tensor(eps)], "var_eps")],
                   "inv_std")
    y = ctx.emit("mul", [ctx.emit("sub", [x, _channel(ctx, mean, rank, "mean")], "centred"), inv], "normed")
    if w is not None:
        y = ctx.emit("mul", [y, _channel(ctx, w, rank, "weight")], "scaled")
    if b is not None:
        y = ctx.emit("add", [y, _channel(ctx, b, rank, "bias")], "shifted")
    return (y, *saved)


@ATEN_OPS.register_op("aten.native_layer_norm", "layer norm in basic ops (mean, rstd outputs too)")
def _layer_norm(ctx: FxContext):
    x, shape, w, b, eps = ctx.args[:5]
    x = ctx.tensor(x)
    axes = list(range(len(x.shape) - len(shape), len(x.shape)))
    mean = ctx.emit("mean", [x], "mean", axes=axes, keepdims=True)
    centred = ctx.emit("sub", [x, mean], "centred")
    var = ctx.emit("mean", [ctx.emit("mul", [centred, centred], "sq")], "var", axes=axes, keepdims=True)
    rstd = ctx.emit("rsqrt", [ctx.emit("add", [var, ctx.tensor(eps)], "var_eps")], "rstd")
    y = ctx.emit("mul", [centred, rstd], "normed")
    if w is not None:
        y = ctx.emit("mul", [y, ctx.tensor(w)], "scaled")
    if b is not None:
        y = ctx.emit("add", [y, ctx.tensor(b)], "shifted")
    return (y, mean, rstd)


def _pool_args(ctx: FxContext, x: Value, i: int):
    kernel = list(ctx.args[i])
    stride = list(ctx.arg(i + 1, "stride", None) or kernel)
    padding = list(ctx.arg(i + 2, "padding", [0, 0]))
    if len(x.shape) != 4:
        raise ctx.unsupported("pooling of a non-4-d tensor (2-d pooling on NCHW only)")
    pair = lambda v: v * 2 if len(v) == 1 else v  # noqa: E731
    return pair(kernel), pair(stride), pair(padding)


@ATEN_OPS.register_op("aten.max_pool2d", "max_pool2d")
def _max_pool(ctx: FxContext):
    x = ctx.tensor(ctx.args[0])
    kernel, stride, padding = _pool_args(ctx, x, 1)
    dilation, ceil_mode = ctx.arg(4, "dilation", [1, 1]), ctx.arg(5, "ceil_mode", False)
    if any(d != 1 for d in dilation):
        raise ctx.unsupported(f"dilation {list(dilation)}")
    return ctx.emit("max_pool2d", [x], kernel=kernel, strides=stride, padding=padding, ceil_mode=bool(ceil_mode))


@ATEN_OPS.register_op("aten.avg_pool2d", "avg_pool2d")
def _avg_pool(ctx: FxContext):
    x = ctx.tensor(ctx.args[0])
    kernel, stride, padding = _pool_args(ctx, x, 1)
    ceil_mode, include = ctx.arg(4, "ceil_mode", False), ctx.arg(5, "count_include_pad", True)
    if ctx.arg(6, "divisor_override", None) is not None:
        raise ctx.unsupported("divisor_override")
    return ctx.emit("avg_pool2d", [x], kernel=kernel, strides=stride, padding=padding,
                    ceil_mode=bool(ceil_mode), count_include_pad=bool(include))


@ATEN_OPS.register_op("aten._adaptive_avg_pool2d", "mean over H, W (output size 1 only)")
def _adaptive_avg(ctx: FxContext):
    x = ctx.tensor(ctx.args[0])
    if list(ctx.args[1]) not in ([1, 1], [1]):
        raise ctx.unsupported(f"output size {list(ctx.args[1])}")
    return ctx.emit("mean", [x], axes=[2, 3], keepdims=True)
