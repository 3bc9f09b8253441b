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
from akg.graph.ir import Graph, Value

TOLERANCE = {"float16": 5e-3, "bfloat16": 1e-2, "float32": 1e-5, "float64": 1e-9}


def _parts(a: np.ndarray) -> np.ndarray:
    """A complex array as real numbers: (re, im) along a new last axis (complex64 -> float32,
    complex128 -> float64); other arrays unchanged. Each part is checked as a float output."""
    a = np.asarray(a)
    if a.dtype.kind != "c":
        return a
    return np.stack([a.real, a.imag], axis=-1)
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
    """The reference outputs of a graph on some inputs, in declared precision and float64;
    `narrowest[i]`: the narrowest float dtype that output i's values pass through (its own
    dtype, or a float16/bfloat16 value upstream: the float64 reference rounds through that cast
    too, so a kernel whose float32 sum lands on the other side of one of its rounding midpoints
    is a float16 ulp away; such an output is held to that dtype's tolerance)."""

    declared: list[np.ndarray]
    exact: list[np.ndarray]
    narrowest: list[str] | None = None

    @classmethod
    def of(cls, graph: Graph, inputs: Mapping[str, np.ndarray]) -> "Reference":
        return cls(evaluate(graph, inputs), evaluate(graph, inputs, float64=True), _narrowest(graph))

    def tolerance_dtype(self, i: int, dtype) -> str:
        """The dtype whose tolerance output i (of `dtype`) is held to."""
        dtype = str(dtype)
        narrow = self.narrowest[i] if self.narrowest is not None else dtype
        return narrow if TOLERANCE.get(narrow, 0.0) > TOLERANCE.get(dtype, 0.0) else dtype


def _narrowest(graph: Graph) -> list[str]:
    """Per output: the dtype with the loosest tolerance among the values that nodes compute on
    the way to it (inputs and constants are exact data, whatever their dtype: ""); the graph's
    nodes come in topological order."""
    def loosest(a: str, b: str) -> str:
        return b if TOLERANCE.get(b, 0.0) > TOLERANCE.get(a, 0.0) else a

    narrowest: dict[Value, str] = {}
    for node in graph.nodes:
        upstream = ""
        for x in node.inputs:
            upstream = loosest(upstream, narrowest.get(x, ""))
        for out in node.outputs:
            narrowest[out] = loosest(str(out.dtype), upstream)
    return [narrowest.get(v, "") for v in graph.outputs]


def compare(graph: Graph | Sequence[str], outputs: Sequence[np.ndarray], reference: Reference) -> list[Mismatch]:
    """Every output that fails the check, with how badly. `graph` gives the output names
    (a Graph, or the names themselves)."""
    names = [v.name for v in graph.outputs] if isinstance(graph, Graph) else list(graph)
    bad = []
    for i, (name, got, ref, exact) in enumerate(zip(names, outputs, reference.declared, reference.exact)):
        got = np.asarray(got)
        if got.shape != ref.shape:
            bad.append(Mismatch(name, got.size, ref.size, float("inf")))
            continue
        if ref.dtype.kind == "c":  # real and imaginary parts, each as a float output
            if got.dtype.kind != "c":
                bad.append(Mismatch(name, got.size, ref.size, float("inf")))
                continue
            got, ref, exact = _parts(got), _parts(ref), _parts(exact)
        if got.shape != ref.shape:
            bad.append(Mismatch(name, got.size, ref.size, float("inf")))
            continue
        if not _floating(ref.dtype):
            wrong = got != ref
            if wrong.any():
                bad.append(Mismatch(name, int(wrong.sum()), wrong.size, float("nan")))
            continue
        tol = TOLERANCE.get(reference.tolerance_dtype(i, ref.dtype), 1e-5)
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


# --- the check of `akg run --check`: per-output verdicts with explicit tolerances ---------------

# Defaults of `--rtol` / `--atol` by output dtype. An element passes when
#   |got - ref| <= atol + rtol * |ref| + REFERENCE_SLACK * |ref_declared - ref|
# (ref: the reference interpreter in float64; ref_declared: the reference in the declared
# precision, whose own error stands for how ill-conditioned the element is), or when got and
# the declared-precision reference are the same non-finite value (both NaN, both +inf or both
# -inf). A NaN or infinity on one side only always fails. Integer and bool outputs must match
# exactly.
DEFAULT_RTOL = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-4, "float64": 1e-9}
DEFAULT_ATOL = {"float16": 1e-3, "bfloat16": 1e-2, "float32": 1e-5, "float64": 1e-12}


def _floating(dtype: np.dtype) -> bool:
    """Float outputs are compared within a tolerance: NumPy's floats and the storage floats
    (bfloat16, float8: ml_dtypes' kind 'V'), which were compared bit for bit."""
    from akg.graph.types import is_storage

    return dtype.kind == "f" or is_storage(str(dtype))


def default_tolerance(dtype: str) -> tuple[float, float]:
    """(rtol, atol) of `--check` for an output of `dtype` (exact for non-float dtypes)."""
    return DEFAULT_RTOL.get(str(dtype), 1e-4), DEFAULT_ATOL.get(str(dtype), 1e-5)


