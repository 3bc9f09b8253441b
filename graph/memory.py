"""Memory checks made before arrays are allocated: a model whose tensors cannot fit stops with a
TooLargeError that says how much it needs ("needs 2.8 PiB"), not a MemoryError half-way.

Every place in the graph layer that makes arrays from types (random inputs, the reference
interpreter, constants filled from a literal, initial training state) asks `require_memory`
first; `plan_model` asks `check_model_memory` before planning a model's kernels.
The limit is this machine's physical memory; `AKG_MEMORY_LIMIT` (bytes, or with a suffix
K/M/G/T/P: `16G`) overrides it.
"""

from __future__ import annotations

import os
import re
from typing import Iterable

from akg.errors import TooLargeError

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50, "E": 2**60}


def format_bytes(n: int) -> str:
    """1536 -> '1.5 KiB', 3.1e18 -> '2.7 EiB'."""
    value, unit = float(n) if n < 2**1000 else float("inf"), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{int(n)} B"
    if value >= 1024:  # beyond YiB
        return f"more than 1024 {_UNITS[-1]}"
    return f"{value:.1f} {_UNITS[unit]}"


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_limit() -> int | None:
    """The most bytes akg allocates for one model: $AKG_MEMORY_LIMIT, else physical memory
    (None: unknown, no check)."""
    text = os.environ.get("AKG_MEMORY_LIMIT", "").strip()
    if text:
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGTPE]?)(?:i?B)?", text, re.IGNORECASE)
        if m:
            return int(float(m.group(1)) * _SUFFIX[m.group(2).upper()])
    return _physical_memory()


def require_memory(nbytes: int, who: str, purpose: str = "", detail: str = "") -> None:
    """TooLargeError "<who> needs <nbytes> <purpose> (<detail>), more than ..." when `nbytes`
    exceeds the memory limit."""
    limit = memory_limit()
    if limit is None or nbytes <= limit:
        return
    source = "AKG_MEMORY_LIMIT" if os.environ.get("AKG_MEMORY_LIMIT", "").strip() else "this machine's memory"
    text = f"{who} needs {format_bytes(nbytes)}" + (f" {purpose}" if purpose else "")
    raise TooLargeError(text + (f" ({detail})" if detail else "") + f", more than {source} ({format_bytes(limit)})")


def require_values(values: Iterable, who: str, purpose: str = "", factor: int = 1) -> None:
    """`require_memory` for arrays of the types of `values` (Values or TensorTypes), naming the
    largest; `factor` scales the need (2 when each is made twice, say)."""
    items = [(getattr(v, "type", v), getattr(v, "name", None)) for v in values]
    total = factor * sum(t.nbytes for t, _ in items)
    limit = memory_limit()
    if limit is None or total <= limit or not items:
        return
    t, name = max(items, key=lambda item: item[0].nbytes)
    label = f"%{name}: {t}" if name else str(t)
    detail = (f"{label} alone is {format_bytes(t.nbytes)}" if len(items) > 1
              else label if name else "")
    require_memory(total, who, purpose, detail)


def check_model_memory(graph) -> None:
    """What running `graph` needs at the least: its inputs, constants and outputs, which live
    through a whole run, and its largest intermediate value; TooLargeError when that does not
    fit."""
    kept = {*graph.inputs, *graph.constants, *graph.outputs}
    others = [v for n in graph.nodes for v in n.outputs if v not in kept]
    largest = max(others, key=lambda v: v.type.nbytes, default=None)
    values = [*kept] + ([largest] if largest is not None else [])
    require_values(values, f"model '{graph.name}'", "to run")
