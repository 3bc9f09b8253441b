"""Vector expressions of tir_interp.py (a mixin of TirInterpreter): values of more than one
lane (or varying over a batched nest's iterations) as closures over 1-D NumPy arrays."""

from __future__ import annotations


import numpy as np
from tvm import tirx
from tvm.tirx.buffer import is_buffer_var

from tir_interp_values import (
    _BINARY_MATH, _EXACT_MATH, _LLVM_INTRINSICS, _UNARY_MATH, _VCOMPARE, _check_reinterpret,
    _check_vector_index, _dtype, _float_floor_mod, _kind, _llvm_intrinsic, _scalar_of, _unsupported, _vtrunc_div)


class VectorExprs:
    """TirInterpreter's vector expressions as NumPy closures (uses its slots and `lam`)."""

    def vec(self, e):
        method = getattr(self, "_v_" + type(e).__name__, None)
        if method is None:
            raise _unsupported(f"vector expression {type(e).__name__}", e)
        return method(e, *_dtype(e))

    def _v_Var(self, e, dtype, lanes):
        slot = self._use(e)
        return lambda env: env[slot]

    def _v_Let(self, e, dtype, lanes):
        value = self.expr(e.value)
        slot = self._define(e.var)
        if self._batch is not None and self._batch.refs(e.value):
            self._batch.handles.add(e.var.__chandle__())
        body = self.expr(e.body)

        def let(env):
            env[slot] = value(env)
            return body(env)
        return let

    def _v_TensorLoad(self, e, dtype, lanes):
        buf = e.source
        if not is_buffer_var(buf):
            raise _unsupported("a load from something other than a buffer", e)
        slot = self._use(buf)
        name = str(buf.name)
        idx = list(e.indices)
        if len(idx) != len(buf.shape):
            raise _unsupported(f"a load from {name} with {len(idx)} indices for {len(buf.shape)} dims", e)
        fs = [self.expr(i) for i in idx]
        scalar = lanes == 1 and self._batch is None  # a scalar load at a vector index (a fallback)
        if not scalar and self._in_bounds(buf, idx):  # no check needed (NumPy's fancy indexing)
            if len(fs) == 1:
                f0 = fs[0]
                return lambda env: env[slot][f0(env)]
            return lambda env: env[slot][tuple([f(env) for f in fs])]

        def vload(env):
            arr = env[slot]
            out = arr[_check_vector_index(tuple(f(env) for f in fs), arr.shape, name, env[0])]
            return _scalar_of(out.reshape(-1)[0], dtype) if scalar else out
        return vload

    def _in_bounds(self, buf, indices) -> bool:
        """Are these indices within the buffer's (constant) shape for every value their
        variables can take?"""
        for i, d in zip(indices, buf.shape):
            lo, hi = self._range(i)
            if not isinstance(d, tirx.IntImm) or lo is None or hi is None or lo < 0 or hi >= int(d.value):
                return False
        return True

    def _v_Ramp(self, e, dtype, lanes):
        if _dtype(e.base)[1] != 1:
            raise _unsupported("a Ramp of vectors", e)
        base, stride = self.expr(e.base), self.expr(e.stride)
        steps = np.arange(lanes, dtype=np.int64)
        npdt = np.dtype(dtype)
        return lambda env: (np.int64(base(env)) + np.int64(stride(env)) * steps).astype(npdt)

    def _v_Broadcast(self, e, dtype, lanes):
        if _dtype(e.value)[1] != 1:
            raise _unsupported("a Broadcast of a vector", e)
        value = self.expr(e.value)
        npdt = np.dtype(dtype)
        return lambda env: np.full(lanes, value(env), npdt)

    def _v_Shuffle(self, e, dtype, lanes):
        vectors = [self.expr(v) for v in e.vectors]
        consts = [self._int_const(i) for i in e.indices]
        if any(c is None for c in consts):
            raise _unsupported("a Shuffle with non-constant indices", e)
        indices = np.array(consts, np.int64)
        npdt = np.dtype(dtype)

        def shuffle(env):
            out = np.concatenate([np.atleast_1d(np.asarray(v(env), npdt)) for v in vectors])[indices]
            return _scalar_of(out[0], dtype) if lanes == 1 else out
        return shuffle

    def _v_Cast(self, e, dst, lanes):
        _, src_lanes = _dtype(e.value)
        if src_lanes != lanes:
            raise _unsupported(f"a Cast from {src_lanes} to {lanes} lanes", e)
        value = self.expr(e.value)
        if dst == "bool":
            return lambda env: np.asarray(value(env)) != 0
        npdt = np.dtype(dst)
        return lambda env: np.asarray(value(env)).astype(npdt)

    def _vbinary(self, e, fn):
        if _dtype(e.a) != _dtype(e.b):
            raise _unsupported(f"{type(e).__name__} of {_dtype(e.a)} and {_dtype(e.b)}", e)
        fa, fb = self.expr(e.a), self.expr(e.b)
        return lambda env: fn(fa(env), fb(env))

    def _v_arith(self, e, dtype, lanes):
        if _kind(dtype) == "bool":
            raise _unsupported(f"{type(e).__name__} of booleans", e)
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[type(e).__name__]
        return self._vbinary(e, fn)  # NumPy integer arrays wrap around

    _v_Add = _v_Sub = _v_Mul = _v_arith

    def _v_divmod(self, e, dtype, lanes):
        t = type(e).__name__
        kind = _kind(dtype)
        if kind == "bool":
            raise _unsupported(f"{t} of booleans", e)
        if kind == "float":
            fn = {"Div": np.divide, "Mod": np.fmod, "FloorDiv": lambda a, b: np.floor(a / b),
                  "FloorMod": _float_floor_mod}[t]
            return self._vbinary(e, fn)
        npdt = np.dtype(dtype)

        fn = {"Div": _vtrunc_div, "Mod": lambda a, b: a - b * _vtrunc_div(a, b), "FloorDiv": np.floor_divide,
              "FloorMod": np.remainder}[t]
        fa, fb = self.expr(e.a), self.expr(e.b)

        def divmod_(env):
            a, b = fa(env), fb(env)
            zero = np.asarray(b) == 0
            if zero.any() and (env[0] is None or np.any(zero & env[0])):
                raise ZeroDivisionError(f"integer {t} by zero (undefined behaviour in TIR)")
            return np.asarray(fn(a, b)).astype(npdt)
        return divmod_

    _v_Div = _v_Mod = _v_FloorDiv = _v_FloorMod = _v_divmod

    def _v_Min(self, e, dtype, lanes):
        npdt = np.dtype(dtype)
        return self._vbinary(e, lambda a, b: np.where(a < b, a, b).astype(npdt, copy=False))

    def _v_Max(self, e, dtype, lanes):
        npdt = np.dtype(dtype)
        return self._vbinary(e, lambda a, b: np.where(a > b, a, b).astype(npdt, copy=False))

    def _v_compare(self, e, dtype, lanes):
        t = type(e).__name__
        if t == "NE" and _kind(_dtype(e.a)[0]) == "float":
            return self._vbinary(e, lambda a, b: (a < b) | (a > b))
        return self._vbinary(e, _VCOMPARE[t])

    _v_EQ = _v_NE = _v_LT = _v_LE = _v_GT = _v_GE = _v_compare

    def _v_And(self, e, dtype, lanes):
        return self._vbinary(e, np.logical_and)

    def _v_Or(self, e, dtype, lanes):
        return self._vbinary(e, np.logical_or)

    def _v_Not(self, e, dtype, lanes):
        fa = self.expr(e.a)
        return lambda env: np.logical_not(fa(env))

    def _v_bitwise(self, e, dtype, lanes):
        if _kind(dtype) == "float":
            raise _unsupported(f"{type(e).__name__} of {dtype}", e)
        fn = {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor,
              "LShift": np.left_shift, "RShift": np.right_shift}[type(e).__name__]
        return self._vbinary(e, fn)

    _v_BitwiseAnd = _v_BitwiseOr = _v_BitwiseXor = _v_LShift = _v_RShift = _v_bitwise

    def _v_BitwiseNot(self, e, dtype, lanes):
        if _kind(dtype) != "int":
            raise _unsupported(f"BitwiseNot of {dtype}", e)
        fa = self.expr(e.a)
        return lambda env: np.invert(fa(env))

    def _v_Select(self, e, dtype, lanes):
        c, a, b = self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)
        npdt = np.dtype(dtype)
        return lambda env: np.where(c(env), a(env), b(env)).astype(npdt, copy=False)

    def _v_Call(self, e, dtype, lanes):
        full = str(getattr(e.op, "name", e.op))
        name = full.split(".", 1)[1] if "." in full else full
        args = list(e.args)
        npdt = np.dtype(dtype)
        if name in ("call_llvm_pure_intrin", "call_llvm_intrin"):
            intrin, operands = _llvm_intrinsic(e, args)
            if intrin == "llvm.arithmetic.fence":
                return self.expr(operands[0])
            name, full, args = _LLVM_INTRINSICS[intrin], intrin, operands
        if name == "likely":
            return self.expr(args[0])
        if name == "if_then_else":
            return self._v_if_then_else(e, dtype, lanes, args)
        if name == "reinterpret":
            src_dtype, src_lanes = _dtype(args[0])
            _check_reinterpret(e, src_dtype, src_lanes, dtype, lanes)
            f = self.expr(args[0])
            sdt = np.dtype(src_dtype)
            scalar = lanes == 1 and self._batch is None

            def vreinterpret(env):
                out = np.ascontiguousarray(np.asarray(f(env), sdt)).reshape(-1).view(npdt)
                return _scalar_of(out[0], dtype) if scalar else out
            return vreinterpret
        if name in ("isnan", "isinf", "isfinite"):
            f = self.expr(args[0])
            if _kind(_dtype(args[0])[0]) != "float":
                value = name == "isfinite"
                return lambda env: np.full(lanes, value)
            fn = {"isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}[name]
            return lambda env: fn(f(env))
        bits = {"shift_left": np.left_shift, "shift_right": np.right_shift, "bitwise_and": np.bitwise_and,
                "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}
        if name in bits:
            fa, fb = self.expr(args[0]), self.expr(args[1])
            fn = bits[name]
            return lambda env: fn(fa(env), fb(env))
        if name == "bitwise_not":
            f = self.expr(args[0])
            return lambda env: np.invert(f(env))
        if name in ("abs", "fabs") and _kind(dtype) == "int":
            f = self.expr(args[0])
            return lambda env: np.abs(f(env))
        if _kind(dtype) != "float":
            raise _unsupported(f"the intrinsic {full} of {dtype}", e)
        fs = [self.expr(a) for a in args]
        if name == "fma" and len(args) == 3:
            return lambda env: (np.asarray(fs[0](env), np.float64) * np.asarray(fs[1](env), np.float64)
                                + np.asarray(fs[2](env), np.float64)).astype(npdt)
        table = _UNARY_MATH if len(args) == 1 else _BINARY_MATH if len(args) == 2 else {}
        if name not in table:
            raise _unsupported(f"the intrinsic {full}", e)
        sfn, vfn = table[name]
        if name in _EXACT_MATH:  # NumPy's vector loop gives the same (exact) result
            return lambda env: np.asarray(vfn(*(np.asarray(f(env), np.float64) for f in fs))).astype(npdt)

        def vmath(env):  # lane by lane with the scalar function: the same rounding as scalar code
            xs = np.broadcast_arrays(*(np.asarray(f(env), np.float64) for f in fs))
            out = np.fromiter(map(sfn, *(x.ravel().tolist() for x in xs)), np.float64, count=xs[0].size)
            return out.reshape(xs[0].shape).astype(npdt)
        return vmath

    def _v_if_then_else(self, e, dtype, lanes, args):
        c, a, b = (self.expr(x) for x in args)
        npdt = np.dtype(dtype)

        def vif_then_else(env):
            cond = c(env)
            if not isinstance(cond, np.ndarray):
                return a(env) if cond else b(env)
            if cond.all():
                return a(env)
            if not cond.any():
                return b(env)
            # mixed lanes: each side computed under a mask of the lanes that take it (a load out of
            # bounds in the other lanes reads any element; one in these lanes is still an error)
            outer = env[0]
            env[0] = cond if outer is None else outer & cond
            try:
                x = a(env)
                env[0] = ~cond if outer is None else outer & ~cond
                y = b(env)
            finally:
                env[0] = outer
            return np.where(cond, x, y).astype(npdt, copy=False)
        return vif_then_else
