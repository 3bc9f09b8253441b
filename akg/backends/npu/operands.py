"""The NPU instruction set's operands, re-exported by `akg.backends.npu.isa`: the scopes buffers
live in, the pipes, affine addresses over loop variables and `BLOCK`, named buffers, element
references (`Ref`), and a vector operand's strides (`Stride`) and broadcasts (`Bcast`)."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from akg.backends.npu.errors import NpuProgramError


class Scope(str, enum.Enum):
    """Where a buffer lives: global memory or one of an AI core's local buffers."""

    GM = "GM"
    L1 = "L1"
    L0A = "L0A"
    L0B = "L0B"
    L0C = "L0C"
    UB = "UB"

    def __str__(self) -> str:
        return self.value


class Pipe(str, enum.Enum):
    """The six concurrent pipes of an AI core; `ALL` only in `PipeBarrier`."""

    S = "S"
    V = "V"
    M = "M"
    MTE1 = "MTE1"
    MTE2 = "MTE2"
    MTE3 = "MTE3"
    ALL = "ALL"

    def __str__(self) -> str:
        return self.value


PIPES: tuple[Pipe, ...] = (Pipe.S, Pipe.V, Pipe.M, Pipe.MTE1, Pipe.MTE2, Pipe.MTE3)
DTYPES: dict[str, int] = {"float16": 2, "float32": 4, "int32": 4}  # dtype -> bytes
BLOCK_VAR = "block"


def _dtype(dtype) -> str:
    name = np.dtype(dtype).name
    if name not in DTYPES:
        raise NpuProgramError(f"dtype '{name}' is not an NPU dtype ({', '.join(DTYPES)})")
    return name


# --- affine addresses ------------------------------------------------------------------------


