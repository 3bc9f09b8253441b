"""Batched loop nests of tir_interp.py (a mixin of TirInterpreter): a perfect loop nest whose
iterations are independent runs as NumPy array operations over all its iterations at once."""

from __future__ import annotations


import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.buffer import is_buffer_var

from tir_interp_values import (
    _BATCH_OVERHEAD, _MIN_BATCH, _dtype, _int_range, _is_prefetch, _kind, _unsupported)


class BatchedNests:
    """TirInterpreter's batched loop nests (uses its slots, `stmt` and `expr`)."""

    # A perfect nest of loops (this loop and the loops directly inside it) around loop-free
    # code (stores, sequences, ifs) may run as NumPy array operations: every statement for all
    # iterations at once, the loop variables being arrays of all their values (in serial order).
    # That computes the same as the serial loops when no iteration reads or writes an element
    # that another iteration writes, which is checked on the flat offsets of the accesses,
    # affine in the loop variables: every store is injective over the iteration box, and every
    # other access to a stored buffer touches either the store's own element in the same
    # iteration or an element that no iteration of the nest can reach. An `if` whose condition
    # varies over the lanes runs its branches on the lanes that take them.

    def _batched_loop(self, s, serial):
        plan = self._batch_plan(s)
        if plan is None:
            return None
        loops, body = plan
        handles = [lp.loop_var.__chandle__() for lp in loops]
        self._batch = _Batch(handles)
        try:
            run_body = self._bstmt(body, [self._slots[h] for h in handles])
        except NotImplementedError:
            return None  # some node has no batched form: run serially
        finally:
            self._batch = None
        slots = [self._slots[h] for h in handles]
        self.batched_nests.append(tuple(str(lp.loop_var.name) for lp in loops))  # (undone below if not)
        los = [self._const_or_fn(lp.min) for lp in loops]
        exts = [self._const_or_fn(lp.extent) for lp in loops]
        steps = [self._int_const(lp.step) if lp.step is not None else 1 for lp in loops]
        dtypes = [np.dtype(_dtype(lp.loop_var)[0]) for lp in loops]
        lo_consts = [self._int_const(lp.min) for lp in loops]
        ext_consts = [self._int_const(lp.extent) for lp in loops]
        # below this many iterations NumPy's per-call overhead costs more than serial execution
        # (about 30 scalar operations' time per array operation)
        least = _MIN_BATCH + _BATCH_OVERHEAD // max(1, _count_nodes(body)) if self.min_batch is None \
            else self.min_batch
        grids: dict[tuple, list] = {}

        def lanes(counts, base):
            grid = np.indices(counts, dtype=np.int64).reshape(len(counts), -1)
            return [(lo + st * g).astype(dt) for g, lo, st, dt in zip(grid, base, steps, dtypes)]

        if None not in lo_consts and None not in ext_consts:  # the same lanes every time
            counts = tuple(max(0, -(-e // st)) for e, st in zip(ext_consts, steps))
            if int(np.prod(counts)) < least:
                self.batched_nests.pop()
                return None
            fixed = lanes(counts, lo_consts)

            def batched_fixed(env):
                for slot, values in zip(slots, fixed):
                    env[slot] = values
                run_body(env)
            return batched_fixed

        def batched(env):
            counts = tuple(max(0, -(-f(env) // st)) for f, st in zip(exts, steps))
            total = 1
            for c in counts:
                total *= c
            if total < least:
                serial(env)
                return
            base = tuple(lo(env) for lo in los)
            key = (counts, base)
            values = grids.get(key)
            if values is None:
                if len(grids) > 256:
                    grids.clear()
                values = grids[key] = lanes(counts, base)
            for slot, v in zip(slots, values):
                env[slot] = v
            run_body(env)
        return batched

    def _batch_plan(self, s):
        """(loops, body) of the perfect nest from `s` if it may run batched, else None."""
        loops, body = [s], s.body
        while type(body).__name__ in ("For", "AttrStmt"):
            if type(body).__name__ == "For":
                loops.append(body)
            body = body.body
        batch = _Batch([lp.loop_var.__chandle__() for lp in loops])
        counts = []
        for lp in loops:
            if int(lp.kind) not in (0, 1, 2, 3) or lp.thread_binding is not None:
                return None
            if _kind(_dtype(lp.loop_var)[0]) != "int" or _dtype(lp.loop_var)[1] != 1:
                return None
            step = 1 if lp.step is None else self._int_const(lp.step)
            if step is None or step <= 0 or batch.refs(lp.min) or batch.refs(lp.extent):
                return None  # not a box: a bound depends on an enclosing loop of the nest
            hi = self._range(lp.extent)[1]
            counts.append((step, None if hi is None else max(0, -(-hi // step))))
        stores, loads = [], []
        if not _collect_accesses(body, stores, loads):
            return None
        written = {b.__chandle__() for b, _ in stores}
        roots = self._alias_root
        views: dict[int, set[int]] = {}  # memory written in the nest -> the buffers accessing it
        for b, _ in stores + loads:
            views.setdefault(roots.get(b.__chandle__(), b.__chandle__()), set()).add(b.__chandle__())
        if any(len(views[roots.get(h, h)]) > 1 for h in written):
            return None  # written memory also accessed through another view of it
        loop_handles = [lp.loop_var.__chandle__() for lp in loops]
        forms = {}
        for b, idx in stores + loads:
            if b.__chandle__() in written:
                form = self._flat_form(b, idx, batch, set(loop_handles))
                if form is None:
                    return None
                forms[id(idx)] = form
        for b, idx in stores:
            form = forms[id(idx)]
            reach = _injective_reach(form[0], loop_handles, counts)
            if reach is False:
                return None
            for b2, idx2 in stores + loads:
                if idx2 is idx or b2.__chandle__() != b.__chandle__():
                    continue
                other = forms[id(idx2)]
                if other[0] != form[0] or other[1] != form[1]:
                    return None
                delta = abs(other[2] - form[2])
                if delta and (reach is None or delta <= reach):
                    return None
        return loops, body

    def _flat_form(self, buf, indices, batch, loop_handles):
        """The flat element offset of buf[indices] as ({loop var: coefficient}, {other term:
        coefficient}, constant), or None where it is not affine in the nest's loop variables."""
        strides, acc = [], 1
        for d in reversed(list(buf.shape)):
            if not isinstance(d, tirx.IntImm):
                return None
            strides.append(acc)
            acc *= int(d.value)
        strides.reverse()
        total = ({}, {}, 0)
        for i, st in zip(indices, strides):
            f = self._affine(i, batch, loop_handles)
            if f is None:
                return None
            total = _combine(total, f, st)
        return _clean(total)

    def _affine(self, e, batch, loop_handles):
        t = type(e).__name__
        if t == "IntImm":
            return {}, {}, int(e.value)
        if t == "Var":
            h = e.__chandle__()
            if h in loop_handles:
                return {h: 1}, {}, 0
            if batch.refs(e):
                return None  # a Let variable bound to a value that varies over the lanes
            return {}, {("var", h): 1}, 0
        if t in ("Add", "Sub"):
            a, b = self._affine(e.a, batch, loop_handles), self._affine(e.b, batch, loop_handles)
            if a is None or b is None:
                return None
            return _combine(a, b, 1 if t == "Add" else -1)
        if t == "Mul":
            a, b = self._affine(e.a, batch, loop_handles), self._affine(e.b, batch, loop_handles)
            if a is None or b is None:
                return None
            if not a[0] and not a[1]:
                return _combine(({}, {}, 0), b, a[2])
            if not b[0] and not b[1]:
                return _combine(({}, {}, 0), a, b[2])
            if batch.refs(e):
                return None
        if t == "Cast" and _kind(_dtype(e)[0]) == "int" and _kind(_dtype(e.value)[0]) == "int":
            (slo, shi), (dlo, dhi) = _int_range(_dtype(e.value)[0]), _int_range(_dtype(e)[0])
            if dlo <= slo and shi <= dhi:
                return self._affine(e.value, batch, loop_handles)
        if batch.refs(e):
            return None
        return {}, {("expr", tvm_ffi.structural_hash(e)): 1}, 0  # a term constant over the nest

    def _bstmt(self, s, slots):
        """The batched form of a loop-free statement."""
        t = type(s).__name__
        if t == "SeqStmt":
            fs = [self._bstmt(x, slots) for x in s.seq]

            def bseq(env):
                for f in fs:
                    f(env)
            return bseq
        if t == "AttrStmt":
            return self._bstmt(s.body, slots)
        if t == "Evaluate" and (isinstance(s.value, (tirx.IntImm, tirx.FloatImm)) or _is_prefetch(s)):
            return lambda env: None
        if t == "IfThenElse":
            return self._bif(s, slots)
        if t != "BufferStore":
            raise _unsupported(f"batched {t}")
        buf = s.buffer
        slot = self._use(buf)
        fs = [self.expr(i) for i in s.indices]
        value = self.expr(s.value)
        oob = self._out_of_bounds
        if self._in_bounds(buf, list(s.indices)):
            def bstore_in_bounds(env):
                env[slot][tuple([f(env) for f in fs])] = value(env)
            return bstore_in_bounds

        def bstore(env):
            try:
                index = tuple(f(env) for f in fs)
                for i in index:
                    if (i.min() < 0) if isinstance(i, np.ndarray) else (i < 0):
                        raise IndexError(f"negative index {i.tolist()[:8] if isinstance(i, np.ndarray) else i}")
                env[slot][index] = value(env)
            except IndexError as err:
                oob(err, s)
        return bstore

    def _bif(self, s, slots):
        cond = self.expr(s.condition)
        then = self._bstmt(s.then_case, slots)
        other = self._bstmt(s.else_case, slots) if s.else_case is not None else None

        def run_on(env, lanes, branch):
            saved = [env[k] for k in slots]
            for k, a in zip(slots, saved):
                env[k] = a[lanes]
            try:
                branch(env)
            finally:
                for k, a in zip(slots, saved):
                    env[k] = a

        def bif(env):
            c = cond(env)
            if not isinstance(c, np.ndarray):
                if c:
                    then(env)
                elif other is not None:
                    other(env)
                return
            if c.all():
                then(env)
            elif not c.any():
                if other is not None:
                    other(env)
            else:
                run_on(env, c, then)
                if other is not None:
                    run_on(env, ~c, other)
        return bif


class _Batch:
    """The variables that vary over the lanes of a batched loop nest (its loop variables and the
    Let variables bound to values that depend on them)."""

    def __init__(self, handles):
        self.handles = set(handles)
        self._memo: dict[int, bool] = {}

    def refs(self, e) -> bool:
        h = e.__chandle__()
        hit = self._memo.get(h)
        if hit is not None:
            return hit
        t = type(e).__name__
        if t == "Var":
            out = h in self.handles
        elif t == "Let":
            varies = self.refs(e.value)
            if varies:
                self.handles.add(e.var.__chandle__())
            out = self.refs(e.body) or varies
        else:
            out = any(self.refs(c) for c in _children(e))
        self._memo[h] = out
        return out


def _count_nodes(s) -> int:
    """TIR expression nodes in loop-free code (a tree count)."""
    t = type(s).__name__
    if t == "SeqStmt":
        return sum(_count_nodes(x) for x in s.seq)
    if t == "AttrStmt":
        return _count_nodes(s.body)
    if t == "IfThenElse":
        return _count_expr(s.condition) + _count_nodes(s.then_case) + (
            _count_nodes(s.else_case) if s.else_case is not None else 0)
    if t == "BufferStore":
        return 1 + _count_expr(s.value) + sum(_count_expr(i) for i in s.indices)
    return 0


def _count_expr(e) -> int:
    return 1 + sum(_count_expr(c) for c in _children(e))


def _children(e) -> tuple:
    t = type(e).__name__
    if t in ("IntImm", "FloatImm", "StringImm", "Var"):
        return ()
    if t == "TensorLoad":
        return tuple(e.indices)
    if t == "Call":
        return tuple(a for a in e.args if isinstance(a, tvm.ir.Expr))
    if t in ("Cast", "Broadcast"):
        return (e.value,)
    if t == "Select":
        return e.condition, e.true_value, e.false_value
    if t == "Ramp":
        return e.base, e.stride
    if t == "Shuffle":
        return (*e.vectors, *e.indices)
    if t == "Let":
        return e.value, e.body
    if t in ("Not", "BitwiseNot"):
        return (e.a,)
    if hasattr(e, "a") and hasattr(e, "b"):
        return e.a, e.b
    raise _unsupported(f"expression {t}", e)


def _expr_loads(e, loads: list) -> bool:
    """Collect the loads in `e`; False if some node of it is a vector."""
    if _dtype(e)[1] != 1:
        return False
    if type(e).__name__ == "TensorLoad":
        if not is_buffer_var(e.source):
            return False
        loads.append((e.source, list(e.indices)))
    return all(_expr_loads(c, loads) for c in _children(e))


def _collect_accesses(s, stores: list, loads: list) -> bool:
    """Collect the stores and loads of loop-free code; False if `s` holds a loop, a vector or
    a statement that batched execution does not handle."""
    t = type(s).__name__
    if t == "SeqStmt":
        return all(_collect_accesses(x, stores, loads) for x in s.seq)
    if t == "AttrStmt":
        return _collect_accesses(s.body, stores, loads)
    if t == "Evaluate":
        return isinstance(s.value, (tirx.IntImm, tirx.FloatImm)) or _is_prefetch(s)
    if t == "IfThenElse":
        return _expr_loads(s.condition, loads) and _collect_accesses(s.then_case, stores, loads) and (
            s.else_case is None or _collect_accesses(s.else_case, stores, loads))
    if t == "BufferStore":
        idx = list(s.indices)
        stores.append((s.buffer, idx))
        return _expr_loads(s.value, loads) and all(_expr_loads(i, loads) for i in idx)
    return False


def _combine(a, b, scale: int):
    """a + scale * b, on (coefficients, terms, constant) forms."""
    coefs, terms = dict(a[0]), dict(a[1])
    for k, v in b[0].items():
        coefs[k] = coefs.get(k, 0) + scale * v
    for k, v in b[1].items():
        terms[k] = terms.get(k, 0) + scale * v
    return coefs, terms, a[2] + scale * b[2]


def _clean(form):
    coefs, terms, const = form
    return {k: v for k, v in coefs.items() if v}, {k: v for k, v in terms.items() if v}, const


def _injective_reach(coefs: dict, loop_handles: list, counts: list):
    """For a store at offset sum(coef * var) + rest over the iteration box: False if two
    iterations may write one element; else how far apart (in elements) two of its elements
    can be (None: unbounded)."""
    dims = []
    for h, (step, count) in zip(loop_handles, counts):
        a = abs(coefs.get(h, 0) * step)
        if count == 1:
            continue
        if a == 0:
            return False  # iterations along this loop write the same element
        dims.append((a, count))
    dims.sort()
    span = 0
    for k, (a, count) in enumerate(dims):
        if span is None or a <= span:
            return False  # not a mixed-radix layout: two iterations may meet
        span = None if count is None else span + a * (count - 1)
    return span
