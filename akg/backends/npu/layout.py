"""Matrix layouts of the NPU and conversions between them. The cube reads and writes 16 x 16
fractals; a layout name is two letters, the small one for the order of elements inside a
fractal and the capital one for the order of the fractals, z/Z row-major and n/N
column-major. For a matrix of R x C elements, R1 = ceil(R/16), C1 = ceil(C/16):

| layout | array | element (r, c) = (16 r1 + r0, 16 c1 + c0) at | used for |
|---|---|---|---|
| `ND` | [R][C] | r * ld + c | GM tensors, UB vector tiles |
| `zZ` | [R1][C1][16][16] | ((r1 * C1 + c1) * 16 + r0) * 16 + c0 | mmad A in L0A |
| `nZ` | [R1][C1][16][16] | ((r1 * C1 + c1) * 16 + c0) * 16 + r0 | mmad B in L0B |
| `zN` | [C1][R1][16][16] = [C1][R][16] | ((c1 * R1 + r1) * 16 + r0) * 16 + c0 | mmad C in L0C, staging in L1/UB |

`to_fractal` / `from_fractal` convert NumPy arrays (padding with zeros to whole fractals);
`layout_dmas` gives the DMA instructions that move a matrix from one layout to another (one
3-D DMA where the two layouts allow it, else one per row or column of fractals)."""

from __future__ import annotations

import itertools

import numpy as np

from akg.backends.npu.errors import NpuProgramError
from akg.backends.npu.isa import Dma
from akg.backends.npu.operands import Ref

ND, ZZ, NZ, ZN = "ND", "zZ", "nZ", "zN"
FRACTAL_LAYOUTS = (ZZ, NZ, ZN)


