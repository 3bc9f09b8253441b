"""The CPU as LLVM sees it: `CpuTarget` (vector unit, cores, caches), detected from the host
by `host_cpu`, or fixed (`generic_cpu`) for results that must not depend on the host."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from akg.target import (FAST_MATH, PACK, PARALLEL, REASSOCIATE, STREAM, UNROLL, VECTOR, MemoryLevel, Target)


@dataclass(frozen=True)
class CpuTarget(Target):
    """The host CPU as LLVM sees it."""

    kind: str = "cpu"
    mcpu: str = "generic"
    triple: str = ""
    features: tuple[str, ...] = ()
    cores: int = 1
    vector_bits: int = 128
    vector_registers: int = 16
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 1024 * 1024
    l3_bytes: int = 0  # the last-level cache (0: unknown)
    fast_math_reassoc: bool = True  # lets LLVM vectorize reductions (sum order may change)
    extra: tuple = field(default=(), compare=False)

    winograd: ClassVar[bool] = True  # `Target.winograd`
    one_read_moments: ClassVar[bool] = True  # `Target.one_read_moments`

    def __post_init__(self):
        if not self.memory:
            object.__setattr__(self, "memory", (
                MemoryLevel("global", 0, 64, "device"),
                MemoryLevel("L2", self.l2_bytes, 64, "core"),
                MemoryLevel("L1", self.l1_bytes, 64, "core"),
                MemoryLevel("registers", self.accumulator_bytes, self.vector_bits // 8, "core"),
            ))
        if not self.capabilities:
            caps = {VECTOR, UNROLL, PACK, FAST_MATH, PARALLEL}
            if self.fast_math_reassoc:
                caps.add(REASSOCIATE)
            if self.x86:
                caps.add(STREAM)
            object.__setattr__(self, "capabilities", frozenset(caps))

    @property
    def x86(self) -> bool:
        return is_x86(self.features, self.triple)

    @property
    def key(self) -> str:
        return f"cpu-{self.mcpu}-{self.vector_bits}b-{self.cores}c"

    @property
    def accumulator_bytes(self) -> int:
        """Bytes of accumulators a register tile may hold: up to 16 vector registers, leaving
        four for operands and broadcasts (AVX-512: 16 x 64 B; AVX2's 16 registers: 12 x 32 B)."""
        return min(16, self.vector_registers - 4) * self.vector_bits // 8

    def weight_panel(self, dtype: str, columns: int) -> int | None:
        from akg.schedules.cpu_band import vector_strip

        return vector_strip(columns, self.vector_lanes(dtype))

    def channel_strip(self, dtype: str, width: int) -> int:
        """Output channels per register tile where a conv with output rows `width` wide is
        mapped over its output channels (`akg.schedules.cpu_defaults.channel_strip`)."""
        from akg.schedules.cpu_defaults import channel_strip

        return channel_strip(width, self.vector_lanes(dtype), np.dtype(dtype).itemsize, self.accumulator_bytes)

    def recipe(self):
        from akg.schedules.cpu import CpuRecipe

        return CpuRecipe(self)

    def backend(self):
        from akg.target import get_backend

        from akg.backends.cpu.backend import CpuBackend

        return get_backend(CpuBackend.artifact_kind)

    def lowering(self, config):
        from akg.backends.cpu.lowering import cpu_lowering

        return cpu_lowering(self, config)

    def tvm_target(self, reciprocal: bool = True):
        """The TVM target; `reciprocal` lets LLVM divide by a loop-invariant value through one
        reciprocal (off for kernels with float16 data: 1/x overflows float16 far sooner)."""
        import tvm

        spec = {"kind": "llvm", "mcpu": self.mcpu, "num-cores": self.cores}
        if self.vector_bits >= 512:  # LLVM otherwise auto-vectorises with 256-bit vectors on Intel
            spec["mattr"] = ["-prefer-256-bit"]
        if self.triple:
            spec["mtriple"] = self.triple
        if self.fast_math_reassoc:
            spec["fast-math-reassoc"] = True
            spec["fast-math-contract"] = True
            if reciprocal:
                spec["fast-math-arcp"] = True
        return tvm.target.Target(spec)


def _cache_size(level: int, default: int) -> int:
    path = f"/sys/devices/system/cpu/cpu0/cache/index{level}/size"
    try:
        text = open(path).read().strip()
    except OSError:
        return default
    mult = {"K": 1024, "M": 1024 * 1024}.get(text[-1], 1)
    return int(text.rstrip("KM")) * mult


def is_x86(features, triple: str) -> bool:
    """Is a CPU of this LLVM triple and these feature names an x86?"""
    return triple.startswith(("x86_64", "i686", "i386")) or bool(
        {f.lstrip("+") for f in features} & {"sse2", "avx", "avx2", "avx512f"})


def vector_unit(features, triple: str, llvm_width: int) -> tuple[int, int]:
    """(vector bits, vector registers) of a CPU from its LLVM feature names. LLVM's own
    "vector width" answer is unreliable (512 for AVX2-only AMD Zen 3), so the features
    decide on x86; other architectures keep LLVM's width."""
    feats = {f.lstrip("+") for f in features}
    if is_x86(features, triple):
        if "avx512f" in feats:
            return 512, 32
        if "avx" in feats:
            return 256, 16
        return 128, 16
    if triple.startswith(("aarch64", "arm64")):
        return 128, 32
    return max(llvm_width, 128), 16


@functools.lru_cache(maxsize=None)
def host_cpu() -> CpuTarget:
    import tvm
    from tvm.target import codegen

    mcpu = codegen.llvm_get_system_cpu() or "generic"
    probe = tvm.target.Target({"kind": "llvm", "mcpu": mcpu})
    try:
        width = int(codegen.llvm_get_vector_width(probe))
    except Exception:  # older/odd LLVM builds
        width = 128
    feats = tuple(sorted(codegen.llvm_get_cpu_features(probe)))
    triple = codegen.llvm_get_system_triple()
    bits, registers = vector_unit(feats, triple, width)
    return CpuTarget(mcpu=mcpu, triple=triple, features=feats, cores=os.cpu_count() or 1,
                     vector_bits=bits, vector_registers=registers,
                     l1_bytes=_cache_size(0, 32 * 1024), l2_bytes=_cache_size(2, 1024 * 1024),
                     l3_bytes=_cache_size(3, 0))


def generic_cpu() -> CpuTarget:
    """A CPU whose every number is fixed (LLVM's generic model of the host's architecture,
    128-bit vectors, 16 registers, 2 cores, 32 KiB L1, 1 MiB L2): default configs and spaces
    that do not change with the machine the tests run on."""
    return CpuTarget(mcpu="generic", cores=2, vector_bits=128, vector_registers=16,
                     l1_bytes=32 * 1024, l2_bytes=1024 * 1024)
