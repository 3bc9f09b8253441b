"""akg.tune: determinism with a fixed seed and the random model, resume from the database
(also after SIGKILL), budgets, task scheduling; and the cost model, search and features."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import akg
from akg.db import InMemoryDatabase, open_database
from akg.errors import MissingRuleError
from akg.graph import GraphBuilder
from akg.graph.subgraph import Subgraph
from akg.schedules.space import Config
from akg.target import get_target
from akg.tuner.builder import InProcessBuilder
from akg.tuner.cost_model import COST_MODELS, CostModel, RandomModel, XgbCostModel, make_cost_model
from akg.tuner.features import FEATURE_NAMES
from akg.tuner.runner import InProcessRunner
from akg.tuner.scheduler import TaskScheduler
from akg.tuner.search import SEARCH_STRATEGIES, EvolutionarySearch, SearchStrategy, make_search
from akg.tuner.task import Trial, TuningTask
from akg.tuner.tune import TuneLoop, tasks_of, tune


def _matmul(n=64, name="mm"):
    b = GraphBuilder(name)
    b.output(b.relu(b.matmul(b.input("a", (n, n)), b.input("w", (n, n)))))
    return b.build()


def _tune(graph, db, trials, tmp_path, **kw):
    return tune(graph, trials=trials, db=db, builder=InProcessBuilder(str(tmp_path)), runner=InProcessRunner(),
                batch=4, **kw)


def test_fixed_seed_and_random_model_is_deterministic(tmp_path):
    runs = []
    for _ in range(2):
        db = InMemoryDatabase()
        _tune(_matmul(), db, 8, tmp_path, cost_model="random", seed=7)
        runs.append([r.config for r in db.history(Subgraph(_matmul()).workload_key, get_target("cpu").key)])
    assert runs[0] == runs[1] and len(runs[0]) == 8
    db = InMemoryDatabase()
    _tune(_matmul(), db, 8, tmp_path, cost_model="random", seed=8)
    assert [r.config for r in db.history(Subgraph(_matmul()).workload_key, get_target("cpu").key)] != runs[0]


def test_second_run_with_a_warm_database_measures_nothing(tmp_path):
    db = InMemoryDatabase()
    first = _tune(_matmul(), db, 8, tmp_path)
    assert first.new_measurements == 8 and first.kernels[0].best_cost > 0
    again = _tune(_matmul(), db, 8, tmp_path)
    assert again.new_measurements == 0
    more = _tune(_matmul(), db, 12, tmp_path)
    assert more.new_measurements == 4
    configs = [r.config for r in db.history(Subgraph(_matmul()).workload_key, get_target("cpu").key)]
    assert len(configs) == len(set(configs)) == 12  # nothing measured twice


def test_tuned_config_is_used_by_build(tmp_path):
    db = InMemoryDatabase()
    result = _tune(_matmul(), db, 6, tmp_path)
    kernel = akg.build(_matmul(), db=db)
    assert kernel.config == result.kernels[0].chosen_config  # the final comparison's winner
    assert kernel.config_source.startswith(("tuned (", "tuned, runner-up (", "default (kept", "default (the tuned"))
    assert akg.build(_matmul(n=32), db=db).config_source == "default"


KILL_SCRIPT = textwrap.dedent("""
    import sys
    from akg.graph import GraphBuilder
    from akg.tuner.builder import InProcessBuilder
    from akg.tuner.runner import InProcessRunner
    from akg.tuner.tune import tune

    if __name__ == "__main__":
        b = GraphBuilder("mm")
        b.output(b.relu(b.matmul(b.input("a", (64, 64)), b.input("w", (64, 64)))))
        def progress(done, total, task, results):
            print("MEASURED", done, flush=True)
        tune(b.build(), trials=int(sys.argv[2]), db=sys.argv[1], builder=InProcessBuilder(),
             runner=InProcessRunner(), batch=2, progress=progress)
