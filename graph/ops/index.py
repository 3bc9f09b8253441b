"""Data-dependent indexing: gather (take along an axis; embeddings) and one_hot."""

from __future__ import annotations

import numpy as np

from akg.errors import ShapeError
from akg.graph.ops.registry import INDEX, Attr, defop
from akg.graph.types import TensorType, is_int, normalize_axis


def _int_indices(t: TensorType) -> None:
    if not is_int(t.dtype):
        raise ShapeError(f"indices must be integers, got {t}")


def _gather_infer(data: TensorType, indices: TensorType, axis: int) -> TensorType:
    _int_indices(indices)
    if data.rank == 0:
        raise ShapeError(f"cannot gather from the scalar {data}")
    ax = normalize_axis(axis, data.rank)
    return data.with_shape((*data.shape[:ax], *indices.shape, *data.shape[ax + 1 :]))


@defop("gather", kind=INDEX, infer=_gather_infer, attrs=[Attr("axis", "int", 0)],
       flops=lambda ins, outs, attrs: 0,
       index_bounds=lambda data, indices, axis: {1: data.shape[normalize_axis(axis, data.rank)]})
def gather(data, indices, axis):
    """take: out[..., idx..., ...] = data[..., indices[idx...], ...] (embedding lookup at axis 0).
    Indices out of [0, size) are an error."""
    size = data.shape[axis]
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        raise IndexError(f"gather index out of range [0, {size})")
    return np.take(data, indices.astype(np.int64), axis=axis)


def _one_hot_infer(indices: TensorType, depth, on_value, off_value, axis, dtype) -> TensorType:
    _int_indices(indices)
    ax = normalize_axis(axis, indices.rank + 1)
    shape = list(indices.shape)
    shape.insert(ax, depth)
    return TensorType(shape, dtype)


@defop("one_hot", kind=INDEX, infer=_one_hot_infer, differentiable=False,
       index_bounds=lambda indices, depth, **_: {0: depth},
       attrs=[Attr("depth", "int", check=lambda d: None if d > 0 else "must be positive"),
              Attr("on_value", "float", 1.0), Attr("off_value", "float", 0.0),
              Attr("axis", "int", -1), Attr("dtype", "dtype", "float32")])
def one_hot(indices, depth, on_value, off_value, axis, dtype):
    """on_value where the new axis equals the index, off_value elsewhere (also for indices
    outside [0, depth))."""
    ax = normalize_axis(axis, indices.ndim + 1)
    hot = np.expand_dims(indices, ax) == np.arange(depth).reshape(
        [depth if i == ax else 1 for i in range(indices.ndim + 1)])
    return np.where(hot, on_value, off_value).astype(dtype)


# --- compute definitions ----------------------------------------------------------------------

from akg.graph.compute.expr import call, cast, compute, const, select  # noqa: E402
from akg.graph.ops.registry import defcompute  # noqa: E402


@defcompute("gather")
def _gather_compute(ctx, data, indices, axis):
    """Data-dependent row index: the polyhedral model over-approximates this access."""
    ax = normalize_axis(axis, data.ndim)
    k = indices.ndim

    def body(*i):
        row = cast("int32", indices[i[ax:ax + k]])
        return data[(*i[:ax], row, *i[ax + k:])]

    return compute(ctx.out.shape, body, ctx.name)


@defcompute("one_hot")
def _one_hot_compute(ctx, indices, depth, on_value, off_value, axis, dtype):
    ax = normalize_axis(axis, indices.ndim + 1)

    def body(*i):
        hit = call("eq", cast("int32", indices[i[:ax] + i[ax + 1:]]), i[ax])
        return select(hit, const(on_value, dtype), const(off_value, dtype))

    return compute(ctx.out.shape, body, ctx.name)
