"""MindIR training primitives (graph stage, MindIR import): the loss and gradient ops a
training cell exports (SparseSoftmaxCrossEntropyWithLogits and its `is_grad` form, ReluGrad,
BiasAddGrad) and the in-place writes to parameters (Assign, AssignAdd, AssignSub, SGD,
ApplyMomentum), added to `MINDIR_OPS`.

A write converter sees its parameters' values at the side-effect state it runs in (the
importer substitutes them) and returns `Writes`: the new value of each parameter input it
writes, by input index, and the op's own result. `WRITTEN_INPUTS` says which inputs each write
op takes by reference, so the importer knows before converting which parameters change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from akg.graph.io.mindir_ops import MINDIR_OPS, MindirOpContext, _operands
from akg.graph.ir import Value
from akg.graph.types import is_float

# op -> the inputs it writes in place (parameters, taken by reference)
WRITTEN_INPUTS: dict[str, tuple[int, ...]] = {
    "Assign": (0,), "AssignAdd": (0,), "AssignSub": (0,),
    "SGD": (0, 3, 5),  # parameters, accum, stat
    "ApplyMomentum": (0, 1),  # variable, accumulation
    "Adam": (0, 1, 2),  # variable, m, v
}


# the primitives this module adds to MINDIR_OPS
TRAINING_PRIMITIVES = ("SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits", "ReluGrad",
                       "BiasAddGrad", *WRITTEN_INPUTS)


@dataclass(frozen=True)
class Writes:
    """What a write op gives: `values[i]` is the new value of its input i (a parameter),
    `result` the op's own output (the written parameter, as MindSpore returns it)."""

    values: dict[int, Value]
    result: Any


def _written(c: MindirOpContext, values: dict[int, Value]) -> Writes:
    """Check each new value against the parameter it replaces (dtype equal, shape equal up to
    size-1 axes or a broadcast), and give Writes whose result is input 0's new value."""
    out: dict[int, Value] = {}
    for i, v in values.items():
        ref = c.v(i)
        if v.dtype != ref.dtype:
            raise c.fail(f"writes {v.type} into input {i} of type {ref.type}")
        if v.shape != ref.shape:
            if v.type.size == ref.type.size:
                v = c.emit("reshape", [v], f"new{i}", shape=ref.shape)
            else:
                try:
                    v = c.emit("broadcast_to", [v], f"new{i}", shape=ref.shape)
                except Exception:  # noqa: BLE001 - reported as the op's error below
                    raise c.fail(f"writes {v.type} into input {i} of type {ref.type}") from None
        out[i] = v
    return Writes(out, out[0])


def _float_operands(c: MindirOpContext, *indices: int) -> list[Value]:
    """Inputs `indices` as tensors of input 0's floating-point dtype (scalars such as the
    learning rate are cast when they differ)."""
    dtype = c.v(0).dtype
    if not is_float(dtype):
        raise c.fail(f"updates a parameter of type {c.v(0).type}; a floating-point one is needed")
    out = []
    for i in indices:
        v = c.v(i, dtype)
        out.append(v if v.dtype == dtype else c.emit("cast", [v], f"in{i}", to=dtype))
    return out


# --- losses and gradients -----------------------------------------------------------------------


@MINDIR_OPS.register_op("SparseSoftmaxCrossEntropyWithLogits",
                        "cross_entropy(logits, labels, 'mean'); is_grad: (softmax(logits) - "
                        "one_hot(labels)) / N, the gradient of that mean")
