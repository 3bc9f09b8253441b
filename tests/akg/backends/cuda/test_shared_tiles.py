"""Shared-memory tiles of a reduction's operands (`schedules/cuda_shared.py`, step
`promote(k, shared, (tile_k, pad))`, one output per thread; several: test_registers.py): the
block's A and B tiles of each k-tile copied by all its threads into shared arrays, a barrier
after the copies and one after the k-tile's compute, each thread's sum in a register. The emulation runs it on the host and matches the reference (partial tiles along
every axis, padding); the race checker proves it race-free and finds a planted missing
barrier; tiles beyond the spec's shared memory are refused before nvcc; nvcc builds it and
reports the shared memory."""

import dataclasses
import random

import pytest

from akg.compiler import pipeline_for
from akg.errors import RaceError, ScheduleError
from akg.schedules.space import Config, Step

import cuda_suite  # noqa: E402 (tests/akg/backends/cuda on the path, as for test_emulate)


_graph, _check = cuda_suite.graph_of, cuda_suite.check_emulated


MATMUL = lambda b: b.output(b.matmul(b.input("a", (70, 50)), b.input("w", (50, 90))))  # noqa: E731
EPILOGUE = lambda b: b.output(b.relu(b.add(b.matmul(b.input("a", (70, 50)), b.input("w", (50, 90))),  # noqa: E731
                                            b.input("c", (90,)))))
HALF = lambda b: b.output(b.matmul(b.input("a", (64, 48), "float16"), b.input("w", (48, 40), "float16")))  # noqa: E731
BATCH = lambda b: b.output(b.batch_matmul(b.input("a", (3, 33, 40)), b.input("w", (3, 40, 20))))  # noqa: E731


def _tiled(threads, tile_k, pad, order=None) -> Config:
    order = order or tuple(range(len(threads)))
    return Config("smart", (Step("order", 0, None, order), Step("map", 0, "threads", threads),
                            Step("promote", 0, "shared", (tile_k, pad))))


@pytest.mark.parametrize("body,threads,tile_k,pad", [
    (MATMUL, (8, 32), 16, 1),  # partial tiles along i (70 = 8 x 8 + 6), j (90) and k (50 = 3 x 16 + 2)
    (MATMUL, (16, 16), 10, 0),  # k-tiles that divide K, no padding
    (MATMUL, (4, 64), 64, 0),  # one k-tile longer than K
    (BATCH, (1, 8, 16), 8, 1),  # a batch of one per block (z)
    (BATCH, (2, 8, 16), 16, 0),  # two batches per block (3 = 2 + 1)
    (EPILOGUE, (8, 32), 16, 1),  # bias and relu after the sum, in the thread that owns the output
    (HALF, (8, 32), 16, 1),  # fp16 tiles, accumulated in fp32 and cast after
])
def test_shared_tiles_match_the_reference_in_emulation(body, threads, tile_k, pad):
    graph = _graph(body)
    kernel = pipeline_for(graph, "cuda-emu").build(_tiled(threads, tile_k, pad))
    tir = kernel.tir()
    assert tir.count("stile") >= 4 and tir.count('"barrier"') == 2
    _check(graph, kernel)


def test_a_transposed_mapping_matches():
    graph = _graph(MATMUL)
    _check(graph, pipeline_for(graph, "cuda-emu").build(_tiled((32, 8), 16, 1, order=(1, 0))))


def test_the_race_checker_proves_the_tiles_and_finds_a_planted_missing_barrier():
    from akg.polyhedral.races import MISSING_BARRIER
    from akg.schedules.cuda import _mapping_of
    from akg.schedules.cuda_registers import map_registers
    from akg.schedules.cuda_shared import check

    graph = _graph(MATMUL)
    pipeline = pipeline_for(graph, "cuda-emu")
    mapping = _mapping_of(_tiled((8, 32), 16, 1), 0, pipeline.bands[0])
    spec = pipeline.target.spec
    good = map_registers(pipeline.model, pipeline.schedule, pipeline.bands, 0, mapping, 16, 1, spec, lambda n, k: n)
    check(good)
    assert good.bytes == (8 * 17 + 16 * 33) * 4
    bad = map_registers(pipeline.model, pipeline.schedule, pipeline.bands, 0, mapping, 16, 1, spec, lambda n, k: n,
                        barrier=None)
    with pytest.raises(RaceError) as err:
        check(bad)
    assert MISSING_BARRIER in {r.kind for r in err.value.races} and "stile" in str(err.value)


