import numpy as np
import pytest

from akg.backends.npu.errors import NpuProgramError
from akg.backends.npu.isa import Buffer, Dma, Pipe, Program, Scope, SetFlag, WaitFlag
from akg.backends.npu.layout import (ND, NZ, ZN, ZZ, element_strides, fractal_shape, from_fractal, layout_dmas,
                                     to_fractal)
from akg.backends.npu.sim import simulate

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("layout", [ZZ, NZ, ZN])
def test_fractal_layouts_follow_their_index_formulas(layout):
    rows, cols = 40, 50  # padded to 48 x 64: 3 x 4 fractals
    a = RNG.standard_normal((rows, cols)).astype(np.float16)
    f = to_fractal(a, layout)
    assert f.shape == fractal_shape(rows, cols, layout) and f.flags.c_contiguous
    flat = f.reshape(-1)
    r1s, c1s = 3, 4
    for r, c in [(0, 0), (17, 3), (39, 49), (20, 33)]:
        r1, r0, c1, c0 = r // 16, r % 16, c // 16, c % 16
        index = {ZZ: ((r1 * c1s + c1) * 16 + r0) * 16 + c0,
                 NZ: ((r1 * c1s + c1) * 16 + c0) * 16 + r0,
                 ZN: ((c1 * r1s + r1) * 16 + r0) * 16 + c0}[layout]
        assert flat[index] == a[r, c]
    strides = element_strides(layout, rows, cols)
    assert flat[np.dot((1, 2, 3, 4), strides)] == a[16 + 3, 32 + 4]
    padded = from_fractal(f, layout, (48, 64))
    assert np.all(padded[rows:, :] == 0) and np.all(padded[:, cols:] == 0)
    assert np.array_equal(from_fractal(f, layout, (rows, cols)), a)


def _moved(src_layout, dst_layout, rows, cols, **kw):
    """Run layout_dmas GM -> UB on a random matrix; (result, expected, number of DMAs)."""
    a = RNG.standard_normal((rows, cols)).astype(np.float16)
    src_data = a if src_layout == ND else to_fractal(a, src_layout)
    expect = a if dst_layout == ND else to_fractal(a, dst_layout)
    g = Buffer(Scope.GM, "g", (src_data.size,), "float16")
    out = Buffer(Scope.GM, "out", (expect.size,), "float16")
    ub = Buffer(Scope.UB, "u", (expect.size,), "float16")
    dmas = layout_dmas(g[0], ub[0], rows, cols, src_layout, dst_layout, **kw)
    body = (*dmas, SetFlag(Pipe.MTE2, Pipe.MTE3), WaitFlag(Pipe.MTE2, Pipe.MTE3), Dma(ub[0], out[0], (ub.size,)))
    result = simulate(Program("move", (g, out), (ub,), body), args=[src_data.reshape(-1), None])
    return result.outputs["out"].reshape(expect.shape), expect, len(dmas)


@pytest.mark.parametrize("src, dst, dmas", [
    (ND, ZN, 1), (ZN, ND, 1), (ZN, ZZ, 1), (ZZ, ZN, 1), (ND, ZZ, 2), (ND, NZ, 1), (ZN, NZ, 2), (NZ, ND, 1),
    (ZZ, NZ, 1), (ND, ND, 1),
])
def test_layout_dmas_move_matrices_between_layouts(src, dst, dmas):
    got, expect, count = _moved(src, dst, 32, 48)
    assert np.array_equal(got, expect)
    assert count == dmas


def test_layout_dmas_copy_blocks_of_larger_matrices():
    # rows 16..47 and columns 16..31 of a 64 x 48 zN matrix, to a 32 x 16 zZ tile
    a = RNG.standard_normal((64, 48)).astype(np.float16)
    g = Buffer(Scope.GM, "g", (64 * 48,), "float16")
    ub = Buffer(Scope.UB, "u", (32 * 16,), "float16")
    out = Buffer(Scope.GM, "out", (32 * 16,), "float16")
    start = 1 * 64 * 16 + 16 * 16  # column block 1 of a zN matrix with 64 rows, then row 16
    dmas = layout_dmas(g[start], ub[0], 32, 16, ZN, ZZ, src_full=(64, 48))
    body = (*dmas, SetFlag(Pipe.MTE2, Pipe.MTE3), WaitFlag(Pipe.MTE2, Pipe.MTE3), Dma(ub[0], out[0], (512,)))
    r = simulate(Program("block", (g, out), (ub,), body), args=[to_fractal(a, ZN).reshape(-1), None])
    assert np.array_equal(from_fractal(r.outputs["out"], ZZ, (32, 16)), a[16:48, 16:32])
    got, expect, _ = _moved(ND, ZN, 32, 32, src_ld=32)
    assert np.array_equal(got, expect)


def test_layout_dmas_need_whole_fractals():
    g = Buffer(Scope.GM, "g", (1024,), "float16")
    u = Buffer(Scope.UB, "u", (1024,), "float16")
    with pytest.raises(NpuProgramError, match="whole 16 x 16 fractals"):
        layout_dmas(g[0], u[0], 20, 32, ND, ZN)
    with pytest.raises(NpuProgramError, match="unknown fractal layout"):
        fractal_shape(16, 16, "Nz")
