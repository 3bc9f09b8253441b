"""The local buffers and copies that a promotion mark opens (part of the isl AST -> TIR
lowering, `akg.polyhedral.astgen`): copies in and out of a promoted box, and recompute boxes
evaluated in place, from the plan `akg.polyhedral.promote` made.

`PromotedCopies` holds the methods of `astgen.TirLowering` that build them; they use its state
(the promoter's pieces, the scopes, the hooks) and its statement lowering."""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl
import numpy as np
from tvm import tirx

from akg.graph.compute.expr import Load, walk
from akg.graph.compute.float8 import bits_dtype
from akg.polyhedral.model import Statement, linear_coefficients
from akg.polyhedral.promote import Promotion, local_index
from akg.polyhedral.tir_ops import fold_all, ident
from akg.polyhedral.tirstmt import seq as _seq


@dataclass
class Scope:
    """Buffers and index offsets that a promotion mark puts in effect below it."""

    buffers: dict  # tensor id -> (local buffer, offsets, layout): see Promotion.layout


class PromotedCopies:
    """Promotion scopes and their copies: methods of `astgen.TirLowering`."""


    def _promoted(self, node: isl.AstNode, inner: isl.AstNode) -> tirx.Stmt:
        try:
            piece = int(node.get_annotation().get_name()[len("piece"):])
        except (isl.Error, AttributeError, ValueError):
            return self.stmt(inner)
        scope = Scope({})
        before, after, allocs = [], [], []
        for p, exprs, where in zip(self.promoter.pieces[piece], self.piece_offsets[piece],
                                   self.piece_where[piece]):
            offsets = [self.expr(e) for e in exprs]
            when = self._condition(where)
            shape = p.shape
            lanes = self._copy_lanes(p) if p.compute is not None else 0
            if lanes:  # a recompute box computed in whole vectors: rows rounded up to them
                shape = (*shape[:-1], -(-shape[-1] // lanes) * lanes)
            local = tirx.decl_buffer(shape, bits_dtype(p.tensor.dtype), ident(p.tensor.name) + "_local",
                                     scope="global")
            allocs.append(local)
            if p.copy_in:
                before.append(_when(when, self._copy(local, offsets, p, into_local=True)))
            if p.copy_out:
                after.append(_when(when, self._copy(local, offsets, p, into_local=False)))
            scope.buffers[id(p.tensor)] = (local, offsets, p.layout)
            if id(p.tensor) in self.shadows:
                shadow = self.shadows[id(p.tensor)]
                val = tirx.decl_buffer(p.sizes, shadow.dtype, ident(p.tensor.name) + "_val_local",
                                       scope="global")
                allocs.append(val)
                scope.buffers[("val", id(p.tensor))] = (val, offsets, 0)
                if p.copy_in:
                    before.append(_when(when, self._copy(val, offsets, p, into_local=True, shadow=True)))
                if p.copy_out:
                    after.append(_when(when, self._copy(val, offsets, p, into_local=False, shadow=True)))
        self.scopes.append(scope)
        try:
            body = self.stmt(inner)
        finally:
            self.scopes.pop()
        return _seq([*(self._alloc(b) for b in allocs), *before, body, *after])

    def _condition(self, where: isl.AstExpr | None) -> tirx.PrimExpr | None:
        """A promotion's `where` as isl wrote it for the loops around the mark; None when isl
        found it always true there (the usual case)."""
        if where is None:
            return None
        if where.get_type() == isl.ast_expr_type.int:  # isl decided it for these loops
            return None if where.get_val().to_python() != 0 else tirx.const(False, "bool")
        return self.expr(where)  # comparisons joined by and/or

    def _copy_lanes(self, p: Promotion) -> int:
        """Lanes of the vectors a recompute box is computed in: 0 (serial loops) where the
        producer does not read its input along the box's rows (`_computed`)."""
        lanes = self.hooks.copy_bits // (8 * np.dtype(p.tensor.dtype).itemsize)
        along_rows = read_order(p.compute, len(p.sizes))[-1] == len(p.sizes) - 1
        return lanes if lanes > 1 and p.sizes and p.sizes[-1] > lanes // 2 and along_rows else 0

    def _computed(self, local, offsets, p: Promotion) -> tirx.Stmt:
        """Loops over a recompute box evaluating the producer's expression at each element.
        Where the producer reads its input along the box's last dim, that dim runs in whole
        vectors (the local rows are rounded up to them; lanes past the box are zeros, not
        evaluated). Where it reads along another dim (a padded input in phases of its
        columns: the phase moves the input column by one, the column by the stride), the
        loops go in the order of the input they read, innermost the dim that moves it by one
        (unrolled), serial for LLVM to vectorise with interleaved loads, not gathers."""
        vars_ = [tirx.Var(f"{ident(p.tensor.name)}_e{d}", "int32") for d in range(len(p.sizes))]
        order = read_order(p.compute, len(p.sizes))
        lanes = self._copy_lanes(p)
        inner = vars_[-1]
        if lanes:
            chunk, lane = tirx.Var(inner.name + "_v", "int32"), tirx.Var(inner.name + "_l", "int32")
            inner = chunk * lanes + lane
        index = [*vars_[:-1], inner] if vars_ else []
        outer_index = [o + v for o, v in zip(offsets, index)]
        env = dict(zip(p.compute.op.axes, outer_index))
        value = self.value(p.compute.op.body, env)
        if p.guard:
            value = tirx.if_then_else(within(outer_index, p.tensor.shape), value, tirx.const(0, local.dtype))
        if lanes and p.sizes[-1] % lanes:
            value = tirx.if_then_else(tirx.LT(inner, p.sizes[-1]), value, tirx.const(0, local.dtype))
        body = tirx.BufferStore(local, value, local_index(index, p.layout))
        if lanes:
            body = tirx.For(lane, 0, lanes, tirx.ForKind.VECTORIZED, body)
            body = tirx.For(chunk, 0, -(-p.sizes[-1] // lanes), tirx.ForKind.SERIAL, body)
            order = order[:-1]
        for k, d in enumerate(reversed(order)):
            kind = tirx.ForKind.UNROLLED if k == 0 and not lanes and 1 < p.sizes[d] <= 4 else tirx.ForKind.SERIAL
            body = tirx.For(vars_[d], 0, p.sizes[d], kind, body)
        return body

    def _copy(self, local, offsets, p: Promotion, into_local: bool, shadow: bool = False) -> tirx.Stmt:
        """Loops over the promotion box copying between the local buffer and the tensor's
        buffer in the enclosing scope (memory, or an outer local buffer); a recompute box is
        computed instead (`_computed`)."""
        if into_local and p.compute is not None:
            return self._computed(local, offsets, p)
        vars_ = [tirx.Var(f"{ident(p.tensor.name)}_e{d}", "int32") for d in range(len(p.sizes))]
        outer_index = [o + v for o, v in zip(offsets, vars_)]
        into = local_index(list(vars_), p.layout)
        if into_local:
            body = tirx.BufferStore(local, self._load(p.tensor, outer_index, shadow), into)
        else:
            body = self._store(p.tensor, tirx.BufferLoad(local, into), outer_index, shadow)
        if p.guard:
            body = tirx.IfThenElse(within(outer_index, p.tensor.shape), body, None)
        for v, n in reversed(list(zip(vars_, p.sizes))):
            body = tirx.For(v, 0, n, tirx.ForKind.SERIAL, body)
        return body


def within(index: list, shape) -> tirx.PrimExpr:
    """Is `index` inside a tensor of `shape`?"""
    return fold_all(tirx.And, [tirx.And(tirx.GE(g, 0), tirx.LT(g, n)) for g, n in zip(index, shape)])


def read_order(stmt: Statement, ndim: int) -> list[int]:
    """The dims of a statement's output, outermost first, in the order of the elements its
    first load reads: by decreasing step of that load's flat index per step of the dim (dims
    that do not move it outermost, ties in dim order); the dims in order where the load's
    indices are not affine."""
    load = next((n for n in walk(stmt.op.body) if isinstance(n, Load)), None)
    if load is None:
        return list(range(ndim))
    strides = np.cumprod([1, *load.tensor.shape[::-1]])[:-1][::-1]
    steps = [0] * ndim
    for index, stride in zip(load.indices, strides):
        coefficients = linear_coefficients(index)
        if coefficients is None:
            return list(range(ndim))
        for d, axis in enumerate(stmt.op.axes):
            steps[d] += coefficients.get(axis, 0) * int(stride)
    moving = sorted((d for d in range(ndim) if steps[d]), key=lambda d: -abs(steps[d]))
    return [d for d in range(ndim) if not steps[d]] + moving


def _when(cond: tirx.PrimExpr | None, stmt: tirx.Stmt) -> tirx.Stmt:
    return stmt if cond is None else tirx.IfThenElse(cond, stmt, None)
