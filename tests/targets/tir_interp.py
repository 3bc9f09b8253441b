"""A NumPy interpreter of TIR PrimFuncs (test-only): runs a kernel without compiling it.

`interpret(func, arrays)` executes `func` on one NumPy array per buffer parameter (in
`func.params` order; a scalar parameter takes a Python number), writing the outputs in place.
`TirInterpreter(func)` (or the cached `compile_func(func)`) compiles the TIR once and can then
be called many times. Statements become a tree of Python closures; each scalar expression
tree becomes one Python lambda generated from source (so index arithmetic costs a few
bytecodes, not a call per node); vector values (lanes > 1) are 1-D NumPy arrays computed by
closures.

Semantics follow TIR as LLVM compiles it:

* every loop kind (serial, parallel, vectorized, unrolled) runs serially, in order;
* each operation is computed in its own dtype: integers wrap around (two's complement),
  `Div`/`Mod` truncate and `FloorDiv`/`FloorMod` floor, floats are NumPy scalars of their
  dtype (float16 rounds after every operation); math intrinsics are computed in float64 and
  rounded once to the value's dtype (`round` is `nearbyint`, as TVM lowers it);
* `Min(a, b)` is `a < b ? a : b` and `Max(a, b)` is `a > b ? a : b` (LLVM's select), float
  comparisons are ordered (`NE` with a NaN operand is false);
* `Select` evaluates both operands, `if_then_else` only the chosen one (a vector
  `if_then_else` with mixed lanes evaluates both, tolerating out-of-bounds loads in the
  masked-off lanes);
* casts of out-of-range floats to integers behave as on x86 (NumPy's conversion);
* `llvm.arithmetic.fence` is the identity, pragmas (AttrStmt) and `llvm.prefetch` hints
  are ignored;
* local buffers (AllocBuffer) are fresh at each execution and, with `poison=True` (the
  default), filled with NaN (floats) or a fixed garbage pattern (integers), so that a kernel
  reading memory it never wrote is noticed rather than silently given zeros;
* every buffer access is bounds-checked (NumPy's negative indices never wrap silently), and
  an IndexError names the statement.

Anything else raises NotImplementedError naming the node (or intrinsic) that is not supported.
"""

from __future__ import annotations

import math
import struct
import sys
from collections import OrderedDict

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.buffer import buffer_data, is_buffer_var

__all__ = ["TirInterpreter", "compile_func", "interpret"]

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


# --- the compiler ------------------------------------------------------------------------------


