"""Measurement: candidates that crash, hang or compute wrong values become failed results
and measurement goes on; good candidates are verified and timed."""

import tempfile

import pytest
import tvm
from tvm import tirx

from akg.db import Status
from akg.graph import GraphBuilder
from akg.schedules.cpu import cpu_config
from akg.schedules.space import Config
from akg.target import get_target
from akg.tuner.measure import (BuildResult, InProcessBuilder, InProcessRunner, LocalBuilder, LocalRunner,
                               TaskData)


def _graph():
    b = GraphBuilder("k")
    b.output(b.relu(b.add(b.input("x", (64, 64)), b.input("y", (64,)))))
    return b.build()


def _library(body_fn, directory) -> str:
    """A shared library whose `main` takes (x, y, out) like the kernel but does body_fn."""
    x = tirx.decl_buffer((64, 64), "float32", "x")
    y = tirx.decl_buffer((64,), "float32", "y")
    out = tirx.decl_buffer((64, 64), "float32", "out")
    func = tirx.PrimFunc([x, y, out], body_fn(x, y, out)).with_attr("global_symbol", "main")
    exe = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    path = tempfile.mktemp(suffix=".so", dir=directory)
    exe.export_library(path)
    return path


def _wrong(x, y, out):
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    return tirx.For(i, 0, 64, tirx.ForKind.SERIAL, tirx.For(j, 0, 64, tirx.ForKind.SERIAL,
                    tirx.BufferStore(out, tirx.BufferLoad(x, [i, j]), [i, j])))


def _hang(x, y, out):
    i = tirx.Var("i", "int64")
    spin = tirx.For(i, 0, tirx.const(1 << 62, "int64"), tirx.ForKind.SERIAL,
                    tirx.BufferStore(out, tirx.BufferLoad(out, [0, 0]) + tirx.const(1, "float32"), [0, 0]))
    return spin


def _crash(x, y, out):
    return tirx.Evaluate(tirx.call_extern("int32", "raise", 11))  # SIGSEGV


class PlantedBuilder(InProcessBuilder):
    """Builds real candidates, except configs whose `unroll` is off: those become the planted
    faulty library named by the config's position."""

    def __init__(self, faults, directory):
        super().__init__(directory)
        self.faults = faults

    def build(self, graph, target, configs):
        out = []
        for k, c in enumerate(configs):
            if k in self.faults:
                out.append(BuildResult(c, _library(self.faults[k], self.directory)))
            else:
                out.extend(super().build(graph, target, [c]))
        return out


def test_faulty_candidates_fail_with_the_right_status_and_measurement_goes_on(tmp_path):
    graph = _graph()
    configs = [cpu_config(unroll=u, vectorize=v) for u in (True, False) for v in (True, False)] + [cpu_config(parallel=False)]
    builder = PlantedBuilder({1: _crash, 2: _hang, 3: _wrong}, str(tmp_path))
    runner = LocalRunner(timeout=3.0)
    try:
        results = runner.run(TaskData(graph, tmp_path), builder.build(graph, get_target("cpu"), configs))
    finally:
        runner.close()
    statuses = [r.status for r in results]
    assert statuses == [Status.OK, Status.RUN_ERROR, Status.TIMEOUT, Status.WRONG_RESULT, Status.OK], \
        [(r.status, r.error) for r in results]
    assert "crashed" in results[1].error and "no result within" in results[2].error
    assert "differ" in results[3].error
    assert results[0].cost > 0 and results[4].cost > 0
    assert results[0].features is not None


def test_illegal_configs_are_build_errors(tmp_path):
    from akg.schedules.cpu import BandConfig

    bad = cpu_config(bands=(BandConfig((0, 1), (999, 0), (0, 0)),))
    (result,) = InProcessBuilder(str(tmp_path)).build(_graph(), get_target("cpu"), [bad])
    assert result.status == Status.BUILD_ERROR and "illegal config" in result.error


def test_in_process_pair_measures(tmp_path):
    graph = _graph()
    builds = InProcessBuilder(str(tmp_path)).build(graph, get_target("cpu"), [Config()])
    (result,) = InProcessRunner().run(TaskData(graph, tmp_path), builds)
    assert result.status == Status.OK and 0 < result.cost < 0.01


@pytest.mark.slow
def test_process_pool_builder(tmp_path):
    builder = LocalBuilder(workers=2, directory=str(tmp_path))
    try:
        results = builder.build(_graph(), get_target("cpu"), [Config(), cpu_config(unroll=False)])
    finally:
        builder.close()
    assert all(r.status == Status.OK and r.artifact for r in results)
