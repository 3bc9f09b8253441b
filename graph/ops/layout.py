"""Layout ops (pure index changes): broadcast_to, reshape, transpose, squeeze, expand_dims,
slice, strided_slice, concat, split, pad, dilate."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from akg.errors import AttrError, ShapeError
from akg.graph.ops.registry import LAYOUT, Attr, defop
from akg.graph.types import TensorType, broadcast_shapes, normalize_axes, normalize_axis


def _zero_flops(ins, outs, attrs) -> int:
    return 0


def _nonneg(values) -> str | None:
    return "must not be negative" if any(v < 0 for v in values) else None


# --- broadcast_to -----------------------------------------------------------------------------


def _broadcast_to_infer(x: TensorType, shape) -> TensorType:
    if broadcast_shapes(x.shape, shape) != tuple(shape):
        raise ShapeError(f"cannot broadcast {x} to {list(shape)}")
    return x.with_shape(shape)


@defop("broadcast_to", kind=LAYOUT, infer=_broadcast_to_infer, flops=_zero_flops,
       attrs=[Attr("shape", "ints", check=_nonneg)])
def broadcast_to(x, shape):
    return np.broadcast_to(x, shape).copy()


# --- reshape ----------------------------------------------------------------------------------


def reshape_target(size: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Resolve one -1 in a reshape target; ShapeError if the sizes do not agree."""
    if sum(d == -1 for d in shape) > 1 or any(d < -1 for d in shape):
        raise ShapeError(f"reshape target {list(shape)} may hold at most one -1 and no other negatives")
    known = math.prod([d for d in shape if d != -1])
    if -1 in shape:
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape {size} elements into {list(shape)}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    elif known != size:
        raise ShapeError(f"cannot reshape {size} elements into {list(shape)}")
    return shape


@defop("reshape", kind=LAYOUT, flops=_zero_flops, attrs=[Attr("shape", "ints")],
       infer=lambda x, shape: x.with_shape(reshape_target(x.size, shape)))
def reshape(x, shape):
    return x.reshape(reshape_target(x.size, shape))


# --- transpose --------------------------------------------------------------------------------


def transpose_perm(rank: int, perm) -> tuple[int, ...]:
    if perm is None:
        return tuple(reversed(range(rank)))
    if sorted(normalize_axis(p, rank, "perm entry") for p in perm) != list(range(rank)):
        raise ShapeError(f"perm {list(perm)} is not a permutation of {rank} axes")
    return tuple(p % rank for p in perm)


@defop("transpose", kind=LAYOUT, flops=_zero_flops, attrs=[Attr("perm", "ints", None, optional=True)],
       infer=lambda x, perm: x.with_shape(x.shape[p] for p in transpose_perm(x.rank, perm)))
def transpose(x, perm):
    return np.transpose(x, transpose_perm(x.ndim, perm)).copy()


# --- squeeze / expand_dims --------------------------------------------------------------------


def _squeeze_axes(x: TensorType, axes) -> tuple[int, ...]:
    if axes is None:
        return tuple(i for i, d in enumerate(x.shape) if d == 1)
    axes = normalize_axes(axes, x.rank)
    if any(x.shape[a] != 1 for a in axes):
        raise ShapeError(f"cannot squeeze axes {list(axes)} of {x}: their size is not 1")
    return axes


@defop("squeeze", kind=LAYOUT, flops=_zero_flops, attrs=[Attr("axes", "ints", None, optional=True)],
       infer=lambda x, axes: x.with_shape(
           d for i, d in enumerate(x.shape) if i not in _squeeze_axes(x, axes)))
def squeeze(x, axes):
    return np.squeeze(x, _squeeze_axes(TensorType.of(x), axes))


def _expand_dims_infer(x: TensorType, axis: int) -> TensorType:
    ax = normalize_axis(axis, x.rank + 1)
    return x.with_shape((*x.shape[:ax], 1, *x.shape[ax:]))


@defop("expand_dims", kind=LAYOUT, flops=_zero_flops, attrs=[Attr("axis", "int")],
       infer=_expand_dims_infer)
def expand_dims(x, axis):
    return np.expand_dims(x, normalize_axis(axis, x.ndim + 1))


