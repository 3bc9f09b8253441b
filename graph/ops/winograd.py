"""Winograd F(2x2, 3x3) convolution in three ops (graph stage: what `akg.graph.winograd` rewrites
a 3x3 conv into): the input transform, the batched product with the transformed weights, and
the output transform.

Each 2x2 tile of output pixels is computed from the 4x4 tile of (padded) input around it as
`A^T [(G g G^T) * (B^T d B)] A`: the transformed input `V = B^T d B` and the transformed weight
`U = G g G^T` are 4x4 per tile and channel pair, their elementwise product summed over input
channels is 16 independent matrix products (one per position of the 4x4 tile), and `A^T M A`
turns each 4x4 result back into 2x2 pixels. That is 16 multiply-adds per 4 output pixels and
input channel where the direct conv needs 36: 2.25x fewer. The transforms are additions.

- `winograd_input(x)`: x [N, C, H, W] -> V [4, 4, C, N * R, T], the 4x4 transform of every
  tile (R x T tiles per image, `tiles_of`), tiles of the padded input read from 2 columns apart.
- `winograd_product(u, v)`: U [4, 4, K, C] (a constant: `weight_transform`), V -> M [4, 4, K,
  N * R, T]: for each of the 16 positions, a [K, C] x [C, N * R * T] matrix product.
- `winograd_output(m)`: M -> y [N, K, OH, OW]; each tile's 2x2 pixels, cropped to the output.

Values match conv2d's up to float32 rounding of the transforms (the weight transform halves
weights; the products' sums are as deep as the direct conv's)."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from akg.errors import ShapeError
from akg.graph.ops.registry import CONV, LINALG, Attr, defop
from akg.graph.types import TensorType, is_float

# F(2x2, 3x3): input transform B^T, weight transform G, output transform A^T (Lavin & Gray 2016)
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


def tiles_of(out_h: int, out_w: int, cols: int = 0) -> tuple[int, int]:
    """Rows and columns of 2x2 output tiles that cover an output of out_h x out_w pixels; the
    columns `cols` where that is more (tiles past the output: whole vectors of them for the
    product, whose vectors run along a row of tiles)."""
    return -(-out_h // 2), max(-(-out_w // 2), cols)


def weight_transform(w: np.ndarray) -> np.ndarray:
    """A conv weight [K, C, 3, 3] as Winograd's U [4, 4, K, C] (G w G^T, in float64)."""
    return np.einsum("ai,kcij,bj->abkc", G, w.astype(np.float64), G).astype(w.dtype)


def _float(*ts: TensorType) -> None:
    if any(not is_float(t.dtype) for t in ts) or len({t.dtype for t in ts}) > 1:
        raise ShapeError(f"needs floating-point operands of one dtype, got {', '.join(map(str, ts))}")


# --- winograd_input -----------------------------------------------------------------------------

def _input_infer(x: TensorType, padding, out_hw, cols) -> TensorType:
    if x.rank != 4:
        raise ShapeError(f"needs x[N,C,H,W], got {x}")
    _float(x)
    r, t = tiles_of(*out_hw, cols)
    return TensorType((4, 4, x.shape[1], x.shape[0] * r, t), x.dtype)


_SIZE_ATTRS = [Attr("out_hw", "ints", check=lambda v: None if len(v) == 2 and min(v) > 0 else "must be 2 sizes > 0"),
               Attr("cols", "int", 0, check=lambda v: None if v >= 0 else "must not be negative")]
_INPUT_ATTRS = [Attr("padding", "ints", (1, 1), check=lambda v: None if len(v) == 2 and min(v) >= 0 else
                     "must be 2 pads >= 0 (top, left)"), *_SIZE_ATTRS]


@defop("winograd_input", kind=CONV, infer=_input_infer, attrs=_INPUT_ATTRS, differentiable=False,
       flops=lambda ins, outs, attrs: 2 * outs[0].size)
