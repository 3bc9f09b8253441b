"""akg.report.data: what `collect` takes from a database (in memory, records planted by hand):
best costs, default and chosen costs from verdicts or records, failures by status, curves,
the --since window, the target filter and models."""

from datetime import datetime, timedelta, timezone

import pytest

from akg.db import Contender, InMemoryDatabase, Record, TargetInfo, Verdict, Workload
from akg.report import collect
from akg.report.data import curve

T0 = datetime(2025, 1, 1, 10, 0, tzinfo=timezone.utc)
CPU, NPU = "cpu-test-256b-2c", "npu-sim-test"


def cfg(n: int) -> dict:
    return {"fusion": "smart", "steps": [["tile", 0, "L2", [n]]]}


def rec(key, n, status="ok", cost=None, minutes=0, target=CPU, unit="s"):
    return Record(key, target, cfg(n), status, cost, unit=unit, timestamp=T0 + timedelta(minutes=minutes))


def verdict(key, winner: int, contenders, minutes=100, target=CPU):
    """contenders: (role, config number, cost, is_default)."""
    entries = tuple(Contender(role, cfg(n), "ok" if cost is not None else "run_error", cost, (), is_default)
                    for role, n, cost, is_default in contenders)
    cost = next(c for r, n, c, d in contenders if n == winner)
    return Verdict(key, target, cfg(winner), next(r for r, n, c, d in contenders if n == winner), cfg(1), cost,
                   contenders=entries, timestamp=T0 + timedelta(minutes=minutes))


@pytest.fixture()
def db():
    db = InMemoryDatabase()
    db.register_target(TargetInfo(CPU))
    for key, name in (("k1", "matmul"), ("k2", "softmax"), ("k3", "never_ok")):
        db.register_workload(Workload(key, name))
    db.add_many([
        rec("k1", 1, cost=4e-5, minutes=0),   # the default config
        rec("k1", 2, "build_error", minutes=1),
        rec("k1", 3, cost=2e-5, minutes=2),   # best
        rec("k1", 4, "timeout", minutes=3),
        rec("k1", 5, cost=3e-5, minutes=4),
        rec("k1", 6, "build_error", minutes=5),
        rec("k2", 1, cost=1e-6, minutes=1),
        rec("k2", 2, cost=2e-6, minutes=6),
        rec("k3", 1, "wrong_result", minutes=2),
    ])
    db.add_verdict(verdict("k1", 3, [("tuned", 3, 2.1e-5, False), ("runner-up", 5, 3.1e-5, False),
                                     ("default", 1, 4.2e-5, True)]))
    return db


def test_kernels_hold_best_trials_failures_by_status_and_what_compile_uses(db):
    data = collect(db)
    assert [k.workload_key for k in data.kernels] == ["k1", "k3", "k2"]  # by target, then name
    k1 = data.kernel("k1", CPU)
    assert (k1.name, k1.unit, k1.best_cost, k1.trials) == ("matmul", "s", 2e-5, 6)
    assert k1.failures == {"build_error": 2, "timeout": 1} and k1.failed == 3
    assert k1.compile_uses == "tuned"
    # default and chosen both from the final comparison, which timed the default config
    assert (k1.default_cost, k1.chosen_cost, k1.cost_source) == (4.2e-5, 2.1e-5, "final comparison")
    assert k1.speedup == pytest.approx(2.0)
    assert k1.best_config == Record("k1", CPU, cfg(3), "ok", 1.0).config
    k3 = data.kernel("k3", CPU)
    assert (k3.best_cost, k3.failures, k3.compile_uses, k3.speedup) == (None, {"wrong_result": 1},
                                                                        "default (nothing tuned)", None)
    k2 = data.kernel("k2", CPU)  # no verdict: the default config is unknown
    assert (k2.best_cost, k2.default_cost, k2.chosen_cost, k2.compile_uses) == (1e-6, None, 1e-6, "tuned, unconfirmed")
    assert data.failures == {"build_error": 2, "timeout": 1, "wrong_result": 1}
    assert (data.trials, data.failed) == (9, 4)


