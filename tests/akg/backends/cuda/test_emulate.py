"""The CUDA emulation (`cuda-emu`): kernels mapped to blocks and threads, bound as on the GPU,
then run on the host with blocks and threads as serial loops, match the NumPy reference:
the whole kernel test suite (tests/akg/test_build.py) and the kernel families of issue 18
at realistic sizes (elementwise, reductions, matmul, conv, softmax, layer norm)."""

import numpy as np
import pytest

import akg
from akg.graph import GraphBuilder

import cuda_suite


def _assert_matches(graph, kernel=None, seed: int = 0, inputs=None):
    from tests_conftest_cuda import assert_matches_reference

    kernel = kernel or akg.build(graph, target="cuda-emu")
    assert kernel.target.kind == "cuda-emu"
    return assert_matches_reference(graph, kernel, seed, inputs)


@pytest.fixture(name="check_kernel", scope="session")
def cuda_emu_check_kernel():
    return _assert_matches


SUITE_TESTS = cuda_suite.suite_tests()
globals().update(SUITE_TESTS)


def _graph(body):
    b = GraphBuilder("k")
    body(b)
    return b.build()


FAMILIES = {
    "elementwise": lambda b: b.output(b.relu(b.add(b.mul(b.input("x", (300, 257)), b.input("y", (257,))),
                                                   b.input("z", (300, 1))))),
    "row_sum": lambda b: b.output(b.sum(b.input("x", (129, 300)), axes=[1])),
    "column_max": lambda b: b.output(b.max(b.input("x", (300, 70)), axes=[0])),
    "full_sum": lambda b: b.output(b.sum(b.input("x", (37, 41)), axes=[0, 1])),
    "matmul": lambda b: b.output(b.matmul(b.input("a", (70, 96)), b.input("w", (96, 130)))),
    "batch_matmul": lambda b: b.output(b.batch_matmul(b.input("a", (3, 33, 40)), b.input("w", (3, 40, 20)))),
    "conv": lambda b: b.output(b.relu(b.conv2d(b.input("x", (2, 8, 13, 13)), b.input("w", (16, 8, 3, 3)),
                                               strides=(1, 1), padding=(1, 1, 1, 1)))),
    "softmax": lambda b: b.output(b.softmax(b.input("x", (65, 300)), axis=-1)),
    "layer_norm": lambda b: b.output(b.layer_norm(b.input("x", (40, 384)), b.input("g", (384,)),
                                                  b.input("bt", (384,)))),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_kernel_families_match_the_reference(family):
    graph = _graph(FAMILIES[family])
    kernel = _assert_matches(graph)
    assert "threadIdx" in kernel.tir() or family == "full_sum"


def test_a_thread_computes_several_points_cyclically():
    """tile(registers) = 4 along x: each thread's points are `threads` apart, and all match."""
    from akg.compiler import pipeline_for
    from akg.schedules.space import Config, Step

    graph = _graph(lambda b: b.output(b.exp(b.input("x", (10, 1000)))))
    pipeline = pipeline_for(graph, "cuda-emu")
    config = Config("smart", (Step("order", 0, None, (0, 1)), Step("map", 0, "threads", (2, 64)),
                              Step("tile", 0, "registers", (1, 4))))
    kernel = pipeline.build(config)
    tir = kernel.tir()
    assert "threadIdx.x.64" in tir and "blockIdx.x.4" in tir and "blockIdx.y.5" in tir
    x = np.random.default_rng(0).standard_normal((10, 1000)).astype(np.float32)
    np.testing.assert_allclose(kernel(x)[0], np.exp(x), rtol=1e-5)


def test_the_tuner_searches_the_cuda_mapping_in_emulation(tmp_path):
    """Sampled mappings build, run and check in the emulation; records carry cuda-emu's key."""
    from akg.db import open_database
    from akg.target import get_target
    from akg.tuner.builder import InProcessBuilder
    from akg.tuner.runner import InProcessRunner
    from akg.tuner.tune import tune

    graph = _graph(lambda b: b.output(b.softmax(b.input("x", (64, 100)), axis=-1)))
    db = open_database(str(tmp_path / "emu.db"))
    result = tune(graph, target="cuda-emu", trials=4, db=db, cost_model="random", search="random",
                  builder=InProcessBuilder(str(tmp_path)), runner=InProcessRunner(min_seconds=0.001, repeats=1))
    (kernel,) = result.kernels
    assert result.new_measurements == 4 and kernel.failures == 0 and kernel.best_cost > 0
    records = db.records(kernel.workload_key, get_target("cuda-emu").key)
    assert len(records) == 4 and len({r.config for r in records}) > 1
