"""Register tiles over shared operand tiles (`schedules/cuda_registers.py`, steps
`tile(k, registers, work)` with `promote(k, shared, (tile_k, pad))`): each thread keeps the
accumulators of `work` outputs per mapped member in registers across the k-tiles (a local
array indexed by constants once its loops are unrolled) and stores them to global memory
once, the block's shared tiles growing to threads x work along each member. The emulation
matches the reference (partial tiles, batch_matmul, a fused epilogue, fp16); the race
checker proves the mapping and finds a planted missing barrier; nvcc keeps the accumulators
in registers without spills; the default picks it for matmul-like bands."""

import random
import re

import numpy as np
import pytest

import akg
from akg.compiler import pipeline_for
from akg.errors import RaceError, ScheduleError
from akg.schedules.space import Config, Step

import cuda_suite  # noqa: E402 (tests/akg/backends/cuda on the path, as for test_emulate)


_graph, _check = cuda_suite.graph_of, cuda_suite.check_emulated

MATMUL = lambda b: b.output(b.matmul(b.input("a", (70, 50)), b.input("w", (50, 90))))  # noqa: E731
EPILOGUE = lambda b: b.output(b.relu(b.add(b.matmul(b.input("a", (70, 50)), b.input("w", (50, 90))),  # noqa: E731
                                            b.input("c", (90,)))))
HALF = lambda b: b.output(b.matmul(b.input("a", (64, 48), "float16"), b.input("w", (48, 40), "float16")))  # noqa: E731
HALF_ODD = lambda b: b.output(b.matmul(b.input("a", (70, 50), "float16"),  # noqa: E731
                                       b.input("w", (50, 90), "float16")))
BATCH = lambda b: b.output(b.batch_matmul(b.input("a", (3, 33, 40)), b.input("w", (3, 40, 20))))  # noqa: E731


def _tiled(threads, work, tile_k, pad=0, order=None) -> Config:
    order = order or tuple(range(len(threads)))
    return Config("smart", (Step("order", 0, None, order), Step("map", 0, "threads", threads),
                            Step("tile", 0, "registers", work), Step("promote", 0, "shared", (tile_k, pad))))


@pytest.mark.parametrize("body,threads,work,tile_k,pad", [
    (MATMUL, (8, 16), (2, 4), 16, 1),  # 70 = 16 + 16 + 16 + 16 + 6 rows, 90 = 64 + 26 columns, K 50 = 3 x 16 + 2
    (MATMUL, (8, 8), (8, 8), 8, 0),  # 64 accumulators per thread, one block and a partial one per axis
    (MATMUL, (16, 16), (4, 4), 64, 0),  # one k-tile longer than K
    (BATCH, (1, 8, 4), (1, 4, 4), 8, 1),  # a batch per block (z), 33 = 32 + 1 rows
    (BATCH, (2, 4, 8), (1, 2, 2), 16, 0),  # two batches per block (3 = 2 + 1)
    (EPILOGUE, (8, 16), (4, 2), 16, 1),  # bias and relu per output after the loop, in the owning thread
    (HALF, (8, 8), (4, 4), 16, 0),  # fp16 tiles, fp32 accumulators, cast per output
    (HALF_ODD, (8, 16), (4, 4), 16, 0),  # fp16 with partial tiles everywhere
])
def test_register_tiles_match_the_reference_in_emulation(body, threads, work, tile_k, pad):
    graph = _graph(body)
    kernel = pipeline_for(graph, "cuda-emu").build(_tiled(threads, work, tile_k, pad))
    tir = kernel.tir()
    assert "racc" in tir and tir.count('"barrier"') == 2 and "T.unroll" in tir
    _check(graph, kernel)