def test_default_and_chosen_come_from_records_when_the_comparison_did_not_time_the_default(db):
    # the default config failed in the latest comparison: both costs from their records
    db.add_verdict(verdict("k1", 5, [("tuned", 3, 2.5e-5, False), ("runner-up", 5, 2.4e-5, False),
                                     ("default", 1, None, True)], minutes=200))
    k1 = collect(db).kernel("k1", CPU)
    assert (k1.default_cost, k1.chosen_cost, k1.cost_source) == (4e-5, 3e-5, "measurements")
    assert k1.compile_uses == "runner-up"


def test_a_default_that_won_is_what_compile_uses_with_speedup_one(db):
    db.add_verdict(verdict("k1", 1, [("tuned", 3, 4.3e-5, False), ("default", 1, 4.0e-5, True)], minutes=300))
    k1 = collect(db).kernel("k1", CPU)
    assert k1.compile_uses == "default (won)" and k1.speedup == 1.0 and k1.best_cost == 2e-5


def test_curve_keeps_improvements_and_the_last_point():
    records = [rec("k", 1, cost=5.0, minutes=0), rec("k", 2, "run_error", minutes=1), rec("k", 3, cost=6.0, minutes=2),
               rec("k", 4, cost=2.0, minutes=3), rec("k", 5, cost=3.0, minutes=4)]
    points = curve(records)
    assert [(p.trial, p.best) for p in points] == [(1, 5.0), (4, 2.0), (5, 2.0)]
    assert points[1].measured_at == T0 + timedelta(minutes=3)
    assert curve([rec("k", 1, "timeout")]) == ()


def test_since_counts_the_window_and_keeps_the_whole_history_for_costs(db):
    data = collect(db, since=(T0 + timedelta(minutes=3)).replace(tzinfo=None))  # naive: UTC
    assert data.since == T0 + timedelta(minutes=3)
    assert [k.workload_key for k in data.kernels] == ["k1", "k2"]  # k3 not measured since
    k1 = data.kernel("k1", CPU)
    assert (k1.trials, k1.failures, k1.best_cost) == (3, {"timeout": 1, "build_error": 1}, 2e-5)
    assert [(p.trial, p.best) for p in k1.curve] == [(2, 3e-5), (3, 3e-5)]
    assert data.kernel("k2", CPU).trials == 1
    assert collect(db, since=T0 + timedelta(days=1)).empty


def test_target_filter_and_cycles(db):
    db.register_target(TargetInfo(NPU))
    db.add_many([rec("k1", 1, cost=1200.0, target=NPU, unit="cycles")])
    both = collect(db)
    assert len(both.kernels) == 4 and both.kernel("k1", NPU).unit == "cycles"
    npu = collect(db, target_key=NPU)
    assert [(k.workload_key, k.target_key, k.best_cost) for k in npu.kernels] == [("k1", NPU, 1200.0)]
    assert npu.target_key == NPU


def test_models_sum_occurrences_times_costs(db):
    db.register_model("net", CPU, [("k1", 2), ("k2", 3)])
    db.register_model("broken", CPU, [("k1", 1), ("k3", 1)])
    data = collect(db)
    net = next(m for m in data.models if m.name == "net")
    assert net.best_cost == pytest.approx(2 * 2e-5 + 3 * 1e-6)
    assert net.default_cost is None and net.missing_default == ("k2",)  # k2's default is unknown
    assert (net.trials, net.failures) == (8, 3)
    broken = next(m for m in data.models if m.name == "broken")
    assert broken.best_cost is None and broken.missing_best == ("k3",)
    db.add_verdict(verdict("k2", 1, [("tuned", 1, 1.1e-6, False), ("default", 2, 2.2e-6, True)]))
    net = next(m for m in collect(db).models if m.name == "net")
    assert net.chosen_cost == pytest.approx(2 * 2.1e-5 + 3 * 1.1e-6)
    assert net.default_cost == pytest.approx(2 * 4.2e-5 + 3 * 2.2e-6)
    assert net.speedup == pytest.approx(net.default_cost / net.chosen_cost)
    # a model none of whose kernels was measured in the window is left out
    assert [m.name for m in collect(db, since=T0 + timedelta(minutes=5, seconds=30)).models] == ["net"]


def test_an_empty_database_is_empty():
    data = collect(InMemoryDatabase())
    assert data.empty and data.kernels == () and data.models == () and data.trials == 0
