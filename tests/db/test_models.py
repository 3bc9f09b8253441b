"""The model registry (`Database.register_model` / `models`), against every implementation:
a model's kernels in order with their occurrences, replaced per (model, target), and refused
when malformed."""

from datetime import datetime, timedelta, timezone

import pytest

from akg.db import ModelEntry
from akg.errors import DatabaseError


def test_a_registered_model_reads_back_in_order(db):
    before = datetime.now(timezone.utc)
    db.register_model("mlp", "cpu-test", [("w2", 3), ("w1", 1)])
    [entry] = db.models()
    assert isinstance(entry, ModelEntry)
    assert (entry.name, entry.target_key, entry.kernels) == ("mlp", "cpu-test", (("w2", 3), ("w1", 1)))
    assert before - timedelta(seconds=5) <= entry.updated_at <= datetime.now(timezone.utc) + timedelta(seconds=5)
    assert entry.updated_at.tzinfo is not None
    assert {w.key for w in db.workloads()} == {"w1", "w2"} and [t.key for t in db.targets()] == ["cpu-test"]


def test_registering_again_replaces_the_list_on_that_target_only(db):
    db.register_model("mlp", "cpu-test", [("w1", 2), ("w2", 1)])
    db.register_model("mlp", "npu-sim", [("w1", 5)])
    db.register_model("mlp", "cpu-test", [("w3", 4)])
    db.register_model("bert", "cpu-test", [])
    assert [(m.name, m.target_key, m.kernels) for m in db.models()] == [
        ("bert", "cpu-test", ()), ("mlp", "cpu-test", (("w3", 4),)), ("mlp", "npu-sim", (("w1", 5),))]
    assert [m.name for m in db.models("npu-sim")] == ["mlp"]
    assert db.models("gpu") == []


def test_a_key_given_twice_adds_its_occurrences(db):
    db.register_model("m", "cpu-test", [("w1", 1), ("w2", 1), ("w1", 2)])
    assert db.models()[0].kernels == (("w1", 3), ("w2", 1))


def test_an_older_imported_list_never_replaces_a_newer_one(db):
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    db.register_model("m", "cpu-test", [("w1", 1)], updated_at=t0 + timedelta(hours=1))
    db.register_model("m", "cpu-test", [("w2", 1)], updated_at=t0)
    assert db.models()[0].kernels == (("w1", 1),)
    db.register_model("m", "cpu-test", [("w3", 1)], updated_at=t0 + timedelta(hours=2))
    [entry] = db.models()
    assert entry.kernels == (("w3", 1),) and entry.updated_at == t0 + timedelta(hours=2)


@pytest.mark.parametrize("name, target, kernels, message", [
    ("", "cpu-test", [], "needs a name"),
    ("m", "", [], "needs a target key"),
    ("m", "cpu-test", [("w1", 0)], "occurrences >= 1"),
    ("m", "cpu-test", [("w1", "2")], "occurrences >= 1"),
    ("m", "cpu-test", [("", 1)], "needs a workload key"),
    ("m", "cpu-test", [("w1",)], r"\(workload key, occurrences\) pairs"),
])
def test_a_malformed_model_is_a_database_error(db, name, target, kernels, message):
    with pytest.raises(DatabaseError, match=message):
        db.register_model(name, target, kernels)
    assert db.models() == []
