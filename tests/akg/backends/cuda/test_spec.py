"""GPU specs are data: the presets, their keys, JSON round trips, and the targets built on them."""

import dataclasses

import pytest

from akg.backends.cuda.spec import GPU_SPECS, GpuSpec, get_spec
from akg.backends.cuda.target import CudaTarget
from akg.errors import UnknownTargetError
from akg.target import THREADS, get_target


def test_presets_hold_the_datasheet_numbers():
    a100, h100 = get_spec("sm_80"), get_spec("sm_90")
    assert (a100.sms, a100.arch, a100.warp_size, a100.max_threads_per_block) == (108, "sm_80", 32, 1024)
    assert (h100.sms, h100.arch, h100.shared_per_sm) == (132, "sm_90", 228 * 1024)
    assert a100.compute_capability == (8, 0) and h100.compute_capability == (9, 0)
    assert h100.dram_bandwidth > a100.dram_bandwidth and h100.peak_fp16 > a100.peak_fp16
    assert (16, 8, 16) in a100.tensor_core_shapes and a100.registers_per_block == 65536
    assert set(GPU_SPECS) == {"sm_80", "sm_90"}


def test_a_spec_round_trips_through_json_and_unknown_names_list_the_known():
    spec = get_spec("sm_90")
    assert GpuSpec.from_json(spec.to_json()) == spec
    with pytest.raises(UnknownTargetError, match="unknown GPU spec 'sm_10'.*sm_80, sm_90"):
        get_spec("sm_10")


def test_targets_by_name_carry_their_spec_in_their_key():
    cuda, sm90, emu = get_target("cuda"), get_target("cuda-sm90"), get_target("cuda-emu")
    assert cuda.arch == "sm_80" and sm90.arch == "sm_90" and get_target("cuda-sm80") == cuda
    assert cuda.key.startswith("cuda-sm_80-a100-like-") and sm90.key.startswith("cuda-sm_90-h100-like-")
    assert CudaTarget(gpu=dataclasses.replace(cuda.spec, registers_per_block=128)).key != cuda.key
    assert emu.key.startswith("cuda-emu-sm_80") and emu.key != cuda.key
    assert get_target("cuda-emu-sm90").arch == "sm_90"
    assert cuda.has(THREADS) and cuda.max_threads == 1024 and cuda.cores == 108
    assert [(m.name, m.scope) for m in cuda.memory] == [("global", "device"), ("shared", "core"),
                                                         ("registers", "thread")]
    assert cuda.level("shared").bytes == 48 * 1024
    assert cuda.backend().artifact_kind == "cuda-cubin" and emu.backend().artifact_kind == "cuda-emu-llvm"


def test_nothing_outside_the_cuda_plug_in_names_it():
    """Shared code reaches the CUDA target through the Target object only (docs/targets.md)."""
    from pathlib import Path

    import akg

    root = Path(akg.__file__).parents[1]
    own = {root / "schedules" / "cuda.py", root / "schedules" / "cuda_split.py", root / "schedules" / "cuda_reduce.py",
           root / "schedules" / "cuda_shared.py", root / "schedules" / "cuda_registers.py"}
    for folder in ("akg", "graph", "polyhedral", "schedules", "tuner", "db"):
        for path in (root / folder).rglob("*.py"):
            if path in own or (root / "akg" / "backends" / "cuda") in path.parents:
                continue
            assert "cuda" not in path.read_text().lower(), path
