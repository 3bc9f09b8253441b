"""Fault tests through the real tuner: `tune()` with the worker pools `akg tune` makes
(LocalBuilder, LocalRunner), on the test-only target `cpu-faults` (fault_target.py, loaded by
the workers through the `akg.targets` entry point) whose planted candidates crash the builder
(SIGABRT), crash the runner (SIGSEGV), hang, compute wrong values or are slow once. Each becomes
a record with its status and error text, the best config is a good one, native crash dumps
land in the records (one line on the terminal), and no worker outlives the tune. The command
line: a SIGKILL of `akg tune` leaves no process behind and the resumed tune loses nothing; a
SIGTERM, or a second Ctrl-C, stops at once with every record kept."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from akg.db import Status, open_database
from akg.graph import GraphBuilder
from akg.graph.io import save_mir
from akg.schedules.cpu import cpu_config
from akg.schedules.space import Config
from akg.target import get_target
from akg.tuner.builder import InProcessBuilder, LocalBuilder
from akg.tuner.runner import InProcessRunner, LocalRunner, TaskData
from akg.tuner.search import SearchStrategy
from akg.tuner.task import TuningTask
from akg.tuner.tune import _StopOnInterrupt, candidate, kernels_of, tune
from akg.tuner.worker import Worker

HERE = Path(__file__).resolve().parent
AKG = Path(sys.executable).with_name("akg")


def _matmul(n=64, name="mm"):
    b = GraphBuilder(name)
    b.output(b.relu(b.matmul(b.input("a", (n, n)), b.input("w", (n, n)))))
    return b.build()


def _workers() -> list[psutil.Process]:
    """This process's worker processes (builder and runner) still alive."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "akg.tuner.worker" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture
