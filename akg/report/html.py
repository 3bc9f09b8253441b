"""The report as one self-contained HTML page: inline CSS, figures as SVG `data:` URIs, no
script and nothing fetched. Every name is escaped; every number cell carries its exact value
in `data-value` beside the human-readable text."""

from __future__ import annotations

import html
import os
from pathlib import Path

from akg.report.compare import Baseline, Change
from akg.report.data import FAILURE_STATUSES, ReportData
from akg.report.units import format_change, format_cost, format_ratio

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 96em; padding: 0 1em; color: #222; }
.wide { overflow-x: auto; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; white-space: nowrap; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.meta th { width: 9em; } table.meta td { white-space: normal; } code { font-size: 0.9em; word-break: break-all; }
tr.regression td { background: #fde2e0; } tr.improvement td { background: #e3f4e5; }
tr.missing td { background: #fff4d6; }
.flag { font-weight: bold; } tr.regression .flag { color: #b3261e; } tr.improvement .flag { color: #1e7b34; }
.banner { padding: 0.6em 1em; border-radius: 4px; margin: 1em 0; font-weight: bold; }
.banner.bad { background: #b3261e; color: #fff; } .banner.good { background: #e3f4e5; color: #1e5b2a; }
.note { color: #666; font-size: 0.9em; } img { max-width: 100%; display: block; margin: 0.5em 0 1.5em; }
"""

_FLAGS = {"regression": "\u25b2 regression", "improvement": "\u25bc improvement", "missing": "missing",
          "new": "new", "same": "same"}


def write_html(data: ReportData, changes: list[Change], path: str | os.PathLike, *,
               baseline: Baseline | None = None, threshold: float | None = None) -> Path:
    """Write the report page to `path` (UTF-8); returns the path."""
    path = Path(path)
    path.write_text(render_html(data, changes, baseline=baseline, threshold=threshold), encoding="utf-8")
    return path


def render_html(data: ReportData, changes: list[Change], *, baseline: Baseline | None = None,
                threshold: float | None = None) -> str:
    """The report page as text."""
    from akg.report.figures import figures

    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>akg tuning report</title>", f"<style>{CSS}</style></head><body>",
             "<h1>akg tuning report</h1>", _meta(data, baseline, threshold)]
    if baseline is not None or changes:
        parts += _changes(changes, baseline, threshold)
    if data.empty:
        parts.append('<p class="banner bad">No records to report'
                     + (" since " + _e(data.since.isoformat()) if data.since else "") + ".</p>")
    if data.models:
        parts += _models(data)
    parts += _kernels(data)
    parts += _failures(data)
    pictures = figures(data)
    if pictures is None:
        parts.append('<p class="note">No figures: matplotlib is not installed (pip install akg[report]).</p>')
    elif pictures:
        parts.append('<h2 id="figures">Tuning curves and statuses</h2>')
        parts.append('<p class="note">Curves: each kernel\'s best cost so far divided by its final best '
                     '(1 = the best it reached), over the measurements in this report.</p>')
        for title, uri in pictures.items():
            parts.append(f"<h3>{_e(title)}</h3><img alt=\"{_e(title)}\" src=\"{uri}\">")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _num(value: float | int | None, text: str) -> str:
    """A number cell: its text, and its exact value (empty when unknown) in data-value."""
    return f'<td class="num" data-value="{"" if value is None else _e(repr(value))}">{_e(text)}</td>'


def _td(text) -> str:
    return f"<td>{_e(text)}</td>"


def _table(table_id: str, header: list[str], rows: list[str]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    return (f'<div class="wide"><table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>\n' + "\n".join(rows)
            + "\n</tbody></table></div>")


def _meta(data: ReportData, baseline: Baseline | None, threshold: float | None) -> str:
    rows = [("made", data.generated_at.strftime("%Y-%m-%d %H:%M:%S UTC")),
            ("command", data.command or "-"), ("database", data.database),
            ("since", data.since.isoformat() if data.since else "all records"),
            ("target", data.target_key or "all targets")]
    if baseline is not None:
        rows.append(("baseline", baseline.source))
    if threshold is not None:
        rows.append(("noise threshold", f"{threshold:.1%}"))
    rows.append(("measurements", f"{data.trials} ({data.failed} failed) of {len(data.kernels)} kernel(s)"))
    body = "".join(f"<tr><th>{_e(k)}</th><td><code>{_e(v)}</code></td></tr>" for k, v in rows)
    return f'<table class="meta" id="meta">{body}</table>'


def _changes(changes: list[Change], baseline: Baseline | None, threshold: float | None) -> list[str]:
    regressions = [c for c in changes if c.verdict == "regression"]
    improvements = [c for c in changes if c.verdict == "improvement"]
    beyond = f" beyond {threshold:.1%}" if threshold is not None else ""
    if regressions:
        names = ", ".join(c.name for c in regressions[:8]) + (", ..." if len(regressions) > 8 else "")
        banner = (f'<p class="banner bad" id="verdict">{len(regressions)} regression(s){_e(beyond)} against the '
                  f"baseline: {_e(names)}</p>")
    else:
        banner = f'<p class="banner good" id="verdict">No regression{_e(beyond)} against the baseline.</p>'
    rows = []
    for c in changes:
        rows.append(f'<tr class="{_e(c.verdict)}" data-kind="{_e(c.kind)}" data-key="{_e(c.key)}" '
                    f'data-target="{_e(c.target_key)}">'
                    + _td(c.kind) + _td(c.name) + _td(c.target_key)
                    + _num(c.before, format_cost(c.before, c.unit)) + _num(c.after, format_cost(c.after, c.unit))
                    + _num(c.ratio, format_change(c.ratio))
                    + f'<td class="flag">{_e(_FLAGS.get(c.verdict, c.verdict))}</td></tr>')
    return ['<h2 id="baseline">Against the baseline</h2>', banner,
            f'<p class="note">{len(improvements)} improvement(s); change = after / before - 1; a cost higher by more '
            f"than the threshold is a regression.</p>",
            _table("changes", ["kind", "name", "target", "baseline", "now", "change", "verdict"], rows)]


def _models(data: ReportData) -> list[str]:
    rows = []
    for m in data.models:
        notes = []
        if m.missing_best:
            notes.append(f"{len(m.missing_best)} kernel(s) without a best cost yet")
        if m.missing_default and not m.missing_best:
            notes.append(f"{len(m.missing_default)} kernel(s) without the default config's cost")
        rows.append(f'<tr data-key="{_e(m.name)}" data-target="{_e(m.target_key)}">' + _td(m.name) + _td(m.target_key)
                    + _num(len(m.kernels), str(len(m.kernels))) + _num(m.best_cost, format_cost(m.best_cost, m.unit))
                    + _num(m.chosen_cost, format_cost(m.chosen_cost, m.unit))
                    + _num(m.default_cost, format_cost(m.default_cost, m.unit))
                    + _num(m.speedup, format_ratio(m.speedup)) + _num(m.trials, str(m.trials))
                    + _num(m.failures, str(m.failures)) + _td("; ".join(notes)) + "</tr>")
    return ['<h2 id="models-title">Models</h2>',
            '<p class="note">Sums over the model\'s kernels of occurrences x the kernel\'s cost (columns as in the '
            "kernels' table).</p>",
            _table("models", ["model", "target", "kernels", "best", "chosen", "default", "speed-up", "trials",
                              "failures", "note"], rows)]


def _kernels(data: ReportData) -> list[str]:
    rows = []
    for k in data.kernels:
        rows.append(f'<tr data-key="{_e(k.workload_key)}" data-target="{_e(k.target_key)}">' + _td(k.name)
                    + f"<td><code>{_e(k.workload_key)}</code></td>" + _td(k.target_key)
                    + _num(k.best_cost, format_cost(k.best_cost, k.unit)) + _td(k.compile_uses)
                    + _num(k.chosen_cost, format_cost(k.chosen_cost, k.unit))
                    + _num(k.default_cost, format_cost(k.default_cost, k.unit))
                    + _num(k.speedup, format_ratio(k.speedup)) + _td(k.cost_source or "-")
                    + _num(k.trials, str(k.trials)) + _num(k.failed, str(k.failed))
                    + "".join(_num(k.failures.get(s, 0), str(k.failures.get(s, 0))) for s in FAILURE_STATUSES)
                    + "</tr>")
    return ['<h2 id="kernels-title">Kernels</h2>',
            '<p class="note">best: the cheapest successful measurement (what the baseline comparison uses); '
            "compile uses: what <code>akg compile</code> builds (the tuner's final comparison of its pick, the "
            "runner-up and the default config; unconfirmed without one); chosen and default: the times of that "
            "config and of the target's default config, both from the final comparison, else both from their "
            "measurements (timed by); speed-up = default / chosen. Trials and failures count the measurements "
            "in this report.</p>",
            _table("kernels", ["kernel", "workload", "target", "best", "compile uses", "chosen", "default",
                               "speed-up", "timed by", "trials", "failures", *FAILURE_STATUSES], rows)]


def _failures(data: ReportData) -> list[str]:
    total = data.trials
    rows = []
    for status in ("ok", *FAILURE_STATUSES):
        n = total - data.failed if status == "ok" else data.failures.get(status, 0)
        share = n / total if total else None
        rows.append(f'<tr data-key="{status}">' + _td(status) + _num(n, str(n))
                    + _num(share, "-" if share is None else f"{share:.1%}") + "</tr>")
    return ['<h2 id="failures-title">Measurements by status</h2>',
            _table("failures", ["status", "measurements", "share"], rows)]