# --- slice / strided_slice --------------------------------------------------------------------


def slice_spec(x: TensorType, begin, end, strides=None) -> tuple[slice, ...]:
    """Python-slice semantics per axis (negative indices count from the end, clamped)."""
    strides = strides or (1,) * x.rank
    if not len(begin) == len(end) == len(strides) == x.rank:
        raise ShapeError(
            f"begin/end/strides need one entry per axis of {x}, got "
            f"{list(begin)}, {list(end)}, {list(strides)}"
        )
    if 0 in strides:
        raise ShapeError("strides must not be 0")
    return tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))


def _slice_shape(x: TensorType, spec: tuple[slice, ...]) -> tuple[int, ...]:
    return tuple(len(range(*s.indices(d))) for s, d in zip(spec, x.shape))


@defop("slice", kind=LAYOUT, flops=_zero_flops, attrs=[Attr("begin", "ints"), Attr("end", "ints")],
       infer=lambda x, begin, end: x.with_shape(_slice_shape(x, slice_spec(x, begin, end))))
def slice_(x, begin, end):
    return x[slice_spec(TensorType.of(x), begin, end)].copy()


@defop("strided_slice", kind=LAYOUT, flops=_zero_flops,
       attrs=[Attr("begin", "ints"), Attr("end", "ints"), Attr("strides", "ints")],
       infer=lambda x, begin, end, strides: x.with_shape(
           _slice_shape(x, slice_spec(x, begin, end, strides))))
def strided_slice(x, begin, end, strides):
    return x[slice_spec(TensorType.of(x), begin, end, strides)].copy()


# --- concat / split ---------------------------------------------------------------------------


def _concat_infer(*xs: TensorType, axis: int) -> TensorType:
    first = xs[0]
    if first.rank == 0:
        raise ShapeError(f"cannot concatenate scalars ({first})")
    ax = normalize_axis(axis, first.rank)
    for t in xs[1:]:
        if t.dtype != first.dtype or t.rank != first.rank or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != ax
        ):
            raise ShapeError(f"cannot concatenate {first} and {t} along axis {axis}")
    return first.with_shape(
        sum(t.shape[ax] for t in xs) if i == ax else d for i, d in enumerate(first.shape)
    )


@defop("concat", kind=LAYOUT, flops=_zero_flops, infer=_concat_infer, attrs=[Attr("axis", "int", 0)])
def concat(*xs, axis):
    return np.concatenate(xs, axis=axis)


