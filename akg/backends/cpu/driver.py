"""The CPU backend's linker (`Backend.link`): a whole model as one packed call.

`link` writes a driver PrimFunc in TIR whose arguments are the model's inputs, its weights,
its outputs and one workspace buffer, and whose body makes one `call_packed` per kernel call
with DLTensors built on the driver's stack: model tensors are passed through, intermediates
point into the workspace at the memory plan's offsets. The driver is compiled by LLVM like
any kernel, so a model call is one FFI call from Python; the calls into the kernels are C
calls through TVM's packed-function ABI (the kernel handles are looked up once, by name, in
the global function table, where `link` registers each kernel under a name of its own).

Around that call the Python side does per model, not per kernel: inputs that are
C-contiguous, writable and aligned as the kernels assume (64 bytes) are passed without a copy
(DLPack); others are copied once into aligned memory, a staging block of the thread's own that
every call reuses (it stays in cache). Outputs are fresh aligned NumPy arrays that the kernels
write into directly. The workspace and the staging block are one per thread, so calls from
several threads do not share them, and nothing returned is a view of either. Weights are
copied to TVM tensors once, at link time."""

from __future__ import annotations

import contextlib
import math
import threading
import uuid
import weakref

import numpy as np
import tvm
import tvm_ffi

from akg.errors import LoweringError
from akg.target import LinkProgram

ALIGN = 64  # what TVM's kernels assume of every buffer they are given (storage_alignment)
_DRIVER = "akg_driver"


def _dims(shape) -> str:
    return ", ".join(str(int(d)) for d in shape)


def _tuple(shape) -> str:
    return f"({_dims(shape)}{',' if len(shape) == 1 else ''})"


def _buffer(shape, dtype: str) -> str:
    return f'T.Buffer({_tuple(shape)}, "{dtype}"{", layout=None" if not shape else ""})'


def driver_source(program: LinkProgram, names: list[str], workspace_bytes: int) -> str:
    """TVMScript of the driver: arguments (inputs, weights, outputs, workspace), one packed
    call per kernel call. `names[k]` is the global name of kernel k."""
    specs = [*program.inputs, *((tuple(w.shape), str(w.dtype)) for w in program.weights), *program.outputs]
    params = [f"t{i}: {_buffer(shape, dtype)}" for i, (shape, dtype) in enumerate(specs)]
    params.append(f'ws: T.Buffer(({max(workspace_bytes, ALIGN)},), "uint8")')
    exprs = [f"t{i}" for i in range(len(specs))]
    for shape, dtype, offset in program.temps:
        exprs.append(f"T.tvm_stack_make_array(T.address_of(ws[{offset}]), T.tvm_stack_make_shape({_dims(shape) or 1}),"
                     f" 0, {len(shape)}, T.{dtype}(0), 0)")
    body = [f'    T.evaluate(T.call_packed("{names[k]}", {", ".join(exprs[t] for t in args)}))'
            for k, args in program.calls]
    return "\n".join(["@T.prim_func", f"def {_DRIVER}({', '.join(params)}):", *body, ""])


def _exportable(dtype: str) -> bool:
    """Whether NumPy arrays of `dtype` cross into TVM by DLPack (ml_dtypes types do not)."""
    try:
        np.empty(1, dtype).__dlpack__()
        return True
    except (BufferError, TypeError, ValueError):
        return False


