"""Corpus patterns of the NPU vector path (each a small graph, checked against the reference
with the race detector on): transposes put into the DMA, unpadded tiles of short rows,
NCHW weights with 1 x 1 trailing dims, the UB reused by a kernel's independent loop nests."""

import numpy as np
from akg.graph import GraphBuilder
from conftest_npu import check_npu

import akg


def graph(build, name="k"):
    b = GraphBuilder(name)
    build(b)
    return b.build()


def build_checked(g):
    k = check_npu(g)
    k.target.backend().report(k.executable, races=True)  # NpuRaceError on a missing sync
    exe = k.executable
    from akg.backends.npu.backend import _dynamic_count

    return k, exe.program.listing(), _dynamic_count(exe.program.body) * exe.program.blocks


def test_transpose_2d_goes_into_the_dma():
    _k, text, _n = build_checked(graph(lambda b: b.output(b.transpose(b.input("t", (32, 48)), perm=[1, 0]))))
    assert "strided along the vector loop" not in text
    assert "src_strides" in text or "dst_strides" in text  # the transpose is a strided copy


def test_cast_transpose_nchw_to_nhwc():
    """Fused_Cast_Transpose (resnet101/vgg16): input[n, c, h, w] read along c innermost."""
    g = graph(lambda b: b.output(b.transpose(b.cast(b.input("x", (16, 64, 3, 3)), to="float16"),
                                             perm=[0, 2, 3, 1])))
    _k, text, n = build_checked(g)
    assert n < 2000, text


def test_transpose_whose_loops_end_in_a_short_dim():
    """Fused_Transpose (vgg16): out[n, c, h, w] = in[n, h, w, c]; the loops end in w (3): the
    tiles follow the input's order (c innermost), the output DMA transposes back."""
    g = graph(lambda b: b.output(b.transpose(b.input("x", (32, 3, 3, 64), "float16"), perm=[0, 3, 1, 2])))
    _k, text, n = build_checked(g)
    assert n < 2000, text


def test_short_rows_are_not_padded():
    """Fused_Mul_Cast_Add (resnet101): (.., 3, 3) weights; rows of 3 elements run as one
    contiguous range (no per-row instructions)."""
    g = graph(lambda b: b.output(b.add(b.mul(b.input("w", (64, 64, 3, 3)), 0.5),
                                       b.cast(b.input("h", (64, 64, 3, 3), "float16"), to="float32"))))
    _k, text, n = build_checked(g)
    assert n < 2000, text
    assert "mask=3" not in text


def test_trailing_unit_dims_are_not_rows():
    """Fused_Cast (resnet101): a (C_out, C_in, 1, 1) weight cast to fp16."""
    g = graph(lambda b: b.output(b.cast(b.input("x", (256, 128, 1, 1)), to="float16")))
    _k, text, n = build_checked(g)
    assert n < 2000, text


def test_independent_loop_nests_reuse_the_ub():
    """Fused_..._more_parallel: several independent outputs; each loop nest reuses the UB (a
    barrier between them), so together they may need more than the UB."""
    def build(b):
        outs = []
        for i in range(8):
            x = b.input(f"x{i}", (256, 512))
            outs.append(b.add(b.mul(x, 2.0), 1.0))
        b.output(*outs)

    k, text, _n = build_checked(graph(build))
    assert "pipe_barrier" in text
    ub = [x for x in k.executable.program.buffers if x.scope.name == "UB"]
    assert sum(x.nbytes for x in ub) > k.executable.spec.ub_usable_bytes  # only fits by reuse


def test_transposes_compile_through_the_cli_default():
    k = akg.build(graph(lambda b: b.output(b.transpose(b.input("t", (64, 32), "float16"), perm=[1, 0]))),
                  target="npu")
    assert k.target.kind == "npu"


def test_float_comparison_into_a_bool_output():
    """Fused_AddN_Reshape_LessEqual (bert): a bool output, fp16 0 / 1 in GM and UB, converted
    at the kernel's edge; comparisons of floats exact (equal values included)."""
    import numpy as np

    def build(b):
        x, y = b.input("x", (64, 128)), b.input("y", (64, 128))
        b.output(b.op("less_equal", b.add(x, y), 0.5), b.op("greater", x, y), b.op("equal", x, y))

    g = graph(build)
    x = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    y = x.copy()
    y[::2] = np.random.default_rng(1).standard_normal((32, 128)).astype(np.float32)
    y[1, :8] = np.nextafter(x[1, :8], np.float32(np.inf))  # one ulp apart: still not equal
    k = check_npu(g, inputs={"x": x, "y": y})
    k.target.backend().report(k.executable, races=True)


