"""Data-dependent indexing: gather (take along an axis; embeddings), its transpose scatter_add
(the gradient of gather), and one_hot."""

from __future__ import annotations

import numpy as np

from akg.errors import ShapeError
from akg.graph.ops.registry import INDEX, Attr, defop
from akg.graph.types import TensorType, is_float, is_int, normalize_axis


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


def _scatter_add_infer(data: TensorType, indices: TensorType, updates: TensorType, axis: int) -> TensorType:
    want = _gather_infer(data, indices, axis)
    if updates != want:
        raise ShapeError(f"updates must be {want} (the gather of {data} by {indices}), got {updates}")
    return data


@defop("scatter_add", kind=INDEX, infer=_scatter_add_infer, attrs=[Attr("axis", "int", 0)],
       flops=lambda ins, outs, attrs: ins[2].size,
       index_bounds=lambda data, indices, updates, axis: {1: data.shape[normalize_axis(axis, data.rank)]})
def scatter_add(data, indices, updates, axis):
    """The transpose of gather: data with updates[..., idx..., ...] added at
    [..., indices[idx...], ...]; repeated indices accumulate. Indices out of [0, size) are an
    error."""
    ax = normalize_axis(axis, data.ndim)
    size = data.shape[ax]
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        raise IndexError(f"scatter_add index out of range [0, {size})")
    out = data.copy()
    np.add.at(out, (slice(None),) * ax + (indices.astype(np.int64),), updates)
    return out


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

from akg.graph.compute.expr import call, cast, compute, const, reduce, reduce_axis, select  # noqa: E402
from akg.graph.ops.reduce import accumulate_dtype  # noqa: E402
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


@defcompute("scatter_add")
def _scatter_add_compute(ctx, data, indices, updates, axis):
    """out[.., r, ..] = data[.., r, ..] + sum over j of (indices[j] == r ? updates[.., j, ..] : 0):
    a reduction with a data-dependent condition, so every access stays affine."""
    ax = normalize_axis(axis, data.ndim)
    acc = accumulate_dtype(data.dtype)

    def picked(i, js):
        hit = call("eq", cast("int32", indices[tuple(js)]), i[ax])
        return select(hit, cast(acc, updates[(*i[:ax], *js, *i[ax + 1:])]), const(0, acc))

    def body(*i):
        js = [reduce_axis(n, f"{ctx.name}.j{d}") for d, n in enumerate(indices.shape)]
        return reduce("sum", picked(i, js), js) if js else picked(i, js)

    total = compute(ctx.out.shape, body, ctx.name + ".sum")
    return compute(ctx.out.shape, lambda *i: cast(data.dtype, cast(acc, data[i]) + total[i]), ctx.name)


@defcompute("one_hot")
def _one_hot_compute(ctx, indices, depth, on_value, off_value, axis, dtype):
    ax = normalize_axis(axis, indices.ndim + 1)

    def body(*i):
        hit = call("eq", cast("int32", indices[i[:ax] + i[ax + 1:]]), i[ax])
        return select(hit, const(on_value, dtype), const(off_value, dtype))

    return compute(ctx.out.shape, body, ctx.name)


# --- VJP rules ----------------------------------------------------------------------------------

from akg.graph.ops.registry import defvjp  # noqa: E402


@defvjp("gather")
def _vjp_gather(e, g, data, indices, axis):
    """The rows read are summed back into a zero tensor like data (repeated indices add up)."""
    return e.op("scatter_add", e.zeros(data.type), indices, g, axis=axis), None


@defvjp("scatter_add")
def _vjp_scatter_add(e, g, data, indices, updates, axis):
    return g, None, e.op("gather", g, indices, axis=axis)


# --- sharding rules ---------------------------------------------------------------------------

from akg.graph.ops.registry import defsharding  # noqa: E402


def _block_mask(b, inside, rank: int, ax: int):
    """The bool mask of indices inside this rank's block, shaped to broadcast over a gather
    result of `rank` dims whose index dims start at `ax`."""
    shape = [1] * ax + list(inside.shape) + [1] * (rank - ax - inside.type.rank)
    return b.op("reshape", inside, shape=shape)