def test_terms_past_k_are_guarded_only_where_the_tiles_zeros_do_not_cancel_them():
    """K = 50 in k-tiles of 16: a matmul's last terms are 0 x 0 from the zero-filled tiles (no
    guard per term); sum_k (a x w + 1) would add 1 per missing term, so it keeps its guard."""
    def plus_one(b):
        a = b.reshape(b.input("a", (70, 50)), shape=(70, 50, 1))
        w = b.reshape(b.input("w", (50, 90)), shape=(1, 50, 90))
        b.output(b.sum(b.add(b.mul(a, w), 1.0), axes=[1]))

    for body, guarded in ((MATMUL, False), (plus_one, True)):
        graph = _graph(body)
        kernel = pipeline_for(graph, "cuda-emu").build(_tiled((8, 16), (2, 4), 16, 1))
        line = next(x for x in kernel.tir().splitlines() if "_racc2[c3, c4, c6, c7] = " in x)  # the update
        assert ("if_then_else" in line) == guarded
        _check(graph, kernel)


def test_a_transposed_mapping_matches():
    graph = _graph(MATMUL)
    _check(graph, pipeline_for(graph, "cuda-emu").build(_tiled((16, 8), (4, 2), 16, 1, order=(1, 0))))


def _mapped(body, config, barrier="barrier"):
    from akg.schedules.cuda import _mapping_of
    from akg.schedules.cuda_registers import map_registers

    pipeline = pipeline_for(_graph(body), "cuda-emu")
    mapping = _mapping_of(config, 0, pipeline.bands[0])
    return map_registers(pipeline.model, pipeline.schedule, pipeline.bands, 0, mapping, *mapping.shared,
                         pipeline.target.spec, lambda n, k: n, barrier=barrier)


@pytest.mark.parametrize("body,config", [(MATMUL, _tiled((8, 16), (2, 4), 16, 1)),
                                         (EPILOGUE, _tiled((8, 16), (4, 2), 16, 0)),
                                         (BATCH, _tiled((1, 8, 4), (1, 4, 4), 8, 0))])
def test_the_race_checker_proves_register_tiles(body, config):
    """Proven, not merely unrefuted: the accumulators (seen as global, indexed by block,
    thread and point) are each thread's own, the tiles are fenced by the barriers."""
    from akg.polyhedral.block_tiles import flat_tile_accesses
    from akg.polyhedral.races import check_races, mapping_of
    from akg.schedules.cuda import race_role

    done = _mapped(body, config)
    writes, reads = flat_tile_accesses(done.model, done.shared)
    check_races(writes, reads, mapping_of(done.schedule, race_role), shared=done.shared)


def test_the_race_checker_finds_a_planted_missing_barrier():
    from akg.polyhedral.races import MISSING_BARRIER
    from akg.schedules.cuda_shared import check

    bad = _mapped(MATMUL, _tiled((8, 16), (2, 4), 16, 1), barrier=None)
    with pytest.raises(RaceError) as err:
        check(bad)
    assert MISSING_BARRIER in {r.kind for r in err.value.races} and "stile" in str(err.value)


def test_too_many_accumulators_or_tiles_are_refused_before_nvcc():
    import dataclasses

    from akg.backends.cuda.target import CudaTarget

    big = _graph(lambda b: b.output(b.matmul(b.input("a", (256, 16)), b.input("w", (16, 256)))))
    with pytest.raises(ScheduleError, match="accumulators"):
        pipeline_for(big, "cuda-emu").lower(_tiled((16, 16), (16, 16), 16))
    small = CudaTarget(gpu=dataclasses.replace(CudaTarget().spec, shared_per_block=4096))
    with pytest.raises(ScheduleError, match="shared memory"):
        pipeline_for(big, small).lower(_tiled((16, 16), (8, 8), 16))  # (128 x 16 + 16 x 128) x 4 bytes