def split_sizes(x: TensorType, axis: int, sections, sizes) -> tuple[int, ...]:
    if x.rank == 0:
        raise ShapeError(f"cannot split a scalar ({x})")
    dim = x.shape[normalize_axis(axis, x.rank)]
    if (sections is None) == (sizes is None):
        raise AttrError("op 'split' needs exactly one of 'sections' or 'sizes'")
    if sizes is None:
        if sections <= 0 or dim % sections:
            raise ShapeError(f"axis {axis} of size {dim} does not split into {sections} equal parts")
        return (dim // sections,) * sections
    if any(s < 0 for s in sizes) or sum(sizes) != dim:
        raise ShapeError(f"sizes {list(sizes)} do not add up to axis {axis} of size {dim}")
    return tuple(sizes)


def _split_infer(x: TensorType, axis, sections, sizes) -> tuple[TensorType, ...]:
    ax = normalize_axis(axis, x.rank)
    return tuple(
        x.with_shape(s if i == ax else d for i, d in enumerate(x.shape))
        for s in split_sizes(x, axis, sections, sizes)
    )


@defop("split", kind=LAYOUT, flops=_zero_flops, infer=_split_infer,
       attrs=[Attr("axis", "int", 0), Attr("sections", "int", None, optional=True),
              Attr("sizes", "ints", None, optional=True,
                   check=lambda v: _nonneg(v) or (None if v else "must not be empty"))])
def split(x, axis, sections, sizes):
    bounds = np.cumsum(split_sizes(TensorType.of(x), axis, sections, sizes))[:-1]
    return tuple(p.copy() for p in np.split(x, bounds, axis=axis))


# --- pad --------------------------------------------------------------------------------------


def _pad_infer(x: TensorType, before, after, value) -> TensorType:
    if len(before) != x.rank or len(after) != x.rank:
        raise ShapeError(f"pad needs before/after for each of the {x.rank} axes of {x}")
    return x.with_shape(d + b + a for d, b, a in zip(x.shape, before, after))


@defop("pad", kind=LAYOUT, flops=_zero_flops, infer=_pad_infer,
       attrs=[Attr("before", "ints", check=_nonneg), Attr("after", "ints", check=_nonneg),
              Attr("value", "float", 0.0)])
def pad(x, before, after, value):
    return np.pad(x, list(zip(before, after)), constant_values=np.array(value).astype(x.dtype))


# --- dilate -----------------------------------------------------------------------------------


def _positive(values) -> str | None:
    return "must be positive" if any(v <= 0 for v in values) else None


def _dilate_infer(x: TensorType, strides) -> TensorType:
    if len(strides) != x.rank:
        raise ShapeError(f"strides need one entry per axis of {x}, got {list(strides)}")
    return x.with_shape((d - 1) * s + 1 if d else 0 for d, s in zip(x.shape, strides))


@defop("dilate", kind=LAYOUT, flops=_zero_flops, infer=_dilate_infer,
       attrs=[Attr("strides", "ints", check=_positive)])
def dilate(x, strides):
    """Zero insertion: x[i] lands at out[i * strides] with zeros between (the transpose of a
    strided slice, used by the input gradient of a strided convolution)."""
    out = np.zeros(_dilate_infer(TensorType.of(x), strides).shape, x.dtype)
    out[tuple(slice(None, None, s) for s in strides)] = x
    return out


# --- compute definitions ----------------------------------------------------------------------

from akg.graph.compute.expr import all_of, call, compute, const, select  # noqa: E402
from akg.graph.compute.helpers import broadcast_load, inside, ravel, unravel  # noqa: E402
from akg.graph.ops.registry import defcompute  # noqa: E402


@defcompute("broadcast_to")
def _broadcast_to_compute(ctx, x, shape):
    return compute(ctx.out.shape, lambda *i: broadcast_load(x, i), ctx.name)


def reshape_groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[range, range]]:
    """Split two shapes of equal size into runs of axes with equal products, so each output
    index depends only on the input indices of its own run."""
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        i0, j0, a, b = i, j, 1, 1
        while True:
            if a <= b and i < len(src):
                a *= src[i]
                i += 1
            elif j < len(dst):
                b *= dst[j]
                j += 1
            else:
                a *= src[i]
                i += 1
            if a == b and (i == len(src) or src[i] != 1 or j == len(dst)) and (
                    j == len(dst) or dst[j] != 1 or i == len(src)):
                break
        groups.append((range(i0, i), range(j0, j)))
    return groups


@defcompute("reshape", "squeeze", "expand_dims")
def _reshape_compute(ctx, x, **_):
    out = ctx.out.shape
    if 0 in out:
        return compute(out, lambda *i: const(0, x.dtype), ctx.name)
    groups = reshape_groups(x.shape, out)

    def index(*i):
        src = [None] * x.ndim
        for ins, outs in groups:
            linear = ravel([i[d] for d in outs], [out[d] for d in outs])
            for d, v in zip(ins, unravel(linear, [x.shape[d] for d in ins])):
                src[d] = v
        return x[tuple(src)]

    return compute(out, index, ctx.name)


@defcompute("transpose")
def _transpose_compute(ctx, x, perm):
    perm = transpose_perm(x.ndim, perm)
    inverse = [perm.index(d) for d in range(x.ndim)]
    return compute(ctx.out.shape, lambda *i: x[tuple(i[inverse[d]] for d in range(x.ndim))], ctx.name)


def _strided(ctx, x, spec):
    starts = [s.indices(d)[0] for s, d in zip(spec, x.shape)]
    steps = [s.indices(d)[2] for s, d in zip(spec, x.shape)]
    return compute(ctx.out.shape, lambda *i: x[tuple(b + v * s for v, b, s in zip(i, starts, steps))],
                   ctx.name)


@defcompute("slice")
def _slice_compute(ctx, x, begin, end):
    return _strided(ctx, x, slice_spec(TensorType(x.shape, x.dtype), begin, end))