def winograd_input(x, padding, out_hw, cols):
    """B^T d B of every 4x4 input tile d (tiles 2 apart, starting `padding` = (top, left) cells
    before the input; cells outside it are zeros)."""
    n, c, h, w = x.shape
    r, t = tiles_of(*out_hw, cols)
    pt, pl = padding
    xp = np.zeros((n, c, 2 * r + 2, 2 * t + 2), np.float64)
    kept_h, kept_w = min(h, 2 * r + 2 - pt), min(w, 2 * t + 2 - pl)
    xp[:, :, pt:pt + kept_h, pl:pl + kept_w] = x[:, :, :kept_h, :kept_w]
    d = sliding_window_view(xp, (4, 4), axis=(2, 3))[:, :, ::2, ::2]  # [N, C, R, T, 4, 4]
    v = np.einsum("ai,bj,ncrtij->abcnrt", BT, BT, d)
    return v.reshape(4, 4, c, n * r, t).astype(x.dtype)


# --- winograd_product ---------------------------------------------------------------------------

def _product_infer(u: TensorType, v: TensorType) -> TensorType:
    if u.rank != 4 or v.rank != 5 or u.shape[:2] != (4, 4) or v.shape[:2] != (4, 4) or u.shape[3] != v.shape[2]:
        raise ShapeError(f"needs U[4,4,K,C] and V[4,4,C,P,T], got {u} and {v}")
    _float(u, v)
    return TensorType((4, 4, u.shape[2], *v.shape[3:]), v.dtype)


@defop("winograd_product", kind=LINALG, infer=_product_infer, differentiable=False,
       flops=lambda ins, outs, attrs: 2 * outs[0].size * ins[0].shape[3])
def winograd_product(u, v):
    """For each of the 16 tile positions, U[a, b] [K, C] times V[a, b] [C, P * T]."""
    acc = np.float64 if u.dtype == np.float64 else np.float32
    return np.einsum("abkc,abcpt->abkpt", u.astype(acc), v.astype(acc)).astype(v.dtype)


# --- winograd_output ----------------------------------------------------------------------------

def _output_infer(m: TensorType, batch, out_hw, cols) -> TensorType:
    r, t = tiles_of(*out_hw, cols)
    if m.rank != 5 or m.shape[:2] != (4, 4) or m.shape[3] != batch * r or m.shape[4] != t:
        raise ShapeError(f"needs M[4,4,K,{batch}*{r},{t}] for {batch} images of {list(out_hw)} pixels, got {m}")
    _float(m)
    return TensorType((batch, m.shape[2], *out_hw), m.dtype)


_OUTPUT_ATTRS = [Attr("batch", "int", check=lambda n: None if n > 0 else "must be positive"), *_SIZE_ATTRS]


@defop("winograd_output", kind=CONV, infer=_output_infer, attrs=_OUTPUT_ATTRS, differentiable=False,
       flops=lambda ins, outs, attrs: 4 * outs[0].size)
def winograd_output(m, batch, out_hw, cols):
    """A^T M A of every tile: its 2x2 output pixels, cropped to out_hw."""
    r, t = tiles_of(*out_hw, cols)
    k = m.shape[2]
    mm = m.astype(np.float64).reshape(4, 4, k, batch, r, t)
    y = np.einsum("ia,jb,abknrt->nkritj", AT, AT, mm).reshape(batch, k, 2 * r, 2 * t)
    return y[:, :, :out_hw[0], :out_hw[1]].astype(m.dtype)


# --- compute definitions ----------------------------------------------------------------------

from akg.graph.compute.expr import PHASES, call, cast, compute, const, reduce, reduce_axis, select  # noqa: E402
from akg.graph.compute.helpers import inside  # noqa: E402
from akg.graph.ops.reduce import accumulate_dtype  # noqa: E402
from akg.graph.ops.registry import defcompute  # noqa: E402


def _is(index, value: int):
    return call("eq", index, const(value, "int32"))


def _rows(matrix: np.ndarray, index, term):
    """sum_i matrix[index, i] * term(i) for a loop index over matrix's rows, as a select chain
    over the rows (each a sum of +-terms: the transforms' entries are 0 and +-1), so that a
    loop over `index` unrolled by the mapping folds to the row's own sum."""
    def row(k):
        out = None
        for i, coef in enumerate(matrix[k]):
            if coef == 0:
                continue
            part = term(i)
            out = (part if coef > 0 else -part) if out is None else (out + part if coef > 0 else out - part)
        return out
    result = row(len(matrix) - 1)
    for k in range(len(matrix) - 2, -1, -1):
        result = select(_is(index, k), row(k), result)
    return result


