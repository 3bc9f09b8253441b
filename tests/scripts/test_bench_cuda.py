"""The CUDA benchmark (scripts/bench/cuda.py): without a GPU it reports each generated kernel's
launches, nvcc's resource usage and a roofline estimate from the spec, labelled as one; the
traffic model counts a warp's 32-byte sectors; with a GPU (the `gpu` marker) it runs the peers."""

import importlib.util
import sys
from pathlib import Path

import pytest

from akg.backends.cuda.nvcc import nvcc_path

needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not installed")


@pytest.fixture(scope="module")
def bench():
    """scripts/bench/cuda.py as a module, registered in sys.modules (its dataclasses need it)."""
    path = Path(__file__).parents[2] / "scripts" / "bench" / "cuda.py"
    spec = importlib.util.spec_from_file_location("scripts_bench_cuda", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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
def test_the_traffic_model_counts_a_warps_sectors(bench):
    import akg
    from akg.backends.cuda.bind import bind_threads

    w = bench.workloads(small=True)["bias_gelu"]  # x (64,128) + bias (128,) -> (64,128), fp32
    graph = bench.graph_of(w)
    kernel = akg.build(graph, target="cuda")
    bound, _ = bind_threads(kernel.func)
    (launch,) = bench.launch_traffic(bound)
    warps = 64 * 128 // 32
    # per warp: 32 consecutive floats of x, of bias (x's address used twice: one load) and of the
    # output, 4 sectors each; bias is read again by every warp (no reuse across warps)
    assert launch.bytes == warps * 3 * 4 * 32
    est = bench.estimate(kernel, graph, kernel.target.spec, "float32")
    assert est["ideal_bytes"] == (64 * 128 * 2 + 128) * 4 and est["bound"] == "memory"
    assert est["ideal_s"] <= est["mapped_s"]


def test_a_warps_sectors_through_a_div_mod_of_its_threads(bench):
    """A block tile copied by the flattened thread id (a row of 64 per 4 rows of 16 threads):
    not affine along x, but lane by lane the first warp reads 32 consecutive floats."""
    from tvm import tirx

    tx, ty, q = tirx.Var("tx", "int32"), tirx.Var("ty", "int32"), tirx.Var("q", "int32")
    f = q * 256 + ty * 16 + tx
    flat = tirx.floordiv(f, 64) * 4096 + tirx.floormod(f, 64)
    threads = {"threadIdx.x": (tx, 16), "threadIdx.y": (ty, 16)}
    assert bench._lane_step(None, flat, tx) is None
    assert bench._warp_sectors(flat, threads, 4) == 4 and bench._warp_sectors(flat, threads, 2) == 2
    column = tirx.floormod(f, 64) * 4096 + tirx.floordiv(f, 64)  # the transposed copy: a sector per lane
    assert bench._warp_sectors(column, threads, 4) == 32
    assert bench._warp_sectors(tirx.floormod(f * q, 64), threads, 4) is None  # not a constant per lane


def test_shared_wavefronts_count_bank_conflicts_and_unrolled_reuse(bench):
    from tvm import tirx

    tx, ty = tirx.Var("tx", "int32"), tirx.Var("ty", "int32")
    threads = {"threadIdx.x": (tx, 16), "threadIdx.y": (ty, 16)}
    assert bench._bank_wavefronts(ty * 16 + tx, threads, 4) == 1  # 32 consecutive floats
    assert bench._bank_wavefronts(ty * 16, threads, 4) == 1  # two broadcast words, banks 0 and 16
    assert bench._bank_wavefronts(tx * 32, threads, 4) == 16  # a column of 32-float rows: one bank
    assert bench._bank_wavefronts(tx * 33, threads, 4) == 1  # ... padded by one
    assert bench._bank_wavefronts(ty * 16 + tx, threads, 2) == 1  # halves: two lanes per word
    # an operand in a register tile: loaded once per unrolled output it does not depend on
    i, j, k = (tirx.Var(n, "int32") for n in "ijk")
    loops = ((k, 16, False), (i, 8, True), (j, 8, True))
    assert bench._iterations(k * 128 + j * 16 + tx, loops) == 16 * 8  # B: per k and column j
    assert bench._iterations(i * 256 + k, loops) == 16 * 8  # A: per k and row i
    assert bench._iterations(i * 256 + k, ((k, 16, False), (i, 8, False), (j, 8, False))) == 16 * 8
    assert bench._iterations(k * 128 + j, ((k, 16, False), (i, 8, False), (j, 8, False))) == 16 * 64  # not unrolled


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


def test_sectors_and_the_nearest_spec(bench):
    assert bench._sectors(1, 32, 4) == 4  # coalesced floats
    assert bench._sectors(0, 32, 4) == 1  # a broadcast
    assert bench._sectors(8, 32, 4) == 32  # 32 bytes apart: a sector per lane
    assert bench._sectors(None, 32, 2) == 32  # not affine in the lane
    assert bench._sectors(1, 32, 2) == 2
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
