"""ONNX's selection ops in the ONNX op table (`ONNX_OPS`): TopK (ranks by counting, no sort),
ReverseSequence (a gather by computed positions), CenterCropPad, and the ops whose output
shape is the data's (Compress, NonZero, Unique), which need their deciding input constant;
OptionalHasElement / OptionalGetElement on plain tensors."""

from __future__ import annotations

import numpy as np

from akg.graph.io.onnx_ops import ONNX_OPS, OnnxOpContext as Ctx
from akg.graph.ir import Value


def _to_last(c: Ctx, x: Value, axis: int, what: str) -> Value:
    rank = len(x.shape)
    if axis == rank - 1:
        return x
    perm = [d for d in range(rank) if d != axis] + [axis]
    return c.make("transpose", x, perm=perm, what=what)


def _from_last(c: Ctx, y: Value, axis: int, what: str) -> Value:
    rank = len(y.shape)
    if axis == rank - 1:
        return y
    perm = list(range(rank - 1))
    perm.insert(axis, rank - 1)
    return c.make("transpose", y, perm=perm, what=what)


@ONNX_OPS.register_op("TopK", "greater, equal, sum (ranks), where, sum (selection)")
def _top_k(c: Ctx):
    """The k largest (or smallest) along `axis`, sorted, ties to the lower index: each element's
    rank is the count of elements before it in that order (an [n, n] comparison), and output j
    picks the element of rank j. Quadratic in the axis length: fine for the short axes TopK
    meets in inference graphs (a sort op would be needed past a few thousand)."""
    x = c.v(0)
    rank = len(x.shape)
    axis = c.axis(c.int_("axis", -1), rank)
    k = int(np.asarray(c.known(1, "k")).reshape(-1)[0])
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise c.fail(f"k = {k} is out of range for an axis of {n}")
    if n > 4096:
        raise c.unsupported(f"TopK over an axis of {n} (the rank-counting form is quadratic; up to 4096 is modelled)")
    largest = bool(c.int_("largest", 1))
    xt = _to_last(c, x, axis, "moved")
    lead = list(xt.shape[:-1])
    xi = c.make("reshape", xt, shape=[*lead, n, 1], what="xi")
    xj = c.make("reshape", xt, shape=[*lead, 1, n], what="xj")
    before = np.arange(n)[None, :] < np.arange(n)[:, None]  # [i, j]: j comes before i on a tie
    better = c.make("greater" if largest else "less", xj, xi, what="better")
    tie = c.make("logical_and", c.make("equal", xj, xi, what="equal"), c.const(before, "bool", "earlier"),
                 what="tie")
    ahead = c.make("cast", c.make("logical_or", better, tie, what="ahead"), to="int64", what="ahead64")
    ranks = c.make("sum", ahead, axes=[len(lead) + 1], keepdims=False, what="ranks")  # [..., n]
    slots = c.const(np.arange(k, dtype=np.int64).reshape(k, 1), "int64", "slots")
    picked = c.make("equal", c.make("reshape", ranks, shape=[*lead, 1, n], what="ranks_row"), slots,
                    what="picked")  # [..., k, n]
    xrow = c.make("reshape", xt, shape=[*lead, 1, n], what="xrow")
    values = c.make("sum", c.make("where", picked, xrow, c.scalar(0, x, "zero"), what="chosen"),
                    axes=[len(lead) + 1], keepdims=False, what="values_last")
    positions = c.const(np.arange(n, dtype=np.int64), "int64", "positions")
    index = c.make("sum", c.make("where", picked, positions, c.scalar(0, "int64", "zero_i"), what="chosen_i"),
                   axes=[len(lead) + 1], keepdims=False, what="index_last")
    return _from_last(c, values, axis, "values"), _from_last(c, index, axis, "indices")


@ONNX_OPS.register_op("ReverseSequence", "gather (positions computed from sequence_lens)")
def _reverse_sequence(c: Ctx):
    """y[t, b] = x[lens[b] - 1 - t, b] for t < lens[b], else x[t, b]: a gather of x flattened."""
    x, lens = c.v(0), c.v(1)
    rank = len(x.shape)
    time, batch = c.axis(c.int_("time_axis", 0), rank, "time_axis"), c.axis(c.int_("batch_axis", 1), rank,
                                                                           "batch_axis")
    if time == batch or {time, batch} - {0, 1}:
        raise c.fail(f"time_axis {time} and batch_axis {batch} must be 0 and 1")
    lens = c.make("cast", lens, to="int64", what="lens64") if lens.dtype != "int64" else lens
    shape = [1] * rank
    shape[batch] = x.shape[batch]
    length = c.make("reshape", lens, shape=shape, what="length")
    tshape = [1] * rank
    tshape[time] = x.shape[time]
    t = c.const(np.arange(x.shape[time], dtype=np.int64).reshape(tshape), "int64", "t")
    flipped = c.make("sub", c.make("sub", length, c.scalar(1, "int64", "one"), what="last"), t, what="flipped")
    source = c.make("where", c.make("less", t, length, what="inside"), flipped, t, what="source")
    return c.gather_along(x, source, time, x.shape)


