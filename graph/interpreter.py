"""The NumPy reference interpreter: the oracle every generated kernel is checked against."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from akg.errors import AkgError, InputDataError, TooLargeError
from akg.graph.ir import Graph, Value
from akg.graph.memory import require_values
from akg.graph.types import COMPLEX_PART, TensorType, is_complex, is_float, is_int, is_storage


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
    results_of = [v for n in graph.nodes for v in n.outputs]
    require_values(results_of, f"graph '{graph.name}'", "to evaluate", factor=2 if float64 else 1)
    try:
        return _evaluate(graph, env, keep_all, float64)
    except MemoryError as e:  # more than the check foresaw (NumPy temporaries)
        raise TooLargeError(f"evaluating graph '{graph.name}': out of memory ({e})") from None


def _evaluate(graph: Graph, env: dict[Value, np.ndarray], keep_all: bool, float64: bool):
    if float64:
        env = {v: _widen(a) for v, a in env.items()}
    for node in graph.nodes:
        args = [env[v] for v in node.inputs]
        if node.op != "cast":  # storage types (bfloat16, float8) are computed in float32
            args = [a.astype(np.float32) if is_storage(v.dtype) else a for v, a in zip(node.inputs, args)]
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
            wide = float64 and (is_float(v.dtype) or is_complex(v.dtype))
            env[v] = _widen(r) if wide else r.astype(v.dtype, copy=False)
    if keep_all:
        return {v.name: a for v, a in env.items()}
    return [env[v] for v in graph.outputs]


def _widen(a: np.ndarray) -> np.ndarray:
    """float -> float64, complex -> complex128 (NumPy evaluates complex64 natively)."""
    if a.dtype.kind == "c":
        return a.astype(np.complex128)
    return a.astype(np.float64) if a.dtype.kind == "f" or is_storage(a.dtype.name) else a


def random_array(t: TensorType, rng: np.random.Generator, high: int | None = None) -> np.ndarray:
    """Non-zero test data: N(0, 1) floats, ints in [-8, 8) ([0, 8) unsigned), random bools.
    With `high` (an index input's exclusive bound) the values are whole numbers in
    [0, high), also for a float array that is cast to indices; a bound beyond what the dtype
    holds is cut to it."""
    require_values([t], f"a random {t} array")
    if high is not None and t.dtype != "bool":
        top = high if is_float(t.dtype) else min(high, int(np.iinfo(t.dtype).max) + 1)
        if top <= 0:  # nothing is in range (an empty axis): zeros, which the op reports
            return np.zeros(t.shape, t.dtype)
        if is_float(t.dtype):
            return rng.integers(0, top, size=t.shape).astype(t.dtype)
        return rng.integers(0, top, size=t.shape, dtype=t.dtype)
    if is_complex(t.dtype):  # N(0, 1) real and imaginary parts
        part = TensorType(t.shape, COMPLEX_PART[t.dtype])
        re, im = random_array(part, rng), random_array(part, rng)
        return (re + 1j * im).astype(t.dtype)
    if is_float(t.dtype):
        wide = "float64" if t.dtype == "float64" else "float32"
        return rng.standard_normal(t.shape, dtype=wide).astype(t.dtype, copy=False)
    if is_int(t.dtype):
        lo, hi = (0 if t.dtype.startswith("uint") else -8, 8)
        return rng.integers(lo, hi, size=t.shape, dtype=t.dtype)
    return rng.integers(0, 2, size=t.shape, dtype=np.uint8).astype(bool)


# Ops whose output holds every value of their inputs (moved, repeated, converted; pad and dilate
# add a fill value), so a bound on the output's values is one on theirs.
_COVERING = frozenset({"reshape", "transpose", "broadcast_to", "squeeze", "expand_dims", "concat", "pad",
                       "dilate", "cast"})
# Ops whose output holds some of their input's values: a bound through them is a sufficient one.
_DROPPING = frozenset({"slice", "strided_slice", "split"})


def index_bounds(graph: Graph, *, sufficient: bool = False) -> dict[Value, int]:
    """The exclusive upper bound of every value used as indices (gather, scatter_add, one_hot,
    loss labels), carried back through the reshapes, transposes, concats and integer casts
    between a graph input and the op that indexes with it: values in [0, bound) are in range,
    and every value outside it reaches the op (what a check of given inputs needs).

    With `sufficient`, bounds also go through slices (which drop values) and float-to-int
    casts: values in [0, bound) still stay in range, which is what random data needs, but a
    value outside it may never reach the op."""
    through = _COVERING | _DROPPING if sufficient else _COVERING
    bounds: dict[Value, int] = {}

    def bound(v: Value, b: int) -> None:
        bounds[v] = min(b, bounds.get(v, b))

    for node in graph.nodes:
        hook = node.opdef.index_bounds
        if hook is None:
            continue
        if not sufficient and node.attrs.get("ignore_index") is not None:
            continue  # labels may also hold the ignored one: a bound for random data only
        for pos, b in hook(*(v.type for v in node.inputs), **node.attrs).items():
            bound(node.inputs[pos], b)
    for node in reversed(graph.nodes):  # consumers first: a bound flows up to the inputs
        outs = [bounds[v] for v in node.outputs if v in bounds]
        if not outs:
            continue
        b = min(outs)
        if node.op == "gather" and sufficient:  # indices read from a table: bound its values
            bound(node.inputs[0], b)
        if node.op not in through:
            continue
        for v in node.inputs:
            if node.op == "cast" and not (is_int(v.dtype) or (sufficient and is_float(v.dtype))):
                continue
            bound(v, b)
    return bounds


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic random inputs by name; index inputs stay in range. TooLargeError before
    anything is allocated when they do not fit in memory."""
    require_values(graph.inputs, f"graph '{graph.name}'", "for its inputs")
    rng = np.random.default_rng(seed)
    bounds = index_bounds(graph, sufficient=True)
    return {v.name: random_array(v.type, rng, bounds.get(v)) for v in graph.inputs}
