"""The report for machines: one JSON object (`akg report --format json`), costs in their
record unit (seconds or cycles), times as ISO 8601 UTC. `FORMAT`/`VERSION` name the schema;
docs/report.md describes every field."""

from __future__ import annotations

from dataclasses import asdict

from akg.report.compare import Baseline, Change
from akg.report.data import KernelReport, ModelReport, ReportData

FORMAT = "akg-report"
VERSION = 1


def to_json(data: ReportData, changes: list[Change], *, baseline: Baseline | None = None,
            threshold: float | None = None) -> dict:
    """The report as plain JSON values (json.dumps it)."""
    verdicts = [c.verdict for c in changes]
    return {
        "format": FORMAT, "version": VERSION,
        "generated_at": data.generated_at.isoformat(), "command": data.command, "database": data.database,
        "since": data.since.isoformat() if data.since else None, "target": data.target_key,
        "baseline": baseline.source if baseline is not None else None, "threshold": threshold,
        "summary": {"kernels": len(data.kernels), "models": len(data.models), "trials": data.trials,
                    "failures": data.failed, "regressions": verdicts.count("regression"),
                    "improvements": verdicts.count("improvement")},
        "failures": dict(data.failures),
        "models": [_model(m) for m in data.models],
        "kernels": [_kernel(k) for k in data.kernels],
        "changes": [asdict(c) for c in changes],
    }


def _kernel(k: KernelReport) -> dict:
    return {"workload_key": k.workload_key, "name": k.name, "target_key": k.target_key, "unit": k.unit,
            "best_cost": k.best_cost, "compile_uses": k.compile_uses, "chosen_cost": k.chosen_cost,
            "default_cost": k.default_cost, "cost_source": k.cost_source, "speedup": k.speedup, "trials": k.trials, "failures": dict(k.failures),
            "first_measured": _time(k.first_measured), "last_measured": _time(k.last_measured),
            "curve": [[p.trial, p.measured_at.isoformat(), p.best] for p in k.curve]}


def _model(m: ModelReport) -> dict:
    return {"name": m.name, "target_key": m.target_key, "unit": m.unit,
            "kernels": [[key, n] for key, n in m.kernels], "best_cost": m.best_cost, "chosen_cost": m.chosen_cost,
            "default_cost": m.default_cost,
            "speedup": m.speedup, "trials": m.trials, "failures": m.failures, "missing_best": list(m.missing_best),
            "missing_default": list(m.missing_default), "updated_at": _time(m.updated_at)}


def _time(moment) -> str | None:
    return moment.isoformat() if moment is not None else None
