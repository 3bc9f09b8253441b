"""Neural-network composites (expanded into basic ops before kernel generation): softmax,
log_softmax, layer_norm, batch_norm, variance (batch statistics for training-mode batch norm),
dropout, cross_entropy, nll_loss."""

from __future__ import annotations

import numpy as np

from akg.errors import ShapeError
from akg.graph.ops.registry import COMPOSITE, Attr, defop
from akg.graph.ops.reduce import reduced_shape
from akg.graph.types import TensorType, is_float, is_int, normalize_axes, normalize_axis


def _float(x: TensorType) -> TensorType:
    if not is_float(x.dtype):
        raise ShapeError(f"needs floating-point input, got {x}")
    return x


def _wide(x: np.ndarray) -> np.ndarray:
    """fp16 statistics are computed in fp32."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _scaled_flops(factor: int):
    return lambda ins, outs, attrs: factor * ins[0].size


_AXIS = [Attr("axis", "int", -1)]


def _axis_infer(x: TensorType, axis: int) -> TensorType:
    normalize_axis(axis, _float(x).rank)
    return x


@defop("softmax", kind=COMPOSITE, infer=_axis_infer, attrs=_AXIS, flops=_scaled_flops(5))
def softmax(x, axis):
    """exp(x - max) / sum(exp(x - max)) along axis."""
    xw = _wide(x)
    e = np.exp(xw - xw.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


@defop("log_softmax", kind=COMPOSITE, infer=_axis_infer, attrs=_AXIS, flops=_scaled_flops(5))
def log_softmax(x, axis):
    """x - max - log(sum(exp(x - max))) along axis."""
    xw = _wide(x)
    z = xw - xw.max(axis=axis, keepdims=True)
    return (z - np.log(np.exp(z).sum(axis=axis, keepdims=True))).astype(x.dtype)


# --- normalisation ----------------------------------------------------------------------------


def _layer_norm_infer(x, gamma, beta, begin_norm_axis, epsilon) -> TensorType:
    axis = normalize_axis(begin_norm_axis, _float(x).rank, "begin_norm_axis")
    for name, t in (("gamma", gamma), ("beta", beta)):
        if t.shape != x.shape[axis:] or t.dtype != x.dtype:
            raise ShapeError(f"{name} must be {TensorType(x.shape[axis:], x.dtype)}, got {t}")
    return x


@defop("layer_norm", kind=COMPOSITE, infer=_layer_norm_infer, flops=_scaled_flops(8),
       attrs=[Attr("begin_norm_axis", "int", -1), Attr("epsilon", "float", 1e-5)])
def layer_norm(x, gamma, beta, begin_norm_axis, epsilon):
    """(x - mean) / sqrt(var + eps) * gamma + beta over axes [begin_norm_axis, rank)."""
    axes = tuple(range(normalize_axis(begin_norm_axis, x.ndim), x.ndim))
    xw = _wide(x)
    mean = xw.mean(axis=axes, keepdims=True)
    var = ((xw - mean) ** 2).mean(axis=axes, keepdims=True)
    return ((xw - mean) / np.sqrt(var + epsilon) * gamma + beta).astype(x.dtype)


def _batch_norm_infer(x, gamma, beta, mean, var, axis, epsilon) -> TensorType:
    if _float(x).rank == 0:
        raise ShapeError(f"needs a channel axis, got the scalar {x}")
    ax = normalize_axis(axis, x.rank)
    want = TensorType((x.shape[ax],), x.dtype)
    for name, t in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var)):
        if t != want:
            raise ShapeError(f"{name} must be {want}, got {t}")
    return x


@defop("batch_norm", kind=COMPOSITE, infer=_batch_norm_infer, flops=_scaled_flops(4),
       attrs=[Attr("axis", "int", 1), Attr("epsilon", "float", 1e-5)])
def batch_norm(x, gamma, beta, mean, var, axis, epsilon):
    """Inference batch norm with given (moving) statistics along the channel axis."""
    shape = [1] * x.ndim
    shape[axis] = -1
    c = lambda v: _wide(v).reshape(shape)  # noqa: E731
    return ((_wide(x) - c(mean)) / np.sqrt(c(var) + epsilon) * c(gamma) + c(beta)).astype(x.dtype)


def _variance_infer(x: TensorType, axes, keepdims) -> TensorType:
    ax = normalize_axes(axes, _float(x).rank)
    if any(x.shape[a] == 0 for a in ax):
        raise ShapeError(f"cannot take the variance over an empty axis of {x}")
    return x.with_shape(reduced_shape(x.shape, ax, keepdims))


@defop("variance", kind=COMPOSITE, infer=_variance_infer, flops=_scaled_flops(3),
       attrs=[Attr("axes", "ints", None, optional=True), Attr("keepdims", "bool", False)])
def variance(x, axes, keepdims):
    """Biased variance mean((x - mean(x))^2) over `axes` (all when None). Training-mode batch
    norm is batch_norm(x, gamma, beta, mean(x, axes), variance(x, axes)) with axes all but the
    channel axis; gradients flow through the batch statistics."""
    ax = normalize_axes(axes, x.ndim)
    xw = _wide(x)
    centred = xw - xw.mean(axis=ax, keepdims=True)
    return np.asarray((centred * centred).mean(axis=ax, keepdims=keepdims)).astype(x.dtype)


@defop("dropout", kind=COMPOSITE, flops=lambda ins, outs, attrs: 0,
       infer=lambda x, rate: _float(x),
       attrs=[Attr("rate", "float", 0.5, check=lambda r: None if 0 <= r < 1 else "must be in [0, 1)")])
def dropout(x, rate):
    """Inference dropout: the identity."""
    return x.copy()


# --- losses -----------------------------------------------------------------------------------

_REDUCTION = [Attr("reduction", "str", "mean", choices=("mean", "sum", "none")),
              Attr("ignore_index", "int", None, optional=True)]


def _loss_infer(scores: TensorType, labels: TensorType, reduction: str, ignore_index=None) -> TensorType:
    _float(scores)
    if scores.rank != 2 or labels.rank != 1 or labels.shape[0] != scores.shape[0]:
        raise ShapeError(f"needs scores[N, C] and labels[N], got {scores} and {labels}")
    if not is_int(labels.dtype):
        raise ShapeError(f"labels must be integer class indices, got {labels}")
    return scores.with_shape((scores.shape[0],) if reduction == "none" else ())


def _reduce_loss(per_row: np.ndarray, reduction: str, dtype, kept: np.ndarray | None = None) -> np.ndarray:
    """A mean over the rows `kept` (all when None): with every row ignored, 0/0 = nan as
    PyTorch gives."""
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            per_row = per_row.sum() / (per_row.size if kept is None else kept.sum())
    elif reduction == "sum":
        per_row = per_row.sum()
    return np.asarray(per_row).astype(dtype)


def _labels_bound(scores: TensorType, labels: TensorType, **_) -> dict[int, int]:
    return {1: scores.shape[1]}


@defop("nll_loss", kind=COMPOSITE, infer=_loss_infer, attrs=_REDUCTION,
       flops=_scaled_flops(1), index_bounds=_labels_bound)
def nll_loss(logp, labels, reduction, ignore_index=None):
    """-logp[i, labels[i]], reduced by mean, sum or none; rows whose label is `ignore_index`
    give 0 and are left out of the mean (PyTorch's and ONNX's ignore_index)."""
    kept = None if ignore_index is None else labels != ignore_index
    valid = labels if kept is None else labels[kept]
    if valid.size and (valid.min() < 0 or valid.max() >= logp.shape[1]):
        raise IndexError(f"label out of range [0, {logp.shape[1]})")
    safe = labels if kept is None else np.where(kept, labels, 0)
    picked = np.take_along_axis(_wide(logp), safe.astype(np.int64)[:, None], axis=1)[:, 0]
    if kept is not None:
        picked = np.where(kept, picked, 0)
    return _reduce_loss(-picked, reduction, logp.dtype, kept)


@defop("cross_entropy", kind=COMPOSITE, infer=_loss_infer, attrs=_REDUCTION,
       flops=_scaled_flops(6), index_bounds=_labels_bound)
def cross_entropy(logits, labels, reduction, ignore_index=None):
    """nll_loss(log_softmax(logits, axis=1), labels)."""
    return nll_loss(log_softmax(_wide(logits), axis=1), labels, reduction, ignore_index).astype(logits.dtype)


# --- expanders ----------------------------------------------------------------------------------

from akg.graph.ops.registry import defexpand  # noqa: E402


def _stat_dtype(x) -> str:
    return "float32" if x.dtype == "float16" else x.dtype


@defexpand("softmax")
def _expand_softmax(e, x, axis):
    """exp(x - max) / sum(exp(x - max)): the max keeps exp from overflowing."""
    m = e.op("max", x, axes=[axis], keepdims=True, hint="max")
    z = e.op("exp", e.op("sub", x, m, hint="shifted"), hint="exp")
    s = e.op("sum", z, axes=[axis], keepdims=True, hint="sum")
    return e.op("div", z, s, final=True)


@defexpand("log_softmax")
def _expand_log_softmax(e, x, axis):
    m = e.op("max", x, axes=[axis], keepdims=True, hint="max")
    z = e.op("sub", x, m, hint="shifted")
    s = e.op("sum", e.op("exp", z, hint="exp"), axes=[axis], keepdims=True, hint="sum")
    return e.op("sub", z, e.op("log", s, hint="logsum"), final=True)


@defexpand("layer_norm")
def _expand_layer_norm(e, x, gamma, beta, begin_norm_axis, epsilon):
    axes = list(range(normalize_axis(begin_norm_axis, x.type.rank), x.type.rank))
    wide = _stat_dtype(x)
    xw = x if wide == x.dtype else e.op("cast", x, to=wide, hint="wide")
    mean = e.op("mean", xw, axes=axes, keepdims=True, hint="mean")
    centred = e.op("sub", xw, mean, hint="centred")
    var = e.op("mean", e.op("mul", centred, centred, hint="sq"), axes=axes, keepdims=True, hint="var")
    rstd = e.op("rsqrt", e.op("add", var, e.const(epsilon, dtype=wide), hint="var_eps"), hint="rstd")
    y = e.op("mul", centred, rstd, hint="normed")
    if wide != x.dtype:
        y = e.op("cast", y, to=x.dtype, hint="narrow")
    return e.op("add", e.op("mul", y, gamma, hint="scaled"), beta, final=True)


@defexpand("batch_norm")
def _expand_batch_norm(e, x, gamma, beta, mean, var, axis, epsilon):
    """y = x * a + c with a = gamma * rsqrt(var + eps), c = beta - mean * a (per channel)."""
    ax = normalize_axis(axis, x.type.rank)
    shape = [1] * x.type.rank
    shape[ax] = x.shape[ax]
    a = e.op("mul", gamma, e.op("rsqrt", e.op("add", var, e.const(epsilon, like=(x,)), hint="var_eps"),
                                hint="rstd"), hint="a")
    c = e.op("sub", beta, e.op("mul", mean, a, hint="ma"), hint="c")
    a4 = e.op("reshape", a, shape=shape, hint="a4")
    c4 = e.op("reshape", c, shape=shape, hint="c4")
    return e.op("add", e.op("mul", x, a4, hint="xa"), c4, final=True)


@defexpand("variance")
def _expand_variance(e, x, axes, keepdims):
    ax = list(normalize_axes(axes, x.type.rank))
    wide = _stat_dtype(x)
    xw = x if wide == x.dtype else e.op("cast", x, to=wide, hint="wide")
    centred = e.op("sub", xw, e.op("mean", xw, axes=ax, keepdims=True, hint="mean"), hint="centred")
    sq = e.op("mul", centred, centred, hint="sq")
    if wide == x.dtype:
        return e.op("mean", sq, axes=ax, keepdims=keepdims, final=True)
    return e.op("cast", e.op("mean", sq, axes=ax, keepdims=keepdims, hint="var"), to=x.dtype, final=True)


@defexpand("dropout")
def _expand_dropout(e, x, rate):
    return e.op("reshape", x, shape=list(x.shape), final=True)


def _kept_rows(e, labels, ignore_index, dtype):
    """1 for rows whose label is not `ignore_index`, 0 for the others, as `dtype`[N]."""
    same = e.op("equal", labels, e.const(ignore_index, dtype=labels.dtype), hint="ignored")
    return e.op("cast", e.op("logical_not", same), to=dtype, hint="kept")


def _one_hot_labels(e, labels, c: int, dtype, ignore_index=None):
    """one_hot of the labels; an ignored label is read as class 0 (its row is masked out after):
    one_hot's index bound, which the runtime checks inputs against, then does not refuse it."""
    if ignore_index is not None:
        same = e.op("equal", labels, e.const(ignore_index, dtype=labels.dtype), hint="ignored")
        labels = e.op("where", same, e.const(0, dtype=labels.dtype), labels, hint="labels")
    return e.op("one_hot", labels, depth=c, dtype=dtype, hint="onehot")


