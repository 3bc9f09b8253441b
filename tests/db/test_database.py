"""The Database interface, run against every implementation (memory, SQLite, PostgreSQL):
storing, uniqueness, best/top-k ranking, history order, warm-start queries, listings."""

import pytest

from akg.db import TargetInfo, Workload
from akg.errors import DatabaseError

def test_added_records_read_back_equal(db, rec):
    r = rec(1, 2.5e-4, error="", host="box", akg_version="9.9", tvm_version="0.27")
    f = rec(2, None, "build_error", error="LLVM said no\nsecond line")
    assert db.add(r) and db.add(f)
    assert db.history("w1", "cpu-test") == [r, f]
    assert db.count() == len(db) == 2


def test_has_and_measured_configs_cover_every_status(db, rec):
    db.add(rec(1))
    db.add(rec(2, None, "timeout"))
    db.add(rec(3, workload="w2"))
    assert db.has("w1", "cpu-test", {"tile": 1})
    assert db.has("w1", "cpu-test", '{"tile": 2}')
    assert not db.has("w1", "cpu-test", {"tile": 3})
    assert not db.has("w1", "cpu-other", {"tile": 1})
    assert db.measured_configs("w1", "cpu-test") == {'{"tile":1}', '{"tile":2}'}
    assert db.measured_configs("w9", "cpu-test") == set()


def test_a_remeasured_config_is_rejected_and_the_first_record_stands(db, rec):
    first = rec(1, 5.0)
    assert db.add(first) is True
    assert db.add(rec(1, 1.0, at=100)) is False  # cheaper, but the first record stands
    assert db.add(rec(1, None, "run_error", at=200)) is False
    assert db.history("w1", "cpu-test") == [first]
    assert db.best("w1", "cpu-test") == first


def test_same_config_on_another_workload_or_target_is_another_record(db, rec):
    assert db.add(rec(1)) and db.add(rec(1, workload="w2")) and db.add(rec(1, target="cpu-b"))
    assert db.count() == 3
    assert db.count("w1") == 2 and db.count(target_key="cpu-test") == 2 and db.count("w1", "cpu-b") == 1


def test_add_many_counts_the_new_records(db, rec):
    assert db.add_many([rec(1), rec(2), rec(1, 0.1)]) == 2
    assert db.add_many([rec(2), rec(3)]) == 1
    assert db.add_many([]) == 0
    assert db.measured_configs("w1", "cpu-test") == {'{"tile":1}', '{"tile":2}', '{"tile":3}'}


def test_best_and_top_k_rank_by_cost_and_failures_never_win(db, rec):
    db.add_many([rec(1, 3.0), rec(2, None, "build_error"), rec(3, 1.0), rec(4, 0.001, "wrong_result"),
                 rec(5, 2.0), rec(6, 0.0005, "timeout"), rec(7, 1.0), rec(8, 4.0, workload="w2")])
    assert db.best("w1", "cpu-test") == rec(3, 1.0)
    top = db.top_k("w1", "cpu-test", 3)
    assert [(r.config, r.cost) for r in top] == [('{"tile":3}', 1.0), ('{"tile":7}', 1.0), ('{"tile":5}', 2.0)]
    assert len(db.top_k("w1", "cpu-test", 100)) == 4
    assert db.top_k("w1", "cpu-test", 0) == []


def test_equal_costs_rank_the_earlier_measurement_first(db, rec):
    db.add(rec(1, 1.0, at=50))
    db.add(rec(2, 1.0, at=10))
    assert [r.config for r in db.top_k("w1", "cpu-test", 2)] == ['{"tile":2}', '{"tile":1}']


def test_best_is_none_without_a_successful_record(db, rec):
    assert db.best("w1", "cpu-test") is None
    db.add(rec(1, None, "run_error"))
    assert db.best("w1", "cpu-test") is None and db.top_k("w1", "cpu-test", 5) == []


@pytest.mark.parametrize("k", [-1, 1.5, "3", True])
def test_top_k_needs_a_count(db, k):
    with pytest.raises(DatabaseError, match="top_k"):
        db.top_k("w1", "cpu-test", k)


def test_history_is_in_measurement_order_not_arrival_order(db, rec):
    db.add(rec(1, at=30))
    db.add(rec(2, at=10))
    db.add(rec(3, at=20))
    db.add(rec(4, at=20))  # same time: arrival order breaks the tie
    assert [r.config for r in db.history("w1", "cpu-test")] == [
        '{"tile":2}', '{"tile":3}', '{"tile":4}', '{"tile":1}']


def test_records_for_target_leave_out_one_workload(db, rec):
    db.add_many([rec(1, workload="a"), rec(2, None, "timeout", workload="b"), rec(3, workload="c"),
                 rec(4, workload="b", target="cpu-other")])
    assert [r.workload_key for r in db.records_for_target("cpu-test")] == ["a", "b", "c"]
    assert [r.workload_key for r in db.records_for_target("cpu-test", exclude_workload="b")] == ["a", "c"]
    assert db.records_for_target("npu-sim") == []


def test_workloads_are_listed_with_blanks_filled_and_first_name_kept(db, rec):
    db.add(rec(1, workload="k2"))
    db.register_workload(Workload("k1", "matmul_relu", {"nodes": [["matmul"]]}))
    db.register_workload(Workload("k2", "softmax"))
    db.register_workload(Workload("k2", "other_name", {"nodes": [["exp"]]}))
    db.register_workload(Workload("k1", "renamed", {"nodes": [["ignored"]]}))
    assert db.workloads() == [Workload("k1", "matmul_relu", '{"nodes":[["matmul"]]}'),
                              Workload("k2", "softmax", '{"nodes":[["exp"]]}')]


def test_targets_are_listed(db, rec):
    db.add(rec(1, target="cpu-b"))
    db.register_target(TargetInfo("cpu-a", {"kind": "cpu"}))
    db.register_target(TargetInfo("cpu-b", {"kind": "cpu", "cores": 4}))
    db.register_target(TargetInfo("cpu-b", {"kind": "changed"}))
    assert db.targets() == [TargetInfo("cpu-a", '{"kind":"cpu"}'), TargetInfo("cpu-b", '{"cores":4,"kind":"cpu"}')]


def test_costs_and_text_survive_exactly(db, rec):
    r = rec(1, 1.2345678901234567e-7, unit="cycles", error="ünïcode ✓ 'quotes' \"and\" \\ backslash")
    db.add(r)
    (back,) = db.history("w1", "cpu-test")
    assert back == r and back.cost == 1.2345678901234567e-7 and back.unit.value == "cycles"


def test_a_database_is_a_context_manager(db, rec):
    with db as same:
        same.add(rec(1))
    assert same is db
