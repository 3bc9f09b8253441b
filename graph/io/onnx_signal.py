"""ONNX's signal ops in the ONNX op table (`ONNX_OPS`): DFT and STFT as matmuls by constant
cos/sin matrices (static lengths; a complex tensor is [..., 2], real and imaginary parts), and
the window generators (Hann, Hamming, Blackman) as constants of their known size."""

from __future__ import annotations

import math

import numpy as np

from akg.graph.io.onnx_ops import ONNX_OPS, OnnxOpContext as Ctx, _dtype_attr
from akg.graph.ir import Value
from akg.graph.types import is_float


def dft_matrix(n_in: int, complex_in: bool, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """W[(n, part_in), (k, part_out)] with out = in @ W the DFT of `length` points along n
    (input zero-padded or cut to it): forward e^{-2 pi i k n / L}, inverse e^{+...} / L; onesided
    forward keeps k <= L / 2, onesided inverse (irfft) reads the bins n <= L / 2 as half of a
    Hermitian spectrum and gives a real output (part_out 1)."""
    parts_in = 2 if complex_in else 1
    if inverse and onesided:
        bins = min(n_in, length // 2 + 1)
        n = np.arange(bins)[:, None]
        k = np.arange(length)[None, :]
        theta = 2 * np.pi * n * k / length
        weight = np.full((bins, 1), 2.0)
        weight[0] = 1.0
        if length % 2 == 0 and bins == length // 2 + 1:
            weight[-1] = 1.0
        w = np.zeros((n_in, parts_in, length, 1))
        w[:bins, 0, :, 0] = weight * np.cos(theta) / length
        if complex_in:
            w[:bins, 1, :, 0] = -weight * np.sin(theta) / length
        return w.reshape(n_in * parts_in, length)
    outs = length // 2 + 1 if onesided and not inverse else length
    used = min(n_in, length)
    n = np.arange(used)[:, None]
    k = np.arange(outs)[None, :]
    theta = 2 * np.pi * n * k / length
    cos, sin = np.cos(theta), np.sin(theta)
    w = np.zeros((n_in, parts_in, outs, 2))
    if not inverse:
        w[:used, 0, :, 0], w[:used, 0, :, 1] = cos, -sin
        if complex_in:
            w[:used, 1, :, 0], w[:used, 1, :, 1] = sin, cos
    else:
        w[:used, 0, :, 0], w[:used, 0, :, 1] = cos / length, sin / length
        if complex_in:
            w[:used, 1, :, 0], w[:used, 1, :, 1] = -sin / length, cos / length
    return w.reshape(n_in * parts_in, outs * 2)


def _transform(c: Ctx, x: Value, axis: int, length: int, inverse: bool, onesided: bool, what: str) -> Value:
    """The DFT of x [..., parts] along `axis` (not the parts axis): the axis moved next to the
    parts, rows times the constant matrix, moved back."""
    rank = len(x.shape)
    parts = x.shape[-1]
    if parts not in (1, 2):
        raise c.fail(f"the last axis of {x.type} must be 1 (real) or 2 (complex)")
    if not is_float(x.dtype):
        raise c.unsupported(f"a DFT of {x.dtype} is not modelled (floating-point signals are)")
    perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
    moved = c.make("transpose", x, perm=perm, what=f"{what}_moved") if perm != list(range(rank)) else x
    lead = list(moved.shape[:-2])
    n_in = x.shape[axis]
    w = dft_matrix(n_in, parts == 2, length, inverse, onesided)
    rows = c.make("reshape", moved, shape=[math.prod(lead), n_in * parts], what=f"{what}_rows")
    # in float64, as ONNX's reference (NumPy's FFT): near-zero bins then agree to float32's rounding
    rows = c.make("cast", rows, to="float64", what=f"{what}_rows64") if x.dtype != "float64" else rows
    mixed = c.make("matmul", rows, c.const(w, "float64", f"{what}_matrix"), what=f"{what}_mixed64")
    if x.dtype != "float64":
        mixed = c.make("cast", mixed, to=x.dtype, what=f"{what}_mixed")
    parts_out = 1 if inverse and onesided else 2
    out = c.make("reshape", mixed, shape=[*lead, w.shape[1] // parts_out, parts_out], what=f"{what}_shaped")
    back = [perm.index(d) for d in range(rank)]
    return c.make("transpose", out, perm=back, what=what) if back != list(range(rank)) else out


@ONNX_OPS.register_op("DFT", "matmul by a constant cos/sin matrix")
def _dft(c: Ctx):
    x = c.v(0)
    rank = len(x.shape)
    if c.imp.opset >= 20:
        given = c.known_ints(2, "axis")
        axis = given[0] if given else -2
    else:
        axis = c.int_("axis", 1)
    axis = axis % rank
    if axis == rank - 1:
        raise c.fail("axis must not be the last (real / imaginary) axis")
    inverse, onesided = bool(c.int_("inverse", 0)), bool(c.int_("onesided", 0))
    length = c.known_ints(1, "dft_length")
    if length:
        length = length[0]
    elif inverse and onesided:
        length = 2 * (x.shape[axis] - 1)
    else:
        length = x.shape[axis]
    if length * x.shape[axis] > 1 << 24:
        raise c.unsupported(f"a DFT of {length} points over {x.shape[axis]} samples (the matrix form: up to 2^24 "
                            "entries)")
    y = _transform(c, x, axis, length, inverse, onesided, "dft")
    return c.make("reshape", y, shape=y.shape)


@ONNX_OPS.register_op("STFT", "gather (frames), mul (window), matmul by a constant cos/sin matrix")
def _stft(c: Ctx):
    x = c.v(0)
    if len(x.shape) != 3:
        raise c.fail(f"needs a signal [batch, length, 1 or 2], got {x.type}")
    step = c.known_ints(1, "frame_step")[0]
    window = c.v(2) if c.has(2) else None
    given = c.known_ints(3, "frame_length")
    size = given[0] if given else window.shape[0] if window is not None else x.shape[1]
    if step <= 0 or size <= 0 or size > x.shape[1]:
        raise c.fail(f"frame_step {step} and frame_length {size} do not fit a signal of {x.shape[1]}")
    frames = 1 + (x.shape[1] - size) // step
    index = np.arange(frames)[:, None] * step + np.arange(size)[None, :]
    framed = c.make("gather", x, c.const(index.astype(np.int64), "int64", "frames_index"), axis=1,
                    what="framed")  # [batch, frames, size, parts]
    if window is not None:
        framed = c.make("mul", framed, c.make("reshape", window, shape=[size, 1], what="window_col"),
                        what="windowed")
    y = _transform(c, framed, 2, size, False, bool(c.int_("onesided", 1)), "spectrum")
    return c.make("reshape", y, shape=y.shape)


def _window(formula):
    def convert(c: Ctx):
        size = int(np.asarray(c.known(0, "size")).reshape(-1)[0])
        periodic = c.int_("periodic", 1)
        dtype = _dtype_attr(c, c.int_("output_datatype", 1))
        n = np.arange(size, dtype=np.float64)
        span = size if periodic else size - 1
        return c.imp.const(formula(n, span).astype(dtype), c.name)
    return convert


ONNX_OPS.add("HannWindow", "(a constant of the known size)",
             _window(lambda n, span: np.sin(n * np.pi / span) ** 2))
ONNX_OPS.add("HammingWindow", "(a constant of the known size)",
             _window(lambda n, span: 25 / 46 - np.cos(n * np.pi * 2 / span) * (1 - 25 / 46)))
ONNX_OPS.add("BlackmanWindow", "(a constant of the known size)",
             _window(lambda n, span: 0.42 - 0.5 * np.cos(n * np.pi * 2 / span) + 0.08 * np.cos(n * np.pi * 4 / span)))


@ONNX_OPS.register_op("MelWeightMatrix", "(a constant of the known sizes)")
def _mel_weight_matrix(c: Ctx):
    """The [dft_length / 2 + 1, num_mel_bins] triangular mel filter bank (ONNX's reference:
    mel points spaced over (lower, upper) edge hertz, rounded down to DFT bins)."""
    mels, length, rate = (int(np.asarray(c.known(i, what)).reshape(-1)[0])
                          for i, what in enumerate(("num_mel_bins", "dft_length", "sample_rate")))
    lower, upper = (float(np.asarray(c.known(i, what)).reshape(-1)[0])
                    for i, what in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")))
    if mels <= 0 or length <= 0 or rate <= 0:
        raise c.fail(f"num_mel_bins {mels}, dft_length {length} and sample_rate {rate} must be positive")
    low, high = (2595 * np.log1p(f / 700) / np.log(10) for f in (lower, upper))
    points = np.arange(mels + 2) * ((high - low) / (mels + 2)) + low
    bins = (((length + 1) * (700 * np.expm1(points / 2595 * np.log(10)))) // rate).astype(int)
    out = np.zeros((length // 2 + 1, mels))
    for i in range(mels):
        left, centre, right = bins[i], bins[i + 1], bins[i + 2]
        if centre == left:
            out[centre, i] = 1
        else:
            for j in range(left, centre + 1):
                out[j, i] = (j - left) / (centre - left)
        for j in range(centre, right):
            out[j, i] = (right - j) / (right - centre)
    return c.imp.const(out.astype(_dtype_attr(c, c.int_("output_datatype", 1))), c.name)