@dataclass(frozen=True)
class OutputCheck:
    """The verdict on one output: how many elements differ, the largest error among finite
    elements, and the NaNs on each side (a NaN the reference has too is not an error, but
    it is reported: those elements say nothing, and the inputs may be outside the model's
    domain)."""

    output: str
    dtype: str
    total: int
    bad: int
    max_error: float  # largest |got - ref|: inf if a NaN/inf is on one side only (0.0 if no elements)
    rtol: float
    atol: float
    nan_only_got: int = 0  # NaN (or inf) in the output where the reference is finite or differs
    nan_only_ref: int = 0  # NaN (or inf) in the reference where the output is finite or differs
    nan_both: int = 0  # NaN in both
    shape_mismatch: str = ""

    @property
    def ok(self) -> bool:
        return self.bad == 0 and not self.shape_mismatch

    def __str__(self) -> str:
        verdict = "pass" if self.ok else "FAIL"
        if self.shape_mismatch:
            return f"%{self.output}: FAIL: {self.shape_mismatch}"
        floating = self.dtype.startswith(("float", "bfloat"))
        parts = [f"{self.bad} of {self.total} elements differ"] if self.bad else []
        if self.nan_only_got:
            parts.append(f"{self.nan_only_got} NaN/inf where the reference is finite or differs")
        if self.nan_only_ref:
            parts.append(f"{self.nan_only_ref} NaN/inf in the reference only")
        if floating:
            parts.append(f"max error {self.max_error:.3g}")
        tol = f" (rtol {self.rtol:g}, atol {self.atol:g})" if floating else " (exact)"
        if not parts:
            parts.append("all equal")
        if self.nan_both:
            parts.append(f"{self.nan_both} of {self.total} NaN in both (not checked: the reference is NaN there too)")
        return f"%{self.output}: {verdict}: " + ", ".join(parts) + tol


def nan_aware_error(got: np.ndarray, ref: np.ndarray) -> float:
    """The largest |got - ref|, where a NaN or infinity on one side only (or infinities of
    opposite signs) is an infinite error and NaN against NaN is none; 0.0 for no elements."""
    g = np.asarray(got, np.float64)
    r = np.asarray(ref, np.float64)
    if g.size == 0:
        return 0.0
    with np.errstate(invalid="ignore"):
        same_nonfinite = (np.isnan(g) & np.isnan(r)) | ((g == r) & ~np.isfinite(r))
        error = np.where(same_nonfinite, 0.0, np.abs(g - r))
    error = np.where(np.isnan(error), np.inf, error)
    return float(error.max())


def check_outputs(names: Sequence[str], outputs: Sequence[np.ndarray], reference: Reference,
                  rtol: float | None = None, atol: float | None = None) -> list[OutputCheck]:
    """One OutputCheck per output (see DEFAULT_RTOL for the rule); `rtol`/`atol` None take
    the defaults of each output's dtype."""
    checks = []
    for i, (name, got, ref, exact) in enumerate(zip(names, outputs, reference.declared, reference.exact)):
        got, ref, exact = np.asarray(got), np.asarray(ref), np.asarray(exact)
        dtype = str(ref.dtype)
        if ref.dtype.kind == "c" and got.dtype == ref.dtype and got.shape == ref.shape:
            got, ref, exact = _parts(got), _parts(ref), _parts(exact)  # parts as float outputs
        d_rtol, d_atol = default_tolerance(reference.tolerance_dtype(i, ref.dtype))
        rt = d_rtol if rtol is None else rtol
        at = d_atol if atol is None else atol
        if got.shape != ref.shape or got.dtype != ref.dtype:
            checks.append(OutputCheck(name, dtype, ref.size, ref.size, float("inf"), rt, at,
                                      shape_mismatch=f"got {got.dtype}{list(got.shape)}, "
                                                     f"the reference is {ref.dtype}{list(ref.shape)}"))
            continue
        if not _floating(ref.dtype):
            wrong = got != ref
            checks.append(OutputCheck(name, dtype, ref.size, int(wrong.sum()),
                                      float(wrong.any()), 0.0, 0.0))
            continue
        g, r, e = got.astype(np.float64), ref.astype(np.float64), exact.astype(np.float64)
        g_fin, r_fin = np.isfinite(g), np.isfinite(r)
        e = np.where(np.isfinite(e), e, r)  # where float64 overflows, compare with the declared one
        both = g_fin & r_fin
        with np.errstate(invalid="ignore", over="ignore"):
            error = np.where(both, np.abs(g - e), 0.0)
            allowed = at + rt * np.abs(e) + REFERENCE_SLACK * np.abs(r - e)
            same_nonfinite = (np.isnan(g) & np.isnan(r)) | ((g == r) & ~r_fin)
        ok = (both & (error <= allowed)) | same_nonfinite
        nan_only_got, nan_only_ref = int((~g_fin & ~same_nonfinite).sum()), int((~r_fin & g_fin).sum())
        worst = float("inf") if nan_only_got or nan_only_ref else (float(error.max()) if error.size else 0.0)
        checks.append(OutputCheck(name, dtype, ref.size, int((~ok).sum()), worst, rt, at, nan_only_got=nan_only_got,
                                  nan_only_ref=nan_only_ref, nan_both=int((np.isnan(g) & np.isnan(r)).sum())))
    return checks