@defcompute("strided_slice")
def _strided_slice_compute(ctx, x, begin, end, strides):
    return _strided(ctx, x, slice_spec(TensorType(x.shape, x.dtype), begin, end, strides))


@defcompute("concat")
def _concat_compute(ctx, *xs, axis):
    ax = normalize_axis(axis, xs[0].ndim)

    def body(*i):
        offsets = np.cumsum([0] + [t.shape[ax] for t in xs])
        expr = None
        for t, lo in reversed(list(zip(xs, offsets))):
            if t.shape[ax] == 0:
                continue
            idx = tuple(v - int(lo) if d == ax else v for d, v in enumerate(i))
            expr = t[idx] if expr is None else select(call("lt", i[ax], const(int(lo + t.shape[ax]), "int32")),
                                                     t[idx], expr)
        return expr

    return compute(ctx.out.shape, body, ctx.name)


@defcompute("split")
def _split_compute(ctx, x, axis, sections, sizes):
    ax = normalize_axis(axis, x.ndim)
    outs, lo = [], 0
    for k, t in enumerate(ctx.outs):
        outs.append(compute(t.shape, lambda *i, lo=lo: x[tuple(v + lo if d == ax else v for d, v in enumerate(i))],
                            f"{ctx.name}.{k}"))
        lo += t.shape[ax]
    return tuple(outs)


@defcompute("pad")
def _pad_compute(ctx, x, before, after, value):
    def body(*i):
        src = [v - b for v, b in zip(i, before)]
        if not any(before) and not any(after):
            return x[tuple(src)]
        return select(inside(src, x.shape), x[tuple(src)], const(value, x.dtype))
    return compute(ctx.out.shape, body, ctx.name)


