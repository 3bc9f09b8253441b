"""ONNX's layout ops in the ONNX op table (`ONNX_OPS`): reshapes, transposes, concat, split,
slice, pad, tile, depth/space moves, and the gathers and scatters (Gather, GatherElements,
GatherND, ScatterElements, ScatterND, OneHot, Trilu) as akg's registry ops."""

from __future__ import annotations

import math

import numpy as np

from akg.graph.io.onnx_ops import ONNX_OPS, OnnxOpContext as Ctx
from akg.graph.ir import Value
from akg.graph.types import broadcast_shapes, is_float


# --- layout ---------------------------------------------------------------------------------------


@ONNX_OPS.register_op("Reshape", "reshape")
def _reshape(c: Ctx):
    x = c.v(0)
    shape = c.known_ints(1, "shape")
    allowzero = c.int_("allowzero", 0)
    out = [x.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(shape)]
    if out.count(-1) > 1:
        raise c.fail(f"shape {shape} has more than one -1")
    if -1 in out:
        rest = math.prod(d for d in out if d != -1)
        if rest == 0 or x.type.size % rest:
            raise c.fail(f"cannot reshape {x.type} to {shape}")
        out[out.index(-1)] = x.type.size // rest
    return c.make("reshape", x, shape=out)


@ONNX_OPS.register_op("Flatten", "reshape")
def _flatten(c: Ctx):
    x = c.v(0)
    rank = len(x.shape)
    axis = c.int_("axis", 1)
    axis = axis + rank if axis < 0 else axis
    return c.make("reshape", x, shape=[math.prod(x.shape[:axis]), math.prod(x.shape[axis:])])


@ONNX_OPS.register_op("Transpose", "transpose")
def _transpose(c: Ctx):
    x = c.v(0)
    perm = c.ints("perm", None)
    return c.make("transpose", x, perm=perm if perm is not None else list(reversed(range(len(x.shape)))))


def _axes(c: Ctx, index: int) -> list[int] | None:
    """Axes from input `index` (newer opsets) or the `axes` attribute (older ones)."""
    if c.has(index):
        return c.known_ints(index, "axes")
    return c.ints("axes", None)


@ONNX_OPS.register_op("Squeeze", "reshape")
def _squeeze(c: Ctx):
    x = c.v(0)
    axes = _axes(c, 1)
    rank = len(x.shape)
    drop = {c.axis(a, rank, "axes") for a in axes} if axes is not None else {i for i, d in enumerate(x.shape) if d == 1}
    if any(x.shape[a] != 1 for a in drop):
        raise c.fail(f"cannot squeeze axes {sorted(drop)} of {x.type}")
    return c.make("reshape", x, shape=[d for i, d in enumerate(x.shape) if i not in drop])


@ONNX_OPS.register_op("Unsqueeze", "reshape")
def _unsqueeze(c: Ctx):
    x = c.v(0)
    axes = _axes(c, 1)
    if axes is None:
        raise c.fail("needs axes")
    rank = len(x.shape) + len(axes)
    new = {c.axis(a, rank, "axes") for a in axes}
    dims = iter(x.shape)
    return c.make("reshape", x, shape=[1 if i in new else next(dims) for i in range(rank)])


@ONNX_OPS.register_op("Concat", "concat")
def _concat(c: Ctx):
    values = [c.v(i) for i in range(len(c.args)) if c.has(i)]
    values = [v for v in values if v.type.size or len(values) == 1]  # empty pieces add nothing
    if len(values) == 1:
        return c.make("reshape", values[0], shape=values[0].shape)
    return c.make("concat", *values, axis=c.int_("axis"))