def test_bool_input_selects_between_finite_branches():
    """Fused_Select / GkDropout patterns: where(mask, a, b) with a bool mask input."""
    def build(b):
        m = b.op("greater", b.input("u", (32, 256)), 0.3)
        b.output(b.op("where", m, b.mul(b.input("a", (32, 256)), 2.0), b.input("c", (32, 256))))

    build_checked(graph(build))


def test_select_with_a_branch_that_may_be_nan_keeps_the_chosen_branch():
    """where(x > 0, sqrt(x), x): sqrt of the negative lanes is NaN, but the vector select
    (`cmp_gt` + `sel`) takes each lane from one branch only, so no NaN reaches the output."""
    def build(b):
        x = b.input("x", (32, 256))
        b.output(b.op("where", b.op("greater", x, 0.0), b.op("sqrt", x), x))

    x = np.random.default_rng(0).standard_normal((32, 256)).astype(np.float32)
    g = graph(build)
    k = check_npu(g, inputs={"x": x})
    k.target.backend().report(k.executable, races=True)
    out = np.asarray(k(x)).reshape(x.shape)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, np.where(x > 0, np.sqrt(np.abs(x)), x), rtol=1e-6)
    text = k.executable.program.listing()
    assert "v.cmp_gt" in text and "v.sel" in text


def test_select_of_a_guarded_square_root():
    """Fused_Greater_Select_Sqrt_Select_Maximum (bert, LAMB): sqrt(where(x > 0, x, 0)) is
    finite, so a select over it is computed arithmetically."""
    def build(b):
        x = b.input("x", (16, 256))
        root = b.op("sqrt", b.op("where", b.op("greater", x, 0.0), x, 0.0))
        b.output(b.op("where", b.op("greater", x, 0.5), root, b.mul(x, 3.0)))

    build_checked(graph(build))


def test_a_parallel_nest_next_to_a_loopless_statement_runs_serially():
    """Fused_ClipByNormNoDivSum_RealDiv: a scalar statement beside a parallel band (no core
    split there: the band runs as a serial loop on one core)."""
    def build(b):
        n = b.input("n", (1,))
        root = b.op("sqrt", b.op("where", b.op("greater", n, 0.0), n, 1.0))
        b.output(b.div(b.input("x", (64, 256)), root), root)

    build_checked(graph(build))



def test_a_tile_loop_divided_by_a_reshape_is_split_at_the_divisor(corpus):
    """Fused_Reshape_BiasAddGrad (stitch_adapt): a column sum of x[32, 128, 12, 64] reshaped to
    [4096, 768]; the tile loop c over the 768 columns reads x[.., c // 64, c % 64] (refused
    before): it runs as c = 64 c_o + c_i."""
    from akg.graph.io import load_model

    g = load_model(corpus / "akg-composite" / "composite" / "stitch_adapt" /
                   "Fused_Reshape_BiasAddGrad_Square_ReduceSum_Greater_Select_Sqrt_Select_Maximum.json")
    check_npu(g)


def test_reshape_rows_tiled_across_the_merged_dims(corpus):
    """Fused_Cast_Reshape_Cast_ReduceSum_Mul_Sub_Mul_ReduceSum (transformer): x[96, 64, 1024]
    reshaped to [6144, 1024] and row-reduced. The recipe tiles the 6144 rows by a divisor of
    64 (a tile of 3 rows would straddle the merged dim), the backend splits the tile loop at
    the divisor, and the loop over the tile's statements is distributed although its accesses
    of x are written with different (provably equal) indices (refused before)."""
    from akg.graph.io import load_model

    g = load_model(corpus / "akg-composite" / "networks" / "ascend" / "transformer" / "level0" /
                   "Fused_Cast_Reshape_Cast_ReduceSum_Mul_Sub_Mul_ReduceSum_split_11587580791364741340.info")
    check_npu(g)
