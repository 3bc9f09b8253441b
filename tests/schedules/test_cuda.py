"""The CUDA mapping recipe (schedules/cuda.py): default steps per band, what it refuses and
why, its knob space, and the marks it leaves for the backend (checked end to end in the
emulation, tests/akg/backends/cuda)."""

import random

import numpy as np
import pytest

from akg.compiler import pipeline_for
from akg.errors import ScheduleError
from akg.graph import GraphBuilder
from akg.schedules.cuda import default_mapping
from akg.schedules.space import Config, Step


def _graph(body):
    b = GraphBuilder("k")
    body(b)
    return b.build()


def _pipeline(body, target="cuda-emu"):
    return pipeline_for(_graph(body), target)


def _elementwise(b):
    b.output(b.relu(b.add(b.input("x", (100, 37)), b.input("y", (37,)))))


def _matmul(b):
    b.output(b.matmul(b.input("a", (70, 96)), b.input("w", (96, 130))))


def test_default_maps_the_contiguous_member_to_x_and_the_next_to_y():
    p = _pipeline(_elementwise)
    assert p.default_config().steps == (Step("order", 0, None, (0, 1)), Step("map", 0, "threads", (6, 37)),
                                        Step("unroll"))
    tir = p.build().tir()
    assert "blockIdx.y.17" in tir and "threadIdx.y.6" in tir and "threadIdx.x.37" in tir


def test_a_matmul_maps_its_output_and_keeps_the_reduction_serial_in_each_thread():
    p = _pipeline(_matmul)
    (info,) = p.bands
    assert info.reduction_inner
    config = Config("smart", (Step("order", 0, None, (0, 1)), Step("map", 0, "threads", (1, 130))))
    assert default_mapping(info, p.target.spec, ("sum",)).steps(0) == config.steps
    tir = p.build(config).tir()
    assert "threadIdx.x.130" in tir and "blockIdx.y.70" in tir
    assert tir.index("threadIdx.x.130") < tir.index("in range(96)")  # k inside the thread
    # the recipe's default: 16 x 16 threads computing from shared tiles of A and B (cuda_shared.py)
    assert p.default_config().band_steps(0) == (Step("order", 0, None, (0, 1)), Step("map", 0, "threads", (16, 16)),
                                                Step("promote", 0, "shared", (16, 0)))
    assert "stile" in p.build().tir()


def test_a_band_without_parallel_members_spreads_its_reduction_over_one_block():
    """A full sum too short to split: one block whose threads each sum a strided partial,
    combined by a tree in shared memory (schedules/cuda_reduce.py)."""
    small_sum = lambda b: b.output(b.sum(b.input("x", (10, 20)), axes=[0, 1]))  # noqa: E731
    p = _pipeline(small_sum)
    assert p.default_config().band_steps(0) == (Step("reduce", 0, "threads", 32),)
    tir = p.build().tir()
    assert "blockIdx.x.1" in tir and "threadIdx.x.32" in tir and "barrier" in tir
    x = np.random.default_rng(1).standard_normal((10, 20)).astype(np.float32)
    np.testing.assert_allclose(p.build()(x)[0], x.sum(), rtol=1e-5)


def test_a_band_without_parallel_members_is_not_mapped_without_the_tree():
    small_sum = lambda b: b.output(b.sum(b.input("x", (10, 20)), axes=[0, 1]))  # noqa: E731
    p = _pipeline(small_sum)
    config = Config("smart", (Step("order", 0, None, (0,)), Step("map", 0, "threads", (0,))))
    kernel = p.build(config)
    assert "threadIdx" not in kernel.tir()
    x = np.random.default_rng(1).standard_normal((10, 20)).astype(np.float32)
    np.testing.assert_allclose(kernel(x)[0], x.sum(), rtol=1e-5)


