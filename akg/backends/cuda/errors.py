"""Typed errors of the CUDA target. nvcc failing on generated code is a fault of the code
generator (`NvccError`, naming the kernel); a config whose kernel needs more of a block's
resources than the GPU has (threads, shared memory, registers) is an illegal config the
tuner records and skips before measuring (`GpuResourceError` is also a `ScheduleError`);
measuring where no GPU exists is `NoGpuError`, which the tuner records as the candidate's
failure with that reason."""

from __future__ import annotations

from akg.errors import AkgError, LoweringError, ScheduleError


class NvccError(LoweringError):
    """nvcc rejected the CUDA C of a kernel (the message names the kernel and nvcc's first error)."""


class GpuResourceError(LoweringError, ScheduleError):
    """A kernel needs more threads per block, shared memory or registers than the GPU has."""


class NoGpuError(AkgError):
    """A CUDA kernel was to run or be timed on a machine without a usable GPU."""

    exit_code = 1
