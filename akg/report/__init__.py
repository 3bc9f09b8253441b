"""akg.report: reports on a tuning database (`akg report`): per-model and per-kernel tables,
tuning curves, failures by status, and changes against a baseline export, as a self-contained
HTML page, JSON or a terminal summary. See docs/report.md.

    data = collect(database, since=None, target_key=None)
    changes = compare(data, load_baseline("last-night.jsonl"), threshold=0.05)
    write_html(data, changes, "report.html")
"""

from akg.report.compare import Baseline, BaselineKernel, BaselineModel, Change, compare, load_baseline
from akg.report.data import CurvePoint, KernelReport, ModelReport, ReportData, collect
from akg.report.html import render_html, write_html
from akg.report.jsonout import to_json
from akg.report.terminal import print_summary
from akg.report.units import format_cost

__all__ = ["Baseline", "BaselineKernel", "BaselineModel", "Change", "CurvePoint", "KernelReport", "ModelReport",
           "ReportData", "collect", "compare", "format_cost", "load_baseline", "print_summary", "render_html",
           "to_json", "write_html"]