def _blocks(rows: int, cols: int, side: int) -> tuple[int, int]:
    return -(-rows // side), -(-cols // side)


def fractal_shape(rows: int, cols: int, layout: str, side: int = 16) -> tuple[int, int, int, int]:
    """The 4-D array shape of an R x C matrix in a fractal layout."""
    r1, c1 = _blocks(rows, cols, side)
    if layout in (ZZ, NZ):
        return (r1, c1, side, side)
    if layout == ZN:
        return (c1, r1, side, side)
    raise NpuProgramError(f"unknown fractal layout '{layout}' (layouts: {', '.join(FRACTAL_LAYOUTS)})")


# the fractal array's axes as axes of the padded matrix reshaped to (r1, r0, c1, c0)
_AXES = {ZZ: (0, 2, 1, 3), NZ: (0, 2, 3, 1), ZN: (2, 0, 1, 3)}


def to_fractal(matrix: np.ndarray, layout: str, side: int = 16) -> np.ndarray:
    """A 2-D array in a fractal layout (a contiguous 4-D array), padded with zeros."""
    rows, cols = matrix.shape
    r1, c1 = _blocks(rows, cols, side)
    fractal_shape(rows, cols, layout, side)
    padded = np.zeros((r1 * side, c1 * side), matrix.dtype)
    padded[:rows, :cols] = matrix
    return np.ascontiguousarray(padded.reshape(r1, side, c1, side).transpose(_AXES[layout]))


def from_fractal(fractals: np.ndarray, layout: str, shape: tuple[int, int], side: int = 16) -> np.ndarray:
    """The R x C matrix `shape` held by a fractal array of any shape (e.g. flat; the
    padding cut off)."""
    rows, cols = shape
    f = fractals.reshape(fractal_shape(rows, cols, layout, side))
    r1, c1 = _blocks(rows, cols, side)
    matrix = f.transpose(np.argsort(_AXES[layout])).reshape(r1 * side, c1 * side)
    return np.ascontiguousarray(matrix[:rows, :cols])


def element_strides(layout: str, rows: int, cols: int, ld: int | None = None,
                    side: int = 16) -> tuple[int, int, int, int]:
    """Element strides of (r1, c1, r0, c0) in an R x C matrix in `layout` (`ld`: the row
    stride of ND, default C)."""
    r1, c1 = _blocks(rows, cols, side)
    f = side * side
    if layout == ND:
        ld = cols if ld is None else ld
        return (side * ld, side, ld, 1)
    return {ZZ: (c1 * f, f, side, 1), NZ: (c1 * f, f, 1, side), ZN: (f, r1 * f, side, 1)}[layout]


def _merge(dims: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Order (count, src stride, dst stride) dims by destination stride (outermost first) and
    merge neighbours that are one dim in both layouts."""
    dims = sorted(dims, key=lambda d: (-d[2], -d[1]))
    out: list[tuple[int, int, int]] = []
    for n, s, d in dims:
        if out and out[-1][1] == s * n and out[-1][2] == d * n:
            m = out.pop()[0]
            out.append((m * n, s, d))
        else:
            out.append((n, s, d))
    return out


def layout_dmas(src: Ref, dst: Ref, rows: int, cols: int, src_layout: str, dst_layout: str, *,
                src_ld: int | None = None, dst_ld: int | None = None,
                src_full: tuple[int, int] | None = None, dst_full: tuple[int, int] | None = None,
                side: int = 16) -> list[Dma]:
    """DMAs copying an R x C matrix from `src` in `src_layout` to `dst` in `dst_layout`.
    Either side may be a block of a larger matrix starting at its Ref: `*_ld` is the row
    stride of an ND side, `*_full` the (rows, cols) of the fractal matrix a fractal side is
    a block of (default: R x C itself). Fractal layouts need R and C in whole fractals;
    between two ND sides any R x C goes in one DMA."""
    if src_layout == ND and dst_layout == ND:
        return [Dma(src, dst, (rows, cols), (cols if src_ld is None else src_ld, 1),
                    (cols if dst_ld is None else dst_ld, 1))]
    if rows % side or cols % side:
        raise NpuProgramError(f"a {rows} x {cols} matrix is not in whole {side} x {side} fractals "
                              f"({src_layout} -> {dst_layout})")
    r1, c1 = rows // side, cols // side
    s = element_strides(src_layout, *(src_full or (rows, cols)), src_ld, side)
    d = element_strides(dst_layout, *(dst_full or (rows, cols)), dst_ld, side)
    dims = [(n, a, b) for n, a, b in zip((r1, c1, side, side), s, d) if n > 1]
    merged = _merge(dims)
    loops: list[tuple[int, int, int]] = []
    if len(merged) > 3:  # iterate over the dim with the fewest steps; the rest is one DMA each
        best = min(range(len(dims)), key=lambda i: (len(_merge(dims[:i] + dims[i + 1:])), dims[i][0]))
        loops = [dims[best]]
        merged = _merge(dims[:best] + dims[best + 1:])
    shape = tuple(n for n, _, _ in merged) or (1,)
    src_strides = tuple(a for _, a, _ in merged) or (1,)
    dst_strides = tuple(b for _, _, b in merged) or (1,)
    out = []
    for index in itertools.product(*(range(n) for n, _, _ in loops)):
        so = sum(i * a for i, (_, a, _) in zip(index, loops))
        do = sum(i * b for i, (_, _, b) in zip(index, loops))
        out.append(Dma(Ref(src.buffer, src.offset + so), Ref(dst.buffer, dst.offset + do),
                       shape, src_strides, dst_strides))
    return out


def a_operand_dmas(src: Ref, l1: Ref, l0: Ref, rows: int, kt: int, k_stride: int, m_stride: int,
                   side: int = 16) -> tuple[list[Dma], list[Dma]]:
    """A cube's A operand, a rows x kt block of A in GM: the GM -> L1 DMAs and the L1 -> L0A
    ones that leave it zZ in L0A. A stored [m, k] (`k_stride` 1) goes ND -> zN -> zZ; A stored
    [k, m] goes ND -> nZ of the k x m matrix, whose fractals are reordered into zZ of A."""
    if k_stride == 1:
        return (layout_dmas(src, l1, rows, kt, ND, ZN, src_ld=m_stride, side=side),
                layout_dmas(l1, l0, rows, kt, ZN, ZZ, side=side))
    m1, k1, ff = rows // side, kt // side, side * side
    return (layout_dmas(src, l1, kt, rows, ND, NZ, src_ld=k_stride, side=side),
            [Dma(l1, l0, (m1, k1, ff), (ff, m1 * ff, 1), (k1 * ff, ff, 1))])
