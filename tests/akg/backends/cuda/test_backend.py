"""The CUDA backend without a GPU: thread bindings from the recipe's marks, ptxas resource
reports parsed, configs over a GPU's limits rejected before measuring, artifacts that round
trip, nvcc failures named, and running or timing refused with a typed "no GPU" error that the
tuner records as the candidate's failure."""

import dataclasses
import shutil

import numpy as np
import pytest

import akg
from akg.backends.cuda import backend as cuda_backend
from akg.backends.cuda.bind import Launch
from akg.backends.cuda.errors import GpuResourceError, NoGpuError, NvccError
from akg.backends.cuda.nvcc import compile_cubin, parse_resource_usage
from akg.backends.cuda.spec import get_spec
from akg.backends.cuda.target import CudaTarget
from akg.graph import GraphBuilder
from akg.target import get_backend

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")

PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_kernel_1' for 'sm_80'
ptxas info    : Function properties for k_kernel_1
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 368 bytes cmem[0]
ptxas info    : Compiling entry function 'k_kernel' for 'sm_80'
ptxas info    : Function properties for k_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 368 bytes cmem[0]
"""


def _graph():
    b = GraphBuilder("k")
    b.output(b.relu(b.add(b.input("x", (100, 37)), b.input("y", (37,)))))
    return b.build()


def test_ptxas_resource_reports_are_parsed_per_kernel():
    res = parse_resource_usage(PTXAS)
    assert set(res) == {"k_kernel", "k_kernel_1"}
    one = res["k_kernel_1"]
    assert (one.registers, one.shared_bytes, one.barriers, one.stack_bytes, one.spill_stores, one.spill_loads) == \
        (40, 4096, 1, 16, 8, 4)
    assert res["k_kernel"].registers == 10 and res["k_kernel"].shared_bytes == 0


def test_resource_limits_reject_a_kernel_naming_it():
    spec = get_spec("sm_80")
    ok = Launch((4, 1, 1), (256, 1, 1))
    res = parse_resource_usage(PTXAS)
    cuda_backend.check_resources("k", ["k_kernel"], [ok], res, spec)
    with pytest.raises(GpuResourceError, match=r"k \(k_kernel\): 2048 threads per block, the GPU allows 1024"):
        cuda_backend.check_resources("k", ["k_kernel"], [Launch((1, 1, 1), (1024, 2, 1))], {}, spec)
    roomy = dataclasses.replace(spec, max_threads_per_block=4096)
    with pytest.raises(GpuResourceError, match=r"k \(k_kernel_1\): 40 registers x 2048 threads, the GPU has 65536"):
        cuda_backend.check_resources("k", ["k_kernel_1"], [Launch((1, 1, 1), (1024, 2, 1))], res, roomy)
    small = dataclasses.replace(spec, shared_per_block=1024)
    with pytest.raises(GpuResourceError, match="4096 bytes of shared memory per block, the GPU allows 1024"):
        cuda_backend.check_resources("k", ["k_kernel_1"], [ok], res, small)


@needs_nvcc
def test_a_gpu_with_fewer_registers_rejects_the_config_before_measuring():
    target = CudaTarget(gpu=dataclasses.replace(get_spec("sm_80"), name="tiny", registers_per_block=128))
    with pytest.raises(GpuResourceError, match=r"registers x 222 threads, the GPU has 128 per block"):
        akg.build(_graph(), target=target)


@needs_nvcc
def test_mapped_kernels_bind_blocks_and_threads_and_round_trip_as_artifacts():
    kernel = akg.build(_graph(), target="cuda")
    exe = kernel.executable
    assert exe.launches == (Launch((1, 17, 1), (37, 6, 1)),) and exe.kernels == ("k_kernel",)
    source = kernel.source("source")
    assert "__launch_bounds__(222)" in source and "threadIdx.y" in source and "blockIdx.y" in source
    assert ".entry k_kernel" in kernel.source("ptx")
    backend = kernel.target.backend()
    artifact = backend.export(exe)
    again = get_backend(artifact.kind).load(artifact)
    assert again == exe


def test_relu_and_maximum_keep_nans_in_cuda_c():
    # TVM prints TIR's max as CUDA's max (fmaxf), which returns the operand that is not NaN:
    # relu(NaN) was 0 on a GPU; the kernels now choose by comparisons and test for NaN (`y != y`)
    b = GraphBuilder("k")
    x = b.input("x", (64, 64))
    b.output(b.relu(x), b.op("maximum", x, b.input("y", (64, 64))))
    source = akg.build(b.build(), target="cuda").source("source")
    assert "max(" not in source and "CUDART_NAN_F" in source and "< 0x0p+0f" in source


def test_nvcc_failures_name_the_kernel():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    with pytest.raises(NvccError, match=r"my_kernel: nvcc -arch=sm_80 failed: .*error"):
        compile_cubin('extern "C" __global__ void f() { undefined_thing(); }', "sm_80", "my_kernel")


def test_running_without_a_gpu_is_a_typed_error(monkeypatch):
    monkeypatch.setattr(cuda_backend, "gpu_present", lambda: False)
    backend = get_backend("cuda-cubin")
    with pytest.raises(NoGpuError, match="no GPU here"):
        backend.to_device(None)
    exe = cuda_backend.CudaExecutable("k", "sm_80", "", b"", ("k_kernel",), (Launch((1, 1, 1), (1, 1, 1)),))
    with pytest.raises(NoGpuError, match="cannot time k: no GPU here"):
        backend.measure(exe, [], number=1, repeat=1)


@needs_nvcc
def test_the_tuner_records_candidates_without_a_gpu_as_failures(tmp_path, monkeypatch):
    from akg.db import open_database
    from akg.target import get_target
    from akg.tuner.builder import InProcessBuilder
    from akg.tuner.runner import InProcessRunner
    from akg.tuner.tune import tune

    monkeypatch.setattr(cuda_backend, "gpu_present", lambda: False)
    db = open_database(str(tmp_path / "cuda.db"))
    result = tune(_graph(), target="cuda", trials=2, db=db, cost_model="random", search="random",
                  builder=InProcessBuilder(str(tmp_path)), runner=InProcessRunner(min_seconds=0.001, repeats=1))
    (kernel,) = result.kernels
    assert kernel.failures == 2 and kernel.best_cost is None
    records = db.records(kernel.workload_key, get_target("cuda").key)
    assert len(records) == 2 and all("NoGpuError" in r.error and "no GPU here" in r.error for r in records)


@pytest.mark.gpu
def test_measuring_on_a_gpu():
    if not cuda_backend.gpu_present():
        pytest.skip("no CUDA GPU here")
    from akg.backends.cuda.driver import get_driver
    from akg.backends.cuda.spec import GPU_SPECS

    arch = "sm_" + "".join(map(str, get_driver().capability))
    if arch not in GPU_SPECS:
        pytest.skip(f"akg has no target for {arch}")
    kernel = akg.build(_graph(), target="cuda-" + arch.replace("_", ""))
    backend = kernel.target.backend()
    tensors, outs = kernel.device_arguments(np.ones((100, 37), "float32"), np.ones(37, "float32"))
    costs = backend.measure(kernel.executable, [*tensors, *outs], number=10, repeat=3)
    assert len(costs) == 3 and all(0 < c < 0.1 for c in costs)
    assert (backend.to_numpy(outs[0]) == 2).all()
