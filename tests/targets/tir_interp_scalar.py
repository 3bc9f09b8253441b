"""Scalar expressions of tir_interp.py (a mixin of TirInterpreter): each scalar expression
tree becomes Python source compiled into one lambda; integer ranges let it skip bounds and
wrap-around checks."""

from __future__ import annotations


import numpy as np
from tvm.tirx.buffer import is_buffer_var

from tir_interp_values import (
    _BINARY_MATH, _COMPARE, _FLOAT_TYPES, _LLVM_INTRINSICS, _MAX_DEPTH, _Pair, _RING, _UNARY_MATH, _add,
    _check_reinterpret, _dtype, _float_to_int, _int_range, _kind, _llvm_intrinsic, _scalar_reinterpret,
    _shift_checker, _unsupported, _wrapper)


class ScalarExprs:
    """TirInterpreter's scalar expressions as generated Python source (uses its slots and `vec`)."""

    def expr(self, e):
        """A function env -> value of `e`: a generated lambda for scalars, a closure over NumPy
        arrays for vectors and for values that vary along the lanes of a batched loop nest."""
        if _dtype(e)[1] > 1 or (self._batch is not None and self._batch.refs(e)):
            return self.vec(e)
        return self.lam(e)

    def lam(self, e):
        """`e` (a scalar) as one generated lambda."""
        if self._let_stack:  # enclosing Let variables are read from env by this separate lambda
            for entry in self._let_stack:
                entry[0] = True
        saved, depth = self._let_local, self._depth
        self._let_local, self._depth = {}, 0
        try:
            text = self.src(e)
        finally:
            self._let_local, self._depth = saved, depth
        return eval(compile(f"lambda env: {text}", f"<tir_interp {type(e).__name__}>", "eval"), self._ns)

    def src_top(self, e) -> str:
        """Source of a statement's scalar operand (its own nesting budget)."""
        saved = self._depth
        self._depth = 0
        try:
            return self.src(e)
        finally:
            self._depth = saved

    def src(self, e) -> str:
        dtype, lanes = _dtype(e)
        if lanes > 1:
            raise _unsupported("a vector value where a scalar is expected", e)
        if self._depth > _MAX_DEPTH:
            return f"{self._bind(self.lam(e), '_f')}(env)"
        method = getattr(self, "_g_" + type(e).__name__, None)
        if method is None:
            raise _unsupported(f"expression {type(e).__name__}", e)
        self._depth += 1
        try:
            return method(e, dtype)
        finally:
            self._depth -= 1

    def _fallback(self, e) -> str:
        """A scalar computed by a vector closure (a lane of a Shuffle, a reinterpret)."""
        for entry in self._let_stack:
            entry[0] = True
        return f"{self._bind(self.vec(e), '_v')}(env)"

    def _wrap_src(self, text: str, dtype: str, rng) -> str:
        lo, hi = _int_range(dtype)
        if rng[0] is not None and rng[1] is not None and lo <= rng[0] and rng[1] <= hi:
            return text
        t = self._tmp()
        return f"({t} if {lo} <= ({t} := {text}) <= {hi} else {self._bind(_wrapper(dtype), '_w')}({t}))"

    def _g_IntImm(self, e, dtype):
        if dtype == "bool":
            return "True" if e.value else "False"
        return f"({int(e.value)})"

    def _g_FloatImm(self, e, dtype):
        key = (dtype, float(e.value).hex())
        if key not in self._const_names:
            self._const_names[key] = self._bind(_FLOAT_TYPES[dtype](e.value), "_c")
        return self._const_names[key]

    def _g_StringImm(self, e, dtype):
        raise _unsupported("string immediates in expressions", e)

    def _g_Var(self, e, dtype):
        if is_buffer_var(e):
            raise _unsupported(f"buffer {e.name} used as a value")
        h = e.__chandle__()
        if h in self._let_local:
            return self._let_local[h]
        return f"env[{self._use(e)}]"

    def _g_Let(self, e, dtype):
        if _dtype(e.var)[1] > 1:
            return self._fallback(e)
        value = self.src(e.value)
        slot = self._define(e.var)
        h = e.var.__chandle__()
        if _kind(_dtype(e.var)[0]) == "int":
            self._bounds[h] = self._range(e.value)
        local = f"_l{slot}"
        saved = self._let_local.get(h)
        self._let_local[h] = local
        entry = [False]
        self._let_stack.append(entry)
        try:
            body = self.src(e.body)
        finally:
            self._let_stack.pop()
            if saved is None:
                del self._let_local[h]
            else:
                self._let_local[h] = saved
        if entry[0]:  # also read from env, by a separately generated lambda or closure
            return f"({body} if (({local} := {value}) is not None and env.__setitem__({slot}, {local}) is None) else None)"
        return f"({body} if ({local} := {value}) is not None else None)"

    def _index_src(self, index, name: str, axis: int) -> str:
        text = self.src(index)
        lo = self._range(index)[0]
        if lo is not None and lo >= 0:
            return text
        t = self._tmp()
        return f"({t} if ({t} := {text}) >= 0 else _neg({t}, {name!r}, {axis}))"

    def _access_src(self, slot: int, name: str, indices: list, as_python: bool) -> str:
        for i in indices:
            if _kind(_dtype(i)[0]) != "int":
                raise _unsupported(f"an index of dtype {_dtype(i)[0]} into {name}", i)
        parts = [self._index_src(i, name, axis) for axis, i in enumerate(indices)]
        if as_python:
            return f"env[{slot}].item({', '.join(parts)})"
        return f"env[{slot}][{', '.join(parts) if parts else '()'}]"

    def _g_TensorLoad(self, e, dtype):
        buf = e.source
        if not is_buffer_var(buf):
            raise _unsupported("a load from something other than a buffer", e)
        idx = list(e.indices)
        name = str(buf.name)
        if len(idx) != len(buf.shape):
            raise _unsupported(f"a load from {name} with {len(idx)} indices for {len(buf.shape)} dims", e)
        if any(_dtype(i)[1] > 1 for i in idx):
            return self._fallback(e)
        # ints and bools come back as Python values (item), floats as NumPy scalars of their dtype
        return self._access_src(self._use(buf), name, idx, as_python=_kind(dtype) != "float")

    def _ring_src(self, e, dtype) -> str:
        """Add/Sub/Mul trees of one integer dtype computed exactly (wrapping once at the root is
        the same as wrapping every operation)."""
        t = type(e).__name__
        if t in _RING and _dtype(e) == (dtype, 1):
            self._depth += 1
            try:
                return f"({self._ring_src(e.a, dtype)} {_RING[t]} {self._ring_src(e.b, dtype)})"
            finally:
                self._depth -= 1
        return self.src(e)

    def _arith(self, e, dtype):
        kind = _kind(dtype)
        op = _RING[type(e).__name__]
        if kind == "float":
            return f"({self.src(e.a)} {op} {self.src(e.b)})"
        if kind == "bool":
            raise _unsupported(f"{type(e).__name__} of booleans", e)
        return self._wrap_src(self._ring_src(e, dtype), dtype, self._range(e))

    _g_Add = _g_Sub = _g_Mul = _arith

    def _divmod(self, e, dtype):
        t = type(e).__name__
        kind = _kind(dtype)
        a, b = self.src(e.a), self.src(e.b)
        if kind == "bool":
            raise _unsupported(f"{t} of booleans", e)
        if kind == "float":
            return {"Div": f"({a} / {b})", "Mod": f"_fmod({a}, {b})", "FloorDiv": f"_floor({a} / {b})",
                    "FloorMod": f"_ffmod({a}, {b})"}[t]
        c = self._int_const(e.b)
        lo = self._range(e.a)[0]
        nonneg = lo is not None and lo >= 0
        if c is not None and c > 0:
            if t == "FloorDiv" or (t == "Div" and nonneg):
                return f"({a} // {c})"
            if t == "FloorMod" or (t == "Mod" and nonneg):
                return f"({a} % {c})"
        call = {"Div": "_tdiv", "Mod": "_tmod", "FloorDiv": "_fdiv", "FloorMod": "_fmodi"}[t]
        text = f"{call}({a}, {b})"
        return self._wrap_src(text, dtype, (None, None)) if t in ("Div", "FloorDiv") else text

    _g_Div = _g_Mod = _g_FloorDiv = _g_FloorMod = _divmod

    def _minmax(self, e, dtype):
        op = "<" if type(e).__name__ == "Min" else ">"
        ta, tb = self._tmp(), self._tmp()
        return f"({ta} if ({ta} := {self.src(e.a)}) {op} ({tb} := {self.src(e.b)}) else {tb})"

    _g_Min = _g_Max = _minmax

    def _compare(self, e, dtype):
        t = type(e).__name__
        a, b = self.src(e.a), self.src(e.b)
        if t == "NE" and _kind(_dtype(e.a)[0]) == "float":  # LLVM's fcmp one: false when either is NaN
            ta, tb = self._tmp(), self._tmp()
            return f"(({ta} := {a}) < ({tb} := {b}) or {ta} > {tb})"
        return f"({a} {_COMPARE[t]} {b})"

    _g_EQ = _g_NE = _g_LT = _g_LE = _g_GT = _g_GE = _compare

    def _g_And(self, e, dtype):
        return f"({self.src(e.a)} and {self.src(e.b)})"

    def _g_Or(self, e, dtype):
        return f"({self.src(e.a)} or {self.src(e.b)})"

    def _g_Not(self, e, dtype):
        return f"(not {self.src(e.a)})"

    def _bitwise(self, e, dtype):
        if _kind(dtype) == "float":
            raise _unsupported(f"{type(e).__name__} of {dtype}", e)
        op = {"BitwiseAnd": "&", "BitwiseOr": "|", "BitwiseXor": "^"}[type(e).__name__]
        return f"({self.src(e.a)} {op} {self.src(e.b)})"  # stays in range (two's complement)

    _g_BitwiseAnd = _g_BitwiseOr = _g_BitwiseXor = _bitwise

    def _g_BitwiseNot(self, e, dtype):
        if _kind(dtype) != "int":
            raise _unsupported(f"BitwiseNot of {dtype}", e)
        lo, hi = _int_range(dtype)
        return f"(~{self.src(e.a)})" if lo < 0 else f"({hi} ^ {self.src(e.a)})"

    def _shift(self, e, dtype, left: bool):
        if _kind(dtype) != "int":
            raise _unsupported(f"{'LShift' if left else 'RShift'} of {dtype}", e)
        bits = np.dtype(dtype).itemsize * 8
        a, b = self.src(e.a), self.src(e.b)
        c = self._int_const(e.b)
        if c is None or not 0 <= c < bits:
            b = f"{self._bind(_shift_checker(bits, dtype), '_sh')}({b})"
        if left:
            return self._wrap_src(f"({a} << {b})", dtype, (None, None))
        return f"({a} >> {b})"  # arithmetic for signed values, logical for unsigned ones

    def _g_LShift(self, e, dtype):
        return self._shift(e, dtype, True)

    def _g_RShift(self, e, dtype):
        return self._shift(e, dtype, False)

    def _g_Select(self, e, dtype):
        if _dtype(e.condition)[1] > 1:
            raise _unsupported("a scalar Select on a vector condition", e)
        # both operands are evaluated, as TIR's Select does
        return f"_sel({self.src(e.condition)}, {self.src(e.true_value)}, {self.src(e.false_value)})"

    def _g_Cast(self, e, dst):
        src_dtype, src_lanes = _dtype(e.value)
        if src_lanes != 1:
            raise _unsupported(f"a Cast from {src_lanes} lanes to 1", e)
        a = self.src(e.value)
        if src_dtype == dst:
            return a
        if dst in _FLOAT_TYPES:
            wider = src_dtype in _FLOAT_TYPES and np.dtype(src_dtype).itemsize > np.dtype(dst).itemsize
            return self._to_float(f"float({a})" if wider else a, dst)
        if dst == "bool":
            return f"({a} != 0)"
        if src_dtype in _FLOAT_TYPES:
            return f"{self._bind(_float_to_int(dst), '_f2i')}({a})"
        if src_dtype == "bool":
            return f"int({a})"
        (slo, shi), (dlo, dhi) = _int_range(src_dtype), _int_range(dst)
        if dlo <= slo and shi <= dhi:  # widening
            return a
        return self._wrap_src(a, dst, self._range(e.value))

    def _g_Call(self, e, dtype):
        full = str(getattr(e.op, "name", e.op))
        name = full.split(".", 1)[1] if "." in full else full
        args = list(e.args)
        if name in ("call_llvm_pure_intrin", "call_llvm_intrin"):
            intrin, operands = _llvm_intrinsic(e, args)
            if intrin == "llvm.arithmetic.fence":  # only stops reassociation: the identity here
                return self.src(operands[0])
            return self._math_src(e, _LLVM_INTRINSICS[intrin], operands, intrin, dtype)
        if name == "if_then_else":
            if _dtype(args[0])[1] > 1:
                raise _unsupported("a scalar if_then_else on a vector condition", e)
            return f"({self.src(args[1])} if {self.src(args[0])} else {self.src(args[2])})"
        if name == "likely":
            return self.src(args[0])
        if name == "reinterpret":
            src_dtype, src_lanes = _dtype(args[0])
            if src_lanes != 1:
                return self._fallback(e)
            _check_reinterpret(e, src_dtype, 1, dtype, 1)
            text = f"{self._bind(_scalar_reinterpret(src_dtype, dtype), '_ri')}({self.src(args[0])})"
            return self._to_float(text, dtype) if dtype in _FLOAT_TYPES else text
        if name in ("isnan", "isinf", "isfinite"):
            if _kind(_dtype(args[0])[0]) != "float":
                return "True" if name == "isfinite" else "False"
            return f"_{name}({self.src(args[0])})"
        if name in ("shift_left", "shift_right"):
            return self._shift(_Pair(args[0], args[1]), dtype, name == "shift_left")
        if name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            op = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}[name]
            return f"({self.src(args[0])} {op} {self.src(args[1])})"
        if name == "bitwise_not":
            return self._g_BitwiseNot(_Pair(args[0], None), dtype)
        if name == "popcount":
            bits = np.dtype(dtype).itemsize * 8
            return f"bin({self.src(args[0])} & {(1 << bits) - 1}).count('1')"
        return self._math_src(e, name, args, full, dtype)

    def _to_float(self, text: str, dtype: str) -> str:
        """A Python int/float (or a NumPy float no wider than `dtype`) as a NumPy scalar of
        float `dtype`, rounded once: adding it to -0.0 of that dtype (NumPy 2 treats Python
        numbers as weakly typed) is exact, and four times faster than calling the type."""
        return f"({self._bind(_FLOAT_TYPES[dtype](-0.0), '_nz')} + {text})"

    def _math_src(self, e, name, args, full, dtype):
        if name in ("abs", "fabs") and _kind(dtype) == "int":
            return self._wrap_src(f"abs({self.src(args[0])})", dtype, (None, None))
        if _kind(dtype) != "float":
            raise _unsupported(f"the intrinsic {full} of {dtype}", e)
        if name == "fma" and len(args) == 3:
            a, b, c = (self.src(x) for x in args)
            return self._to_float(f"(float({a}) * float({b}) + float({c}))", dtype)
        if name in _UNARY_MATH and len(args) == 1:  # the math functions return Python floats
            fn = self._bind(_UNARY_MATH[name][0], "_m")
            return self._to_float(f"{fn}({self.src(args[0])})", dtype)
        if name in _BINARY_MATH and len(args) == 2:
            fn = self._bind(_BINARY_MATH[name][0], "_m")
            return self._to_float(f"{fn}({self.src(args[0])}, {self.src(args[1])})", dtype)
        raise _unsupported(f"the intrinsic {full}", e)

    def _g_Ramp(self, e, dtype):
        return self._fallback(e)

    _g_Broadcast = _g_Shuffle = _g_Ramp

    # --- integer ranges (to skip bounds checks and wrap-around checks) ------------------------

    def _range(self, e) -> tuple:
        """(lo, hi) bounds of an integer scalar expression; None where unknown."""
        t = type(e).__name__
        try:
            dtype, lanes = _dtype(e)
        except NotImplementedError:
            return None, None
        if lanes != 1 or _kind(dtype) == "float":
            return None, None
        if t == "IntImm":
            v = int(e.value)
            return v, v
        if t == "Var":
            return self._bounds.get(e.__chandle__(), (None, None))
        if t in ("Add", "Sub", "Mul", "Min", "Max", "FloorDiv", "FloorMod", "Div", "Mod"):
            (alo, ahi), (blo, bhi) = self._range(e.a), self._range(e.b)
            if t == "Add":
                return _add(alo, blo), _add(ahi, bhi)
            if t == "Sub":
                return (None if alo is None or bhi is None else alo - bhi,
                        None if ahi is None or blo is None else ahi - blo)
            if t == "Mul":
                if None in (alo, ahi, blo, bhi):
                    if blo is not None and blo == bhi and blo >= 0:
                        return (None if alo is None else alo * blo, None if ahi is None else ahi * blo)
                    if alo is not None and alo == ahi and alo >= 0:
                        return (None if blo is None else blo * alo, None if bhi is None else bhi * alo)
                    return None, None
                products = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
                return min(products), max(products)
            if t == "Min":
                lo = None if alo is None or blo is None else min(alo, blo)
                his = [h for h in (ahi, bhi) if h is not None]
                return lo, (min(his) if his else None)
            if t == "Max":
                los = [x for x in (alo, blo) if x is not None]
                hi = None if ahi is None or bhi is None else max(ahi, bhi)
                return (max(los) if los else None), hi
            c = blo if blo is not None and blo == bhi else None
            if c is None or c <= 0:
                return None, None
            if t in ("FloorMod", "Mod") and (t == "FloorMod" or (alo is not None and alo >= 0)):
                if alo is not None and ahi is not None and alo >= 0 and ahi < c:
                    return alo, ahi
                return 0, c - 1
            if t == "FloorDiv" or (t == "Div" and alo is not None and alo >= 0):
                return (None if alo is None else alo // c, None if ahi is None else ahi // c)
            return None, None
        if t == "Cast":
            src_dtype = _dtype(e.value)[0]
            if _kind(src_dtype) == "float":
                return None, None
            lo, hi = self._range(e.value)
            if src_dtype == "bool":
                return 0, 1
            dlo, dhi = _int_range(dtype)
            if lo is not None and hi is not None and dlo <= lo and hi <= dhi:
                return lo, hi
            slo, shi = _int_range(src_dtype)
            if dlo <= slo and shi <= dhi:
                return lo, hi
            return None, None
        if t == "Let":
            return self._range(e.body)
        return None, None
