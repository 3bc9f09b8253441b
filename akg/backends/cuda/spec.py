"""The numbers of a CUDA GPU, all in one frozen `GpuSpec`: another GPU is another spec, never
a code change. `GPU_SPECS` holds the presets by compute capability ("sm_80": an A100-like
part, "sm_90": an H100-like part; public datasheet figures taken as model parameters, not
measurements). The mapping recipe reads its limits (threads per block, warp size, grid
limits), the backend its resource limits (shared memory, registers) and `key()` keys tuning
records."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from akg.errors import UnknownTargetError
from akg.registry import Registry

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class GpuSpec:
    """Every number of one GPU. Sizes in bytes, bandwidth in bytes/s, rates in FLOP/s;
    `tensor_core_shapes` are (m, n, k) of one warp-level fp16 MMA."""

    name: str
    arch: str  # what nvcc's -arch takes: "sm_80"
    sms: int
    max_threads_per_block: int = 1024
    max_block_dims: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    warp_size: int = 32
    shared_per_block: int = 48 * KIB  # without the opt-in to a larger dynamic allocation
    shared_per_block_optin: int = 163 * KIB
    shared_per_sm: int = 164 * KIB
    registers_per_thread: int = 255
    registers_per_block: int = 64 * 1024
    registers_per_sm: int = 64 * 1024
    max_threads_per_sm: int = 2048
    l2_bytes: int = 40 * MIB
    dram_bandwidth: float = 1.555e12
    peak_fp32: float = 19.5e12
    peak_fp16: float = 312e12  # tensor cores, dense
    peak_fp16_simt: float = 78e12  # without tensor cores (what akg's mapping uses: no MMA yet)
    tensor_core_shapes: tuple[tuple[int, int, int], ...] = ((16, 8, 16), (16, 16, 16))

    @property
    def compute_capability(self) -> tuple[int, int]:
        digits = self.arch.removeprefix("sm_")
        return int(digits[:-1]), int(digits[-1])

    def key(self) -> str:
        """Stable identity for tuning records: the arch, the name and a digest of every number,
        so two specs that differ in any number never share records."""
        return f"{self.arch}-{self.name}-{hashlib.sha256(self.to_json().encode()).hexdigest()[:12]}"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "GpuSpec":
        data = json.loads(text)
        for name in ("max_block_dims", "max_grid_dims"):
            data[name] = tuple(data[name])
        data["tensor_core_shapes"] = tuple(tuple(s) for s in data["tensor_core_shapes"])
        return cls(**data)


def _unknown_spec(name: str, known: list[str]) -> Exception:
    return UnknownTargetError(f"unknown GPU spec '{name}' (known: {', '.join(known)})")


GPU_SPECS: Registry[GpuSpec] = Registry("GPU spec", _unknown_spec)

# Sources: NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), table 1 (A100 40GB SXM: 108
# SMs, 1555 GB/s HBM2, FP32 19.5 TFLOP/s, FP16 non-tensor 78, FP16 tensor dense 312; the 80GB part
# has 2039 GB/s) and NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), table 3 (H100
# SXM5: 132 SMs, 3.35 TB/s HBM3, FP32 66.9 TFLOP/s, FP16 non-tensor 133.8, FP16 tensor dense 989.4).
GPU_SPECS.register("sm_80", GpuSpec(
    name="a100-like", arch="sm_80", sms=108, shared_per_block_optin=163 * KIB, shared_per_sm=164 * KIB,
    max_threads_per_sm=2048, l2_bytes=40 * MIB, dram_bandwidth=1.555e12, peak_fp32=19.5e12, peak_fp16=312e12,
    peak_fp16_simt=78e12,
    tensor_core_shapes=((16, 8, 16), (16, 8, 8), (16, 16, 16))))
GPU_SPECS.register("sm_90", GpuSpec(
    name="h100-like", arch="sm_90", sms=132, shared_per_block_optin=227 * KIB, shared_per_sm=228 * KIB,
    max_threads_per_sm=2048, l2_bytes=50 * MIB, dram_bandwidth=3.35e12, peak_fp32=67e12, peak_fp16=989e12,
    peak_fp16_simt=133.8e12,
    tensor_core_shapes=((16, 8, 16), (16, 8, 8), (16, 16, 16), (64, 256, 16))))

SPEC_DEFAULT = "sm_80"


def get_spec(name: str = SPEC_DEFAULT) -> GpuSpec:
    return GPU_SPECS.get(name)
