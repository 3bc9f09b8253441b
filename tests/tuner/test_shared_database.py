"""Tuners sharing one database (tuner/tune.py's leases): two tuners of the same workload, with
the same seed (so the same proposals), measure disjoint configs and together reach the
budget once; in one process with interleaved rounds (memory, SQLite, PostgreSQL) and as two
processes at once (SQLite file, PostgreSQL). The builder and runner are fakes
(fake_measure.py): only the bookkeeping is under test."""

import importlib.util
import json
import multiprocessing
import runpy
import time
from pathlib import Path

import pytest

from akg.db import InMemoryDatabase, SqlDatabase
from akg.graph import GraphBuilder
from akg.graph.subgraph import Subgraph
from akg.target import get_target
from akg.tuner.cost_model import make_cost_model
from akg.tuner.search import make_search
from akg.tuner.tune import TuneLoop, tasks_of

HERE = Path(__file__).parent
TUNER = HERE / "tuner_process.py"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fake = _load("akg_test_fake_measure", HERE / "fake_measure.py")
db_fixtures = _load("akg_test_db_fixtures", HERE.parent / "db" / "conftest.py")


def _matmul(n=32):
    b = GraphBuilder("mm")
    b.output(b.relu(b.matmul(b.input("a", (n, n)), b.input("w", (n, n)))))
    return b.build()


def _open(kind: str, url: str | None):
    return InMemoryDatabase() if kind == "memory" else SqlDatabase(url)


def _loop(db, runner, trials, batch=4, **kw):
    target = get_target("cpu")
    return TuneLoop(tasks_of(_matmul(), target, db), target, db, fake.FakeBuilder(), runner,
                    make_cost_model("random"), make_search("random"), trials=trials, batch=batch, wait_seconds=0.01,
                    **kw)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_two_tuners_in_turns_measure_disjoint_configs_and_reach_the_budget_once(kind, tmp_path, request):
    url = None if kind == "memory" else db_fixtures.fresh_url(kind, tmp_path, request)
    first_db = _open(kind, url)
    second_db = first_db if kind == "memory" else _open(kind, url)
    key, target = Subgraph(_matmul()).workload_key, get_target("cpu").key
    second_runner = fake.FakeRunner()
    second = _loop(second_db, second_runner, 20)
    # The second tuner's first round runs while the first holds its first round's leases: it
    # proposes the same configs (same seed), is refused them and measures others instead.
    first_runner = fake.FakeRunner(before_first=second.step)
    first = _loop(first_db, first_runner, 20)
    assert first.step()
    assert len(first_runner.measured) == len(second_runner.measured) == 4
    assert second.held[id(second.tasks[0])].keys() == set(first_runner.measured)
    while first.step() | second.step():
        pass
    measured = first_runner.measured + second_runner.measured
    assert len(measured) == len(set(measured)) == 20  # disjoint, and the budget once
    assert set(measured) == first_db.measured_configs(key, target) == second_db.measured_configs(key, target)
    assert first.done == second.done == 20 and first.new + second.new == 20
    assert first.result().kernels[0].trials == 20
    assert first.result().kernels[0].new_trials == len(first_runner.measured)  # the other's are not "new"
    assert first_db.tally(target, [key], "anyone")[key].leased == 0  # every lease released
    for db in {id(first_db): first_db, id(second_db): second_db}.values():
        db.close()


