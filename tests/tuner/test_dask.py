"""Measuring on Dask (akg.tuner.runner.dask, dask_cluster, akg.tuner.builder.dask) with real
`dask.distributed` clusters of worker processes (one thread each): a tune over Dask records
what a local tune of the same budget records, with the same best config (fixed seed, a
deterministic fake runner); a worker killed mid-batch loses no record and writes none twice;
a candidate that kills its worker twice is a failed record saying so; a candidate that
crashes its subprocess on a worker is the same crash record as locally; a worker of other
hardware is reported and never used; no process outlives the tune. The command line's
--workers/--scheduler are checked before any work."""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("distributed")

from akg.db import InMemoryDatabase, Status  # noqa: E402
from akg.errors import ClusterError  # noqa: E402
from akg.graph import GraphBuilder  # noqa: E402
from akg.graph.io import save_mir  # noqa: E402
from akg.schedules.cpu import cpu_config  # noqa: E402
from akg.schedules.space import Config  # noqa: E402
from akg.target import Artifact, get_target  # noqa: E402
from akg.tuner.builder import BuildResult, InProcessBuilder  # noqa: E402
from akg.tuner.cost_model import make_cost_model  # noqa: E402
from akg.tuner.runner import MeasureResult, Runner, TaskData  # noqa: E402
from akg.tuner.runner import dask_cluster  # noqa: E402
from akg.tuner.runner.dask import DaskRunner  # noqa: E402
from akg.tuner.runner.dask_cluster import scheduler_address  # noqa: E402
from akg.tuner.runner.runner import done  # noqa: E402
from akg.tuner.search import SearchStrategy, make_search  # noqa: E402
from akg.tuner.task import TuningTask  # noqa: E402
from akg.tuner.tune import TuneLoop, kernels_of, tasks_of, tune  # noqa: E402

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.timeout(120)


def _matmul(n=32, name="mm"):
    b = GraphBuilder(name)
    b.output(b.relu(b.matmul(b.input("a", (n, n)), b.input("w", (n, n)))))
    return b.build()


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    """The test plug-ins `cpu-faults` (fault_target.py) and `cpu-farm` (farm_fakes.py) installed
    as a third party's are, for this process and every Dask worker it starts; returns
    (fault_target, farm_fakes, the fault plan's path)."""
    root = tmp_path_factory.mktemp("farm")
    site = root / "site"
    dist = site / "akg_farm_test-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: akg-farm-test\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[akg.targets]\nfaults = fault_target\nfarm = farm_fakes\n")
    plan = root / "plan.json"
    plan.write_text("{}")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(HERE))
        mp.syspath_prepend(str(site))
        mp.setenv("PYTHONPATH", os.pathsep.join([str(site), str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]))
        mp.setenv("AKG_FAULT_PLAN", str(plan))
        mp.delenv("AKG_FARM_MACHINE", raising=False)
        import fault_target
        import farm_fakes

        yield fault_target, farm_fakes, plan


