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

The interpreter's statements are here; its scalar expressions (generated Python source) are in
`tir_interp_scalar.py`, its vector expressions (NumPy closures) in `tir_interp_vector.py`, the
batched loop nests in `tir_interp_batch.py` (three mixins of `TirInterpreter`), and the dtypes,
value helpers and math tables they share in `tir_interp_values.py`.
"""

from __future__ import annotations

import math
import sys
from collections import OrderedDict

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.buffer import buffer_data, is_buffer_var

from tir_interp_batch import BatchedNests, _Batch
from tir_interp_scalar import ScalarExprs
from tir_interp_values import (
    _Break, _Continue, _FLOAT_TYPES, _INT_DTYPES, _Return, _check_vector_index, _contains, _dtype,
    _float_floor_mod, _floor_div, _floor_mod, _is_prefetch, _kind, _negative_index, _poison_value, _scalar_of,
    _select, _trunc_div, _trunc_mod, _unsupported, _wrapper)
from tir_interp_vector import VectorExprs

__all__ = ["TirInterpreter", "compile_func", "interpret"]

# --- the compiler ------------------------------------------------------------------------------


class TirInterpreter(ScalarExprs, VectorExprs, BatchedNests):
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
