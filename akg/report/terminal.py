"""The report's summary in a terminal (rich): models, kernels, statuses, and the changes
against a baseline with regressions in red."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from akg.report.compare import Baseline, Change
from akg.report.data import ReportData
from akg.report.units import format_change, format_cost, format_ratio

KERNEL_ROWS = 40  # kernels listed; the rest are counted (the HTML and JSON list them all)
_STYLE = {"regression": "bold red", "improvement": "green", "missing": "yellow"}


def print_summary(data: ReportData, changes: list[Change], console: Console | None = None, *,
                  baseline: Baseline | None = None, threshold: float | None = None) -> None:
    """Print the summary on `console` (a new one on stdout when None)."""
    console = console or Console(highlight=False, soft_wrap=True)
    where = f" since {data.since.isoformat()}" if data.since else ""
    console.print(f"tuning report of {data.database}{where}: {len(data.kernels)} kernel(s), "
                  f"{len(data.models)} model(s), {data.trials} measurements, {data.failed} failed", markup=False)
    if data.empty:
        console.print("no records to report", markup=False)
    if data.models:
        table = Table(title="models")
        for col in ("model", "target", "kernels", "best", "chosen", "default", "speed-up", "trials", "failures"):
            table.add_column(col)
        for m in data.models:
            table.add_row(m.name, m.target_key, str(len(m.kernels)), format_cost(m.best_cost, m.unit),
                          format_cost(m.chosen_cost, m.unit), format_cost(m.default_cost, m.unit),
                          format_ratio(m.speedup), str(m.trials), str(m.failures))
        _print(console, table)
    if data.kernels:
        table = Table(title="kernels")
        for col in ("kernel", "target", "best", "compile uses", "chosen", "default", "speed-up", "trials",
                    "failures"):
            table.add_column(col)
        for k in data.kernels[:KERNEL_ROWS]:
            failures = ", ".join(f"{n} {s}" for s, n in k.failures.items()) or "0"
            table.add_row(k.name, k.target_key, format_cost(k.best_cost, k.unit), k.compile_uses,
                          format_cost(k.chosen_cost, k.unit), format_cost(k.default_cost, k.unit),
                          format_ratio(k.speedup), str(k.trials), failures)
        _print(console, table)
        if len(data.kernels) > KERNEL_ROWS:
            console.print(f"... and {len(data.kernels) - KERNEL_ROWS} more kernel(s)", markup=False)
    console.print("chosen: the time of what akg compile builds; speed-up = default / chosen (both from the tuner's "
                  "final comparison where it timed the default)", markup=False, style="dim")
    if data.failures:
        console.print("failures: " + ", ".join(f"{n} {s}" for s, n in data.failures.items()), markup=False)
    if baseline is None and not changes:
        return
    _print_changes(console, changes, baseline, threshold)


def _print_changes(console: Console, changes: list[Change], baseline: Baseline | None,
                   threshold: float | None) -> None:
    shown = [c for c in changes if c.verdict != "same"]
    if shown:
        table = Table(title="against the baseline" + (f" {baseline.source}" if baseline else ""))
        for col in ("kind", "name", "target", "baseline", "now", "change", "verdict"):
            table.add_column(col)
        for c in shown:
            table.add_row(c.kind, c.name, c.target_key, format_cost(c.before, c.unit), format_cost(c.after, c.unit),
                          format_change(c.ratio), c.verdict, style=_STYLE.get(c.verdict))
        _print(console, table)
    counts = {v: sum(1 for c in changes if c.verdict == v) for v in ("regression", "improvement", "same")}
    beyond = f" beyond {threshold:.1%}" if threshold is not None else ""
    line = (f"{counts['regression']} regression(s){beyond}, {counts['improvement']} improvement(s), "
            f"{counts['same']} unchanged against the baseline")
    console.print(line, style="bold red" if counts["regression"] else "green", markup=False)


def _print(console: Console, table: Table) -> None:
    """A table whole: folded in a terminal, at the width it needs elsewhere (a CI log)."""
    if console.is_terminal:
        for column in table.columns:
            column.overflow = "fold"
        console.print(table)
    else:
        Console(file=console.file, highlight=False, width=100_000, no_color=console.no_color).print(table)