def _pick_and_reduce(e, logp, labels, reduction, ignore_index=None):
    n, c = logp.shape
    hot = _one_hot_labels(e, labels, c, logp.dtype, ignore_index)
    picked = e.op("sum", e.op("mul", logp, hot, hint="masked"), axes=[1], hint="picked")
    kept = None
    if ignore_index is not None:
        kept = _kept_rows(e, labels, ignore_index, logp.dtype)
        picked = e.op("mul", picked, kept, hint="picked")
    if reduction == "none":
        return e.op("neg", picked, final=True)
    total = e.op("sum", picked, axes=[0], hint="total")
    if reduction == "sum":
        return e.op("neg", total, final=True)
    if kept is None:
        return e.op("div", total, e.const(-n, like=(logp,)), final=True)
    count = e.op("sum", kept, axes=[0], hint="count")
    return e.op("div", e.op("neg", total, hint="total"), count, final=True)


@defexpand("nll_loss")
def _expand_nll_loss(e, logp, labels, reduction, ignore_index):
    return _pick_and_reduce(e, logp, labels, reduction, ignore_index)


@defexpand("cross_entropy")
def _expand_cross_entropy(e, logits, labels, reduction, ignore_index):
    logp = _expand_log_softmax(_Inner(e, "logp"), logits, axis=1)
    return _pick_and_reduce(e, logp, labels, reduction, ignore_index)


