"""Layout of constant weights, decided once at compile time.

A matmul whose right operand is a constant (a dense layer's weight) reads it in column
panels: the kernel's register tile walks the reduction with a strip of `PANEL` columns, and
CPU mappings copy ("pack") each panel into a contiguous local buffer per call. For a
constant the copy can be done once: `pack_weights` stores the weight as panels
`[N / PANEL, K, PANEL]` (each panel a contiguous K x PANEL block) and reads it back through
a transpose + reshape, which fusion folds into the matmul kernel as index arithmetic. The
kernel then streams each panel contiguously and needs no pack copy (the promoter skips a
panel that is already one contiguous slice). Values are unchanged: this is a relayout.

PANEL = 16 float32 is one 64-byte cache line: two AVX2 vectors, one AVX-512 vector.
"""

from __future__ import annotations

import logging

import numpy as np

from akg.graph.ir import Graph, Value
from akg.graph.simplify import _Rewriter, dce
from akg.graph.types import TensorType

log = logging.getLogger(__name__)

PANEL = 16


def pack_weights(graph: Graph, panel: int = PANEL) -> Graph:
    """Constant right operands of matmul stored as `[N / panel, K, panel]` panels."""
    rw = _Rewriter(graph)
    packed: dict[tuple[Value, bool], Value] = {}  # (weight, transposed) -> its unpacked view
    for node in rw.walk():
        ins = rw.inputs(node)
        weight = rw.constants.get(ins[1]) if node.op == "matmul" and len(ins) == 2 else None
        if weight is None or weight.ndim != 2:
            rw.keep(node)
            continue
        transposed = bool(node.attrs["transpose_b"])
        k, n = weight.shape[::-1] if transposed else weight.shape
        if n % panel or n <= panel or k < 2:
            rw.keep(node)
            continue
        key = (ins[1], transposed)
        if key not in packed:
            packed[key] = _emit_panels(rw, ins[1], weight, transposed, k, n, panel)
        attrs = {**node.attrs, "transpose_b": False}
        rw.emit("matmul", [ins[0], packed[key]], attrs, node.outputs)
        rw.changes += 1
    if not packed:
        return graph
    log.debug("pack_weights on %s: %d weight(s) stored as %d-column panels", graph.name, len(packed), panel)
    return dce(rw.finish("pack_weights"))


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