@ONNX_OPS.register_op("CenterCropPad", "slice, pad")
def _center_crop_pad(c: Ctx):
    """Each listed axis cropped or zero-padded to its new length about the centre (the odd
    cell after the middle when cropping, as ONNX's reference)."""
    x = c.v(0)
    rank = len(x.shape)
    shape = c.known_ints(1, "shape")
    axes = [c.axis(a, rank, "axes") for a in (c.ints("axes", None) or range(rank))]
    if len(shape) != len(axes):
        raise c.fail(f"shape {shape} needs one length per axis {axes}")
    begin, end = [0] * rank, list(x.shape)
    before, after = [0] * rank, [0] * rank
    for a, n in zip(axes, shape):
        dim = x.shape[a]
        if n < dim:
            begin[a], end[a] = (dim - n) // 2, (dim - n) // 2 + n
        elif n > dim:
            before[a], after[a] = (n - dim) // 2, n - dim - (n - dim) // 2
    y = x
    if begin != [0] * rank or end != list(x.shape):
        y = c.make("slice", y, begin=begin, end=end, what="cropped")
    if any(before) or any(after):
        y = c.make("pad", y, before=before, after=after, value=0.0, what="padded")
    return c.make("reshape", y, shape=y.shape)


# --- outputs shaped by the data: the deciding input must be constant ------------------------------


@ONNX_OPS.register_op("Compress", "gather (the condition constant)")
def _compress(c: Ctx):
    x = c.v(0)
    condition = np.asarray(c.known(1, "condition")).reshape(-1).astype(bool)
    axis = c.get("axis", None)
    if axis is None:
        x = c.make("reshape", x, shape=[x.type.size], what="flat")
        axis = 0
    else:
        axis = c.axis(int(axis), len(x.shape))
    keep = np.nonzero(condition[:x.shape[axis]])[0].astype(np.int64)
    return c.make("gather", x, c.const(keep, "int64", "kept"), axis=axis)


@ONNX_OPS.register_op("NonZero", "(a constant: its input must be known)")
def _non_zero(c: Ctx):
    data = np.asarray(c.known(0, "the data, whose nonzero count is the output's shape"))
    return c.imp.const(np.asarray(np.nonzero(data), dtype=np.int64).reshape(data.ndim, -1), c.name)


@ONNX_OPS.register_op("OptionalHasElement", "(a constant)")
def _optional_has_element(c: Ctx):
    return c.imp.const(np.asarray(c.has(0)), c.name)


@ONNX_OPS.register_op("OptionalGetElement", "(identity on a tensor)")
def _optional_get_element(c: Ctx):
    if not c.has(0):
        raise c.fail("the optional input is empty")
    x = c.v(0)
    return c.make("reshape", x, shape=x.shape)



@ONNX_OPS.register_op("TensorScatter", "gather (positions computed from write_indices), where")
def _tensor_scatter(c: Ctx):
    """A KV-cache write: cache[b, ..., write[b] + j, ...] = update[b, ..., j, ...] along `axis`
    (mod the cache length in circular mode). Each cache place reads the update place that
    lands on it, if any: a gather of the update flattened and a where."""
    past, update = c.v(0), c.v(1)
    rank = len(past.shape)
    axis = c.axis(c.int_("axis", -2), rank)
    if axis == 0:
        raise c.fail("axis must not be the batch axis 0")
    mode = c.str_("mode", "linear")
    if mode not in ("linear", "circular"):
        raise c.fail(f"mode '{mode}' is not linear or circular")
    if any(p != u for k, (p, u) in enumerate(zip(past.shape, update.shape)) if k != axis) \
            or update.shape[axis] > past.shape[axis]:
        raise c.fail(f"update {update.type} does not fit the cache {past.type} along axis {axis}")
    size, length = past.shape[axis], update.shape[axis]
    batch = past.shape[0]
    if c.has(2):
        write = c.v(2)
        write = c.make("cast", write, to="int64", what="write64") if write.dtype != "int64" else write
    else:
        write = c.const(np.zeros(batch, np.int64), "int64", "write")
    shape = [1] * rank
    shape[0] = batch
    start = c.make("reshape", write, shape=shape, what="start")
    place_shape = [1] * rank
    place_shape[axis] = size
    place = c.const(np.arange(size, dtype=np.int64).reshape(place_shape), "int64", "place")
    j = c.make("sub", place, start, what="offset")  # [batch, 1.., size, 1..]
    if mode == "circular":
        j = c.make("mod", j, c.scalar(size, "int64", "size"), what="wrapped")
    hit = c.make("logical_and", c.make("greater_equal", j, c.scalar(0, "int64", "zero"), what="after"),
                 c.make("less", j, c.scalar(length, "int64", "length"), what="before"), what="hit")
    j = c.make("minimum", c.make("maximum", j, c.scalar(0, "int64", "zero"), what="lo"),
               c.scalar(length - 1, "int64", "last"), what="j")
    written = c.gather_along(update, j, axis, past.shape, what="written")
    return c.make("where", hit, written, past)


@ONNX_OPS.register_op("Unique", "(constants: its input must be known)")
def _unique(c: Ctx):
    """The unique values (or slices along `axis`), the first index of each, the inverse map
    and the counts: all shaped by the data, so computed from it at compile time."""
    data = np.asarray(c.known(0, "the data, whose distinct values are the output's shape"))
    axis = c.get("axis", None)
    flat = data.reshape(-1) if axis is None else data
    if axis is not None:
        axis = c.axis(int(axis), data.ndim)
    y, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True,
                                          axis=axis)
    if not c.int_("sorted", 1):  # in order of first appearance
        order = np.argsort(first)
        remap = np.empty_like(order)
        remap[order] = np.arange(len(order))
        first, counts, inverse = first[order], counts[order], remap[inverse.reshape(-1)]
        y = np.take(flat, first, axis=0 if axis is None else axis)
    outs = [np.asarray(y, data.dtype), first.astype(np.int64), np.asarray(inverse, np.int64).reshape(-1),
            counts.astype(np.int64)]
    return tuple(c.imp.const(o, c.name if k == 0 else f"{c.name}.{k}") for k, o in enumerate(outs))