class TirInterpreter:
    """A PrimFunc compiled once into Python code; call it with the arrays (in `func.params`
    order) to run the kernel in place."""

    def __init__(self, func: tirx.PrimFunc, poison: bool = True, batch: bool = True, min_batch: int | None = None):
        self.func = func
        self.poison = poison
        self.batch = batch  # run loop nests that allow it as NumPy array operations...
        self.min_batch = min_batch  # ... of at least this many iterations (None: a cost estimate)
        self._batch: _Batch | None = None  # the loop nest being compiled for batched execution
        self._alias_root: dict[int, int] = {}  # buffer -> the buffer whose memory it views (DeclBuffer)
        self.batched_nests: list[tuple[str, ...]] = []  # loop variables of the nests run batched
        self._slots: dict[int, int] = {}
        self._names: list[str] = ["<mask>"]  # slot 0: the lanes a masked evaluation computes
        self._defined: set[int] = set()
        self._buffers: dict[int, object] = {}  # buffer handle -> buffer var, for DeclBuffer views
        self._bounds: dict[int, tuple] = {}  # int var handle -> (lo, hi), None where unknown
        self._ns: dict = {"__builtins__": __builtins__, "_neg": _negative_index, "_sel": _select,
                          "_floor": np.floor, "_fmod": np.fmod, "_ffmod": _float_floor_mod,
                          "_tdiv": _trunc_div, "_tmod": _trunc_mod, "_fdiv": _floor_div, "_fmodi": _floor_mod,
                          "_isnan": math.isnan, "_isinf": math.isinf, "_isfinite": math.isfinite,
                          "_IndexError": IndexError, "_oob": self._out_of_bounds}
        self._bound_ids: dict = {}
        self._const_names: dict = {}
        self._counter = 0
        self._let_local: dict[int, str] = {}  # Let var handle -> local name in the lambda being generated
        self._let_stack: list[list[bool]] = []  # per open Let: whether it must also store into env
        self._depth = 0
        self.params: list[tuple[str, object, int]] = []  # (kind, node, slot)
        self._shape_vars: list[tuple[int, int, int]] = []  # (param index, axis, slot)
        for k, p in enumerate(func.params):
            if is_buffer_var(p):
                self._check_layout(p)
                slot = self._define(p)
                self._buffers[p.__chandle__()] = p
                self.params.append(("buffer", p, slot))
                for axis, dim in enumerate(p.shape):
                    if isinstance(dim, tvm.ir.Var) and dim.__chandle__() not in self._defined:
                        self._shape_vars.append((k, axis, self._define(dim)))
            elif isinstance(p, tvm.ir.Var):
                self.params.append(("scalar", p, self._define(p)))
            else:
                raise _unsupported(f"parameter {type(p).__name__}", p)
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 20000))  # compiling recurses along the expression trees
        try:
            self._shape_fns = [[self._const_or_fn(d) for d in p.shape] if kind == "buffer" else None
                               for kind, p, _ in self.params]
            self._body = self.stmt(func.body)
        finally:
            sys.setrecursionlimit(limit)
        self._nslots = len(self._names)

    # --- running ---------------------------------------------------------------------------

    def __call__(self, arrays) -> None:
        params = self.params
        if len(arrays) != len(params):
            raise ValueError(f"{self._fname()} takes {len(params)} arguments, got {len(arrays)}")
        env = [None] * self._nslots
        env[0] = None  # the active lanes of a masked evaluation (None: all)
        for k, ((kind, p, slot), a) in enumerate(zip(params, arrays)):
            if kind == "scalar":
                dtype, lanes = _dtype(p)
                if lanes != 1:
                    raise _unsupported("vector scalar parameters", p)
                env[slot] = _wrapper(dtype)(int(a)) if _kind(dtype) == "int" else _scalar_of(a, dtype)
                continue
            if not isinstance(a, np.ndarray):
                raise TypeError(f"argument {k} ({p.name}) must be a NumPy array, got {type(a).__name__}")
            if a.dtype != np.dtype(str(p.dtype)):
                raise TypeError(f"argument {k} ({p.name}) must be {p.dtype}, got {a.dtype}")
            if a.ndim != len(p.shape):
                raise ValueError(f"argument {k} ({p.name}) must have {len(p.shape)} dims, got shape {a.shape}")
            if not a.flags.writeable:
                raise ValueError(f"argument {k} ({p.name}) is read-only")
            env[slot] = a
        for k, axis, slot in self._shape_vars:
            env[slot] = int(arrays[k].shape[axis])
        for k, ((kind, p, _), a) in enumerate(zip(params, arrays)):
            if kind == "buffer":
                want = tuple(f(env) for f in self._shape_fns[k])
                if tuple(a.shape) != want:
                    raise ValueError(f"argument {k} ({p.name}) must have shape {want}, got {a.shape}")
        with np.errstate(all="ignore"):
            try:
                self._body(env)
            except _Return:
                pass

    def _fname(self) -> str:
        try:
            return str(self.func.attrs["global_symbol"])
        except Exception:  # noqa: BLE001
            return "the PrimFunc"

    @staticmethod
    def _out_of_bounds(err, stmt):
        text = str(stmt).strip()
        if len(text) > 400:
            text = text[:400] + "..."
        raise IndexError(f"{err}, in: {text}") from None

    def _check_layout(self, buf) -> None:
        dtype = str(buf.dtype)
        if dtype not in _FLOAT_TYPES and dtype not in _INT_DTYPES and dtype != "bool":
            raise _unsupported(f"buffer {buf.name} of dtype {dtype}")
        off = buf.elem_offset
        if off is not None and not (isinstance(off, tirx.IntImm) and int(off.value) == 0):
            raise _unsupported(f"buffer {buf.name} with an element offset ({off})")
        strides = list(buf.strides)
        if strides:
            dims = [int(d.value) if isinstance(d, tirx.IntImm) else None for d in buf.shape]
            expect, acc = [], 1
            for d in reversed(dims):
                expect.append(acc)
                acc = acc * d if (acc is not None and d is not None) else None
            expect.reverse()
            got = [int(s.value) if isinstance(s, tirx.IntImm) else None for s in strides]
            if None in got or got != expect:
                raise _unsupported(f"buffer {buf.name} with non-compact strides {strides}")

    # --- slots and names -------------------------------------------------------------------

    def _define(self, var) -> int:
        h = var.__chandle__()
        self._defined.add(h)
        if h not in self._slots:
            self._slots[h] = len(self._names)
            self._names.append(str(var.name))
        return self._slots[h]

    def _use(self, var) -> int:
        h = var.__chandle__()
        if h not in self._defined:
            raise ValueError(f"variable {var.name} is used but never defined (a free variable of the PrimFunc)")
        return self._slots[h]

    def _bind(self, obj, prefix: str = "_k") -> str:
        """A name for `obj` in the generated code's namespace."""
        key = id(obj)
        if key in self._bound_ids and self._ns.get(self._bound_ids[key]) is obj:
            return self._bound_ids[key]
        name = f"{prefix}{len(self._ns)}"
        self._ns[name] = obj
        self._bound_ids[key] = name
        return name

    def _tmp(self) -> str:
        self._counter += 1
        return f"_t{self._counter}"

    def _const_or_fn(self, e):
        if isinstance(e, tirx.IntImm):
            v = int(e.value)
            return lambda env: v
        return self.expr(e)

    def _int_const(self, e):
        return int(e.value) if isinstance(e, tirx.IntImm) and _dtype(e)[0] != "bool" else None

    # --- statements ------------------------------------------------------------------------

    def stmt(self, s):
        method = getattr(self, "_s_" + type(s).__name__, None)
        if method is None:
            raise _unsupported(f"statement {type(s).__name__}", s)
        return method(s)

    def _def(self, body_lines: list[str], stmt) -> object:
        """A function `f(env)` from generated lines, IndexErrors reported with `stmt`."""
        name = f"_s{len(self._ns)}"
        node = self._bind(stmt, "_n")
        code = [f"def {name}(env):", "    try:", *("        " + line for line in body_lines),
                "    except _IndexError as err:", f"        _oob(err, {node})"]
        exec(compile("\n".join(code), f"<tir_interp {type(stmt).__name__}>", "exec"), self._ns)  # noqa: S102
        return self._ns[name]

    def _s_SeqStmt(self, s):
        fs = [self.stmt(x) for x in s.seq]
        if len(fs) == 1:
            return fs[0]
        if len(fs) == 2:
            f0, f1 = fs

            def seq2(env):
                f0(env)
                f1(env)
            return seq2
        if len(fs) == 3:
            f0, f1, f2 = fs

            def seq3(env):
                f0(env)
                f1(env)
                f2(env)
            return seq3

        def seq(env):
            for f in fs:
                f(env)
        return seq

    def _s_Evaluate(self, s):
        v = s.value
        if isinstance(v, (tirx.IntImm, tirx.FloatImm)) or _is_prefetch(s):
            return lambda env: None
        f = self.expr(v)

        def evaluate(env):
            f(env)
        return evaluate

    def _s_AttrStmt(self, s):
        if s.attr_key in ("thread_extent", "virtual_thread", "coproc_scope", "async_scope"):
            raise _unsupported(f"AttrStmt '{s.attr_key}'")
        return self.stmt(s.body)  # pragmas and hints only

    def _s_AssertStmt(self, s):
        cond = self.expr(s.condition)
        message = "".join(str(getattr(m, "value", m)) for m in s.message_parts)
        kind = str(getattr(s.kind, "value", s.kind))

        def check(env):
            c = cond(env)
            if not (bool(np.all(c)) if isinstance(c, np.ndarray) else bool(c)):
                raise AssertionError(f"{kind}: {message}")
        return check

    def _s_Bind(self, s):
        dtype, lanes = _dtype(s.var)
        value = self.expr(s.value)
        slot = self._define(s.var)
        if lanes == 1 and _kind(dtype) == "int":
            self._bounds[s.var.__chandle__()] = self._range(s.value)

        def bind(env):
            env[slot] = value(env)
        return bind

    _s_LetStmt = _s_Bind

    def _s_For(self, s):
        kind = int(s.kind)
        if kind not in (0, 1, 2, 3):
            raise _unsupported(f"For loops of kind {tirx.ForKind(kind).name}")
        if s.thread_binding is not None:
            raise _unsupported("For loops bound to threads")
        var_dtype, lanes = _dtype(s.loop_var)
        if _kind(var_dtype) != "int" or lanes != 1:
            raise _unsupported(f"loop variables of dtype {var_dtype}")
        lo_c, ext_c = self._int_const(s.min), self._int_const(s.extent)
        lo_f, ext_f = self._const_or_fn(s.min), self._const_or_fn(s.extent)
        step_c = 1
        if s.step is not None:
            step_c = self._int_const(s.step)
            if step_c is None or step_c <= 0:
                raise _unsupported("For loops with a non-constant or non-positive step", s.step)
        lo_r, ext_r = self._range(s.min), self._range(s.extent)
        hi = None if lo_r[1] is None or ext_r[1] is None else lo_r[1] + ext_r[1] - 1
        slot = self._define(s.loop_var)
        self._bounds[s.loop_var.__chandle__()] = (lo_r[0], hi)
        serial = self._serial_loop(s, slot, lo_c, ext_c, lo_f, ext_f, step_c)
        if not self.batch:
            return serial
        return self._batched_loop(s, serial) or serial

    def _serial_loop(self, s, slot, lo_c, ext_c, lo_f, ext_f, step_c):
        body = self.stmt(s.body)

        if _contains(s.body, ("Break", "Continue")):
            def loop_bc(env):
                lo = lo_f(env)
                for v in range(lo, lo + ext_f(env), step_c):
                    env[slot] = v
                    try:
                        body(env)
                    except _Continue:
                        continue
                    except _Break:
                        break
            return loop_bc
        if lo_c is not None and ext_c is not None:
            r = range(lo_c, lo_c + ext_c, step_c)

            def const_loop(env):
                for v in r:
                    env[slot] = v
                    body(env)
            return const_loop
        if lo_c == 0 and step_c == 1:
            def loop0(env):
                for v in range(ext_f(env)):
                    env[slot] = v
                    body(env)
            return loop0

        def loop(env):
            lo = lo_f(env)
            for v in range(lo, lo + ext_f(env), step_c):
                env[slot] = v
                body(env)
        return loop

    def _s_While(self, s):
        cond = self._scalar_cond(s.condition)
        body = self.stmt(s.body)

        def while_(env):
            while cond(env):
                try:
                    body(env)
                except _Continue:
                    continue
                except _Break:
                    break
        return while_

    def _s_Break(self, s):
        def brk(env):
            raise _Break
        return brk

    def _s_Continue(self, s):
        def cont(env):
            raise _Continue
        return cont

    def _s_Return(self, s):
        def ret(env):
            raise _Return
        return ret

    def _s_IfThenElse(self, s):
        cond = self._scalar_cond(s.condition)
        then = self.stmt(s.then_case)
        if s.else_case is None:
            def if_(env):
                if cond(env):
                    then(env)
            return if_
        other = self.stmt(s.else_case)

        def if_else(env):
            if cond(env):
                then(env)
            else:
                other(env)
        return if_else

    def _scalar_cond(self, e):
        if _dtype(e)[1] != 1:
            raise _unsupported("a vector condition of a statement", e)
        return self.expr(e)

    def _s_AllocBuffer(self, s):
        buf = s.buffer
        self._check_layout(buf)
        shape_fs = [(self._int_const(d), self._const_or_fn(d)) for d in buf.shape]
        dtype = np.dtype(str(buf.dtype))
        fill = _poison_value(str(buf.dtype)) if self.poison else 0
        slot = self._define(buf)
        self._buffers[buf.__chandle__()] = buf
        if all(c is not None for c, _ in shape_fs):
            shape = tuple(c for c, _ in shape_fs)

            def alloc(env):
                env[slot] = np.full(shape, fill, dtype)
        else:
            def alloc(env):
                env[slot] = np.full(tuple(f(env) for _, f in shape_fs), fill, dtype)
        if hasattr(s, "body"):  # the legacy form carrying its body (Python-side only)
            body = self.stmt(s.body)

            def alloc_body(env):
                alloc(env)
                body(env)
            return alloc_body
        return alloc

    def _s_DeclBuffer(self, s):
        buf = s.buffer
        self._check_layout(buf)
        source = next((other for other in self._buffers.values()
                       if tvm_ffi.structural_equal(buffer_data(other), s.data)), None)
        if source is None:
            raise _unsupported("DeclBuffer over data that is not another buffer's", s.data)
        src_slot = self._use(source)
        slot = self._define(buf)
        self._buffers[buf.__chandle__()] = buf
        root = self._alias_root.get(source.__chandle__(), source.__chandle__())
        self._alias_root[buf.__chandle__()] = self._alias_root[source.__chandle__()] = root
        dtype = np.dtype(str(buf.dtype))
        shape_fs = [self._const_or_fn(d) for d in buf.shape]
        name = str(buf.name)

        def decl(env):
            base = env[src_slot].reshape(-1)
            if base.dtype != dtype:
                base = base.view(dtype)
            shape = tuple(f(env) for f in shape_fs)
            n = int(np.prod(shape, dtype=np.int64))
            if n > base.size:
                raise IndexError(f"DeclBuffer {name}{list(shape)} is larger than its data")
            env[slot] = base[:n].reshape(shape)
        if hasattr(s, "body"):
            body = self.stmt(s.body)

            def decl_body(env):
                decl(env)
                body(env)
            return decl_body
        return decl

    def _s_BufferStore(self, s):
        buf = s.buffer
        slot = self._use(buf)
        name = str(buf.name)
        vdtype, vlanes = _dtype(s.value)
        if vdtype != str(buf.dtype):
            raise _unsupported(f"a store of {vdtype} into buffer {name} of {buf.dtype}")
        idx = list(s.indices)
        if len(idx) != len(buf.shape):
            raise _unsupported(f"a store into {name} with {len(idx)} indices for {len(buf.shape)} dims", s)
        if vlanes > 1 or any(_dtype(i)[1] > 1 for i in idx):
            fs = [self.expr(i) for i in idx]
            value = self.expr(s.value)

            def vstore(env):
                arr = env[slot]
                index = _check_vector_index(tuple(f(env) for f in fs), arr.shape, name, None)
                arr[index] = value(env)
            return vstore
        target = self._access_src(slot, name, idx, as_python=False)
        return self._def([f"{target} = {self.src_top(s.value)}"], s)

    # --- batched loop nests ------------------------------------------------------------------
    #
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

    # --- scalar expressions: Python source ---------------------------------------------------

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

    # --- vector expressions: closures over NumPy arrays ----------------------------------------

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


