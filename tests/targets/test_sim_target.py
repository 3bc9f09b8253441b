"""A target defined only in the tests (sim_target.py: its own recipe, knob space and a NumPy
TIR-interpreting backend) compiles and runs the kernel test suite, whole models and their
artifacts, without any change to akg's shared files."""

import random
from pathlib import Path

import numpy as np
import pytest

import akg
from akg.errors import ScheduleError
from akg.graph import GraphBuilder, evaluate, random_inputs
from akg.schedules.space import Config, Step
from akg.target import TARGETS, get_target

import kernel_suite
import sim_target

HERE = Path(__file__).parent


# The kernel test suite, collected again here with this folder's `check_kernel` (which builds
# for testsim).
SUITE_TESTS = kernel_suite.suite_tests()
globals().update(SUITE_TESTS)


def test_the_suite_is_collected_for_testsim():
    assert len(SUITE_TESTS) >= 15 and "test_matmul_family" in SUITE_TESTS and "test_conv2d" in SUITE_TESTS


def _mlp_like():
    b = GraphBuilder("mlp")
    x = b.input("x", (8, 24))
    h = b.relu(b.add(b.matmul(x, b.const(np.random.default_rng(0).standard_normal((24, 32)).astype(np.float32),
                                            name="w1")), b.const(np.ones(32, np.float32), name="b1")))
    b.output(b.softmax(b.matmul(h, b.const(np.random.default_rng(1).standard_normal((32, 10)).astype(np.float32),
                                           name="w2"))))
    return b.build()


def test_the_target_is_found_by_name_and_nothing_in_akg_names_it():
    target = get_target("testsim")
    assert isinstance(target, sim_target.SimTarget) and "testsim" in TARGETS
    root = Path(akg.__file__).parents[1]
    for folder in ("akg", "graph", "polyhedral", "schedules", "tuner", "db"):
        for path in (root / folder).rglob("*.py"):
            assert "testsim" not in path.read_text(), path


def test_default_config_and_space_are_the_recipes_own():
    b = GraphBuilder("t")
    b.output(b.exp(b.input("x", (64, 8))))
    kernel = akg.build(b.build(), target="testsim")
    assert kernel.config.steps == (Step("tile", 0, "local", (8, 0)), Step("unroll"), Step("promote", None, "local"))
    assert "T.unroll" in kernel.tir() and "T.vectorized" not in kernel.tir()
    from akg.compiler import pipeline_for

    pipeline = pipeline_for(b.build(), "testsim")
    space = pipeline.space()
    rng = random.Random(0)
    for _ in range(5):
        config = space.sample(rng)
        space.validate(config)
        x = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
        np.testing.assert_allclose(pipeline.build(config)(x)[0], np.exp(x), rtol=1e-6)


def test_a_step_the_target_cannot_take_names_the_capability():
    b = GraphBuilder("t")
    b.output(b.exp(b.input("x", (64, 8))))
    with pytest.raises(ScheduleError, match="step 'vectorize\\(\\)' needs capability 'vector'.*testsim"):
        akg.build(b.build(), target="testsim", config=Config("smart", (Step("vectorize"),)))
    with pytest.raises(ScheduleError, match="no memory level 'L2'"):
        akg.build(b.build(), target="testsim", config=Config("smart", (Step("tile", 0, "L2", (8, 0)),)))


def test_a_whole_model_runs_and_saves_on_testsim(tmp_path):
    graph = _mlp_like()
    model = akg.compile_model(graph, target="testsim")
    inputs = random_inputs(graph, 3)
    expect = evaluate(graph, inputs)
    for got, e in zip(model(**inputs), expect):
        np.testing.assert_allclose(got, e, rtol=1e-4, atol=1e-5)
    from akg.runtime import CompiledModel

    path = model.save(tmp_path / "m.akgpack")
    again = CompiledModel.load(path)
    assert again.artifact_kind == "testsim-tir"
    for got, e in zip(again(**inputs), expect):
        np.testing.assert_allclose(got, e, rtol=1e-4, atol=1e-5)


def test_the_tuner_tunes_testsim_and_keeps_its_best(tmp_path):
    from akg.db import open_database
    from akg.tuner.builder import InProcessBuilder
    from akg.tuner.runner import InProcessRunner
    from akg.tuner.tune import tune

    b = GraphBuilder("t")
    b.output(b.relu(b.add(b.input("x", (64, 16)), b.input("y", (16,)))))
    graph = b.build()
    db = open_database(str(tmp_path / "sim.db"))
    result = tune(graph, target="testsim", trials=6, db=db, cost_model="random", search="random",
                  builder=InProcessBuilder(str(tmp_path)), runner=InProcessRunner(min_seconds=0.001, repeats=1))
    assert result.new_measurements == 6
    (kernel,) = result.kernels
    assert kernel.best_cost is not None and kernel.failures == 0
    records = db.records(kernel.workload_key, get_target("testsim").key)
    assert len(records) == 6 and {str(r.unit) for r in records} == {"s"}
    built = akg.build(graph, target="testsim", db=db)
    assert built.config_source.startswith(("tuned", "default (kept", "default (the tuned pick")) and built.config == kernel.chosen_config