@dataclass(frozen=True)
class Affine:
    """`const + sum(coeff * var)` over loop variables (and `block`); integers only."""

    const: int = 0
    terms: tuple[tuple[str, int], ...] = ()  # (var, coeff), sorted by var, no zero coeff

    @staticmethod
    def of(value: int | Affine) -> Affine:
        if isinstance(value, Affine):
            return value
        if isinstance(value, (bool, float)) or not isinstance(value, (int, np.integer)):
            raise NpuProgramError(f"an address must be an integer or affine expression, not {value!r}")
        return Affine(int(value))

    def _combine(self, other: int | Affine, sign: int) -> Affine:
        other = Affine.of(other)
        coeffs = dict(self.terms)
        for v, c in other.terms:
            coeffs[v] = coeffs.get(v, 0) + sign * c
        return Affine(self.const + sign * other.const, tuple(sorted((v, c) for v, c in coeffs.items() if c)))

    def __add__(self, other) -> Affine:
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other) -> Affine:
        return self._combine(other, -1)

    def __rsub__(self, other) -> Affine:
        return Affine.of(other)._combine(self, -1)

    def __neg__(self) -> Affine:
        return Affine(-self.const, tuple((v, -c) for v, c in self.terms))

    def __mul__(self, k) -> Affine:
        if isinstance(k, Affine):
            if k.terms and self.terms:
                raise NpuProgramError(f"({self}) * ({k}) is not affine")
            return self * k.const if not k.terms else k * self.const
        k = Affine.of(k).const
        return Affine(self.const * k, tuple((v, c * k) for v, c in self.terms if c * k))

    __rmul__ = __mul__

    @property
    def vars(self) -> frozenset[str]:
        return frozenset(v for v, _ in self.terms)

    def eval(self, env: Mapping[str, int]) -> int:
        return self.const + sum(c * env[v] for v, c in self.terms)

    def bounds(self, trips: Mapping[str, int]) -> tuple[int, int]:
        """Smallest and largest value over `0 <= var < trips[var]`."""
        lo = hi = self.const
        for v, c in self.terms:
            span = c * (trips[v] - 1)
            lo, hi = lo + min(0, span), hi + max(0, span)
        return lo, hi

    def __str__(self) -> str:
        parts = [v if c == 1 else f"{v}*{c}" for v, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


def var(name: str) -> Affine:
    """The loop variable `name` as an address term."""
    return Affine(0, ((name, 1),))


BLOCK = var(BLOCK_VAR)  # the index of the block running the program, 0 <= block < blocks


def block_axis(axis: int) -> Affine:
    """The block's coordinate along `axis` of the program's grid (row-major: the last axis
    varies fastest, `block` = the linear index)."""
    return var(f"{BLOCK_VAR}{axis}")


Index = int | Affine


# --- buffers and operands --------------------------------------------------------------------


@dataclass(frozen=True)
class Buffer:
    """A named buffer: global memory (a kernel parameter, offset 0) or a local buffer of an
    AI core at byte `offset` of its scope. Elements are row-major in `shape`; `buf[i, j]` and
    `buf[flat]` are `Ref`s to one element (the start of an operand)."""

    scope: Scope
    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int = 0

    def __post_init__(self):
        object.__setattr__(self, "scope", Scope(self.scope))
        object.__setattr__(self, "dtype", _dtype(self.dtype))
        shape = tuple(int(s) for s in self.shape)
        if not shape or any(s <= 0 for s in shape):
            raise NpuProgramError(f"buffer '{self.name}': shape {shape} must be non-empty and positive")
        object.__setattr__(self, "shape", shape)
        if not self.name.isidentifier():
            raise NpuProgramError(f"buffer name '{self.name}' is not an identifier")
        if self.offset < 0 or (self.scope is Scope.GM and self.offset):
            raise NpuProgramError(f"buffer '{self.name}': offset {self.offset} (GM buffers start at 0)")

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def end(self) -> int:
        """First byte after the buffer in its scope."""
        return self.offset + self.nbytes

    def ref(self, offset: Index = 0) -> Ref:
        return Ref(self, Affine.of(offset))

    def __getitem__(self, index) -> Ref:
        if not isinstance(index, tuple):
            return self.ref(index)
        if len(index) != len(self.shape):
            raise NpuProgramError(f"buffer '{self.name}' has {len(self.shape)} dims, indexed with {len(index)}")
        flat, stride = Affine(), 1
        for i, extent in zip(reversed(index), reversed(self.shape)):
            flat, stride = flat + Affine.of(i) * stride, stride * extent
        return self.ref(flat)

    def declaration(self) -> str:
        dims = "x".join(str(s) for s in self.shape)
        at = f" @{self.offset:#x}" if self.scope is not Scope.GM else ""
        return f"{self.name}: {self.scope} {self.dtype}[{dims}]{at}"


@dataclass(frozen=True)
class Ref:
    """The element `offset` (affine) of `buffer`: where an operand starts."""

    buffer: Buffer
    offset: Affine = Affine()

    def __post_init__(self):
        object.__setattr__(self, "offset", Affine.of(self.offset))

    @property
    def scope(self) -> Scope:
        return self.buffer.scope

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    def __str__(self) -> str:
        return f"{self.buffer.name}[{self.offset}]"


@dataclass(frozen=True)
class Stride:
    """Strides of a vector operand, in elements: between the 32-byte blocks of one repeat
    (`block`) and between repeats (`repeat`). None in an instruction: contiguous (a block
    after the other, a repeat after the other)."""

    block: int
    repeat: int

    def __post_init__(self):
        if self.block < 0 or self.repeat < 0:
            raise NpuProgramError(f"negative vector stride {self}")

    def __str__(self) -> str:
        return f"({self.block},{self.repeat})"


@dataclass(frozen=True)
class Bcast:
    """A vector source whose value is the same for every lane of a 32-byte block: lane value
    `ref[r * repeat + b * block]` for block b of repeat r. `Bcast(ref)` is one UB scalar for
    every lane; `Bcast(ref, block=1)` one per block (eight rows at once), `repeat=1` one per
    repeat."""

    ref: Ref
    block: int = 0
    repeat: int = 0

    def __post_init__(self):
        if self.block < 0 or self.repeat < 0:
            raise NpuProgramError(f"negative broadcast stride in {self}")

    def __str__(self) -> str:
        return f"bcast({self.ref},{self.block},{self.repeat})"


Operand = Ref | Bcast | float | int