def test_a_long_full_reduction_is_split_into_partials_that_map_to_threads():
    p = _pipeline(lambda b: b.output(b.max(b.input("x", (1 << 16,)), axes=[0])))
    assert len(p.bands) == 2  # the partials, then the final reduction
    assert p.default_config().steps[:2] == (Step("order", 0, None, (0,)), Step("map", 0, "threads", (256,)))
    tir = p.build().tir()
    assert "blockIdx.x.8" in tir and "threadIdx.x.256" in tir  # 2048 partials of 32 terms
    x = np.random.default_rng(2).standard_normal(1 << 16).astype(np.float32)
    assert p.build()(x)[0] == x.max()
    few = _pipeline(lambda b: b.output(b.sum(b.input("x", (37, 41)), axes=[0, 1])))
    assert "threadIdx.x.37" in few.build().tir()  # 37 partials: a divisor of the first axis


def test_a_reduction_over_no_axis_is_a_copy():
    # `sum(x, axes=[])`: the split into partials indexed its first reduction axis (IndexError)
    p = _pipeline(lambda b: b.output(b.sum(b.input("x", (3, 5)), axes=[])))
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(p.build()(x)[0], x)


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_a_matmul_of_storage_types_stages_their_bits(dtype):
    # the staged tiles' zero past the edge was a bfloat16 value: the bits loaded into the
    # tile were cast to it (a TIR type error), and the CUDA C reinterpreted a literal's address
    from akg.graph import evaluate

    def body(b):
        b.output(b.matmul(b.input("x", (3, 17), dtype), b.input("y", (17, 4), dtype)))
    g = _graph(body)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(s).astype(np.float32).astype(dtype) for s in ((3, 17), (17, 4)))
    got = pipeline_for(g, "cuda-emu").build()(x, y)[0]
    np.testing.assert_array_equal(got.view(np.uint8), evaluate(g, {"x": x, "y": y})[0].view(np.uint8))
    assert "stile" in pipeline_for(g, "cuda").lower(None)[0].script()  # staged in shared memory, as on the GPU


@pytest.mark.parametrize("steps, message", [
    ((Step("map", 0, "threads", (64, 37)),), "2368 threads per block, the GPU allows 1024"),
    ((Step("map", 0, "threads", (1, 64)),), "64 threads along loop 1 of extent 37"),
    ((Step("map", 0, "threads", (0, 37, 1)),), "needs 2 thread counts"),
    ((Step("order", 0, None, (0, 0)),), "not a permutation"),
    ((Step("map", 0, "threads", (4, 32)), Step("tile", 0, "registers", (1, 2))), "2 points per thread along loop 1"),
    ((Step("vectorize"),), "needs capability 'vector'"),
    ((Step("tile", 0, "L2", (4, 4)),), "no memory level 'L2'"),
    ((Step("map", 0, "threads", (4, 32)), Step("promote", None, "shared")), "not a CUDA kernel step"),
])
def test_illegal_configs_say_why(steps, message):
    p = _pipeline(_elementwise)
    with pytest.raises(ScheduleError, match=message):
        p.recipe.validate(Config("smart", steps), p.bands)


def test_a_reduction_member_cannot_be_mapped():
    p = _pipeline(lambda b: b.output(b.sum(b.input("x", (10, 20)), axes=[0, 1])))
    k = next(k for k, info in enumerate(p.bands) if not any(info.coincident))
    n = p.bands[k].members
    steps = (Step("map", k, "threads", (1,) * n),)
    with pytest.raises(ScheduleError, match="carries a dependence"):
        p.recipe.validate(Config("smart", steps), p.bands)


def test_grid_limits_are_the_specs():
    p = _pipeline(lambda b: b.output(b.exp(b.input("x", (70000, 2)))), "cuda")
    with pytest.raises(ScheduleError, match="70000 blocks along y, the GPU allows 65535"):
        p.recipe.validate(Config("smart", (Step("map", 0, "threads", (1, 2)),)), p.bands)
    p.recipe.validate(p.default_config(), p.bands)  # the default fits