# --- helpers -----------------------------------------------------------------------------------


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


# --- entry points ------------------------------------------------------------------------------

_CACHE: OrderedDict[tuple, TirInterpreter] = OrderedDict()


def compile_func(func: tirx.PrimFunc, poison: bool = True, batch: bool = True,
                 min_batch: int | None = None) -> TirInterpreter:
    """The interpreter of `func` (compiled once per PrimFunc and settings, then cached)."""
    key = (func.__chandle__(), poison, batch, min_batch)
    hit = _CACHE.get(key)
    if hit is not None and hit.func.same_as(func):
        _CACHE.move_to_end(key)
        return hit
    interp = TirInterpreter(func, poison=poison, batch=batch, min_batch=min_batch)
    _CACHE[key] = interp
    while len(_CACHE) > 64:
        _CACHE.popitem(last=False)
    return interp


def interpret(func: tirx.PrimFunc, arrays: list[np.ndarray], poison: bool = True, batch: bool = True,
              min_batch: int | None = None) -> None:
    """Run `func` on `arrays` (one per parameter, in `func.params` order) in place. `poison`
    fills local buffers with NaN/garbage; `batch` runs loop nests without dependences between
    their iterations as NumPy array operations (the same results, faster) when they have at
    least `min_batch` iterations (None: where that is estimated to pay); batch=False runs every
    loop serially, iteration by iteration."""
    compile_func(func, poison, batch, min_batch)(arrays)
