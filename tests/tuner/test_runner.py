"""Runners: candidates that crash, hang or compute wrong values become failed results and
measurement goes on; good candidates are verified and timed; artifacts travel as bytes to a
worker process; runners hand out futures."""

import tempfile
from concurrent.futures import Future

import pytest
import tvm
from tvm import tirx

from akg.db import Status
from akg.graph import GraphBuilder
from akg.schedules.cpu import cpu_config
from akg.schedules.space import Config
from akg.target import Artifact, get_backend, get_target
from akg.tuner.builder import BuildResult, InProcessBuilder
from akg.tuner.runner import InProcessRunner, LocalRunner, MeasureResult, TaskData, load_task, run_artifact


def _graph():
    b = GraphBuilder("k")
    b.output(b.relu(b.add(b.input("x", (64, 64)), b.input("y", (64,)))))
    return b.build()


def _library(body_fn, directory) -> Artifact:
    """A CPU artifact whose `main` takes (x, y, out) like the kernel but does body_fn."""
    x = tirx.decl_buffer((64, 64), "float32", "x")
    y = tirx.decl_buffer((64,), "float32", "y")
    out = tirx.decl_buffer((64, 64), "float32", "out")
    func = tirx.PrimFunc([x, y, out], body_fn(x, y, out)).with_attr("global_symbol", "main")
    exe = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    path = tempfile.mktemp(suffix=".so", dir=directory)
    exe.export_library(path)
    with open(path, "rb") as f:
        return Artifact(get_target("cpu").backend().artifact_kind, f.read())


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
    """Builds real candidates, except at the positions in `faults`: those become the planted
    faulty library."""

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
        results = runner.run(TaskData(graph), builder.build(graph, get_target("cpu"), configs))
    finally:
        runner.close()
    statuses = [r.status for r in results]
    assert statuses == [Status.OK, Status.RUN_ERROR, Status.TIMEOUT, Status.WRONG_RESULT, Status.OK], \
        [(r.status, r.error) for r in results]
    assert "crashed" in results[1].error and "no result within" in results[2].error
    assert "differ" in results[3].error
    assert results[0].cost > 0 and results[4].cost > 0
    assert results[0].features is not None


def test_in_process_pair_measures(tmp_path):
    graph = _graph()
    builds = InProcessBuilder(str(tmp_path)).build(graph, get_target("cpu"), [Config()])
    (result,) = InProcessRunner().run(TaskData(graph), builds)
    assert result.status == Status.OK and 0 < result.cost < 0.01


def test_artifact_bytes_run_in_a_worker_process_and_futures_come_back(tmp_path):
    graph = _graph()
    target = get_target("cpu")
    builds = InProcessBuilder(str(tmp_path)).build(graph, target, [Config(), cpu_config(unroll=False)])
    builds.append(BuildResult(cpu_config(vectorize=False), None, Status.BUILD_ERROR, "planted"))
    assert all(isinstance(b.artifact.data, bytes) and b.artifact.kind == "cpu-llvm-so" for b in builds[:2])
    assert not list(tmp_path.iterdir())  # no file of an artifact is left for the worker to find
    runner = LocalRunner(timeout=30.0)
    try:
        futures = runner.submit(TaskData(graph, unit=target.cost_unit), builds)
        assert len(futures) == 3 and all(isinstance(f, Future) for f in futures)
        assert futures[2].done()  # a build error needs no worker
        results = [f.result(timeout=120) for f in futures]
    finally:
        runner.close()
    assert [r.status for r in results] == [Status.OK, Status.OK, Status.BUILD_ERROR]
    assert all(isinstance(r, MeasureResult) and r.unit == "s" for r in results)
    assert results[0].cost > 0 and results[1].cost > 0 and results[2].error == "planted"


def test_in_process_runner_futures_are_done_and_the_unit_is_the_tasks(tmp_path):
    graph = _graph()
    builds = InProcessBuilder(str(tmp_path)).build(graph, get_target("cpu"), [Config()])
    futures = InProcessRunner().submit(TaskData(graph, unit="s"), builds)
    assert len(futures) == 1 and futures[0].done()
    assert futures[0].result().status == Status.OK and futures[0].result().unit == "s"


def test_run_artifact_times_through_the_backend(tmp_path, monkeypatch):
    graph = _graph()
    (build,) = InProcessBuilder(str(tmp_path)).build(graph, get_target("cpu"), [Config()])
    backend = get_backend(build.artifact.kind)
    calls = []
    original = type(backend).measure

    def measure(self, executable, tensors, *, number, repeat):
        calls.append((number, repeat))
        return original(self, executable, tensors, number=number, repeat=repeat)

    monkeypatch.setattr(type(backend), "measure", measure)
    task = load_task(TaskData(graph).payload)
    status, cost, error = run_artifact(build.artifact, task, "s", min_seconds=0.01, repeats=3)
    assert status == Status.OK and cost > 0 and error == ""
    assert len(calls) == 1 and calls[0][1] == 3 and calls[0][0] >= 1
    status, cost, _ = run_artifact(build.artifact, task, "cycles", repeats=3)  # a unit that does not vary
    assert status == Status.OK and calls[1] == (1, 1)


@pytest.mark.slow
def test_local_runner_serves_several_tasks_from_one_worker(tmp_path):
    runner = LocalRunner(timeout=30.0)
    try:
        for n in (1, 2):
            graph = _graph()
            builds = InProcessBuilder(str(tmp_path)).build(graph, get_target("cpu"), [Config()] * n)
            assert [r.status for r in runner.run(TaskData(graph), builds)] == [Status.OK] * n
    finally:
        runner.close()


def test_local_runner_sends_again_the_inputs_its_worker_dropped(tmp_path):
    # the worker keeps the inputs of TASKS_KEPT tasks: a model with more kernels than that
    # (ResNet-18: 18) comes back to its first ones for the final comparisons, whose inputs the
    # worker has dropped; the runner sends them again rather than failing the comparison
    from akg.tuner.runner.local import TASKS_KEPT

    target = get_target("cpu")
    tasks, builds = [], []
    for n in range(TASKS_KEPT + 2):
        b = GraphBuilder(f"k{n}")
        b.output(b.relu(b.input("x", (8, 8 + n))))
        graph = b.build()
        tasks.append(TaskData(graph, unit=target.cost_unit))
        builds.append(InProcessBuilder(str(tmp_path)).build(graph, target, [Config()]))
    runner = LocalRunner(timeout=30.0)
    try:
        for task, built in zip(tasks, builds):
            assert [r.status for r in runner.run(task, built)] == [Status.OK]
        comparison = runner.compare(tasks[0], builds[0] * 2, rounds=2).result(timeout=120)
        assert not comparison.error and comparison.statuses == [Status.OK, Status.OK]
        # a worker that lost inputs the runner thinks it has (a restart it did not see)
        runner._sent[tasks[1].key] = None
        (again,) = runner.run(tasks[1], builds[1])
        assert again.status == Status.OK, again.error
    finally:
        runner.close()


def test_a_task_carries_which_outputs_pass_through_float16():
    # the runner's verification holds such an output to float16's tolerance, as `akg run --check`
    b = GraphBuilder("f16")
    y = b.add(b.input("x", (8,)), 1.0)
    b.output(b.cast(b.cast(y, to="float16"), to="float32"), y)
    task = load_task(TaskData(b.build()).payload)
    assert task.narrowest == ["float16", "float32"]
    assert task.expected().tolerance_dtype(0, "float32") == "float16"