def _sparse_softmax_cross_entropy(c: MindirOpContext) -> Value:
    c.expect(2)
    logits, labels = c.v(0), c.v(1)
    if logits.type.rank != 2 or labels.type.rank != 1:
        raise c.fail(f"needs logits[N, C] and labels[N], got {logits.type} and {labels.type}")
    if c.float_(None, "sens", default=1.0) != 1.0:
        raise c.unsupported(f"sens = {c.float_(None, 'sens')} (only 1 is modelled)")
    if not c.bool_(None, "is_grad", default=False):
        return c.emit("cross_entropy", [logits, labels], reduction="mean")
    n, k = logits.shape
    probs = c.emit("softmax", [logits], "probs", axis=1)
    hot = c.emit("one_hot", [labels], "onehot", depth=k, dtype=logits.dtype)
    return c.emit("div", [c.emit("sub", [probs, hot], "diff"), c.const(n, logits.dtype, "batch")])


@MINDIR_OPS.register_op("SoftmaxCrossEntropyWithLogits",
                        "(loss, backprop): -sum(labels * log_softmax(logits), axis 1) and softmax(logits) - labels")
def _softmax_cross_entropy(c: MindirOpContext) -> tuple[Value, Value]:
    c.expect(2)
    logits, labels = _operands(c, 2, True)
    if logits.type.rank != 2 or labels.shape != logits.shape:
        raise c.fail(f"needs logits[N, C] and labels of the same shape, got {logits.type} and {labels.type}")
    logp = c.emit("log_softmax", [logits], "logp", axis=1)
    picked = c.emit("sum", [c.emit("mul", [labels, logp], "masked")], "picked", axes=[1], keepdims=False)
    loss = c.emit("neg", [picked], "loss")
    probs = c.emit("softmax", [logits], "probs", axis=1)
    return loss, c.emit("sub", [probs, labels], "backprop")


@MINDIR_OPS.register_op("ReluGrad", "where(y > 0, dy, 0)")
def _relu_grad(c: MindirOpContext) -> Value:
    c.expect(2)
    dy, y = _operands(c, 2, True)
    active = c.emit("greater", [y, c.const(0, y.dtype, "zero")], "active")
    return c.emit("where", [active, dy, c.const(0, dy.dtype, "zero")])


@MINDIR_OPS.register_op("BiasAddGrad", "sum over every axis but the channel axis (1 for NCHW, last for NHWC)")
def _bias_add_grad(c: MindirOpContext) -> Value:
    c.expect(1, 2)
    dy = c.v(0)
    if dy.type.rank < 2:
        raise c.fail(f"needs a gradient of rank 2 or more, got {dy.type}")
    channel = 1 if c.format(1) == "NCHW" else dy.type.rank - 1
    return c.emit("sum", [dy], axes=[a for a in range(dy.type.rank) if a != channel], keepdims=False)


# --- writes to parameters -----------------------------------------------------------------------


@MINDIR_OPS.register_op("Assign AssignAdd AssignSub", "input 0 := value / input 0 + value / input 0 - value")
def _assign(c: MindirOpContext) -> Writes:
    c.expect(2)
    ref = c.v(0)
    value = c.v(1, ref.dtype)
    if value.dtype != ref.dtype:
        raise c.fail(f"assigns {value.type} to a parameter of type {ref.type}")
    if c.op != "Assign":
        value = c.emit("add" if c.op == "AssignAdd" else "sub", [ref, value], "updated")
    return _written(c, {0: value})


@MINDIR_OPS.register_op("SGD", "MindSpore's SGD kernel: g = grad + weight_decay p; with momentum m > 0, "
                        "accum = g where stat > 0 else m accum + (1 - dampening) g, stat = 0, "
                        "g = accum (nesterov: g + m accum); p = p - lr g. m must be a constant")
