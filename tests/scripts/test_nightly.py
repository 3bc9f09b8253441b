"""The nightly job (scripts/nightly.py): a planted regression in the baseline is flagged and the
script exits 1 with the offender listed; no regression, a kernel new since the baseline and a
missing baseline (the first night) exit 0; the zoo file and the sample workflow are consistent
with the script. Re-timing is faked (planted times per config) except in one end-to-end test
that tunes and re-times a tiny model for real."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from akg.db import Record, open_database
from akg.db.record import Status
from akg.schedules.space import Config
from akg.target import get_target
from akg.tuner.builder.builder import BuildResult
from akg.tuner.runner import CompareResult
from akg.tuner.runner.runner import done

ROOT = Path(__file__).resolve().parents[2]
TINY = """graph @tiny(%x: f32[8,16], %w: f32[16,8]) {
  %0 = matmul(%x, %w) : f32[8,8]
  %1 = relu(%0) : f32[8,8]
  %2 = sum(%1) {axes=[1]} : f32[8]
  return %1, %2
}
"""


@pytest.fixture(scope="module")
def nightly():
    """scripts/nightly.py as a module (registered in sys.modules: its dataclasses need that)."""
    spec = importlib.util.spec_from_file_location("scripts_nightly", ROOT / "scripts" / "nightly.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class PlantedBuilder:
    """Builds nothing: every config is a successful build without an artifact."""

    def build(self, graph, target, candidates):
        return [BuildResult(c if isinstance(c, Config) else c.config) for c in candidates]

    def close(self):
        pass


class PlantedRunner:
    """`compare` returns planted times per config JSON (`default` for the others) and
    remembers what it was asked to compare."""

    def __init__(self, times: dict[str, float] | None = None, default: float = 1e-5):
        self.times, self.default, self.calls = times or {}, default, []

    def compare(self, task, builds, rounds=7):
        self.calls.append([b.config.to_json() for b in builds])
        times = [self.times.get(b.config.to_json(), self.default) for b in builds]
        return done(CompareResult([Status.OK] * len(builds), [[t] * rounds for t in times], task.unit))

    def close(self):
        pass


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, nightly):
    """A tiny model of two kernels, its zoo file, and two configs of each kernel: A (the
    default config) and B (the same with other fusion)."""
    from akg.api import load
    from akg.tuner.task import TuningTask
    from akg.tuner.tune import kernels_of

    folder = tmp_path_factory.mktemp("zoo")
    (folder / "tiny.mir").write_text(TINY)
    zoo = folder / "zoo.toml"
    zoo.write_text(f'target = "cpu"\nthreshold = 0.05\nrounds = 2\n\n[[model]]\nname = "tiny"\n'
                   f'path = "{folder / "tiny.mir"}"\ntrials = 2\n')
    target = get_target("cpu")
    kernels = kernels_of(load(folder / "tiny.mir"), target)
    assert len(kernels) == 2
    configs = {}
    for k in kernels:
        a = TuningTask(k, target).default_config()
        b = Config.from_json(json.dumps({**json.loads(a.to_json()), "fusion": "max" if a.fusion != "max" else "smart"}))
        configs[k.name] = (k.workload_key, a, b)
    return {"zoo": zoo, "target": target, "kernels": kernels, "configs": configs}


def seeded_db(path: Path, tiny, cost_a: float = 1e-5, cost_b: float | None = None):
    """An SQLite database in which each kernel's best is config A (and B, when given)."""
    from akg.db import TargetInfo, Workload

    db = open_database(path)
    db.register_target(TargetInfo.of(tiny["target"]))
    for k in tiny["kernels"]:
        db.register_workload(Workload.of(k))
        key, a, b = tiny["configs"][k.name]
        db.add(Record(key, tiny["target"].key, a, "ok", cost_a))
        if cost_b is not None:
            db.add(Record(key, tiny["target"].key, b, "ok", cost_b))
    return db


def night(nightly, tiny, db: Path, out: Path, *extra: str, runner=None) -> int:
    return nightly.main(["--zoo", str(tiny["zoo"]), "--db", str(db), "--out", str(out), "--no-tune", *extra],
                        builder=PlantedBuilder(), runner=runner or PlantedRunner())


def verdicts(out: Path) -> dict[tuple[str, str], str]:
    report = json.loads((out / "report.json").read_text())
    return {(c["kind"], c["name"]): c["verdict"] for c in report["changes"]}


def first_night(nightly, tiny, tmp_path) -> Path:
    seeded_db(tmp_path / "t.db", tiny).close()
    assert night(nightly, tiny, tmp_path / "t.db", tmp_path / "n1", "--baseline", str(tmp_path / "none")) == 0
    return tmp_path / "n1" / "records.jsonl"


