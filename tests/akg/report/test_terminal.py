"""akg.report.terminal: the rich summary names the kernels and models, their numbers in human
units, and the regressions against a baseline."""

import io
from datetime import datetime, timezone

from rich.console import Console

from akg.db import InMemoryDatabase, Record, TargetInfo, Workload
from akg.report import collect, compare, format_cost, print_summary
from akg.report.compare import Baseline, BaselineKernel

CPU = "cpu-test"


def _summary(data, changes, **kw) -> str:
    out = io.StringIO()
    print_summary(data, changes, Console(file=out, width=200, color_system=None), **kw)
    return out.getvalue()


def test_summary_lists_kernels_failures_and_regressions():
    db = InMemoryDatabase()
    db.register_target(TargetInfo(CPU))
    db.register_workload(Workload("k1", "matmul_relu"))
    db.register_workload(Workload("k2", "softmax"))
    db.add_many([Record("k1", CPU, {"n": 1}, "ok", 2.5e-5), Record("k1", CPU, {"n": 2}, "build_error"),
                 Record("k2", CPU, {"n": 1}, "ok", 4e-7), Record("k2", CPU, {"n": 2}, "timeout")])
    db.register_model("net", CPU, [("k1", 2), ("k2", 1)])
    data = collect(db)
    base = Baseline("night.jsonl", {("k1", CPU): BaselineKernel("k1", CPU, "matmul_relu", 2.0e-5, "s"),
                                    ("k2", CPU): BaselineKernel("k2", CPU, "softmax", 4e-7, "s")})
    text = _summary(data, compare(data, base, 0.05), baseline=base, threshold=0.05)
    assert "2 kernel(s), 1 model(s), 4 measurements, 2 failed" in text
    assert "matmul_relu" in text and "25 us" in text and "400 ns" in text
    assert format_cost(2 * 2.5e-5 + 4e-7) in text  # the model's total
    assert "failures: 1 build_error, 1 timeout" in text
    assert "against the baseline night.jsonl" in text and "+25.0%" in text
    assert "2 regression(s) beyond 5.0%, 0 improvement(s), 1 unchanged" in text  # k1 and the model
    quiet = _summary(data, [])
    assert "baseline" not in quiet and "regression" not in quiet


def test_summary_of_nothing_and_cycles():
    assert "no records to report" in _summary(collect(InMemoryDatabase()), [])
    db = InMemoryDatabase()
    db.register_target(TargetInfo("npu-sim"))
    db.add_many([Record("k", "npu-sim", {"n": 1}, "ok", 123456.0, unit="cycles",
                        timestamp=datetime(2025, 1, 1, tzinfo=timezone.utc))])
    assert "123,456 cycles" in _summary(collect(db), [])
