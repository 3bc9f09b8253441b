"""Builders: illegal configs are build errors; artifacts are bytes; the lowering the tuner made
to rank a candidate is what the builder compiles (it does not lower again), and the fast-math
fallback still lowers when the compiler rejects the expansions."""

import pytest

from akg.compiler import Pipeline, pipeline_for
from akg.db import Status
from akg.errors import LoweringError
from akg.graph import GraphBuilder
from akg.graph.subgraph import Subgraph
from akg.schedules.cpu import cpu_config
from akg.schedules.space import Config
from akg.target import Artifact, get_target
from akg.tuner.builder import BuildInput, InProcessBuilder, LocalBuilder, Lowered
from akg.tuner.task import TuningTask
from akg.tuner.tune import candidate


def _graph():
    b = GraphBuilder("k")
    b.output(b.relu(b.add(b.input("x", (64, 64)), b.input("y", (64,)))))
    return b.build()


def _counting_lower(monkeypatch) -> list:
    calls = []
    original = Pipeline.lower

    def lower(self, config):
        calls.append(config)
        return original(self, config)

    monkeypatch.setattr(Pipeline, "lower", lower)
    return calls


def test_illegal_configs_are_build_errors(tmp_path):
    from akg.schedules.cpu import BandConfig

    bad = cpu_config(bands=(BandConfig((0, 1), (999, 0), (0, 0)),))
    (result,) = InProcessBuilder(str(tmp_path)).build(_graph(), get_target("cpu"), [bad])
    assert result.status == Status.BUILD_ERROR and "illegal config" in result.error


def test_lowered_round_trips_as_json_text():
    pipeline = pipeline_for(_graph(), get_target("cpu"))
    func, records = pipeline.lower(pipeline.default_config())
    lowered = Lowered.of(func, records)
    assert isinstance(lowered.func_json, str)
    loaded, loaded_records = lowered.load()
    assert str(loaded) == str(func) and loaded_records == list(records)


def test_the_builder_compiles_the_lowering_it_is_given(tmp_path, monkeypatch):
    graph = _graph()
    target = get_target("cpu")
    task = TuningTask(Subgraph(graph), target)
    config = task.default_config()
    features = task.features(config)  # the tuner lowers to rank the candidate
    given = candidate(task, config)
    assert given.lowered is not None
    calls = _counting_lower(monkeypatch)
    (result,) = InProcessBuilder(str(tmp_path)).build(graph, target, [given])
    assert result.status == Status.OK and isinstance(result.artifact, Artifact) and result.artifact.data
    assert calls == []  # nothing lowered again
    assert (result.features == features).all()
    (lowering,) = InProcessBuilder(str(tmp_path)).build(graph, target, [BuildInput(config)])
    assert lowering.status == Status.OK and len(calls) == 1  # without a lowering, the builder lowers
    unranked = cpu_config(unroll=False)
    assert candidate(task, unranked).lowered is None  # never lowered by the tuner: nothing to reuse


def test_fast_math_fallback_lowers_again(tmp_path, monkeypatch):
    graph = _graph()
    target = get_target("cpu")
    task = TuningTask(Subgraph(graph), target)
    config = task.default_config()
    assert config.has("fast_math")
    task.features(config)
    original = Pipeline.compile
    rejected = []

    def compile_(self, func):
        if not rejected:
            rejected.append(func)
            raise LoweringError("LLVM compilation failed: Let cannot bind the same var twice")
        return original(self, func)

    monkeypatch.setattr(Pipeline, "compile", compile_)
    calls = _counting_lower(monkeypatch)
    (result,) = InProcessBuilder(str(tmp_path)).build(graph, target, [candidate(task, config)])
    assert result.status == Status.OK and len(rejected) == 1
    assert len(calls) == 1 and not calls[0].has("fast_math")


@pytest.mark.slow
def test_process_pool_builder(tmp_path):
    task = TuningTask(Subgraph(_graph()), get_target("cpu"))
    task.features(task.default_config())
    builder = LocalBuilder(workers=2, directory=str(tmp_path))
    try:
        results = builder.build(_graph(), get_target("cpu"), [Config(), cpu_config(unroll=False),
                                                              candidate(task, task.default_config())])
    finally:
        builder.close()
    assert all(r.status == Status.OK and r.artifact for r in results)


def test_a_builders_own_scratch_directory_goes_when_closed_or_collected():
    import gc
    import os

    from akg.tuner.builder import InProcessBuilder

    closed = InProcessBuilder()
    path = closed.directory
    assert os.path.isdir(path)
    closed.close()
    closed.close()  # twice is fine
    assert not os.path.exists(path)
    forgotten = InProcessBuilder()
    path = forgotten.directory
    del forgotten
    gc.collect()
    assert not os.path.exists(path)


def test_scratch_directories_of_dead_processes_are_swept(tmp_path):
    import os
    import subprocess
    import sys

    from akg.tuner.builder.compile import SCRATCH_PREFIX, sweep_scratch

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / f"{SCRATCH_PREFIX}{dead.stdout.strip()}-abc"
    gone.mkdir()
    (gone / "kernel.so").write_bytes(b"left by a killed builder")
    mine = tmp_path / f"{SCRATCH_PREFIX}{os.getpid()}-def"
    mine.mkdir()
    other = tmp_path / f"{SCRATCH_PREFIX}old-style"  # no process id: not ours to judge
    other.mkdir()
    assert sweep_scratch(str(tmp_path)) == 1
    assert not gone.exists() and mine.exists() and other.exists()
