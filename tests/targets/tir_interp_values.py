"""The values of tir_interp.py: dtypes, the scalar helpers named in the generated code's
namespace, the math tables, and small checks shared by its scalar, vector and batched parts."""

from __future__ import annotations

import math
import struct

import numpy as np
import tvm
from tvm import tirx

_FLOAT_TYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}
_INT_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
_MAX_DEPTH = 40  # expression depth per generated lambda (CPython's parser nests 200 parentheses)
_MIN_BATCH = 8  # iterations below which a batchable loop nest runs serially (NumPy's overhead)...
_BATCH_OVERHEAD = 400  # ... plus this many over the number of TIR nodes of its body


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Return(Exception):
    pass


def _unsupported(what: str, node=None):
    detail = ""
    if node is not None:
        text = str(node)
        detail = f": {text}" if len(text) < 300 else f": {text[:300]}..."
    return NotImplementedError(f"tir_interp does not support {what}{detail}")


# --- dtypes ------------------------------------------------------------------------------------


def _dtype(node) -> tuple[str, int]:
    """(element dtype, lanes) of an expression."""
    ty = node.ty
    if not isinstance(ty, tvm.ir.PrimType):
        raise _unsupported(f"values of type {ty} ({type(node).__name__})", node)
    d = ty.dtype
    lanes = int(d.lanes)
    if lanes < 1:
        raise _unsupported(f"scalable vector dtype {d}", node)
    elem = str(d.with_lanes(1)) if lanes > 1 else str(d)
    if elem not in _FLOAT_TYPES and elem not in _INT_DTYPES and elem != "bool":
        raise _unsupported(f"dtype {elem}", node)
    return elem, lanes


def _kind(dtype: str) -> str:
    if dtype in _FLOAT_TYPES:
        return "float"
    if dtype == "bool":
        return "bool"
    return "int"


def _int_range(dtype: str) -> tuple[int, int]:
    if dtype == "bool":
        return 0, 1
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _wrapper(dtype: str):
    """v -> v wrapped into the range of integer dtype `dtype` (two's complement)."""
    lo, hi = _int_range(dtype)
    span = hi - lo + 1
    if lo < 0:
        def wrap(v):
            return v if lo <= v <= hi else ((v - lo) % span) + lo
    else:
        mask = span - 1

        def wrap(v):
            return v if 0 <= v <= hi else v & mask
    return wrap


def _poison_value(dtype: str):
    if dtype in _FLOAT_TYPES:
        return np.nan
    if dtype == "bool":
        return True
    return np.array(0x5A5A5A5A5A5A5A5A, np.uint64).astype(dtype)  # a recognisable garbage value


def _scalar_of(v, dtype: str):
    """A NumPy element as this interpreter's scalar of `dtype`: NumPy float scalars, Python
    ints and bools."""
    if dtype in _FLOAT_TYPES:
        return _FLOAT_TYPES[dtype](v)
    if dtype == "bool":
        return bool(v)
    return int(v)


# --- scalar helpers (names in the generated code's namespace) -----------------------------------


def _trunc_div(a, b):
    if b == 0:
        raise ZeroDivisionError("integer Div by zero (undefined behaviour in TIR)")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _trunc_mod(a, b):
    if b == 0:
        raise ZeroDivisionError("integer Mod by zero (undefined behaviour in TIR)")
    return a - b * _trunc_div(a, b)


def _floor_div(a, b):
    if b == 0:
        raise ZeroDivisionError("integer FloorDiv by zero (undefined behaviour in TIR)")
    return a // b


def _floor_mod(a, b):
    if b == 0:
        raise ZeroDivisionError("integer FloorMod by zero (undefined behaviour in TIR)")
    return a % b


def _float_floor_mod(a, b):
    return a - np.floor(a / b) * b


def _select(c, a, b):
    return a if c else b


def _negative_index(i, name, axis):
    raise IndexError(f"index {i} out of bounds for axis {axis} of {name}")


def _shift_checker(bits: int, dtype: str):
    def check(b):
        if not 0 <= b < bits:
            raise ValueError(f"shift by {b} of a {dtype} (undefined behaviour in TIR)")
        return b
    return check


def _float_to_int(dtype: str):
    lo, hi = _int_range(dtype)
    npdt = np.dtype(dtype)

    def f2i(v):
        if -9.2e18 < v < 9.2e18:  # NaN fails both
            t = int(v)  # truncates toward zero, as fptosi
            if lo <= t <= hi:
                return t
        return int(np.array(v, np.float64).astype(npdt))  # out of range: as x86 converts
    return f2i


def _round_half_away(x):
    t = np.trunc(x)
    return t + np.where(np.abs(x - t) >= 0.5, np.sign(x), 0.0)


