"""The tuner's guarantees: each kernel's pick is re-timed against its runner-up and the default
config in alternating rounds in one runner process before `akg compile` uses it (a pick that
was fast in isolation but loses that comparison is not used: the winner is), the verdict is
stored and reused, a crash in the comparison is a failed confirmation (never a crashed tuner),
databases without verdicts keep working, and the trial budget reaches every kernel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import akg
from akg.db import Contender, InMemoryDatabase, Record, Status, TargetInfo, Verdict, Workload, open_database
from akg.graph import GraphBuilder
from akg.graph.subgraph import Subgraph
from akg.target import get_target
from akg.tuner.builder import InProcessBuilder
from akg.tuner.runner import CompareResult, InProcessRunner, LocalRunner, TaskData
from akg.tuner.runner.runner import done
from akg.tuner.task import TuningTask
from akg.tuner.tune import candidate, tune

ROOT = Path(__file__).resolve().parents[2]


def _matmul(n=32, name="mm"):
    b = GraphBuilder(name)
    b.output(b.relu(b.matmul(b.input("a", (n, n)), b.input("w", (n, n)))))
    return b.build()


class PlantedRunner(InProcessRunner):
    """Measures in this process, but one planted config looks faster than anything when
    measured alone (1 ns: a fixed figure, so no slow spell of a loaded host can undo it),
    and 10x slower than the slowest contender in the final comparison."""

    def __init__(self, planted: str | None = None):
        super().__init__(min_seconds=0.002, repeats=1)
        self.planted = planted  # config JSON; None: the first config measured that is not the default
        self.default: str | None = None
        self.compared: list[list[str]] = []

    def submit(self, task, builds, best=None):
        out = []
        for b, f in zip(builds, super().submit(task, builds, best)):
            r = f.result()
            key = b.config.to_json()
            if self.planted is None and key != self.default and r.status == Status.OK:
                self.planted = key
            if key == self.planted and r.cost is not None:
                r.cost = 1e-9
            out.append(done(r))
        return out

    def compare(self, task, builds, rounds=7):
        self.compared.append([b.config.to_json() for b in builds])
        result = super().compare(task, builds, rounds).result()
        slowest = max(max(r) for r in result.rounds if r)
        for k, b in enumerate(builds):
            if b.config.to_json() == self.planted:
                result.rounds[k] = [10 * slowest] * len(result.rounds[k])
        return done(result)


def test_a_pick_fast_in_isolation_but_slow_in_the_final_comparison_is_not_compiled(tmp_path):
    graph = _matmul()
    target = get_target("cpu")
    db = InMemoryDatabase()
    runner = PlantedRunner()
    runner.default = TuningTask(Subgraph(graph), target).default_config().to_json()
    result = tune(graph, trials=6, db=db, builder=InProcessBuilder(str(tmp_path)), runner=runner, batch=6,
                  rounds=3)
    (k,) = result.kernels
    assert k.best_config.to_json() == runner.planted  # the tuning's pick: the planted one
    assert len(runner.compared) == 1 and runner.planted in runner.compared[0] and runner.default in runner.compared[0]
    assert len(set(runner.compared[0])) == len(runner.compared[0]) in (2, 3)  # pick, runner-up, default (once)
    verdict = db.verdict(k.workload_key, target.key)
    assert verdict is not None and verdict.config != runner.planted and verdict.role in ("runner-up", "default")
    assert verdict.best_config == runner.planted and all(len(c.rounds) == 3 for c in verdict.contenders)
    assert k.chosen_config.to_json() == verdict.config and k.chosen_config != k.best_config
    kernel = akg.build(graph, db=db)
    assert kernel.config.to_json() != runner.planted and kernel.config == k.chosen_config
    if verdict.uses_default:
        assert kernel.config_source.startswith("default (kept")
    else:
        assert kernel.config_source.startswith("tuned, runner-up")
    # the verdict judged the current pick: a second tune measures nothing and compares nothing
    again = tune(graph, trials=6, db=db, builder=InProcessBuilder(str(tmp_path)), runner=runner, rounds=3)
    assert again.new_measurements == 0 and len(runner.compared) == 1 and len(db.verdicts()) == 1
    assert again.kernels[0].verdict == verdict


class CrashingCompare(InProcessRunner):
    def compare(self, task, builds, rounds=7):
        raise RuntimeError("the comparison blew up")


def test_a_failed_comparison_leaves_the_pick_unconfirmed_and_the_tuner_alive(tmp_path):
    graph = _matmul()
    db = InMemoryDatabase()
    result = tune(graph, trials=3, db=db, builder=InProcessBuilder(str(tmp_path)), runner=CrashingCompare(), batch=3)
    (k,) = result.kernels
    assert k.verdict is None and "final comparison failed" in k.confirmation and "blew up" in k.confirmation
    assert db.verdicts() == [] and k.chosen_config == k.best_config
    assert akg.build(graph, db=db).config_source.endswith("unconfirmed)")
    # the next tune (budget spent) confirms it
    again = tune(graph, trials=3, db=db, builder=InProcessBuilder(str(tmp_path)),
                 runner=InProcessRunner(min_seconds=0.002), rounds=2)
    assert again.new_measurements == 0 and again.kernels[0].verdict is not None and len(db.verdicts()) == 1


def test_the_local_runner_compares_interleaved(tmp_path):
    graph = _matmul(16)
    target = get_target("cpu")
    task = TuningTask(Subgraph(graph), target)
    configs = [task.default_config(f) for f in ("smart", "none")]
    builds = InProcessBuilder(str(tmp_path)).build(graph, target, [candidate(task, c) for c in configs])
    data = TaskData(graph)
    runner = LocalRunner(timeout=20, min_seconds=0.002)
    try:
        result = runner.compare(data, builds, rounds=3).result(timeout=120)
        assert result.ok and result.interleaved and result.statuses == [Status.OK, Status.OK]
        assert [len(r) for r in result.rounds] == [3, 3] and all(c > 0 for c in result.costs)
    finally:
        runner.close()


def test_a_crash_in_the_comparison_worker_is_a_failed_comparison(tmp_path):
    graph = _matmul(16)
    target = get_target("cpu")
    task = TuningTask(Subgraph(graph), target)
    builds = InProcessBuilder(str(tmp_path)).build(graph, target, [candidate(task, task.default_config())])
    runner = LocalRunner(timeout=20, min_seconds=0.002)
    import akg.tuner.runner.local as local

    original = local.compare_request
    local.compare_request = _crash_request
    try:
        result = runner.compare(TaskData(graph), builds, rounds=2).result(timeout=120)
        assert not result.ok and "crashed the runner" in result.error and result.costs == [None]
        again = runner.run(TaskData(graph), builds)  # a fresh worker measures as before
        assert again[0].status == Status.OK
    finally:
        local.compare_request = original
        runner.close()


def _crash_request(*args):
    import os

    os.abort()


def test_simulated_units_compare_once_without_rounds():
    result = CompareResult([Status.OK, Status.OK], [[120.0], [100.0]], "cycles")
    assert result.costs == [120.0, 100.0]


def test_a_database_without_verdicts_chooses_its_cheapest_record(tmp_path):
    graph = _matmul()
    target = get_target("cpu")
    key = Subgraph(graph).workload_key
    db = open_database(str(tmp_path / "old.db"))
    db.register_target(TargetInfo.of(target))
    db.register_workload(Workload.of(Subgraph(graph)))
    tuned = TuningTask(Subgraph(graph), target).default_config("none")
    db.add(Record(key, target.key, tuned, "ok", 1e-6))
    kernel = akg.build(graph, db=db)
    assert kernel.config == tuned and kernel.config_source.startswith("tuned (1.0 us") and "unconfirmed" in \
        kernel.config_source
    # a verdict for the default: compile builds the default from then on, also over newer records
    default = TuningTask(Subgraph(graph), target).default_config()
    db.add_verdict(Verdict(key, target.key, default, "default", tuned, 0.9e-6, "s",
                           (Contender("tuned", tuned, "ok", 1.1e-6, (1.1e-6,)),
                            Contender("default", default, "ok", 0.9e-6, (0.9e-6,), is_default=True))))
    db.add(Record(key, target.key, json.dumps({"fusion": "max"}), "ok", 1e-7))
    kernel = akg.build(graph, db=db)
    assert kernel.config == default and kernel.config_source.startswith("default (kept: 0.9 us")


class SkippingBuilder(InProcessBuilder):
    """Builds nothing (every candidate a build_error): the budget's spread, fast."""

    def build(self, graph, target, candidates):
        from akg.tuner.builder import BuildResult, as_build_input

        return [BuildResult(as_build_input(c).config, None, Status.BUILD_ERROR, "skipped") for c in candidates]


