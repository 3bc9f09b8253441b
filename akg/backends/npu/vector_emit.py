"""Expressions -> vector instructions in the NPU backend (`_Emitter`): vector operands (`Opd`),
each TIR operation as instructions over n elements (256-byte repeats, the tail by mask, rows
in 32-byte blocks), compares, selects and folds, the ops without an instruction expanded
(`_EXPANDED_CALLS`), and the dtypes the NPU computes in."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from akg.backends.npu.affine import _is_load
from akg.backends.npu.errors import NpuMappingError, NpuUnsupportedError
from akg.backends.npu.parse import _dt, _key
from akg.backends.npu.rowblocks import block_rows_cost, block_rows_op

if TYPE_CHECKING:
    from akg.backends.npu.vector import _Compute


NPU_DTYPES = ("float16", "float32", "int32")
BOOL_AS = "float16"  # a bool tensor lives in GM and UB as float16 0 / 1 (the kernel's edge converts)


def _npu_dtype(dtype) -> str:
    dtype = str(dtype)
    return BOOL_AS if dtype == "bool" else dtype


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min"}
_UNARY_CALLS = {"tirx.exp": "exp", "tirx.log": "ln", "tirx.sqrt": "sqrt", "tirx.rsqrt": "rsqrt", "tirx.fabs": "abs"}


def _in_fp32(x, body):
    """body(x) computed in float32 (an fp16 value is cast up and the result cast back)."""
    from tvm import tirx

    dt = _dt(x)
    if dt == "float32":
        return body(x)
    return tirx.Cast(dt, body(tirx.Cast("float32", x)))


def _expand_tanh(call):
    """tanh(x) = (e - 1) / (e + 1), e = exp(2 min(max(x, -10), 10)), in float32 (|x| >= 10
    is +-1 in float32; the absolute error is a few ulp of 1 near 0, well inside the checks)."""
    from tvm import tirx

    def body(x):
        c = lambda v: tirx.const(v, "float32")  # noqa: E731
        e = tirx.exp(tirx.Min(tirx.Max(x, c(-10.0)), c(10.0)) * c(2.0))
        return (e - c(1.0)) / (e + c(1.0))

    return _in_fp32(call.args[0], body)


def _expand_pow(call):
    """pow(x, y) with the vector instructions: a constant small integer exponent as products
    (and a reciprocal), 0.5 / -0.5 as sqrt / rsqrt; otherwise, in float32, exp(y ln |x|), 1
    where y == 0, and for x < 0 the sign of (-1)^y where y is an integer (int32 casts truncate)
    and NaN where it is not: NumPy's float power, case by case."""
    from tvm import tirx

    x, y = call.args
    dt = _dt(x)
    if isinstance(y, (tirx.FloatImm, tirx.IntImm)):
        v = float(y.value)
        if v == 0.5:
            return tirx.sqrt(x)
        if v == -0.5:
            return tirx.rsqrt(x)
        if v == int(v) and abs(v) <= 4:
            n = int(abs(v))
            r = tirx.const(1.0, dt)
            for _ in range(n):
                r = x if isinstance(r, tirx.FloatImm) else r * x
            return tirx.const(1.0, dt) / r if v < 0 else r

    def body(xy):
        xf, yf = xy
        c = lambda v: tirx.const(v, "float32")  # noqa: E731
        r = tirx.exp(yf * tirx.log(tirx.abs(xf)))
        r = tirx.Select(yf == c(0.0), c(1.0), r)
        yi = tirx.Cast("float32", tirx.Cast("int32", yf))
        half = tirx.Cast("float32", tirx.Cast("int32", yf * c(0.5)))
        odd = yi - half * c(2.0) != c(0.0)
        negative = tirx.Select(yi == yf, tirx.Select(odd, c(0.0) - r, r), c(float("nan")))
        return tirx.Select(xf < c(0.0), negative, r)

    if dt == "float32" and _dt(y) == "float32":
        return body((x, y))
    if dt not in ("float16", "float32") or _dt(y) not in ("float16", "float32"):
        return None
    return tirx.Cast(dt, body((tirx.Cast("float32", x), tirx.Cast("float32", y))))


_EXPANDED_CALLS = {"tirx.tanh": _expand_tanh, "tirx.pow": _expand_pow}


