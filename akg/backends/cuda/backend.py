"""CUDA backend: mapped TIR -> thread bindings (`bind.py`) -> CUDA C by TVM's code generator
-> cubin by nvcc for the target's arch (`nvcc.py`), on every machine; a config whose kernels
need more threads, shared memory or registers per block than the GPU has is rejected here,
before anything is measured. Running and timing need a GPU: where there is none, they raise
`NoGpuError`, which the tuner records as the candidate's failure."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field

import numpy as np
import tvm

from akg.backends.cuda.bind import Launch, bind_threads
from akg.backends.cuda.errors import GpuResourceError, NoGpuError
from akg.backends.cuda.nvcc import KernelResources, compile_cubin, compile_ptx
from akg.backends.cuda.target import ARTIFACT_KIND
from akg.errors import LoweringError
from akg.target import Artifact, Backend

_KERNEL_DECL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(')


@dataclass
class CudaExecutable:
    """A compiled kernel: its CUDA C, the cubin nvcc made of it, and each CUDA kernel of it
    (one per launch, in order) with its launch and resources."""

    name: str
    arch: str
    source: str
    cubin: bytes
    kernels: tuple[str, ...]
    launches: tuple[Launch, ...]
    resources: dict[str, KernelResources] = field(default_factory=dict)


def cuda_source(func, target) -> tuple[str, list[Launch]]:
    """The CUDA C of a mapped PrimFunc (TVM's code generator; no nvcc) and its launches."""
    bound, launches = bind_threads(func)
    try:
        exe = tvm.compile(tvm.IRModule({"main": bound}), target=target.tvm_target())
    except Exception as e:  # TVM reports every failure as its own error types
        first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise LoweringError(f"CUDA code generation failed: {first}") from e
    for module in exe.mod.imports:
        text = module.inspect_source("cuda")
        if text:
            return text, launches
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


def gpu_present() -> bool:
    """Is a CUDA GPU usable here (nvidia-smi lists one)?"""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and "GPU" in proc.stdout


def _no_gpu(what: str) -> NoGpuError:
    reason = "no GPU here (nvidia-smi lists none)" if not gpu_present() else \
        "running CUDA kernels is not implemented yet (the kernel compiled)"
    return NoGpuError(f"cannot {what}: {reason}")


class CudaBackend(Backend):
    """Executables are `CudaExecutable`s; artifacts their JSON (source, cubin, launches)."""

    artifact_kind = ARTIFACT_KIND
    source_kind = "cuda"

    def compile(self, func, target, *, reciprocal: bool = True):
        name = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs else "main"
        source, launches = cuda_source(func, target)
        kernels = kernel_names(source)
        if len(kernels) != len(launches):
            raise LoweringError(f"{name}: {len(launches)} launches but {len(kernels)} CUDA kernels")
        spec = target.spec
        check_resources(name, kernels, launches, {}, spec)  # threads: before nvcc runs
        cubin, resources = compile_cubin(source, spec.arch, name)
        check_resources(name, kernels, launches, resources, spec)
        return CudaExecutable(name, spec.arch, source, cubin, kernels, tuple(launches), resources)

    def export(self, executable: CudaExecutable) -> Artifact:
        data = {"name": executable.name, "arch": executable.arch, "source": executable.source,
                "cubin": base64.b64encode(executable.cubin).decode(), "kernels": list(executable.kernels),
                "launches": [launch.to_list() for launch in executable.launches],
                "resources": {k: vars(r) for k, r in executable.resources.items()}}
        return Artifact(self.artifact_kind, json.dumps(data).encode())

    def load(self, artifact: Artifact) -> CudaExecutable:
        if artifact.kind != self.artifact_kind:
            raise LoweringError(f"the CUDA backend cannot load an artifact of kind '{artifact.kind}'")
        data = json.loads(artifact.data.decode())
        launches = tuple(Launch(tuple(g), tuple(b)) for g, b in data["launches"])
        resources = {k: KernelResources(**r) for k, r in data["resources"].items()}
        return CudaExecutable(data["name"], data["arch"], data["source"], base64.b64decode(data["cubin"]),
                              tuple(data["kernels"]), launches, resources)

    def source(self, executable: CudaExecutable, kind: str = "source") -> str:
        """'source' or 'cuda': the CUDA C; 'asm' or 'ptx': the PTX nvcc makes of it."""
        if kind in ("source", "cuda"):
            return executable.source
        if kind in ("asm", "ptx"):
            return compile_ptx(executable.source, executable.arch, executable.name)
        return ""

    def entry(self, executable):
        raise _no_gpu(f"run {executable.name}")

    def to_device(self, array: np.ndarray):
        raise _no_gpu("copy a tensor to the GPU")

    def empty(self, shape, dtype: str):
        raise _no_gpu("allocate a GPU tensor")

    def to_numpy(self, tensor) -> np.ndarray:
        raise _no_gpu("copy a tensor from the GPU")

    def measure(self, executable, tensors, *, number: int, repeat: int) -> list[float]:
        raise _no_gpu(f"time {executable.name}")
