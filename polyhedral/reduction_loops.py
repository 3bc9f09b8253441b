"""Reduction loops lowered as vector reductions and blocked sums (part of the isl AST -> TIR
lowering, `akg.polyhedral.astgen`, whose module doc says when each applies).

`ReductionLoops` holds the methods of `astgen.TirLowering` that build them; they use its state
(the model, the loop variables and stack, the hooks) and its statement lowering."""

from __future__ import annotations

from functools import partial

import islpy as isl
import numpy as np
from tvm import tirx

from akg.graph.compute.expr import Load, walk
from akg.polyhedral.tir_ops import COMBINE, MAX_VECTOR, ident, is_zero, reduce_identity
from akg.polyhedral.tirstmt import seq as _seq

_BLOCKED_SUM_DTYPES = ("float16", "bfloat16", "float32")  # float64 sums need no blocking


class ReductionLoops:
    """Vector reductions and blocked sums: methods of `astgen.TirLowering`."""

    def _vector_reduction(self, it: str, init, extent: int, body_node: isl.AstNode) -> tirx.Stmt | None:
        """The loop `it` (of `extent` trips from `init`) around one reduction update, or around
        several of one dtype (sibling reductions fused by `polyhedral.siblings`), as a vector
        reduction with accumulators per update (see the module doc), or None where that does
        not apply: another body, a reducer other than sum/prod/max/min, a loop shorter than one
        vector, or a read that is neither contiguous nor invariant along the loop."""
        updates = self._updates(body_node)
        if updates is None or len({u.t.dtype for u in updates}) != 1:
            return None
        dtype = updates[0].t.dtype
        lanes = self.reduce_bits // (8 * np.dtype(dtype).itemsize)
        if lanes < 2 or extent < lanes:
            # one vector is enough: a row of 16 floats (an attention's softmax over 16 keys,
            # the lanes of a split max) reduced by a tree of halves instead of 16 dependent
            # steps (MindIR transformer_layer's softmax 2.1 -> 1.25 us)
            return None
        chains = max(1, min(self.reduce_chains, extent // (2 * lanes)))
        width = lanes * chains

        env_at = partial(self._env_at, it, init)

        probe = tirx.Var(f"{it}_probe", "int32")
        for u in updates:
            here, there = env_at(u, probe), env_at(u, probe + 1)
            loads = [n for n in walk(u.red.source) if isinstance(n, Load)]
            for tensor, indices, allowed in [(u.t, u.stmt.op.axes, (0,)),
                                             *((n.tensor, n.indices, (0, 1)) for n in loads)]:
                if self._buffer(tensor)[2]:
                    return None  # a blocked or permuted local layout: not contiguous as the tensor's
                try:
                    delta = self.analyzer.simplify(self._flat(tensor, indices, there) - self._flat(tensor, indices, here))
                except Exception:  # noqa: BLE001  (a data-dependent index)
                    return None
                if not isinstance(delta, tirx.IntImm) or int(delta.value) not in allowed:
                    return None

        outer, chain, lane = (tirx.Var(f"{it}_{x}", "int32") for x in ("o", "j", "l"))
        self.loop_stack.append((it, extent, "vector"))
        try:
            for u in updates:
                env = env_at(u, outer * width + chain * lanes + lane)
                self._record(u.stmt, u.call, env)
                u.source = self.value(u.red.source, env)
                u.out_index = [env[v] for v in u.stmt.op.axes]
        finally:
            self.loop_stack.pop()
        for u in updates:
            u.acc = tirx.decl_buffer((width,), dtype, f"{ident(u.t.name)}_acc", scope="global")
        slot = chain * lanes + lane
        e = tirx.Var(f"{it}_e", "int32")
        e_kind = tirx.ForKind.VECTORIZED if width <= MAX_VECTOR else tirx.ForKind.SERIAL
        allocs = [self._alloc(u.acc) for u in updates]
        start = [tirx.For(e, 0, width, e_kind, tirx.BufferStore(u.acc, reduce_identity(u.red.reducer, dtype), [e]))
                 for u in updates]
        trips = extent // width
        sums = any(u.red.reducer == "sum" for u in updates)
        block = self.reduce_block if sums and dtype in _BLOCKED_SUM_DTYPES else 0
        if block >= 2 and trips >= 2 * block:
            # blocked summation: each sum's accumulator sums `block` vectors into a fresh
            # partial (`part`) that is then added to its total (`acc`), so its rounding error
            # grows with block + trips / block, not with trips (a max beside it goes straight
            # into its accumulator)
            parts = [tirx.decl_buffer((width,), dtype, f"{ident(u.t.name)}_part", scope="global")
                     if u.red.reducer == "sum" else None for u in updates]
            allocs += [self._alloc(part) for part in parts if part is not None]
            zero = [tirx.For(e, 0, width, e_kind, tirx.BufferStore(part, reduce_identity("sum", dtype), [e]))
                    for part in parts if part is not None]
            add = [tirx.For(e, 0, width, e_kind, tirx.BufferStore(
                u.acc, tirx.BufferLoad(u.acc, [e]) + self._fence(tirx.BufferLoad(part, [e]), dtype), [e]))
                for u, part in zip(updates, parts) if part is not None]
            ob = tirx.Var(f"{it}_b", "int32")
            full, rest = divmod(trips, block)

            def blocked(first, count: int, tag: str) -> tirx.Stmt:  # vectors first .. first + count
                o, j, l = (tirx.Var(f"{it}_{x}{tag}", "int32") for x in ("o", "j", "l"))
                self.loop_stack.append((it, extent, "vector"))
                try:
                    sources = [self.value(u.red.source, env_at(u, (first + o) * width + j * lanes + l))
                               for u in updates]
                finally:
                    self.loop_stack.pop()
                at = j * lanes + l
                upd = _seq([tirx.BufferStore(part, tirx.BufferLoad(part, [at]) + src, [at]) if part is not None
                            else tirx.BufferStore(u.acc, u.combine(tirx.BufferLoad(u.acc, [at]), src), [at])
                            for u, part, src in zip(updates, parts, sources)])
                inner = tirx.For(o, 0, count, tirx.ForKind.SERIAL,
                                 tirx.For(j, 0, chains, tirx.ForKind.UNROLLED,
                                          tirx.For(l, 0, lanes, tirx.ForKind.VECTORIZED, upd)))
                return _seq([*zero, inner, *add])

            main = [tirx.For(ob, 0, full, tirx.ForKind.SERIAL, blocked(ob * block, block, "b"))]
            if rest:
                main.append(blocked(tirx.const(full * block, "int32"), rest, "r"))
            main = _seq(main)
        else:
            body = _seq([tirx.BufferStore(u.acc, u.combine(tirx.BufferLoad(u.acc, [slot]), u.source), [slot])
                         for u in updates])
            main = tirx.For(outer, 0, trips, tirx.ForKind.SERIAL,
                            tirx.For(chain, 0, chains, tirx.ForKind.UNROLLED,
                                     tirx.For(lane, 0, lanes, tirx.ForKind.VECTORIZED, body)))
        folds, finish = [], []
        for k, u in enumerate(updates):
            tag = f"{it}_" if len(updates) == 1 else f"{it}_{k}"
            for j in range(1, chains):  # the chains into the first vector, then halves of it
                folds.append(_fold_into(u.acc, u.combine, lanes, j * lanes, f"{tag}c{j}", self._fence))
            w = lanes // 2
            while w >= 1:
                folds.append(_fold_into(u.acc, u.combine, w, w, f"{tag}h{w}", self._fence))
                w //= 2
            finish.append(self._store(u.t, u.combine(self._load(u.t, u.out_index), tirx.BufferLoad(u.acc, [0])),
                                      u.out_index))
        tail = None
        if extent % width:
            rest = tirx.Var(f"{it}_r", "int32")
            self.loop_stack.append((it, extent % width, "serial"))
            try:
                first = tirx.const(extent - extent % width, "int32")
                tail = tirx.For(rest, 0, extent % width, tirx.ForKind.SERIAL,
                                _seq([self.statement(u.stmt, env_at(u, first + rest)) for u in updates]))
            finally:
                self.loop_stack.pop()
        return _seq([*allocs, *start, main, *folds, *finish, tail])

    def _blocked_sum(self, it: str, init, extent: int, body_node: isl.AstNode) -> tirx.Stmt | None:
        """The serial loop `it` around a floating-point sum update as a blocked sum
        (`serial_block` terms into a scalar partial, then the partial into the output), or None
        where that does not apply: another body or reducer, or an output that moves along the
        loop or is read by a summand. Sibling reductions fused by `polyhedral.siblings` get a
        partial per sum; another reducer beside them updates its output directly."""
        updates = self._updates(body_node)
        if updates is None or not any(u.red.reducer == "sum" and u.t.dtype in _BLOCKED_SUM_DTYPES for u in updates):
            return None
        block = self.hooks.serial_block

        env_at = partial(self._env_at, it, init)

        probe = tirx.Var(f"{it}_probe", "int32")
        for u in updates:
            here, there = env_at(u, probe), env_at(u, probe + 1)
            try:
                delta = self.analyzer.simplify(self._flat(u.t, u.stmt.op.axes, there) - self._flat(u.t, u.stmt.op.axes, here))
            except Exception:  # noqa: BLE001  (a data-dependent index)
                return None
            if not isinstance(delta, tirx.IntImm) or int(delta.value) != 0:
                return None
        parts = [tirx.decl_buffer((1,), u.t.dtype, f"{ident(u.t.name)}_part", scope="global")
                 if u.red.reducer == "sum" and u.t.dtype in _BLOCKED_SUM_DTYPES else None for u in updates]
        ob = tirx.Var(f"{it}_b", "int32")
        full, rest = divmod(extent, block)

        def blocked(first, count: int) -> tirx.Stmt:
            oi = tirx.Var(f"{it}_i{count}", "int32")
            zero, loop, add = [], [], []
            self.loop_stack.append((it, count, "serial"))
            try:
                for u, part in zip(updates, parts):
                    env = env_at(u, first + oi)
                    self._record(u.stmt, u.call, env)
                    if part is None:
                        loop.append(self.statement(u.stmt, env))
                        continue
                    src = self.value(u.red.source, env)
                    out_index = [env[v] for v in u.stmt.op.axes]
                    zero.append(tirx.BufferStore(part, reduce_identity("sum", u.t.dtype), [0]))
                    loop.append(tirx.BufferStore(part, tirx.BufferLoad(part, [0]) + src, [0]))
                    add.append(self._store(u.t, self._load(u.t, out_index)
                                           + self._fence(tirx.BufferLoad(part, [0]), u.t.dtype), out_index))
            finally:
                self.loop_stack.pop()
            return _seq([*zero, tirx.For(oi, 0, count, tirx.ForKind.SERIAL, _seq(loop)), *add])

        body = [tirx.For(ob, 0, full, tirx.ForKind.SERIAL, blocked(ob * block, block))]
        if rest:
            body.append(blocked(tirx.const(full * block, "int32"), rest))
        return _seq([*(self._alloc(part) for part in parts if part is not None), *body])

    def _env_at(self, it: str, init, u: _Update, position) -> dict:
        """The iterators of `u`'s statement where the loop `it` (from `init`) is at `position`."""
        self.loop_vars[it] = position if is_zero(init) else self.analyzer.simplify(init + position)
        return dict(zip(u.stmt.iters, (self.expr(u.call.get_op_arg(i)) for i in range(1, u.call.get_op_n_arg()))))

    def _updates(self, body_node: isl.AstNode) -> list[_Update] | None:
        """The statements of a loop body that is one statement or a block of them (the updates
        of sibling reductions), when each is the update of a sum/prod/max/min reduction into its
        own tensor that no summand reads; else None."""
        if body_node.get_type() == isl.ast_node_type.user:
            calls = [body_node.user_get_expr()]
        elif body_node.get_type() == isl.ast_node_type.block:
            children = body_node.block_get_children()
            nodes = [children.get_at(i) for i in range(children.n_ast_node())]
            if any(n.get_type() != isl.ast_node_type.user for n in nodes):
                return None
            calls = [n.user_get_expr() for n in nodes]
        else:
            return None
        updates = [_Update(call, self.model.statement(call.get_op_arg(0).get_id().get_name())) for call in calls]
        outputs = {id(u.t) for u in updates}
        if len(outputs) != len(updates):
            return None
        for u in updates:
            if u.stmt.role != "update" or u.red is None or u.red.reducer not in COMBINE:
                return None
            if any(isinstance(n, Load) and id(n.tensor) in outputs for n in walk(u.red.source)):
                return None
        return updates


class _Update:
    """One reduction update of a vector reduction loop, and what its lowering builds for it."""

    def __init__(self, call: isl.AstExpr, stmt):
        self.call, self.stmt = call, stmt
        self.red, self.t = stmt.op.reduce, stmt.op.output
        self.combine = COMBINE.get(self.red.reducer) if self.red is not None else None
        self.source = self.out_index = self.acc = None  # filled in by the lowering


def _fold_into(acc: tirx.Buffer, combine, width: int, offset: int, name: str, fence) -> tirx.Stmt:
    """acc[0:width] = combine(acc[0:width], acc[offset:offset + width]), as one vector op,
    both operands behind the target's reassociation fence."""
    v = tirx.Var(name, "int32")
    body = tirx.BufferStore(acc, combine(fence(tirx.BufferLoad(acc, [v]), acc.dtype),
                                         fence(tirx.BufferLoad(acc, [v + offset]), acc.dtype)), [v])
    return tirx.For(v, 0, width, tirx.ForKind.VECTORIZED if width > 1 else tirx.ForKind.SERIAL, body)