@ONNX_OPS.register_op("Split", "split")
def _split(c: Ctx):
    x = c.v(0)
    axis = c.axis(c.int_("axis", 0), len(x.shape))
    sizes = c.known_ints(1, "split") if c.has(1) else c.ints("split", None)
    if sizes is None:
        n = c.int_("num_outputs", len(c.outputs))
        chunk = -(-x.shape[axis] // n)
        sizes = [min(chunk, x.shape[axis] - k * chunk) for k in range(n)]
    if len(sizes) == 1:
        return c.make("reshape", x, shape=x.shape)
    return c.emit("split", [x], None, axis=axis, sizes=sizes)


@ONNX_OPS.register_op("Slice", "slice, strided_slice, gather (negative steps)")
def _slice(c: Ctx):
    x = c.v(0)
    rank = len(x.shape)
    starts, ends = c.known_ints(1, "starts"), c.known_ints(2, "ends")
    axes = c.known_ints(3, "axes") if c.has(3) else list(range(len(starts)))
    steps = c.known_ints(4, "steps") if c.has(4) else [1] * len(starts)
    begin, end, stride = [0] * rank, list(x.shape), [1] * rank
    backwards = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = c.axis(a, rank, "axes")
        if st == 0:
            raise c.fail("steps must not be 0")
        lo, hi, st = slice(s, e, st).indices(x.shape[a])
        if st < 0:
            backwards.append((a, list(range(lo, hi, st))))
        else:
            begin[a], end[a], stride[a] = lo, max(hi, lo), st
    out = x
    if begin != [0] * rank or end != list(x.shape) or stride != [1] * rank:
        if stride == [1] * rank:
            out = c.make("slice", x, begin=begin, end=end, what="slice" if backwards else None)
        else:
            out = c.make("strided_slice", x, begin=begin, end=end, strides=stride,
                       what="slice" if backwards else None)
    for k, (a, index) in enumerate(backwards):
        out = c.make("gather", out, c.const(np.asarray(index, np.int64), "int64", f"index{k}"), axis=a,
                   what=f"reverse{k}" if k < len(backwards) - 1 else None)
    return out if out is not x else c.make("reshape", x, shape=x.shape)


@ONNX_OPS.register_op("Expand", "broadcast_to")
def _expand(c: Ctx):
    x = c.v(0)
    shape = broadcast_shapes(x.shape, tuple(c.known_ints(1, "shape")))
    return c.make("broadcast_to", x, shape=shape) if shape != x.shape else c.make("reshape", x, shape=shape)


@ONNX_OPS.register_op("Tile", "reshape, broadcast_to")
def _tile(c: Ctx):
    x = c.v(0)
    reps = c.known_ints(1, "repeats")
    if len(reps) != len(x.shape):
        raise c.fail(f"repeats {reps} need one entry per axis of {x.type}")
    interleaved = [d for pair in zip([1] * len(reps), x.shape) for d in pair]
    wide = c.make("broadcast_to", c.make("reshape", x, shape=interleaved, what="spread"),
                shape=[d for pair in zip(reps, x.shape) for d in pair], what="repeat")
    return c.make("reshape", wide, shape=[r * d for r, d in zip(reps, x.shape)])


@ONNX_OPS.register_op("Pad", "pad; gather (edge, reflect, wrap)")
def _pad(c: Ctx):
    x = c.v(0)
    rank = len(x.shape)
    mode = c.str_("mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise c.fail(f"mode '{mode}' is not one of constant, edge, reflect, wrap")
    pads = c.known_ints(1, "pads") if c.has(1) else c.ints("pads")
    value = c.known(2, "constant_value")
    axes = c.known_ints(3, "axes") if c.has(3) else list(range(rank))
    before, after = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        a = c.axis(a, rank, "axes")
        before[a], after[a] = pads[k], pads[k + len(axes)]
    if min(before + after) < 0:
        raise c.unsupported("negative pads (cropping) are not modelled")
    if mode != "constant":  # each padded axis a gather by the positions np.pad's mode reads
        out = x
        for a in range(rank):
            if before[a] or after[a]:
                if x.shape[a] == 0 or mode == "reflect" and x.shape[a] == 1 and before[a] + after[a]:
                    raise c.fail(f"cannot pad an axis of {x.shape[a]} in mode '{mode}'")
                index = np.pad(np.arange(x.shape[a], dtype=np.int64), (before[a], after[a]), mode=mode)
                out = c.make("gather", out, c.const(index, "int64", f"index{a}"), axis=a, what=f"axis{a}")
        return c.make("reshape", out, shape=out.shape)
    fill = 0.0 if value is None else float(np.asarray(value).reshape(-1)[0]) if np.asarray(value).size else 0.0
    return c.make("pad", x, before=before, after=after, value=fill)


@ONNX_OPS.register_op("Gather", "gather")
def _gather(c: Ctx):
    x, index = c.v(0), c.v(1)
    axis = c.axis(c.int_("axis", 0), len(x.shape))
    size = x.shape[axis]
    data = c.imp.known(index)
    if data is not None:
        index = c.const(np.where(data < 0, data + size, data), data.dtype, "index")
    else:
        zero = c.scalar(0, index, "zero")
        index = c.make("where", c.make("less", index, zero), c.make("add", index, c.scalar(size, index, "size")),
                     index, what="index")
    return c.make("gather", x, index, axis=axis)


@ONNX_OPS.register_op("DepthToSpace", "reshape, transpose")
def _depth_to_space(c: Ctx):
    x = c.v(0)
    b = c.int_("blocksize")
    n, ch, h, w = x.shape
    if c.str_("mode", "DCR") == "DCR":
        t = c.make("reshape", x, shape=[n, b, b, ch // (b * b), h, w], what="blocks")
        t = c.make("transpose", t, perm=[0, 3, 4, 1, 5, 2], what="moved")
    else:
        t = c.make("reshape", x, shape=[n, ch // (b * b), b, b, h, w], what="blocks")
        t = c.make("transpose", t, perm=[0, 1, 4, 2, 5, 3], what="moved")
    return c.make("reshape", t, shape=[n, ch // (b * b), h * b, w * b])


@ONNX_OPS.register_op("SpaceToDepth", "reshape, transpose")
def _space_to_depth(c: Ctx):
    x = c.v(0)
    b = c.int_("blocksize")
    n, ch, h, w = x.shape
    t = c.make("reshape", x, shape=[n, ch, h // b, b, w // b, b], what="blocks")
    crd = c.str_("mode", "DCR") == "CRD"  # channel, then the row and column within the block
    t = c.make("transpose", t, perm=[0, 1, 3, 5, 2, 4] if crd else [0, 3, 5, 1, 2, 4], what="moved")
    return c.make("reshape", t, shape=[n, ch * b * b, h // b, w // b])


@ONNX_OPS.register_op("Trilu", "where (a constant mask)")
def _trilu(c: Ctx):
    x = c.v(0)
    k = c.known_ints(1, "k")
    k = k[0] if k else 0
    rows, cols = x.shape[-2:]
    mask = np.triu(np.ones((rows, cols), bool), k) if c.int_("upper", 1) else np.tril(np.ones((rows, cols), bool), k)
    return c.make("where", c.const(mask, "bool", "mask"), x, c.scalar(0, x, "zero"))


@ONNX_OPS.register_op("OneHot", "one_hot")
def _one_hot(c: Ctx):
    index = c.v(0)
    depth = int(np.asarray(c.known(1, "depth")).reshape(-1)[0])
    values = np.asarray(c.known(2, "values")).reshape(-1)
    index = c.make("where", c.make("less", index, c.scalar(0, index, "zero")),
                   c.make("add", index, c.scalar(depth, index, "depth")), index, what="index")
    if is_float(index.dtype):  # a whole number picks its position, any other none (the reference)
        whole = c.make("cast", index, to="int64", what="whole")
        exact = c.make("equal", c.make("cast", whole, to=index.dtype, what="back"), index, what="exact")
        index = c.make("where", exact, whole, c.scalar(-1, "int64", "none"), what="index64")
    return c.make("one_hot", index, depth=depth, off_value=float(values[0]), on_value=float(values[1]),
                axis=c.int_("axis", -1), dtype=values.dtype.name)


def _element_index(c: Ctx, x: Value, index: Value) -> tuple[Value, int]:
    """GatherElements / ScatterElements indices as int64 with negative ones wrapped, and the axis."""
    rank = len(x.shape)
    axis = c.axis(c.int_("axis", 0), rank)
    if len(index.shape) != rank:
        raise c.fail(f"indices {index.type} need the rank of the data {x.type}")
    index = c.make("cast", index, to="int64", what="index64") if index.dtype != "int64" else index
    zero = c.scalar(0, index, "zero")
    index = c.make("where", c.make("less", index, zero, what="negative"),
                   c.make("add", index, c.scalar(x.shape[axis], index, "size"), what="wrapped"), index, what="index")
    return index, axis


@ONNX_OPS.register_op("GatherElements", "reshape, add, mul, gather (flat indices)")
def _gather_elements(c: Ctx):
    x = c.v(0)
    index, axis = _element_index(c, x, c.v(1))
    return c.gather_along(x, index, axis, index.shape)


def _scatter(c: Ctx, x: Value, flat: Value, flat_index: Value, updates: Value) -> Value:
    """x with `updates` written (reduction none) or added (add) at `flat_index` of `flat`
    (x reshaped so that axis 0 is what the indices address). Written: the addressed
    elements are zeroed first (a scattered count marks them); repeated indices, which ONNX
    leaves undefined for none, add up."""
    reduction = c.str_("reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise c.fail(f"reduction '{reduction}' is not one of none, add, mul, max, min")
    if reduction in ("mul", "max", "min"):
        return c.make("reshape", _scatter_dense(c, flat, flat_index, updates, reduction), shape=x.shape)
    if reduction == "none":
        ones = c.const(np.ones(updates.shape, np.float32), "float32", "ones")
        zeros = c.const(np.zeros(flat.shape, np.float32), "float32", "zeros")
        hit = c.make("greater", c.make("scatter_add", zeros, flat_index, ones, axis=0, what="count"),
                     c.scalar(0, "float32", "zero_f"), what="hit")
        flat = c.make("where", hit, c.scalar(0, flat, "zero_x"), flat, what="cleared")
    out = c.make("scatter_add", flat, flat_index, updates, axis=0, what="scattered")
    return c.make("reshape", out, shape=x.shape)


def _scatter_dense(c: Ctx, flat: Value, flat_index: Value, updates: Value, reduction: str) -> Value:
    """flat combined (mul, max, min) with every update aimed at each position, repeated indices
    included: a [positions, updates] match of the indices, the updates reduced along it with
    the reduction's identity elsewhere. Quadratic in size; limited to 2^24 match cells."""
    positions, count = flat.shape[0], flat_index.type.size
    inner = list(flat.shape[1:])
    if positions * count * max(math.prod(inner), 1) > 1 << 24:
        raise c.unsupported(f"reduction '{reduction}' over {count} updates of {positions} positions "
                            "(the dense form is quadratic; 2^24 cells are modelled)")
    index = c.make("reshape", flat_index, shape=[1, count], what="index_row")
    match = c.make("equal", c.const(np.arange(positions, dtype=np.int64).reshape(positions, 1), "int64",
                                    "positions"), index, what="match")  # [positions, count]
    hit = c.make("greater", c.make("sum", c.make("cast", match, to="int32", what="match32"), axes=[1],
                                   keepdims=False, what="hits"), c.scalar(0, "int32", "none"), what="hit")
    spread = [1] * len(inner)
    match = c.make("reshape", match, shape=[positions, count, *spread], what="match_wide")
    rows = c.make("reshape", updates, shape=[1, count, *inner], what="update_rows")
    if reduction == "mul":
        identity = 1
    elif is_float(flat.dtype):
        identity = -np.inf if reduction == "max" else np.inf
    else:
        info = np.iinfo(flat.dtype)
        identity = info.min if reduction == "max" else info.max
    aimed = c.make("where", match, rows, c.scalar(identity, flat, "identity"), what="aimed")
    reduced = c.make({"mul": "prod", "max": "max", "min": "min"}[reduction], aimed, axes=[1], keepdims=False,
                     what="reduced")
    combined = c.make({"mul": "mul", "max": "maximum", "min": "minimum"}[reduction], flat, reduced,
                      what="combined")
    hit = c.make("reshape", hit, shape=[positions, *spread], what="hit_wide")
    return c.make("where", hit, combined, flat, what="scattered")


@ONNX_OPS.register_op("ScatterElements", "scatter_add (flat indices), where; dense match for mul/max/min")
def _scatter_elements(c: Ctx):
    x, index, updates = c.v(0), c.v(1), c.v(2)
    flat = c.make("reshape", x, shape=[x.type.size], what="flat")
    index, axis = _element_index(c, x, index)
    return _scatter(c, x, flat, c.flat_index_along(index, axis, x.shape, index.shape), updates)


def _nd_index(c: Ctx, x: Value, index: Value) -> tuple[Value, Value]:
    """GatherND / ScatterND: x with its first k axes flattened into one, and the indices'
    last axis (k long, negative entries wrapped) as positions along it."""
    batch = c.int_("batch_dims", 0)
    if batch and c.op != "GatherND":
        raise c.fail("batch_dims is GatherND's")
    k = index.shape[-1]
    lead = x.shape[batch:batch + k]
    index = c.make("cast", index, to="int64", what="index64") if index.dtype != "int64" else index
    dims = c.const(np.asarray(lead, np.int64), "int64", "dims")
    index = c.make("where", c.make("less", index, c.scalar(0, index, "zero"), what="negative"),
                   c.make("add", index, dims, what="wrapped"), index, what="index")
    strides = np.asarray([math.prod(lead[m + 1:]) for m in range(k)], np.int64)
    flat_index = c.make("sum", c.make("mul", index, c.const(strides, "int64", "strides"), what="scaled"),
                        axes=[len(index.shape) - 1], keepdims=False, what="flat_index")
    if batch:  # each batch entry addresses its own block of x
        grid = np.indices(index.shape[:-1], dtype=np.int64)[:batch]
        block = sum(grid[m] * math.prod(x.shape[m + 1:batch]) for m in range(batch)) * math.prod(lead)
        flat_index = c.make("add", flat_index, c.const(np.asarray(block, np.int64), "int64", "block"),
                            what="batched_index")
    flat = c.make("reshape", x, shape=[math.prod(x.shape[:batch + k]), *x.shape[batch + k:]], what="flat")
    return flat, flat_index


@ONNX_OPS.register_op("GatherND", "mul, sum, gather (flat indices)")
def _gather_nd(c: Ctx):
    flat, flat_index = _nd_index(c, c.v(0), c.v(1))
    return c.make("gather", flat, flat_index, axis=0)


@ONNX_OPS.register_op("ScatterND", "mul, sum, scatter_add (flat indices), where; dense match for mul/max/min")
def _scatter_nd(c: Ctx):
    x = c.v(0)
    flat, flat_index = _nd_index(c, x, c.v(1))
    return _scatter(c, x, flat, flat_index, c.v(2))