""")


def test_sigkill_mid_run_loses_no_committed_record_and_resumes(tmp_path):
    script = tmp_path / "tune_job.py"
    script.write_text(KILL_SCRIPT)
    url = str(tmp_path / "tuning.db")
    proc = subprocess.Popen([sys.executable, str(script), url, "40"], stdout=subprocess.PIPE, text=True)
    seen = 0
    deadline = time.time() + 240
    while seen < 4 and time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith("MEASURED"):
            seen = int(line.split()[1])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert seen >= 4
    db = open_database(url)
    key = Subgraph(_matmul()).workload_key
    kept = db.count(key, get_target("cpu").key)
    assert kept >= seen  # every record reported as measured was committed
    resumed = tune(_matmul(), trials=kept + 2, db=db, builder=InProcessBuilder(str(tmp_path)),
                   runner=InProcessRunner(), batch=2)
    assert resumed.new_measurements == 2 and db.count(key, get_target("cpu").key) == kept + 2


def test_task_scheduler_spends_where_latency_is():
    target = get_target("cpu")
    small = TuningTask(Subgraph(_matmul(16, "small")), target, occurrences=1)
    big = TuningTask(Subgraph(_matmul(64, "big")), target, occurrences=3)
    small.trials.append(Trial(Config(), "ok", 1e-6))
    big.trials.append(Trial(Config(), "ok", 1e-4))
    scheduler = TaskScheduler([small, big])
    assert scheduler.next() is big
    fresh = TuningTask(Subgraph(_matmul(32, "fresh")), target)
    assert TaskScheduler([small, big, fresh]).next() is fresh  # every kernel gets a first round


def test_xgb_model_learns_a_ranking():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, len(FEATURE_NAMES))).astype(np.float32)
    cost = np.exp(x[:, 0])  # faster when feature 0 is small
    model = XgbCostModel(seed=0)
    assert not model.informative
    model.update(list(x), list(cost), ["w"] * 64)
    assert model.informative
    test = rng.standard_normal((32, len(FEATURE_NAMES))).astype(np.float32)
    scores = model.predict(list(test))
    assert np.corrcoef(scores, -test[:, 0])[0, 1] > 0.7


def test_random_model_is_seeded():
    a, b = RandomModel(3).predict([None] * 5), RandomModel(3).predict([None] * 5)
    assert np.array_equal(a, b)


def test_evolutionary_search_proposes_fresh_legal_configs():
    task = TuningTask(Subgraph(_matmul()), get_target("cpu"))
    model = XgbCostModel()
    first = EvolutionarySearch().propose(task, model, 6)
    assert len(first) == 6 and len({c.to_json() for c in first}) == 6
    assert all(task.space(c.fusion).is_legal(c) for c in first)
    for c in first:
        task.trials.append(Trial(c, "ok", 1e-4 * (1 + len(task.trials))))
        task.measured.add(c.to_json())
    model.update([task.features(c) for c in first] * 2, [t.cost for t in task.trials] * 2, [task.key] * 12)
    second = EvolutionarySearch().propose(task, model, 6)
    assert not {c.to_json() for c in second} & task.measured and len(second) == 6


def test_the_first_batch_measures_the_default_then_the_recipes_alternatives():
    # a 1x1 conv over few channels with rows of 1.5 vectors: the CPU default takes half
    # vectors, its alternative whole ones; both go into the first batch, before random walks
    lanes = get_target("cpu").vector_lanes("float32")
    if lanes < 16:
        pytest.skip("half vectors are chosen on 16-lane (AVX-512) targets")
    b = GraphBuilder("pw")
    w = b.const(np.random.default_rng(0).standard_normal((64, 16, 1, 1)).astype(np.float32), name="w")
    b.output(b.relu(b.conv2d(b.input("x", (1, 16, 24, 24)), w)))
    task = TuningTask(Subgraph(b.build()), get_target("cpu"))
    (alternative,) = task.alternative_configs()
    assert alternative != task.default_config()
    first = [c.to_json() for c in EvolutionarySearch().propose(task, RandomModel(0), 8)]
    primary = task.default_config()
    defaults = [task.default_config(f).to_json() for f in task.fusions()]
    alternatives = [c.to_json() for f in task.fusions() for c in task.alternative_configs(f)]
    assert alternative.to_json() in alternatives
    # akg compile's config and the alternatives to it first, then the other fusions' defaults
    assert first[:2] == [primary.to_json(), alternative.to_json()]
    assert sorted(first[:len(defaults) + len(alternatives)]) == sorted(set(defaults + alternatives))
    # a first batch too small for them all: the next batch starts with those left out
    task = TuningTask(Subgraph(b.build()), get_target("cpu"))
    model = XgbCostModel()
    for c in EvolutionarySearch().propose(task, model, 1):
        task.trials.append(Trial(c, "ok", 1e-4 * (1 + len(task.trials))))
        task.measured.add(c.to_json())
    following = [c.to_json() for c in EvolutionarySearch().propose(task, model, 4)]
    assert following[0] == alternative.to_json() and set(defaults) - {primary.to_json()} <= set(following)


def test_features_are_finite_and_named():
    task = TuningTask(Subgraph(_matmul()), get_target("cpu"))
    f = task.features(task.default_config())
    assert f.shape == (len(FEATURE_NAMES),) and np.isfinite(f).all()
    named = dict(zip(FEATURE_NAMES, f))
    assert named["vector_frac"] > 0.9 and named["reduction_frac"] > 0.5


def test_cli_tune_and_db_commands(tmp_path, capsys):
    from akg.cli import main
    from akg.graph.io import save_mir

    save_mir(_matmul(), tmp_path / "mm.mir")
    db = str(tmp_path / "t.db")
    assert main(["tune", str(tmp_path / "mm.mir"), "--trials", "4", "--batch", "4", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "4 new measurements" in out
    assert main(["db", "ls", "--db", db]) == 0
    listed = capsys.readouterr().out
    assert "mm" in listed and "compile uses" in listed and ("confirmed" in listed or "default (kept" in listed)
    (workload,) = open_database(db).workloads()
    assert main(["db", "best", workload.key[:12], "--db", db]) == 0
    shown = capsys.readouterr().out
    choice = open_database(db).choice(workload.key, get_target("cpu").key)
    assert "compile uses" in shown and "cheapest record" in shown
    assert shown.strip().splitlines()[-1] == (choice.config if choice.config is not None else "default")
    assert main(["db", "export", str(tmp_path / "r.jsonl"), "--db", db]) == 0
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert sum('"kind":"record"' in line.replace(" ", "") for line in lines) == 4
    assert main(["db", "import", str(tmp_path / "r.jsonl"), "--db", str(tmp_path / "other.db")]) == 0
    assert "imported 4 new records" in capsys.readouterr().out
    assert main(["compile", str(tmp_path / "mm.mir"), "--db", db]) == 0
    compiled = capsys.readouterr().out
    assert "confirmed" in compiled or "default (kept" in compiled  # the final comparison's choice


def test_tuning_leaves_no_temporary_directories(tmp_path, monkeypatch):
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    builder = InProcessBuilder()
    tune(_matmul(16), trials=2, db=InMemoryDatabase(), builder=builder, runner=InProcessRunner(), batch=2)
    assert [p.name for p in scratch.iterdir()] == [os.path.basename(builder.directory)]  # the caller's
    builder.close()
    assert list(scratch.iterdir()) == []  # the tuning workdir went at the end, the builder's with close()


class _RecordingBuilder(InProcessBuilder):
    """Builds in this process and keeps what it was given."""

    def __init__(self):
        super().__init__()
        self.given = []

    def build(self, graph, target, candidates):
        self.given.append(list(candidates))
        return super().build(graph, target, candidates)


def test_tune_loop_steps_round_by_round_and_records_each_measurement():
    target = get_target("cpu")
    db = InMemoryDatabase()
    tasks = tasks_of(_matmul(), target, db)
    builder = _RecordingBuilder()
    rounds = []
    loop = TuneLoop(tasks, target, db, builder, InProcessRunner(), make_cost_model("xgb"), make_search("evolutionary"),
                    trials=20, batch=8, progress=lambda done, total, task, results: rounds.append((done, len(results))))
    try:
        steps = 0
        while loop.step():
            steps += 1
            assert db.count(tasks[0].key, target.key) == loop.done  # in the database as soon as measured
    finally:
        builder.close()
    assert steps == 3 and rounds == [(8, 8), (16, 8), (20, 4)] and loop.new == 20
    assert not loop.step()  # the budget is spent
    records = db.history(tasks[0].key, target.key)
    assert len(records) == 20 and all(str(r.unit) == target.cost_unit for r in records)
    # from the second round on the model ranks candidates; those it ranked reach the builder lowered
    assert all(c.lowered is None for c in builder.given[0])
    assert any(c.lowered is not None for c in builder.given[1] + builder.given[2])
    result = loop.result()
    assert result.new_measurements == 20 and result.kernels[0].trials == 20 and len(result.curve) == 3


def test_registries_are_keyed_by_name_and_make_turns_names_into_objects():
    assert set(COST_MODELS) == {"xgb", "random"} and set(SEARCH_STRATEGIES) == {"evolutionary", "random"}
    for registry, base in ((COST_MODELS, CostModel), (SEARCH_STRATEGIES, SearchStrategy)):
        for name, cls in registry.items():
            assert cls.name == name and issubclass(cls, base)
    assert isinstance(make_cost_model("random", seed=3), RandomModel)
    assert isinstance(make_search("evolutionary"), EvolutionarySearch)
    model = XgbCostModel()
    assert make_cost_model(model) is model
    with pytest.raises(MissingRuleError, match="known: evolutionary, random"):
        make_search("annealing")


def test_tune_registers_the_model_and_its_kernels(tmp_path):
    from akg.graph.io import save_mir

    db = InMemoryDatabase()
    _tune(_matmul(name="mlp"), db, 2, tmp_path, confirm=False)
    save_mir(_matmul(32, name="inner"), tmp_path / "net.mir")
    _tune(str(tmp_path / "net.mir"), db, 2, tmp_path, confirm=False)
    assert [(m.name, m.target_key, m.kernels) for m in db.models()] == [
        ("mlp", get_target("cpu").key, ((Subgraph(_matmul()).workload_key, 1),)),
        ("net", get_target("cpu").key, ((Subgraph(_matmul(32)).workload_key, 1),))]