def faults(tmp_path, monkeypatch):
    """The `cpu-faults` plug-in installed the way a third party's is (a distribution with an
    `akg.targets` entry point on the path), for this process, its workers and subprocesses;
    returns (the plug-in module, the path of its plan)."""
    site = tmp_path / "site"
    dist = site / "akg_fault_target-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: akg-fault-target\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[akg.targets]\nfaults = fault_target\n")
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.syspath_prepend(str(site))
    paths = [str(site), str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    plan = tmp_path / "plan.json"
    monkeypatch.setenv("AKG_FAULT_PLAN", str(plan))
    import fault_target

    return fault_target, plan


class PlannedSearch(SearchStrategy):
    """Proposes the given configs in order (those not measured yet)."""

    name = "planned"

    def __init__(self, configs):
        self.configs = list(configs)

    def propose(self, task, model, n):
        return [c for c in self.configs if c.to_json() not in task.measured][:n]


def _distinct_candidates(plugin, task: TuningTask, count: int) -> list[tuple[Config, str]]:
    """`count` legal configs of the task whose TIR differs, with their fingerprints."""
    seen, out = set(), []
    switches = [dict(unroll=u, vectorize=v, parallel=p, promote=q)
                for p in (True, False) for u in (True, False) for v in (True, False) for q in (True, False)]
    for config in [task.default_config(), *(cpu_config(**s) for s in switches)]:
        if not task.space(config.fusion).is_legal(config):
            continue
        fp = plugin.fingerprint(task.pipeline(config.fusion).lower(config)[0])
        if fp not in seen:
            seen.add(fp)
            out.append((config, fp))
        if len(out) == count:
            return out
    pytest.fail(f"only {len(out)} distinct candidates")


def test_planted_faults_become_records_and_no_worker_outlives_the_tune(faults, tmp_path, caplog, capfd):
    plugin, plan_path = faults
    target = get_target("cpu-faults")
    graph = _matmul()
    (subgraph,) = kernels_of(graph, target)
    task = TuningTask(subgraph, target)
    # two rounds of four: a good candidate first, so that later ones run under a shortened limit
    planned = ["ok", "segv", "build-abort", "hang", "wrong", "slow-once", "ok"]
    candidates = _distinct_candidates(plugin, task, len(planned))
    plan_path.write_text(json.dumps({fp: fault for (_, fp), fault in zip(candidates, planned)}))
    fault_of = {c.to_json(): fault for (c, _), fault in zip(candidates, planned)}
    seen_workers = []

    def progress(done, total, task, results):
        seen_workers.append(len(_workers()))

    db = open_database(str(tmp_path / "t.db"))
    caplog.set_level(logging.WARNING)
    result = tune(graph, target=target, trials=len(planned), db=db, timeout=3.0, batch=4, cost_model="random",
                  search=PlannedSearch([c for c, _ in candidates]), progress=progress)

    history = db.history(subgraph.workload_key, target.key)
    rows = {fault_of[r.config]: r for r in history}
    assert sorted(rows) == sorted(set(planned)) and result.new_measurements == len(planned)
    summary = {k: (str(r.status), r.error.splitlines()[0] if r.error else "") for k, r in rows.items()}
    assert rows["ok"].status == Status.OK and rows["ok"].cost > 0 and rows["ok"].error == "", summary
    assert rows["build-abort"].status == Status.BUILD_ERROR, summary
    assert "crashed the builder (killed by SIGABRT)" in rows["build-abort"].error
    assert rows["segv"].status == Status.RUN_ERROR, summary
    assert rows["segv"].error.startswith("the kernel crashed the runner (killed by SIGSEGV)")
    assert len(rows["segv"].error.splitlines()) > 3  # the worker's native stack dump
    assert rows["hang"].status == Status.TIMEOUT, summary
    # measured again, fully: the shortened limit is max(1 s, 300 x the best time), more than 1 s on a loaded host
    shortened = re.fullmatch(r"no result within 3\.0s \(and within (\d+\.\d)s before\)", rows["hang"].error)
    assert shortened and 1.0 <= float(shortened.group(1)) < 3.0, rows["hang"].error
    assert rows["wrong"].status == Status.WRONG_RESULT and "differ" in rows["wrong"].error, summary
    # timed out under the shortened limit (1 s), then measured with the full one: not a timeout
    assert rows["slow-once"].status == Status.OK and rows["slow-once"].cost > 0, summary
    (kernel,) = result.kernels
    good = [r for r in history if r.status == Status.OK]
    assert len(good) == 3 and {fault_of[r.config] for r in good} == {"ok", "slow-once"}
    assert kernel.best_config.to_json() == min(good, key=lambda r: r.cost).config
    assert kernel.failures == 4 and kernel.trials == len(planned)
    # the dumps are in the records; the terminal got one line per crash
    err = capfd.readouterr().err
    assert "Segfault" not in err and "File \"" not in err, err[-2000:]
    crashes = [r.getMessage() for r in caplog.records if "crashed" in r.getMessage()]
    assert len(crashes) == 2 and all("\n" not in m for m in crashes), crashes
    # workers ran during the tune, none is left after it
    assert seen_workers and max(seen_workers) >= 2
    assert _workers() == []


def test_the_builder_pool_outlives_a_hung_and_a_crashed_build(faults, tmp_path):
    plugin, plan_path = faults
    target = get_target("cpu-faults")
    graph = _matmul(32)
    (subgraph,) = kernels_of(graph, target)
    task = TuningTask(subgraph, target)
    candidates = _distinct_candidates(plugin, task, 5)
    planned = ["ok", "build-hang", "build-abort", "ok", "ok"]
    plan_path.write_text(json.dumps({fp: fault for (_, fp), fault in zip(candidates, planned)}))
    builder = LocalBuilder(workers=2, timeout=3.0, directory=str(tmp_path))
    try:
        results = builder.build(subgraph.graph, target, [candidate(task, c) for c, _ in candidates])
        assert 1 <= len(_workers()) <= 2  # failed workers were replaced while there was work left
    finally:
        builder.close()
    assert [r.status for r in results] == [Status.OK, Status.BUILD_ERROR, Status.BUILD_ERROR, Status.OK, Status.OK], \
        [(r.status, r.error) for r in results]
    assert results[1].error == "build took over 3s"
    assert results[2].error.startswith("the candidate crashed the builder (killed by SIGABRT)")
    assert all(r.artifact.kind == "cpu-faults-so" for r in results if r.status == Status.OK)
    assert _workers() == []


def test_a_worker_dead_before_it_reads_its_request_is_a_failed_record(tmp_path, monkeypatch):
    graph = _matmul(32)
    target = get_target("cpu")
    builds = InProcessBuilder(str(tmp_path)).build(graph, target, [Config(), cpu_config(unroll=False),
                                                                    cpu_config(vectorize=False)])
    assert all(b.status == Status.OK for b in builds)
    original = Worker.send
    planted = []

    def send(self, fn, *args):
        if len(planted) == 0:  # stopped, sent to (it fits the socket's buffer), then killed: never read
            planted.append("reset")
            os.kill(self.pid, signal.SIGSTOP)
            original(self, fn, *args)
            self.proc.kill()
            self.proc.wait()
            return None
        if len(planted) == 1:  # dead before the request is sent (broken pipe)
            planted.append("broken pipe")
            self.proc.kill()
            self.proc.wait()
        return original(self, fn, *args)

    monkeypatch.setattr(Worker, "send", send)
    runner = LocalRunner(timeout=30.0)
    try:
        results = runner.run(TaskData(graph), builds)
    finally:
        runner.close()
    assert [r.status for r in results] == [Status.RUN_ERROR, Status.RUN_ERROR, Status.OK], \
        [(r.status, r.error) for r in results]
    assert all("crashed the runner" in r.error for r in results[:2])
    assert results[2].cost > 0
    assert _workers() == []


# --- the command line ------------------------------------------------------------------------


def _marked(marker: str) -> list[int]:
    """Processes whose environment holds `marker` (a tune's own and its children)."""
    needle = marker.encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            if needle in environ and (entry / "stat").read_text().split(") ")[-1][0] != "Z":
                out.append(int(entry.name))
        except OSError:
            pass
    return out


def _records(url: str) -> int:
    try:
        with sqlite3.connect(f"file:{url}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT count(*) FROM records").fetchone()[0]
    except sqlite3.Error:
        return 0


def _start_tune(args: list[str], marker: str, env: dict | None = None) -> subprocess.Popen:
    environ = dict(os.environ if env is None else env)
    environ["AKG_TEST_TUNE"] = marker
    return subprocess.Popen([str(AKG), "tune", *args], env=environ, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_records(proc: subprocess.Popen, url: str, count: int, limit: float = 180.0) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        seen = _records(url)
        if seen >= count:
            return seen
        if proc.poll() is not None:
            pytest.fail(f"akg tune ended early ({proc.returncode}): {proc.stdout.read()[-2000:]}")
        time.sleep(0.2)
    pytest.fail(f"no {count} records within {limit:.0f}s")


def _none_left(marker: str, within: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within
    while (left := _marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _cleanup(proc: subprocess.Popen, marker: str) -> None:
    for pid in [proc.pid, *_marked(marker)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.wait()


def test_sigkill_of_akg_tune_leaves_no_process_and_the_resume_loses_nothing(tmp_path, examples_dir):
    url = str(tmp_path / "tuning.db")
    marker = f"akg-tune-{uuid.uuid4().hex}"
    proc = _start_tune([str(examples_dir / "mlp.mir"), "--trials", "64", "--batch", "4", "--db", url], marker)
    try:
        seen = _wait_for_records(proc, url, 2)
        assert len(_marked(marker)) >= 3  # the tune, its builder workers and its runner worker
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _none_left(marker) == []  # the workers died with it (and nothing else was left)
    finally:
        _cleanup(proc, marker)
    db = open_database(url)
    before = {(r.workload_key, r.config) for r in db.records()}
    assert len(before) >= seen
    target = get_target("cpu")
    resumed = tune(examples_dir / "mlp.mir", trials=len(before) + 2, db=db, builder=InProcessBuilder(str(tmp_path)),
                   runner=InProcessRunner(), batch=2, cost_model="random")
    after = {(r.workload_key, r.config) for r in db.records()}
    assert resumed.new_measurements == 2 and before < after and len(after) == len(before) + 2
    assert sum(k.trials for k in resumed.kernels) == len(after)  # what was there before counted
    assert all(r.target_key == target.key for r in db.records())


def test_the_first_ctrl_c_asks_a_second_or_a_sigterm_stops_now_but_not_mid_write():
    before = signal.getsignal(signal.SIGTERM)
    stop = _StopOnInterrupt()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        assert stop.requested and stop.signum == signal.SIGINT  # asked, nothing raised
        with pytest.raises(KeyboardInterrupt):
            with stop.writing():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.01)
                written = True  # the write in flight ends before the stop
        assert written
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        assert stop.signum == signal.SIGTERM
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.parametrize("how", ["sigterm", pytest.param("second-ctrl-c", marks=pytest.mark.slow)])
def test_akg_tune_stops_at_once_on_sigterm_or_a_second_ctrl_c(how, faults, tmp_path):
    plugin, plan_path = faults
    target = get_target("cpu-faults")
    graph = _matmul(32)
    save_mir(graph, tmp_path / "mm.mir")
    (subgraph,) = kernels_of(graph, target)
    task = TuningTask(subgraph, target)
    # the defaults run, every other candidate hangs (for the full --timeout 120 once re-measured)
    plan = {"*": "hang"}
    for fusion in task.fusions():
        config = task.default_config(fusion)
        plan[plugin.fingerprint(task.pipeline(fusion).lower(config)[0])] = "ok"
    plan_path.write_text(json.dumps(plan))
    url = str(tmp_path / "tuning.db")
    marker = f"akg-tune-{uuid.uuid4().hex}"
    proc = _start_tune([str(tmp_path / "mm.mir"), "--target", "cpu-faults", "--trials", "16", "--batch", "8",
                        "--timeout", "120", "--db", url], marker)
    try:
        _wait_for_records(proc, url, 1)
        time.sleep(0.5)
        if how == "second-ctrl-c":
            os.kill(proc.pid, signal.SIGINT)
            time.sleep(2.0)
            assert proc.poll() is None  # the first Ctrl-C waits for the round (it has a hang in it)
            os.kill(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGTERM)
        stopped = time.monotonic()
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - stopped
        assert proc.returncode == 130, out[-2000:]
        assert took < 15, took  # at once: the hung candidate in flight would take 120 s
        assert "interrupted" in out and "Traceback" not in out, out[-2000:]
        assert _none_left(marker) == []
    finally:
        _cleanup(proc, marker)
    db = open_database(url)
    records = db.history(subgraph.workload_key, target.key)
    assert records and all(r.status == Status.OK for r in records)  # the hung ones were never recorded
