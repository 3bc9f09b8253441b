"""Reductions over axes (sum mean max min prod) and arg-reductions (argmax argmin)."""

from __future__ import annotations

import numpy as np

from akg.errors import ShapeError
from akg.graph.ops.registry import REDUCE, Attr, defop
from akg.graph.types import TensorType, is_float, normalize_axes, normalize_axis


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_infer(x: TensorType, axes, keepdims, *, float_only=False, nonempty=False) -> TensorType:
    if x.dtype == "bool" or (float_only and not is_float(x.dtype)):
        raise ShapeError(f"cannot reduce {x} ({'floating-point' if float_only else 'numeric'} input needed)")
    ax = normalize_axes(axes, x.rank)
    if x.rank == 0 and ax:
        raise ShapeError(f"cannot reduce the scalar {x} over axes {list(ax)}")
    if nonempty and any(x.shape[a] == 0 for a in ax):
        raise ShapeError(f"cannot take this reduction over an empty axis of {x}")
    return x.with_shape(reduced_shape(x.shape, ax, keepdims))


def _reduce_flops(ins, outs, attrs) -> int:
    return ins[0].size


_REDUCE_ATTRS = [Attr("axes", "ints", None, optional=True), Attr("keepdims", "bool", False)]


def _reduction(name: str, fn, **rules):
    def reference(x, axes, keepdims):
        ax = normalize_axes(axes, x.ndim)
        wide = x.astype(np.float32) if x.dtype == np.float16 and name in ("sum", "mean", "prod") else x
        return np.asarray(fn(wide, axis=ax, keepdims=keepdims)).astype(x.dtype)

    reference.__doc__ = f"{name} over `axes` (all when None); fp16 sums/products accumulate in fp32"
    defop(name, kind=REDUCE, arity=1, attrs=_REDUCE_ATTRS, flops=_reduce_flops,
          infer=lambda x, axes, keepdims: _reduce_infer(x, axes, keepdims, **rules))(reference)


_reduction("sum", np.sum)
_reduction("mean", np.mean, float_only=True)
_reduction("max", np.max, nonempty=True)
_reduction("min", np.min, nonempty=True)
_reduction("prod", np.prod)


def _arg_infer(x: TensorType, axis, keepdims) -> TensorType:
    ax = normalize_axis(axis, x.rank)
    _reduce_infer(x, (ax,), keepdims, nonempty=True)
    return TensorType(reduced_shape(x.shape, (ax,), keepdims), "int32")


_ARG_ATTRS = [Attr("axis", "int", -1), Attr("keepdims", "bool", False)]


@defop("argmax", kind=REDUCE, infer=_arg_infer, attrs=_ARG_ATTRS, flops=_reduce_flops,
       differentiable=False)
def argmax(x, axis, keepdims):
    """Index (int32) of the first maximum along `axis`."""
    return np.argmax(x, axis=axis, keepdims=keepdims).astype(np.int32)


@defop("argmin", kind=REDUCE, infer=_arg_infer, attrs=_ARG_ATTRS, flops=_reduce_flops,
       differentiable=False)
def argmin(x, axis, keepdims):
    """Index (int32) of the first minimum along `axis`."""
    return np.argmin(x, axis=axis, keepdims=keepdims).astype(np.int32)


# --- compute definitions ----------------------------------------------------------------------

from akg.graph.compute.expr import cast, compute, const, reduce, reduce_axis  # noqa: E402
from akg.graph.ops.registry import defcompute  # noqa: E402


LONG_REDUCTION = 1 << 14  # float32 sums over more elements than this accumulate in float64


def accumulate_dtype(dtype: str, extent: int = 0) -> str:
    """Reductions and products of fp16 accumulate in fp32; long fp32 sums in fp64, so the
    rounding error does not grow with the reduction length."""
    if dtype == "float16":
        return "float32"
    if dtype == "float32" and extent > LONG_REDUCTION:
        return "float64"
    return dtype


def reduction(ctx_name: str, reducer: str, x, axes: tuple[int, ...], keepdims: bool, source=None,
              keep_accumulator: bool = False):
    """Tensor of x reduced by `reducer` over `axes`; `source(index)` may transform each element.
    With keep_accumulator, fp16 sums come back in their fp32 accumulator."""
    raxes = {a: reduce_axis(x.shape[a], f"{ctx_name}.r{a}") for a in axes}
    out_shape = reduced_shape(x.shape, axes, keepdims)
    extent = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    acc = accumulate_dtype(x.dtype, extent) if reducer in ("sum", "prod") else x.dtype

    def body(*i):
        it = iter(i)
        index = []
        for d in range(x.ndim):
            if d in raxes:
                index.append(raxes[d])
                if keepdims:
                    next(it)
            else:
                index.append(next(it))
        element = x[tuple(index)] if source is None else source(tuple(index))
        return reduce(reducer, cast(acc, element), [raxes[a] for a in axes])

    total = compute(out_shape, body, ctx_name if acc == x.dtype else ctx_name + ".acc")
    if acc != x.dtype and not keep_accumulator:
        total = compute(out_shape, lambda *i: cast(x.dtype, total[i]), ctx_name)
    return total