class _Inner:
    """An emitter view whose `final` outputs are ordinary internal values (for nesting)."""

    def __init__(self, e, hint: str):
        self._e, self._hint = e, hint

    def op(self, op, *inputs, final=False, hint=None, **attrs):
        return self._e.op(op, *inputs, hint=self._hint if final else hint, **attrs)

    def const(self, *args, **kwargs):
        return self._e.const(*args, **kwargs)


# --- VJP rules ----------------------------------------------------------------------------------

from akg.graph.ops.registry import defvjp  # noqa: E402


@defvjp("softmax")
def _vjp_softmax(e, g, x, axis):
    """dx = y (g - sum(g y))."""
    dot = e.op("sum", e.op("mul", g, e.out, hint="gy"), axes=[axis], keepdims=True, hint="dot")
    return (e.op("mul", e.out, e.op("sub", g, dot)),)


@defvjp("log_softmax")
def _vjp_log_softmax(e, g, x, axis):
    """dx = g - softmax(x) sum(g)."""
    total = e.op("sum", g, axes=[axis], keepdims=True, hint="total")
    return (e.op("sub", g, e.op("mul", e.op("exp", e.out, hint="probs"), total)),)


@defvjp("layer_norm")
def _vjp_layer_norm(e, g, x, gamma, beta, begin_norm_axis, epsilon):
    """With xhat = (x - mean) rstd over the normalised axes A: dgamma = sum(g xhat), dbeta =
    sum(g) over the leading axes, dx = rstd (dxhat - mean_A(dxhat) - xhat mean_A(dxhat xhat))
    where dxhat = g gamma. The statistics are recomputed from x."""
    first = normalize_axis(begin_norm_axis, x.type.rank)
    norm, lead = list(range(first, x.type.rank)), list(range(first))
    narrow, wide = x.dtype, _stat_dtype(x)
    if wide != narrow:  # fp16: statistics and sums in fp32, as the forward expansion
        x, g, gamma = (e.op("cast", v, to=wide, hint="wide") for v in (x, g, gamma))
    mean = e.op("mean", x, axes=norm, keepdims=True, hint="mean")
    centred = e.op("sub", x, mean, hint="centred")
    var = e.op("mean", e.op("mul", centred, centred, hint="sq"), axes=norm, keepdims=True, hint="var")
    rstd = e.op("rsqrt", e.op("add", var, epsilon, hint="var_eps"), hint="rstd")
    xhat = e.op("mul", centred, rstd, hint="xhat")
    dxhat = e.op("mul", g, gamma, hint="dxhat")
    m1 = e.op("mean", dxhat, axes=norm, keepdims=True, hint="m1")
    m2 = e.op("mean", e.op("mul", dxhat, xhat), axes=norm, keepdims=True, hint="m2")
    dx = e.op("mul", e.op("sub", e.op("sub", dxhat, m1), e.op("mul", xhat, m2)), rstd, hint="dx")
    gxhat = e.op("mul", g, xhat, hint="gxhat")
    dgamma = e.op("sum", gxhat, axes=lead, hint="dgamma") if lead else gxhat
    dbeta = e.op("sum", g, axes=lead, hint="dbeta") if lead else g
    if wide != narrow:
        return tuple(e.op("cast", v, to=narrow, hint="narrow") for v in (dx, dgamma, dbeta))
    return dx, dgamma, dbeta


