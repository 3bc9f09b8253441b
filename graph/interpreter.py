"""The NumPy reference interpreter: the oracle every generated kernel is checked against."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from akg.errors import AkgError, InputDataError
from akg.graph.ir import Graph, Value
from akg.graph.types import TensorType, is_float, is_int


def bind_inputs(graph: Graph, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> dict[Value, np.ndarray]:
    """Match arrays to graph inputs (by name or position) and check their shapes and dtypes."""
    if isinstance(inputs, Mapping):
        extra = sorted(set(inputs) - {v.name for v in graph.inputs})
        if extra:
            raise InputDataError(
                f"unknown input(s) {', '.join(extra)}; the graph takes "
                f"{', '.join(v.name for v in graph.inputs) or 'none'}"
            )
        missing = [v.name for v in graph.inputs if v.name not in inputs]
        if missing:
            raise InputDataError(f"missing input(s): {', '.join(missing)}")
        arrays = [inputs[v.name] for v in graph.inputs]
    else:
        arrays = list(inputs)
        if len(arrays) != len(graph.inputs):
            raise InputDataError(f"graph '{graph.name}' takes {len(graph.inputs)} inputs, got {len(arrays)}")
    bound = {}
    for v, a in zip(graph.inputs, arrays):
        a = np.asarray(a)
        if a.shape != v.shape:
            raise InputDataError(f"input %{v.name} must have shape {list(v.shape)}, got {list(a.shape)}")
        if a.dtype != np.dtype(v.dtype):
            raise InputDataError(f"input %{v.name} must be {v.dtype}, got {a.dtype}")
        bound[v] = a
    return bound


def evaluate(graph: Graph, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray], *,
             keep_all: bool = False, float64: bool = False) -> list[np.ndarray] | dict[str, np.ndarray]:
    """Run `graph` on NumPy arrays; outputs in graph-output order (or every value by name).

    With float64=True every floating-point value is computed in float64 whatever its declared
    precision: an estimate of the exact result, to judge the rounding error of a float32 run.
    """
    env: dict[Value, np.ndarray] = dict(graph.constants)
    env.update(bind_inputs(graph, inputs))
    if float64:
        env = {v: _widen(a) for v, a in env.items()}
    for node in graph.nodes:
        args = [env[v] for v in node.inputs]
        try:
            with np.errstate(all="ignore"):
                results = node.opdef.evaluate(args, node.attrs)
        except IndexError as e:
            raise InputDataError(f"op '{node.op}' producing %{node.outputs[0].name}: {e}") from None
        if len(results) != len(node.outputs):
            raise AkgError(f"internal: reference of '{node.op}' gave {len(results)} outputs")
        for v, r in zip(node.outputs, results):
            r = np.asarray(r)
            if r.shape != v.shape:
                raise AkgError(
                    f"internal: reference of '{node.op}' gave shape {list(r.shape)} for {v!r}"
                )
            env[v] = _widen(r) if float64 and is_float(v.dtype) else r.astype(v.dtype, copy=False)
    if keep_all:
        return {v.name: a for v, a in env.items()}
    return [env[v] for v in graph.outputs]


def _widen(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def random_array(t: TensorType, rng: np.random.Generator, high: int | None = None) -> np.ndarray:
    """Non-zero test data: N(0, 1) floats, ints in [0, high) or [-8, 8), random bools."""
    if is_float(t.dtype):
        wide = "float64" if t.dtype == "float64" else "float32"
        return rng.standard_normal(t.shape, dtype=wide).astype(t.dtype, copy=False)
    if is_int(t.dtype):
        lo, hi = (0, high) if high is not None else (0 if t.dtype == "uint8" else -8, 8)
        return rng.integers(lo, hi, size=t.shape, dtype=t.dtype)
    return rng.integers(0, 2, size=t.shape, dtype=np.uint8).astype(bool)


def index_bounds(graph: Graph) -> dict[Value, int]:
    """For inputs used as indices (gather, one_hot, loss labels), the exclusive upper bound."""
    bounds: dict[Value, int] = {}
    for node in graph.nodes:
        hook = node.opdef.index_bounds
        if hook is None:
            continue
        for pos, bound in hook(*(v.type for v in node.inputs), **node.attrs).items():
            v = node.inputs[pos]
            bounds[v] = min(bound, bounds.get(v, bound))
    return bounds


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic random inputs by name; index inputs stay in range."""
    rng = np.random.default_rng(seed)
    bounds = index_bounds(graph)
    return {v.name: random_array(v.type, rng, bounds.get(v)) for v in graph.inputs}