def test_tiles_beyond_the_shared_memory_of_the_spec_are_refused_before_nvcc():
    from akg.backends.cuda.target import CudaTarget

    small = CudaTarget(gpu=dataclasses.replace(CudaTarget().spec, shared_per_block=1024))
    pipeline = pipeline_for(_graph(MATMUL), small)
    with pytest.raises(ScheduleError, match="shared memory"):
        pipeline.lower(_tiled((8, 32), 16, 1))  # 2656 bytes > 1 KiB


def test_illegal_shared_steps_say_why():
    pipeline = pipeline_for(_graph(MATMUL), "cuda-emu")
    with pytest.raises(ScheduleError, match="tile_k"):
        pipeline.lower(_tiled((8, 32), 0, 1))
    with pytest.raises(ScheduleError, match="every loop of the band mapped"):
        pipeline.lower(_tiled((0, 32), 16, 0))
    softmax = pipeline_for(_graph(lambda b: b.output(b.softmax(b.input("x", (64, 300)), axis=-1))), "cuda-emu")
    with pytest.raises(ScheduleError, match="shared tiles"):
        softmax.lower(Config("smart", (Step("map", 0, "threads", (64,)), Step("promote", 0, "shared", (16, 0)))))


def test_the_space_samples_shared_tiles_that_build_and_match():
    graph = _graph(MATMUL)
    pipeline = pipeline_for(graph, "cuda-emu")
    space, rng = pipeline.space(), random.Random(5)
    tiled = [c for c in (space.sample(rng) for _ in range(60)) if any(s.op == "promote" for s in c.steps)]
    assert tiled
    for config in tiled[:2]:
        _check(graph, pipeline.build(config))


def test_nvcc_builds_the_tiles_in_shared_memory_with_barriers():
    from akg.backends.cuda.nvcc import nvcc_path

    if nvcc_path() is None:
        pytest.skip("nvcc is not installed")
    kernel = pipeline_for(_graph(MATMUL), "cuda").build(_tiled((8, 32), 16, 1))
    source = kernel.executable.source
    (res,) = kernel.executable.resources.values()
    (launch,) = kernel.executable.launches
    assert res.shared_bytes == (8 * 17 + 16 * 33) * 4 and res.barriers >= 1 and res.spill_stores == 0
    assert source.count("__syncthreads()") == 2 and source.count("__shared__") == 2
    assert launch.grid == (3, 9, 1) and launch.block == (32, 8, 1)
    half = pipeline_for(_graph(HALF), "cuda").build(_tiled((8, 32), 16, 1))
    (res,) = half.executable.resources.values()
    assert 0 <= res.shared_bytes - (8 * 17 + 16 * 33) * 2 < 64  # the fp16 tiles as fp16 (each 64-byte aligned)
    tiny = pipeline_for(_graph(lambda b: b.output(b.matmul(b.input("a", (2, 16)), b.input("w", (16, 2))))), "cuda")
    kernel = tiny.build(_tiled((2, 2), 8, 0))
    assert len(kernel.executable.launches) == 1  # one block: still one kernel, the tiles live in it


def test_the_default_tiles_matmuls_and_not_a_row_sum():
    """Tiles where their elements are read by several threads of a block (a matmul's A and
    B), not for a row sum (each tile row would be read by its own thread only)."""
    import akg

    for body, tiled in ((BATCH, True), (EPILOGUE, True),
                        (lambda b: b.output(b.sum(b.input("x", (64, 300)), axes=[1])), False)):
        graph = _graph(body)
        kernel = akg.build(graph, target="cuda-emu")
        assert any(s.op == "promote" for s in kernel.config.steps) == tiled
        _check(graph, kernel)
