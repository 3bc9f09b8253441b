"""CUDA backend: mapped TIR -> thread bindings (`bind.py`) -> CUDA C by TVM's code generator
-> cubin by nvcc for the target's arch (`nvcc.py`), on every machine; a config whose kernels
need more threads, shared memory or registers per block than the GPU has is rejected here,
before anything is measured. Each executable carries its launch plan (`plan.py`): every
kernel's parameters as the caller's buffers or host-side intermediates.

Running and timing go through the CUDA driver API (`driver.py`, ctypes over libcuda; TVM's
CUDA runtime is not needed): the cubin is loaded once per executable, device tensors are
`CudaTensor`s (cuMemAlloc'd), a call launches the kernels in order with their grids and
blocks and waits for each (so a fault names its kernel), `measure` times `number` calls
between two CUDA events per repeat. Where there is no GPU, they raise `NoGpuError`, which the
tuner records as the candidate's failure."""

from __future__ import annotations

import base64
import functools
import json
import re
import shutil
import subprocess
import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from akg.backends.cuda.errors import CudaError, GpuMismatchError, GpuResourceError, NoGpuError
from akg.backends.cuda.nvcc import KernelResources, compile_cubin, compile_ptx
from akg.backends.cuda.plan import LaunchPlan, launch_plan
from akg.backends.cuda.target import ARTIFACT_KIND
from akg.errors import LoweringError
from akg.target import Artifact, Backend

if TYPE_CHECKING:
    from akg.backends.cuda.bind import Launch

