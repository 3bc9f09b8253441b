"""The backward half of the ATen op table (graph stage): `convolution_backward`, the indices
of `max_pool2d_with_indices` and `max_pool2d_with_indices_backward`, built with the conv2d and
max_pool2d VJP rules of graph/ops/conv.py through a small emitter adapter."""

from __future__ import annotations

import numpy as np

from akg.graph.io.torch_aten import _pool_args
from akg.graph.io.torch_fx import ATEN_OPS, FxContext, Unavailable
from akg.graph.ir import Value
from akg.graph.ops.conv import (_vjp_max_pool2d, conv_input_grad, conv_weight_grad, flipped_transposed,
                                pool_geometry)


class RuleEmitter:
    """What a VJP rule of graph/ops calls (`op`, `const`, `out`), emitting into one FX node's
    context; `out` is the forward result the rule may reuse."""

    def __init__(self, ctx: FxContext, out: Value | None = None):
        self.ctx, self.out = ctx, out

    def op(self, op: str, *inputs, hint: str | None = None, **attrs):
        tensors = [v for v in inputs if isinstance(v, Value) and v.dtype != "bool"]
        dtype = tensors[0].dtype if tensors else "float32"
        ins = [v if isinstance(v, Value) else self.ctx.const(v, dtype, "c") for v in inputs]
        return self.ctx.emit(op, ins, hint or op, **attrs)

    def const(self, value, like: Value | None = None, dtype: str | None = None) -> Value:
        if dtype is None:
            dtype = like.dtype if like is not None else getattr(value, "dtype", "float32")
        return self.ctx.const(value, str(dtype), "c")


@ATEN_OPS.register_op("aten.convolution_backward", "conv2d input and weight gradients (as conv2d), sum")
def _convolution_backward(ctx: FxContext):
    g, x, w, _, stride, padding, dilation, transposed, _, groups, mask = ctx.args[:11]
    g = ctx.tensor(g, ctx.out_type(1).dtype if mask[1] else g.dtype)
    x, w = ctx.tensor(x, g.dtype), ctx.tensor(w, g.dtype)
    if transposed or len(x.shape) != 4:
        raise ctx.unsupported("the gradient of a transposed or non-2-d convolution")
    e = RuleEmitter(ctx)
    s, d = tuple(stride), tuple(dilation)
    pads = (padding[0], padding[1], padding[0], padding[1])
    dx = (conv_input_grad(e, g, flipped_transposed(e, w, groups), x.shape, s, pads, d, groups)
          if mask[0] else Unavailable("an input gradient not asked for"))
    dw = (conv_weight_grad(e, g, x, w.shape, s, pads, d, groups)
          if mask[1] else Unavailable("a weight gradient not asked for"))
    db = (ctx.emit("sum", [g], "db", axes=[0, 2, 3], keepdims=False)
          if mask[2] else Unavailable("a bias gradient not asked for"))
    return (dx, dw, db)


def max_pool_indices(ctx: FxContext, x: Value, y: Value, kernel, stride, padding, ceil_mode) -> Value:
    """torch's indices of a 2-d max pool: per window, the flat index (row * W + col) in its
    (n, c) plane of the first element in scan order equal to the window's max `y`."""
    k, s, (pt, pl, pb, pr), out = pool_geometry(x.type, kernel, stride, padding, ceil_mode)
    n, c, h, w = x.shape
    extra = [max(0, (out[2] - 1) * s[0] + k[0] - (h + pt + pb)), max(0, (out[3] - 1) * s[1] + k[1] - (w + pl + pr))]
    xp = ctx.emit("pad", [x], "xp", before=[0, 0, pt, pl], after=[0, 0, pb + extra[0], pr + extra[1]],
                  value=float("-inf")) if any((pt, pl, pb, pr, *extra)) else x
    span = ((out[2] - 1) * s[0] + 1, (out[3] - 1) * s[1] + 1)
    rows, cols = np.arange(out[2])[:, None] * s[0] - pt, np.arange(out[3])[None, :] * s[1] - pl
    taken = index = None
    for p in range(k[0]):
        for q in range(k[1]):
            seen = ctx.emit("strided_slice", [xp], f"x{p}_{q}", begin=[0, 0, p, q],
                            end=[n, c, p + span[0], q + span[1]], strides=[1, 1, *s])
            hit = ctx.emit("equal", [seen, y], f"hit{p}_{q}")
            if taken is None:
                first, taken = hit, hit
            else:
                first = ctx.emit("logical_and", [hit, ctx.emit("logical_not", [taken], f"free{p}_{q}")], f"first{p}_{q}")
                taken = ctx.emit("logical_or", [taken, hit], f"taken{p}_{q}")
            at = ctx.const((rows + p) * w + (cols + q), "int64", f"at{p}_{q}")
            here = ctx.emit("where", [first, at, ctx.const(0, "int64", "zero")], f"index{p}_{q}")
            index = here if index is None else ctx.emit("add", [index, here], f"indices{p}_{q}")
    return index


