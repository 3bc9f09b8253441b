"""akg.report.compare: reading a baseline export and judging each kernel and model against it
(regression, improvement, same, new, missing) with a noise threshold."""

import json
from datetime import datetime, timezone

import pytest

from akg.db import InMemoryDatabase, Record, TargetInfo, Workload
from akg.errors import DatabaseError
from akg.report import Baseline, Change, collect, compare, load_baseline
from akg.report.compare import BaselineKernel, judge

CPU = "cpu-test-256b-2c"
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


def _db(costs: dict[str, list]) -> InMemoryDatabase:
    db = InMemoryDatabase()
    db.register_target(TargetInfo(CPU))
    for key, values in costs.items():
        db.register_workload(Workload(key, f"name_{key}"))
        db.add_many([Record(key, CPU, {"n": i}, "ok" if c is not None else "build_error", c)
                     for i, c in enumerate(values)])
    return db


def test_load_baseline_keeps_the_best_ok_cost_and_the_models(tmp_path):
    db = _db({"a": [3.0, 1.0, None, 2.0], "b": [None], "c": [5.0]})
    path = tmp_path / "base.jsonl"
    db.export_jsonl(path)
    with path.open("a") as f:  # a model line, as an export with the model registry carries it
        f.write(json.dumps({"kind": "model", "name": "net", "target": CPU, "kernels": [["a", 2], ["c", 1]],
                            "updated_at": T0.isoformat()}) + "\n")
    base = load_baseline(path)
    assert base.source == str(path)
    assert base.kernels[("a", CPU)] == BaselineKernel("a", CPU, "name_a", 1.0, "s")
    assert base.best("b", CPU) is None and ("b", CPU) in base.kernels  # measured, never ok
    assert base.best("zzz", CPU) is None
    assert base.models[("net", CPU)].kernels == (("a", 2), ("c", 1))
    assert base.model_cost((("a", 2), ("c", 1)), CPU) == 7.0
    assert base.model_cost((("a", 2), ("b", 1)), CPU) is None


@pytest.mark.parametrize("text, message", [
    ('{"kind":"header","format":"akg-tuning-records","version":2}\n{"kind":"record"\n', "base.jsonl:2: not JSON"),
    ('{"kind":"record","workload":"a","target":"t","config":{},"status":"ok","cost":1,"timestamp":"2025-01-01T00:00:00"}\n',
     "base.jsonl:1: not an akg tuning export"),
    ('{"kind":"header","format":"akg-tuning-records","version":2}\n', "holds no records"),
    ('{"kind":"header","format":"something-else","version":1}\n', "base.jsonl:1: not an akg tuning export"),
])
def test_a_malformed_baseline_is_a_database_error_naming_the_line(tmp_path, text, message):
    path = tmp_path / "base.jsonl"
    path.write_text(text)
    with pytest.raises(DatabaseError, match=message):
        load_baseline(path)


def test_a_missing_baseline_file_is_a_database_error(tmp_path):
    with pytest.raises(DatabaseError, match="cannot read the baseline"):
        load_baseline(tmp_path / "nothere.jsonl")


@pytest.mark.parametrize("before, after, verdict", [
    (1.0, 1.05, "same"),  # exactly at the threshold: noise
    (1.0, 1.0501, "regression"),
    (1.05, 1.0, "same"),
    (1.0501, 1.0, "improvement"),
    (None, 1.0, "new"),
    (1.0, None, "missing"),
])
def test_judge_at_the_threshold(before, after, verdict):
    assert judge(before, after, 0.05) == verdict


def test_compare_flags_each_kernel_and_model_and_lists_regressions_first():
    db = _db({"same": [1.0], "slower": [2.0], "faster": [0.5], "brand_new": [1.0], "dead": [None]})
    db.register_model("net", CPU, [("same", 2), ("slower", 1)])
    base = Baseline("b.jsonl", {(k, CPU): BaselineKernel(k, CPU, f"name_{k}", c, "s") for k, c in
                                {"same": 1.02, "slower": 1.0, "faster": 1.0, "dead": 3.0, "gone": 4.0,
                                 "other": 1.0}.items()})
    base.kernels[("other", "another-target")] = BaselineKernel("other", "another-target", "", 1.0, "s")
    changes = compare(collect(db), base, threshold=0.05)
    got = {(c.kind, c.key): c for c in changes}
    assert got[("kernel", "slower")] == Change("kernel", "name_slower", "slower", CPU, 1.0, 2.0, "s", 2.0, "regression")
    assert got[("kernel", "faster")].verdict == "improvement" and got[("kernel", "faster")].ratio == 0.5
    assert got[("kernel", "same")].verdict == "same"
    assert got[("kernel", "brand_new")].verdict == "new" and got[("kernel", "brand_new")].before is None
    assert got[("kernel", "dead")].verdict == "missing" and got[("kernel", "dead")].after is None
    assert got[("kernel", "gone")].verdict == "missing"  # in the baseline, no records now
    assert ("kernel", "other") in got and got[("kernel", "other")].target_key == CPU
    assert not any(c.target_key == "another-target" for c in changes)  # a target this report does not cover
    # the model: today's kernel list priced with the baseline's costs
    net = got[("model", "net")]
    assert (net.before, net.after, net.verdict) == (pytest.approx(3.04), 4.0, "regression")
    assert [c.verdict for c in changes] == sorted((c.verdict for c in changes),
                                                  key=["regression", "improvement", "missing", "new", "same"].index)
    assert changes[0].kind == "model"  # models first among the regressions
    # a looser threshold hides the model's 32% but not the kernel's 100%
    loose = {(c.kind, c.key): c.verdict for c in compare(collect(db), base, threshold=0.5)}
    assert loose[("model", "net")] == "same" and loose[("kernel", "slower")] == "regression"
    with pytest.raises(ValueError):
        compare(collect(db), base, threshold=-0.1)


def test_with_since_a_kernel_not_measured_since_is_not_missing():
    db = _db({"a": [1.0]})
    base = Baseline("b", {(k, CPU): BaselineKernel(k, CPU, k, 1.0, "s") for k in ("a", "old")})
    assert [c.key for c in compare(collect(db), base) if c.verdict == "missing"] == ["old"]
    assert [c.key for c in compare(collect(db, since=T0), base)] == ["a"]
