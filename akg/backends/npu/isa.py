"""The NPU instruction set: what a backend emits and the simulator runs. A `Program` is typed,
frozen instructions over named buffers, inside counted loops whose trip counts are known at
compile time; addresses are affine in the loop variables and in `BLOCK`, the index of the
block (AI-core task) that runs the program. `Program.listing()` prints it as assembly-like
text, one instruction per line, loop bodies indented. The operands (scopes, pipes, affine
addresses, buffers, refs) are defined in `akg.backends.npu.operands` and re-exported here.

Units: buffer offsets are bytes (the address of the buffer in its scope); every other
address, extent and stride is in elements of the operand's dtype. Which pipe runs an
instruction follows from what it is (`Instr.pipe`): a DMA's pipe from its path, vector work
on V, mmad on M, scalar work on S; flags and barriers name their pipes.

Constructors check what they can without a spec (scopes, dtypes, arities, legal DMA paths)
and raise `NpuProgramError` / `NpuPathError`; what needs the spec (capacity, alignment,
bounds, repeat and mask limits) is `akg.backends.npu.check.check_program`. See docs/npu.md."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from akg.backends.npu.errors import NpuPathError, NpuProgramError
from akg.backends.npu.operands import (  # noqa: F401 - the operands, re-exported: `isa.<name>` for every name
    BLOCK, BLOCK_VAR, DTYPES, PIPES, Affine, Bcast, Buffer, Index, Operand, Pipe, Ref, Scope, Stride, block_axis, var,
)
from akg.backends.npu.spec import PATH_PIPES


_RESERVED = re.compile(r"block\d*")


# --- instructions ----------------------------------------------------------------------------


class Instr:
    """Base of every instruction: `pipe` runs it, `str()` is its listing line."""

    @property
    def pipe(self) -> Pipe:
        raise NotImplementedError


def _ints(values, what: str) -> tuple[int, ...]:
    out = tuple(int(v) for v in values)
    if any(v < 0 for v in out):
        raise NpuProgramError(f"{what} {out} must not be negative")
    return out


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Dma(Instr):
    """Copy a strided 1-3 D region of `shape` elements from `src` to `dst` (strides in
    elements; None: row-major contiguous). Legal paths and their engines are `PATH_PIPES`;
    only L0C->UB may convert (float32 -> float16, rounding to nearest even)."""

    src: Ref
    dst: Ref
    shape: tuple[int, ...]
    src_strides: tuple[int, ...] | None = None
    dst_strides: tuple[int, ...] | None = None

    def __post_init__(self):
        shape = _ints(self.shape, "dma shape")
        if not 1 <= len(shape) <= 3 or 0 in shape:
            raise NpuProgramError(f"dma shape {shape} must have 1 to 3 positive dims: {self}")
        object.__setattr__(self, "shape", shape)
        for name in ("src_strides", "dst_strides"):
            strides = getattr(self, name)
            strides = contiguous_strides(shape) if strides is None else _ints(strides, f"dma {name}")
            if len(strides) != len(shape):
                raise NpuProgramError(f"dma {name} {strides} do not match shape {shape}: {self}")
            object.__setattr__(self, name, strides)
        if self.path not in PATH_PIPES:
            raise NpuPathError(f"illegal DMA path {self.path} (paths: {', '.join(PATH_PIPES)}): {self}")
        if self.src.dtype != self.dst.dtype and not (
                self.path == "L0C->UB" and (self.src.dtype, self.dst.dtype) == ("float32", "float16")):
            raise NpuProgramError(f"dma from {self.src.dtype} to {self.dst.dtype} (only L0C->UB converts, "
                                  f"float32 -> float16): {self}")

    @property
    def path(self) -> str:
        return f"{self.src.scope}->{self.dst.scope}"

    @property
    def pipe(self) -> Pipe:
        return Pipe(PATH_PIPES[self.path])

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes moved (read from the source)."""
        return self.elements * DTYPES[self.src.dtype]

    def __str__(self) -> str:
        engine = PATH_PIPES.get(self.path, "?")
        text = f"dma.{engine} {self.dst} <- {self.src} shape={self.shape}"
        contiguous = contiguous_strides(self.shape)
        if self.dst_strides != contiguous:
            text += f" dst_strides={self.dst_strides}"
        if self.src_strides != contiguous:
            text += f" src_strides={self.src_strides}"
        return text