@defvjp("batch_norm")
def _vjp_batch_norm(e, g, x, gamma, beta, mean, var, axis, epsilon):
    """y = (x - mean) a + beta with a = gamma rstd, rstd = (var + eps)^-1/2, per channel; the
    statistics are inputs (with variance/mean of x as inputs this is training-mode batch norm)."""
    ax = normalize_axis(axis, x.type.rank)
    others = [i for i in range(x.type.rank) if i != ax]
    shape = [x.shape[i] if i == ax else 1 for i in range(x.type.rank)]

    def per_channel(v, hint):
        return e.op("reshape", v, shape=shape, hint=hint)

    rstd = e.op("rsqrt", e.op("add", var, epsilon, hint="var_eps"), hint="rstd")
    a = e.op("mul", gamma, rstd, hint="a")
    dx = e.op("mul", g, per_channel(a, "a4"), hint="dx")
    centred = e.op("sub", x, per_channel(mean, "mean4"), hint="centred")
    gsum = e.op("sum", g, axes=others, hint="gsum")
    gdot = e.op("sum", e.op("mul", g, centred), axes=others, hint="gdot")
    dgamma = e.op("mul", gdot, rstd, hint="dgamma")
    dmean = e.op("neg", e.op("mul", gsum, a), hint="dmean")
    rstd3 = e.op("mul", e.op("mul", rstd, rstd), rstd, hint="rstd3")
    dvar = e.op("mul", e.op("mul", gdot, gamma), e.op("mul", rstd3, -0.5), hint="dvar")
    return dx, dgamma, gsum, dmean, dvar


