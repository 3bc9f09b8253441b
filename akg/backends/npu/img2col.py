"""The simulator's side of `Img2col` (Ascend's load3d): its static rules, its cost and its
NumPy semantics, one gather per instruction from a table of source offsets built once.

The table has one row per fractal row of K ((c1, ry, rx) in that order) and one column per n
position (image, oy, ox; each image padded to whole fractals): the element offset in the
feature map of the 16 channels the position reads at that tap, or the zero block past the map's
end where the tap falls in the padding or the position is one of the image's padding columns."""

from __future__ import annotations

import math

import numpy as np

from akg.backends.npu.errors import NpuAlignmentError, NpuBoundsError
from akg.backends.npu.isa import Img2col

C0 = 16  # channels per fmap position, elements per fractal row


def fmap_elements(instr: Img2col) -> int:
    """Elements of the feature map the source holds."""
    return math.prod(instr.fmap) * C0


def check_img2col(where: str, instr: Img2col, spec, trips) -> None:
    """Bounds of both regions and of the K range for every loop value; the fractal alignment
    of the destination and the L1 alignment of the source."""
    for ref, extent in ((instr.src, fmap_elements(instr)), (instr.dst, instr.elements)):
        lo, hi = ref.offset.bounds(trips)
        if lo < 0 or hi + extent > ref.buffer.size:
            raise NpuBoundsError(f"{where}: touches elements {lo}..{hi + extent - 1} of '{ref.buffer.name}', "
                                 f"which has {ref.buffer.size}")
        align = spec.alignment(ref.scope, 2)
        size = ref.buffer.itemsize
        if (ref.buffer.offset + ref.offset.const * size) % align or any((c * size) % align
                                                                        for _v, c in ref.offset.terms):
            raise NpuAlignmentError(f"{where}: {ref.scope} address of {ref} is not aligned to {align} bytes")
    lo, hi = instr.k_first.bounds(trips)
    if lo < 0 or hi + instr.k1 > instr.k_fractals:
        raise NpuBoundsError(f"{where}: fractal rows {lo}..{hi + instr.k1 - 1} of K, which has "
                             f"{instr.k_fractals} ({instr.fmap[0]} channel groups x {instr.kernel[0]}x"
                             f"{instr.kernel[1]} taps)")


def cost(instr: Img2col, spec) -> int:
    """DMA start latency plus the L0B bytes written at the L1 -> L0B rate: the expansion
    by the taps is paid here, in bytes written, not in GM traffic."""
    return spec.dma_latency + math.ceil(instr.nbytes / spec.rate(instr.path))


def gather_table(instr: Img2col) -> np.ndarray:
    """int64 [k_fractals, n, 16]: the fmap element each output element copies (the map's
    element count, where a zero block is appended, for padding)."""
    c1s, images, rows, cols = instr.fmap
    (oh, ow), (kh, kw) = instr.out, instr.kernel
    (sh, sw), (dh, dw), (top, left) = instr.stride, instr.dilation, instr.pad
    kf = np.arange(instr.k_fractals)
    c1, ry, rx = kf // (kh * kw), (kf // kw) % kh, kf % kw
    per = instr.image_positions
    p = np.arange(per)
    oy, ox = p // ow, p % ow
    iy = oy[None, :] * sh + ry[:, None] * dh - top  # [k, p]
    ix = ox[None, :] * sw + rx[:, None] * dw - left
    valid = (p[None, :] < oh * ow) & (iy >= 0) & (iy < rows) & (ix >= 0) & (ix < cols)
    image = np.arange(images)
    offset = (((c1[:, None, None] * images + image[None, :, None]) * rows + iy[:, None, :]) * cols
              + ix[:, None, :]) * C0  # [k, image, p]
    offset = np.where(valid[:, None, :], offset, fmap_elements(instr))
    return offset.reshape(instr.k_fractals, images * per)[:, :, None] + np.arange(C0)


def runner(instr: Img2col, src_acc, dst_acc, k_first) -> callable:
    """run(env, mem): the gather of the instruction's K rows into L0B."""
    table = gather_table(instr)
    count = fmap_elements(instr)
    f16 = np.dtype(np.float16)
    shape = (instr.k1, instr.n, C0)

    def run(env, mem):
        src = np.ndarray((count,), f16, mem[src_acc.space], src_acc.start(env))
        padded = np.concatenate([src, np.zeros(C0, f16)])
        k0 = k_first(env)
        dst = np.ndarray(shape, f16, mem[dst_acc.space], dst_acc.start(env))
        dst[...] = padded[table[k0:k0 + instr.k1]]

    return run


def reference(fmap: np.ndarray, instr: Img2col, k_first: int) -> np.ndarray:
    """The same matrix from an NCHW-like array [c1*16 channels][images][rows][cols] with
    explicit loops over taps and positions, for the unit tests: [k1, n, 16]."""
    c1s, images, rows, cols = instr.fmap
    (oh, ow), (kh, kw) = instr.out, instr.kernel
    (sh, sw), (dh, dw), (top, left) = instr.stride, instr.dilation, instr.pad
    per = instr.image_positions
    out = np.zeros((instr.k_fractals, images * per, C0), np.float16)
    for kf in range(instr.k_fractals):
        c1, ry, rx = kf // (kh * kw), (kf // kw) % kh, kf % kw
        for image in range(images):
            for y in range(oh):
                for x in range(ow):
                    iy, ix = y * sh + ry * dh - top, x * sw + rx * dw - left
                    if 0 <= iy < rows and 0 <= ix < cols:
                        out[kf, image * per + y * ow + x] = fmap[c1 * C0:(c1 + 1) * C0, image, iy, ix]
    return out[k_first:k_first + instr.k1]
