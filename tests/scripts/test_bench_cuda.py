"""The CUDA benchmark (scripts/bench/cuda.py): without a GPU it reports each generated kernel's
launches, nvcc's resource usage and a roofline estimate from the spec, labelled as one; the
traffic model counts a warp's 32-byte sectors; with a GPU (the `gpu` marker) it runs the peers."""

import importlib.util
import sys
from pathlib import Path

import pytest

from akg.backends.cuda.nvcc import nvcc_path

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench"
needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not installed")


@pytest.fixture(scope="module")
def bench():
    """scripts/bench/cuda.py as a module, registered in sys.modules (its dataclasses need it)."""
    path = BENCH / "cuda.py"
    spec = importlib.util.spec_from_file_location("scripts_bench_cuda", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def traffic(bench_module):
    return bench_module("cuda_traffic")


@needs_nvcc
def test_without_a_gpu_the_table_has_resources_and_labelled_estimates(bench, tmp_path, capsys):
    record = tmp_path / "perf.md"
    assert bench.main(["--small", "--no-gpu", "--only", "softmax,bias_gelu", "--record", str(record)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| softmax") or line.startswith("| bias_gelu")]
    assert len(rows) == 2
    softmax, gelu = rows
    # the default mapping of softmax: one block per row, a 256-thread tree in shared memory
    assert "16 x 256" in softmax and "reduce(0, threads, 256)" in softmax
    assert " regs, " in softmax and "1608 B smem" in softmax
    assert "estimate (no GPU)" in out and "No GPU here" in out
    assert "(memory)" in gelu and "%" in gelu.split("|")[-2]
    text = record.read_text()
    assert text.startswith("\n## CUDA: generated kernels and a roofline estimate (no GPU)")
    assert "estimate (no GPU)" in text and "| bias_gelu 64x128 |" in text


@needs_nvcc
def test_the_traffic_model_counts_a_warps_sectors(bench, traffic):
    import akg
    from akg.backends.cuda.bind import bind_threads

    w = bench.workloads(small=True)["bias_gelu"]  # x (64,128) + bias (128,) -> (64,128), fp32
    graph = bench.graph_of(w)
    kernel = akg.build(graph, target="cuda")
    bound, _ = bind_threads(kernel.func)
    (launch,) = traffic.launch_traffic(bound)
    warps = 64 * 128 // 32
    # per warp: 32 consecutive floats of x, of bias (x's address used twice: one load) and of the
    # output, 4 sectors each; bias is read again by every warp (no reuse across warps)
    assert launch.bytes == warps * 3 * 4 * 32
    est = bench.estimate(kernel, graph, kernel.target.spec, "float32")
    assert est["ideal_bytes"] == (64 * 128 * 2 + 128) * 4 and est["bound"] == "memory"
    assert est["ideal_s"] <= est["mapped_s"]


@needs_nvcc
def test_the_model_sees_register_tiles_reuse_of_shared_elements(bench):
    """Same block tile (32 x 32): 8 x 8 threads with 4 x 4 outputs each read a quarter of
    the shared elements per multiply-add that 32 x 32 threads with one output each read;
    unpadded, a warp's 4 rows of the A tile (16 floats apart) meet in pairs in a bank."""
    import akg
    from akg.schedules.space import Config, Step

    graph = bench.graph_of(bench._matmul(256, 256, 256, "float32"))
    est = {}
    for threads, work, pad in (((32, 32), (1, 1), 0), ((8, 8), (4, 4), 1), ((8, 8), (4, 4), 0)):
        steps = (Step("order", 0, None, (0, 1)), Step("map", 0, "threads", threads),
                 Step("tile", 0, "registers", work), Step("promote", 0, "shared", (16, pad)))
        kernel = akg.build(graph, target="cuda", config=Config("smart", steps))
        est[work, pad] = bench.estimate(kernel, graph, kernel.target.spec, "float32")
    one, tiled, conflicts = est[(1, 1), 0], est[(4, 4), 1], est[(4, 4), 0]
    assert one["mapped_bound"] == "shared" and one["mapped_s"] > max(conflicts["mapped_s"], tiled["mapped_s"])
    assert 3.5 < one["shared_wavefronts"] / tiled["shared_wavefronts"] <= 4
    assert 1.3 < conflicts["shared_wavefronts"] / tiled["shared_wavefronts"] < 1.6  # 12 wavefronts a term, not 8


def test_the_nearest_spec(bench):
    assert bench.nearest_spec((9, 0)) == "sm_90" and bench.nearest_spec((8, 6)) == "sm_80"
    assert bench.nearest_spec((10, 0)) == "sm_90" and bench.nearest_spec((7, 5)) == "sm_80"


@needs_nvcc
def test_a_gpu_listed_that_nothing_here_can_run_still_gets_its_report(bench, monkeypatch, capsys):
    """The GPU path with nvidia-smi faked: each peer that cannot run (torch without CUDA, TVM
    without the CUDA runtime, akg's backend) says why, nothing crashes, no target is judged."""
    import akg.backends.cuda.backend as cuda_backend

    monkeypatch.setattr(bench, "gpu_info", lambda: {"name": "NVIDIA H200", "compute_capability": (9, 0),
                                                    "memory": "143771 MiB"})
    monkeypatch.setattr(bench, "torch_cuda", lambda: (None, "torch has no CUDA device"))
    monkeypatch.setattr(cuda_backend, "gpu_present", lambda: False)
    assert bench.main(["--small", "--only", "softmax", "--trials", "2"]) == 0
    out = capsys.readouterr().out
    assert "GPU: NVIDIA H200 (compute capability 9.0; spec `sm_90`)" in out
    (row,) = [line for line in out.splitlines() if line.startswith("| softmax 16x256 | not measured")]
    assert "NoGpuError" in row and "(not tuned)" in row and row.endswith("| - |")
    assert "torch peers skipped: torch has no CUDA device" in out
    assert "Spec `sm_90` (h100-like)" in out  # the generated kernels for the GPU's spec


@pytest.mark.gpu
def test_on_a_gpu_the_peers_run_in_the_same_report(bench, capsys):
    if bench.gpu_info() is None:
        pytest.skip("no CUDA GPU here")
    assert bench.main(["--small", "--only", "softmax,matmul_f32", "--trials", "4"]) == 0
    out = capsys.readouterr().out
    assert "GPU: " in out and "measured device-memory bandwidth" in out
    assert "| softmax 16x256 |" in out and "| matmul 64x64x64 float32 |" in out