@defvjp("variance")
def _vjp_variance(e, g, x, axes, keepdims):
    """d var = 2 (x - mean) / n."""
    ax = normalize_axes(axes, x.type.rank)
    count = int(np.prod([x.shape[a] for a in ax], dtype=np.int64))
    centred = e.op("sub", x, e.op("mean", x, axes=list(ax), keepdims=True, hint="mean"), hint="centred")
    return (e.op("mul", e.broadcast_back(g, ax, x.shape), e.op("mul", centred, 2.0 / count)),)


@defvjp("dropout")
def _vjp_dropout(e, g, x, rate):
    return (g,)


def _row_weights(e, g, n: int, reduction: str, labels=None, ignore_index=None, dtype=None):
    """The cotangent of each row's loss, shaped to broadcast over [N, C]: zero on ignored rows,
    a mean's divided by the number of rows kept."""
    if ignore_index is None:
        if reduction == "none":
            return e.op("reshape", g, shape=[n, 1], hint="rows")
        return e.op("div", g, float(n), hint="rows") if reduction == "mean" else g
    kept = _kept_rows(e, labels, ignore_index, dtype)
    if reduction == "mean":
        kept = e.op("div", kept, e.op("sum", kept, axes=[0], hint="count"), hint="share")
    rows = e.op("mul", kept, g, hint="rows")
    return e.op("reshape", rows, shape=[n, 1], hint="rows")