def _processes() -> set[int]:
    """This process's descendants still running (multiprocessing's resource tracker aside)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(p.cmdline()):
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _none_left(before: set[int], within: float = 10.0) -> set[int]:
    deadline = time.monotonic() + within
    while (left := _processes() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


class PlannedSearch(SearchStrategy):
    """Proposes the given configs in order (those not measured yet)."""

    name = "planned"

    def __init__(self, configs):
        self.configs = list(configs)

    def propose(self, task, model, n):
        return [c for c in self.configs if c.to_json() not in task.measured][:n]


def _configs(task: TuningTask, count: int) -> list[Config]:
    switches = [dict(unroll=u, vectorize=v, parallel=p) for p in (True, False) for u in (True, False)
                for v in (True, False)]
    out = [c for c in [task.default_config(), *(cpu_config(**s) for s in switches)] if task.space(c.fusion).is_legal(c)]
    unique = list({c.to_json(): c for c in out}.values())
    assert len(unique) >= count
    return unique[:count]


def _history(db, graph, target):
    (sg,) = kernels_of(graph, target)
    return db.history(sg.workload_key, target.key)


# --- without a cluster -------------------------------------------------------------------------


def test_scheduler_addresses_are_checked():
    assert scheduler_address("tcp://10.0.0.5:8786") == "tcp://10.0.0.5:8786"
    assert scheduler_address(" farm-head:8786 ") == "tcp://farm-head:8786"
    assert scheduler_address("tls://[::1]:8786") == "tls://[::1]:8786"
    for bad in ("", "farm-head", "http://farm-head:8786", "tcp://farm-head:0", "tcp://farm-head:70000",
                "tcp://a b:1"):
        with pytest.raises(ClusterError, match="not a Dask scheduler address"):
            scheduler_address(bad)


def test_cli_farm_options_are_typed_and_an_unreachable_scheduler_is_a_clear_error(tmp_path, capsys, monkeypatch):
    from akg.cli import main

    save_mir(_matmul(), tmp_path / "mm.mir")
    args = ["tune", str(tmp_path / "mm.mir"), "--trials", "2", "--db", str(tmp_path / "t.db")]
    assert main([*args, "--workers", "0"]) == 2
    assert "Invalid value for '--workers'" in capsys.readouterr().err
    assert main([*args, "--scheduler", "http://farm:8786"]) == 2
    assert "not a Dask scheduler address" in capsys.readouterr().err
    assert main([*args, "--workers", "2", "--scheduler", "tcp://farm:8786"]) == 2
    assert "mutually exclusive" in capsys.readouterr().err
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(dask_cluster, "CONNECT_TIMEOUT", 1.0)
    started = time.monotonic()
    assert main([*args, "--scheduler", f"127.0.0.1:{port}"]) == ClusterError.exit_code == 7
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot reach the Dask scheduler at tcp://127.0.0.1:{port}"), err
    assert "Traceback" not in err and time.monotonic() - started < 30


def test_results_measured_on_other_hardware_are_kept_apart():
    """A runner that lets through a result of another machine: it is recorded under that
    machine's target key with its host, and neither joins the task's history nor teaches
    the cost model."""
    target = get_target("cpu")

    class ElsewhereRunner(Runner):
        def submit(self, task, builds, best=None):
            return [done(MeasureResult(b.config, Status.OK, (k + 1) / 1e5, task.unit, "", 0.0, 0.0, b.features,
                                       host=f"box{k}", target_key=target.key if k else "cpu-other-256b-8c"))
                    for k, b in enumerate(builds)]

    class Recording:
        name = "recording"
        informative = False

        def __init__(self):
            self.costs = []

        def update(self, feats, costs, groups):
            self.costs += costs

        def predict(self, feats):
            return make_cost_model("random").predict(feats)

    db = InMemoryDatabase()
    tasks = tasks_of(_matmul(), target, db)
    model = Recording()
    loop = TuneLoop(tasks, target, db, InProcessBuilder(), ElsewhereRunner(), model, make_search("random"),
                    trials=3, batch=3)
    assert loop.step()
    (task,) = tasks
    elsewhere = db.history(task.key, "cpu-other-256b-8c")
    here = db.history(task.key, target.key)
    assert len(elsewhere) == 1 and elsewhere[0].host == "box0" and elsewhere[0].cost == 1e-5
    assert [r.host for r in here] == ["box1", "box2"]
    assert len(task.trials) == 2 and elsewhere[0].config not in task.measured
    assert model.costs == [2e-5, 3e-5]  # those of the tuner's target only


# --- on a local cluster ------------------------------------------------------------------------


def test_a_dask_tune_records_what_a_local_tune_records(plugins):
    _, farm, _ = plugins
    graph = _matmul()
    target = get_target("cpu")
    kw = dict(trials=10, batch=4, seed=5, cost_model="xgb", search="evolutionary")
    local_db = InMemoryDatabase()
    local = tune(graph, db=local_db, builder=InProcessBuilder(), runner=farm.FakeRunner(), **kw)
    before = _processes()
    runner = DaskRunner(target, workers=2, local=farm.FakeRunner)
    try:
        assert len(runner.cluster.workers) >= 1
        assert {w.target_key for w in runner.cluster.workers.values()} == {target.key}
        farm_db = InMemoryDatabase()
        farmed = tune(graph, db=farm_db, builder=runner.builder(local=InProcessBuilder), runner=runner, **kw)
        timings = list(runner.cluster.timings)
    finally:
        runner.close()
    assert _none_left(before) == set()
    ours, theirs = _history(local_db, graph, target), _history(farm_db, graph, target)
    assert len(theirs) == len(ours) == 10 and farmed.new_measurements == local.new_measurements == 10
    assert [(r.config, r.status, r.cost) for r in theirs] == [(r.config, r.status, r.cost) for r in ours]
    assert farmed.kernels[0].best_config == local.kernels[0].best_config
    assert farmed.kernels[0].chosen_config == local.kernels[0].chosen_config  # the final comparison too
    assert all(r.host == socket.gethostname() and r.target_key == target.key for r in theirs)
    kinds = {t.kind for t in timings}
    assert kinds == {"build", "measure"} and len({t.worker for t in timings}) == 2  # both workers did work
    assert all(t.wall >= t.inside >= 0 for t in timings)


def test_a_worker_killed_mid_batch_loses_no_record(plugins, tmp_path):
    _, farm, _ = plugins
    graph = _matmul()
    target = get_target("cpu")
    markers = tmp_path / "measuring"
    markers.mkdir()
    before = _processes()
    runner = DaskRunner(target, workers=2, local=functools.partial(farm.FakeRunner, delay=0.4, markers=str(markers)))
    killed = []

    def kill_one_measuring_worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for marker in markers.iterdir():
                pid = int(marker.name)
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.01)

    try:
        pids = set(runner.cluster.client.run(os.getpid).values())
        for pid in pids:  # as a Ctrl-C in the tuner's terminal reaches them: the workers ignore it
            os.kill(pid, signal.SIGINT)
        time.sleep(0.5)
        assert set(runner.cluster.client.run(os.getpid).values()) == pids
        killer = threading.Thread(target=kill_one_measuring_worker)
        killer.start()
        db = InMemoryDatabase()
        result = tune(graph, db=db, builder=runner.builder(local=InProcessBuilder), runner=runner, trials=8, batch=4,
                      cost_model="random", confirm=False)
        killer.join()
        losses = list(runner.cluster.losses)
    finally:
        runner.close()
    assert _none_left(before) == set()
    assert killed and killed[0] in pids  # a Dask worker process, killed while it measured
    records = _history(db, graph, target)
    assert result.new_measurements == 8 and len(records) == len({r.config for r in records}) == 8
    assert all(r.status == Status.OK and r.cost == farm.fake_cost(Config.from_json(r.config)) for r in records)
    assert [(loss.kind, loss.final) for loss in losses] == [("measure", False)], losses  # re-queued once


@pytest.mark.slow  # a lost worker re-queued once runs by default; losing it twice with -m slow
def test_a_candidate_that_kills_its_worker_twice_is_a_failed_record(plugins):
    _, farm, _ = plugins
    graph = _matmul()
    target = get_target("cpu")
    (sg,) = kernels_of(graph, target)
    configs = _configs(TuningTask(sg, target), 4)
    deadly = configs[1].to_json()
    before = _processes()
    runner = DaskRunner(target, workers=2, local=functools.partial(farm.FakeRunner, kill=frozenset([deadly])))
    try:
        db = InMemoryDatabase()
        result = tune(graph, db=db, builder=runner.builder(local=InProcessBuilder), runner=runner, trials=4, batch=4,
                      cost_model="random", search=PlannedSearch(configs), confirm=False)
        losses = list(runner.cluster.losses)
    finally:
        runner.close()
    assert _none_left(before) == set()
    records = {r.config: r for r in _history(db, graph, target)}
    assert result.new_measurements == 4 and len(records) == 4
    failed = records[deadly]
    assert failed.status == Status.RUN_ERROR and failed.error.startswith("lost its Dask worker 2 times (Dask worker ")
    assert failed.error.count("was lost") == 2 and failed.host == socket.gethostname()
    assert all(r.status == Status.OK for c, r in records.items() if c != deadly)
    assert [loss.final for loss in losses if loss.kind == "measure"] == [False, True]


def test_a_candidate_crashing_its_process_on_a_worker_is_a_crash_record(plugins, caplog):
    """A real small kernel, built and measured by the workers' own LocalBuilder and
    LocalRunner: the planted SIGSEGV is the same record as locally; nothing is left after."""
    fault, _, plan = plugins
    target = get_target("cpu-faults")
    graph = _matmul()
    (sg,) = kernels_of(graph, target)
    task = TuningTask(sg, target)
    prints = {}  # fingerprint of the TIR -> config: three candidates whose code differs
    for config in _configs(task, 8):
        prints.setdefault(fault.fingerprint(task.pipeline(config.fusion).lower(config)[0]), config)
    assert len(prints) >= 3
    configs = list(prints.values())[:3]
    segv = configs[1]
    plan.write_text(json.dumps({list(prints)[1]: "segv"}))
    before = _processes()
    db = InMemoryDatabase()
    try:
        result = tune(graph, target=target, db=db, workers=2, trials=3, batch=3, cost_model="random",
                      search=PlannedSearch(configs), timeout=10.0)
    finally:
        plan.write_text("{}")
    assert _none_left(before) == set()
    records = {r.config: r for r in _history(db, graph, target)}
    assert result.new_measurements == 3 and len(records) == 3
    crashed = records[segv.to_json()]
    assert crashed.status == Status.RUN_ERROR, crashed.error
    assert crashed.error.startswith("the kernel crashed the runner (killed by SIGSEGV)")
    assert all(r.status == Status.OK and r.cost > 0 for c, r in records.items() if c != segv.to_json())
    assert all(r.host == socket.gethostname() and r.target_key == target.key for r in records.values())
    assert result.kernels[0].verdict is not None  # the final comparison ran on a worker


@pytest.mark.slow  # ~15 s of cluster start-up
def test_a_worker_of_other_hardware_is_reported_and_never_used(plugins, caplog):
    from distributed import Nanny, Scheduler, SpecCluster

    _, farm, _ = plugins
    target = get_target("cpu-farm")
    assert target.key.startswith("farm-a-")
    graph = _matmul()
    configs = [cpu_config(unroll=u, vectorize=v) for u in (True, False) for v in (True, False)]
    builds = [BuildResult(c, Artifact("cpu-llvm-so", b"unused")) for c in configs]
    nanny = {"cls": Nanny, "options": {"nthreads": 1, "memory_limit": 0}}
    other = {"cls": Nanny, "options": {"nthreads": 1, "memory_limit": 0, "env": {"AKG_FARM_MACHINE": "b"}}}
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": None}}
    caplog.set_level(logging.WARNING, logger="akg.tuner.runner.dask_cluster")
    before = _processes()
    with SpecCluster(workers={"a": nanny, "b": other}, scheduler=scheduler, silence_logs=logging.ERROR) as cluster:
        runner = DaskRunner(target, scheduler=cluster.scheduler_address, local=farm.FakeRunner)
        try:
            deadline = time.monotonic() + 60
            while len(runner.cluster.workers) + len(runner.cluster.excluded) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            results = runner.run(TaskData(graph), builds)
            usable, excluded = dict(runner.cluster.workers), dict(runner.cluster.excluded)
        finally:
            runner.close()
        assert len(usable) == 1 and len(excluded) == 1
        (why,) = excluded.values()
        assert "is farm-b-" in why and f"not the tuner's {target.key}" in why and "mix hardware" in why
        assert any("is not used" in r.getMessage() for r in caplog.records)
        assert [r.status for r in results] == [Status.OK] * 4
        assert all(r.target_key == target.key and r.host == socket.gethostname() for r in results)
        assert {t.worker for t in runner.cluster.timings} == set(usable)
    with SpecCluster(workers={"b": other}, scheduler=scheduler, silence_logs=logging.ERROR) as cluster:
        with pytest.raises(ClusterError, match=f"no Dask worker at .* measures the tuner's target {target.key}"):
            DaskRunner(target, scheduler=cluster.scheduler_address, local=farm.FakeRunner)
    assert _none_left(before) == set()