@defcompute("sum", "max", "min", "prod")
def _reduce_compute(ctx, x, axes, keepdims):
    return reduction(ctx.name, ctx.op, x, normalize_axes(axes, x.ndim), keepdims)


@defcompute("mean")
def _mean_compute(ctx, x, axes, keepdims):
    ax = normalize_axes(axes, x.ndim)
    count = int(np.prod([x.shape[a] for a in ax], dtype=np.int64))
    acc = accumulate_dtype(x.dtype, count)
    total = reduction(ctx.name + ".sum", "sum", x, ax, keepdims, keep_accumulator=True)
    return compute(total.shape, lambda *i: cast(x.dtype, total[i] / const(count, acc)), ctx.name)


@defcompute("argmax", "argmin")
def _arg_compute(ctx, x, axis, keepdims):
    return reduction(ctx.name, ctx.op, x, (normalize_axis(axis, x.ndim),), keepdims)


# --- VJP rules ----------------------------------------------------------------------------------

from akg.graph.ops.registry import defvjp  # noqa: E402


def _kept(e, g, x, axes):
    """g (or an output) reshaped to the reduction's keepdims shape, ready to broadcast over x."""
    kept = list(reduced_shape(x.shape, axes, True))
    return g if list(g.shape) == kept else e.op("reshape", g, shape=kept, hint="keepdims")


@defvjp("sum")
def _vjp_sum(e, g, x, axes, keepdims):
    return (e.broadcast_back(g, normalize_axes(axes, x.type.rank), x.shape),)


@defvjp("mean")
def _vjp_mean(e, g, x, axes, keepdims):
    ax = normalize_axes(axes, x.type.rank)
    count = int(np.prod([x.shape[a] for a in ax], dtype=np.int64))
    return (e.broadcast_back(e.op("div", g, float(count)), ax, x.shape),)


def _vjp_extreme(e, g, x, axes, keepdims):
    """max / min: the cotangent goes to the elements equal to the result, shared among ties."""
    ax = normalize_axes(axes, x.type.rank)
    hit = e.op("equal", x, _kept(e, e.out, x, ax), hint="hit")
    count = e.op("sum", e.op("cast", hit, to=x.dtype), axes=list(ax), keepdims=True, hint="count")
    share = e.op("div", _kept(e, g, x, ax), count, hint="share")
    return (e.op("where", hit, share, 0.0),)


defvjp("max", "min")(_vjp_extreme)


@defvjp("prod")
def _vjp_prod(e, g, x, axes, keepdims):
    """d prod = prod / x_i (inputs holding a zero give inf/nan)."""
    ax = normalize_axes(axes, x.type.rank)
    return (e.op("div", _kept(e, e.op("mul", g, e.out), x, ax), x),)


# --- sharding rules ---------------------------------------------------------------------------

from akg.graph.ops.registry import defsharding  # noqa: E402


def _kept_dim(d: int, axes: tuple[int, ...], keepdims: bool) -> int:
    return d if keepdims else d - sum(a < d for a in axes)


def reduce_roles(call, axes: tuple[int, ...], *, reduced_partial: bool, linear: bool):
    """One role per input dim: a kept dim splits the output alike; a reduced dim, where
    `reduced_partial`, leaves the output a partial sum; with `linear` partial sums pass."""
    from akg.graph.parallel.rules import Role, partial_role

    keepdims = call.attrs["keepdims"]
    roles = []
    for d in range(call.ins[0].rank):
        if d not in axes:
            roles.append(Role(f"d{d}", ins=((0, d),), outs=((0, _kept_dim(d, axes, keepdims)),)))
        elif reduced_partial:
            roles.append(Role(f"r{d}", ins=((0, d),), partial_outs=(0,)))
    if linear:
        roles.append(partial_role("partial", (0,)))
    return roles


@defsharding("sum", "mean", "max", "min", "prod")
def _reduce_sharding(call, mesh):
    """Kept dims split alike. sum over a split dim is a partial sum of local sums; mean a
    partial sum of local means scaled by 1/pieces; max, min and prod never reduce a split
    dim. sum and mean are linear: partial in, partial out."""
    from akg.graph.parallel.rules import assign_roles, group_size, scaled, with_local

    axes = normalize_axes(call.attrs["axes"], call.ins[0].rank)
    linear = call.op in ("sum", "mean") and is_float(call.ins[0].dtype)
    roles = reduce_roles(call, axes, reduced_partial=linear, linear=linear)
    if call.op != "mean":
        return assign_roles(call, mesh, roles)

    def finish(s, by_role):
        k = group_size(mesh, by_role, *(f"r{d}" for d in axes))
        if k == 1:
            return s
        return with_local(s, lambda b, values, attrs, mesh: scaled(b, b.op("mean", *values, **attrs), 1 / k))

    return assign_roles(call, mesh, roles, finish)


@defsharding("argmax", "argmin")
def _arg_sharding(call, mesh):
    """Any split of the other dims; the searched axis stays whole."""
    from akg.graph.parallel.rules import assign_roles

    axis = normalize_axis(call.attrs["axis"], call.ins[0].rank)
    return assign_roles(call, mesh, reduce_roles(call, (axis,), reduced_partial=False, linear=False))