@defvjp("nll_loss")
def _vjp_nll_loss(e, g, logp, labels, reduction, ignore_index):
    n, c = logp.shape
    hot = _one_hot_labels(e, labels, c, logp.dtype, ignore_index)
    rows = _row_weights(e, g, n, reduction, labels, ignore_index, logp.dtype)
    return e.op("neg", e.op("mul", hot, rows)), None


@defvjp("cross_entropy")
def _vjp_cross_entropy(e, g, logits, labels, reduction, ignore_index):
    """d logits = (softmax(logits) - onehot(labels)) times each row's cotangent."""
    n, c = logits.shape
    hot = _one_hot_labels(e, labels, c, logits.dtype, ignore_index)
    probs = e.op("softmax", logits, axis=1, hint="probs")
    rows = _row_weights(e, g, n, reduction, labels, ignore_index, logits.dtype)
    return e.op("mul", e.op("sub", probs, hot), rows), None


# --- sharding rules ---------------------------------------------------------------------------

from akg.graph.ops.registry import defsharding  # noqa: E402


def _dim_roles(rank: int, dims, ins=(0,), extra=None):
    """A role per dim in `dims`, splitting that dim of the inputs `ins` and of the output;
    `extra(d)` adds (input, dim) pairs split alike (batch norm's per-channel vectors)."""
    from akg.graph.parallel.rules import Role

    return [Role(f"d{d}", ins=tuple((i, d) for i in ins) + tuple(extra(d) if extra else ()),
                 outs=((0, d),)) for d in dims]


@defsharding("softmax", "log_softmax")
def _softmax_sharding(call, mesh):
    """Any split of the dims other than the normalised one."""
    from akg.graph.parallel.rules import assign_roles

    rank = call.ins[0].rank
    axis = normalize_axis(call.attrs["axis"], rank)
    return assign_roles(call, mesh, _dim_roles(rank, [d for d in range(rank) if d != axis]))


@defsharding("layer_norm")
def _layer_norm_sharding(call, mesh):
    """Any split of the leading (not normalised) dims; gamma and beta replicated."""
    from akg.graph.parallel.rules import assign_roles

    first = normalize_axis(call.attrs["begin_norm_axis"], call.ins[0].rank)
    return assign_roles(call, mesh, _dim_roles(call.ins[0].rank, range(first)))


