"""The report's figures, drawn with matplotlib (no pyplot, no display) and returned as SVG
`data:` URIs, so the HTML page carries them and needs nothing else: tuning curves against
trial and against wall time, and the statuses of every measurement."""

from __future__ import annotations

import base64
import io

from akg.report.data import FAILURE_STATUSES, ReportData

LEGEND_MAX = 12  # kernels named in a curve's legend; more are drawn unnamed
STYLE = {"svg.fonttype": "none", "font.family": "sans-serif", "font.size": 9, "axes.grid": True,
         "grid.alpha": 0.3, "svg.hashsalt": "akg-report"}


def figures(data: ReportData) -> dict[str, str] | None:
    """Title -> SVG data URI of each figure the report has data for; None without matplotlib
    (`pip install akg[report]`)."""
    try:
        import matplotlib
    except ImportError:
        return None

    out = {}
    with matplotlib.rc_context(STYLE):
        curves = [k for k in data.kernels if k.curve]
        if curves:
            out["Tuning curves against trial"] = _uri(_curves(curves, by_time=False))
            out["Tuning curves against wall time"] = _uri(_curves(curves, by_time=True))
        if data.trials:
            out["Measurements by status"] = _uri(_statuses(data))
    return out


def _curves(kernels, by_time: bool):
    """Each kernel's best cost so far relative to its final best (so kernels of any size share
    one log axis), drawn as steps."""
    from matplotlib.figure import Figure

    named = len(kernels) <= LEGEND_MAX
    fig = Figure(figsize=(8, 4 + (0.18 * ((len(kernels) + 1) // 2) if named else 0)), layout="constrained")
    ax = fig.add_subplot()
    for k in kernels:
        final = k.curve[-1].best
        xs = [p.measured_at if by_time else p.trial for p in k.curve]
        ys = [p.best / final if final > 0 else 1.0 for p in k.curve]
        ax.plot(xs, ys, drawstyle="steps-post", marker=".", linewidth=1.2, label=f"{k.name} ({k.target_key})")
    from matplotlib.ticker import FuncFormatter, NullFormatter

    top = max(p.best / k.curve[-1].best for k in kernels for p in k.curve if k.curve[-1].best > 0) \
        if any(k.curve[-1].best > 0 for k in kernels) else 1.0
    if top > 4:  # orders of magnitude: a log axis; a few percent: a linear one
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:.3g}x"))
    ax.set_ylabel("best so far / final best")
    if by_time:
        from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

        locator = AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        ax.set_xlabel("measured at (UTC)")
    else:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("trial (measurements of the kernel, every status)")
    if named:
        fig.legend(fontsize=7, loc="outside lower center", ncols=2, frameon=False)
    return fig


def _statuses(data: ReportData):
    from matplotlib.figure import Figure

    counts = {"ok": data.trials - data.failed, **{s: data.failures.get(s, 0) for s in FAILURE_STATUSES}}
    fig = Figure(figsize=(8, 2.8), layout="constrained")
    ax = fig.add_subplot()
    colors = ["#3a7d44"] + ["#c0392b"] * len(FAILURE_STATUSES)
    bars = ax.bar(list(counts), list(counts.values()), color=colors)
    ax.bar_label(bars, [str(n) for n in counts.values()])
    ax.set_ylabel("measurements")
    ax.grid(axis="x", visible=False)
    return fig


def _uri(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