# op -> kind; kinds fix arity and operand types (docs/npu.md, "Vector instructions")
VECTOR_OPS: dict[str, str] = {
    **{op: "binary" for op in ("add", "sub", "mul", "div", "max", "min")},
    **{op: "unary" for op in ("abs", "exp", "ln", "sqrt", "rsqrt", "rec", "relu")},
    "cast": "cast",
    "dup": "dup",
    **{f"reduce_{r}": "reduce" for r in ("sum", "max", "min")},  # within a repeat -> 1 value
    **{f"reduce_{r}_block": "reduce_block" for r in ("sum", "max", "min")},  # per 32-byte block
    **{f"reduce_{r}_across": "reduce_across" for r in ("sum", "max", "min")},  # lane-wise over repeats
    **{f"cmp_{c}": "cmp" for c in ("eq", "ne", "lt", "le", "gt", "ge")},  # per-lane condition: 1 / 0
    "sel": "select",  # dst = cond != 0 ? a : b, per lane
}
CMP_OPS = frozenset(op for op, kind in VECTOR_OPS.items() if kind == "cmp")
FLOAT_ONLY_OPS = frozenset({"div", "exp", "ln", "sqrt", "rsqrt", "rec"})
CASTS = frozenset({("float16", "float32"), ("float32", "float16"), ("float32", "int32"),
                   ("float16", "int32"), ("int32", "float32"), ("int32", "float16")})


