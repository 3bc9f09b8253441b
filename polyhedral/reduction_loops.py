"""Reduction loops lowered as vector reductions and blocked sums (part of the isl AST -> TIR
lowering, `akg.polyhedral.astgen`, whose module doc says when each applies).

`ReductionLoops` holds the methods of `astgen.TirLowering` that build them; they use its state
(the model, the loop variables and stack, the hooks) and its statement lowering."""

from __future__ import annotations

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
        """The loop `it` (of `extent` trips from `init`) around a single reduction update as a
        vector reduction (see the module doc), or None where that does not apply: another
        body, a reducer other than sum/prod/max/min, a loop shorter than one vector, or a
        read that is neither contiguous nor invariant along the loop."""
        if body_node.get_type() != isl.ast_node_type.user:
            return None
        call = body_node.user_get_expr()
        stmt = self.model.statement(call.get_op_arg(0).get_id().get_name())
        red, t = stmt.op.reduce, stmt.op.output
        if stmt.role != "update" or red is None or red.reducer not in COMBINE:
            return None
        lanes = self.reduce_bits // (8 * np.dtype(t.dtype).itemsize)
        if lanes < 2 or extent < lanes:
            # one vector is enough: a row of 16 floats (an attention's softmax over 16 keys,
            # the lanes of a split max) reduced by a tree of halves instead of 16 dependent
            # steps (MindIR transformer_layer's softmax 2.1 -> 1.25 us)
            return None
        chains = max(1, min(self.reduce_chains, extent // (2 * lanes)))
        width = lanes * chains

        def env_at(position) -> dict:
            self.loop_vars[it] = position if is_zero(init) else self.analyzer.simplify(init + position)
            return dict(zip(stmt.iters, (self.expr(call.get_op_arg(i)) for i in range(1, call.get_op_n_arg()))))

        probe = tirx.Var(f"{it}_probe", "int32")
        here, there = env_at(probe), env_at(probe + 1)
        loads = [n for n in walk(red.source) if isinstance(n, Load)]
        if any(n.tensor is t for n in loads):
            return None
        for tensor, indices, allowed in [(t, stmt.op.axes, (0,)), *((n.tensor, n.indices, (0, 1)) for n in loads)]:
            if self._buffer(tensor)[2]:
                return None  # a blocked or permuted local layout: not contiguous as the tensor's
            try:
                delta = self.analyzer.simplify(self._flat(tensor, indices, there) - self._flat(tensor, indices, here))
            except Exception:  # noqa: BLE001  (a data-dependent index)
                return None
            if not isinstance(delta, tirx.IntImm) or int(delta.value) not in allowed:
                return None

        combine = COMBINE[red.reducer]
        name = ident(t.name)
        acc = tirx.decl_buffer((width,), t.dtype, f"{name}_acc", scope="global")
        outer, chain, lane = (tirx.Var(f"{it}_{x}", "int32") for x in ("o", "j", "l"))
        self.loop_stack.append((it, extent, "vector"))
        try:
            env = env_at(outer * width + chain * lanes + lane)
            self._record(stmt, call, env)
            source = self.value(red.source, env)
            out_index = [env[v] for v in stmt.op.axes]
        finally:
            self.loop_stack.pop()
        slot = chain * lanes + lane
        e = tirx.Var(f"{it}_e", "int32")
        e_kind = tirx.ForKind.VECTORIZED if width <= MAX_VECTOR else tirx.ForKind.SERIAL
        start = tirx.For(e, 0, width, e_kind, tirx.BufferStore(acc, reduce_identity(red.reducer, t.dtype), [e]))
        trips = extent // width
        block = self.reduce_block if red.reducer == "sum" and t.dtype in _BLOCKED_SUM_DTYPES else 0
        allocs = [self._alloc(acc)]
        if block >= 2 and trips >= 2 * block:
            # blocked summation: each accumulator sums `block` vectors into a fresh partial
            # (`part`) that is then added to its total (`acc`), so its rounding error grows
            # with block + trips / block, not with trips
            part = tirx.decl_buffer((width,), t.dtype, f"{name}_part", scope="global")
            allocs.append(self._alloc(part))
            zero = tirx.For(e, 0, width, e_kind, tirx.BufferStore(part, reduce_identity("sum", t.dtype), [e]))
            add = tirx.For(e, 0, width, e_kind, tirx.BufferStore(
                acc, tirx.BufferLoad(acc, [e]) + self._fence(tirx.BufferLoad(part, [e]), t.dtype), [e]))
            ob = tirx.Var(f"{it}_b", "int32")
            full, rest = divmod(trips, block)

            def blocked(first, count: int, tag: str) -> tirx.Stmt:  # vectors first .. first + count
                o, j, l = (tirx.Var(f"{it}_{x}{tag}", "int32") for x in ("o", "j", "l"))
                self.loop_stack.append((it, extent, "vector"))
                try:
                    src = self.value(red.source, env_at((first + o) * width + j * lanes + l))
                finally:
                    self.loop_stack.pop()
                upd = tirx.BufferStore(part, tirx.BufferLoad(part, [j * lanes + l]) + src, [j * lanes + l])
                inner = tirx.For(o, 0, count, tirx.ForKind.SERIAL,
                                 tirx.For(j, 0, chains, tirx.ForKind.UNROLLED,
                                          tirx.For(l, 0, lanes, tirx.ForKind.VECTORIZED, upd)))
                return _seq([zero, inner, add])

            main = [tirx.For(ob, 0, full, tirx.ForKind.SERIAL, blocked(ob * block, block, "b"))]
            if rest:
                main.append(blocked(tirx.const(full * block, "int32"), rest, "r"))
            main = _seq(main)
        else:
            body = tirx.BufferStore(acc, combine(tirx.BufferLoad(acc, [slot]), source), [slot])
            main = tirx.For(outer, 0, trips, tirx.ForKind.SERIAL,
                            tirx.For(chain, 0, chains, tirx.ForKind.UNROLLED,
                                     tirx.For(lane, 0, lanes, tirx.ForKind.VECTORIZED, body)))
        folds = []
        for j in range(1, chains):  # the chains into the first vector, then halves of it
            folds.append(_fold_into(acc, combine, lanes, j * lanes, f"{it}_c{j}", self._fence))
        w = lanes // 2
        while w >= 1:
            folds.append(_fold_into(acc, combine, w, w, f"{it}_h{w}", self._fence))
            w //= 2
        finish = self._store(t, combine(self._load(t, out_index), tirx.BufferLoad(acc, [0])), out_index)
        tail = None
        if extent % width:
            rest = tirx.Var(f"{it}_r", "int32")
            self.loop_stack.append((it, extent % width, "serial"))
            try:
                env = env_at(tirx.const(extent - extent % width, "int32") + rest)
                tail = tirx.For(rest, 0, extent % width, tirx.ForKind.SERIAL, self.statement(stmt, env))
            finally:
                self.loop_stack.pop()
        return _seq([*allocs, start, main, *folds, finish, tail])

    def _blocked_sum(self, it: str, init, extent: int, body_node: isl.AstNode) -> tirx.Stmt | None:
        """The serial loop `it` around a single floating-point sum update as a blocked sum
        (`serial_block` terms into a scalar partial, then the partial into the output), or None
        where that does not apply: another body or reducer, or an output that moves along the
        loop or is read by the summand."""
        if body_node.get_type() != isl.ast_node_type.user:
            return None
        call = body_node.user_get_expr()
        stmt = self.model.statement(call.get_op_arg(0).get_id().get_name())
        red, t = stmt.op.reduce, stmt.op.output
        if stmt.role != "update" or red is None or red.reducer != "sum" or t.dtype not in _BLOCKED_SUM_DTYPES:
            return None
        if any(isinstance(n, Load) and n.tensor is t for n in walk(red.source)):
            return None
        block = self.hooks.serial_block

        def env_at(position) -> dict:
            self.loop_vars[it] = position if is_zero(init) else self.analyzer.simplify(init + position)
            return dict(zip(stmt.iters, (self.expr(call.get_op_arg(i)) for i in range(1, call.get_op_n_arg()))))

        probe = tirx.Var(f"{it}_probe", "int32")
        here, there = env_at(probe), env_at(probe + 1)
        try:
            delta = self.analyzer.simplify(self._flat(t, stmt.op.axes, there) - self._flat(t, stmt.op.axes, here))
        except Exception:  # noqa: BLE001  (a data-dependent index)
            return None
        if not isinstance(delta, tirx.IntImm) or int(delta.value) != 0:
            return None
        name = ident(t.name)
        part = tirx.decl_buffer((1,), t.dtype, f"{name}_part", scope="global")
        ob = tirx.Var(f"{it}_b", "int32")
        full, rest = divmod(extent, block)
        out_index = None

        def blocked(first, count: int) -> tirx.Stmt:
            nonlocal out_index
            oi = tirx.Var(f"{it}_i{count}", "int32")
            self.loop_stack.append((it, count, "serial"))
            try:
                env = env_at(first + oi)
                self._record(stmt, call, env)
                src = self.value(red.source, env)
                out_index = [env[v] for v in stmt.op.axes]
            finally:
                self.loop_stack.pop()
            zero = tirx.BufferStore(part, reduce_identity("sum", t.dtype), [0])
            loop = tirx.For(oi, 0, count, tirx.ForKind.SERIAL,
                            tirx.BufferStore(part, tirx.BufferLoad(part, [0]) + src, [0]))
            add = self._store(t, self._load(t, out_index) + self._fence(tirx.BufferLoad(part, [0]), t.dtype),
                              out_index)
            return _seq([zero, loop, add])

        body = [tirx.For(ob, 0, full, tirx.ForKind.SERIAL, blocked(ob * block, block))]
        if rest:
            body.append(blocked(tirx.const(full * block, "int32"), rest))
        return _seq([self._alloc(part), *body])


def _fold_into(acc: tirx.Buffer, combine, width: int, offset: int, name: str, fence) -> tirx.Stmt:
    """acc[0:width] = combine(acc[0:width], acc[offset:offset + width]), as one vector op,
    both operands behind the target's reassociation fence."""
    v = tirx.Var(name, "int32")
    body = tirx.BufferStore(acc, combine(fence(tirx.BufferLoad(acc, [v]), acc.dtype),
                                         fence(tirx.BufferLoad(acc, [v + offset]), acc.dtype)), [v])
    return tirx.For(v, 0, width, tirx.ForKind.VECTORIZED if width > 1 else tirx.ForKind.SERIAL, body)