_KERNEL_DECL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(')


@dataclass
class CudaExecutable:
    """A compiled kernel: its CUDA C, the cubin nvcc made of it, and each CUDA kernel of it
    (one per launch, in order) with its launch and resources; `plan` says what each kernel's
    parameters point to (None: an artifact from before launch plans, which cannot run)."""

    name: str
    arch: str
    source: str
    cubin: bytes
    kernels: tuple[str, ...]
    launches: tuple[Launch, ...]
    resources: dict[str, KernelResources] = field(default_factory=dict)
    plan: LaunchPlan | None = None

    def __getstate__(self):  # not the module loaded on a GPU (`CudaBackend._loaded`)
        return {k: v for k, v in self.__dict__.items() if k != "_akg_loaded"}


def cuda_source(func, target) -> tuple[str, list[Launch]]:
    """The CUDA C of a mapped PrimFunc (TVM's code generator; no nvcc) and its launches."""
    _, source, launches = generate(func, target)
    return source, launches


def generate(func, target):
    """(the bound PrimFunc, its CUDA C, its launches)."""
    import tvm

    from akg.backends.cuda.bind import bind_threads

    bound, launches = bind_threads(func)
    try:
        exe = tvm.compile(tvm.IRModule({"main": bound}), target=target.tvm_target())
    except Exception as e:  # TVM reports every failure as its own error types
        first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise LoweringError(f"CUDA code generation failed: {first}") from e
    for module in exe.mod.imports:
        text = module.inspect_source("cuda")
        if text:
            return bound, text, launches
    raise LoweringError("TVM produced no CUDA module")


def kernel_names(source: str) -> tuple[str, ...]:
    """The __global__ functions of a source, in the order they are defined (TVM declares each
    once before defining it)."""
    names = _KERNEL_DECL.findall(source)
    return tuple(dict.fromkeys(names))


def check_resources(name: str, kernels, launches, resources: dict[str, KernelResources], spec) -> None:
    """GpuResourceError when a kernel needs more of a block than the GPU gives one."""
    for kernel, launch in zip(kernels, launches):
        threads = launch.threads
        if threads > spec.max_threads_per_block:
            raise GpuResourceError(f"{name} ({kernel}): {threads} threads per block, the GPU allows "
                                   f"{spec.max_threads_per_block}")
        used = resources.get(kernel)
        if used is None:
            continue
        if used.shared_bytes > spec.shared_per_block:
            raise GpuResourceError(f"{name} ({kernel}): {used.shared_bytes} bytes of shared memory per block, "
                                   f"the GPU allows {spec.shared_per_block}")
        if used.registers * threads > spec.registers_per_block:
            raise GpuResourceError(f"{name} ({kernel}): {used.registers} registers x {threads} threads, "
                                   f"the GPU has {spec.registers_per_block} per block")


@functools.lru_cache(maxsize=None)
def gpu_present() -> bool:
    """Is a CUDA GPU usable here (nvidia-smi lists one)? Asked once per process (every tensor
    the backend makes asks)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and "GPU" in proc.stdout


def _np_dtype(dtype) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:  # bfloat16, float8: NumPy knows them once ml_dtypes is imported
        import importlib

        importlib.import_module("ml_dtypes")
        return np.dtype(dtype)


class CudaTensor:
    """A tensor in GPU memory: `ptr` (a CUdeviceptr) of `nbytes`, freed when the tensor goes
    (a view, `base` set, frees nothing and keeps its arena alive). `generation` is the
    driver's when it was made: a tensor from before a context reset is refused."""

    __slots__ = ("ptr", "nbytes", "shape", "dtype", "driver", "generation", "base", "__weakref__")

    def __init__(self, driver, ptr: int, nbytes: int, shape, dtype, base=None):
        self.driver, self.ptr, self.nbytes = driver, ptr, nbytes
        self.shape, self.dtype = tuple(int(d) for d in shape), _np_dtype(dtype)
        self.generation, self.base = driver.generation, base

    def __repr__(self) -> str:
        return f"CudaTensor({self.dtype}{list(self.shape)} at {self.ptr:#x})"

    def check(self) -> int:
        """The device pointer, or CudaError if a context reset freed it."""
        if self.generation != self.driver.generation:
            raise CudaError(f"a GPU tensor {self.dtype}{list(self.shape)} was freed by a context reset after a fault")
        return self.ptr

    def __del__(self):
        if self.base is None and self.ptr:
            try:
                self.driver.free(self.ptr, self.generation)
            except Exception:  # noqa: BLE001  (at exit the driver may be gone)
                pass


class _Loaded:
    """An executable's module in the current context: its functions and intermediates."""

    def __init__(self, driver, exe: CudaExecutable):
        self.driver, self.generation = driver, driver.generation
        self.lock = threading.Lock()
        self.module = driver.load_module(exe.cubin, exe.name)
        self.functions = [driver.function(self.module, k) for k in exe.kernels]
        self.temps = [CudaTensor(driver, driver.alloc(b.nbytes), b.nbytes, b.shape, b.dtype)
                      for b in exe.plan.temps]
        weakref.finalize(self, _unload, driver, self.module, self.generation)


def _unload(driver, module, generation) -> None:
    try:
        driver.unload_module(module, generation)
    except Exception:  # noqa: BLE001
        pass


def _runs_on(arch: str, capability: tuple[int, int]) -> bool:
    """Can a cubin for `arch` (sm_XY[a]) run on a GPU of compute capability `capability`?
    SASS runs on the same major version and a minor at least its own; sm_XYa only on X.Y."""
    match = re.fullmatch(r"sm_(\d+)(\d)(a?)", arch)
    if match is None:
        return False
    major, minor = int(match.group(1)), int(match.group(2))
    if match.group(3):
        return capability == (major, minor)
    return capability[0] == major and capability[1] >= minor


class CudaBackend(Backend):
    """Executables are `CudaExecutable`s; artifacts their JSON (source, cubin, launches, launch
    plan); device tensors `CudaTensor`s, run and timed through `driver.py`."""

    artifact_kind = ARTIFACT_KIND
    source_kind = "cuda"

    def compile(self, func, target, *, reciprocal: bool = True):
        name = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs else "main"
        bound, source, launches = generate(func, target)
        kernels = kernel_names(source)
        if len(kernels) != len(launches):
            raise LoweringError(f"{name}: {len(launches)} launches but {len(kernels)} CUDA kernels")
        plan = launch_plan(bound, source, kernels)
        spec = target.spec
        check_resources(name, kernels, launches, {}, spec)  # threads: before nvcc runs
        cubin, resources = compile_cubin(source, spec.arch, name)
        check_resources(name, kernels, launches, resources, spec)
        return CudaExecutable(name, spec.arch, source, cubin, kernels, tuple(launches), resources, plan)

    def export(self, executable: CudaExecutable) -> Artifact:
        data = {"name": executable.name, "arch": executable.arch, "source": executable.source,
                "cubin": base64.b64encode(executable.cubin).decode(), "kernels": list(executable.kernels),
                "launches": [launch.to_list() for launch in executable.launches],
                "resources": {k: vars(r) for k, r in executable.resources.items()},
                "plan": executable.plan.to_dict() if executable.plan is not None else None}
        return Artifact(self.artifact_kind, json.dumps(data).encode())

    def load(self, artifact: Artifact) -> CudaExecutable:
        if artifact.kind != self.artifact_kind:
            raise LoweringError(f"the CUDA backend cannot load an artifact of kind '{artifact.kind}'")
        from akg.backends.cuda.bind import Launch

        data = json.loads(artifact.data.decode())
        launches = tuple(Launch(tuple(g), tuple(b)) for g, b in data["launches"])
        resources = {k: KernelResources(**r) for k, r in data["resources"].items()}
        plan = LaunchPlan.from_dict(data["plan"]) if data.get("plan") else None
        return CudaExecutable(data["name"], data["arch"], data["source"], base64.b64decode(data["cubin"]),
                              tuple(data["kernels"]), launches, resources, plan)

    def source(self, executable: CudaExecutable, kind: str = "source") -> str:
        """'source' or 'cuda': the CUDA C; 'asm' or 'ptx': the PTX nvcc makes of it."""
        if kind in ("source", "cuda"):
            return executable.source
        if kind in ("asm", "ptx"):
            return compile_ptx(executable.source, executable.arch, executable.name)
        return ""

    # --- running (the CUDA driver API) ---------------------------------------------------------

    def __init__(self):
        self._driver = None  # set_driver: a driver given by a test
        self._lock = threading.Lock()

    def set_driver(self, driver) -> None:
        """Use `driver` (an `akg.backends.cuda.driver.Driver`, over libcuda or a fake) instead
        of this process's GPU; None: back to the GPU."""
        self._driver = driver

    def driver(self, what: str):
        if self._driver is not None:
            return self._driver
        if not gpu_present():
            raise NoGpuError(f"cannot {what}: no GPU here (nvidia-smi lists none)")
        from akg.backends.cuda.driver import get_driver

        try:
            return get_driver()
        except NoGpuError as e:
            raise NoGpuError(f"cannot {what}: {e}") from None

    def _loaded(self, exe: CudaExecutable, what: str) -> _Loaded:
        """The executable's module in the GPU's context, loaded once (again after a reset)."""
        driver = self.driver(what)
        if exe.plan is None:
            raise LoweringError(f"{exe.name}: the artifact has no launch plan (made before akg could run CUDA "
                                f"kernels): build it again")
        if not _runs_on(exe.arch, driver.capability):
            cc = "".join(map(str, driver.capability))
            raise GpuMismatchError(f"cannot {what}: it is compiled for {exe.arch}, the GPU here ({driver.name}) is "
                                   f"sm_{cc}: build for a target of that GPU (--target=cuda-sm{cc})")
        with self._lock:
            loaded = exe.__dict__.get("_akg_loaded")
            if loaded is None or loaded.driver is not driver or loaded.generation != driver.generation:
                loaded = _Loaded(driver, exe)
                exe.__dict__["_akg_loaded"] = loaded
        return loaded

    def _launches(self, exe: CudaExecutable, loaded: _Loaded, tensors) -> list:
        """(cuLaunchKernel's arguments, the argument values they point to, kernel) per kernel,
        for `tensors` in call order (checked against the plan)."""
        plan = exe.plan
        if len(tensors) != len(plan.arguments):
            raise CudaError(f"{exe.name} takes {len(plan.arguments)} tensors, got {len(tensors)}")
        pointers = []
        for t, b in zip(tensors, plan.arguments):
            if not isinstance(t, CudaTensor):
                raise CudaError(f"{exe.name}: argument {b.name} is a {type(t).__name__}, not a GPU tensor")
            if t.nbytes < b.nbytes:
                raise CudaError(f"{exe.name}: argument {b.name} ({b.dtype}{list(b.shape)}, {b.nbytes} bytes) "
                                f"is given a tensor of {t.nbytes} bytes")
            pointers.append(t.check())
        pointers += [t.ptr for t in loaded.temps]
        out = []
        for k, (kernel, launch) in enumerate(zip(exe.kernels, exe.launches)):
            params, values = loaded.driver.kernel_params([pointers[i] for i in plan.kernel_args[k]])
            args = loaded.driver.launch_args(loaded.functions[k], launch.grid, launch.block, plan.dynamic_shared[k],
                                             params)
            out.append((args, values, kernel))
        return out

    def entry(self, executable):
        exe = executable
        self._loaded(exe, f"run {exe.name}")  # load now: errors at entry, not at the first call

        def call(*tensors):
            loaded = self._loaded(exe, f"run {exe.name}")
            driver = loaded.driver
            launches = self._launches(exe, loaded, tensors)
            with loaded.lock:  # the intermediates are the executable's own: one call at a time
                driver.activate()  # the context, current on this thread
                for args, _values, kernel in launches:
                    driver.launch(args, kernel)
                    driver.synchronize(kernel)  # a fault names the kernel that made it

        call.__name__ = exe.name
        return call

    def to_device(self, array: np.ndarray):
        driver = self.driver("copy a tensor to the GPU")
        array = np.asarray(array)
        if not array.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
            array = np.array(array, order="C")
        tensor = CudaTensor(driver, driver.alloc(array.nbytes), array.nbytes, array.shape, array.dtype)
        driver.copy_to_device(tensor.ptr, array.ctypes.data, array.nbytes)
        return tensor

    def empty(self, shape, dtype: str):
        driver = self.driver("allocate a GPU tensor")
        dt = _np_dtype(dtype)
        nbytes = int(np.prod(tuple(shape), dtype=np.int64)) * dt.itemsize
        tensor = CudaTensor(driver, driver.alloc(nbytes), nbytes, shape, dt)
        driver.memset(tensor.ptr, nbytes)
        return tensor

    def view(self, arena, shape, dtype: str):
        dt = _np_dtype(dtype)
        nbytes = int(np.prod(tuple(shape), dtype=np.int64)) * dt.itemsize
        if nbytes > arena.nbytes:
            raise CudaError(f"a view of {nbytes} bytes over an arena of {arena.nbytes}")
        return CudaTensor(arena.driver, arena.check(), nbytes, shape, dt, base=arena)

    def to_numpy(self, tensor) -> np.ndarray:
        if not isinstance(tensor, CudaTensor):
            raise NoGpuError(f"cannot copy a tensor from the GPU: {type(tensor).__name__} is no GPU tensor")
        out = np.empty(tensor.shape, tensor.dtype)
        tensor.driver.copy_to_host(out.ctypes.data, tensor.check(), out.nbytes)
        return out

    def measure(self, executable, tensors, *, number: int, repeat: int) -> list[float]:
        """Seconds per call: per repeat, `number` calls (every kernel in order) between two
        CUDA events on the default stream, after one call to warm up."""
        exe = executable
        loaded = self._loaded(exe, f"time {exe.name}")
        driver = loaded.driver
        launches = self._launches(exe, loaded, tensors)
        number, repeat = max(1, int(number)), max(1, int(repeat))
        with loaded.lock:
            driver.activate()
            for args, _values, kernel in launches:
                driver.launch(args, kernel)
            driver.synchronize(exe.name)
            start, end = driver.event(), driver.event()
            generation = driver.generation
            try:
                costs = []
                for _ in range(repeat):
                    driver.record(start, exe.name)
                    for _ in range(number):
                        for args, _values, kernel in launches:
                            driver.launch(args, kernel)
                    driver.record(end, exe.name)
                    costs.append(driver.elapsed_ms(start, end, exe.name) / 1e3 / number)
            finally:
                for ev in (start, end):
                    try:
                        driver.destroy_event(ev, generation)
                    except CudaError:
                        pass
        return costs
