"""akg.report.jsonout: the JSON report's schema, its numbers against the database, and a
planted regression in it."""

import json

from akg.report import collect, compare, load_baseline, to_json

TOP = {"format", "version", "generated_at", "command", "database", "since", "target", "baseline", "threshold",
       "summary", "failures", "models", "kernels", "changes"}
KERNEL = {"workload_key", "name", "target_key", "unit", "best_cost", "compile_uses", "chosen_cost", "default_cost",
          "cost_source", "speedup", "trials", "failures", "first_measured", "last_measured", "curve"}
MODEL = {"name", "target_key", "unit", "kernels", "best_cost", "chosen_cost", "default_cost", "speedup", "trials",
         "failures", "missing_best", "missing_default", "updated_at"}
CHANGE = {"kind", "name", "key", "target_key", "before", "after", "unit", "ratio", "verdict"}


def test_schema_numbers_and_a_planted_regression(database, planted):
    data = collect(database)
    baseline = load_baseline(planted.path)
    doc = json.loads(json.dumps(to_json(data, compare(data, baseline), baseline=baseline, threshold=0.05),
                                allow_nan=False))
    assert set(doc) == TOP
    assert (doc["format"], doc["version"], doc["database"], doc["threshold"]) == ("akg-report", 1, database.url, 0.05)
    assert doc["baseline"] == str(planted.path) and doc["since"] is None
    assert doc["summary"]["kernels"] == len(doc["kernels"]) == 4 and doc["summary"]["models"] == 1
    assert doc["summary"]["trials"] == len(database.records())
    for k in doc["kernels"]:
        assert set(k) == KERNEL
        assert k["best_cost"] == database.best(k["workload_key"], k["target_key"]).cost
        assert k["trials"] == len(database.records(k["workload_key"], k["target_key"]))
        assert k["curve"][-1][0] == k["trials"] and k["curve"][-1][2] == k["best_cost"]
        assert all(isinstance(t, int) and isinstance(at, str) and b > 0 for t, at, b in k["curve"])
    (model,) = doc["models"]
    assert set(model) == MODEL and model["name"] == "mlp" and len(model["kernels"]) == 4
    assert all(set(c) == CHANGE for c in doc["changes"])
    verdicts = {c["key"]: c["verdict"] for c in doc["changes"] if c["kind"] == "kernel"}
    assert verdicts[planted.regressed] == "regression" and verdicts[planted.improved] == "improvement"
    assert doc["summary"]["regressions"] == sum(c["verdict"] == "regression" for c in doc["changes"]) >= 1
    regressed = next(c for c in doc["changes"] if c["key"] == planted.regressed)
    assert regressed["ratio"] == regressed["after"] / regressed["before"]


def test_without_a_baseline(database):
    doc = to_json(collect(database), [])
    assert doc["changes"] == [] and doc["baseline"] is None and doc["summary"]["regressions"] == 0
