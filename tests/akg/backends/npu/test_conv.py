"""Convolutions on the cube: the `Img2col` instruction (semantics, cost, checks) and fp16 conv2d
kernels mapped from the schedule tree (strides, dilation, padding folded into the load, batch
and row tiles, L1 chunks and K steps), each against the NumPy reference with the race
detector on."""

import numpy as np
import pytest

import akg
from akg.backends.npu.errors import NpuBoundsError, NpuPathError
from akg.backends.npu.img2col import reference
from akg.backends.npu.isa import Buffer, Dma, Img2col, Mmad, Pipe, Program, Scope, SetFlag, WaitFlag, var
from akg.backends.npu.layout import ZN, ZZ, from_fractal, to_fractal
from akg.backends.npu.sim import simulate
from akg.backends.npu.spec import get_spec
from akg.graph import GraphBuilder

from conftest_npu import check_npu

SPEC = get_spec()
RNG = np.random.default_rng(7)
MTE1, MTE2, M, V, MTE3 = Pipe.MTE1, Pipe.MTE2, Pipe.M, Pipe.V, Pipe.MTE3


def _img2col_program(instr_args, fmap_shape, m, weights):
    """GM fmap ([c1][image][row][col][16]) -> L1 -> Img2col -> L0B; weights (zZ) -> L0A; mmad;
    L0C -> UB -> GM: the product weights @ im2col, which the test compares with the reference."""
    c1, images, rows, cols = fmap_shape
    elems = c1 * images * rows * cols * 16
    g_f = Buffer(Scope.GM, "f", (elems,), "float16")
    l1 = Buffer(Scope.L1, "l1", (elems,), "float16")
    probe = Img2col(l1[0], Buffer(Scope.L0B, "tmp", (1 << 16,), "float16")[0], **instr_args)
    k, n = probe.k1 * 16, probe.n
    b0 = Buffer(Scope.L0B, "b0", (k * n,), "float16")
    instr = Img2col(l1[0], b0[0], **instr_args)
    fa = to_fractal(weights, ZZ)
    g_a = Buffer(Scope.GM, "a", (fa.size,), "float16")
    a0 = Buffer(Scope.L0A, "a0", (fa.size,), "float16")
    c0 = Buffer(Scope.L0C, "c0", (m * n,), "float32")
    ub = Buffer(Scope.UB, "ub", (m * n,), "float32")
    g_c = Buffer(Scope.GM, "c", (m * n,), "float32")
    body = (Dma(g_f[0], l1[0], (elems,)), Dma(g_a[0], a0[0], (fa.size,)), SetFlag(MTE2, MTE1), WaitFlag(MTE2, MTE1),
            instr, SetFlag(MTE2, M), SetFlag(MTE1, M), WaitFlag(MTE2, M), WaitFlag(MTE1, M),
            Mmad(c0[0], a0[0], b0[0], m, k, n), SetFlag(M, V), WaitFlag(M, V), Dma(c0[0], ub[0], (m * n,)),
            SetFlag(V, MTE3), WaitFlag(V, MTE3), Dma(ub[0], g_c[0], (m * n,)))
    return Program("img2col", (g_f, g_a, g_c), (l1, b0, a0, c0, ub), body), instr, fa


