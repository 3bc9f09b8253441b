"""Verification of generated kernels against the NumPy reference interpreter.

An output element passes when it is within a dtype tolerance of the float64 reference
(relative to the output's scale), or no more than 4x as far from it as NumPy's own result in
the declared precision is: random test inputs can be ill-conditioned (a division by a tiny
denominator, a long sum), and then the reference itself is only that accurate. Non-float
outputs must match exactly; NaNs must sit where the reference has them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from akg.graph.interpreter import evaluate
from akg.graph.ir import Graph

TOLERANCE = {"float16": 5e-3, "float32": 1e-5, "float64": 1e-9}
REFERENCE_SLACK = 4.0


@dataclass(frozen=True)
class Mismatch:
    output: str
    bad: int
    total: int
    worst: float  # largest absolute error among the bad elements

    def __str__(self) -> str:
        return f"output {self.output}: {self.bad} of {self.total} elements differ (worst error {self.worst:.3g})"


@dataclass
class Reference:
    """The reference outputs of a graph on some inputs, in declared precision and float64."""

    declared: list[np.ndarray]
    exact: list[np.ndarray]

    @classmethod
    def of(cls, graph: Graph, inputs: Mapping[str, np.ndarray]) -> "Reference":
        return cls(evaluate(graph, inputs), evaluate(graph, inputs, float64=True))


def compare(graph: Graph | Sequence[str], outputs: Sequence[np.ndarray], reference: Reference) -> list[Mismatch]:
    """Every output that fails the check, with how badly. `graph` gives the output names
    (a Graph, or the names themselves)."""
    names = [v.name for v in graph.outputs] if isinstance(graph, Graph) else list(graph)
    bad = []
    for name, got, ref, exact in zip(names, outputs, reference.declared, reference.exact):
        got = np.asarray(got)
        if got.shape != ref.shape:
            bad.append(Mismatch(name, got.size, ref.size, float("inf")))
            continue
        if ref.dtype.kind != "f":
            wrong = got != ref
            if wrong.any():
                bad.append(Mismatch(name, int(wrong.sum()), wrong.size, float("nan")))
            continue
        tol = TOLERANCE.get(str(ref.dtype), 1e-5)
        g, e, r = got.astype(np.float64), exact.astype(np.float64), ref.astype(np.float64)
        finite = np.isfinite(e)
        scale = max(1.0, float(np.abs(e[finite]).max())) if finite.any() else 1.0
        with np.errstate(invalid="ignore"):
            error = np.abs(g - e)
            allowed = tol * scale + REFERENCE_SLACK * np.abs(r - e)
            ok = (error <= allowed) | (np.isnan(g) & np.isnan(r)) | ((g == e) & ~finite)
        if not ok.all():
            worst = float(np.nanmax(np.where(ok, 0.0, error))) if (~ok).any() else 0.0
            bad.append(Mismatch(name, int((~ok).sum()), ok.size, worst))
    return bad