def _safe(mfun, nfun):
    """A float64 scalar function: math's version (fast), NumPy's where math raises (domain
    errors and overflow give NaN/inf as in libm)."""
    def f(*xs):
        try:
            return mfun(*xs)
        except (ValueError, OverflowError, ZeroDivisionError):
            return float(nfun(*(np.float64(x) for x in xs)))
    return f


def _np_erf(x):
    from scipy import special

    return special.erf(x)


def _np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _m_sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def _m_rsqrt(x):
    return 1.0 / math.sqrt(x)


def _np_rsqrt(x):
    return 1.0 / np.sqrt(x)


def _np_exp10(x):
    return np.power(10.0, x)


def _rint(x):
    return float(np.rint(np.float64(x)))


def _m_round_half_away(x):
    return float(_round_half_away(np.float64(x)))


# name -> (scalar float64 function, vector float64 function): computed in float64, rounded
# once to the value's dtype
_UNARY_MATH = {
    "exp": (_safe(math.exp, np.exp), np.exp),
    "exp2": (_safe(lambda x: 2.0 ** x, np.exp2), np.exp2),
    "exp10": (_safe(lambda x: 10.0 ** x, _np_exp10), _np_exp10),
    "expm1": (_safe(math.expm1, np.expm1), np.expm1),
    "log": (_safe(math.log, np.log), np.log),
    "log2": (_safe(math.log2, np.log2), np.log2),
    "log10": (_safe(math.log10, np.log10), np.log10),
    "log1p": (_safe(math.log1p, np.log1p), np.log1p),
    "sqrt": (_safe(math.sqrt, np.sqrt), np.sqrt),
    "rsqrt": (_safe(_m_rsqrt, _np_rsqrt), _np_rsqrt),
    "sin": (_safe(math.sin, np.sin), np.sin),
    "cos": (_safe(math.cos, np.cos), np.cos),
    "tan": (_safe(math.tan, np.tan), np.tan),
    "asin": (_safe(math.asin, np.arcsin), np.arcsin),
    "acos": (_safe(math.acos, np.arccos), np.arccos),
    "atan": (_safe(math.atan, np.arctan), np.arctan),
    "sinh": (_safe(math.sinh, np.sinh), np.sinh),
    "cosh": (_safe(math.cosh, np.cosh), np.cosh),
    "tanh": (_safe(math.tanh, np.tanh), np.tanh),
    "asinh": (_safe(math.asinh, np.arcsinh), np.arcsinh),
    "acosh": (_safe(math.acosh, np.arccosh), np.arccosh),
    "atanh": (_safe(math.atanh, np.arctanh), np.arctanh),
    "erf": (_safe(math.erf, _np_erf), _np_erf),
    "sigmoid": (_safe(_m_sigmoid, _np_sigmoid), _np_sigmoid),
    # exact in any dtype
    "floor": (_safe(math.floor, np.floor), np.floor),
    "ceil": (_safe(math.ceil, np.ceil), np.ceil),
    "trunc": (_safe(math.trunc, np.trunc), np.trunc),
    "round": (_rint, np.rint),  # TVM lowers round to llvm.nearbyint: half to even
    "nearbyint": (_rint, np.rint),
    "rint": (_rint, np.rint),
    "roundeven": (_rint, np.rint),
    "round_half_away": (_m_round_half_away, _round_half_away),  # llvm.round
    "fabs": (abs, np.abs),
}
_UNARY_MATH["abs"] = _UNARY_MATH["fabs"]

_BINARY_MATH = {
    "pow": (_safe(math.pow, np.power), np.power),
    "powf": (_safe(math.pow, np.power), np.power),
    "atan2": (_safe(math.atan2, np.arctan2), np.arctan2),
    "fmod": (_safe(math.fmod, np.fmod), np.fmod),
    "hypot": (_safe(math.hypot, np.hypot), np.hypot),
    "copysign": (math.copysign, np.copysign),
    "minnum": (lambda a, b: float(np.fmin(a, b)), np.fmin),  # NaN-ignoring
    "maxnum": (lambda a, b: float(np.fmax(a, b)), np.fmax),
    "minimum": (lambda a, b: float(np.minimum(a, b)), np.minimum),  # NaN-propagating
    "maximum": (lambda a, b: float(np.maximum(a, b)), np.maximum),
}

# llvm intrinsics (call_llvm_pure_intrin / call_llvm_intrin) -> the intrinsic of the same meaning
_LLVM_INTRINSICS = {
    "llvm.fabs": "fabs", "llvm.sqrt": "sqrt", "llvm.exp": "exp", "llvm.exp2": "exp2", "llvm.exp10": "exp10",
    "llvm.log": "log", "llvm.log2": "log2", "llvm.log10": "log10", "llvm.sin": "sin", "llvm.cos": "cos",
    "llvm.tan": "tan", "llvm.floor": "floor", "llvm.ceil": "ceil", "llvm.trunc": "trunc",
    "llvm.round": "round_half_away", "llvm.nearbyint": "nearbyint", "llvm.rint": "rint",
    "llvm.roundeven": "roundeven", "llvm.pow": "pow", "llvm.copysign": "copysign", "llvm.fma": "fma",
    "llvm.fmuladd": "fma", "llvm.minnum": "minnum", "llvm.maxnum": "maxnum", "llvm.minimum": "minimum",
    "llvm.maximum": "maximum",
}

