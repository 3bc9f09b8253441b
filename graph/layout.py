"""Layout of constant weights, decided once at compile time.

A matmul whose right operand is a constant (a dense layer's weight) reads it in column
panels: the kernel's register tile walks the reduction with a strip of `PANEL` columns, and
CPU mappings copy ("pack") each panel into a contiguous local buffer per call. For a
constant the copy can be done once: `pack_weights` stores the weight as panels
`[N / PANEL, K, PANEL]` (each panel a contiguous K x PANEL block) and reads it back through
a transpose + reshape, which fusion folds into the matmul kernel as index arithmetic. The
kernel then streams each panel contiguously and needs no pack copy (the promoter skips a
panel that is already one contiguous slice). Values are unchanged: this is a relayout.

The panel width is the width of the vector strip that a CPU register tile computes (two
vectors, or one when two do not divide the columns; `akg.schedules.cpu.vector_strip`), so that each vector
load of the tile is one contiguous slice of a panel: 16 float32 with AVX2, 32 with AVX-512. A
panel narrower than the strip makes every vector load a gather (on AVX-512, 16-column panels
ran the transformer's dense layers 3.5x slower than 32-column ones). Without a target the width
is `PANEL`.
"""

from __future__ import annotations

import logging

import numpy as np

from akg.graph.ir import Graph, Value
from akg.graph.simplify import _Rewriter, dce
from akg.graph.types import TensorType

log = logging.getLogger(__name__)

PANEL = 16


def weight_panel(target, dtype: str, columns: int) -> int | None:
    """Columns per panel of a `columns`-wide weight on `target` (None: `PANEL`), as the target
    says (`Target.weight_panel`: the CPU's register-tile vector strip); None: not stored as
    panels on that target."""
    if target is None:
        return PANEL
    return target.weight_panel(dtype, columns)


def pack_weights(graph: Graph, panel: int = PANEL, *, target=None) -> Graph:
    """Constant right operands of matmul stored as `[N / panel, K, panel]` panels; with a
    `target`, each weight's panel width is `weight_panel(target, ...)` instead of `panel`."""
    rw = _Rewriter(graph)
    widths = set()
    packed: dict[tuple[Value, bool], Value] = {}  # (weight, transposed) -> its unpacked view
    for node in rw.walk():
        ins = rw.inputs(node)
        weight = rw.constants.get(ins[1]) if node.op == "matmul" and len(ins) == 2 else None
        if weight is None or weight.ndim != 2:
            rw.keep(node)
            continue
        transposed = bool(node.attrs["transpose_b"])
        k, n = weight.shape[::-1] if transposed else weight.shape
        width = panel if target is None else weight_panel(target, ins[1].dtype, n)
        if width is None or n % width or n <= width or k < 2:
            rw.keep(node)
            continue
        key = (ins[1], transposed)
        if key not in packed:
            packed[key] = _emit_panels(rw, ins[1], weight, transposed, k, n, width)
            widths.add(width)
        attrs = {**node.attrs, "transpose_b": False}
        rw.emit("matmul", [ins[0], packed[key]], attrs, node.outputs)
        rw.changes += 1
    if not packed:
        return graph
    log.debug("pack_weights on %s: %d weight(s) stored as panels of %s columns", graph.name, len(packed),
              "/".join(map(str, sorted(widths))))
    return dce(rw.finish("pack_weights"))


# The values pack_weights derives from a constant matmul weight %W: the weight stored as panels
# and the transpose and reshape that read it back as [K, N] (".t": from a transposed weight).
DERIVED_SUFFIXES = tuple(f"{t}{tail}" for t in ("", ".t") for tail in (".panels", ".panels.kmajor", ".kn"))


def derived_names(planned, model) -> dict[str, str]:
    """Names of values in `planned` that pack_weights derived from a constant of `model` (the
    user's graph), mapped to that constant's name; names the user wrote are not included."""
    own = {v.name for v in model.values}
    present = {v.name for v in planned.values}
    return {v.name + sfx: v.name for v in model.constants for sfx in DERIVED_SUFFIXES
            if v.name + sfx in present and v.name + sfx not in own}


def _emit_panels(rw: _Rewriter, w: Value, weight: np.ndarray, transposed: bool, k: int, n: int,
                 panel: int) -> Value:
    """Add the panel constant and the transpose + reshape that read it as `[K, N]`."""
    if transposed:  # [N, K] -> [N / panel, panel, K] -> [N / panel, K, panel]
        panels = weight.reshape(n // panel, panel, k).transpose(0, 2, 1)
    else:  # [K, N] -> [K, N / panel, panel] -> [N / panel, K, panel]
        panels = weight.reshape(k, n // panel, panel).transpose(1, 0, 2)
    suffix = ".t" if transposed else ""
    stored = Value(f"{w.name}{suffix}.panels", TensorType((n // panel, k, panel), w.dtype))
    rw.constants[stored] = np.ascontiguousarray(panels)
    moved = Value(f"{w.name}{suffix}.panels.kmajor", TensorType((k, n // panel, panel), w.dtype))
    view = Value(f"{w.name}{suffix}.kn", TensorType((k, n), w.dtype))
    rw.emit("transpose", [stored], {"perm": [1, 0, 2]}, [moved])
    rw.emit("reshape", [moved], {"shape": [k, n]}, [view])
    return view