def test_first_night_without_a_baseline_is_all_new_and_exits_0(nightly, tiny, tmp_path, capsys):
    seeded_db(tmp_path / "t.db", tiny, cost_b=2e-5).close()  # B: measured before tonight, not the choice
    code = night(nightly, tiny, tmp_path / "t.db", tmp_path / "n1")  # nothing beside n1 either
    out = capsys.readouterr().out
    assert code == 0
    assert "no baseline" in out and "first night" in out
    found = verdicts(tmp_path / "n1")
    assert set(found.values()) == {"new"} and ("model", "tiny") in found and len(found) == 3
    for name in ("report.html", "report.json", "records.jsonl", "summary.txt"):
        assert (tmp_path / "n1" / name).stat().st_size > 0
    # the night's export: nothing measured tonight (--no-tune), but what makes each kernel's
    # choice (config A), so that it is tomorrow's baseline; not the older records of B
    lines = [json.loads(line) for line in (tmp_path / "n1" / "records.jsonl").read_text().splitlines()]
    exported = {(r["workload"], json.dumps(r["config"], sort_keys=True, separators=(",", ":")))
                for r in lines if r["kind"] == "record"}
    assert exported == {(key, a.to_json()) for key, a, _ in tiny["configs"].values()}
    assert sum(r["kind"] == "workload" for r in lines) == 2


def test_ctrl_c_while_re_timing_keeps_the_night_s_records_and_exits_130(nightly, tiny, tmp_path, capsys):
    seeded_db(tmp_path / "t.db", tiny).close()

    class Interrupted(PlantedRunner):
        def compare(self, task, builds, rounds=7):
            raise KeyboardInterrupt

    assert night(nightly, tiny, tmp_path / "t.db", tmp_path / "n1", runner=Interrupted()) == 130
    assert "interrupted" in capsys.readouterr().out
    assert (tmp_path / "n1" / "records.jsonl").read_text().count('"kind":"record"') == 2


def test_no_regression_exits_0(nightly, tiny, tmp_path, capsys):
    baseline = first_night(nightly, tiny, tmp_path)
    runner = PlantedRunner()
    assert night(nightly, tiny, tmp_path / "t.db", tmp_path / "n2", "--baseline", str(baseline), runner=runner) == 0
    assert set(verdicts(tmp_path / "n2").values()) == {"same"}
    assert all(len(call) == 1 for call in runner.calls)  # same config as the baseline: timed once
    assert "no regressions" in capsys.readouterr().out


def test_a_planted_regression_in_the_baseline_is_flagged_and_exits_1(nightly, tiny, tmp_path, capsys):
    baseline = first_night(nightly, tiny, tmp_path)
    key, a, b = tiny["configs"]["tiny.k0_matmul_relu"]
    # plant: the baseline's best for the first kernel was config B, which runs faster tonight
    planted = Record(key, tiny["target"].key, b, "ok", 0.5e-5)
    line = {"kind": "record", "workload": key, "target": tiny["target"].key, "config": json.loads(b.to_json()),
            "status": "ok", "cost": planted.cost, "unit": "s", "error": "", "host": "h", "akg_version": "0",
            "tvm_version": "0", "timestamp": planted.timestamp.isoformat()}
    with baseline.open("a") as f:
        f.write(json.dumps(line) + "\n")
    runner = PlantedRunner({a.to_json(): 1.5e-5, b.to_json(): 1.0e-5})
    capsys.readouterr()
    code = night(nightly, tiny, tmp_path / "t.db", tmp_path / "n2", "--baseline", str(baseline), runner=runner)
    out = capsys.readouterr().out
    assert code == nightly.EXIT_REGRESSION == 1
    assert [a.to_json(), b.to_json()] in runner.calls  # tonight's best against the baseline's, in one comparison
    found = verdicts(tmp_path / "n2")
    assert found[("kernel", "tiny.k0_matmul_relu")] == "regression"
    assert found[("kernel", "tiny.k1_sum")] == "same"
    assert found[("model", "tiny")] == "regression"  # (1.5 + 1) vs (1 + 1): 25% slower
    assert re.search(r"kernel tiny\.k0_matmul_relu \(model tiny\): 10 us -> 15 us \(1\.50x\)", out)
    assert "model tiny: 20 us -> 25 us (1.25x)" in out
    summary = (tmp_path / "n2" / "summary.txt").read_text()
    assert "REGRESSIONS (2)" in summary and "tiny.k0_matmul_relu" in summary
    assert json.loads((tmp_path / "n2" / "report.json").read_text())["nightly"]["exit_code"] == 1