@defcompute("winograd_input")
def _input_compute(ctx, x, padding, out_hw, cols):
    """The padded input in two phases of its columns ([N, C, 2R + 2, 2, T + 1], column j at
    [j % 2, j // 2], as strided convs read theirs), so that each of a tile row's 4 columns is
    one contiguous run along the tiles; then B^T d B as select chains over the tile position."""
    n, c, h, w = x.shape
    r, t = tiles_of(*out_hw, cols)
    pt, pl = padding
    zero = const(0.0, x.dtype)
    xph = compute((n, c, 2 * r + 2, 2, t + 1),
                  lambda b, ch, y, p, z: select(inside((y - pt, z * 2 + p - pl), (h, w)),
                                                x[b, ch, y - pt, z * 2 + p - pl], zero), f"{ctx.name}.pad",
                  layout=PHASES)

    def body(a, bb, ch, row, col):
        img, y = (row // r, row % r) if n > 1 else (0, row)
        return _rows(BT, a, lambda i: _rows(BT, bb, lambda j: xph[img, ch, y * 2 + i, j % 2, col + j // 2]))

    return compute(ctx.out.shape, body, ctx.name)


@defcompute("winograd_product")
def _product_compute(ctx, u, v):
    acc = accumulate_dtype(v.dtype)

    def body(a, b, k, p, col):
        c = reduce_axis(u.shape[3], f"{ctx.name}.rc")
        return reduce("sum", cast(acc, u[a, b, k, c]) * cast(acc, v[a, b, c, p, col]), [c])

    return compute(ctx.out.shape, body, ctx.name)


@defcompute("winograd_output")
def _output_compute(ctx, m, batch, out_hw, cols):
    """A^T M A per tile in tile order ([N, K, R, 2, 2, T]: a tile row's pixels of one phase
    contiguous along the tiles), then the pixels in image order, each from its tile's phase."""
    n, k, oh, ow = ctx.out.shape
    r, t = tiles_of(oh, ow, cols)

    def tile(img, ch, y, i, j, col):
        row = img * r + y
        return _rows(AT, i, lambda a: _rows(AT, j, lambda b: m[a, b, ch, row, col]))

    z = compute((n, k, r, 2, 2, t), tile, f"{ctx.name}.tiles")
    return compute(ctx.out.shape, lambda img, ch, y, x: z[img, ch, y // 2, y % 2, x % 2, x // 2], ctx.name)


# --- sharding rules -------------------------------------------------------------------------------

from akg.graph.ops.registry import defsharding  # noqa: E402


@defsharding("winograd_input")
def _input_sharding(call_, mesh):
    """Channels split (V's channels alike); linear: a partial x gives a partial V."""
    from akg.graph.parallel.rules import Role, assign_roles, partial_role

    return assign_roles(call_, mesh, [Role("channels", ins=((0, 1),), outs=((0, 2),)), partial_role("partial", (0,))])


@defsharding("winograd_product")
def _product_sharding(call_, mesh):
    """Filters split (U's and M's K), or input channels split (a partial sum); linear in each."""
    from akg.graph.parallel.rules import Role, assign_roles, partial_role

    roles = [Role("filters", ins=((0, 2),), outs=((0, 2),)),
             Role("channels", ins=((0, 3), (1, 2)), partial_outs=(0,)),
             partial_role("partial_u", (0,)), partial_role("partial_v", (1,))]
    return assign_roles(call_, mesh, roles)


@defsharding("winograd_output")
def _output_sharding(call_, mesh):
    """Filters split (the output's channels alike); linear."""
    from akg.graph.parallel.rules import Role, assign_roles, partial_role

    return assign_roles(call_, mesh, [Role("filters", ins=((0, 2),), outs=((0, 1),)), partial_role("partial", (0,))])