def test_a_crashed_tuners_leases_come_back_after_they_expire(tmp_path):
    db = InMemoryDatabase()
    key, target = Subgraph(_matmul()).workload_key, get_target("cpu").key
    crashed = _loop(db, fake.FakeRunner(), 8, lease_seconds=0.3)
    task = crashed.tasks[0]
    got = crashed._claim(task, 4)  # claims a round, then "dies" without measuring it
    assert len(got) == 4
    runner = fake.FakeRunner()
    survivor = _loop(db, runner, 8, lease_seconds=0.3)
    assert survivor.step()  # the budget left besides the crashed tuner's 4 leases
    assert len(runner.measured) == 4 and not set(runner.measured) & {c.to_json() for c in got}
    started = time.monotonic()
    while survivor.step():
        pass
    assert time.monotonic() - started >= 0.2  # it waited for the leases to expire
    assert len(runner.measured) == 8 and db.count(key, target) == 8  # the whole budget, by the survivor
    assert db.tally(target, [key], "anyone")[key].leased == 0
    assert db.claim(key, target, got, "a third tuner", 60) == [c.to_json() for c in got
                                                               if c.to_json() not in runner.measured]


def test_a_tuner_alone_claims_once_a_round_and_leaves_no_lease():
    db = InMemoryDatabase()
    calls = []
    claim, tally = db.claim, db.tally
    db.claim = lambda *a, **k: calls.append("claim") or claim(*a, **k)
    db.tally = lambda *a, **k: calls.append("tally") or tally(*a, **k)
    loop = _loop(db, fake.FakeRunner(), 12)
    steps = 0
    while loop.step():
        steps += 1
    assert steps == 3 and calls == ["tally", "claim"] * 3  # one read and one claim a round
    assert db.tally(get_target("cpu").key, [loop.tasks[0].key], "anyone")[loop.tasks[0].key].leased == 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_tuner_processes_at_once_split_the_work(kind, tmp_path, request):
    """Two `tune()` processes on one model, same seed, started together: each measures what
    the other does not, and together they stop at the budget (give or take the one round
    both may start in the same instant). Each holds its first round before either measures it
    (tuner_process.py), so both take part however the host schedules them."""
    url = db_fixtures.fresh_url(kind, tmp_path, request)
    SqlDatabase(url).close()  # migrated before the race
    trials, batch = 24, 4
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    processes = []
    for worker in range(2):
        params = {"URL": url, "TRIALS": trials, "BATCH": batch, "BARRIER": barrier,
                  "RESULT": str(tmp_path / f"tuner{worker}.json")}
        p = ctx.Process(target=runpy.run_path, args=(str(TUNER),), kwargs={"init_globals": params})
        p.start()
        processes.append(p)
    for p in processes:
        p.join(timeout=240)
    assert [p.exitcode for p in processes] == [0, 0]
    results = [json.loads((tmp_path / f"tuner{w}.json").read_text()) for w in range(2)]
    measured = [c for r in results for c in r["measured"]]
    assert len(measured) == len(set(measured))  # no config measured twice
    assert trials <= len(measured) <= trials + batch
    assert all(r["measured"] for r in results)  # both did part of the work
    with SqlDatabase(url) as db:
        key, target = Subgraph(_matmul()).workload_key, get_target("cpu").key
        assert db.measured_configs(key, target) == set(measured)
        assert db.tally(target, [key], "anyone")[key].leased == 0
        assert [m.name for m in db.models()] == ["mm"]


def test_the_leases_of_an_ended_tuner_of_this_host_go_at_once():
    # `akg tune` killed with SIGKILL releases nothing; run again, it must not wait out the
    # dead tuner's leases (300 s by default) before measuring what they hold
    import socket
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    db = InMemoryDatabase()
    key, target = Subgraph(_matmul()).workload_key, get_target("cpu").key
    crashed = _loop(db, fake.FakeRunner(), 8, owner=f"{socket.gethostname()}:{dead.pid}:0123abcd")
    got = crashed._claim(crashed.tasks[0], 4)
    assert len(got) == 4 and db.tally(target, [key], "anyone")[key].leased == 4
    runner = fake.FakeRunner()
    survivor = _loop(db, runner, 8)  # without the release it waits out the leases (300 s)
    started = time.monotonic()
    while survivor.step():
        pass
    assert time.monotonic() - started < 30
    assert len(runner.measured) == 8 and db.count(key, target) == 8
    assert db.tally(target, [key], "anyone")[key].leased == 0