def _sgd(c: MindirOpContext) -> Writes:
    c.expect(6)
    p, grad, lr, accum, momentum, stat = _float_operands(c, 0, 1, 2, 3, 4, 5)
    m = c.imp.known(c.args[4])
    if m is None or m.size != 1:
        raise c.unsupported("a momentum that is not a constant scalar (its value decides the update's form)")
    m = float(m.reshape(()))
    decay = c.float_(None, "weight_decay", default=0.0)
    dampening = c.float_(None, "dampening", default=0.0)
    g = grad
    if decay > 0:
        g = c.emit("add", [g, c.emit("mul", [p, c.const(decay, p.dtype, "decay")], "decayed")], "grad")
    values: dict[int, Value] = {}
    if m > 0:
        first = c.emit("greater", [stat, c.const(0, stat.dtype, "zero")], "first")
        kept = c.emit("mul", [accum, momentum], "kept")
        fresh = g if dampening == 0 else c.emit("mul", [g, c.const(1 - dampening, p.dtype, "undamped")], "fresh")
        accum = c.emit("where", [first, g, c.emit("add", [kept, fresh], "blend")], "accum")
        values[3] = accum
        values[5] = c.const(np.zeros(stat.shape), stat.dtype, "stat")
        g = accum if not c.bool_(None, "nesterov", default=False) else \
            c.emit("add", [g, c.emit("mul", [accum, momentum], "lookahead")], "nesterov")
    values[0] = c.emit("sub", [p, c.emit("mul", [lr, g], "step")], "param")
    return _written(c, dict(sorted(values.items())))


@MINDIR_OPS.register_op("ApplyMomentum", "accum = momentum accum + grad; var = var - lr accum (nesterov: "
                        "var - lr grad - lr momentum accum); gradient_scale must be 1")
def _apply_momentum(c: MindirOpContext) -> Writes:
    c.expect(5)
    if c.float_(None, "gradient_scale", default=1.0) != 1.0:
        raise c.unsupported(f"gradient_scale = {c.float_(None, 'gradient_scale')} (only 1 is modelled)")
    var, accum, lr, grad, momentum = _float_operands(c, 0, 1, 2, 3, 4)
    accum = c.emit("add", [c.emit("mul", [accum, momentum], "kept"), grad], "accum")
    if c.bool_(None, "use_nesterov", default=False):
        step = c.emit("add", [c.emit("mul", [grad, lr], "direct"),
                              c.emit("mul", [c.emit("mul", [accum, momentum], "ahead"), lr], "lookahead")], "step")
    else:
        step = c.emit("mul", [accum, lr], "step")
    return _written(c, {0: c.emit("sub", [var, step], "var"), 1: accum})


@MINDIR_OPS.register_op("Adam", "MindSpore's Adam kernel: m += (1 - beta1)(g - m); v += (1 - beta2)(g^2 - v); "
                        "var -= lr sqrt(1 - beta2_power) / (1 - beta1_power) m / (sqrt(v) + eps) "
                        "(nesterov: beta1 m + (1 - beta1) g for m)")
def _adam(c: MindirOpContext) -> Writes:
    c.expect(10)
    var, m, v, b1_power, b2_power, lr, b1, b2, eps, grad = _float_operands(c, *range(10))
    one = c.const(1, var.dtype, "one")
    keep1, keep2 = c.emit("sub", [one, b1], "1-b1"), c.emit("sub", [one, b2], "1-b2")
    m = c.emit("add", [m, c.emit("mul", [c.emit("sub", [grad, m], "dm"), keep1], "m_step")], "m")
    v = c.emit("add", [v, c.emit("mul", [c.emit("sub", [c.emit("mul", [grad, grad], "g2"), v], "dv"), keep2],
                                 "v_step")], "v")
    scale = c.emit("div", [c.emit("sqrt", [c.emit("sub", [one, b2_power], "1-b2p")], "root"),
                           c.emit("sub", [one, b1_power], "1-b1p")], "correction")
    new_lr = c.emit("mul", [lr, scale], "lr")
    moment = m
    if c.bool_(None, "use_nesterov", default=False):
        moment = c.emit("add", [c.emit("mul", [m, b1], "ahead"), c.emit("mul", [grad, keep1], "fresh")], "moment")
    denom = c.emit("add", [c.emit("sqrt", [v], "rms"), eps], "denom")
    var = c.emit("sub", [var, c.emit("mul", [new_lr, c.emit("div", [moment, denom], "dir")], "step")], "var")
    return _written(c, {0: var, 1: m, 2: v})
