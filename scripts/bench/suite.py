"""The kernel benchmark suite: plain TE workloads + NumPy references + FLOP/byte counts.

``WORKLOADS: dict[str, Workload]``.  For each workload:

* ``w.te()``          -> list of te tensors, inputs first then outputs (no schedule);
                         ``te.create_prim_func(w.te())`` gives the PrimFunc.
* ``w.inputs(rng)``   -> list of NumPy input arrays (``rng = np.random.default_rng(seed)``)
* ``w.numpy(arrays)`` -> NumPy reference output(s) for the list of inputs.  A *module-level*
                         function, so ``peers.numpy_baseline(w.numpy, arrays)`` can time it in
                         a clean subprocess.  (bias_gelu uses ``scipy.special.erf``: NumPy has
                         no erf.)
* ``w.flops``, ``w.bytes`` -> nominal FLOPs and compulsory DRAM bytes (each input read once,
                         each output written once) per call; ``w.bound`` says which of
                         GFLOP/s ("compute") or GB/s ("memory") is the meaningful rate.
* ``w.output_shapes`` / ``w.alloc_outputs()`` -> output buffers for a kernel call.
* ``w.rtol``/``w.atol`` -> tolerances for checking a kernel against ``w.numpy``.

This module imports TVM lazily (only inside ``te()`` builders) so the NumPy
subprocess never loads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

F32 = "float32"


@dataclass
class Workload:
    name: str
    te: Callable[[], list]  # () -> [te inputs..., te outputs...]
    numpy: Callable[[list], np.ndarray | list]  # (inputs) -> output(s)
    inputs: Callable[[np.random.Generator], list]  # (rng) -> [np inputs...]
    flops: float
    bytes: float
    output_shapes: list[tuple[int, ...]]
    bound: str = "compute"  # "compute" -> report GFLOP/s, "memory" -> GB/s
    rtol: float = 1e-4
    atol: float = 1e-4
    description: str = ""
    notes: dict = field(default_factory=dict)

    def alloc_outputs(self) -> list[np.ndarray]:
        return [np.zeros(s, np.float32) for s in self.output_shapes]

    def reference(self, arrays) -> list[np.ndarray]:
        out = self.numpy(arrays)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def check(self, inputs, outputs) -> tuple[bool, float]:
        """Compare kernel outputs with the NumPy reference -> (ok, max abs error)."""
        ref = self.reference(inputs)
        err = max(float(np.max(np.abs(np.asarray(o) - r))) for o, r in zip(outputs, ref))
        ok = all(np.allclose(o, r, rtol=self.rtol, atol=self.atol) for o, r in zip(outputs, ref))
        return ok, err

    def rate(self, seconds: float) -> tuple[float, str]:
        """(GFLOP/s or GB/s, unit) for a measured time, per ``bound``."""
        if self.bound == "memory":
            return self.bytes / seconds / 1e9, "GB/s"
        return self.flops / seconds / 1e9, "GFLOP/s"


def _te():
    from tvm import te  # pylint: disable=import-outside-toplevel

    return te


def _rand(rng, shape, scale=1.0):
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(F32)


# ----------------------------------------------------------------------------- matmul
MM_M = MM_N = MM_K = 1024


def te_matmul(M=MM_M, N=MM_N, K=MM_K):
    te = _te()
    A = te.placeholder((M, K), F32, name="A")
    B = te.placeholder((K, N), F32, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def np_matmul(arrays):
    A, B = arrays[:2]
    return A @ B


def in_matmul(rng):
    return [_rand(rng, (MM_M, MM_K)), _rand(rng, (MM_K, MM_N))]


# ----------------------------------------------------------------------- batch_matmul
BMM_B, BMM_M, BMM_K, BMM_N = 12, 128, 64, 128


def te_batch_matmul(Bt=BMM_B, M=BMM_M, K=BMM_K, N=BMM_N):
    te = _te()
    A = te.placeholder((Bt, M, K), F32, name="A")
    B = te.placeholder((Bt, K, N), F32, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((Bt, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    return [A, B, C]


def np_batch_matmul(arrays):
    A, B = arrays[:2]
    return np.matmul(A, B)


def in_batch_matmul(rng):
    return [_rand(rng, (BMM_B, BMM_M, BMM_K)), _rand(rng, (BMM_B, BMM_K, BMM_N))]


# ----------------------------------------------------------------------------- conv2d
# NCHW input 1x64x56x56, OIHW weight 64x64x3x3, stride 1, pad 1 -> 1x64x56x56
CV_N, CV_C, CV_H, CV_W, CV_K, CV_R, CV_S, CV_PAD = 1, 64, 56, 56, 64, 3, 3, 1


def te_conv2d():
    te = _te()
    N, C, H, W, K, R, S, P = CV_N, CV_C, CV_H, CV_W, CV_K, CV_R, CV_S, CV_PAD
    OH, OW = H + 2 * P - R + 1, W + 2 * P - S + 1
    X = te.placeholder((N, C, H, W), F32, name="X")
    Wt = te.placeholder((K, C, R, S), F32, name="W")
    Xp = te.compute(
        (N, C, H + 2 * P, W + 2 * P),
        lambda n, c, h, w: te.if_then_else(
            te.all(h >= P, h < H + P, w >= P, w < W + P),
            X[n, c, h - P, w - P],
            te.const(0.0, F32),
        ),
        name="Xpad",
    )
    rc = te.reduce_axis((0, C), name="rc")
    rr = te.reduce_axis((0, R), name="rr")
    rs = te.reduce_axis((0, S), name="rs")
    Y = te.compute(
        (N, K, OH, OW),
        lambda n, k, h, w: te.sum(Xp[n, rc, h + rr, w + rs] * Wt[k, rc, rr, rs],
                                  axis=[rc, rr, rs]),
        name="Y",
    )
    return [X, Wt, Y]


def np_conv2d(arrays):
    """im2col + one GEMM (the fastest plain-NumPy formulation)."""
    X, Wt = arrays[:2]
    N, C, H, W = X.shape
    K, _, R, S = Wt.shape
    P = CV_PAD
    OH, OW = H + 2 * P - R + 1, W + 2 * P - S + 1
    Xp = np.pad(X, ((0, 0), (0, 0), (P, P), (P, P)))
    cols = np.lib.stride_tricks.sliding_window_view(Xp, (R, S), axis=(2, 3))  # N,C,OH,OW,R,S
    cols = cols.transpose(0, 1, 4, 5, 2, 3).reshape(N, C * R * S, OH * OW)
    out = np.matmul(Wt.reshape(K, C * R * S), cols)
    return out.reshape(N, K, OH, OW)


def in_conv2d(rng):
    return [_rand(rng, (CV_N, CV_C, CV_H, CV_W)), _rand(rng, (CV_K, CV_C, CV_R, CV_S), 0.1)]


# ---------------------------------------------------------------------------- softmax
SM_M, SM_N = 4096, 1024


def te_softmax(M=SM_M, N=SM_N):
    te = _te()
    X = te.placeholder((M, N), F32, name="X")
    k1 = te.reduce_axis((0, N), name="k1")
    mx = te.compute((M,), lambda i: te.max(X[i, k1], axis=k1), name="row_max")
    ex = te.compute((M, N), lambda i, j: te.exp(X[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, N), name="k2")
    sm = te.compute((M,), lambda i: te.sum(ex[i, k2], axis=k2), name="row_sum")
    Y = te.compute((M, N), lambda i, j: ex[i, j] / sm[i], name="softmax")
    return [X, Y]


def np_softmax(arrays):
    X = arrays[0]
    e = np.exp(X - X.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def in_softmax(rng):
    return [_rand(rng, (SM_M, SM_N), 2.0)]


# ------------------------------------------------------------------------- layer_norm
LN_M, LN_N, LN_EPS = 4096, 1024, 1e-5


def te_layer_norm(M=LN_M, N=LN_N, eps=LN_EPS):
    te = _te()
    X = te.placeholder((M, N), F32, name="X")
    G = te.placeholder((N,), F32, name="gamma")
    Bt = te.placeholder((N,), F32, name="beta")
    k1 = te.reduce_axis((0, N), name="k1")
    s1 = te.compute((M,), lambda i: te.sum(X[i, k1], axis=k1), name="row_sum")
    mean = te.compute((M,), lambda i: s1[i] / te.const(float(N), F32), name="mean")
    k2 = te.reduce_axis((0, N), name="k2")
    s2 = te.compute(
        (M,), lambda i: te.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]), axis=k2),
        name="row_sqsum",
    )
    rstd = te.compute(
        (M,), lambda i: te.rsqrt(s2[i] / te.const(float(N), F32) + te.const(eps, F32)),
        name="rstd",
    )
    Y = te.compute(
        (M, N), lambda i, j: (X[i, j] - mean[i]) * rstd[i] * G[j] + Bt[j], name="layer_norm"
    )
    return [X, G, Bt, Y]


def np_layer_norm(arrays):
    X, G, B = arrays[:3]
    mean = X.mean(axis=-1, keepdims=True)
    var = X.var(axis=-1, keepdims=True)
    return (X - mean) / np.sqrt(var + np.float32(LN_EPS)) * G + B


def in_layer_norm(rng):
    return [_rand(rng, (LN_M, LN_N)), 1.0 + _rand(rng, (LN_N,), 0.1), _rand(rng, (LN_N,), 0.1)]


# -------------------------------------------------------------------------- bias_gelu
BG_M, BG_N = 4096, 3072
_INV_SQRT2 = 0.7071067811865476


def te_bias_gelu(M=BG_M, N=BG_N):
    """out = gelu(x + bias), gelu(v) = 0.5 v (1 + erf(v / sqrt 2)) -- the epilogue of a
    [4096 x 3072] matmul."""
    te = _te()
    X = te.placeholder((M, N), F32, name="X")
    Bv = te.placeholder((N,), F32, name="bias")

    def gelu(i, j):
        v = X[i, j] + Bv[j]
        return te.const(0.5, F32) * v * (
            te.const(1.0, F32) + te.erf(v * te.const(_INV_SQRT2, F32))
        )

    Y = te.compute((M, N), gelu, name="bias_gelu")
    return [X, Bv, Y]


def np_bias_gelu(arrays):
    from scipy.special import erf  # pylint: disable=import-outside-toplevel

    X, B = arrays[:2]
    v = X + B
    return np.float32(0.5) * v * (np.float32(1.0) + erf(v * np.float32(_INV_SQRT2)))


def in_bias_gelu(rng):
    return [_rand(rng, (BG_M, BG_N)), _rand(rng, (BG_N,), 0.1)]


# ------------------------------------------------------------------------- reduce_sum
RS_M, RS_N = 4096, 1024


def te_reduce_sum(M=RS_M, N=RS_N):
    te = _te()
    X = te.placeholder((M, N), F32, name="X")
    k = te.reduce_axis((0, N), name="k")
    Y = te.compute((M,), lambda i: te.sum(X[i, k], axis=k), name="reduce_sum")
    return [X, Y]


def np_reduce_sum(arrays):
    return arrays[0].sum(axis=-1)


def in_reduce_sum(rng):
    return [_rand(rng, (RS_M, RS_N))]


# --------------------------------------------------------------------------- rms_norm
RN_M, RN_N, RN_EPS = 4096, 1024, 1e-5


def te_rms_norm(M=RN_M, N=RN_N, eps=RN_EPS):
    """y = x / sqrt(mean(x^2) + eps) * gamma, over the last axis."""
    te = _te()
    X = te.placeholder((M, N), F32, name="X")
    G = te.placeholder((N,), F32, name="gamma")
    k = te.reduce_axis((0, N), name="k")
    sq = te.compute((M,), lambda i: te.sum(X[i, k] * X[i, k], axis=k), name="row_sqsum")
    rstd = te.compute((M,), lambda i: te.rsqrt(sq[i] / te.const(float(N), F32) + te.const(eps, F32)),
                      name="rstd")
    Y = te.compute((M, N), lambda i, j: X[i, j] * rstd[i] * G[j], name="rms_norm")
    return [X, G, Y]


def np_rms_norm(arrays):
    X, G = arrays[:2]
    return X / np.sqrt((X * X).mean(axis=-1, keepdims=True) + np.float32(RN_EPS)) * G


def in_rms_norm(rng):
    return [_rand(rng, (RN_M, RN_N)), 1.0 + _rand(rng, (RN_N,), 0.1)]


# ---------------------------------------------------------------- layer_norm_backward
LB_M, LB_N = 4096, 1024


def te_layer_norm_backward(M=LB_M, N=LB_N):
    """dx, dgamma, dbeta of a layer norm from dy, x and the forward's mean and rstd (per row,
    kept as [M, 1]) and gamma: xhat = (x - mean) rstd, g = dy gamma,
    dx = rstd (g - mean(g) - xhat mean(g xhat)), dgamma = sum_rows(dy xhat), dbeta = sum_rows(dy)."""
    te = _te()
    DY = te.placeholder((M, N), F32, name="dy")
    X = te.placeholder((M, N), F32, name="X")
    MU = te.placeholder((M, 1), F32, name="mean")
    RS = te.placeholder((M, 1), F32, name="rstd")
    G = te.placeholder((N,), F32, name="gamma")
    inv_n = te.const(1.0 / N, F32)

    def xhat(i, j):
        return (X[i, j] - MU[i, 0]) * RS[i, 0]

    k1 = te.reduce_axis((0, N), name="k1")
    m1 = te.compute((M,), lambda i: te.sum(DY[i, k1] * G[k1], axis=k1), name="m1")
    k2 = te.reduce_axis((0, N), name="k2")
    m2 = te.compute((M,), lambda i: te.sum(DY[i, k2] * G[k2] * xhat(i, k2), axis=k2), name="m2")
    DX = te.compute((M, N), lambda i, j: RS[i, 0] * (DY[i, j] * G[j] - m1[i] * inv_n - xhat(i, j) * m2[i] * inv_n),
                    name="dx")
    r1 = te.reduce_axis((0, M), name="r1")
    DG = te.compute((N,), lambda j: te.sum(DY[r1, j] * xhat(r1, j), axis=r1), name="dgamma")
    r2 = te.reduce_axis((0, M), name="r2")
    DB = te.compute((N,), lambda j: te.sum(DY[r2, j], axis=r2), name="dbeta")
    return [DY, X, MU, RS, G, DX, DG, DB]


def np_layer_norm_backward(arrays):
    dy, x, mean, rstd, g = arrays[:5]
    xhat = (x - mean) * rstd
    dyg = dy * g
    dx = rstd * (dyg - dyg.mean(axis=1, keepdims=True) - xhat * (dyg * xhat).mean(axis=1, keepdims=True))
    return [dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)]


def in_layer_norm_backward(rng):
    x = _rand(rng, (LB_M, LB_N))
    mean = x.mean(axis=1, keepdims=True)
    rstd = (1.0 / np.sqrt(x.var(axis=1, keepdims=True) + np.float32(LN_EPS))).astype(F32)
    return [_rand(rng, (LB_M, LB_N)), x, mean, rstd, 1.0 + _rand(rng, (LB_N,), 0.1)]


# ------------------------------------------------------------------------------ suite
_B = 4  # bytes per float32

WORKLOADS: dict[str, Workload] = {
    "matmul": Workload(
        "matmul", te_matmul, np_matmul, in_matmul,
        flops=2.0 * MM_M * MM_N * MM_K,
        bytes=_B * (MM_M * MM_K + MM_K * MM_N + MM_M * MM_N),
        output_shapes=[(MM_M, MM_N)], bound="compute", rtol=1e-3, atol=1e-3,
        description="C[1024,1024] = A[1024,1024] @ B[1024,1024], f32",
    ),
    "batch_matmul": Workload(
        "batch_matmul", te_batch_matmul, np_batch_matmul, in_batch_matmul,
        flops=2.0 * BMM_B * BMM_M * BMM_N * BMM_K,
        bytes=_B * BMM_B * (BMM_M * BMM_K + BMM_K * BMM_N + BMM_M * BMM_N),
        output_shapes=[(BMM_B, BMM_M, BMM_N)], bound="compute", rtol=1e-3, atol=1e-3,
        description="C[12,128,128] = A[12,128,64] @ B[12,64,128], f32",
    ),
    "conv2d": Workload(
        "conv2d", te_conv2d, np_conv2d, in_conv2d,
        flops=2.0 * CV_N * CV_K * CV_H * CV_W * CV_C * CV_R * CV_S,
        bytes=_B * (CV_N * CV_C * CV_H * CV_W + CV_K * CV_C * CV_R * CV_S
                    + CV_N * CV_K * CV_H * CV_W),
        output_shapes=[(CV_N, CV_K, CV_H, CV_W)], bound="compute", rtol=1e-3, atol=1e-3,
        description="NCHW 1x64x56x56 * 64x64x3x3, stride 1, pad 1, f32",
    ),
    "softmax": Workload(
        "softmax", te_softmax, np_softmax, in_softmax,
        # nominal: max, sub, exp, sum, div = 5 ops / element (exp counted as 1)
        flops=5.0 * SM_M * SM_N,
        bytes=_B * 2 * SM_M * SM_N,
        output_shapes=[(SM_M, SM_N)], bound="memory", rtol=1e-4, atol=1e-6,
        description="row softmax of X[4096,1024] f32 (max-subtracted)",
    ),
    "layer_norm": Workload(
        "layer_norm", te_layer_norm, np_layer_norm, in_layer_norm,
        # nominal: sum, sub, sq+acc (2), sub, mul rstd, mul gamma, add beta = 8 / element
        flops=8.0 * LN_M * LN_N,
        bytes=_B * (2 * LN_M * LN_N + 2 * LN_N),
        output_shapes=[(LN_M, LN_N)], bound="memory", rtol=1e-4, atol=1e-4,
        description="layer norm over last axis of X[4096,1024] f32, gamma/beta, eps=1e-5",
    ),
    "bias_gelu": Workload(
        "bias_gelu", te_bias_gelu, np_bias_gelu, in_bias_gelu,
        # nominal: add bias, scale, erf (1), add 1, mul v, mul 0.5 = 6 / element
        flops=6.0 * BG_M * BG_N,
        bytes=_B * (2 * BG_M * BG_N + BG_N),
        output_shapes=[(BG_M, BG_N)], bound="memory", rtol=1e-4, atol=1e-5,
        description="out = gelu_erf(x + bias), x[4096,3072], bias[3072], f32",
    ),
    "reduce_sum": Workload(
        "reduce_sum", te_reduce_sum, np_reduce_sum, in_reduce_sum,
        flops=1.0 * RS_M * RS_N,
        bytes=_B * (RS_M * RS_N + RS_M),
        output_shapes=[(RS_M,)], bound="memory", rtol=1e-4, atol=1e-3,
        description="sum over last axis of X[4096,1024] f32",
    ),
    "rms_norm": Workload(
        "rms_norm", te_rms_norm, np_rms_norm, in_rms_norm,
        # nominal: sq+acc (2), mul rstd, mul gamma = 4 / element
        flops=4.0 * RN_M * RN_N,
        bytes=_B * (2 * RN_M * RN_N + RN_N),
        output_shapes=[(RN_M, RN_N)], bound="memory", rtol=1e-4, atol=1e-4,
        description="rms norm over last axis of X[4096,1024] f32, gamma, eps=1e-5",
    ),
    "layer_norm_backward": Workload(
        "layer_norm_backward", te_layer_norm_backward, np_layer_norm_backward, in_layer_norm_backward,
        # nominal per element: xhat (2), dy*g, two row sums with their products (3), dx (5),
        # dgamma (2), dbeta (1) = 14
        flops=14.0 * LB_M * LB_N,
        bytes=_B * (3 * LB_M * LB_N + 2 * LB_M + 3 * LB_N),
        output_shapes=[(LB_M, LB_N), (LB_N,), (LB_N,)], bound="memory", rtol=1e-4, atol=1e-3,
        description="layer-norm backward: dx, dgamma, dbeta from dy, x, mean, rstd, gamma [4096,1024] f32",
    ),
}