@defsharding("batch_norm")
def _batch_norm_sharding(call, mesh):
    """Inference batch norm is elementwise with per-channel vectors: any split, the channel
    dim's split shared by gamma, beta, mean and var."""
    from akg.graph.parallel.rules import assign_roles

    rank = call.ins[0].rank
    axis = normalize_axis(call.attrs["axis"], rank)
    per_channel = lambda d: [(i, 0) for i in range(1, 5)] if d == axis else []  # noqa: E731
    return assign_roles(call, mesh, _dim_roles(rank, range(rank), extra=per_channel))


@defsharding("variance")
def _variance_sharding(call, mesh):
    """Any split of the dims kept (the statistics need every element of the reduced ones)."""
    from akg.graph.ops.reduce import reduce_roles
    from akg.graph.parallel.rules import assign_roles

    axes = normalize_axes(call.attrs["axes"], call.ins[0].rank)
    return assign_roles(call, mesh, reduce_roles(call, axes, reduced_partial=False, linear=False))


@defsharding("dropout")
def _dropout_sharding(call, mesh):
    """The identity at inference: any split; partial sums pass."""
    from akg.graph.parallel.rules import assign_roles, partial_role

    rank = call.ins[0].rank
    return assign_roles(call, mesh, [*_dim_roles(rank, range(rank)), partial_role("partial", (0,))])


@defsharding("cross_entropy", "nll_loss")
def _loss_sharding(call, mesh):
    """Rows split (labels alike): per-row losses split; a summed loss is a partial sum, a
    mean one a partial sum of local means scaled by 1/pieces. nll_loss is linear in logp: a
    partial logp gives a partial loss, and split classes give a partial loss too, each rank
    picking only the labels it holds (the rank's first class computed, never a constant)."""
    from akg.graph.parallel.rules import Role, assign_roles, group_size, partial_role, with_local

    reduction = call.attrs["reduction"]
    rows = Role("rows", ins=((0, 0), (1, 0)),
                outs=((0, 0),) if reduction == "none" else (),
                partial_outs=() if reduction == "none" else (0,))
    roles = [rows]
    if call.op == "nll_loss":
        roles += [Role("classes", ins=((0, 1),), partial_outs=(0,)), partial_role("partial", (0,))]
    n, c = call.ins[0].shape

    def finish(s, by_role):
        k_rows = group_size(mesh, by_role, "rows")
        classes = by_role.get("classes", ())
        if call.attrs["ignore_index"] is not None and (classes or (reduction == "mean" and k_rows > 1)):
            return None  # ignored labels: a mean over the rows kept is no mean of local means
        if classes:
            return with_local(s, lambda b, values, attrs, mesh: _nll_of_classes(b, *values, n, c, classes, mesh,
                                                                                attrs["reduction"]))
        if reduction == "mean" and k_rows > 1:
            return with_local(s, lambda b, values, attrs, mesh: _scaled_loss(b, call.op, values, attrs, k_rows))
        return s

    return assign_roles(call, mesh, roles, finish)


def _scaled_loss(b, op, values, attrs, k: int):
    from akg.graph.parallel.rules import scaled

    return scaled(b, b.op(op, *values, **attrs), 1 / k)


def _nll_of_classes(b, logp, labels, n: int, c: int, classes, mesh, reduction: str):
    """This rank's share of nll_loss over its block of the classes: the labels shifted into
    the block pick through a one_hot of the block's width (labels outside it pick nothing);
    a mean divides by the whole batch `n`."""
    from akg.graph.parallel.rules import const_like, rank_offset

    width = logp.shape[1]
    shifted = b.op("sub", labels, rank_offset(b, c, classes, mesh, labels.dtype))
    hot = b.op("one_hot", shifted, depth=width, dtype=logp.dtype)
    picked = b.op("sum", b.op("mul", logp, hot), axes=[1])
    if reduction == "none":
        return b.op("neg", picked)
    total = b.op("sum", picked, axes=[0])
    if reduction == "sum":
        return b.op("neg", total)
    return b.op("div", total, const_like(b, -n, logp.dtype))
