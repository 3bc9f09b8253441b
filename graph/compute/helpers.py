"""Index helpers shared by the compute definitions of several op families."""

from __future__ import annotations

from typing import Sequence

from akg.graph.compute.expr import Expr, Load, Tensor, Var, all_of, call, const


def broadcast_load(t: Tensor, axes: Sequence[Expr]) -> Load:
    """t read at output position `axes` under NumPy broadcasting (size-1 dims read index 0)."""
    lead = len(axes) - t.ndim
    return t[tuple(0 if d == 1 else axes[lead + i] for i, d in enumerate(t.shape))]


def in_range(index: Expr, lo: int, hi: int) -> list[Expr]:
    """Conditions lo <= index < hi, leaving out those that always hold."""
    is_var = isinstance(index, Var)
    out = []
    if not (is_var and lo <= 0):
        out.append(call("ge", index, const(lo, index.dtype)))
    if not (is_var and index.extent <= hi):
        out.append(call("lt", index, const(hi, index.dtype)))
    return out


def inside(indices: Sequence[Expr], shape: Sequence[int]) -> Expr:
    """Conjunction of 0 <= indices[d] < shape[d]."""
    return all_of(c for i, n in zip(indices, shape) for c in in_range(i, 0, n))


def unravel(linear: Expr, shape: Sequence[int]) -> list[Expr]:
    """Row-major multi-index of a linear index in [0, prod(shape))."""
    out, stride = [], 1
    for k, d in enumerate(reversed(shape)):
        outermost = k == len(shape) - 1
        out.append(const(0, linear.dtype) if d == 1 else
                   linear // stride if outermost else (linear // stride) % d)
        stride *= d
    return out[::-1]


def ravel(indices: Sequence[Expr], shape: Sequence[int]) -> Expr:
    linear: Expr = const(0, "int32")
    for i, d in zip(indices, shape):
        linear = linear * d + i
    return linear
