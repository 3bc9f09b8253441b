"""Statements -> vector instructions in the NPU backend (`_Compute`): each statement of a tile
region mapped along the loop its destination is contiguous in (merged loops, rows folded into
repeats, the other loops as `Loop`s), operands invariant along it as broadcasts, reductions
folded across and within repeats, and the region's UB temporaries."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from akg.backends.npu.affine import _affine, _buf, _is_load
from akg.backends.npu.errors import NpuMappingError
from akg.backends.npu.parse import Nest, _dt, _key, _loads
from akg.backends.npu.rowblocks import block_reduce, block_reduce_cost
from akg.backends.npu.syncs import HALF, SyncPass, _compound
from akg.backends.npu.vector_emit import Opd, _Emitter

if TYPE_CHECKING:
    from akg.backends.npu.translator import Translator


class _NotDense(Exception):
    """An unpadded (dense) UB layout does not work for this region: use the padded one."""


def divisors_upto(n: int, cap: int) -> list:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def _value_vars(expr) -> list:
    """The loop variables an expression uses as values (outside the indices of its loads)."""
    from tvm import tirx

    found = []

    def visit(e):
        if isinstance(e, tirx.Var):
            if not any(e.same_as(v) for v in found):
                found.append(e)
            return
        if _is_load(e):
            return
        if type(e).__name__ == "Call":
            for a in e.args:
                visit(a)
            return
        for name in ("a", "b", "value", "condition", "true_value", "false_value"):
            if hasattr(e, name):
                visit(getattr(e, name))

    visit(expr)
    return found


_REDUCE = {"Add": "sum", "Max": "max", "Min": "min"}
_BOOL_REDUCE = {"Or": "max", "And": "min"}  # any / all over bools as 0 / 1


class _Compute:
    def __init__(self, tr: Translator, locals_: dict, half, where: str):
        self.tr, self.isa, self.spec = tr, tr.isa, tr.spec
        self.locals, self.half, self.where = locals_, half, where
        self.temps = defaultdict(list)
        self.loop_names = {}
        self.iotas = {}
        self.prelude = []  # records before the region's statements (index vectors)

    def items(self, items) -> list:
        out = []
        for it in items:
            if isinstance(it, Nest):
                out.extend(self.nest(it))
            else:
                name = self.tr.fresh("s")
                self.loop_names[it.var] = name
                inner = self.items(it.items)
                body, before, after = SyncPass().body(inner, carried=1)
                out.append(_compound(inner, [*before, self.isa.Loop(name, it.extent, tuple(body)), *after]))
        return out

    # operands

    def operand(self, load, loops) -> Opd:
        isa = self.isa
        loc = self.locals[_buf(load).name]
        where = self.where
        base = isa.Affine()
        coeffs: dict = {}
        inner = {v for v, _ in loops}
        for d, (c, k) in enumerate(self.tr._index_forms(_buf(load).name, load.indices, where)):
            stride = loc.strides[d]
            base = base + (k - loc.lo[d][1]) * stride
            for v, cv in c.items():
                if v in inner:
                    coeffs[v] = coeffs.get(v, 0) + cv * stride
                elif v in self.loop_names:
                    base = base + isa.var(self.loop_names[v]) * (cv * stride)
        if loc.halves:
            base = base + isa.var(self.half) * loc.slot_elems
        return Opd("ref", loc.dtype, buffer=loc.buffer, base=base, coeffs={v: c for v, c in coeffs.items() if c},
                   slot=(loc.buffer.name, HALF if loc.halves else None))

    def temp(self, dtype: str, k: int, elems: int):
        # temps of a few repeats (a row's statistics) in their own pool: they do not overwrite
        # the row-sized temps whose values a later statement may reuse (`reuse.drop_recomputed`)
        small = elems <= 4 * self._lanes(dtype)
        pool = self.temps[(dtype, "small") if small else dtype]
        while len(pool) <= k:
            pool.append(None)
        if pool[k] is None or pool[k].size < elems:
            pool[k] = self.tr.alloc(f"tmp_{dtype}_{'s' if small else ''}{k}", (max(elems, self._lanes(dtype)),), dtype)
        return pool[k]

    def _lanes(self, dtype: str) -> int:
        return self.spec.lanes(np.dtype(dtype).itemsize)

    # one statement

    def nest(self, nest: Nest) -> list:

        store = nest.store
        where = f"{self.where}: statement `{store.buffer.name}[...] = ...`"
        dst = self.operand(store, nest.loops)
        loops = list(nest.loops)
        value = store.value
        # a reduction: dst = dst op f(...) with dst invariant along a loop
        red = None
        name = type(value).__name__
        reducers = _BOOL_REDUCE if _dt(value) == "bool" else _REDUCE
        if name in reducers and loops:
            for a, b in ((value.a, value.b), (value.b, value.a)):
                if _is_load(a) and a.source.same_as(store.buffer) and \
                        all(_affine(x, where) == _affine(y, where) for x, y in zip(a.indices, store.indices)):
                    red = (reducers[name], b)
                    break
        loads = [self.operand(l, loops) for l in _loads(value)]

        def dense(v) -> bool:
            return all(o.coeffs.get(v, 0) in (0, 1) for o in loads)

        vec = None
        for v, e in reversed(loops):
            if dst.coeffs.get(v, 0) == 1 and dense(v):
                vec = v
                break
        if vec is None and red is not None:
            for v, e in reversed(loops):
                if dst.coeffs.get(v, 0) == 0 and dense(v):
                    return self.reduction(nest, dst, red, v, where)
        if vec is None:
            for v, e in reversed(loops):
                if dst.coeffs.get(v, 0) == 1:
                    vec = v  # strided operands: reported below
                    break
        return self.elementwise(nest, dst, vec, where)

    def _geometry(self, loops, vec, opds, keep=()):
        """Merge outer loops into the vector loop where every operand stays contiguous (or
        broadcast); returns (n elements, merged vars, the other loops). Loops whose index is a
        value of the statement (`keep`) are not merged (nothing is, when the vector loop's is)."""
        if vec is None:
            return 1, [], list(loops)
        ext = dict((v, e) for v, e in loops)
        n, merged = ext[vec], [vec]
        rest = [(v, e) for v, e in loops if not v.same_as(vec)]
        changed = not any(vec.same_as(w) for w in keep)
        while changed:
            changed = False
            for v, e in reversed(rest):
                if any(v.same_as(w) for w in keep):
                    continue
                if all(o.coeffs.get(v, 0) == o.coeffs.get(vec, 0) * n for o in opds):
                    n *= e
                    merged.append(v)
                    rest = [(w, f) for w, f in rest if not w.same_as(v)]
                    changed = True
                    break
        return n, merged, rest

    def _dense_ok(self, rest, vec, opds) -> None:
        """Unpadded boxes need every statement as one contiguous range from aligned starts;
        boxes padded only along their innermost non-unit dim need aligned rows."""
        if self.tr.layout_mode == "padded":
            return
        if rest and self.tr.dense:
            raise _NotDense()
        for o in opds:
            if o.kind != "ref" or (vec is not None and not o.coeffs.get(vec, 0) and o is not opds[0]):
                continue
            block = self.spec.block_elements(np.dtype(o.dtype).itemsize)
            if o.base.const % block or any(c % block for _v, c in o.base.terms) or \
                    any(o.coeffs.get(v, 0) % block for v, _e in rest):
                raise _NotDense()

    def _bind(self, opd: Opd, rest, names) -> Opd:
        isa = self.isa
        base = opd.base
        for v, _ in rest:
            c = opd.coeffs.get(v, 0)
            if c:
                base = base + isa.var(names[v]) * c
        return Opd(opd.kind, opd.dtype, opd.value, opd.buffer, base, {}, opd.slot)

    def elementwise(self, nest, dst, vec, where) -> list:
        store = nest.store
        loads = [self.operand(l, nest.loops) for l in _loads(store.value)]
        for o in loads:
            c = o.coeffs.get(vec, 0) if vec is not None else 0
            if c not in (0, 1):
                raise NpuMappingError(f"{where}: operand of '{o.buffer.name}' is strided along the vector loop "
                                      f"(a transpose or a strided access: not supported yet)")
        values = _value_vars(store.value)
        n, merged, rest = self._geometry(nest.loops, vec, [dst, *loads], keep=values)
        self._dense_ok(rest, vec, [dst, *loads])
        rest = self._rows_inside(rest, n, dst, loads, store, where)
        rows = self._rows(rest, vec, n, [dst, *loads])
        if rows:
            return self._elementwise_rows(nest, dst, loads, vec, n, merged, rest, rows, where)
        names = {v: self.tr.fresh("v") for v, _ in rest}
        emit = _Emitter(self, n, where)
        emit.outer_index = [(v, e, self.isa.var(names[v]), 0) for v, e in rest if any(v.same_as(w) for w in values)]
        opmap = {}
        for l, o in zip(_loads(store.value), loads):
            opmap[_key(l)] = (self._bind(o, rest, names), o.coeffs.get(vec, 0) if vec is not None else 0)
        dstb = self._bind(dst, rest, names)
        emit.index_vars = (vec,) if len(merged) == 1 else ()
        emit.evaluate(store.value, opmap, dstb)
        return self._wrap(emit.records, rest, names)

    def _rows_inside(self, rest, n, dst, loads, store, where) -> list:
        """The outer loops of an element-wise statement with a loop its destination does not
        index innermost (an update `acc += X * W` over a window or a summed dim): an output
        loop moved inside them, so that its rows fold into repeats (`_rows`). Each element's
        updates keep their order: the statement writes only its destination, which it reads at
        the element it writes, the loops moved over do not index it, and the rows of the moved
        loop are disjoint (destination stride at least a row)."""
        if not self.tr.fold_rows or not rest or dst.coeffs.get(rest[-1][0], 0) >= n:
            return rest
        store_forms = [_affine(i, where) for i in store.indices]
        for ld in _loads(store.value):
            if ld.source.same_as(store.buffer) and [_affine(i, where) for i in ld.indices] != store_forms:
                return rest
        found = [k for k, (v, e) in enumerate(rest) if e > 1 and dst.coeffs.get(v, 0) >= n and
                 all(o.coeffs.get(v, 0) >= 0 for o in loads) and
                 not any(dst.coeffs.get(w, 0) for w, _f in rest[k + 1:])]
        if not found:
            return rest
        k = found[-1]
        return rest[:k] + rest[k + 1:] + [rest[k]]

    ROW_TEMP_BYTES = 16384  # a temp of rows x row elements at most this large
    ROW_TEMP_BYTES_LARGE = 65536  # tried first (fewer, longer instructions), while the region fits the UB

    def _rows(self, rest, vec, n, opds) -> int:
        """Rows of the innermost outer loop to fold into repeats (a divisor of its extent, at
        most max_repeat and temps of ROW_TEMP_BYTES), 0 when the operands' row strides are not
        whole 32-byte blocks (each op then still picks its cheapest form: `_Emitter._rows_op`)."""
        if vec is None or not rest:
            return 0
        u, R = rest[-1]
        if not self.tr.fold_rows or R < 2 or opds[0].coeffs.get(u, 0) < n:
            return 0  # rows that share destination elements (a reduction loop)
        for o in opds:
            c = o.coeffs.get(u, 0)
            block = self.spec.block_elements(np.dtype(o.dtype).itemsize)
            if c < 0 or (o.coeffs.get(vec, 0) and c % block):
                return 0
        row_bytes = -(-n // 8) * 8 * 4
        cap = min(self.spec.max_repeat, max(self.tr.row_temp_bytes // row_bytes, 1))
        fits = [d for d in divisors_upto(R, cap)]
        best = max(fits) if fits else 1
        return best if best >= 2 else 0

    def _elementwise_rows(self, nest, dst, loads, vec, n, merged, rest, rows, where) -> list:
        isa = self.isa
        store = nest.store
        u, R = rest[-1]
        groups = R // rows
        outer = rest[:-1] + ([(u, groups)] if groups > 1 else [])
        names = {v: self.tr.fresh("v") for v, _ in outer}

        def bind(o):
            b = o.base
            for v, _e in rest[:-1]:
                c = o.coeffs.get(v, 0)
                if c:
                    b = b + isa.var(names[v]) * c
            c = o.coeffs.get(u, 0)
            if groups > 1 and c:
                b = b + isa.var(names[u]) * (c * rows)
            return Opd(o.kind, o.dtype, o.value, o.buffer, b, {}, o.slot, row=c)

        emit = _Emitter(self, n, where)
        emit.rows = rows
        values = _value_vars(store.value)
        for v, e in rest:
            if any(v.same_as(w) for w in values):
                if v.same_as(u):
                    emit.outer_index.append((v, e, isa.var(names[u]) * rows if groups > 1 else isa.Affine(), 1))
                else:
                    emit.outer_index.append((v, e, isa.var(names[v]), 0))
        opmap = {_key(l): (bind(o), o.coeffs.get(vec, 0)) for l, o in zip(_loads(store.value), loads)}
        emit.index_vars = (vec,) if len(merged) == 1 else ()
        emit.evaluate(store.value, opmap, bind(dst))
        return self._wrap(emit.records, outer, names)

    def _wrap(self, records, rest, names) -> list:
        if not rest:
            return records
        isa = self.isa
        instrs = [r[1] for r in records]
        reads = set().union(*(set(r[2]) for r in records)) if records else set()
        writes = set().union(*(set(r[3]) for r in records)) if records else set()
        body = tuple(instrs)
        for v, e in reversed(rest):
            body = (isa.Loop(names[v], e, body),)
        return [("acc", body[0], sorted(reads, key=str), sorted(writes, key=str))]

    def reduction(self, nest, dst, red, vec, where) -> list:
        op, src = red
        loads = [self.operand(l, nest.loops) for l in _loads(src)]
        for o in loads:
            if o.coeffs.get(vec, 0) not in (0, 1):
                raise NpuMappingError(f"{where}: a reduction over a strided operand of '{o.buffer.name}' "
                                      f"(not supported yet)")
        n, merged, rest = self._geometry(nest.loops, vec, [dst, *loads])
        rest = self._results_inside(rest, dst, loads, nest.store, where)
        if rest and dst.coeffs.get(rest[-1][0], 0) == 1:  # contiguous results: dst written as a vector
            if self.tr.dense:
                raise _NotDense()
            self._dense_ok(rest[:-1], vec, [dst])
            if self.tr.layout_mode == "live":
                self._dense_ok(rest, vec, [Opd("num", dst.dtype), *loads])
        else:
            self._dense_ok(rest, vec, [dst, *loads])
            self._aligned_results(rest, dst, where)
        if rest and dst.coeffs.get(rest[-1][0], 0) == 1:
            rows = self._reduction_rows(rest, vec, n, dst, loads)
            if rows:
                return self._reduce_rows(op, src, dst, loads, vec, n, merged, rest, rows, where)
        names = {v: self.tr.fresh("v") for v, _ in rest}
        opmap = {_key(l): (self._bind(o, rest, names), o.coeffs.get(vec, 0)) for l, o in zip(_loads(src), loads)}
        if rest and dst.coeffs.get(rest[-1][0], 0) == 1:
            # contiguous results (a row sum into a vector): each row folded to one repeat of
            # partials, then one reduce over all rows and one combine
            u, ue = rest[-1]
            outer = rest[:-1]
            isa = self.isa
            lanes = self._lanes(dst.dtype)
            part = self.temp(dst.dtype, 90, ue * lanes)
            emit = _Emitter(self, n, where)
            emit.index_vars = (vec,) if len(merged) == 1 else ()
            emit.ntemp[dst.dtype] = 0
            part_opd = Opd("ref", dst.dtype, buffer=part, base=isa.var(names[u]) * lanes, slot=(part.name, None))
            emit.fold(op, src, opmap, part_opd)
            records = self._wrap(emit.records, [(u, ue)], names)
            dsto = self._bind(dst, outer, names)
            res = self.temp(dst.dtype, 91, ue)
            block = self.spec.block_elements(np.dtype(dst.dtype).itemsize)
            start = 0
            while start < ue:
                r = min(ue - start, self.spec.max_repeat)
                records.append(("acc", isa.Vector(f"reduce_{op}", res.ref(start), (part.ref(start * lanes),), r,
                                                  min(n, lanes), src_strides=(isa.Stride(block, lanes),)),
                                [(part.name, None)], [(res.name, None)]))
                start += r
            final = _Emitter(self, ue, where)
            combine = {"sum": "add"}.get(op, op)
            final.op(combine, dsto, [(dsto, 1), (Opd("ref", dst.dtype, buffer=res, base=isa.Affine(),
                                                     slot=(res.name, None)), 1)])
            records += final.records
            return self._wrap(records, outer, names)
        dstb = self._bind(dst, rest, names)
        emit = _Emitter(self, n, where)
        emit.index_vars = (vec,) if len(merged) == 1 else ()
        emit.reduce(op, src, opmap, dstb)
        return self._wrap(emit.records, rest, names)


    def _aligned_results(self, rest, dst, where) -> None:
        """A reduction's results written one at a time (each the destination of a vector
        instruction) must each start a 32-byte block: a typed refusal naming the statement
        where one would not (the padded layout gives a result a block only along a dim that
        its box pads; `_results_inside` writes contiguous results as a vector instead)."""
        block = self.spec.block_elements(np.dtype(dst.dtype).itemsize)
        bad = [v for v, e in rest if e > 1 and dst.coeffs.get(v, 0) % block]
        if bad or dst.base.const % block or any(c % block for _v, c in dst.base.terms):
            along = f" along loop {bad[0]}" if bad else ""
            raise NpuMappingError(f"{where}: a reduction whose results are written one at a time{along} at "
                                  f"addresses that are no {self.spec.ub_alignment}-byte boundary (not supported yet)")

    def _results_inside(self, rest, dst, loads, store, where) -> list:
        """The outer loops of a reduction whose results are contiguous along a loop outside
        another summed loop (`acc[c] += x[n, c, w]` over (c, n) around the vector loop w, a
        mean over axes (0, 2)): that loop moved innermost, so that the results are written as
        a vector (`reduction`'s contiguous results) rather than one element at a time, each at
        an address that is no 32-byte boundary. Each result keeps its order of updates: the
        statement writes only its destination, which it reads at the element it writes, and
        the loops moved over do not index it."""
        if len(rest) < 2 or dst.coeffs.get(rest[-1][0], 0):
            return rest
        found = [k for k, (v, e) in enumerate(rest) if e > 1 and dst.coeffs.get(v, 0) == 1 and
                 all(o.coeffs.get(v, 0) >= 0 for o in loads) and
                 not any(dst.coeffs.get(w, 0) for w, _f in rest[k + 1:])]
        if not found:
            return rest
        store_forms = [_affine(i, where) for i in store.indices]
        for ld in _loads(store.value):
            if ld.source.same_as(store.buffer) and [_affine(i, where) for i in ld.indices] != store_forms:
                return rest
        k = found[-1]
        return rest[:k] + rest[k + 1:] + [rest[k]]

    def _reduction_rows(self, rest, vec, n, dst, loads) -> int:
        """Rows of a row reduction (contiguous results: one value per row of the innermost
        outer loop) to fold into repeats together: a divisor R of the rows whose temps of R x n
        fit ROW_TEMP_BYTES, each group of R results starting a 32-byte block; 0 when the
        sources' row strides are not whole blocks."""
        if not self.tr.fold_rows or vec is None:
            return 0
        u, ue = rest[-1]
        for o in loads:
            c = o.coeffs.get(u, 0)
            block = self.spec.block_elements(np.dtype(o.dtype).itemsize)
            if c < 0 or (o.coeffs.get(vec, 0) and c % block):
                return 0
        size = np.dtype(dst.dtype).itemsize
        row_bytes = -(-n // 8) * 8 * 4
        cap = min(self.spec.max_repeat, max(self.tr.row_temp_bytes // row_bytes, 1))
        fits = [d for d in divisors_upto(ue, cap) if d == ue or (d * size) % self.spec.vector_block_bytes == 0]
        return max(fits) if fits and max(fits) >= 2 else 0

    def _reduce_rows_cost(self, n: int, rows: int, dtype: str) -> int:
        """Cycles of a group's partials and its `reduce_*` in the forms below (the cheaper of
        across and per row)."""
        spec, issue = self.spec, self.spec.vector_issue
        full, tail = divmod(n, self._lanes(dtype))
        across = max(full - 1, 1) * (issue + rows) + (issue + rows if tail else 0)
        per_row = rows * (spec.loop_cycles + issue + full + (issue + 1 if tail else 0))
        return (min(across, per_row) if full else 0) + issue + rows

    def _reduce_rows(self, op, src, dst, loads, vec, n, merged, rest, rows, where) -> list:
        """A row reduction over groups of `rows` rows at once: the source evaluated for all of
        them (`rows` mode), each row folded to one repeat of partials (vadd / vmax of its
        chunks across rows, or one `reduce_*_across` per row, whichever costs less), one
        `reduce_*` over the group (a value per row, the repeat's lanes reduced within it) and
        one combine into the results."""
        isa, spec = self.isa, self.spec
        dtype = dst.dtype
        combine = {"sum": "add"}.get(op, op)
        u, ue = rest[-1]
        groups = ue // rows
        outer = rest[:-1] + ([(u, groups)] if groups > 1 else [])
        names = {v: self.tr.fresh("v") for v, _ in outer}

        def bind(o, row: bool):
            b = o.base
            for v, _e in rest[:-1]:
                if o.coeffs.get(v, 0):
                    b = b + isa.var(names[v]) * o.coeffs[v]
            c = o.coeffs.get(u, 0)
            if groups > 1 and c:
                b = b + isa.var(names[u]) * (c * rows)
            return Opd(o.kind, o.dtype, o.value, o.buffer, b, {}, o.slot, row=c if row else 0)

        emit = _Emitter(self, n, where)
        emit.rows = rows
        emit.index_vars = (vec,) if len(merged) == 1 else ()
        opmap = {_key(l): (bind(o, True), o.coeffs.get(vec, 0)) for l, o in zip(_loads(src), loads)}
        val = emit.as_ref(emit.evaluate(src, opmap, None), dtype)[0]
        records = emit.records
        lanes = self._lanes(dtype)
        full, tail = divmod(n, lanes)
        block = spec.block_elements(np.dtype(dtype).itemsize)
        cost = block_reduce_cost(spec, val, n, rows)
        blocked = cost is not None and cost < self._reduce_rows_cost(n, rows, dtype)
        if blocked:  # a row per block: reduce_*_across + reduce_*_block per eight rows
            _cost, instrs, res = block_reduce(isa, spec, op, val, n, rows, lambda elems: self.temp(dtype, 92, elems),
                                              lambda elems: self.temp(dtype, 93, elems))
            records += instrs
        elif full == 0:
            part, width = val, n
        else:
            width = lanes
            buf = self.temp(dtype, 92, rows * lanes)
            part = Opd("ref", dtype, buffer=buf, base=isa.Affine(), slot=(buf.name, None), row=lanes)
            issue = spec.vector_issue
            across = (max(full - 1, 1) * (issue + rows) + (issue + rows if tail else 0))
            per_row = rows * (spec.loop_cycles + issue + full + (issue + 1 if tail else 0))
            if per_row < across and full <= spec.max_repeat:
                var = self.tr.fresh("r")
                r = isa.var(var)
                pref = buf.ref(r * lanes)
                body = [isa.Vector(f"reduce_{op}_across", pref, (val.buffer.ref(val.base + r * val.row),), full)]
                if tail:
                    body.append(isa.Vector(combine, pref, (pref, val.buffer.ref(val.base + r * val.row + full * lanes)),
                                           1, tail))
                records.append(("acc", isa.Loop(var, rows, tuple(body)), [val.slot], [part.slot]))
            else:
                chunk = _Emitter(self, lanes, where)
                chunk.rows = rows

                def at(k):
                    return (Opd("ref", dtype, buffer=val.buffer, base=val.base + k * lanes, slot=val.slot,
                                row=val.row), 1)

                if full == 1:
                    chunk.op("mul", part, [at(0), (Opd("num", dtype, value=1), 0)])
                else:
                    chunk.op(combine, part, [at(0), at(1)])
                for k in range(2, full):
                    chunk.op(combine, part, [(part, 1), at(k)])
                if tail:
                    chunk.n = tail
                    chunk.op(combine, part, [(part, 1), at(full)])
                records += chunk.records
        if not blocked:
            res = self.temp(dtype, 93, rows)
            records.append(("acc", isa.Vector(f"reduce_{op}", res.ref(0), (part.buffer.ref(part.base),), rows, width,
                                              src_strides=(isa.Stride(block, part.row),)), [part.slot],
                            [(res.name, None)]))
        final = _Emitter(self, rows, where)
        dsto = bind(dst, False)
        final.op(combine, dsto, [(dsto, 1), (Opd("ref", dtype, buffer=res, base=isa.Affine(), slot=(res.name, None)), 1)])
        return self._wrap(records + final.records, outer, names)
