"""Static checks of a program against a spec, before anything runs: every DMA path has a rate
in the spec, every scope's buffers fit its capacity, buffers and operands are aligned, every
region stays inside its buffer for every value of the loop variables and the block index,
vector repeats, masks and flag ids are in range. `check_program` raises the first violation
as a typed error naming the instruction. Also the geometry of vector operands (lanes,
blocks, resolved strides) that the simulator shares."""

from __future__ import annotations

from dataclasses import dataclass

from akg.backends.npu.errors import NpuAlignmentError, NpuBoundsError, NpuCapacityError, NpuPathError, NpuProgramError
from akg.backends.npu.isa import Dma, Instr, Loop, Mmad, Program, Scalar, SetFlag, Vector, WaitFlag
from akg.backends.npu.operands import DTYPES, Bcast, Ref, Scope, Stride
from akg.backends.npu.spec import NpuSpec

LOCAL_SCOPES = (Scope.L1, Scope.L0A, Scope.L0B, Scope.L0C, Scope.UB)


@dataclass(frozen=True)
class LaneGeometry:
    """How one lane operand of a vector instruction maps lanes to elements: lane l of repeat r
    is element `start + r * stride.repeat + (l // block) * stride.block + l % block`, for the
    first `mask` lanes. `blocks` counts the 32-byte blocks a repeat touches."""

    block: int  # elements per 32-byte block
    stride: Stride
    mask: int
    blocks: int

    @property
    def dense(self) -> bool:
        """Lanes of a repeat are consecutive elements."""
        return self.stride.block == self.block

    def max_element(self, repeat: int) -> int:
        """Largest element offset touched (from the operand's start)."""
        last = self.mask - 1
        top = (last // self.block) * self.stride.block + last % self.block
        if self.blocks > 1:  # the last full block can reach further when blocks overlap
            top = max(top, (self.blocks - 2) * self.stride.block + self.block - 1)
        return (repeat - 1) * self.stride.repeat + top


@dataclass(frozen=True)
class VectorGeometry:
    """A vector instruction resolved against a spec: lanes per repeat, active lanes, and the
    geometry of its destination and of each `Ref` source (None for numbers and broadcasts)."""

    lanes: int
    mask: int
    dst: LaneGeometry | None  # None: a reduction writing single values (see `result_stride`)
    srcs: tuple[LaneGeometry | None, ...]
    result_stride: Stride  # reduce: (-, per repeat); reduce_block: (per block, per repeat)


def vector_geometry(instr: Vector, spec: NpuSpec) -> VectorGeometry:
    lanes = spec.lanes(instr.itemsize)
    mask = lanes if instr.mask is None else int(instr.mask)

    def lane(ref: Ref, stride: Stride | None) -> LaneGeometry:
        block = spec.block_elements(DTYPES[ref.dtype])
        stride = stride if stride is not None else Stride(block, lanes)
        return LaneGeometry(block, stride, mask, -(-mask // block))

    srcs = tuple(lane(s, st) if isinstance(s, Ref) else None for s, st in zip(instr.srcs, instr.src_strides))
    kind = instr.kind
    src_blocks = srcs[0].blocks if srcs and srcs[0] is not None else 1
    if kind == "reduce":
        return VectorGeometry(lanes, mask, None, srcs, instr.dst_stride or Stride(0, 1))
    if kind == "reduce_block":
        return VectorGeometry(lanes, mask, None, srcs, instr.dst_stride or Stride(1, src_blocks))
    return VectorGeometry(lanes, mask, lane(instr.dst, instr.dst_stride), srcs, Stride(0, 0))


def bcast_max_element(b: Bcast, repeat: int, blocks: int) -> int:
    return (repeat - 1) * b.repeat + (blocks - 1) * b.block


def _where(program: Program, index: int, instr: Instr) -> str:
    return f"kernel '{program.name}', instruction {index} `{instr}`"


def _address_aligned(ref: Ref, alignment: int) -> bool:
    """The byte address of `ref` is a multiple of `alignment` for every loop value (each term
    of its affine offset, and the constant with the buffer's offset, are multiples)."""
    size = ref.buffer.itemsize
    if (ref.buffer.offset + ref.offset.const * size) % alignment:
        return False
    return all((c * size) % alignment == 0 for _v, c in ref.offset.terms)


def _check_region(program, index, instr, ref: Ref, extent: int, trips) -> None:
    """`ref` plus `extent` elements (the largest offset touched + 1) stays in its buffer."""
    lo, hi = ref.offset.bounds(trips)
    if lo < 0 or hi + extent > ref.buffer.size:
        raise NpuBoundsError(f"{_where(program, index, instr)}: touches elements {lo}..{hi + extent - 1} of "
                             f"'{ref.buffer.name}', which has {ref.buffer.size}")


def high_water(program: Program) -> dict[str, int]:
    """Bytes used per local scope (the end of its highest buffer), per AI core."""
    return {str(scope): max((b.end for b in program.buffers if b.scope is scope), default=0)
            for scope in LOCAL_SCOPES}


def check_program(program: Program, spec: NpuSpec) -> dict[str, int]:
    """Raise the first rule of `spec` that `program` breaks; return the high-water bytes per
    local scope."""
    marks = high_water(program)
    for scope in LOCAL_SCOPES:
        cap = spec.capacity(scope)
        if marks[str(scope)] > cap:
            over = [b for b in program.buffers if b.scope is scope and b.end > cap]
            raise NpuCapacityError(
                f"kernel '{program.name}': {scope} needs {marks[str(scope)]} bytes but spec '{spec.name}' has "
                f"{cap} (buffers past the end: {', '.join(b.declaration() for b in over)})")
    for b in program.buffers:
        align = spec.alignment(b.scope, b.itemsize)
        if b.offset % align:
            raise NpuAlignmentError(f"kernel '{program.name}': buffer {b.declaration()} is not aligned "
                                    f"to {align} bytes")
    block_trips = program.block_trips()
    trips: dict[str, int] = dict(block_trips)
    for index, depth, instr, loops in program.walk():
        for name in list(trips):
            if name not in block_trips and name not in loops:
                del trips[name]
        if isinstance(instr, Loop):
            trips[instr.var] = instr.trip
            continue
        if isinstance(instr, Dma):
            _check_dma(program, spec, index, instr, trips)
        elif isinstance(instr, Vector):
            _check_vector(program, spec, index, instr, trips)
        elif isinstance(instr, Mmad):
            _check_mmad(program, spec, index, instr, trips)
        elif isinstance(instr, Scalar):
            for ref in [instr.dst, *instr.srcs]:
                if isinstance(ref, Ref):
                    _check_region(program, index, instr, ref, 1, trips)
        elif isinstance(instr, (SetFlag, WaitFlag)):
            lo, hi = instr.id.bounds(trips)
            if lo < 0 or hi >= spec.flag_ids:
                raise NpuProgramError(f"{_where(program, index, instr)}: flag id {lo}..{hi} outside "
                                      f"0..{spec.flag_ids - 1}")
    return marks


def _check_dma(program, spec: NpuSpec, index, instr: Dma, trips) -> None:
    if spec.rate(instr.path) is None:
        raise NpuPathError(f"{_where(program, index, instr)}: spec '{spec.name}' has no DMA path {instr.path}")
    for ref, strides in ((instr.src, instr.src_strides), (instr.dst, instr.dst_strides)):
        extent = 1 + sum((n - 1) * s for n, s in zip(instr.shape, strides))
        _check_region(program, index, instr, ref, extent, trips)
        if ref.scope is Scope.GM:
            continue
        align = spec.alignment(ref.scope, ref.buffer.itemsize)
        if not _address_aligned(ref, align):
            raise NpuAlignmentError(f"{_where(program, index, instr)}: {ref.scope} address of {ref} is not "
                                    f"aligned to {align} bytes")
        for n, s in zip(instr.shape, strides):
            if n > 1 and s != 1 and (s * ref.buffer.itemsize) % spec.vector_block_bytes:
                raise NpuAlignmentError(f"{_where(program, index, instr)}: {ref.scope} stride {s} of {ref} is "
                                        f"not a multiple of {spec.vector_block_bytes} bytes")


def _check_vector(program, spec: NpuSpec, index, instr: Vector, trips) -> None:
    where = _where(program, index, instr)
    if instr.repeat > spec.max_repeat:
        raise NpuProgramError(f"{where}: repeat {instr.repeat} exceeds {spec.max_repeat}")
    geo = vector_geometry(instr, spec)
    if geo.mask > geo.lanes:
        raise NpuProgramError(f"{where}: mask {geo.mask} exceeds the {geo.lanes} lanes of a repeat")
    rows = 1 if instr.kind == "reduce_across" else instr.repeat  # repeats the destination spans
    refs = [(instr.dst, geo.dst, rows)] + [(s, g, instr.repeat) for s, g in zip(instr.srcs, geo.srcs)
                                            if isinstance(s, Ref)]
    for ref, g, repeat in refs:
        if not _address_aligned(ref, spec.ub_alignment):
            raise NpuAlignmentError(f"{where}: UB address of {ref} is not aligned to {spec.ub_alignment} bytes")
        if g is not None:
            size = ref.buffer.itemsize
            for s in (g.stride.block, g.stride.repeat):
                if (s * size) % spec.vector_block_bytes:
                    raise NpuAlignmentError(f"{where}: stride {g.stride} of {ref} is not in whole "
                                            f"{spec.vector_block_bytes}-byte blocks")
            _check_region(program, index, instr, ref, g.max_element(repeat) + 1, trips)
    src = geo.srcs[0] if geo.srcs else None
    if instr.kind == "reduce":
        _check_region(program, index, instr, instr.dst, (instr.repeat - 1) * geo.result_stride.repeat + 1, trips)
    elif instr.kind == "reduce_block":
        top = (instr.repeat - 1) * geo.result_stride.repeat + (src.blocks - 1) * geo.result_stride.block
        _check_region(program, index, instr, instr.dst, top + 1, trips)
    for s in instr.srcs:
        if isinstance(s, Bcast):
            blocks = geo.dst.blocks if geo.dst is not None else 1
            _check_region(program, index, instr, s.ref, bcast_max_element(s, instr.repeat, blocks) + 1, trips)


def _check_mmad(program, spec: NpuSpec, index, instr: Mmad, trips) -> None:
    where = _where(program, index, instr)
    if instr.a.dtype not in spec.cube_in_dtypes or instr.c.dtype not in spec.cube_out_dtypes:
        raise NpuProgramError(f"{where}: spec '{spec.name}' multiplies {', '.join(spec.cube_in_dtypes)} into "
                              f"{', '.join(spec.cube_out_dtypes)}")
    m1, k1, n1 = instr.fractals(spec.fractal)
    frac = spec.fractal * spec.fractal
    for ref, fractals in ((instr.a, m1 * k1), (instr.b, k1 * n1), (instr.c, n1 * m1)):
        align = spec.alignment(ref.scope, ref.buffer.itemsize)
        if not _address_aligned(ref, align):
            raise NpuAlignmentError(f"{where}: {ref.scope} address of {ref} is not aligned to a fractal "
                                    f"({align} bytes)")
        _check_region(program, index, instr, ref, fractals * frac, trips)
