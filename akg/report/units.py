"""Numbers of a report as people read them: times in ns/us/ms/s, simulated cycles as counts,
speed-ups as `1.23x`, changes as `+4.2%`."""

from __future__ import annotations

_SCALES = ((1e-6, 1e9, "ns"), (1e-3, 1e6, "us"), (1.0, 1e3, "ms"))


def format_cost(cost: float | None, unit: str = "s") -> str:
    """A cost in its unit: seconds with four significant digits in the unit that fits
    (`79.21 us`), cycles (npu-sim) as a whole count (`12,345 cycles`); `-` when unknown."""
    if cost is None:
        return "-"
    if str(unit) != "s":
        return f"{cost:,.0f} {unit}"
    for below, scale, name in _SCALES:
        if cost < below:
            return f"{cost * scale:.4g} {name}"
    return f"{cost:.4g} s"


def format_ratio(value: float | None) -> str:
    """A speed-up: `1.23x`; `-` when unknown."""
    return "-" if value is None else f"{value:.2f}x"


def format_change(ratio: float | None) -> str:
    """after/before as a signed percentage: `+4.2%` is slower for a cost; `-` when unknown."""
    return "-" if ratio is None else f"{(ratio - 1) * 100:+.1f}%"
