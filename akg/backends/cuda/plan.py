"""The launch plan of a CUDA executable: what each kernel's parameters are, so that a runner
without TVM's CUDA runtime (`driver.py`) can launch the kernels itself.

TVM writes every `__global__` kernel with one pointer parameter per buffer the kernel uses,
named after the buffer (`float* __restrict__ x_ptr` for buffer `x`). A buffer is either an
argument of the PrimFunc (the caller's inputs, parameters and outputs, in kernel order) or an
intermediate that `bind.py` left as a global allocation on the host side (a split reduction's
partials, a softmax's row maxima), which the runner allocates once per executable. The plan
lists the arguments and the intermediates (name, shape, dtype) and, per kernel in launch
order, the buffer of each parameter: an index into the arguments followed by the
intermediates. A parameter that names no buffer (a scalar, an unknown name) or whose C type
disagrees with the buffer's dtype is a `LoweringError` at compile time, on every machine."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from akg.errors import LoweringError
from akg.graph.compute.float8 import BITS_SUFFIX

_KERNEL_DEF = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(([^)]*)\)\s*\{')
_QUALIFIERS = {"__restrict__", "const", "volatile", "__global__"}
# bytes per element of the C types TVM writes for buffers
_C_SIZES = {"float": 4, "double": 8, "half": 2, "__half": 2, "nv_bfloat16": 2, "__nv_bfloat16": 2,
            "signed char": 1, "char": 1, "unsigned char": 1, "uchar": 1, "bool": 1, "short": 2,
            "unsigned short": 2, "ushort": 2,
            "int": 4, "unsigned int": 4, "uint": 4, "long long": 8, "unsigned long long": 8, "int64_t": 8,
            "uint64_t": 8, "int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2, "int32_t": 4,
            "uint32_t": 4, "__nv_fp8_e4m3": 1, "__nv_fp8_e5m2": 1}


@dataclass(frozen=True)
class PlanBuffer:
    """A buffer a kernel parameter points to."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * dtype_bytes(self.dtype)

    def to_list(self) -> list:
        return [self.name, list(self.shape), self.dtype]

    @classmethod
    def from_list(cls, data) -> PlanBuffer:
        name, shape, dtype = data
        return cls(name, tuple(int(d) for d in shape), dtype)


@dataclass(frozen=True)
class LaunchPlan:
    """`arguments`: the PrimFunc's buffers in call order; `temps`: the host-side intermediates;
    `kernel_args[k]`: kernel k's parameters, each an index into `arguments + temps`;
    `dynamic_shared[k]`: bytes of dynamic shared memory kernel k is launched with."""

    arguments: tuple[PlanBuffer, ...]
    temps: tuple[PlanBuffer, ...]
    kernel_args: tuple[tuple[int, ...], ...]
    dynamic_shared: tuple[int, ...]

    def buffer(self, index: int) -> PlanBuffer:
        n = len(self.arguments)
        return self.arguments[index] if index < n else self.temps[index - n]

    def to_dict(self) -> dict:
        return {"arguments": [b.to_list() for b in self.arguments], "temps": [b.to_list() for b in self.temps],
                "kernel_args": [list(a) for a in self.kernel_args], "dynamic_shared": list(self.dynamic_shared)}

    @classmethod
    def from_dict(cls, data: dict) -> LaunchPlan:
        return cls(tuple(PlanBuffer.from_list(b) for b in data["arguments"]),
                   tuple(PlanBuffer.from_list(b) for b in data["temps"]),
                   tuple(tuple(int(i) for i in a) for a in data["kernel_args"]),
                   tuple(int(n) for n in data["dynamic_shared"]))


def dtype_bits(dtype: str) -> int:
    if dtype == "bool":
        return 8
    match = re.match(r"^[a-z]+?(\d+)", dtype)
    if match is None:
        raise LoweringError(f"cannot size a buffer of dtype {dtype}")
    return int(match.group(1))


