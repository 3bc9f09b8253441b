"""Reductions across the threads of a block (`schedules/cuda_reduce.py`, step `reduce(k,
threads, n)`): per-thread partials, a shared-memory tree with a barrier between its levels,
thread 0 writing the result. The emulation runs the tree on the host (a serial thread loop
per pass) and matches the NumPy reference; the race checker proves the tree race-free and
finds a planted missing barrier; nvcc builds the CUDA C and reports its shared memory."""

import dataclasses

import numpy as np
import pytest

import akg
from akg.compiler import pipeline_for
from akg.errors import LoweringError, RaceError, ScheduleError
from akg.schedules.space import Config, Step

import cuda_suite  # noqa: E402 (tests/akg/backends/cuda on the path, as for test_emulate)


_graph, _check = cuda_suite.graph_of, cuda_suite.check_emulated


def _reduce(n: int) -> Config:
    return Config("smart", (Step("reduce", 0, "threads", n),))


CASES = {
    "row_sum_3_rows": lambda b: b.output(b.sum(b.input("x", (3, 1000)), axes=[1])),
    "row_max": lambda b: b.output(b.max(b.input("x", (5, 777)), axes=[1])),
    "row_min_keepdims": lambda b: b.output(b.min(b.input("x", (2, 3, 500)), axes=[2], keepdims=True)),
    "full_sum_not_split": lambda b: b.output(b.sum(b.input("x", (37, 23)), axes=[0, 1])),
    "softmax_rows": lambda b: b.output(b.softmax(b.input("x", (4, 3000)), axis=-1)),
    "layer_norm_rows": lambda b: b.output(b.layer_norm(b.input("x", (4, 3840)), b.input("g", (3840,)),
                                                       b.input("bt", (3840,)))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_default_spreads_few_long_reductions_over_threads_and_matches(case):
    graph = _graph(CASES[case])
    kernel = akg.build(graph, target="cuda-emu")
    assert kernel.config.band_steps(0)[0].op == "reduce"
    tir = kernel.tir()
    assert "barrier" in tir and "_rshared0" in tir and "_rlocal" in tir
    _check(graph, kernel)


@pytest.mark.parametrize("n", [2, 32, 64, 1024])
def test_any_power_of_two_threads_gives_the_reference(n):
    """Fewer threads than terms (a strided partial each), more threads than terms (idle
    threads contribute the identity), and 1000 terms that no n divides."""
    graph = _graph(CASES["row_sum_3_rows"])
    kernel = pipeline_for(graph, "cuda-emu").build(_reduce(n))
    assert f"threadIdx.x.{n}" in kernel.tir()
    _check(graph, kernel)


def test_a_pass_spreads_its_last_loop_of_more_than_one_iteration():
    """(2, 33, 1) reduced along 33 with keepdims: the division's last loop has one iteration,
    so its 33 go over the threads (a constant lane would leave the 33-loop under the mark)."""
    def body(b):
        x = b.input("x", (2, 33, 1))
        m = b.max(b.exp(x), axes=[1], keepdims=True)
        b.output(b.div(b.sub(x, m), b.add(b.sum(b.abs(x), axes=[1], keepdims=True), 1.0)))

    graph = _graph(body)
    _check(graph, pipeline_for(graph, "cuda-emu").build(_reduce(32)))


@pytest.mark.parametrize("body", [
    lambda b: b.output(b.softmax(b.input("x", (6, 300, 3)), axis=1)),  # rows i0 and i2, the tree over i1
    lambda b: b.output(b.min(b.input("x", (300, 5)), axes=[0], keepdims=True)),  # columns: rows (0, j)
])
def test_rows_are_whatever_iterators_the_parallel_members_are(body):
    graph = _graph(body)
    kernel = pipeline_for(graph, "cuda-emu").build(_reduce(64))
    assert "blockIdx" in kernel.tir()
    _check(graph, kernel)


def test_softmax_with_a_small_tree():
    graph = _graph(lambda b: b.output(b.softmax(b.input("x", (3, 130)), axis=-1)))
    _check(graph, pipeline_for(graph, "cuda-emu").build(_reduce(16)))


def test_many_rows_keep_the_thread_per_row_mapping():
    """Rows enough to fill the GPU: each thread reduces its own row, as before."""
    graph = _graph(lambda b: b.output(b.sum(b.input("x", (8192, 64)), axes=[1])))
    kernel = akg.build(graph, target="cuda-emu")
    assert all(s.op != "reduce" for s in kernel.config.steps)


def test_the_race_checker_proves_the_tree_and_finds_a_planted_missing_barrier():
    from akg.polyhedral.races import MISSING_BARRIER, check_schedule
    from akg.schedules.cuda import race_role
    from akg.schedules.cuda_reduce import map_trees

    graph = _graph(CASES["softmax_rows"])
    pipeline = pipeline_for(graph, "cuda-emu")
    spec = pipeline.target.spec

    good = map_trees(pipeline.model, pipeline.schedule, pipeline.bands, {0: 64}, spec, lambda node, k: node)
    check_schedule(good.model, good.schedule, roles=race_role, shared=good.shared, private=good.private)
    bad = map_trees(pipeline.model, pipeline.schedule, pipeline.bands, {0: 64}, spec, lambda node, k: node,
                    barrier=None)
    with pytest.raises(RaceError) as err:
        check_schedule(bad.model, bad.schedule, roles=race_role, shared=bad.shared, private=bad.private)
    kinds = {r.kind for r in err.value.races}
    assert MISSING_BARRIER in kinds
    assert "rshared" in str(err.value)  # a tree level read by another thread before it is written


def test_trees_beyond_the_shared_memory_of_the_spec_are_refused_before_nvcc():
    from akg.backends.cuda.target import CudaTarget

    small = CudaTarget(gpu=dataclasses.replace(CudaTarget().spec, shared_per_block=1024))
    graph = _graph(CASES["softmax_rows"])
    pipeline = pipeline_for(graph, small)
    with pytest.raises(ScheduleError, match="shared memory"):
        pipeline.lower(_reduce(512))  # 2 trees x (2 x 512 - 2) floats > 1 KiB


def test_illegal_thread_counts_say_why():
    graph = _graph(CASES["row_sum_3_rows"])
    pipeline = pipeline_for(graph, "cuda-emu")
    for n in (3, 2048):
        with pytest.raises(ScheduleError, match="power of two"):
            pipeline.lower(_reduce(n))


def test_an_argmax_band_is_not_spread():
    graph = _graph(lambda b: b.output(b.argmax(b.input("x", (3, 1000)), axis=1)))
    pipeline = pipeline_for(graph, "cuda-emu")
    with pytest.raises(ScheduleError, match="cannot spread|sum/prod/max/min"):
        pipeline.lower(_reduce(64))
    kernel = akg.build(graph, target="cuda-emu")  # the default keeps it serial
    _check(graph, kernel)


def test_the_space_samples_tree_configs_that_build_and_match():
    import random

    graph = _graph(CASES["row_max"])
    pipeline = pipeline_for(graph, "cuda-emu")
    space, rng = pipeline.space(), random.Random(3)
    trees = [c for c in (space.sample(rng) for _ in range(40)) if any(s.op == "reduce" for s in c.steps)]
    assert trees
    for config in trees[:2]:
        _check(graph, pipeline.build(config))


def test_a_barrier_inside_the_threads_loop_splits_it_in_the_emulation():
    """Thread t writes a[t], all wait, thread t reads a[t + 1]: on the host the serial loop over
    the threads is split at the barrier, so every read sees its neighbour's write (without the
    split, thread t would read a[t + 1] before thread t + 1 wrote it)."""
    import tvm
    from tvm import tirx

    from akg.backends.cuda.bind import _launch_attr, sync_threads, unbind

    n = 8
    a, out = tirx.decl_buffer((n + 1,), "float32", "a"), tirx.decl_buffer((n,), "float32", "out")
    t = tirx.Var("t", "int32")
    body = _launch_attr("threadIdx.x", t, n, tirx.SeqStmt([
        tirx.BufferStore(a, tirx.Cast("float32", t) * 10.0, [t]),
        sync_threads(),
        tirx.BufferStore(out, tirx.BufferLoad(a, [t + 1]), [t])]))
    host = tirx.PrimFunc([a, out], unbind(body)).with_attr("global_symbol", "k")
    run = tvm.compile(tvm.IRModule({"k": host}), target=tvm.target.Target({"kind": "llvm"}))["k"]
    x, y = np.full(n + 1, -1.0, "float32"), np.zeros(n, "float32")
    xs, ys = tvm.runtime.tensor(x), tvm.runtime.tensor(y)
    run(xs, ys)
    np.testing.assert_array_equal(ys.numpy(), [10.0 * (k + 1) for k in range(n - 1)] + [-1.0])

    divergent = _launch_attr("threadIdx.x", t, n, tirx.IfThenElse(tirx.LT(t, 4), tirx.SeqStmt([
        tirx.BufferStore(a, tirx.const(1.0, "float32"), [t]), sync_threads()]), None))
    with pytest.raises(LoweringError, match="under a condition"):
        unbind(divergent)


@pytest.mark.parametrize("case", ["full_sum_not_split", "row_min_keepdims", "layer_norm_rows"])
def test_nvcc_builds_one_kernel_per_tree_band(case):
    """One block (a full sum) or one per row: every pass of the band is in one kernel."""
    from akg.backends.cuda.nvcc import nvcc_path

    if nvcc_path() is None:
        pytest.skip("nvcc is not installed")
    kernel = akg.build(_graph(CASES[case]), target="cuda")
    (launch,) = kernel.executable.launches
    (res,) = kernel.executable.resources.values()
    assert launch.threads == kernel.config.band_steps(0)[0].arg and res.shared_bytes > 0
    assert launch.grid == {"full_sum_not_split": (1, 1, 1), "row_min_keepdims": (3, 2, 1),
                           "layer_norm_rows": (4, 1, 1)}[case]


def test_nvcc_builds_the_tree_with_shared_memory_and_barriers():
    from akg.backends.cuda.nvcc import nvcc_path

    if nvcc_path() is None:
        pytest.skip("nvcc is not installed")
    graph = _graph(CASES["softmax_rows"])
    kernel = akg.build(graph, target="cuda")
    source = kernel.executable.source
    (res,) = kernel.executable.resources.values()
    assert res.shared_bytes >= 256 * 4 and res.barriers >= 1  # TVM folds the levels into two arrays
    assert "__syncthreads()" in source and "__shared__" in source and "threadIdx.x) == 0" in source


# --- the last 32 values by warp shuffles: reduce(k, warps, n) -----------------------------------


@pytest.mark.parametrize("case,n", [("row_sum_3_rows", 32), ("row_max", 64), ("softmax_rows", 256),
                                    ("layer_norm_rows", 128), ("full_sum_not_split", 1024)])
def test_warp_shuffle_trees_match_in_emulation(case, n):
    """On the host a warp level is an array per lane (a lane's read of lane + h is what
    `__shfl_down_sync` gives it); the tree still matches the reference."""
    graph = _graph(CASES[case])
    kernel = pipeline_for(graph, "cuda-emu").build(Config("smart", (Step("reduce", 0, "warps", n),)))
    assert "_rwarp5" in kernel.tir() and "barrier.warp" in kernel.tir()
    _check(graph, kernel)


def test_warp_shuffles_in_the_cuda_source_and_race_proofs():
    from akg.backends.cuda.nvcc import nvcc_path
    from akg.polyhedral.races import check_schedule
    from akg.schedules.cuda import race_role
    from akg.schedules.cuda_reduce import map_trees

    graph = _graph(CASES["softmax_rows"])
    pipeline = pipeline_for(graph, "cuda-emu")
    for barrier, ok in (("barrier", True), (None, False)):
        done = map_trees(pipeline.model, pipeline.schedule, pipeline.bands, {0: 128}, pipeline.target.spec,
                         lambda node, k: node, barrier=barrier, warps=frozenset({0}))
        check = lambda: check_schedule(done.model, done.schedule, roles=race_role,  # noqa: E731
                                       shared=done.shared, private=done.private)
        if ok:
            check()
        else:
            with pytest.raises(RaceError) as err:
                check()
            assert any("rwarp" in r.tensor for r in err.value.races)  # a lane reads lane + h unsynchronised
    with pytest.raises(ScheduleError, match="warp"):
        pipeline.lower(Config("smart", (Step("reduce", 0, "warps", 16),)))
    if nvcc_path() is None:
        pytest.skip("nvcc is not installed")
    kernel = pipeline_for(graph, "cuda").build(Config("smart", (Step("reduce", 0, "warps", 128),)))
    body = kernel.executable.source.split("__global__")[-1]  # the kernel, past TVM's header
    assert body.count("__shfl_down_sync(") == 10 and body.count("__syncthreads()") >= 5  # 5 per tree
    (res,) = kernel.executable.resources.values()
    assert 0 < res.shared_bytes <= 2 * 128 * 4 + 64 * 4