def test_sampled_mutated_and_crossed_configs_are_legal_and_correct():
    p = _pipeline(lambda b: b.output(b.sigmoid(b.add(b.input("x", (3, 40, 50)), b.input("y", (50,))))))
    space = p.space()
    rng = random.Random(3)
    x = np.random.default_rng(0).standard_normal((3, 40, 50)).astype(np.float32)
    y = np.random.default_rng(1).standard_normal(50).astype(np.float32)
    configs = [space.sample(rng) for _ in range(4)]
    configs += [space.mutate(configs[0], rng), space.crossover(configs[1], configs[2], rng)]
    assert len(set(configs)) > 2 and space.size() > 100
    for config in configs:
        space.validate(config)
        got = p.build(config)(x, y)[0]
        np.testing.assert_allclose(got, 1 / (1 + np.exp(-(x + y))), rtol=1e-5, atol=1e-6)
    assert len(p.recipe.knob_features(configs[0], p.bands)) == 4


def test_the_mapping_is_the_same_for_the_gpu_and_its_emulation():
    gpu, emu = _pipeline(_matmul, "cuda"), _pipeline(_matmul, "cuda-emu")
    assert gpu.default_config() == emu.default_config()
    # the same TIR, but for the scratch arrays' scope: shared on the GPU, plain arrays on the host,
    # and the accumulators' dims: a thread's registers on the GPU, every thread's on the host
    import re

    def same(script):
        script = re.sub(r"(_racc\d+) = T\.alloc_\w+\(\([^)]*\)\)", r"\1 = ...", script)
        return re.sub(r"(_racc\d+)\[[^\]]*\]", r"\1[...]", script.replace("T.alloc_shared", "T.alloc_buffer"))

    assert "_racc2" in emu.lower(None)[0].script()
    assert same(gpu.lower(None)[0].script()) == same(emu.lower(None)[0].script())


def test_a_third_member_maps_to_blocks_when_the_threads_are_spent():
    p = _pipeline(lambda b: b.output(b.relu(b.conv2d(b.input("x", (2, 16, 13, 13)), b.input("w", (32, 16, 3, 3)),
                                                     strides=(1, 1), padding=(0, 0, 0, 0)))))
    (info,) = p.bands
    assert info.extents == (2, 32, 11, 11)
    assert Step("map", 0, "threads", (0, 2, 11, 11)) in p.default_config().steps
    tir = p.build().tir()
    assert "blockIdx.z.16" in tir and "threadIdx.z.2" in tir and "threadIdx.x.11" in tir


@pytest.mark.parametrize("body", [_elementwise, _matmul,
                                  lambda b: b.output(b.softmax(b.input("x", (65, 300)), axis=-1)),
                                  lambda b: b.output(b.max(b.input("x", (1 << 16,)), axes=[0]))])
def test_the_race_checker_finds_no_race_in_default_mappings(body):
    from akg.polyhedral.races import check_schedule
    from akg.schedules.cuda import race_role

    p = _pipeline(body)
    mapped, model = p.recipe.apply(p.default_config(), p.model, p.schedule, p.bands, p.dtype), p.model
    if isinstance(mapped, tuple):  # reductions spread over threads: a rewritten model
        model, mapped = mapped
    check_schedule(model, mapped, roles=race_role)


def test_the_race_checker_catches_a_reduction_mapped_to_threads():
    """The mapping `validate` refuses, applied anyway: threads would update one sum."""
    from akg.errors import RaceError
    from akg.polyhedral import tree
    from akg.polyhedral.races import check_schedule
    from akg.schedules.cuda import BandMapping, _apply_band, check_mapping, race_role

    p = _pipeline(lambda b: b.output(b.sum(b.input("x", (10, 20)), axes=[0, 1])))
    k = next(k for k, info in enumerate(p.bands) if not any(info.coincident))
    info = p.bands[k]
    bad = BandMapping(tuple(range(info.members)), (0,) * (info.members - 1) + (4,), (1,) * info.members)
    mapped = tree.map_outer_bands(p.model, p.schedule,
                                  lambda node, j: _apply_band(node, bad, info, False) if j == k else node)
    with pytest.raises(RaceError, match="write-write race on"):
        check_schedule(p.model, mapped, roles=race_role)
    with pytest.raises(RaceError, match="inter-block race"):  # what apply runs on every mapping
        check_mapping(p.model, mapped)