class AlignedBlock:
    """Fresh C-contiguous arrays of fixed (shape, dtype) specs, each starting on an ALIGN
    boundary: `new()` returns a block no one else holds and `view(block, i)` its i-th array.
    Blocks are carved from arenas of up to `ARENA_BLOCKS` blocks (at most `ARENA_BYTES` of
    them; one arena at a time per thread), so that most calls neither allocate nor ask NumPy
    for an address (each costs about a microsecond, as much as a small model's kernels). A
    block is never handed out twice; an arena is freed once no array of it is left (an output
    kept by a caller keeps its arena alive: at most `ARENA_BYTES`, or one block where a block
    is larger)."""

    ARENA_BLOCKS = 64
    ARENA_BYTES = 1 << 20

    def __init__(self, specs):
        self.layout, total = [], 0
        for shape, dtype in specs:
            dt = np.dtype(dtype)
            self.layout.append((tuple(int(d) for d in shape), dt, total))
            total += -(-int(np.prod(shape, dtype=np.int64)) * dt.itemsize // ALIGN) * ALIGN
        self.stride = max(total, ALIGN)
        self.per_arena = max(1, min(self.ARENA_BLOCKS, self.ARENA_BYTES // self.stride))
        self._local = threading.local()  # the arena being carved, one per thread

    def new(self) -> tuple[np.ndarray, int]:
        here = self._local
        if not getattr(here, "left", 0):
            arena = np.empty(self.per_arena * self.stride + ALIGN, np.uint8)
            here.arena, here.next, here.left = arena, -arena.ctypes.data % ALIGN, self.per_arena
        block = (here.arena, here.next)
        here.next += self.stride
        here.left -= 1
        return block

    def view(self, block: tuple[np.ndarray, int], i: int) -> np.ndarray:
        shape, dt, offset = self.layout[i]
        return np.ndarray(shape, dt, block[0], block[1] + offset)


class CpuDriver:
    """The linked model: `driver(inputs) -> outputs` (see `Backend.link`)."""

    def __init__(self, executables, program: LinkProgram, backend):
        self.program = program
        self.workspace_bytes = max(program.workspace_bytes, ALIGN)
        tag = uuid.uuid4().hex[:12]
        used = sorted({k for k, _ in program.calls})
        self.names = {k: f"akg.linked.{tag}.k{k}" for k in used}
        for k, name in self.names.items():  # the driver looks these up once, on its first call
            tvm_ffi.register_global_func(name, backend.entry(executables[k]), override=True)
        self._finalizer = weakref.finalize(self, _unregister, list(self.names.values()))
        names = [self.names.get(k, "") for k in range(len(executables))]
        self.source = driver_source(program, names, self.workspace_bytes)
        try:
            from tvm.script import tirx as T
            from tvm.script.parser import parse

            func = parse(self.source, extra_vars={"T": T})
            module = tvm.compile(tvm.IRModule({_DRIVER: func}), target=tvm.target.Target("llvm"))
            self.module = module.jit() if hasattr(module, "jit") else module
            self._func = self.module[_DRIVER]
        except Exception as e:  # TVM reports every failure as its own error types
            self._finalizer()
            first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise LoweringError(f"linking the model's driver failed: {first}") from e
        self._weights = [tvm.runtime.tensor(np.array(w, order="C"), tvm.cpu()) for w in program.weights]
        # NumPy's strides of an empty array (0 along its leading dims, or whatever its maker
        # set) are not what TVM checks a compact DLPack tensor against: a program with an empty
        # input or output takes the copying path (which copies nothing of them)
        self._direct = all(_exportable(dtype) and math.prod(shape) > 0
                           for shape, dtype in (*program.inputs, *program.outputs))
        self._block = AlignedBlock(program.outputs)  # fresh per call: the caller keeps them
        # copies of inputs that cannot be passed as they are: one block per thread, reused (a
        # fresh block per call wrote each copy to memory not yet in cache; BERT 2x128's 16 KB
        # input cost 8 us a call that way, a quarter of a call's time beyond its kernels)
        self._staging = AlignedBlock(program.inputs)
        # per input, the last array found aligned and the last found misaligned (weakly held):
        # an ndarray keeps its address, so the same array needs no second look at it (about a
        # microsecond)
        self._checked = [_dead] * len(program.inputs)
        self._misaligned = [_dead] * len(program.inputs)
        self._n_outputs = len(program.outputs)
        self._local = threading.local()

    def _workspace(self):
        ws = getattr(self._local, "ws", None)
        if ws is None:
            ws = self._local.ws = tvm.runtime.empty((self.workspace_bytes,), "uint8", tvm.cpu())
        return ws

    def _staged(self, i: int) -> np.ndarray:
        """This thread's aligned array for a copy of input i (the same one every call)."""
        views = getattr(self._local, "staged", None)
        if views is None:
            layout, buf = self._staging, np.empty(self._staging.stride + ALIGN, np.uint8)
            block = (buf, -buf.ctypes.data % ALIGN)
            views = self._local.staged = [layout.view(block, k) for k in range(len(layout.layout))]
        return views[i]

    def __call__(self, inputs) -> list[np.ndarray]:
        if not self._direct:
            return self._call_copying(inputs)
        args, checked, misaligned = [], self._checked, self._misaligned
        for i, a in enumerate(inputs):
            flags = a.flags
            if flags.c_contiguous and flags.writeable and (
                    checked[i]() is a or (misaligned[i]() is not a and self._aligned(i, a))):
                args.append(a)  # zero-copy: the kernels only read it
            else:  # one copy, into this thread's aligned staging block
                copy = self._staged(i)
                np.copyto(copy, a)
                args.append(copy)
        layout = self._block
        block = layout.new()  # the outputs
        outs = [layout.view(block, j) for j in range(self._n_outputs)]
        self._func(*args, *self._weights, *outs, self._workspace())
        return outs

    def _aligned(self, i: int, a: np.ndarray) -> bool:
        if a.ctypes.data % ALIGN:
            self._misaligned[i] = weakref.ref(a)
            return False
        self._checked[i] = weakref.ref(a)
        return True

    def _call_copying(self, inputs) -> list[np.ndarray]:
        """Dtypes that NumPy cannot hand over by DLPack, and empty tensors: copies in and out."""
        dev = tvm.cpu()
        args = [tvm.runtime.tensor(np.array(a, order="C"), dev) for a in inputs]
        outs = [tvm.runtime.empty(shape, dtype, dev) for shape, dtype in self.program.outputs]
        self._func(*args, *self._weights, *outs, self._workspace())
        return [o.numpy() for o in outs]


def _dead():
    return None


def _unregister(names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(Exception):  # at interpreter shutdown the registry may be gone
            tvm_ffi.registry.remove_global_func(name)