@dataclass(frozen=True)
class Vector(Instr):
    """One vector instruction on UB: `repeat` repeats, each over the first `mask` lanes (None:
    all; a repeat is 256 bytes: 128 float16 or 64 float32 lanes, in 32-byte blocks). `dst`
    and each `Ref` source are addressed by a `Stride` (None: contiguous); a source may also be
    a `Bcast` or a number. Reductions: `reduce_*` write one value per repeat at
    `dst + r * dst_stride.repeat` (default 1), `reduce_*_block` one per block at
    `dst + r * dst_stride.repeat + b * dst_stride.block` (default 8, 1), `reduce_*_across`
    one repeat's lanes, lane-wise over all repeats.

    Compare and select (Ascend's vcmp + vsel): `cmp_<eq|ne|lt|le|gt|ge> dst, a, b` compares
    two sources of one dtype lane by lane (IEEE: a NaN compares false, except `ne`) and writes
    a condition buffer, 1 where true and 0 where false in `dst`'s dtype (any NPU dtype);
    `sel dst, cond, a, b` writes `a` where the lane of `cond` (a `Ref` of any dtype) is not
    zero, else `b`: a lane takes its value from one source only, so a NaN or inf in the
    other never reaches it."""

    op: str
    dst: Ref
    srcs: tuple[Operand, ...] = ()
    repeat: int = 1
    mask: int | None = None
    dst_stride: Stride | None = None
    src_strides: tuple[Stride | None, ...] = ()

    def __post_init__(self):
        kind = VECTOR_OPS.get(self.op)
        if kind is None:
            raise NpuProgramError(f"unknown vector op '{self.op}' (ops: {', '.join(VECTOR_OPS)})")
        srcs = tuple(self.srcs)
        object.__setattr__(self, "srcs", srcs)
        strides = tuple(self.src_strides) + (None,) * (len(srcs) - len(self.src_strides))
        object.__setattr__(self, "src_strides", strides)
        if len(strides) != len(srcs):
            raise NpuProgramError(f"{len(strides)} source strides for {len(srcs)} sources: {self}")
        arity = {"binary": 2, "cmp": 2, "select": 3, "dup": 1}.get(kind, 1)
        if len(srcs) != arity:
            raise NpuProgramError(f"vector {self.op} takes {arity} source(s), got {len(srcs)}: {self}")
        for i, s in enumerate(srcs):
            if isinstance(s, (Ref, Bcast)):
                ref = s if isinstance(s, Ref) else s.ref
                if ref.scope is not Scope.UB:
                    raise NpuProgramError(f"vector operand {ref} is in {ref.scope}, not UB: {self}")
                if isinstance(s, Bcast) and strides[i] is not None:
                    raise NpuProgramError(f"a broadcast source has its own strides: {self}")
            elif not isinstance(s, (int, float, np.number)) or isinstance(s, bool):
                raise NpuProgramError(f"vector source {s!r} is not a Ref, Bcast or number: {self}")
            elif strides[i] is not None:
                raise NpuProgramError(f"a number source has no strides: {self}")
        numbers = [s for s in srcs if not isinstance(s, (Ref, Bcast))]
        if kind == "dup" and not numbers and not isinstance(srcs[0], Bcast):
            raise NpuProgramError(f"vector dup takes a number or a Bcast: {self}")
        if kind in ("unary", "cast") and numbers:
            raise NpuProgramError(f"vector {self.op} takes a buffer source: {self}")
        if kind.startswith("reduce") and not isinstance(srcs[0], Ref):
            raise NpuProgramError(f"vector {self.op} reduces a Ref source: {self}")
        if kind == "select" and not isinstance(srcs[0], Ref):
            raise NpuProgramError(f"vector sel takes its condition from a Ref: {self}")
        if kind in ("binary", "cmp") and len(numbers) == 2:
            raise NpuProgramError(f"vector {self.op} of two numbers: {self}")
        if self.dst.scope is not Scope.UB:
            raise NpuProgramError(f"vector destination {self.dst} is in {self.dst.scope}, not UB: {self}")
        dtypes = {(s if isinstance(s, Ref) else s.ref).dtype for s in srcs if isinstance(s, (Ref, Bcast))}
        if kind == "cast":
            if not isinstance(srcs[0], Ref):
                raise NpuProgramError(f"vector cast takes a Ref source: {self}")
            if (srcs[0].dtype, self.dst.dtype) not in CASTS:
                raise NpuProgramError(f"no cast from {srcs[0].dtype} to {self.dst.dtype}: {self}")
        elif kind == "cmp":
            if len(dtypes) > 1:
                raise NpuProgramError(f"vector {self.op} compares mixed dtypes {sorted(dtypes)}: {self}")
        elif kind == "select":
            values = {(s if isinstance(s, Ref) else s.ref).dtype for s in srcs[1:] if isinstance(s, (Ref, Bcast))}
            if values - {self.dst.dtype}:
                raise NpuProgramError(f"vector sel mixes dtypes {sorted(values | {self.dst.dtype})}: {self}")
        elif dtypes - {self.dst.dtype}:
            raise NpuProgramError(f"vector {self.op} mixes dtypes {sorted(dtypes | {self.dst.dtype})}: {self}")
        if self.op in FLOAT_ONLY_OPS and self.dst.dtype == "int32":
            raise NpuProgramError(f"vector {self.op} needs float operands: {self}")
        if int(self.repeat) < 1:
            raise NpuProgramError(f"vector repeat {self.repeat} must be at least 1: {self}")
        if self.mask is not None and int(self.mask) < 1:
            raise NpuProgramError(f"vector mask {self.mask} must be at least 1 lane: {self}")

    @property
    def kind(self) -> str:
        return VECTOR_OPS[self.op]

    @property
    def number_dtype(self) -> str:
        """The dtype a number source takes: the compared dtype for a compare (that of its
        buffer source), else the destination's."""
        if self.kind == "cmp":
            for s in self.srcs:
                if isinstance(s, (Ref, Bcast)):
                    return (s if isinstance(s, Ref) else s.ref).dtype
        return self.dst.dtype

    @property
    def pipe(self) -> Pipe:
        return Pipe.V

    @property
    def itemsize(self) -> int:
        """Bytes per lane: the widest operand (a cast between float16 and float32 runs 64
        lanes per repeat)."""
        sizes = [DTYPES[self.dst.dtype]] + [DTYPES[s.dtype] for s in self.srcs if isinstance(s, Ref)]
        return max(sizes)

    def __str__(self) -> str:
        srcs = []
        for s, st in zip(self.srcs, self.src_strides):
            srcs.append(f"{s}{st}" if st is not None else str(s))
        dst = f"{self.dst}{self.dst_stride}" if self.dst_stride is not None else str(self.dst)
        text = f"v.{self.op} {', '.join([dst, *srcs])} repeat={self.repeat}"
        return text + (f" mask={self.mask}" if self.mask is not None else "")


