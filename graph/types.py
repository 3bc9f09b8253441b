"""Tensor types of the graph IR: dtypes with short names, shapes, and broadcasting."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import ml_dtypes  # noqa: F401 - registers bfloat16 and the float8 types with NumPy by name
import numpy as np

from akg.errors import ShapeError

# Canonical dtype names are NumPy's; `.mir` text uses the short names.
_SHORT = {
    "bool": "bool",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "complex64": "c64",  # graph IR and reference only: kernels see float32 pairs (akg.graph.complex)
    # storage types (NumPy's through ml_dtypes): values are computed in float32 and rounded to
    # nearest even when stored (akg.graph.storage; the reference interpreter the same)
    "bfloat16": "bf16",
    "float8_e4m3fn": "f8e4m3fn",
    "float8_e4m3fnuz": "f8e4m3fnuz",
    "float8_e5m2": "f8e5m2",
    "float8_e5m2fnuz": "f8e5m2fnuz",
}
_LONG = {short: long for long, short in _SHORT.items()}
DTYPES = tuple(_SHORT)
STORAGE_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
FLOAT8_DTYPES = STORAGE_DTYPES[1:]
FLOAT_DTYPES = ("float16", "float32", "float64") + STORAGE_DTYPES
# The most elements a shape may have (and so the largest dimension): what a signed 64-bit
# index reaches, and NumPy's limit. Whether the memory is there is checked where arrays are
# made (akg.graph.memory).
MAX_ELEMENTS = 2**63 - 1
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
UINT_DTYPES = ("uint8", "uint16", "uint32", "uint64")
COMPLEX_DTYPES = ("complex64",)
# the real dtype of each complex dtype's parts
COMPLEX_PART = {"complex64": "float32"}


def canonical_dtype(dtype: object) -> str:
    """'f32', 'float32', np.float32 or np.dtype('float32') -> 'float32'; ValueError otherwise."""
    if isinstance(dtype, str):
        if dtype in _SHORT:
            return dtype
        if dtype in _LONG:
            return _LONG[dtype]
        raise ValueError(f"unknown dtype '{dtype}' (known: {', '.join(DTYPES)})")
    try:
        name = np.dtype(dtype).name  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"unknown dtype {dtype!r}") from None
    if name not in _SHORT:
        raise ValueError(f"unsupported dtype '{name}' (known: {', '.join(DTYPES)})")
    return name


def short_dtype(dtype: str) -> str:
    return _SHORT[canonical_dtype(dtype)]


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_storage(dtype: str) -> bool:
    """A float type that kernels only store: they compute its values in float32."""
    return dtype in STORAGE_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def is_unsigned(dtype: str) -> bool:
    return dtype in UINT_DTYPES


def is_complex(dtype: str) -> bool:
    return dtype in COMPLEX_DTYPES


@dataclass(frozen=True)
class TensorType:
    """A static shape (tuple of non-negative ints; () is a scalar) and a canonical dtype."""

    shape: tuple[int, ...]
    dtype: str

    def __init__(self, shape: Iterable[int], dtype: object):
        shape = tuple(shape)
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
                raise ShapeError(f"bad dimension {d!r} in shape {list(shape)}")
        shape = tuple(int(d) for d in shape)
        size = math.prod(shape)
        if size > MAX_ELEMENTS or max(shape, default=0) > MAX_ELEMENTS:
            big = max(shape)
            what = (f"dimension {_count(big)} is larger" if big > MAX_ELEMENTS
                    else f"its {_count(size)} elements are more")
            raise ShapeError(f"shape {_shape_text(shape)}: {what} than an array can index (2^63-1)")
        object.__setattr__(self, "shape", shape)
        try:
            object.__setattr__(self, "dtype", canonical_dtype(dtype))
        except ValueError as e:
            raise ShapeError(str(e)) from None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # exact: a Python int

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def with_shape(self, shape: Iterable[int]) -> "TensorType":
        return TensorType(shape, self.dtype)

    def with_dtype(self, dtype: object) -> "TensorType":
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        return f"{short_dtype(self.dtype)}[{','.join(map(str, self.shape))}]"

    @staticmethod
    def of(array: np.ndarray) -> "TensorType":
        return TensorType(array.shape, array.dtype)


def _count(n: int) -> str:
    """A large count readably: exact up to 20 digits, else its power of ten."""
    digits = len(str(n)) if n < 10**4000 else 4000
    return str(n) if digits <= 20 else f"about 10^{digits - 1}"


def _shape_text(shape: Sequence[int]) -> str:
    text = f"[{','.join(map(str, shape))}]"
    return text if len(text) <= 80 else text[:60] + "...]"


def is_uniform(a: np.ndarray) -> bool:
    """Every element equal to the first (NaN equal to NaN); true for empty arrays and scalars."""
    a = np.asarray(a)
    if a.size <= 1:
        return True
    first = a.flat[0]
    same = a == first
    if (a.dtype.kind in "fc" or a.dtype.name in STORAGE_DTYPES) and first != first:  # NaN: equal to the other NaNs
        same = np.isnan(a)
    return bool(same.all())


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting of static shapes; ShapeError names the shapes that do not fit."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        dims = {s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0}
        dims.discard(1)
        if len(dims) > 1:
            pretty = " and ".join(str(list(s)) for s in shapes)
            raise ShapeError(f"shapes {pretty} cannot be broadcast together")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """Map a possibly negative axis into [0, rank); ShapeError if out of range."""
    if not -rank <= axis < max(rank, 1) or (rank == 0 and axis not in (0, -1)):
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def normalize_axes(axes: Iterable[int] | None, rank: int, what: str = "axes") -> tuple[int, ...]:
    """None means all axes; duplicates are an error; result sorted."""
    if axes is None:
        return tuple(range(rank))
    out = [normalize_axis(a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise ShapeError(f"{what} {list(axes)} repeat an axis")
    return tuple(sorted(out))