def test_nvcc_keeps_the_accumulators_in_registers():
    from akg.backends.cuda.nvcc import nvcc_path

    if nvcc_path() is None:
        pytest.skip("nvcc is not installed")
    kernel = pipeline_for(_graph(MATMUL), "cuda").build(_tiled((8, 16), (2, 4), 16, 1))
    source = kernel.executable.source
    (res,) = kernel.executable.resources.values()
    (launch,) = kernel.executable.launches
    assert re.search(r"\bfloat t0_racc2_ptr\[8\];", source)  # a thread's 2 x 4 accumulators, a local array
    assert "t0_ptr[" not in source.split("__syncthreads();")[-2]  # no global access inside the k-tiles
    assert res.spill_stores == res.spill_loads == res.stack_bytes == 0
    assert res.shared_bytes == (16 * 17 + 16 * 65) * 4 and launch.grid == (2, 5, 1) and launch.block == (16, 8, 1)
    # partial tiles of 8 x 8 outputs per thread (70 = 64 + 6 rows): the stores of a partial
    # tile are unrolled under guards, so no loop indexes the accumulators by a variable
    for body, config in ((HALF_ODD, _tiled((8, 16), (4, 4), 16)), (MATMUL, _tiled((8, 8), (8, 8), 8))):
        (res,) = pipeline_for(_graph(body), "cuda").build(config).executable.resources.values()
        assert res.spill_stores == res.spill_loads == res.stack_bytes == 0


def test_the_default_register_tiles_matmul_like_bands():
    """w_y x w_x outputs per thread, the most (the squarest, then the most along x) that
    still give each SM a block."""
    from akg.backends.cuda.target import cuda_emu_target

    sms = cuda_emu_target().spec.sms
    cases = [
        (lambda b: b.output(b.matmul(b.input("a", (4096, 64)), b.input("w", (64, 4096)))), (8, 8)),
        (lambda b: b.output(b.matmul(b.input("a", (1024, 64)), b.input("w", (64, 1024)))), (4, 8)),  # 16 x 8 blocks
        (lambda b: b.output(b.matmul(b.input("a", (16000, 64)), b.input("w", (64, 32)))), (8, 2)),  # 32 columns
        (lambda b: b.output(b.batch_matmul(b.input("a", (8, 256, 32)), b.input("w", (8, 32, 256)))), (1, 4, 4)),
        (MATMUL, (1, 1)),  # 70 x 90 outputs: no w gives 108 blocks, one output per thread
    ]
    for body, work in cases:
        pipeline = pipeline_for(_graph(body), "cuda-emu")
        steps = pipeline.default_config().band_steps(0)
        got = next((s.arg for s in steps if s.op == "tile"), (1,) * len(work))
        assert got == work and any(s.op == "promote" for s in steps)
        if work != (1,) * len(work):
            from akg.schedules.cuda import _mapping_of

            m = _mapping_of(pipeline.default_config(), 0, pipeline.bands[0])
            assert np.prod(m.grid(pipeline.bands[0])) >= sms


def test_the_default_builds_and_matches_with_a_fused_epilogue():
    """bias + relu after a matmul whose outputs fill the GPU with 2 x 4 per thread (16 x 7
    blocks of 32 x 64)."""
    def body(b):
        b.output(b.relu(b.add(b.matmul(b.input("a", (512, 40)), b.input("w", (40, 400))), b.input("c", (400,)))))

    graph = _graph(body)
    kernel = akg.build(graph, target="cuda-emu")
    assert any(s.op == "tile" and s.arg == (2, 4) for s in kernel.config.steps)
    _check(graph, kernel)


def test_the_space_samples_register_tiles_that_build_and_match():
    graph = _graph(MATMUL)
    pipeline = pipeline_for(graph, "cuda-emu")
    space, rng = pipeline.space(), random.Random(7)
    tiled = [c for c in (space.sample(rng) for _ in range(200))
             if any(s.op == "promote" for s in c.steps) and any(s.op == "tile" for s in c.steps)]
    assert tiled
    built = 0
    for config in tiled:
        try:
            kernel = pipeline.build(config)
        except ScheduleError:
            continue  # tiles beyond the shared memory: the tuner records them as failed
        _check(graph, kernel)
        built += 1
        if built == 2:
            break
    assert built
