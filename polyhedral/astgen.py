"""isl AST -> TIR PrimFunc: one lowering for every target.

The mapped schedule tree is turned into an isl AST; loops become TIR `For`s (kinds from the
parallel/vector/unroll marks), user nodes become the statements' stores, and promotion marks
open a scope with local buffers and the copies the promotion plan asks for. A vector or
unrolled loop whose trip count is not constant (a partial tile) is split into a full tile
with a constant trip count and a scalar remainder, so vector loops carry no guards.

A serial reduction loop over contiguous data (a row sum, max or dot product, the innermost
loop of a softmax or layer norm) becomes a vector reduction when the caller gives a vector
width (`reduce_bits`): `chains` independent vector accumulators, folded into one vector and
then across its lanes once after the loop. Left to LLVM, such a loop was vectorised with one
accumulator when its body was more than an add (a variance: one FMA chain, 4 cycles a vector),
or unrolled whole and its loads shared with the next loop over the same row through spills.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import islpy as isl
import numpy as np
import tvm
from tvm.sym import detect_linear_equation
from tvm.sym.analyzer import Analyzer
from tvm import tirx

from akg.errors import LoweringError
from akg.graph.compute.expr import Call, Cast, Const, Expr, Load, Select, Tensor, Var, walk
from akg.graph.compute.float8 import BITS_SUFFIX, bits_dtype, tir_cast
from akg.polyhedral.model import PolyModel, Statement
from akg.polyhedral.intrinsics import FAST_F32
from akg.polyhedral.prefetch import Stream, spread
from akg.polyhedral.promote import Promoter, RecomputeRefused, local_index, recompute_marks, without_statements
from akg.polyhedral.promoted_copies import PromotedCopies, Scope
from akg.polyhedral.reduction_loops import ReductionLoops
from akg.polyhedral.tir_ops import (FENCED_CALLS, MAX_VECTOR, floor_div, floor_mod, fold_all, ident, is_zero,
                                    reduce_identity, tir_call)
from akg.target import STREAM_ATTR
from akg.polyhedral.tirstmt import allocates, seq as _seq
from akg.polyhedral.bands import affs_by_statement
from akg.polyhedral.tree import (MARK_PACK, MARK_PARALLEL, MARK_PREFETCH, MARK_PROMOTE, MARK_RECOMPUTE, MARK_UNROLL,
                                 PREFETCH_NEST, MARK_VECTORIZE)

log = logging.getLogger(__name__)

_PIECE_MARKS = (MARK_PROMOTE + ".", MARK_PACK + ".", MARK_RECOMPUTE + ".")

MAX_UNROLL = 32


@dataclass(frozen=True)
class LoweringHooks:
    """What a target decides about the TIR emitted here; the defaults are plain TIR. `fence`
    marks a value across which floating-point arithmetic must not be reassociated (the folds
    of a vector reduction's chains); `local_alloc` allocates a local buffer; `reduce_bits`
    (0: none) is the vector width of vector reductions, with `reduce_chains` accumulators;
    `fast_math` uses the vectorisable float32 expansions of exp/erf/tanh/sigmoid;
    `nan_extrema` makes float elementwise max/min and argmax/argmin propagate NaN as NumPy does
    (`tir_ops.extremum`; off for a target whose own max does);
    `keep_marks` lists prefixes of mark names kept in the TIR as `AttrStmt(name, "akg.mark")`
    around the code below the mark (for a backend that maps marked regions itself);
    `prefetch` builds the prefetch of one address (a `BufferLoad` of the element) for the
    loops below a `prefetch.<distance>` mark (None: such marks are ignored); `reduce_block`
    (0: off) is the number of terms a floating-point sum accumulates into a
    fresh partial before adding it to its running total (blocked summation: the rounding error
    of an n-term sum grows like block + n / block instead of n), per lane of a vector
    reduction; `serial_block` (0: off) does the same for a serial sum loop that is not a vector
    reduction (for a target whose compiler keeps such a loop's order: one that reorders it
    into several accumulators itself is better left alone)."""

    fence: Callable[[tirx.PrimExpr, str], tirx.PrimExpr] | None = None
    local_alloc: Callable[[tirx.Buffer], tirx.Stmt] | None = None
    reduce_bits: int = 0
    reduce_chains: int = 4
    fast_math: bool = True
    nan_extrema: bool = True
    keep_marks: tuple[str, ...] = ()
    reduce_block: int = 0
    serial_block: int = 0
    prefetch: Callable[[tirx.BufferLoad], tirx.Stmt] | None = None
    line_bytes: int = 64  # cache line: one prefetch per line
    copy_bits: int = 0
    # an intermediate kept in a scratchpad: tensor name -> (storage scope, trailing dims kept:
    # the others are implied by where the code runs, 0 keeps one element[, exchange]); None: a
    # plain buffer. With `exchange(value, delta)`, the tensor's last index is the lane that holds
    # the element: a statement reads its own lane's value, or lane + delta's by the exchange
    scratch: Callable[[str], tuple | None] | None = None
    # statements at one point of a band (a reduction's initialisation, the reduction and its
    # epilogue, ordered by a sequence below) kept in one piece of code: isl otherwise may emit a
    # mark above that sequence once per statement, and a promotion there then copies its box in
    # and out around each. It may also guard a statement inside a loop it shares with others
    # (`if c1 == 0`), which a backend that maps loop nests by their shape may not take; off for
    # a schedule where that would put a reduction's initialisation inside its loop
    # (`_fixed_in_varying_member`).
    group_coscheduled: bool = False
    # the function asks its backend for streaming (non-temporal) stores into the outputs it
    # never reads back (the PrimFunc attribute `STREAM_ATTR`)
    stream_stores: bool = False


def _fixed_in_varying_member(schedule: isl.Schedule) -> bool:
    """Does a band member fix some statement at one value while it runs others through a loop
    (a reduction's initialisation at 0 of the reduction's loop)? Kept together with the
    statements it shares that value with (`LoweringHooks.group_coscheduled`), such a statement
    would run under a guard inside the loop instead of before it (a 64-channel 3x3 conv 7%
    slower), so grouping stays off for such a schedule."""
    found = False

    def visit(node: isl.ScheduleNode) -> bool:
        nonlocal found
        if node.get_type() == isl.schedule_node_type.band:
            mupa = node.band_get_partial_schedule()
            for d in range(node.band_n_member()):
                affs = affs_by_statement(mupa.get_at(d)).values()
                fixed = [a is not None and a.is_cst() for a in affs]
                if any(fixed) and not all(fixed):
                    found = True
        return not found

    schedule.get_root().foreach_descendant_top_down(visit)
    return found


class TirLowering(ReductionLoops, PromotedCopies):
    """The lowering of one mapped schedule (`lower_to_tir`); reduction loops and promotion
    scopes are built by the methods of its bases (`reduction_loops`, `promoted_copies`)."""


    def __init__(self, model: PolyModel, promoter: Promoter, name: str = "main",
                 hooks: LoweringHooks = LoweringHooks()):
        self.model = model
        self.hooks = hooks
        self.fast_math = hooks.fast_math
        self.nan_extrema = hooks.nan_extrema
        self.stream_stores = hooks.stream_stores
        self.reduce_bits = hooks.reduce_bits  # vector width for reductions (0: scalar loops, LLVM decides)
        self.reduce_chains = hooks.reduce_chains
        self.reduce_block = hooks.reduce_block
        self._prefetch_pending = 0  # distance of a prefetch mark the next loop takes
        self._prefetch_nest = False  # ... spread over the nest of its body (`prefetch.spread`)
        self._flat_views: dict[str, tirx.Buffer] = {}  # parameter name -> its 1-d view (`_flat_view`)
        self._fence = hooks.fence or (lambda value, dtype: value)
        self._alloc = hooks.local_alloc or tirx.AllocBuffer
        self.promoter = promoter
        self.name = name
        self.buffers: dict[int, tirx.Buffer] = {}
        self.kept: dict[int, int] = {}  # scratch tensors: trailing dims their buffer keeps
        self.exchange: dict[int, Callable] = {}  # scratch tensors held one element per lane
        self._lane = None  # the lane of the statement being lowered (an exchange tensor's writer)
        self.shadows: dict[int, tirx.Buffer] = {}  # argmax/argmin running values
        self.params: list[tirx.Buffer] = []
        self.allocs: list[tirx.Buffer] = []
        self.aliases: list[tuple] = []  # (view, parameter's data): float8 parameters as uint8
        self.loop_vars: dict[str, tirx.Var] = {}
        self.scopes: list[Scope] = []
        self.piece_offsets: dict[int, list[list[isl.AstExpr]]] = {}
        self.piece_where: dict[int, list[isl.AstExpr | None]] = {}  # per promotion: when its copies run
        self.analyzer = Analyzer()
        self.in_parallel = False
        self.loop_stack: list[tuple[str, int, str]] = []  # (AST iterator, max trip count, kind)
        self.records: list[StatementRecord] = []  # the loop nest as the tuner's features see it
        # while a vector loop's statement is lowered for lanes that all lie inside its guards
        # (`_unswitched`): the loop's variable (None otherwise), and the guards met
        self._unswitch_lane: tirx.Var | None = None
        self._lane_guards: list[tirx.PrimExpr] = []

    # --- buffers --------------------------------------------------------------------------------

    def _declare_buffers(self, local_only: set[int]) -> None:
        program = self.model.program
        for t in [*program.placeholders, *program.outputs]:
            buf = tirx.decl_buffer(t.shape, t.dtype, ident(t.name))
            # float8 and bfloat16 tensors are read and written as their bits (graph/compute/float8.py)
            self.buffers[id(t)] = buf
            if bits_dtype(t.dtype) != t.dtype:
                self.buffers[id(t)] = tirx.decl_buffer(t.shape, bits_dtype(t.dtype), ident(t.name) + BITS_SUFFIX)
                self.aliases.append((self.buffers[id(t)], buf.data))
            self.params.append(buf)
        for op in program.ops():
            t = op.output
            scratch = self.hooks.scratch(t.name) if self.hooks.scratch is not None else None
            if scratch is not None and id(t) not in self.buffers:
                scope, keep = scratch[:2]
                self.kept[id(t)] = keep
                if len(scratch) > 2 and scratch[2] is not None:
                    self.exchange[id(t)] = scratch[2]
                buf = tirx.decl_buffer(t.shape[len(t.shape) - keep:] if keep else (1,), bits_dtype(t.dtype),
                                       ident(t.name), scope=scope)
                self.buffers[id(t)] = buf
                self.allocs.append(buf)
            elif id(t) not in self.buffers and id(t) not in local_only:
                buf = tirx.decl_buffer(t.shape, bits_dtype(t.dtype), ident(t.name))
                self.buffers[id(t)] = buf
                self.allocs.append(buf)
            red = op.reduce
            if red is not None and red.reducer.startswith("arg"):
                val = tirx.decl_buffer(t.shape, red.source.dtype, ident(t.name) + "_val")
                self.shadows[id(t)] = val
                self.allocs.append(val)

    def _buffer(self, t: Tensor, shadow: bool = False) -> tuple[tirx.Buffer, list, int | tuple]:
        for scope in reversed(self.scopes):
            if id(t) in scope.buffers and not shadow:
                return scope.buffers[id(t)]
            if shadow and ("val", id(t)) in scope.buffers:
                return scope.buffers[("val", id(t))]
        if shadow:
            return self.shadows[id(t)], [], 0
        if id(t) not in self.buffers:
            raise LoweringError(f"tensor {t.name} is used outside the region where it is local")
        return self.buffers[id(t)], [], 0

    def _local_index(self, indices: list, offsets: list, layout: int | tuple = 0) -> list:
        if not offsets:
            return indices
        local = [self.analyzer.simplify(i - o) for i, o in zip(indices, offsets)]
        return local_index(local, layout)

    def _kept_index(self, t: Tensor, indices: list) -> list:
        keep = self.kept.get(id(t))
        if keep is None:
            return indices
        return list(indices[len(indices) - keep:]) if keep else [tirx.const(0, "int32")]

    def _load(self, t: Tensor, indices: list, shadow: bool = False) -> tirx.PrimExpr:
        buf, offsets, layout = self._buffer(t, shadow)
        load = tirx.BufferLoad(buf, self._local_index(self._kept_index(t, indices), offsets, layout))
        if id(t) not in self.exchange:
            return load
        delta = self.analyzer.simplify(indices[-1] - (self._lane if self._lane is not None else 0))
        if not isinstance(delta, tirx.IntImm):
            raise LoweringError(f"{t.name}: a lane reads lane {indices[-1]}, not its own plus a constant")
        return load if int(delta.value) == 0 else self.exchange[id(t)](load, int(delta.value))

    def _store(self, t: Tensor, value, indices: list, shadow: bool = False) -> tirx.Stmt:
        buf, offsets, layout = self._buffer(t, shadow)
        return tirx.BufferStore(buf, value, self._local_index(self._kept_index(t, indices), offsets, layout))

    # --- entry ----------------------------------------------------------------------------------

    def lower(self, schedule: isl.Schedule) -> tirx.PrimFunc:
        ctx = self.model.ctx
        ctx.set_ast_build_atomic_upper_bound(True)
        ctx.set_ast_build_detect_min_max(True)
        ctx.set_ast_build_group_coscheduled(self.hooks.group_coscheduled and not _fixed_in_varying_member(schedule))
        build = isl.AstBuild.from_context(isl.Set("{ : }", context=ctx))

        failures: list[Exception] = []
        open_marks: list[tuple[str, int | None]] = []

        # isl calls these around the code it generates below each mark; exceptions must not
        # unwind through isl, so they are kept and raised afterwards
        def before_mark(mark: isl.Id, build: isl.AstBuild) -> None:
            piece = None
            try:
                name = mark.get_name()
                if name.startswith(_PIECE_MARKS):
                    piece = self.promoter.at_mark(name, build.get_schedule())
                    if piece is not None:
                        self.piece_offsets[piece] = [
                            [build.expr_from_pw_aff(pa) for pa in p.lower]
                            for p in self.promoter.pieces[piece]]
                        self.piece_where[piece] = [
                            None if p.where is None else build.expr_from_set(p.where)
                            for p in self.promoter.pieces[piece]]
            except Exception as e:  # noqa: BLE001
                failures.append(e)
            open_marks.append((mark.get_name(), piece))

        def after_mark(node: isl.AstNode, build: isl.AstBuild) -> isl.AstNode:
            name = node.mark_get_id().get_name()
            piece = None
            while open_marks:  # isl may skip the "after" call of a mark that generated nothing
                opened, piece = open_marks.pop()
                if opened == name:
                    break
                piece = None
            if piece is None:
                return node
            return node.set_annotation(isl.Id(f"piece{piece}", context=ctx))

        result = build.set_before_each_mark(before_mark)
        build = result[0] if isinstance(result, tuple) else result
        result = build.set_after_each_mark(after_mark)
        build = result[0] if isinstance(result, tuple) else result
        ast = build.node_from_schedule(schedule)
        if failures:
            raise failures[0]
        self._declare_buffers(self.promoter.local_only() | self.promoter.check_recomputed())
        body = self.stmt(ast)
        body = _seq([*(tirx.DeclBuffer(b, data=data) for b, data in self.aliases), *(tirx.AllocBuffer(b) for b in self.allocs), body])
        func = tirx.PrimFunc(self.params, body).with_attr("global_symbol", self.name).with_attr("tirx.noalias", True)
        return func.with_attr(STREAM_ATTR, 1) if self.stream_stores else func

    # --- AST expressions ------------------------------------------------------------------------

    def expr(self, e: isl.AstExpr) -> tirx.PrimExpr:
        kind = e.get_type()
        if kind == isl.ast_expr_type.int:
            return tirx.const(int(e.get_val().to_python()), "int32")
        if kind == isl.ast_expr_type.id:
            name = e.get_id().get_name()
            if name not in self.loop_vars:
                raise LoweringError(f"AST refers to unknown iterator {name}")
            return self.loop_vars[name]
        op = e.get_op_type()
        args = [e.get_op_arg(i) for i in range(e.get_op_n_arg())]
        T = isl.ast_expr_op_type
        if op in (T.and_, T.and_then):
            return fold_all(tirx.And, [self.expr(a) for a in args])
        if op in (T.or_, T.or_else):
            return fold_all(tirx.Or, [self.expr(a) for a in args])
        if op == T.max:
            return fold_all(tirx.Max, [self.expr(a) for a in args])
        if op == T.min:
            return fold_all(tirx.Min, [self.expr(a) for a in args])
        if op == T.minus:
            return -self.expr(args[0])
        if op in (T.cond, T.select):
            return tirx.Select(self.expr(args[0]), self.expr(args[1]), self.expr(args[2]))
        a, b = self.expr(args[0]), self.expr(args[1])
        if op == T.add:
            return a + b
        if op == T.sub:
            return a - b
        if op == T.mul:
            return a * b
        if op in (T.div, T.fdiv_q, T.pdiv_q):
            return floor_div(a, b)
        if op == T.pdiv_r:
            return floor_mod(a, b)
        if op == T.zdiv_r:
            return tirx.truncmod(a, b)
        compare = {T.eq: tirx.EQ, T.le: tirx.LE, T.lt: tirx.LT, T.ge: tirx.GE, T.gt: tirx.GT}.get(op)
        if compare is None:
            raise LoweringError(f"unsupported isl AST operation {op}")
        return compare(a, b)

    # --- AST nodes ------------------------------------------------------------------------------

    def stmt(self, node: isl.AstNode, kind: str | None = None) -> tirx.Stmt:
        t = node.get_type()
        if t == isl.ast_node_type.block:
            children = node.block_get_children()
            return _seq([self.stmt(children.get_at(i)) for i in range(children.n_ast_node())])
        if t == isl.ast_node_type.for_:
            return self._for(node, kind)
        if t == isl.ast_node_type.if_:
            cond = self.expr(node.if_get_cond())
            then = self.stmt(node.if_get_then_node())
            other = self.stmt(node.if_get_else_node()) if node.if_has_else_node() else None
            return tirx.IfThenElse(cond, then, other)
        if t == isl.ast_node_type.mark:
            return self._mark(node)
        if t == isl.ast_node_type.user:
            return self._user(node.user_get_expr())
        raise LoweringError(f"unsupported isl AST node {t}")

    def _mark(self, node: isl.AstNode) -> tirx.Stmt:
        name = node.mark_get_id().get_name()
        inner = node.mark_get_node()
        if name in (MARK_PARALLEL, MARK_VECTORIZE, MARK_UNROLL):
            return self.stmt(inner, kind=name)
        if name.startswith(_PIECE_MARKS):
            return self._promoted(node, inner)
        if name.startswith(MARK_PREFETCH + ".") and self.hooks.prefetch is not None:
            self._prefetch_pending = int(name.split(".")[1])
            self._prefetch_nest = name.endswith("." + PREFETCH_NEST)
            try:
                return self.stmt(inner)
            finally:
                self._prefetch_pending = 0
        if self.hooks.keep_marks and name.startswith(self.hooks.keep_marks):
            return tirx.AttrStmt(name, "akg.mark", tirx.const(0, "int32"), self.stmt(inner))
        return self.stmt(inner)

    def _for(self, node: isl.AstNode, kind: str | None) -> tirx.Stmt:
        it = node.for_get_iterator().get_id().get_name()
        init = self.expr(node.for_get_init())
        cond = node.for_get_cond()
        inc = int(node.for_get_inc().get_val().to_python())
        if cond.get_type() != isl.ast_expr_type.op or cond.get_op_type() not in (
                isl.ast_expr_op_type.le, isl.ast_expr_op_type.lt) or \
                cond.get_op_arg(0).get_type() != isl.ast_expr_type.id or \
                cond.get_op_arg(0).get_id().get_name() != it:
            raise LoweringError(f"unsupported loop condition {cond.to_C_str()}")
        upper = self.expr(cond.get_op_arg(1))
        count = upper - init + (1 if cond.get_op_type() == isl.ast_expr_op_type.le else 0)
        if inc != 1:
            count = tirx.floordiv(count + (inc - 1), inc)
        count = self.analyzer.simplify(count)
        bound = self.analyzer.const_int_bound(count)
        body_node = node.for_get_body()
        distance, self._prefetch_pending = self._prefetch_pending, 0
        nest, self._prefetch_nest = self._prefetch_nest, False

        def loop(extent, for_kind) -> tirx.Stmt:
            if for_kind == tirx.ForKind.VECTORIZED and body_node.get_type() == isl.ast_node_type.user \
                    and not distance:
                return self._unswitched(extent, lambda unguarded: plain(extent, for_kind, unguarded))
            return plain(extent, for_kind)

        def plain(extent, for_kind, unguarded: bool = False) -> tirx.Stmt:
            var = tirx.Var(it, "int32")
            # the loop runs var in [0, extent); the AST iterator is init + inc * var
            value = var if inc == 1 else var * inc
            self.loop_vars[it] = value if is_zero(init) else self.analyzer.simplify(init + value)
            self.analyzer.bind(var, tvm.ir.Range.from_min_extent(0, tirx.max(extent, 1)))
            trips = int(extent.value) if isinstance(extent, tirx.IntImm) else max(1, int(bound.max_value))
            self.loop_stack.append((it, trips, _KIND_NAMES[for_kind]))
            lane, self._unswitch_lane = self._unswitch_lane, var if unguarded else None
            try:
                streams = self._prefetch_streams(it, body_node, distance * inc, nest) if distance else []
                body = self.stmt(body_node)
                if for_kind == tirx.ForKind.VECTORIZED and allocates(body):
                    # a buffer allocated per lane (an accumulator promoted below the vector
                    # loop, where the reduction has one point): TVM's vectoriser would share
                    # one buffer among the lanes, so the loop runs serial
                    log.debug("%s: vector loop %s allocates a buffer; run serial", self.name, it)
                    for_kind = tirx.ForKind.SERIAL
                if for_kind == tirx.ForKind.VECTORIZED and any(k == "vector" for _, _, k in self.loop_stack[:-1]):
                    # a vector loop inside another (a register tile of 3 x 5 on 4 lanes, both
                    # members short): TVM ignores the inner one and then fails the build
                    # ("VectorizeLoop before LiftStorageAlloc"); the outer one stays vector
                    for_kind = tirx.ForKind.SERIAL
                return tirx.For(var, 0, extent, for_kind, spread(body, streams, self.hooks.prefetch, nest)
                                 if streams else body)
            finally:
                self.loop_stack.pop()
                self._unswitch_lane = lane

        if kind == MARK_PARALLEL and not self.in_parallel:
            self.in_parallel = True
            try:
                return loop(count, tirx.ForKind.PARALLEL)
            finally:
                self.in_parallel = False
        if kind is None and self.reduce_bits and isinstance(count, tirx.IntImm) and inc == 1:
            vector = self._vector_reduction(it, init, int(count.value), body_node)
            if vector is not None:
                return vector
        if kind is None and self.hooks.serial_block and isinstance(count, tirx.IntImm) and inc == 1 \
                and int(count.value) >= 2 * self.hooks.serial_block:
            blocked = self._blocked_sum(it, init, int(count.value), body_node)
            if blocked is not None:
                return blocked
        if kind in (MARK_VECTORIZE, MARK_UNROLL):
            limit = MAX_VECTOR if kind == MARK_VECTORIZE else MAX_UNROLL
            fast = tirx.ForKind.VECTORIZED if kind == MARK_VECTORIZE else tirx.ForKind.UNROLLED
            if isinstance(count, tirx.IntImm):
                if 1 < count.value <= limit:
                    return loop(count, fast)
            elif 1 < bound.max_value <= limit:
                # full/partial tile separation: a constant-trip fast loop, else a plain one;
                # a partial tile whose trip count is a known constant (the last tile of a
                # constant loop: 28 = 16 + 12) gets a fast loop of its own, which LLVM splits
                # into vectors, rather than running scalar (LeNet-5's first conv: 43% of it)
                full = int(bound.max_value)
                fast_loop = loop(tirx.const(full, "int32"), fast)
                partials, every = self._partial_trips(count, full)
                rest = None if every and partials else loop(count, tirx.ForKind.SERIAL)
                for partial in partials:
                    part = loop(tirx.const(partial, "int32"), fast)
                    rest = part if rest is None else tirx.IfThenElse(tirx.EQ(count, partial), part, rest)
                return tirx.IfThenElse(tirx.EQ(count, full), fast_loop, rest)
        return loop(count, tirx.ForKind.SERIAL)

    def _unswitched(self, extent, build: Callable[[bool], tirx.For]) -> tirx.Stmt:
        """A vector loop over one statement whose guarded loads (padding: a load where the
        index lies inside the tensor, a fill value outside) depend on the lane: TVM runs such a
        loop element by element (it cannot vectorise a per-lane `if_then_else`). Where every
        guard is a conjunction of comparisons linear in the lane, it holds on all lanes iff it
        holds on the first and the last, so the loop is built twice: without the guards, run
        when the ends pass, and as it was otherwise (at the tensor's edges)."""
        records = len(self.records)
        saved, self._lane_guards = self._lane_guards, []
        try:
            fast = build(True)  # guards met are taken as true and collected
            guards, lane = self._lane_guards, fast.loop_var
        finally:
            self._lane_guards = saved
        if not guards:
            return fast
        del self.records[records:]  # the statement is recorded once, by the guarded build
        slow = build(False)
        first = tirx.const(0, "int32")
        last = self.analyzer.simplify(extent - 1)
        ends = [Analyzer().simplify(tirx.Let(lane, at, g)) for g in guards for at in (first, last)]
        return tirx.IfThenElse(fold_all(tirx.And, ends), fast, slow)

    def _lane_guard(self, cond: tirx.PrimExpr) -> bool:
        """Is `cond` a guard `_unswitched` can test at the ends of the vector loop being
        built: a conjunction of comparisons, each linear in the loop's variable, one of them
        depending on it?"""
        lane = self._unswitch_lane
        terms, moves = [cond], False
        while terms:
            c = terms.pop()
            if isinstance(c, tirx.And):
                terms += [c.a, c.b]
                continue
            if not isinstance(c, (tirx.LT, tirx.LE, tirx.GT, tirx.GE)):
                return False
            coefficients = detect_linear_equation(c.a - c.b, [lane])
            if len(coefficients) != 2:
                return False
            moves = moves or not is_zero(self.analyzer.simplify(coefficients[0]))
        return moves

    def _partial_trips(self, count: tirx.PrimExpr, full: int, most: int = 2) -> tuple[list[int], bool]:
        """The trip counts other than `full` (and 0 or 1) that `count` takes, when it depends on
        one enclosing loop of at most 64 iterations and takes at most `most` such values (else
        none: the partial tiles then run as a plain loop), and whether those and `full` are
        all it takes."""
        free = tirx.analysis.undefined_vars(count)
        if len(free) != 1:
            return [], False
        (var,) = free
        span = self.analyzer.const_int_bound(var)
        if span.min_value < 0 or span.max_value - span.min_value >= 64:
            return [], False
        trips = set()
        for k in range(int(span.min_value), int(span.max_value) + 1):
            value = Analyzer().simplify(tirx.Let(var, tirx.const(k, "int32"), count))
            if not isinstance(value, tirx.IntImm):
                return [], False
            trips.add(int(value.value))
        partial = sorted(t for t in trips if 1 < t < full)
        if len(partial) > most:
            return [], False
        return partial, trips <= {full, *partial}

    def _in_native_vector_loop(self) -> bool:
        """Inside an explicit vector loop no wider than one of the target's vectors (of
        float32; `reduce_bits`, 0 where reductions may not be reordered)? LLVM scalarises a
        reassociation fence on a wider vector (a two-vector strip of a gelu: 6 -> 31 us)."""
        lanes = [trips for _, trips, kind in self.loop_stack if kind == "vector"]
        return bool(lanes) and lanes[-1] * 32 <= self.reduce_bits

    def _flat_view(self, buf: tirx.Buffer) -> tirx.Buffer:
        """A 1-d view of a parameter's buffer (declared once per kernel, with the aliases)."""
        if buf.name not in self._flat_views:
            size = int(np.prod([int(d) for d in buf.shape], dtype=np.int64))
            view = tirx.decl_buffer((size,), buf.dtype, name=f"{buf.name}_flat", data=buf.data)
            self.aliases.append((view, buf.data))
            self._flat_views[buf.name] = view
        return self._flat_views[buf.name]

    def _prefetch_streams(self, it: str, body_node: isl.AstNode, ahead: int, nest: bool = False) -> list[Stream]:
        """What an iteration of loop `it` prefetches of what the iteration `ahead` steps later
        reads from the kernel's arguments: for each argument read below whose first element
        moves by a constant stride along `it`, the cache lines of that stride (inner loops at
        their first iteration), placed by `prefetch.spread`."""
        saved = dict(self.loop_vars)
        calls: list[tuple[isl.AstExpr, tuple]] = []  # a call and the loops around it below `it`

        def visit(n: isl.AstNode, around: tuple) -> None:
            t = n.get_type()
            if t == isl.ast_node_type.block:
                children = n.block_get_children()
                for i in range(children.n_ast_node()):
                    visit(children.get_at(i), around)
            elif t == isl.ast_node_type.for_:
                visit(n.for_get_body(), (*around, (n.for_get_iterator().get_id().get_name(), n.for_get_init())))
            elif t == isl.ast_node_type.if_:
                visit(n.if_get_then_node(), around)
            elif t == isl.ast_node_type.mark:
                visit(n.mark_get_node(), around)
            elif t == isl.ast_node_type.user:
                calls.append((n.user_get_expr(), around))

        def at_first_iterations(around: tuple) -> None:
            # the inner loops at their first iteration, each from the value of `it` now bound
            # (a loop isl emits over absolute indices starts where `it`'s block starts)
            for name, init in around:
                self.loop_vars[name] = self.expr(init)

        seen: dict[int, tuple] = {}
        try:
            visit(body_node, ())
            here_value = self.loop_vars[it]
            for call, around in calls:
                stmt = self.model.statement(call.get_op_arg(0).get_id().get_name())
                if stmt.role == "init":
                    continue  # writes only
                args = [call.get_op_arg(i) for i in range(1, call.get_op_n_arg())]
                for load in (n for n in walk(stmt.expr) if isinstance(n, Load)):
                    t = load.tensor
                    if id(t) in seen or not any(b.same_as(self.buffers.get(id(t))) for b in self.params):
                        continue
                    at = {}
                    try:
                        for shift in (0, 1):
                            self.loop_vars[it] = self.analyzer.simplify(here_value + (ahead + shift))
                            at_first_iterations(around)
                            env = dict(zip(stmt.iters, (self.expr(a) for a in args)))
                            at[shift] = self.analyzer.simplify(self._flat(t, load.indices, env))
                    except Exception:  # noqa: BLE001  (an index this loop nest does not bind)
                        continue
                    finally:
                        self.loop_vars[it] = here_value
                    stride = self.analyzer.simplify(at[1] - at[0])
                    if isinstance(stride, tirx.IntImm) and int(stride.value) > 0:
                        seen[id(t)] = (t, at[0], int(stride.value))
        finally:
            self.loop_vars.clear()
            self.loop_vars.update(saved)
        streams = []
        for t, start, stride in seen.values():
            per_line = max(1, self.hooks.line_bytes // np.dtype(t.dtype).itemsize)
            streams.append(Stream(self.buffers[id(t)], start, min(-(-stride // per_line), 512), per_line,
                                  self._flat_view(self.buffers[id(t)]) if nest else None))
        return streams

    # --- statements -----------------------------------------------------------------------------

    def _user(self, call: isl.AstExpr) -> tirx.Stmt:
        name = call.get_op_arg(0).get_id().get_name()
        stmt = self.model.statement(name)
        args = [self.analyzer.simplify(self.expr(call.get_op_arg(i))) for i in range(1, call.get_op_n_arg())]
        env = dict(zip(stmt.iters, args))
        self._record(stmt, call, env)
        return self.statement(stmt, env)

    def _record(self, stmt: Statement, call: isl.AstExpr, env: dict) -> None:
        """Note the statement's loop nest and the stride of each access along the innermost
        loop (by evaluating the indices with that loop's iterator moved by one)."""
        shifted = None
        if self.loop_stack:
            it = self.loop_stack[-1][0]
            saved = self.loop_vars[it]
            self.loop_vars[it] = saved + 1
            try:
                shifted = dict(zip(stmt.iters, (self.expr(call.get_op_arg(i))
                                                for i in range(1, call.get_op_n_arg()))))
            finally:
                self.loop_vars[it] = saved
        accesses = []
        loads = [] if stmt.role == "init" else [n for n in walk(stmt.expr) if isinstance(n, Load)]
        for tensor, indices in [(stmt.op.output, stmt.op.axes), *((n.tensor, n.indices) for n in loads)]:
            buf, offsets, _ = self._buffer(tensor)
            stride = None
            if shifted is not None:
                try:
                    delta = self.analyzer.simplify(self._flat(tensor, indices, shifted) - self._flat(tensor, indices, env))
                    stride = int(delta.value) if isinstance(delta, tirx.IntImm) else None
                except Exception:  # noqa: BLE001  (data-dependent index)
                    stride = None
            accesses.append(AccessRecord(tensor.name,
                                         int(np.prod(tensor.shape, dtype=np.int64)) * np.dtype(tensor.dtype).itemsize,
                                         stride, bool(offsets) or buf not in self.params))
        flops = sum(1 for n in walk(stmt.expr) if isinstance(n, Call))
        self.records.append(StatementRecord(stmt.role, tuple((t, k) for _, t, k in self.loop_stack),
                                            tuple(accesses), max(flops, 1)))

    def _flat(self, tensor: Tensor, indices, env: dict):
        strides = np.cumprod([1, *tensor.shape[::-1]])[:-1][::-1]
        total = tirx.const(0, "int32")
        for idx, st in zip(indices, strides):
            total = total + self.value(idx, env) * int(st)
        return total

    def statement(self, stmt: Statement, env: dict) -> tirx.Stmt:
        op = stmt.op
        t = op.output
        out_index = [env[v] for v in op.axes]
        self._lane = out_index[-1] if id(t) in self.exchange else None
        red = op.reduce
        if stmt.role == "assign":
            return self._store(t, self.value(op.body, env), out_index)
        if stmt.role == "init":
            stores = [self._store(t, reduce_identity(red.reducer, t.dtype), out_index)]
            if id(t) in self.shadows:
                stores.append(self._store(t, reduce_identity(red.reducer, red.source.dtype, value=True),
                                          out_index, shadow=True))
            return _seq(stores)
        src = self.value(red.source, env)
        current = self._load(t, out_index)
        if red.reducer == "sum":
            return self._store(t, current + src, out_index)
        if red.reducer == "prod":
            return self._store(t, current * src, out_index)
        if red.reducer == "max":
            return self._store(t, tirx.Max(current, src), out_index)
        if red.reducer == "min":
            return self._store(t, tirx.Min(current, src), out_index)
        # argmax / argmin: strictly better value wins, so the first extreme is kept (with
        # `nan_extrema` the first NaN, as NumPy's argmax)
        best = self._load(t, out_index, shadow=True)
        better = tirx.GT(src, best) if red.reducer == "argmax" else tirx.LT(src, best)
        if self.nan_extrema and red.source.dtype.startswith("float"):
            better = tirx.Or(better, tirx.And(tirx.isnan(src), tirx.Not(tirx.isnan(best))))
        position = env[red.axes[0]]
        return tirx.IfThenElse(better, _seq([
            self._store(t, src, out_index, shadow=True),
            self._store(t, tirx.Cast("int32", position), out_index)]), None)

    def value(self, e: Expr, env: dict) -> tirx.PrimExpr:
        # A shared subexpression is lowered once, except one that holds a TIR Let (the fast-math
        # expansions): TVM refuses a Let variable bound in two places, so each use gets its own.
        memo: dict[int, tirx.PrimExpr] = {}
        binds: set[int] = set()

        def go(n: Expr) -> tirx.PrimExpr:
            key = id(n)
            if key in memo:
                return memo[key]
            before = len(binds)
            if isinstance(n, Const):
                out = tirx.const(n.value, n.dtype) if bits_dtype(n.dtype) == n.dtype else _const_bits(n)
            elif isinstance(n, Var):
                out = env[n]
            elif isinstance(n, Load):
                out = self._load(n.tensor, [go(i) for i in n.indices])
            elif isinstance(n, Cast):
                out = tir_cast(n.dtype, go(n.value), n.value.dtype, bits=True)  # float8, bfloat16 by bits
            elif isinstance(n, Select):
                lazy = any(isinstance(x, Load) for x in (*walk(n.a), *walk(n.b)))
                c, a, b = go(n.cond), go(n.a), go(n.b)
                if lazy and self._unswitch_lane is not None and _index_guard(n.cond) and self._lane_guard(c):
                    self._lane_guards.append(c)  # the lanes inside the guard (`_unswitched`)
                    out = a
                else:
                    out = tirx.if_then_else(c, a, b) if lazy else tirx.Select(c, a, b)
            elif isinstance(n, Call):
                out = tir_call(n.op, [go(a) for a in n.args], n.args, n.dtype, self.fast_math,
                               self._fence if self._in_native_vector_loop() else None, self.nan_extrema)
                if n.op in FENCED_CALLS:
                    out = self._fence(out, n.dtype)
            else:
                raise LoweringError(f"cannot lower {type(n).__name__} here")
            if len(binds) > before or (isinstance(n, Call) and self.fast_math and n.op in FAST_F32):
                binds.add(key)  # holds a Let: lowered afresh at each use
            else:
                memo[key] = out
            return out

        return go(e)

# --- helpers -----------------------------------------------------------------------------------

_KIND_NAMES = {tirx.ForKind.SERIAL: "serial", tirx.ForKind.PARALLEL: "parallel",
               tirx.ForKind.VECTORIZED: "vector", tirx.ForKind.UNROLLED: "unroll"}


@dataclass(frozen=True)
class AccessRecord:
    tensor: str
    tensor_bytes: int
    stride: int | None  # elements per step of the innermost loop (None: not affine there)
    local: bool  # a promoted (stack/register) buffer or an intermediate, not a kernel argument


@dataclass(frozen=True)
class StatementRecord:
    role: str
    loops: tuple[tuple[int, str], ...]  # enclosing loops, outermost first: (trip count, kind)
    accesses: tuple[AccessRecord, ...]  # the write first, then the reads
    ops: int  # arithmetic operations per instance


def _const_bits(c: Const) -> tirx.PrimExpr:
    """A bfloat16 or float8 constant as the bits its tensors are kept in (`bits_dtype`),
    encoded here: a constant Select operand of a staged tile was a bfloat16 value TVM cast
    the loaded bits to (and the generated C reinterpreted a literal's address)."""
    import ml_dtypes

    bits = bits_dtype(c.dtype)
    return tirx.const(int(np.array(c.value, dtype=getattr(ml_dtypes, c.dtype)).view(bits)), bits)


def _index_guard(cond: Expr) -> bool:
    """Does `cond` depend on indices only, not on data (no loads)?"""
    return not any(isinstance(n, Load) for n in walk(cond))


def lower_to_tir(model: PolyModel, schedule: isl.Schedule, promote: bool = True,
                 name: str = "main", hooks: LoweringHooks = LoweringHooks()):
    """TIR of a mapped schedule, and the loop-nest records of its statements; what the
    target decides (fences, local allocations, vector reductions, fast-math expansions)
    comes in `hooks`. Vector reductions (`hooks.reduce_bits` > 0) reorder sums: a target
    asks for them only where it allows reassociation."""
    recomputed = recompute_marks(schedule) if promote else set()
    try:
        if recomputed:
            # the producers named by recompute marks run below them, box by box, not on their own
            lowering = TirLowering(model, Promoter(model, schedule, recompute=frozenset(recomputed)), name, hooks)
            try:
                return lowering.lower(without_statements(schedule, recomputed)), lowering.records
            except RecomputeRefused as e:
                log.debug("%s: %s; the producers keep their own loop nests", name, e)
        lowering = TirLowering(model, Promoter(model, schedule, enabled=promote), name, hooks)
        return lowering.lower(schedule), lowering.records
    except isl.Error as e:
        raise LoweringError(f"{name}: code generation failed in isl: {e}") from e
