"""Compute definitions: basic ops as tensor expressions, and graphs lowered to programs of them."""

from akg.graph.compute.expr import (  # noqa: F401
    PHASES, Call, Cast, ComputeOp, Const, Expr, Load, Reduce, Select, Tensor, Var, compute, placeholder,
    reduce, reduce_axis,
)