@defsharding("gather")
def _gather_sharding(call, mesh):
    """Any split of data's other dims or of the indices (the output split alike), or data's
    rows split (an embedding table split by rows): each rank looks up the indices that fall
    in its block, zeros elsewhere, and the output is a partial sum. Linear in data: a
    partial table gives a partial output."""
    from akg.graph.parallel.rules import Role, assign_roles, const_like, local_index, partial_role, with_local

    data, indices = call.ins
    ax = normalize_axis(call.attrs["axis"], data.rank)
    ri, size = indices.rank, data.shape[ax]
    roles = [Role(f"d{d}", ins=((0, d),), outs=((0, d if d < ax else d + ri - 1),))
             for d in range(data.rank) if d != ax]
    roles += [Role(f"i{j}", ins=((1, j),), outs=((0, ax + j),)) for j in range(ri)]
    roles.append(Role("rows", ins=((0, ax),), partial_outs=(0,)))
    if is_float(data.dtype):
        roles.append(partial_role("partial", (0,)))

    def finish(s, by_role):
        axes = by_role.get("rows")
        if not axes:
            return s

        def local(b, values, attrs, mesh):
            table, idx = values
            safe, inside = local_index(b, idx, size, axes, mesh)
            got = b.op("gather", table, safe, axis=ax)
            return b.op("where", _block_mask(b, inside, got.type.rank, ax), got, const_like(b, 0, table.dtype))
        return with_local(s, local)

    return assign_roles(call, mesh, roles, finish)


@defsharding("scatter_add")
def _scatter_add_sharding(call, mesh):
    """Any split of data's other dims (updates alike); indices split (updates alike): each
    rank adds its share, so data and the output are partial sums; data's rows split: each
    rank adds the updates whose indices fall in its block. Linear in data and updates."""
    from akg.graph.parallel.rules import Role, assign_roles, const_like, local_index, partial_role, with_local

    data, indices, _ = call.ins
    ax = normalize_axis(call.attrs["axis"], data.rank)
    ri, size = indices.rank, data.shape[ax]
    linear = is_float(data.dtype)
    roles = [Role(f"d{d}", ins=((0, d), (2, d if d < ax else d + ri - 1)), outs=((0, d),))
             for d in range(data.rank) if d != ax]
    if linear:
        roles += [Role(f"i{j}", ins=((1, j), (2, ax + j)), partial_ins=(0,), partial_outs=(0,)) for j in range(ri)]
    roles.append(Role("rows", ins=((0, ax),), outs=((0, ax),)))
    if linear:
        roles.append(partial_role("partial", (0, 2)))

    def finish(s, by_role):
        axes = by_role.get("rows")
        if not axes:
            return s

        def local(b, values, attrs, mesh):
            table, idx, updates = values
            safe, inside = local_index(b, idx, size, axes, mesh)
            mine = b.op("where", _block_mask(b, inside, updates.type.rank, ax), updates,
                        const_like(b, 0, updates.dtype))
            return b.op("scatter_add", table, safe, mine, axis=ax)
        return with_local(s, local)

    return assign_roles(call, mesh, roles, finish)


@defsharding("one_hot")
def _one_hot_sharding(call, mesh):
    """Any split of the indices (the output alike), or of the new depth dim: each rank
    compares the indices shifted by its block's first class (computed) with its block."""
    from akg.graph.parallel.rules import Role, assign_roles, rank_offset, with_local

    indices = call.ins[0]
    ax = normalize_axis(call.attrs["axis"], indices.rank + 1)
    depth = call.attrs["depth"]
    roles = [Role(f"i{j}", ins=((0, j),), outs=((0, j if j < ax else j + 1),)) for j in range(indices.rank)]
    roles.append(Role("depth", outs=((0, ax),)))

    def finish(s, by_role):
        axes = by_role.get("depth")
        if not axes:
            return s
        k = mesh.group_size(axes)

        def local(b, values, attrs, mesh):
            (idx,) = values
            shifted = b.op("sub", idx, rank_offset(b, depth, axes, mesh, idx.dtype))
            return b.op("one_hot", shifted, **{**attrs, "depth": depth // k})
        return with_local(s, local)

    return assign_roles(call, mesh, roles, finish)