@ATEN_OPS.register_op("aten.max_pool2d_with_indices", "max_pool2d, and the indices as masks of the first max")
def _max_pool_with_indices(ctx: FxContext):
    x = ctx.tensor(ctx.args[0], ctx.out_type(0).dtype)
    kernel, stride, padding = _pool_args(ctx, x, 1)
    dilation, ceil_mode = ctx.arg(4, "dilation", [1, 1]), bool(ctx.arg(5, "ceil_mode", False))
    if any(v != 1 for v in dilation):
        raise ctx.unsupported(f"dilation {list(dilation)}")
    y = ctx.emit("max_pool2d", [x], "max", kernel=kernel, strides=stride, padding=padding, ceil_mode=ceil_mode)
    if not ctx.node.users or all(u.args[1] == 0 for u in ctx.node.users):
        return (y, Unavailable("the indices of a max pool"))  # nobody asks for them
    return (y, max_pool_indices(ctx, x, y, kernel, stride, padding, ceil_mode))


@ATEN_OPS.register_op("aten.max_pool2d_with_indices_backward", "the max_pool2d VJP rule (the first max of each "
                      "window gets the gradient, as the indices say)")
def _max_pool_backward(ctx: FxContext):
    g, x = ctx.tensor(ctx.args[0]), ctx.tensor(ctx.args[1])
    kernel, stride, padding = _pool_args(ctx, x, 2)
    dilation, ceil_mode = ctx.arg(5, "dilation", [1, 1]), bool(ctx.arg(6, "ceil_mode", False))
    if any(v != 1 for v in dilation):
        raise ctx.unsupported(f"dilation {list(dilation)}")
    # the indices are those max_pool2d_with_indices gives x: the first maximum of each window,
    # which the rule finds again from the pooled values
    y = ctx.emit("max_pool2d", [x], "max", kernel=kernel, strides=stride, padding=padding, ceil_mode=ceil_mode)
    (dx,) = _vjp_max_pool2d(RuleEmitter(ctx, y), g, x, kernel, stride, padding, ceil_mode)
    return dx



# --- nll_loss (kept whole, not decomposed: one akg nll_loss, as the .mir models' losses) ---------

_NLL_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _nll_args(ctx: FxContext, scores_at: int):
    scores, target, weight = ctx.args[scores_at], ctx.args[scores_at + 1], ctx.arg(scores_at + 2, "weight")
    reduction = _NLL_REDUCTIONS.get(ctx.arg(scores_at + 3, "reduction", 1))
    ignore_index = ctx.arg(scores_at + 4, "ignore_index", -100)
    if weight is not None:
        raise ctx.unsupported("class weights")
    if reduction is None:
        raise ctx.unsupported(f"reduction {ctx.arg(scores_at + 3, 'reduction')}")
    if not isinstance(scores, Value) or not isinstance(target, Value) or len(scores.shape) != 2:
        raise ctx.unsupported("scores other than [N, C] with labels [N]")
    return scores, target, reduction, int(ignore_index)


def _kept_count(ctx: FxContext, target: Value, ignore_index: int, dtype: str) -> Value:
    ignored = ctx.emit("equal", [target, ctx.const(ignore_index, target.dtype, "ignore_index")], "ignored")
    kept = ctx.emit("cast", [ctx.emit("logical_not", [ignored], "kept")], "kept", to=dtype)
    return kept


@ATEN_OPS.register_op("aten.nll_loss_forward", "nll_loss (ignore_index; no class weights), total weight")
def _nll_loss_forward(ctx: FxContext):
    scores, target, reduction, ignore_index = _nll_args(ctx, 0)
    loss = ctx.emit("nll_loss", [scores, target], "loss", reduction=reduction, ignore_index=ignore_index)
    kept = _kept_count(ctx, target, ignore_index, scores.dtype)
    return loss, ctx.emit("sum", [kept], "total_weight", axes=[0])


@ATEN_OPS.register_op("aten.nll_loss_backward", "-one_hot(labels) times each kept row's cotangent")
def _nll_loss_backward(ctx: FxContext):
    g = ctx.args[0]
    scores, target, reduction, ignore_index = _nll_args(ctx, 1)
    total = ctx.arg(6, "total_weight")
    n, c = scores.shape
    kept = _kept_count(ctx, target, ignore_index, scores.dtype)
    if reduction == "mean":
        rows = ctx.emit("mul", [kept, ctx.emit("div", [g, total], "share")], "rows")
    else:
        rows = ctx.emit("mul", [kept, g], "rows")
    rows = ctx.emit("reshape", [rows], "rows", shape=[n, 1])
    ignored = ctx.emit("equal", [target, ctx.const(ignore_index, target.dtype, "ignore_index")], "ignored")
    safe = ctx.emit("where", [ignored, ctx.const(0, target.dtype, "class0"), target], "labels")
    hot = ctx.emit("one_hot", [safe], "onehot", depth=c, dtype=scores.dtype)
    return ctx.emit("neg", [ctx.emit("mul", [hot, rows], "picked")])