@dataclass(frozen=True)
class Mmad(Instr):
    """`c (+)= a @ b` on the cube: `a` in L0A holds ceil(m/16) x ceil(k/16) fractals (zZ),
    `b` in L0B ceil(k/16) x ceil(n/16) fractals (nZ), `c` in L0C ceil(n/16) x ceil(m/16)
    fractals (zN), contiguous from each Ref (layouts: `akg.backends.npu.layout`). Products
    are summed in float32 and rounded once to `c`'s dtype. `accumulate` adds to `c` (else
    `c` is overwritten); an affine `accumulate` adds wherever it is not zero, so one mmad in
    a loop over k can start the sum on the first step (`accumulate=k`). Whole fractals are
    computed: padding must hold zeros."""

    c: Ref
    a: Ref
    b: Ref
    m: int
    k: int
    n: int
    accumulate: bool | Index = False

    def __post_init__(self):
        if not isinstance(self.accumulate, bool):
            object.__setattr__(self, "accumulate", Affine.of(self.accumulate))
        for ref, scope in ((self.c, Scope.L0C), (self.a, Scope.L0A), (self.b, Scope.L0B)):
            if ref.scope is not scope:
                raise NpuProgramError(f"mmad operand {ref} is in {ref.scope}, not {scope}: {self}")
        if self.a.dtype != "float16" or self.b.dtype != "float16":
            raise NpuProgramError(f"mmad multiplies float16 fractals: {self}")
        if self.c.dtype not in ("float32", "float16"):
            raise NpuProgramError(f"mmad accumulates into float32 or float16: {self}")
        if min(self.m, self.k, self.n) < 1:
            raise NpuProgramError(f"mmad sizes must be positive: {self}")

    @property
    def pipe(self) -> Pipe:
        return Pipe.M

    def fractals(self, side: int = 16) -> tuple[int, int, int]:
        """(m1, k1, n1): fractals along m, k and n."""
        return -(-self.m // side), -(-self.k // side), -(-self.n // side)

    def __str__(self) -> str:
        acc = self.accumulate
        text = f"mmad {self.c}, {self.a}, {self.b} m={self.m} k={self.k} n={self.n}"
        if isinstance(acc, Affine):
            return text + f" accumulate_if=({acc})"
        return text + (" accumulate" if acc else "")


@dataclass(frozen=True)
class Img2col(Instr):
    """Ascend's load3d: a convolution's im2col matrix, gathered on MTE1 from a feature map in L1
    into the cube's B operand (nZ fractals in L0B), so the GM -> L1 load moves each input byte
    once and the expansion by the kernel's taps costs only L1 -> L0B bandwidth.

    `src` holds `fmap` = (c1, images, rows, cols): for each of c1 groups of 16 channels and each
    image, rows x cols positions of 16 channels (`[c1][image][row][col][16]`, Ascend's NC1HWC0).
    The matrix is K x N: k in the order (c1, ry, rx, c0) over the `kernel`'s taps, n over
    (image, oy, ox) for the `out` = (oh, ow) positions of each image, each image's positions
    padded with zero columns to whole fractals (`image_positions`). Element (k, n) is the fmap
    at row oy * sh + ry * dh - top, column ox * sw + rx * dw - left of its image and channel
    group; outside the map it is zero (the convolution's padding). `dst` receives the `k1`
    fractal rows of K starting at fractal row `k_first` (affine: a K step), nZ:
    `dst[k1][n1][n0][c0]`."""

    src: Ref
    dst: Ref
    fmap: tuple[int, int, int, int]
    out: tuple[int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    pad: tuple[int, int] = (0, 0)  # (top, left): may be negative (a tile that starts inside the map)
    k_first: Index = 0
    k1: int = 1

    def __post_init__(self):
        object.__setattr__(self, "k_first", Affine.of(self.k_first))
        for name, n in (("fmap", 4), ("out", 2), ("kernel", 2), ("stride", 2), ("dilation", 2), ("pad", 2)):
            value = tuple(int(v) for v in getattr(self, name))
            if len(value) != n or (name != "pad" and min(value) < 1):
                raise NpuProgramError(f"img2col {name} {value} needs {n} positive values: {self}")
            object.__setattr__(self, name, value)
        if self.src.scope is not Scope.L1 or self.dst.scope is not Scope.L0B:
            raise NpuPathError(f"img2col loads L1 -> L0B, not {self.src.scope} -> {self.dst.scope}: {self}")
        if self.src.dtype != "float16" or self.dst.dtype != "float16":
            raise NpuProgramError(f"img2col moves float16 fractals: {self}")
        if int(self.k1) < 1:
            raise NpuProgramError(f"img2col needs at least one fractal row of K: {self}")

    @property
    def pipe(self) -> Pipe:
        return Pipe.MTE1

    @property
    def path(self) -> str:
        return "L1->L0B"

    @property
    def k_fractals(self) -> int:
        """Fractal rows of the whole K: c1 groups x taps."""
        return self.fmap[0] * self.kernel[0] * self.kernel[1]

    @property
    def image_positions(self) -> int:
        """n columns per image: its oh x ow positions rounded up to whole fractals."""
        return -(-(self.out[0] * self.out[1]) // 16) * 16

    @property
    def n(self) -> int:
        return self.fmap[1] * self.image_positions

    @property
    def elements(self) -> int:
        """Elements written to L0B."""
        return self.k1 * 16 * self.n

    @property
    def nbytes(self) -> int:
        return self.elements * 2

    def __str__(self) -> str:
        c1, images, rows, cols = self.fmap
        return (f"img2col {self.dst} <- {self.src} fmap=({c1}x{images}x{rows}x{cols}x16) out={self.out} "
                f"kernel={self.kernel} stride={self.stride} dilation={self.dilation} pad={self.pad} "
                f"k=[{self.k_first}]+{self.k1}")


SCALAR_OPS = frozenset({op for op, kind in VECTOR_OPS.items() if kind in ("binary", "unary")} | {"mov", "nop"})


@dataclass(frozen=True)
class Scalar(Instr):
    """Scalar-unit work: `nop` costs `ops` scalar operations (address arithmetic, control);
    the math ops compute one UB element, `dst = op(srcs)` (sources: single UB elements or
    numbers; `mov` copies)."""

    op: str
    dst: Ref | None = None
    srcs: tuple[Ref | float | int, ...] = ()
    ops: int = 1

    def __post_init__(self):
        if self.op not in SCALAR_OPS:
            raise NpuProgramError(f"unknown scalar op '{self.op}' (ops: {', '.join(sorted(SCALAR_OPS))})")
        object.__setattr__(self, "srcs", tuple(self.srcs))
        if self.ops < 1:
            raise NpuProgramError(f"scalar ops {self.ops} must be at least 1: {self}")
        if self.op == "nop":
            if self.dst is not None or self.srcs:
                raise NpuProgramError(f"scalar nop has no operands: {self}")
            return
        arity = 2 if VECTOR_OPS.get(self.op) == "binary" else 1
        if self.dst is None or len(self.srcs) != arity:
            raise NpuProgramError(f"scalar {self.op} takes a destination and {arity} source(s): {self}")
        refs = [self.dst] + [s for s in self.srcs if isinstance(s, Ref)]
        for ref in refs:
            if ref.scope is not Scope.UB:
                raise NpuProgramError(f"scalar operand {ref} is in {ref.scope}, not UB: {self}")
            if ref.dtype != self.dst.dtype:
                raise NpuProgramError(f"scalar {self.op} mixes dtypes: {self}")
        if self.op in FLOAT_ONLY_OPS and self.dst.dtype == "int32":
            raise NpuProgramError(f"scalar {self.op} needs float operands: {self}")

    @property
    def pipe(self) -> Pipe:
        return Pipe.S

    def __str__(self) -> str:
        if self.op == "nop":
            return f"s.nop ops={self.ops}"
        return f"s.{self.op} {', '.join(str(x) for x in (self.dst, *self.srcs))}"


def _flag_pipes(instr) -> None:
    object.__setattr__(instr, "src", Pipe(instr.src))
    object.__setattr__(instr, "dst", Pipe(instr.dst))
    object.__setattr__(instr, "id", Affine.of(instr.id))
    if Pipe.ALL in (instr.src, instr.dst) or instr.src is instr.dst:
        raise NpuProgramError(f"a flag joins two different pipes: {instr}")


@dataclass(frozen=True)
class SetFlag(Instr):
    """Runs on `src` once every earlier `src` instruction is done; lets the matching
    `WaitFlag(src, dst, id)` proceed (flags count: each wait consumes one set)."""

    src: Pipe
    dst: Pipe
    id: Index = 0

    def __post_init__(self):
        _flag_pipes(self)

    @property
    def pipe(self) -> Pipe:
        return self.src

    def __str__(self) -> str:
        return f"set_flag {self.src} -> {self.dst} #{self.id}"


@dataclass(frozen=True)
class WaitFlag(Instr):
    """Holds pipe `dst` until a `SetFlag(src, dst, id)` issued before it has run, and
    consumes that set."""

    src: Pipe
    dst: Pipe
    id: Index = 0

    def __post_init__(self):
        _flag_pipes(self)

    @property
    def pipe(self) -> Pipe:
        return self.dst

    def __str__(self) -> str:
        return f"wait_flag {self.src} -> {self.dst} #{self.id}"


@dataclass(frozen=True)
class PipeBarrier(Instr):
    """Every later instruction, on any pipe, waits until all earlier instructions of `pipe`
    (ALL: of every pipe) are done."""

    barrier: Pipe = Pipe.ALL

    def __post_init__(self):
        object.__setattr__(self, "barrier", Pipe(self.barrier))

    @property
    def pipe(self) -> Pipe:
        return Pipe.S

    def __str__(self) -> str:
        return f"pipe_barrier {self.barrier}"


@dataclass(frozen=True)
class Loop(Instr):
    """`for var in 0..trip-1: body`; costs the scalar unit `loop_cycles` per iteration."""

    var: str
    trip: int
    body: tuple[Instr, ...]

    def __post_init__(self):
        object.__setattr__(self, "body", tuple(self.body))
        if not self.var.isidentifier() or _RESERVED.fullmatch(self.var):
            raise NpuProgramError(f"loop variable '{self.var}' must be an identifier other than "
                                  f"'{BLOCK_VAR}' and '{BLOCK_VAR}<axis>'")
        if int(self.trip) < 1:
            raise NpuProgramError(f"loop over '{self.var}' needs a trip count of at least 1, not {self.trip}")

    @property
    def pipe(self) -> Pipe:
        return Pipe.S

    def __str__(self) -> str:
        return f"for {self.var} in 0..{self.trip}:"


def operand_refs(instr: Instr) -> Iterator[Ref]:
    """Every buffer reference an instruction names."""
    if isinstance(instr, Dma):
        yield from (instr.src, instr.dst)
    elif isinstance(instr, Vector):
        yield instr.dst
        for s in instr.srcs:
            if isinstance(s, Ref):
                yield s
            elif isinstance(s, Bcast):
                yield s.ref
    elif isinstance(instr, Mmad):
        yield from (instr.c, instr.a, instr.b)
    elif isinstance(instr, Img2col):
        yield from (instr.src, instr.dst)
    elif isinstance(instr, Scalar):
        if instr.dst is not None:
            yield instr.dst
        yield from (s for s in instr.srcs if isinstance(s, Ref))


def instr_vars(instr: Instr) -> frozenset[str]:
    """Loop variables an instruction's addresses or flag id use."""
    names = set()
    for ref in operand_refs(instr):
        names |= ref.offset.vars
    if isinstance(instr, (SetFlag, WaitFlag)):
        names |= instr.id.vars
    if isinstance(instr, Mmad) and isinstance(instr.accumulate, Affine):
        names |= instr.accumulate.vars
    if isinstance(instr, Img2col):
        names |= instr.k_first.vars
    return frozenset(names)


@dataclass(frozen=True)
class Program:
    """A kernel: its parameters (GM buffers, in kernel argument order), the local buffers of
    each AI core, the body, and its blocks: block b runs the body with `block` = b (blocks
    beyond the spec's cores queue for a free core). A `grid` (e.g. (8, 4)) numbers the blocks
    in several dims: `block_axis(i)` is block b's coordinate along axis i, and `blocks` is the
    grid's product."""

    name: str
    params: tuple[Buffer, ...]
    buffers: tuple[Buffer, ...]
    body: tuple[Instr, ...]
    blocks: int = 1
    grid: tuple[int, ...] = ()
    _count: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "buffers", tuple(self.buffers))
        object.__setattr__(self, "body", tuple(self.body))
        grid = tuple(int(g) for g in self.grid)
        object.__setattr__(self, "grid", grid)
        if grid:
            if any(g < 1 for g in grid) or self.blocks not in (1, math.prod(grid)):
                raise NpuProgramError(f"kernel '{self.name}': grid {grid} does not give {self.blocks} blocks")
            object.__setattr__(self, "blocks", math.prod(grid))
        if int(self.blocks) < 1:
            raise NpuProgramError(f"kernel '{self.name}': blocks must be at least 1, not {self.blocks}")
        names = [b.name for b in self.params + self.buffers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise NpuProgramError(f"kernel '{self.name}': buffer names used twice: {', '.join(dup)}")
        for b in self.params:
            if b.scope is not Scope.GM:
                raise NpuProgramError(f"kernel '{self.name}': parameter '{b.name}' is in {b.scope}, not GM")
        for b in self.buffers:
            if b.scope is Scope.GM:
                raise NpuProgramError(f"kernel '{self.name}': local buffer '{b.name}' is in GM (make it a parameter)")
        declared = {b.name: b for b in self.params + self.buffers}
        count = 0
        block_vars = set(self.block_trips())
        for index, _depth, instr, loops in self.walk():
            count += 1
            bound = block_vars | set(loops)
            if isinstance(instr, Loop) and instr.var in loops:
                raise NpuProgramError(f"kernel '{self.name}': instruction {index} `{instr}` reuses the "
                                      f"loop variable '{instr.var}' of an enclosing loop")
            free = instr_vars(instr) - bound
            if free:
                raise NpuProgramError(f"kernel '{self.name}': instruction {index} `{instr}` uses "
                                      f"undefined loop variable(s) {', '.join(sorted(free))}")
            for ref in operand_refs(instr):
                if declared.get(ref.buffer.name) != ref.buffer:
                    raise NpuProgramError(f"kernel '{self.name}': instruction {index} `{instr}` uses "
                                          f"buffer '{ref.buffer.name}', which the kernel does not declare")
        object.__setattr__(self, "_count", count)

    def walk(self) -> Iterator[tuple[int, int, Instr, tuple[str, ...]]]:
        """(index, depth, instruction, enclosing loop variables) for every instruction in
        listing order; loops come before their bodies. The index names an instruction in
        errors and traces."""
        counter = [0]

        def visit(body, depth, loops):
            for instr in body:
                index = counter[0]
                counter[0] += 1
                yield index, depth, instr, loops
                if isinstance(instr, Loop):
                    yield from visit(instr.body, depth + 1, loops + (instr.var,))

        yield from visit(self.body, 0, ())

    def block_trips(self) -> dict[str, int]:
        """The block variables and their ranges: `block`, and `block<i>` along a grid."""
        trips = {BLOCK_VAR: self.blocks}
        trips.update({f"{BLOCK_VAR}{i}": g for i, g in enumerate(self.grid)})
        return trips

    def block_env(self, block: int) -> dict[str, int]:
        """The block variables' values in block `block`."""
        env = {BLOCK_VAR: block}
        rest = block
        for i in reversed(range(len(self.grid))):
            rest, env[f"{BLOCK_VAR}{i}"] = divmod(rest, self.grid[i])
        return env

    @property
    def instruction_count(self) -> int:
        """Instructions in the listing (loops counted once, not unrolled)."""
        return self._count

    def buffer(self, name: str) -> Buffer:
        for b in self.params + self.buffers:
            if b.name == name:
                return b
        raise NpuProgramError(f"kernel '{self.name}' has no buffer '{name}'")

    def listing(self, numbered: bool = False) -> str:
        """Assembly-like text: a header with the parameters and buffers, then one instruction
        per line, loop bodies indented; `numbered` prefixes each instruction's index."""
        grid = f" grid={self.grid}" if self.grid else ""
        lines = [f".kernel {self.name} blocks={self.blocks}{grid}"]
        lines += [f".param  {b.declaration()}" for b in self.params]
        lines += [f".buffer {b.declaration()}" for b in self.buffers]
        for index, depth, instr, _loops in self.walk():
            prefix = f"{index:5d}  " if numbered else ""
            lines.append(f"{prefix}{'  ' * (depth + 1)}{instr}")
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.listing()