def dtype_bytes(dtype: str) -> int:
    return max(1, dtype_bits(dtype) // 8)


@dataclass(frozen=True)
class KernelParam:
    name: str
    ctype: str  # the element type of a pointer, or the scalar's type
    pointer: bool


def kernel_params(source: str) -> dict[str, tuple[KernelParam, ...]]:
    """Each `__global__` kernel's parameters, from its definition in the CUDA C (in the order
    the kernels are defined)."""
    out: dict[str, tuple[KernelParam, ...]] = {}
    for match in _KERNEL_DEF.finditer(source):
        name, text = match.group(1), match.group(2).strip()
        if name in out:
            continue
        params = []
        for part in (p.strip() for p in text.split(",")) if text else ():
            ident = re.search(r"(\w+)\s*$", part)
            if ident is None:
                raise LoweringError(f"{name}: cannot read the kernel parameter '{part}'")
            ctype = part[:ident.start()].replace("*", " ")
            ctype = " ".join(w for w in ctype.split() if w not in _QUALIFIERS)
            params.append(KernelParam(ident.group(1), ctype, "*" in part))
        out[name] = tuple(params)
    return out


def _c_name(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _shape(buffer) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in buffer.shape)
    except TypeError as e:
        raise LoweringError(f"buffer {buffer.name} has a symbolic shape {list(buffer.shape)}") from e


def host_allocations(body) -> list:
    """The global-memory buffers allocated in `body` outside any kernel (what TVM turns into
    workspaces the host allocates and passes to the kernels)."""
    from tvm import tirx

    found: list = []

    def children(s) -> list:
        if isinstance(s, tirx.SeqStmt):
            return list(s.seq)
        if isinstance(s, tirx.IfThenElse):
            return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
        body = getattr(s, "body", None)
        return [body] if isinstance(body, tirx.Stmt) else []

    def visit(s):
        if isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent":
            return  # inside a kernel
        if isinstance(s, tirx.AllocBuffer) and str(s.buffer.scope()) in ("global", ""):
            found.append(s.buffer)
        for c in children(s):
            visit(c)

    visit(body)
    return found


def launch_plan(bound, source: str, kernels: tuple[str, ...]) -> LaunchPlan:
    """The plan of a bound PrimFunc (`bind.bind_threads`) and the CUDA C TVM wrote for it."""
    fname = str(bound.attrs["global_symbol"]) if bound.attrs and "global_symbol" in bound.attrs else "main"
    arguments = tuple(PlanBuffer(p.name, _shape(p), str(p.dtype)) for p in bound.params)
    temps = tuple(PlanBuffer(b.name, _shape(b), str(b.dtype)) for b in host_allocations(bound.body))
    by_name: dict[str, int] = {}
    for i, b in enumerate((*arguments, *temps)):
        key = _c_name(b.name)
        if key in by_name:
            raise LoweringError(f"{fname}: two buffers are named {b.name} in the CUDA C")
        by_name[key] = i
    params = kernel_params(source)
    kernel_args = []
    for kernel in kernels:
        if kernel not in params:
            raise LoweringError(f"{fname}: no definition of kernel {kernel} in the CUDA C")
        args = []
        for p in params[kernel]:
            name = p.name.removesuffix("_ptr")
            index = by_name.get(name, by_name.get(p.name))
            if index is None and name.endswith(BITS_SUFFIX):  # a bfloat16/float8 buffer read as its bits
                index = by_name.get(name.removesuffix(BITS_SUFFIX))
            if not p.pointer or index is None:
                what = "a scalar parameter" if not p.pointer else "a parameter that names no buffer"
                raise LoweringError(f"{fname} ({kernel}): {what}, {p.ctype} {p.name}")
            buf = (*arguments, *temps)[index]
            size = _C_SIZES.get(p.ctype)
            if size is not None and size != dtype_bytes(buf.dtype):
                raise LoweringError(f"{fname} ({kernel}): parameter {p.ctype}* {p.name} points to {buf.name}, "
                                    f"a {buf.dtype} buffer")
            args.append(index)
        kernel_args.append(tuple(args))
    if re.search(r"extern\s+__shared__", source):
        raise LoweringError(f"{fname}: dynamic shared memory is not sized by the launch plan yet")
    # intermediates no kernel reads or writes (TVM dropped their code) are not allocated
    n = len(arguments)
    used = sorted({i for args in kernel_args for i in args if i >= n})
    renumber = {old: n + new for new, old in enumerate(used)}
    kernel_args = [tuple(renumber.get(i, i) for i in args) for args in kernel_args]
    temps = tuple(temps[i - n] for i in used)
    return LaunchPlan(arguments, temps, tuple(kernel_args), tuple(0 for _ in kernels))