@defcompute("dilate")
def _dilate_compute(ctx, x, strides):
    def body(*i):
        on_grid = all_of(call("eq", v % s, const(0, "int32")) for v, s in zip(i, strides) if s > 1)
        return select(on_grid, x[tuple(v // s for v, s in zip(i, strides))], const(0, x.dtype))
    return compute(ctx.out.shape, body, ctx.name)


# --- VJP rules ----------------------------------------------------------------------------------

from akg.graph.ops.registry import defvjp  # noqa: E402


@defvjp("broadcast_to")
def _vjp_broadcast_to(e, g, x, shape):
    return (e.unbroadcast(g, x.shape),)


@defvjp("reshape", "squeeze", "expand_dims")
def _vjp_reshape(e, g, x, **_):
    return (e.op("reshape", g, shape=list(x.shape)),)


@defvjp("transpose")
def _vjp_transpose(e, g, x, perm):
    perm = transpose_perm(x.type.rank, perm)
    return (e.op("transpose", g, perm=[perm.index(d) for d in range(len(perm))]),)


def scatter_strided(e, g, x: TensorType, spec: tuple[slice, ...]):
    """The transpose of x[spec]: g put back at the sliced positions of a zero tensor like x
    (reverse the axes with negative steps, insert zeros between strided elements, pad)."""
    ranges = [range(*s.indices(d)) for s, d in zip(spec, x.shape)]
    if any(len(r) == 0 for r in ranges):
        return e.zeros(x)
    if any(r.step < 0 for r in ranges):
        g = e.op("strided_slice", g, begin=[len(r) - 1 if r.step < 0 else 0 for r in ranges],
                 end=[-len(r) - 1 if r.step < 0 else len(r) for r in ranges],
                 strides=[-1 if r.step < 0 else 1 for r in ranges], hint="reversed")
    steps = [abs(r.step) for r in ranges]
    if any(s > 1 for s in steps):
        g = e.op("dilate", g, strides=steps)
    lows = [min(r[0], r[-1]) for r in ranges]
    highs = [d - lo - n for d, lo, n in zip(x.shape, lows, g.shape)]
    if any(lows) or any(highs):
        g = e.op("pad", g, before=lows, after=highs)
    return g


@defvjp("slice")
def _vjp_slice(e, g, x, begin, end):
    return (scatter_strided(e, g, x.type, slice_spec(x.type, begin, end)),)


@defvjp("strided_slice")
def _vjp_strided_slice(e, g, x, begin, end, strides):
    return (scatter_strided(e, g, x.type, slice_spec(x.type, begin, end, strides)),)


@defvjp("concat")
def _vjp_concat(e, g, *xs, axis):
    ax = normalize_axis(axis, g.type.rank)
    parts = e.op("split", g, axis=ax, sizes=[x.shape[ax] for x in xs])
    return parts if isinstance(parts, tuple) else (parts,)


@defvjp("split")
def _vjp_split(e, g, x, axis, sections, sizes):
    gs = g if isinstance(g, tuple) else (g,)
    return (gs[0] if len(gs) == 1 else e.op("concat", *gs, axis=axis),)


@defvjp("pad")
def _vjp_pad(e, g, x, before, after, value):
    return (e.op("slice", g, begin=list(before), end=[b + d for b, d in zip(before, x.shape)]),)


@defvjp("dilate")
def _vjp_dilate(e, g, x, strides):
    return (e.op("strided_slice", g, begin=[0] * len(strides), end=list(g.shape), strides=list(strides)),)


# --- sharding rules ---------------------------------------------------------------------------
# Every layout op moves values without combining them: linear, so partial sums pass through
# (pad only with a zero fill). A split is carried where the op keeps a dim's blocks intact.

from akg.graph.ops.registry import defsharding  # noqa: E402


def _carry(call, mesh, pairs, *, partial: bool = True, finish=None):
    """Roles `d<i>` splitting input dims and output dims together (`pairs`: (name, ins,
    outs) with ins/outs (operand, dim) pairs), plus a partial role when `partial`."""
    from akg.graph.parallel.rules import Role, assign_roles, partial_role

    roles = [Role(name, ins=tuple(ins), outs=tuple(outs)) for name, ins, outs in pairs]
    if partial:
        roles.append(partial_role("partial", tuple(range(len(call.ins))), tuple(range(len(call.outs)))))
    return assign_roles(call, mesh, roles, finish)


def _with_local_shape(call, mesh):
    """finish: the local output shape as the local `shape` attribute."""
    from akg.graph.parallel.rules import with_local

    shape = call.outs[0].shape
    return lambda s, by_role: with_local(s, shape=list(s.outputs[0].local_shape(shape, mesh)))


@defsharding("reshape")
def _reshape_sharding(call, mesh):
    """Splits carried where they cut the same contiguous blocks of elements on both sides.
    Within each run of axes whose products match (`reshape_groups`), the input's splits
    must leave every dim before the last split one of local size 1; the split axes, in
    order, then fall on the run's output dims from the first, each output dim filled to
    local size 1 before the next takes one. [128, 768] -> [128, 12, 64] with 768 split
    over 4 ranks: the 12 split; [2, 4, 16] -> [8, 16] with 2 over dp and 4 over tp: the 8
    split over (dp, tp). Local attribute: the local shape."""
    from akg.graph.parallel.rules import with_local
    from akg.graph.parallel.sharding import Sharding

    src, dst = call.ins[0].shape, call.outs[0].shape
    groups = reshape_groups(src, dst) if 0 not in src else []
    dims = [d for ins, _ in groups for d in ins if src[d] != 1]

    def finish(s, by_role):
        split = s.inputs[0].dims
        out: list[tuple[str, ...]] = [()] * len(dst)
        for ins, outs in groups:
            used = [d for d in ins if split[d]]
            if not used:
                continue
            if any(src[d] != mesh.group_size(split[d]) for d in ins if d < used[-1]):
                return None  # the blocks are not contiguous in the run
            left = {j: dst[j] for j in outs}
            j = iter(outs)
            at = next(j)
            for axis in (a for d in used for a in split[d]):
                k = mesh.axis_size(axis)
                while left[at] == 1:
                    at = next(j, None)
                    if at is None:
                        return None
                if left[at] % k:
                    return None
                left[at] //= k
                out[at] = out[at] + (axis,)
        s = replace(s, outputs=(Sharding(tuple(out), s.outputs[0].partial),))
        return with_local(s, shape=list(s.outputs[0].local_shape(dst, mesh)))

    return _carry(call, mesh, [(f"d{d}", [(0, d)], []) for d in dims], finish=finish)


@defsharding("broadcast_to")
def _broadcast_to_sharding(call, mesh):
    """Any split of the output dims; the input split alike where it is not broadcast.
    Local attribute: the local shape."""
    x, out = call.ins[0], call.outs[0]
    pairs = []
    for d in range(out.rank):
        j = d - (out.rank - x.rank)
        pairs.append((f"d{d}", [(0, j)] if j >= 0 and x.shape[j] == out.shape[d] else [], [(0, d)]))
    return _carry(call, mesh, pairs, finish=_with_local_shape(call, mesh))


@defsharding("transpose")
def _transpose_sharding(call, mesh):
    """Any split, permuted with the dims."""
    perm = transpose_perm(call.ins[0].rank, call.attrs["perm"])
    return _carry(call, mesh, [(f"d{perm[i]}", [(0, perm[i])], [(0, i)]) for i in range(len(perm))])


@defsharding("squeeze")
def _squeeze_sharding(call, mesh):
    """Any split of the dims kept; the local op squeezes the same axes (named, since a split
    dim may have size 1 locally)."""
    from akg.graph.parallel.rules import with_local

    axes = _squeeze_axes(call.ins[0], call.attrs["axes"])
    kept = [d for d in range(call.ins[0].rank) if d not in axes]
    return _carry(call, mesh, [(f"d{d}", [(0, d)], [(0, j)]) for j, d in enumerate(kept)],
                  finish=lambda s, by_role: with_local(s, axes=list(axes)))


@defsharding("expand_dims")
def _expand_dims_sharding(call, mesh):
    """Any split of the input's dims, carried past the new one."""
    ax = normalize_axis(call.attrs["axis"], call.ins[0].rank + 1)
    return _carry(call, mesh, [(f"d{d}", [(0, d)], [(0, d if d < ax else d + 1)]) for d in range(call.ins[0].rank)])


@defsharding("slice", "strided_slice")
def _slice_sharding(call, mesh):
    """Any split of the dims taken whole (step 1); the local op takes those dims whole."""
    from akg.graph.parallel.rules import with_local

    x = call.ins[0]
    a = call.attrs
    spec = slice_spec(x, a["begin"], a["end"], a.get("strides"))
    whole = [d for d in range(x.rank) if range(*spec[d].indices(x.shape[d])) == range(x.shape[d])]

    def finish(s, by_role):
        local = s.inputs[0].local_shape(x.shape, mesh)
        begin, end = list(a["begin"]), list(a["end"])
        for d in whole:
            if s.inputs[0].dims[d]:
                begin[d], end[d] = 0, local[d]
        return with_local(s, begin=begin, end=end)

    return _carry(call, mesh, [(f"d{d}", [(0, d)], [(0, d)]) for d in whole], finish=finish)


@defsharding("concat")
def _concat_sharding(call, mesh):
    """Any split of the other dims, every input alike."""
    rank = call.outs[0].rank
    ax = normalize_axis(call.attrs["axis"], rank)
    return _carry(call, mesh, [(f"d{d}", [(i, d) for i in range(len(call.ins))], [(0, d)])
                               for d in range(rank) if d != ax])


@defsharding("split")
def _split_sharding(call, mesh):
    """Any split of the other dims, every output alike."""
    rank = call.ins[0].rank
    ax = normalize_axis(call.attrs["axis"], rank)
    return _carry(call, mesh, [(f"d{d}", [(0, d)], [(o, d) for o in range(len(call.outs))])
                               for d in range(rank) if d != ax])


@defsharding("pad")
def _pad_sharding(call, mesh):
    """Any split of the dims not padded; partial sums pass a zero fill only."""
    a = call.attrs
    dims = [d for d in range(call.ins[0].rank) if a["before"][d] == 0 and a["after"][d] == 0]
    return _carry(call, mesh, [(f"d{d}", [(0, d)], [(0, d)]) for d in dims], partial=a["value"] == 0)


@defsharding("dilate")
def _dilate_sharding(call, mesh):
    """Any split of the dims not dilated (stride 1)."""
    dims = [d for d, s in enumerate(call.attrs["strides"]) if s == 1]
    return _carry(call, mesh, [(f"d{d}", [(0, d)], [(0, d)]) for d in dims])