def test_a_slowdown_within_the_threshold_and_an_improvement_exit_0(nightly, tiny, tmp_path):
    baseline = first_night(nightly, tiny, tmp_path)
    key, a, b = tiny["configs"]["tiny.k0_matmul_relu"]
    k1, a1, b1 = tiny["configs"]["tiny.k1_sum"]
    with open_database(tmp_path / "t.db") as db:  # tonight's tuning found B for both kernels
        db.add(Record(key, tiny["target"].key, b, "ok", 0.5e-5))
        db.add(Record(k1, tiny["target"].key, b1, "ok", 0.5e-5))
    runner = PlantedRunner({a.to_json(): 1.0e-5, b.to_json(): 1.04e-5, a1.to_json(): 1.0e-5, b1.to_json(): 0.5e-5})
    assert night(nightly, tiny, tmp_path / "t.db", tmp_path / "n2", "--baseline", str(baseline), runner=runner) == 0
    found = verdicts(tmp_path / "n2")
    assert found[("kernel", "tiny.k0_matmul_relu")] == "same"  # 4% slower, threshold 5%
    assert found[("kernel", "tiny.k1_sum")] == "improvement"
    # a lower threshold on the command line makes the 4% a regression
    assert night(nightly, tiny, tmp_path / "t.db", tmp_path / "n3", "--baseline", str(baseline),
                 "--threshold", "0.02", runner=runner) == 1


def test_a_kernel_new_since_the_baseline_is_not_a_failure(nightly, tiny, tmp_path):
    baseline = first_night(nightly, tiny, tmp_path)
    key, a, b = tiny["configs"]["tiny.k1_sum"]
    kept = [line for line in baseline.read_text().splitlines() if key not in line]
    baseline.write_text("\n".join(kept) + "\n")
    runner = PlantedRunner({a.to_json(): 9e-5})  # slow, but nothing to compare it with
    assert night(nightly, tiny, tmp_path / "t.db", tmp_path / "n2", "--baseline", str(baseline), runner=runner) == 0
    found = verdicts(tmp_path / "n2")
    assert found[("kernel", "tiny.k1_sum")] == "new" and found[("kernel", "tiny.k0_matmul_relu")] == "same"
    assert found[("model", "tiny")] == "same"  # over the kernels the baseline has


def test_the_newest_night_in_the_artifacts_folder_is_the_default_baseline(nightly, tiny, tmp_path, capsys):
    seeded_db(tmp_path / "t.db", tiny).close()
    assert night(nightly, tiny, tmp_path / "t.db", tmp_path / "arts" / "2025-01-01") == 0
    capsys.readouterr()
    assert night(nightly, tiny, tmp_path / "t.db", tmp_path / "arts" / "2025-01-02") == 0
    assert f"baseline: {tmp_path / 'arts' / '2025-01-01' / 'records.jsonl'}" in capsys.readouterr().out
    assert set(verdicts(tmp_path / "arts" / "2025-01-02").values()) == {"same"}


def test_a_kernel_whose_best_no_longer_runs_is_a_regression(nightly, tiny, tmp_path, capsys):
    baseline = first_night(nightly, tiny, tmp_path)

    class Broken(PlantedRunner):
        def compare(self, task, builds, rounds=7):
            return done(CompareResult.failed(len(builds), task.unit, "RuntimeError: worker died"))

    capsys.readouterr()
    assert night(nightly, tiny, tmp_path / "t.db", tmp_path / "n2", "--baseline", str(baseline),
                 runner=Broken()) == 1
    assert "worker died" in capsys.readouterr().out


@pytest.mark.parametrize("text, message", [
    ("[[model]]\npath = 'nowhere.mir'\n", "does not exist"),
    ("threshold = -1\n[[model]]\npath = 'examples/mlp.mir'\n", "threshold"),
    ("colour = 1\n[[model]]\npath = 'examples/mlp.mir'\n", "unknown settings"),
    ("target = 'cpu'\n", "no [[model]]"),
    ("[[model]]\npath = 'examples/mlp.mir'\ntrials = -3\n", "trials"),
    ("[[model\n", "zoo.toml"),
])
def test_a_bad_zoo_is_an_input_error(nightly, tmp_path, capsys, text, message):
    (tmp_path / "zoo.toml").write_text(text)
    assert nightly.main(["--zoo", str(tmp_path / "zoo.toml"), "--out", str(tmp_path / "out")]) == 3
    assert message in capsys.readouterr().err


def test_the_zoo_names_the_examples_and_the_corpus_models(nightly, monkeypatch, corpus):
    monkeypatch.setenv("AKG_CORPUS", str(corpus))
    zoo = nightly.load_zoo(nightly.DEFAULT_ZOO)
    assert {m.path.name for m in zoo.models} == {
        "mlp.mir", "resnet_block.mir", "transformer_block.mir",
        "mlp.mindir", "lenet5.mindir", "resnet_block.mindir", "transformer_layer.mindir"}
    assert all(m.path.is_file() and m.trials > 0 for m in zoo.models)
    assert 0 < zoo.threshold < 1 and zoo.rounds >= 2


