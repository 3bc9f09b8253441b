"""Typed errors of the NPU model. Each names the instruction (its listing line) that breaks
the rule. They are compile errors: a program that breaks a rule of the machine is a fault of
the code generator, except a tiling too big for a buffer, which is an illegal config that the
tuner counts and skips (`NpuCapacityError` is also a `ScheduleError`). `NpuMappingError` is
a kernel (statement) the backend cannot map yet; `NpuUnsupportedError` one that uses a feature the
NPU does not take at all yet (a dtype, an op without an instruction, data-dependent control flow
or indexing, zero-size tensors): valid input, an `UnsupportedError` (exit 4)."""

from __future__ import annotations

from akg.errors import CompileError, ScheduleError, UnsupportedError


class NpuSimError(CompileError):
    """A program breaks a rule of the NPU machine model."""


class NpuProgramError(NpuSimError):
    """A malformed instruction or program: unknown op, wrong scope or dtype, undefined loop
    variable, inconsistent shapes."""


class NpuCapacityError(NpuSimError, ScheduleError):
    """The buffers of a scope need more bytes than the scope has."""


class NpuAlignmentError(NpuSimError):
    """A buffer or operand address (or stride) is not aligned as its scope requires."""


class NpuPathError(NpuSimError):
    """A DMA between two scopes that no engine connects (or that the spec gives no rate)."""


class NpuBoundsError(NpuSimError):
    """An instruction touches elements outside its buffer."""


class NpuRaceError(NpuSimError):
    """Two accesses to one buffer region on different pipes, at least one a write, that no
    flag or barrier orders; the message names both instructions. Also two blocks of the
    kernel touching the same global memory, one of them writing."""


class NpuSyncError(NpuSimError):
    """Flags used inconsistently: a wait with no set before it (the machine would hang), or
    flags still set when the kernel ends."""


class NpuMappingError(CompileError):
    """A kernel (statement) the NPU backend cannot map yet."""


class NpuUnsupportedError(UnsupportedError, NpuMappingError):
    """A kernel that uses a feature the NPU backend does not take (yet): a dtype outside the
    NPU's, an op without a vector instruction or expansion, a guarded statement, an index that
    reads a tensor, a zero-size tensor. Valid input akg does not handle on this target
    (`UnsupportedError`, exit 4); still an `NpuMappingError`, so a layout that raises it makes
    way for the next and callers that catch compile errors catch it."""


class NpuCubePrecisionError(NpuMappingError):
    """An fp32 contraction too large for the vector path: the cube computes in fp16, which
    loses the precision the fp32 reference (rtol 1e-5) asks for."""
