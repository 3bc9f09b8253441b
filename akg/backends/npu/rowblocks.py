"""Element-wise work over a group of rows with one row per 32-byte block.

A vector repeat is eight 32-byte blocks, and an operand's blocks may lie `block` elements
apart. With the block stride at the row stride, one repeat covers the same block-wide
segment of eight rows, and the repeats walk along the rows a block at a time: a tile of
eight rows of 1024 float32 is one instruction of 128 full repeats, where a repeat per
row chunk needs 16 instructions (`across`) and a range per row eight (`per row`). A value
per row (a row's mean) is a broadcast with one value per block (`Bcast(ref, block=row
stride)`); a vector the same for every row (a layer norm's gain) has block stride 0.
Fewer than eight rows run under a mask of whole blocks.

Every operand must have the destination's element size (a block then holds the same
lanes in each) and the rows must be whole blocks."""

from __future__ import annotations

import numpy as np

GROUP = 8  # blocks per repeat


def _itemsize(o) -> int:
    return np.dtype(o.dtype).itemsize


def _fits(spec, dst, srcs, n: int) -> int:
    """Elements per block when the blocked form applies, else 0."""
    size = _itemsize(dst)
    blk = spec.block_elements(size)
    if n % blk or spec.vector_bytes // size != GROUP * blk:
        return 0
    if dst.row <= 0 or dst.row % blk:
        return 0
    for o, c in srcs:
        if o.kind == "num":
            continue
        if _itemsize(o) != size or o.row < 0:
            return 0
        if c and o.row % blk:
            return 0
    return blk


def _segments(spec, count: int) -> list[tuple[int, int]]:
    """(first repeat, repeats) of the instructions over `count` repeats."""
    out, start = [], 0
    while start < count:
        r = min(count - start, spec.max_repeat)
        out.append((start, r))
        start += r
    return out


def block_rows_cost(spec, dst, srcs, n: int, rows: int):
    """Cycles of the blocked form over `rows` rows of n elements, or None if it does not apply."""
    blk = _fits(spec, dst, srcs, n)
    if not blk:
        return None
    groups = -(-rows // GROUP)
    return groups * sum(spec.vector_issue + r for _s, r in _segments(spec, n // blk))


def block_rows_op(isa, spec, name: str, dst, srcs, n: int, rows: int):
    """The instructions of `name` over `rows` rows of n elements, eight rows per repeat."""
    blk = _fits(spec, dst, srcs, n)
    for g in range(0, rows, GROUP):
        k = min(GROUP, rows - g)
        mask = None if k == GROUP else k * blk
        for first, repeat in _segments(spec, n // blk):
            at = first * blk
            srcs_t, strides = [], []
            for o, c in srcs:
                if o.kind == "num":
                    srcs_t.append(o.value)
                    strides.append(None)
                elif c:
                    srcs_t.append(o.buffer.ref(o.base + g * o.row + at))
                    strides.append(isa.Stride(o.row, blk))
                else:
                    srcs_t.append(isa.Bcast(o.buffer.ref(o.base + g * o.row), o.row, 0))
                    strides.append(None)
            yield isa.Vector(name, dst.buffer.ref(dst.base + g * dst.row + at), tuple(srcs_t), repeat, mask,
                             dst_stride=isa.Stride(dst.row, blk), src_strides=tuple(strides))


def block_reduce_cost(spec, val, n: int, rows: int):
    """Cycles of `block_reduce`, or None where it does not apply."""
    size = np.dtype(val.dtype).itemsize
    blk = spec.block_elements(size)
    if val.kind != "ref" or n % blk or val.row <= 0 or val.row % blk or n // blk > spec.max_repeat:
        return None
    if spec.vector_bytes // size != GROUP * blk or (rows > GROUP and GROUP % blk):
        return None
    return -(-rows // GROUP) * (2 * spec.vector_issue + n // blk + 1)


def block_reduce(isa, spec, op: str, val, n: int, rows: int, part_temp, res_temp):
    """A row reduction of `rows` rows of n elements (`val`, rows at its row stride) with one
    row per block: per group of eight rows, `reduce_<op>_across` over the row's blocks (a
    repeat of partials, a block per row) and `reduce_<op>_block` (a value per row).
    Returns (cycles, records, the results' temp: one value per row, contiguous), or None
    where it does not apply (rows not whole blocks, a row past max_repeat blocks, or groups
    of results that would not start a 32-byte block)."""
    cost = block_reduce_cost(spec, val, n, rows)
    if cost is None:
        return None
    blk = spec.block_elements(np.dtype(val.dtype).itemsize)
    groups = -(-rows // GROUP)
    part = part_temp(GROUP * blk)
    res = res_temp(groups * GROUP)
    records = []
    for g in range(0, rows, GROUP):
        k = min(GROUP, rows - g)
        mask = None if k == GROUP else k * blk
        records.append(("acc", isa.Vector(f"reduce_{op}_across", part.ref(0), (val.buffer.ref(val.base + g * val.row),),
                                          n // blk, mask, src_strides=(isa.Stride(val.row, blk),)),
                        [val.slot], [(part.name, None)]))
        records.append(("acc", isa.Vector(f"reduce_{op}_block", res.ref(g), (part.ref(0),), 1, mask),
                        [(part.name, None)], [(res.name, None)]))
    return cost, records, res
