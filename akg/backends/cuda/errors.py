"""Typed errors of the CUDA target. nvcc failing on generated code is a fault of the code
generator (`NvccError`, naming the kernel); a config whose kernel needs more of a block's
resources than the GPU has (threads, shared memory, registers) is an illegal config the
tuner records and skips before measuring (`GpuResourceError` is also a `ScheduleError`);
measuring where no GPU exists is `NoGpuError`, which the tuner records as the candidate's
failure with that reason. A CUDA driver call failing on a GPU (a launch over the GPU's limits,
a kernel's illegal address) is `CudaError`, naming the call, the kernel and the driver's
error name; the executable compiled for another GPU than the one here is `GpuMismatchError`."""

from __future__ import annotations

from akg.errors import AkgError, LoweringError, ScheduleError


class NvccError(LoweringError):
    """nvcc rejected the CUDA C of a kernel (the message names the kernel and nvcc's first error)."""


class GpuResourceError(LoweringError, ScheduleError):
    """A kernel needs more threads per block, shared memory or registers than the GPU has."""


class NoGpuError(AkgError):
    """A CUDA kernel was to run or be timed on a machine without a usable GPU."""

    exit_code = 1


class GpuMismatchError(NoGpuError):
    """The GPU here cannot run the executable: it was compiled for another arch."""


class CudaError(AkgError):
    """A CUDA driver call failed: `call` (cuLaunchKernel, ...), `kernel` where one was
    concerned, `code` the driver's error name (CUDA_ERROR_...), `sticky` when the context had
    to be reset (an illegal address: every allocation of this process on the GPU is gone)."""

    def __init__(self, message: str, call: str = "", kernel: str | None = None, code: str = "",
                 sticky: bool = False):
        super().__init__(message)
        self.call, self.kernel, self.code, self.sticky = call, kernel, code, sticky
