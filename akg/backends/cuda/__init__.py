"""The CUDA target plug-in: kernels mapped to blocks and threads from the isl schedule tree
(`schedules/cuda.py`), compiled to CUDA C by TVM and to cubins by nvcc on every machine
(`backend.py`), and emulated on the host for checking (`emulate.py`). GPUs are specs
(`spec.py`). See docs/cuda.md.

Registers `cuda` (sm_80), `cuda-sm80`, `cuda-sm90`, and the emulation `cuda-emu` (sm_80),
`cuda-emu-sm80`, `cuda-emu-sm90`; the backends of artifact kinds "cuda-cubin" and
"cuda-emu-llvm"."""

from functools import partial

from akg.target import register_backend, register_target


def _register() -> None:
    from akg.backends.cuda.spec import GPU_SPECS
    from akg.backends.cuda.target import cuda_emu_target, cuda_target

    register_target("cuda", cuda_target, replace=True)
    register_target("cuda-emu", cuda_emu_target, replace=True)
    for name in list(GPU_SPECS):
        short = name.replace("_", "")  # sm_80 -> sm80
        register_target(f"cuda-{short}", partial(cuda_target, name), replace=True)
        register_target(f"cuda-emu-{short}", partial(cuda_emu_target, name), replace=True)
    from akg.backends.cuda.backend import CudaBackend
    from akg.backends.cuda.emulate import CudaEmuBackend

    register_backend(CudaBackend(), replace=True)
    register_backend(CudaEmuBackend(), replace=True)


_register()