@pytest.mark.parametrize("args", [
    dict(fmap=(2, 1, 6, 6), out=(6, 6), kernel=(3, 3), pad=(1, 1), k1=18),
    dict(fmap=(1, 2, 9, 9), out=(4, 4), kernel=(3, 3), stride=(2, 2), k1=9),
    dict(fmap=(1, 1, 8, 8), out=(4, 4), kernel=(3, 3), dilation=(2, 2), k_first=3, k1=6),
    dict(fmap=(3, 1, 7, 7), out=(7, 7), kernel=(1, 1), k_first=1, k1=2),
], ids=["pad", "stride_batch", "dilation_k_first", "one_by_one"])
def test_img2col_gathers_taps_zero_pads_and_costs_its_l0b_bytes(args):
    c1, images, rows, cols = args["fmap"]
    x = RNG.standard_normal((c1 * 16, images, rows, cols)).astype(np.float16)
    fmap = x.reshape(c1, 16, images, rows, cols).transpose(0, 2, 3, 4, 1)  # [c1][image][row][col][16]
    probe = Img2col(Buffer(Scope.L1, "s", (fmap.size,), "float16")[0],
                    Buffer(Scope.L0B, "d", (1 << 16,), "float16")[0], **args)
    m = 16
    weights = RNG.standard_normal((m, probe.k1 * 16)).astype(np.float16)
    program, instr, fa = _img2col_program(args, args["fmap"], m, weights)
    r = simulate(program, SPEC, [fmap.reshape(-1), fa.reshape(-1), None], trace=True)
    col = reference(x, instr, int(instr.k_first.const))  # [k1, n, 16]: rows (k1, c0), columns n
    matrix = col.transpose(0, 2, 1).reshape(instr.k1 * 16, instr.n).astype(np.float32)
    expect = weights.astype(np.float32) @ matrix
    got = from_fractal(r.outputs["c"], ZN, (m, instr.n))
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-4)
    entry = next(e for e in r.report.trace if e.text.startswith("img2col"))
    assert entry.pipe == "MTE1"
    assert entry.cycles == SPEC.dma_latency + -(-instr.nbytes // SPEC.rate("L1->L0B"))
    assert r.report.path_bytes["L1->L0B"] == instr.nbytes == instr.k1 * 16 * instr.n * 2
    # a padded position is zero, a valid one a copy of its 16 channels
    if args.get("pad"):
        assert not col[0, 0].any()  # output (0, 0) at tap (0, 0) reads row -1
        assert np.array_equal(col[4, 0], x[:16, 0, 0, 0])  # the centre tap reads row 0, column 0


def test_img2col_rejects_wrong_scopes_and_k_rows_past_the_kernel():
    l1 = Buffer(Scope.L1, "l1", (4096,), "float16")
    b0 = Buffer(Scope.L0B, "b0", (1 << 14,), "float16")
    with pytest.raises(NpuPathError, match="L1 -> L0B"):
        Img2col(Buffer(Scope.UB, "u", (4096,), "float16")[0], b0[0], (1, 1, 4, 4), (4, 4), (3, 3))
    step = var("s")
    g = Buffer(Scope.GM, "g", (4096,), "float16")
    from akg.backends.npu.isa import Loop
    bad = Program("p", (g,), (l1, b0), (Dma(g[0], l1[0], (256,)), SetFlag(MTE2, MTE1), WaitFlag(MTE2, MTE1),
                                        Loop("s", 4, (Img2col(l1[0], b0[0], (1, 1, 4, 4), (4, 4), (3, 3),
                                                              pad=(1, 1), k_first=step * 3, k1=3),))))
    with pytest.raises(NpuBoundsError, match="fractal rows 0..11 of K, which has 9"):
        simulate(bad, SPEC, [np.zeros(4096, np.float16)])


def conv(x, w, padding=(0, 0), strides=(1, 1), dilation=(1, 1)):
    b = GraphBuilder("conv")
    b.output(b.conv2d(b.input("x", x, "float16"), b.input("w", w, "float16"), padding=list(padding),
                      strides=list(strides), dilation=list(dilation)))
    return b.build()


def check_conv(g, config=None):
    kernel = akg.build(g, target="npu", config=config)
    check_npu(g, kernel)  # fp16: AKG's rule against the NumPy reference
    text = kernel.target.backend().source(kernel.executable)
    assert "img2col" in text and "mmad" in text and "_pad" not in text  # padding folded, no padded copy
    report = kernel.target.backend().report(kernel.executable, races=True)  # NpuRaceError on a missing sync
    assert report.pipe_busy["M"] > 0
    return kernel, report


@pytest.mark.parametrize("make", [
    lambda: conv((2, 32, 7, 7), (16, 32, 1, 1)),
    lambda: conv((2, 32, 6, 6), (32, 32, 3, 3), padding=(1, 1)),
    lambda: conv((1, 16, 9, 9), (32, 16, 3, 3), padding=(1, 1), strides=(2, 2)),
    lambda: conv((1, 32, 8, 8), (16, 32, 3, 3), padding=(2, 2), dilation=(2, 2)),
    lambda: conv((1, 16, 8, 8), (16, 16, 3, 3), padding=(1, 2, 0, 1)),
    lambda: conv((2, 16, 10, 12), (16, 16, 3, 3)),
], ids=["1x1_batch", "3x3_pad", "stride2", "dilation2", "asymmetric_pad", "row_tiles"])
def test_conv_on_the_cube_matches_the_reference(make):
    check_conv(make())


def test_conv_configs_of_the_space_all_compute_the_reference():
    """Tile, L1 chunk and K step choices of the tuner's space (double and single buffering,
    one and several chunks and steps) give the same, correct kernel."""
    from akg.errors import ScheduleError
    from akg.graph.pipeline import plan_model
    from akg.target import get_target
    from akg.tuner.task import TuningTask

    g = conv((2, 32, 6, 6), (32, 32, 3, 3), padding=(1, 1))
    target = get_target("npu")
    space = TuningTask(plan_model(g, target).kernels[0].subgraph, target).space()
    seen = set()
    for config in space:
        try:
            space.validate(config)
        except ScheduleError:
            continue
        steps = {(s.op, s.level): s.arg for s in config.steps}
        key = (steps[("tile", "L1")][0], steps[("tile", "L0A")][0], steps[("promote", "UB")])
        if key in seen:
            continue
        seen.add(key)
        check_conv(g, config)
    assert {(32, 288, 2), (16, 48, 2), (32, 96, 1)} <= seen


def test_conv_config_that_does_not_fit_is_a_schedule_error():
    from akg.errors import ScheduleError
    from akg.schedules.space import Config, Step

    g = conv((2, 32, 6, 6), (32, 32, 3, 3), padding=(1, 1))
    bad = Config("smart", (Step("tile", 0, "UB", (2, 32, 6, 6)), Step("tile", 0, "L0A", (100,)),
                           Step("tile", 0, "L1", (32,)), Step("map", 0, "cores", (1, 1, 1, 1)),
                           Step("promote", None, "UB", 2)))
    with pytest.raises(ScheduleError, match="K step 100"):
        akg.build(g, target="npu", config=bad)


@pytest.mark.slow
def test_resnet_3x3_conv_reaches_70_percent_of_the_cube_roofline():
    from akg.backends.npu.sim import simulate as run

    g = conv((16, 256, 14, 14), (256, 256, 3, 3), padding=(1, 1))
    kernel = akg.build(g, target="npu")
    exe = kernel.executable
    rep = run(exe.program, exe.spec, functional=False, races=False).report
    ideal = exe.spec.roofline(2 * 16 * 256 * 14 * 14 * 256 * 9, 0, 0)
    assert ideal.fraction(rep.cycles) >= 0.70, (rep.cycles, ideal.cube)


def test_nhwc_conv_with_layout_transposes_runs_on_the_cube():
    """The shared corpus's ResNet convs: NHWC input and OHWI weights transposed to NCHW / OIHW
    around conv2d, the output transposed back. The transposes fold into the accesses; the
    backend finds each dim by its loop variable (channels contiguous: NC1HWC0 for free)."""
    b = GraphBuilder("nhwc")
    x = b.op("transpose", b.input("x", (2, 9, 9, 32), "float16"), perm=(0, 3, 1, 2))
    w = b.op("transpose", b.input("w", (16, 3, 3, 32), "float16"), perm=(0, 3, 1, 2))
    y = b.conv2d(x, w, padding=[0, 0], strides=[2, 2])
    b.output(b.op("transpose", y, perm=(0, 2, 3, 1)))
    kernel = akg.build(b.build(), target="npu")
    check_npu(b.build(), kernel)
    text = kernel.target.backend().source(kernel.executable)
    assert "img2col" in text
    kernel.target.backend().report(kernel.executable, races=True)
