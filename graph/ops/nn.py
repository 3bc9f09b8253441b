"""Neural-network composites (expanded into basic ops before kernel generation): softmax,
log_softmax, layer_norm, batch_norm (inference), dropout, cross_entropy, nll_loss."""

from __future__ import annotations

import numpy as np

from akg.errors import ShapeError
from akg.graph.ops.registry import COMPOSITE, Attr, defop
from akg.graph.types import TensorType, is_float, is_int, normalize_axis


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


@defop("dropout", kind=COMPOSITE, flops=lambda ins, outs, attrs: 0,
       infer=lambda x, rate: _float(x),
       attrs=[Attr("rate", "float", 0.5, check=lambda r: None if 0 <= r < 1 else "must be in [0, 1)")])
def dropout(x, rate):
    """Inference dropout: the identity."""
    return x.copy()


# --- losses -----------------------------------------------------------------------------------

_REDUCTION = [Attr("reduction", "str", "mean", choices=("mean", "sum", "none"))]


def _loss_infer(scores: TensorType, labels: TensorType, reduction: str) -> TensorType:
    _float(scores)
    if scores.rank != 2 or labels.rank != 1 or labels.shape[0] != scores.shape[0]:
        raise ShapeError(f"needs scores[N, C] and labels[N], got {scores} and {labels}")
    if not is_int(labels.dtype):
        raise ShapeError(f"labels must be integer class indices, got {labels}")
    return scores.with_shape((scores.shape[0],) if reduction == "none" else ())


def _reduce_loss(per_row: np.ndarray, reduction: str, dtype) -> np.ndarray:
    if reduction == "mean":
        per_row = per_row.mean()
    elif reduction == "sum":
        per_row = per_row.sum()
    return np.asarray(per_row).astype(dtype)


def _labels_bound(scores: TensorType, labels: TensorType, **_) -> dict[int, int]:
    return {1: scores.shape[1]}


@defop("nll_loss", kind=COMPOSITE, infer=_loss_infer, attrs=_REDUCTION,
       flops=_scaled_flops(1), index_bounds=_labels_bound)
def nll_loss(logp, labels, reduction):
    """-logp[i, labels[i]], reduced by mean, sum or none."""
    if labels.size and (labels.min() < 0 or labels.max() >= logp.shape[1]):
        raise IndexError(f"label out of range [0, {logp.shape[1]})")
    picked = np.take_along_axis(_wide(logp), labels.astype(np.int64)[:, None], axis=1)[:, 0]
    return _reduce_loss(-picked, reduction, logp.dtype)


@defop("cross_entropy", kind=COMPOSITE, infer=_loss_infer, attrs=_REDUCTION,
       flops=_scaled_flops(6), index_bounds=_labels_bound)
def cross_entropy(logits, labels, reduction):
    """nll_loss(log_softmax(logits, axis=1), labels)."""
    return nll_loss(log_softmax(_wide(logits), axis=1), labels, reduction).astype(logits.dtype)


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


@defexpand("dropout")
def _expand_dropout(e, x, rate):
    return e.op("reshape", x, shape=list(x.shape), final=True)


def _pick_and_reduce(e, logp, labels, reduction):
    n, c = logp.shape
    hot = e.op("one_hot", labels, depth=c, dtype=logp.dtype, hint="onehot")
    picked = e.op("sum", e.op("mul", logp, hot, hint="masked"), axes=[1], hint="picked")
    if reduction == "none":
        return e.op("neg", picked, final=True)
    total = e.op("sum", picked, axes=[0], hint="total")
    if reduction == "sum":
        return e.op("neg", total, final=True)
    return e.op("div", total, e.const(-n, like=(logp,)), final=True)


@defexpand("nll_loss")
def _expand_nll_loss(e, logp, labels, reduction):
    return _pick_and_reduce(e, logp, labels, reduction)


@defexpand("cross_entropy")
def _expand_cross_entropy(e, logits, labels, reduction):
    logp = _expand_log_softmax(_Inner(e, "logp"), logits, axis=1)
    return _pick_and_reduce(e, logp, labels, reduction)


class _Inner:
    """An emitter view whose `final` outputs are ordinary internal values (for nesting)."""

    def __init__(self, e, hint: str):
        self._e, self._hint = e, hint

    def op(self, op, *inputs, final=False, hint=None, **attrs):
        return self._e.op(op, *inputs, hint=self._hint if final else hint, **attrs)

    def const(self, *args, **kwargs):
        return self._e.const(*args, **kwargs)