def test_farm_flags_reach_tune_and_are_refused_where_tune_lacks_them(nightly, tiny, tmp_path, monkeypatch, capsys):
    import akg.tuner.tune as tuning
    from akg.tuner.tune import TuneResult

    calls = []

    def tune(model, target="cpu", trials=64, db=None, timeout=10.0, rounds=7, progress=None, workers=None,
             scheduler=None):
        calls.append({"model": model.name, "trials": trials, "workers": workers, "scheduler": scheduler})
        return TuneResult([], 0, 0.0)

    seeded_db(tmp_path / "t.db", tiny).close()  # two records held: the night's budget comes on top
    monkeypatch.setattr(tuning, "tune", tune)
    assert nightly.main(["--zoo", str(tiny["zoo"]), "--db", str(tmp_path / "t.db"), "--out", str(tmp_path / "o"),
                         "--scheduler", "tcp://farm:8786"], builder=PlantedBuilder(), runner=PlantedRunner()) == 0
    assert calls == [{"model": "tiny", "trials": 2 + 2, "workers": None, "scheduler": "tcp://farm:8786"}]

    def old_tune(model, target="cpu", trials=64, db=None, timeout=10.0, rounds=7, progress=None):
        raise AssertionError("not to be called")

    monkeypatch.setattr(tuning, "tune", old_tune)
    capsys.readouterr()
    assert nightly.main(["--zoo", str(tiny["zoo"]), "--out", str(tmp_path / "o"), "--workers", "2"]) == 3
    assert "--workers: not available" in capsys.readouterr().err


def test_the_sample_workflow_is_valid_and_uses_existing_flags(nightly):
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text())
    assert "schedule" in workflow[True] and workflow[True]["schedule"][0]["cron"]  # `on:` loads as True
    steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
    runs = " ".join(s.get("run", "") for s in steps)
    assert "pip install -e" in runs
    (night_run,) = [s["run"] for s in steps if "scripts/nightly.py" in s.get("run", "")]
    known = {o for a in nightly.parser()._actions for o in a.option_strings}
    used = set(re.findall(r"(--[a-z][a-z-]*)", night_run.split("scripts/nightly.py", 1)[1]))
    assert {"--baseline", "--out", "--db"} <= used <= known, used - known
    assert any("upload-artifact" in s.get("uses", "") for s in steps)
    assert any("python-version" in s.get("with", {}) for s in steps)


def test_end_to_end_tunes_retimes_and_reports_a_tiny_model(nightly, tiny, tmp_path, capsys):
    """The real path: a night that tunes two trials and re-times with the local builder and
    runner, then a night (re-timing only) against a baseline whose first kernel was planted
    with another config: both configs are built and timed against each other for real."""
    args = ["--zoo", str(tiny["zoo"]), "--db", str(tmp_path / "t.db"), "--threshold", "10", "--rounds", "2"]
    assert nightly.main([*args, "--out", str(tmp_path / "arts" / "n1")]) == 0
    first = json.loads((tmp_path / "arts" / "n1" / "report.json").read_text())
    assert {c["verdict"] for c in first["changes"]} == {"new"}
    assert all(c["after"] > 0 for c in first["changes"])
    baseline = tmp_path / "arts" / "n1" / "records.jsonl"
    records = [json.loads(line) for line in baseline.read_text().splitlines()]
    assert sum(r["kind"] == "record" for r in records) >= 2 and first["nightly"]["exit_code"] == 0
    with open_database(tmp_path / "t.db") as db:
        key, a, b = tiny["configs"]["tiny.k0_matmul_relu"]
        current = db.choice(key, tiny["target"].key)
        other = a if current is not None and current.config == b.to_json() else b
    planted = dict(next(r for r in records if r["kind"] == "record" and r["workload"] == key),
                   config=json.loads(other.to_json()), cost=1e-12)
    kept = [json.dumps(r) for r in records if not (r["kind"] == "verdict" and r["workload"] == key)]
    baseline.write_text("\n".join([*kept, json.dumps(planted)]) + "\n")  # no verdict: the cheapest record counts
    capsys.readouterr()
    assert nightly.main([*args, "--out", str(tmp_path / "arts" / "n2"), "--no-tune"]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[1/2] tiny.k0_matmul_relu")]
    assert "same config" not in line, line
    second = {c["name"]: c for c in json.loads((tmp_path / "arts" / "n2" / "report.json").read_text())["changes"]}
    assert second["tiny.k0_matmul_relu"]["before"] > 0 and second["tiny.k0_matmul_relu"]["after"] > 0
    assert all(c["verdict"] in ("same", "improvement") for c in second.values())
    assert "no regressions" in (tmp_path / "arts" / "n2" / "summary.txt").read_text()