@pytest.mark.parametrize("trials", [32, 3])
def test_the_budget_reaches_every_kernel_of_the_mlp(tmp_path, trials):
    """`akg tune examples/mlp.mir --trials 32` with the default batch of 16 tuned 2 of its 4
    kernels; the batch shrinks to fit: 8 each. A budget below the number of kernels gives
    one trial to as many as it reaches, and the result says which got none."""
    result = tune(ROOT / "examples" / "mlp.mir", trials=trials, db=InMemoryDatabase(),
                  builder=SkippingBuilder(str(tmp_path)), runner=InProcessRunner(), cost_model="random",
                  search="random", batch=16)
    counts = [k.trials for k in result.kernels]
    assert len(counts) == 4 and sum(counts) == trials and counts == [k.new_trials for k in result.kernels]
    if trials == 32:
        assert counts == [8, 8, 8, 8] and result.untuned == []
    else:
        assert counts == [1, 1, 1, 0] and result.untuned == [result.kernels[3].name]


def test_the_cli_summary_says_what_compile_uses(tmp_path, capsys):
    from akg.cli import main
    from akg.graph.io import save_mir

    save_mir(_matmul(16), tmp_path / "mm.mir")
    db = str(tmp_path / "t.db")
    assert main(["tune", str(tmp_path / "mm.mir"), "--trials", "3", "--batch", "3", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "compile uses" in out and "final comparison" in out
    (verdict,) = open_database(db).verdicts()
    assert main(["compile", str(tmp_path / "mm.mir"), "--db", db]) == 0
    compiled = capsys.readouterr().out
    assert ("confirmed" in compiled) != ("default (kept" in compiled)
    assert ("default (kept" in compiled) == (verdict.uses_default and verdict.role != "tuned")


class _Task:
    key = "workload"


@pytest.mark.parametrize("tuned_cost, unit, winner", [
    (0.99e-6, "s", "default"),     # 1% faster: within the noise margin, the default stays
    (0.95e-6, "s", "tuned"),       # 5% faster: beyond it, the tuned config wins
    (0.99e6, "cycles", "tuned"),   # simulated cycles are exact: any gain counts
])
def test_a_tuned_config_must_beat_the_default_beyond_the_noise_margin(tuned_cost, unit, winner):
    from akg.schedules.space import Config
    from akg.tuner.tune import NOISE_MARGIN, _verdict

    assert 0.01 < NOISE_MARGIN < 0.05
    default, tuned = Config("smart", ()), Config("none", ())
    target = type("T", (), {"key": "t", "cost_unit": unit})()
    base = 1e-6 if unit == "s" else 1e6
    result = CompareResult([Status.OK, Status.OK], [[tuned_cost] * 3, [base] * 3], unit)
    verdict = _verdict(_Task(), target, tuned, [("tuned", tuned, False), ("default", default, True)], result)
    assert verdict.role == winner and verdict.uses_default == (winner == "default")


def test_the_final_comparison_reads_large_weights_from_memory(tmp_path, monkeypatch):
    # a matmul whose second operand (a weight, 1.6 MB) would come from memory in a model: the
    # final comparison times each call on another copy of it, enough copies to overflow the
    # last-level cache; a small one (16 KB) is timed as it is, in cache
    from akg.tuner.runner import evaluate

    used = []
    rotating = evaluate._time_rotating
    monkeypatch.setattr(evaluate, "_time_rotating",
                        lambda kernel, copies, number: used.append(len(copies)) or rotating(kernel, copies, number))
    target = get_target("cpu")
    for n, cold in ((640, True), (64, False)):
        graph = _matmul(n)
        task = TuningTask(Subgraph(graph), target)
        builds = InProcessBuilder(str(tmp_path)).build(graph, target, [candidate(task, task.default_config("smart"))])
        used.clear()
        result = InProcessRunner(min_seconds=0.002).compare(TaskData(graph), builds, rounds=2).result()
        assert result.statuses == [Status.OK] and all(c > 0 for c in result.costs)
        assert bool(used) == cold
        if cold:
            copies = used[0]
            assert copies * 640 * 640 * 4 >= evaluate.ROTATE_BYTES or copies == evaluate.MAX_COPIES
