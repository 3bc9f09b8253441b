"""Hardware descriptions. Targets differ in data (vector width, cores, cache sizes), turned
into objects once at the API/CLI edge by `get_target`."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from akg.errors import UnknownTargetError


@dataclass(frozen=True)
class Target:
    kind: str

    @property
    def key(self) -> str:
        """What changes generated code; part of every tuning record's identity."""
        return self.kind

    def __str__(self) -> str:
        return self.key


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
    fast_math_reassoc: bool = True  # lets LLVM vectorize reductions (sum order may change)
    extra: tuple = field(default=(), compare=False)

    @property
    def key(self) -> str:
        return f"cpu-{self.mcpu}-{self.vector_bits}b-{self.cores}c"

    def vector_lanes(self, dtype: str) -> int:
        import numpy as np

        return max(1, self.vector_bits // (8 * np.dtype(dtype).itemsize))

    @property
    def accumulator_bytes(self) -> int:
        """Bytes of accumulators a register tile may hold: up to 16 vector registers, leaving
        four for operands and broadcasts (AVX-512: 16 x 64 B; AVX2's 16 registers: 12 x 32 B)."""
        return min(16, self.vector_registers - 4) * self.vector_bits // 8

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


def vector_strip(extent: int, lanes: int) -> int:
    """Width of the vector strip a CPU register tile computes along a loop of `extent`: two
    vectors when they divide the loop, else one (a partial last tile runs as a remainder).
    The CPU mapping tiles by it and constant weights are stored in panels of it, so that each
    vector load of the strip is one contiguous slice (`akg.graph.layout`)."""
    if extent % (2 * lanes) == 0:
        return 2 * lanes
    return lanes if extent >= lanes else extent


def vector_unit(features, triple: str, llvm_width: int) -> tuple[int, int]:
    """(vector bits, vector registers) of a CPU from its LLVM feature names. LLVM's own
    "vector width" answer is unreliable (512 for AVX2-only AMD Zen 3), so the features
    decide on x86; other architectures keep LLVM's width."""
    feats = {f.lstrip("+") for f in features}
    if triple.startswith(("x86_64", "i686", "i386")) or feats & {"sse2", "avx", "avx2", "avx512f"}:
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
                     l1_bytes=_cache_size(0, 32 * 1024), l2_bytes=_cache_size(2, 1024 * 1024))


TARGETS = {"cpu": host_cpu, "llvm": host_cpu}


def get_target(target: "str | Target") -> Target:
    """A Target object from a name ('cpu') or a Target; UnknownTargetError lists the known."""
    if isinstance(target, Target):
        return target
    factory = TARGETS.get(str(target).lower())
    if factory is None:
        raise UnknownTargetError(
            f"unknown target '{target}' (known: {', '.join(sorted(TARGETS))})")
    return factory()