# exactly rounded in float64 by NumPy's vector loops as by the scalar functions
_EXACT_MATH = {"floor", "ceil", "trunc", "round", "nearbyint", "rint", "roundeven", "round_half_away", "fabs",
               "abs", "sqrt", "copysign", "fmod", "minnum", "maxnum", "minimum", "maximum"}

_COMPARE = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
_VCOMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
             "GE": np.greater_equal}
_RING = {"Add": "+", "Sub": "-", "Mul": "*"}


def _add(lo, hi):
    return None if lo is None or hi is None else lo + hi


class _Pair:
    """Operands in the shape of a binary node (a, b), for intrinsic calls spelled as calls."""

    def __init__(self, a, b):
        self.a, self.b = a, b


def _is_prefetch(s) -> bool:
    """Is the Evaluate statement `s` a cache prefetch (a hint, no effect on values)?"""
    from tvm.target import codegen

    v = s.value
    if type(v).__name__ != "Call" or str(getattr(v.op, "name", v.op)).split(".")[-1] not in (
            "call_llvm_intrin", "call_llvm_pure_intrin"):
        return False
    return len(v.args) > 0 and isinstance(v.args[0], tirx.IntImm) and \
        str(codegen.llvm_get_intrinsic_name(int(v.args[0].value))) == "llvm.prefetch"


def _llvm_intrinsic(e, args):
    from tvm.target import codegen

    if not args or not isinstance(args[0], tirx.IntImm):
        raise _unsupported("an LLVM intrinsic call without a constant id", e)
    intrin = str(codegen.llvm_get_intrinsic_name(int(args[0].value)))
    operands = args[1:]
    if intrin == "llvm.arithmetic.fence":
        if len(operands) != 1:
            raise _unsupported(f"{intrin} with {len(operands)} operands", e)
    elif intrin not in _LLVM_INTRINSICS:
        raise _unsupported(f"the LLVM intrinsic {intrin}", e)
    return intrin, operands


def _check_reinterpret(e, src, src_lanes, dst, lanes):
    if np.dtype(src).itemsize * src_lanes != np.dtype(dst).itemsize * lanes:
        raise _unsupported(f"reinterpret of {src}x{src_lanes} as {dst}x{lanes}", e)


_STRUCT_CODES = {"int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
                 "int64": "q", "uint64": "Q", "float16": "e", "float32": "f", "float64": "d"}


def _scalar_reinterpret(src: str, dst: str):
    """The bits of a scalar of `src` read as `dst` (a Python int or float)."""
    if src == "bool" or dst == "bool":
        raise _unsupported(f"reinterpret between {src} and {dst}")
    pack, unpack = struct.Struct("<" + _STRUCT_CODES[src]).pack, struct.Struct("<" + _STRUCT_CODES[dst]).unpack
    return lambda v: unpack(pack(v))[0]


def _contains(stmt, type_names: tuple[str, ...]) -> bool:
    """Does `stmt` hold one of these statement types outside any nested loop?"""
    t = type(stmt).__name__
    if t in type_names:
        return True
    if t in ("For", "While"):
        return False
    if t == "SeqStmt":
        return any(_contains(x, type_names) for x in stmt.seq)
    if t == "IfThenElse":
        return _contains(stmt.then_case, type_names) or (
            stmt.else_case is not None and _contains(stmt.else_case, type_names))
    body = getattr(stmt, "body", None)
    return isinstance(body, tirx.Stmt) and _contains(body, type_names)


def _vtrunc_div(a, b):
    q = np.floor_divide(a, b)
    fix = (a - q * b != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


def _check_vector_index(index: tuple, shape: tuple, name: str, mask) -> tuple:
    """Indices (Python ints or integer arrays) checked against the buffer's shape; lanes
    outside `mask` (None: every lane counts) that are out of bounds are clipped instead."""
    out = []
    for axis, (i, n) in enumerate(zip(index, shape)):
        if not isinstance(i, np.ndarray):
            if not 0 <= i < n:
                if mask is not None and not np.any(mask):
                    i = 0
                else:
                    raise IndexError(f"index {i} out of bounds for axis {axis} of {name} (size {n})")
            out.append(i)
            continue
        if i.size and (i.min() < 0 or i.max() >= n):
            bad = (i < 0) | (i >= n)
            live = bad if mask is None else bad & mask
            if live.any():
                raise IndexError(f"index {i[live].tolist()[:8]} out of bounds for axis {axis} of {name} (size {n})")
            i = np.clip(i, 0, max(n - 1, 0))  # masked-off lanes: any element does
        out.append(i)
    return tuple(out)