@dataclass
class Opd:
    """A vector operand: a number, or a buffer address with its coefficient along the vector
    loop (1: contiguous, 0: broadcast) and along the other loops."""

    kind: str  # "num" | "ref"
    dtype: str
    value: float = 0.0
    buffer: object = None
    base: object = None  # isa Affine over the outer loops (the region's own loops excluded)
    coeffs: dict = field(default_factory=dict)  # region loop Var -> element coefficient
    slot: tuple = None
    row: int = 0  # element stride between rows (rows folded into repeats)


class _Emitter:
    """Vector instructions over `n` elements (chunks of 256-byte repeats, the tail by mask)."""

    def __init__(self, comp: _Compute, n: int, where: str):
        self.c, self.isa, self.n, self.where = comp, comp.isa, n, where
        self.records = []
        self.ntemp = defaultdict(int)
        self.index_vars = ()  # loop vars whose values are the vector's element index
        self.outer_index = []  # (var, extent, base, row): outer loops whose index is a value (`loop_index`)
        self.rows = 0  # > 0: every op runs over that many rows, one repeat each
        self.memo = {}  # (expression text, dtype) -> its operand, computed once per statement

    def tmp(self, dtype: str) -> Opd:
        k = self.ntemp[dtype]
        self.ntemp[dtype] += 1
        if self.rows:
            block = self.c.spec.block_elements(np.dtype(dtype).itemsize)
            stride = -(-self.n // block) * block
            buf = self.c.temp(dtype, k, self.rows * stride)
            return Opd("ref", dtype, buffer=buf, base=self.isa.Affine(), slot=(buf.name, None), row=stride)
        buf = self.c.temp(dtype, k, self.n)
        return Opd("ref", dtype, buffer=buf, base=self.isa.Affine(), slot=(buf.name, None))

    def _src(self, o, contiguous: bool, offset: int):
        isa = self.isa
        if o[0].kind == "num":
            return o[0].value
        opd, c = o
        ref = opd.buffer.ref(opd.base + (offset if c else 0))
        return ref if c else isa.Bcast(ref)

    def op(self, name: str, dst: Opd, srcs: list, lanes_dtype=None):
        """dst = name(srcs) over n elements; srcs are (Opd, coeff) pairs. With `rows`: the
        same over that many rows (operands at their `row` strides, `_rows_op`)."""
        # lanes of the widest operand that is a vector (a broadcast is one scalar, as in the ISA)
        sizes = [np.dtype(dst.dtype).itemsize] + [np.dtype(o.dtype).itemsize for o, c in srcs if o.kind == "ref" and c]
        lanes = self.c.spec.vector_bytes // max(sizes)
        n = self.n
        reads = [s[0].slot for s in srcs if s[0].kind == "ref"]
        if self.rows:
            self._rows_op(name, dst, srcs, lanes, reads)
            return
        for instr in self._ranges(name, dst, srcs, n, lanes):
            self.records.append(("acc", instr, reads, [dst.slot]))

    def _rows_op(self, name: str, dst: Opd, srcs: list, lanes: int, reads: list) -> None:
        """`op` over `rows` rows of n elements, in the cheapest of three forms: one range over
        all rows when every operand's rows lie back to back (row stride n, broadcasts the same
        for every row); across rows (one instruction per repeat-wide chunk of the row, repeat =
        rows, operands at their row strides); per row (a loop over the rows, each one range)."""
        isa, spec, n, rows = self.isa, self.c.spec, self.n, self.rows
        back_to_back = dst.row == n and all(o.kind == "num" or (o.row == n if c else o.row == 0) for o, c in srcs)
        if back_to_back:
            for instr in self._ranges(name, dst, srcs, rows * n, lanes):
                self.records.append(("acc", instr, reads, [dst.slot]))
            return
        chunks = -(-n // lanes)
        across = chunks * (spec.vector_issue + rows)
        per_row = rows * (spec.loop_cycles + sum(spec.vector_issue + r for _s, r, _m in self._chunks(n, lanes)))
        blocked = block_rows_cost(spec, dst, srcs, n, rows)
        if blocked is not None and blocked < min(across, per_row):
            for instr in block_rows_op(isa, spec, name, dst, srcs, n, rows):
                self.records.append(("acc", instr, reads, [dst.slot]))
            return
        if per_row < across:
            var = self.c.tr.fresh("r")

            def at_row(o):
                return Opd(o.kind, o.dtype, o.value, o.buffer, o.base + isa.var(var) * o.row if o.kind == "ref" else None,
                           {}, o.slot)

            body = tuple(self._ranges(name, at_row(dst), [(at_row(o), c) for o, c in srcs], n, lanes))
            self.records.append(("acc", isa.Loop(var, rows, body), reads, [dst.slot]))
            return

        def blk(o):
            return spec.block_elements(np.dtype(o.dtype).itemsize)

        for start in range(0, n, lanes):
            mask = None if n - start >= lanes else n - start
            srcs_t, strides = [], []
            for o, c in srcs:
                if o.kind == "num":
                    srcs_t.append(o.value)
                    strides.append(None)
                elif c:
                    srcs_t.append(o.buffer.ref(o.base + start))
                    strides.append(isa.Stride(blk(o), o.row))
                else:
                    srcs_t.append(isa.Bcast(o.buffer.ref(o.base), 0, o.row))
                    strides.append(None)
            instr = isa.Vector(name, dst.buffer.ref(dst.base + start), tuple(srcs_t), rows, mask,
                               dst_stride=isa.Stride(blk(dst), dst.row), src_strides=tuple(strides))
            self.records.append(("acc", instr, reads, [dst.slot]))

    def _chunks(self, count: int, lanes: int) -> list:
        """(start, repeat, mask) of the instructions covering `count` contiguous elements:
        repeats of `lanes`, at most max_repeat each, the tail by mask."""
        full, tail = divmod(count, lanes)
        out, start = [], 0
        while full > 0:
            r = min(full, self.c.spec.max_repeat)
            out.append((start, r, None))
            start += r * lanes
            full -= r
        if tail:
            out.append((start, 1, tail))
        return out

    def _ranges(self, name: str, dst: Opd, srcs: list, count: int, lanes: int):
        """The instructions of `name` over `count` contiguous elements from each operand's base
        (broadcasts: one scalar for every lane)."""
        for start, repeat, mask in self._chunks(count, lanes):
            srcs_t = tuple(self._src(s, True, start) for s in srcs)
            yield self.isa.Vector(name, dst.buffer.ref(dst.base + start), srcs_t, repeat, mask)

    def as_ref(self, o, dtype: str):
        """An operand as a contiguous vector (numbers and broadcasts filled into a temp)."""
        opd, c = o
        if opd.kind == "ref" and c:
            return o
        t = self.tmp(dtype)
        if opd.kind == "num":
            self.op("dup", t, [(opd, 0)])
        else:
            self.op("dup", t, [o])
        return (t, 1)

    def evaluate(self, expr, opmap, dst: Opd | None):
        """Evaluate expr over n elements into dst (or a temp); returns the operand. A
        subexpression that occurs twice (`(x - mean) * (x - mean)`) is computed once: its
        temp is never reused within the statement."""
        if dst is not None or _is_load(expr) or type(expr).__name__ in ("IntImm", "FloatImm", "Var"):
            return self._evaluate(expr, opmap, dst)
        key = (str(expr), _dt(expr))
        if key not in self.memo:
            self.memo[key] = self._evaluate(expr, opmap, None)
        return self.memo[key]

    def _evaluate(self, expr, opmap, dst: Opd | None):
        from tvm import tirx

        dtype = _dt(expr)
        if dtype == "bool":
            return self._bool_value(expr, opmap, dst)
        if dtype not in NPU_DTYPES:
            raise NpuUnsupportedError(f"{self.where}: a {dtype} value (not supported yet)")

        def into(res):
            """Make sure the result lands in dst when one is given."""
            if dst is None:
                return res
            opd, c = res
            if opd.kind == "ref" and c and opd.buffer is dst.buffer and opd.base == dst.base:
                return res
            if opd.kind == "ref" and opd.dtype != dst.dtype:
                self.op("cast", dst, [self.as_ref(res, opd.dtype)])
                return (dst, 1)
            if opd.kind == "num":
                self.op("dup", dst, [res])
            elif not c:
                self.op("dup", dst, [res])
            else:
                self.op("mul", dst, [res, (Opd("num", dtype, value=1), 0)])
            return (dst, 1)

        def target():
            return dst if dst is not None else self.tmp(dtype)

        if isinstance(expr, (tirx.FloatImm, tirx.IntImm)):
            return into((Opd("num", dtype, value=float(expr.value) if dtype != "int32" else int(expr.value)), 0))
        if _is_load(expr):
            return into(opmap[_key(expr)])
        if isinstance(expr, tirx.Cast) and _dt(expr.value) == "bool":
            return into(self.indicator(expr.value, opmap, dtype))
        if isinstance(expr, tirx.Cast):
            src = self.evaluate(expr.value, opmap, None)
            if _dt(expr.value) == dtype or src[0].dtype == dtype:
                return into(src)
            if src[0].kind == "num":
                return into((Opd("num", dtype, value=src[0].value), 0))
            small = self._cast_broadcast(src, dtype)
            if small is not None:
                return into(small)
            src = self.as_ref(src, src[0].dtype)
            t = target()
            self.op("cast", t, [src])
            return (t, 1)
        name = type(expr).__name__
        if name in _BINARY:
            a = self.evaluate(expr.a, opmap, None)
            b = self.evaluate(expr.b, opmap, None)
            op = _BINARY[name]
            if a[0].kind == "num" and b[0].kind == "num":
                val = {"add": a[0].value + b[0].value, "sub": a[0].value - b[0].value, "mul": a[0].value * b[0].value,
                       "max": max(a[0].value, b[0].value), "min": min(a[0].value, b[0].value)}.get(op)
                if val is None:
                    a = self.as_ref(a, dtype)
                else:
                    return into((Opd("num", dtype, value=val), 0))
            if op == "max" and a[0].kind == "num" and a[0].value == 0 and b[0].kind == "ref":
                a, b = b, a  # relu is max(0, v) (graph/ops/elementwise.py)
            if op == "max" and b[0].kind == "num" and b[0].value == 0 and a[0].kind == "ref":
                a = self.as_ref(a, dtype)
                t = target()
                self.op("relu", t, [a])
                return (t, 1)
            if not a[1] and not b[1] and (a[0].kind == "ref" or b[0].kind == "ref"):
                pass  # both broadcast: fine, the result is a full vector
            t = target()
            self.op(op, t, [a, b])
            return (t, 1)
        if isinstance(expr, tirx.Var):
            return into(self.loop_index(expr))
        if name == "Select":
            return into(self.select(expr, opmap, dtype))
        if name == "Call" and expr.op.name.endswith("if_then_else"):
            return into(self.choose(expr.args[0], expr.args[1], expr.args[2], opmap, dtype))
        if name == "Call" and expr.op.name in _EXPANDED_CALLS:
            expanded = _EXPANDED_CALLS[expr.op.name](expr)
            if expanded is not None:
                return self.evaluate(expanded, opmap, dst)
        if name == "Call":
            opname = _UNARY_CALLS.get(expr.op.name)
            if opname is None:
                raise NpuUnsupportedError(
                    f"{self.where}: '{expr.op.name}' has no NPU vector instruction (not supported yet)")
            a = self.as_ref(self.evaluate(expr.args[0], opmap, None), dtype)
            t = target()
            self.op(opname, t, [a])
            return (t, 1)
        raise NpuUnsupportedError(f"{self.where}: {name} has no NPU vector instruction (not supported yet)")

    def _cast_broadcast(self, src, dtype: str):
        """A broadcast operand (one value, or one per row) cast on its own values, not on a
        vector filled with them: the result is again a broadcast. None when the values do not
        start a 32-byte block (then the filled vector is cast)."""
        opd, c = src
        if opd.kind != "ref" or c:
            return None
        count = self.rows if self.rows and opd.row == 1 else 1 if not self.rows or opd.row == 0 else 0
        block = self.c.spec.block_elements(np.dtype(opd.dtype).itemsize)
        if not count or opd.base.const % block or any(k % block for _v, k in opd.base.terms):
            return None
        k = self.ntemp[dtype]
        self.ntemp[dtype] += 1
        buf = self.c.temp(dtype, k, count)
        out = Opd("ref", dtype, buffer=buf, base=self.isa.Affine(), slot=(buf.name, None), row=1 if count > 1 else 0)
        lanes = self.c.spec.vector_bytes // max(np.dtype(dtype).itemsize, np.dtype(opd.dtype).itemsize)
        for instr in self._ranges("cast", out, [(opd, 1)], count, lanes):
            self.records.append(("acc", instr, [opd.slot], [out.slot]))
        return (out, 0)

    def _range_op(self, op: str, dst_ref, srcs, count: int):
        """One vector op over `count` contiguous elements (repeats, the tail by mask)."""
        isa = self.isa
        lanes = self.c.spec.vector_bytes // np.dtype(dst_ref.buffer.dtype).itemsize
        full, tail = divmod(count, lanes)
        start = 0
        while full > 0 or tail:
            if full > 0:
                r, mask = min(full, self.c.spec.max_repeat), None
                full -= r
            else:
                r, mask, tail = 1, tail, 0
            shifted = tuple(x.buffer.ref(x.offset + start) if isinstance(x, type(dst_ref)) else x for x in srcs)
            yield isa.Vector(op, dst_ref.buffer.ref(dst_ref.offset + start), shifted, r, mask)
            start += r * lanes

    def iota(self, dtype: str, count: int = 0) -> Opd:
        """A UB buffer holding 0, 1, ..., count-1 (default n), made once per region before its
        statements (scalar moves for the first block, then doubling by vector adds)."""
        isa = self.isa
        count = count or self.n
        key = (dtype, count)
        buf = self.c.iotas.get(key)
        if buf is None:
            buf = self.c.tr.alloc(f"iota_{dtype}", (max(count, self.c._lanes(dtype)),), dtype)
            self.c.iotas[key] = buf
            slot = (buf.name, None)
            block = self.c.spec.block_elements(np.dtype(dtype).itemsize)
            for i in range(min(count, block)):
                self.c.prelude.append(("acc", isa.Scalar("mov", buf.ref(i), (float(i),)), [], [slot]))
            m = block
            while m < count:
                c = min(m, count - m)
                for instr in self._range_op("add", buf.ref(m), (buf.ref(0), float(m)), c):
                    self.c.prelude.append(("acc", instr, [slot], [slot]))
                m *= 2
        return Opd("ref", dtype, buffer=buf, base=isa.Affine(), slot=(buf.name, None))

    def loop_index(self, var):
        """The value of a loop index in the expression: along the vector loop an index vector;
        along an outer loop of the statement one element of an index vector of that loop's
        extent, read at the loop's own index (a broadcast: each instruction sees one value)."""
        if any(var.same_as(v) for v in self.index_vars):
            return (self.iota(_dt(var)), 1)
        for v, extent, base, row in self.outer_index:
            if var.same_as(v):
                opd = self.iota(_dt(var), extent)
                return (Opd("ref", opd.dtype, buffer=opd.buffer, base=base, slot=opd.slot, row=row), 0)
        raise NpuMappingError(f"{self.where}: loop index {var} as a value along a merged or outer loop "
                              f"(not supported yet)")

    # bool values: 0 / 1 in a float dtype

    _CMP = ("EQ", "NE", "LT", "LE", "GT", "GE")

    def _bool_value(self, expr, opmap, dst):
        """A bool expression into a bool tensor (float16 0 / 1) or a temp."""
        if _is_load(expr):
            res = opmap[_key(expr)]
        else:
            res = self.indicator(expr, opmap, dst.dtype if dst is not None else BOOL_AS)
        if dst is None:
            return res
        opd, c = res
        if opd.kind == "ref" and c and opd.buffer is dst.buffer and opd.base == dst.base:
            return res
        if opd.kind == "num" or not c:
            self.op("dup", dst, [res])
        elif opd.dtype != dst.dtype:
            self.op("cast", dst, [res])
        else:
            self.op("mul", dst, [res, (Opd("num", dst.dtype, value=1), 0)])
        return (dst, 1)

    def indicator(self, cond, opmap, dtype: str):
        """A bool expression as 0 / 1 in float `dtype`."""
        from tvm import tirx

        kind = type(cond).__name__
        one = (Opd("num", dtype, value=1.0), 0)
        if _is_load(cond):
            o = opmap[_key(cond)]
            if o[0].dtype == dtype:
                return o
            o = self.as_ref(o, o[0].dtype)
            t = self.tmp(dtype)
            self.op("cast", t, [o])
            return (t, 1)
        if isinstance(cond, (tirx.IntImm,)):
            return (Opd("num", dtype, value=float(bool(cond.value))), 0)
        if kind == "Not":
            a = self.as_ref(self.indicator(cond.a, opmap, dtype), dtype)
            t = self.tmp(dtype)
            self.op("sub", t, [one, a])
            return (t, 1)
        if kind in ("And", "Or"):
            a = self.as_ref(self.indicator(cond.a, opmap, dtype), dtype)
            b = self.indicator(cond.b, opmap, dtype)
            t = self.tmp(dtype)
            self.op("mul" if kind == "And" else "max", t, [a, b])
            return (t, 1)
        if isinstance(cond, tirx.Cast):  # x != 0
            cd = _dt(cond.value)
            return self._compare("NE", cond.value, tirx.const(0, cd), opmap, dtype)
        if kind in self._CMP:
            return self._compare(kind, cond.a, cond.b, opmap, dtype)
        if kind == "Call" and str(cond.op.name) in ("tirx.isnan", "tirx.isinf", "tirx.isfinite"):
            return self._classify(str(cond.op.name).split(".")[-1], cond.args[0], opmap, dtype)
        raise NpuUnsupportedError(f"{self.where}: the bool value `{cond}` has no NPU vector mapping "
                                  f"(not supported yet)")

    def _classify(self, test: str, arg, opmap, dtype: str):
        """isnan(x) as x != x (only NaN differs from itself), isinf(x) as |x| == inf and
        isfinite(x) as |x| < inf (false for NaN), each one `cmp_*` into a 0 / 1 temp."""
        xd = _dt(arg)
        if xd not in ("float16", "float32"):
            return (Opd("num", dtype, value=float(test == "isfinite")), 0)  # integers: finite, never NaN
        x = self.as_ref(self.evaluate(arg, opmap, None), xd)
        t = self.tmp(dtype)
        if test == "isnan":
            self.op("cmp_ne", t, [x, x])
            return (t, 1)
        a = self.tmp(xd)
        self.op("abs", a, [x])
        self.op("cmp_eq" if test == "isinf" else "cmp_lt", t, [(a, 1), (Opd("num", xd, value=float("inf")), 0)])
        return (t, 1)

    def _cmp_operand(self, e, opmap):
        if type(e).__name__ == "Var":
            return self.loop_index(e)
        return self.evaluate(e, opmap, None)

    def _compare(self, kind, ea, eb, opmap, dtype: str):
        """a cmp b as 0 / 1 in `dtype`: one vector compare (`cmp_*`) into a condition temp."""
        a = self._cmp_operand(ea, opmap)
        b = self._cmp_operand(eb, opmap)
        if a[0].kind == "num" and b[0].kind == "num":
            va, vb = a[0].value, b[0].value
            res = {"EQ": va == vb, "NE": va != vb, "LT": va < vb, "LE": va <= vb, "GT": va > vb, "GE": va >= vb}[kind]
            return (Opd("num", dtype, value=float(res)), 0)
        refs = [o[0].dtype for o in (a, b) if o[0].kind == "ref"]
        cd = refs[0]
        if cd == "float16" and "float32" in refs:
            cd = "float32"
        a, b = (self._as_dtype(o, cd) for o in (a, b))
        t = self.tmp(dtype)
        self.op(f"cmp_{kind.lower()}", t, [a, b])
        return (t, 1)

    def _as_dtype(self, o, dtype: str):
        if o[0].kind == "num" or o[0].dtype == dtype:
            return o
        o = self.as_ref(o, o[0].dtype)
        t = self.tmp(dtype)
        self.op("cast", t, [o])
        return (t, 1)

    def choose(self, cond, tv_e, fv_e, opmap, dtype: str):
        """cond ? tv : fv: the condition into a 0 / 1 buffer (compares: `cmp_*`; not / and / or:
        1 - x, mul, max), then one `sel` per chunk; a lane reads only the branch it takes, so a
        NaN or inf in the other branch stays out."""
        if dtype not in NPU_DTYPES:
            raise NpuUnsupportedError(f"{self.where}: a {dtype} select (not supported yet)")
        tv = self.evaluate(tv_e, opmap, None)
        fv = self.evaluate(fv_e, opmap, None)
        ind = self.indicator(cond, opmap, dtype)
        if ind[0].kind == "num":  # a constant condition
            return tv if ind[0].value else fv
        if tv[0].kind == "num" and fv[0].kind == "num" and (tv[0].value, fv[0].value) == (1.0, 0.0):
            return ind if ind[0].dtype == dtype else self._as_dtype(self.as_ref(ind, ind[0].dtype), dtype)
        tv, fv = self._as_dtype(tv, dtype), self._as_dtype(fv, dtype)
        t = self.tmp(dtype)
        self.op("sel", t, [self.as_ref(ind, ind[0].dtype), tv, fv])
        return (t, 1)

    def select(self, expr, opmap, dtype: str):
        """select(cond, tv, fv): as `choose`."""
        return self.choose(expr.condition, expr.true_value, expr.false_value, opmap, dtype)

    def fold(self, op: str, src, opmap, part: Opd):
        """part[0:lanes] = src folded lane-wise across its repeats (the first n lanes when
        n is shorter than a repeat)."""
        isa = self.isa
        dtype = part.dtype
        combine = {"sum": "add"}.get(op, op)
        val = self.as_ref(self.evaluate(src, opmap, None), dtype)[0]
        lanes = self.c.spec.vector_bytes // np.dtype(dtype).itemsize
        full, tail = divmod(self.n, lanes)
        pref = part.buffer.ref(part.base)
        if full == 0:
            self.records.append(("acc", isa.Vector("mul", pref, (val.buffer.ref(val.base), 1), 1, tail),
                                 [val.slot], [part.slot]))
            return
        start, first = 0, True
        while full > 0:
            r = min(full, self.c.spec.max_repeat)
            if first:
                self.records.append(("acc", isa.Vector(f"reduce_{op}_across", pref, (val.buffer.ref(val.base),), r),
                                     [val.slot], [part.slot]))
            else:
                t = self.tmp(dtype)
                self.records.append(("acc", isa.Vector(f"reduce_{op}_across", t.buffer.ref(t.base),
                                                       (val.buffer.ref(val.base + start),), r), [val.slot], [t.slot]))
                self.records.append(("acc", isa.Vector(combine, pref, (pref, t.buffer.ref(t.base))),
                                     [part.slot, t.slot], [part.slot]))
            first = False
            start += r * lanes
            full -= r
        if tail:
            self.records.append(("acc", isa.Vector(combine, pref, (pref, val.buffer.ref(val.base + start)), 1, tail),
                                 [part.slot, val.slot], [part.slot]))

    def reduce(self, op: str, src, opmap, dst: Opd):
        """dst = dst op reduce(src over n)."""
        isa = self.isa
        dtype = dst.dtype
        combine = {"sum": "add"}.get(op, op)
        val = self.evaluate(src, opmap, None)
        val = self.as_ref(val, dtype)
        opd = val[0]
        lanes = self.c.spec.vector_bytes // np.dtype(dtype).itemsize
        n = self.n
        full, tail = divmod(n, lanes)
        part = opd
        reads = [opd.slot]
        if full > 1 or (full == 1 and tail):
            acc = self.tmp(dtype)
            start, first = 0, True
            while full > 0:
                r = min(full, self.c.spec.max_repeat)
                target_ = acc if first else self.tmp(dtype)
                self.records.append(("acc", isa.Vector(f"reduce_{op}_across", target_.buffer.ref(target_.base),
                                                       (opd.buffer.ref(opd.base + start),), r), reads, [target_.slot]))
                if not first:
                    self.records.append(("acc", isa.Vector(combine, acc.buffer.ref(acc.base),
                                                           (acc.buffer.ref(acc.base), target_.buffer.ref(target_.base))),
                                         [acc.slot, target_.slot], [acc.slot]))
                first = False
                start += r * lanes
                full -= r
            if tail:
                self.records.append(("acc", isa.Vector(combine, acc.buffer.ref(acc.base),
                                                       (acc.buffer.ref(acc.base), opd.buffer.ref(opd.base + start)),
                                                       1, tail), [acc.slot, opd.slot], [acc.slot]))
            part, mask = acc, lanes
        else:
            mask = n if n < lanes else None
        one = self.tmp(dtype)
        self.records.append(("acc", isa.Vector(f"reduce_{op}", one.buffer.ref(one.base), (part.buffer.ref(part.base),),
                                               1, mask), [part.slot], [one.slot]))
        self.records.append(("acc", isa.Vector(combine, dst.buffer.ref(dst.base),
                                               (dst.buffer.ref(dst.base), one.buffer.ref(one.base)), 1, 1),
                             [dst.slot, one.slot], [dst.slot]))
