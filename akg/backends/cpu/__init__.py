"""The CPU target plug-in: the host CPU through LLVM (`cpu`, alias `llvm`), and a fixed
generic CPU whose numbers do not depend on the host (`cpu-generic`, for tests)."""

from akg.backends.cpu.backend import CpuBackend
from akg.backends.cpu.target import CpuTarget, generic_cpu, host_cpu
from akg.target import register_backend, register_target

register_target("cpu", host_cpu)
register_target("llvm", host_cpu)
register_target("cpu-generic", generic_cpu)
register_backend(CpuBackend())

__all__ = ["CpuBackend", "CpuTarget", "generic_cpu", "host_cpu"]
