"""NPU vector mapping: rows folded into repeats (row reductions included), subexpressions
computed once, reshape indices with floordiv / mod, isnan / isinf, selects whose unchosen
branch reads past its tensor. Every kernel is checked against the NumPy reference and for
races; the cheaper mappings are compared with the per-row ones in simulated cycles."""

import numpy as np
import pytest

import akg
from akg.backends.npu import translator as npu_translator
from akg.graph import GraphBuilder

from conftest_npu import check_npu


def graph(build, name="k"):
    b = GraphBuilder(name)
    build(b)
    return b.build()


def cycles(kernel) -> int:
    return kernel.target.backend().report(kernel.executable).cycles


def softmax16(rows=64, cols=512):
    return graph(lambda b: b.output(b.op("softmax", b.input("x", (rows, cols), "float16"))))


def layer_norm16(rows=256, cols=1024):
    return graph(lambda b: b.output(b.op("layer_norm", b.input("x", (rows, cols), "float16"),
                                         b.input("g", (cols,), "float16"), b.input("bb", (cols,), "float16"))))


@pytest.mark.parametrize("make", [softmax16, layer_norm16,
                                  lambda: graph(lambda b: b.output(b.op("sum", b.input("x", (64, 300)), axes=[1]))),
                                  lambda: graph(lambda b: b.output(b.op("max", b.input("x", (96, 40), "float16"),
                                                                        axes=[1])))],
                         ids=["softmax", "layer_norm", "sum_tail", "max_short_rows"])
def test_rows_in_repeats_match_reference_and_cost_less(make, monkeypatch):
    k = check_npu(make())
    k.target.backend().report(k.executable, races=True)  # raises NpuRaceError on a missing sync
    folded = cycles(k)
    monkeypatch.setattr(npu_translator.Translator, "fold_rows", False)
    per_row = akg.build(make(), target="npu", config=k.config)
    check_npu(make(), kernel=per_row)
    assert folded <= cycles(per_row)


def test_row_reduction_is_one_reduce_per_group_of_rows():
    k = check_npu(softmax16())
    text = k.target.backend().source(k.executable)
    # the row maxima and sums: one `reduce_*` over several rows (repeat = rows), not one per row
    # (or, a row per 32-byte block: one `reduce_*_across` along eight rows at once, repeat = the
    # row's blocks, then one `reduce_*_block`, a value per row)
    lines = text.splitlines()
    reduces = [line for line in lines if "v.reduce_max " in line or "v.reduce_sum " in line]
    blocked = [line for line in lines if "v.reduce_max_across " in line or "v.reduce_sum_across " in line]
    assert reduces or blocked
    assert all("repeat=1 " not in line + " " for line in reduces + blocked)
    assert all("](" in line for line in blocked)  # strided: eight rows per repeat, not one row
    assert len([line for line in lines if "_block " in line]) == len(blocked)
    # the per-row sum is cast once (a value per row), not as a vector filled with it
    assert "v.dup tmp_float32" not in text


def test_softmax_rows_cost_less_than_before():
    """The default softmax 64 x 512 fp16 ran 1 710 cycles with one instruction per row and op."""
    assert cycles(akg.build(softmax16(), target="npu")) < 1710


def test_repeated_subexpression_is_computed_once():
    def build(square: bool):
        def body(b):
            x, m = b.input("x", (32, 256)), b.input("m", (32, 1))
            d = b.op("sub", x, m)
            b.output(b.op("mul", d, d) if square else b.op("mul", d, 3.0))
        return graph(body)

    def subs(square: bool) -> int:
        k = check_npu(build(square))
        return k.target.backend().source(k.executable).count("v.sub")

    assert subs(True) == subs(False)  # (x - m) * (x - m): the difference once


def test_reshape_merged_dims_split_into_loops():
    """sum over a reshape that merges two dims: input[c // 128, c % 128, j] over c < 2048."""
    def build(b):
        x = b.input("x", (16, 128, 24))
        b.output(b.op("sum", b.op("reshape", x, shape=[2048, 24]), axes=[0]))

    check_npu(graph(build))


def test_reshape_of_a_row_is_affine():
    def build(b):
        x = b.input("x", (64, 64))
        b.output(b.op("exp", b.op("reshape", x, shape=[64, 4, 16])))

    check_npu(graph(build))


@pytest.mark.parametrize("op", ["isnan", "isinf"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_isnan_isinf(op, dtype):
    g = graph(lambda b: b.output(b.op(op, b.input("x", (16, 256), dtype))))
    x = np.random.default_rng(0).standard_normal((16, 256)).astype(dtype)
    x[0, :5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    x[3, 7] = np.nan
    x[9, 200] = -np.inf
    check_npu(g, inputs={"x": x})


def test_concat_select_reads_only_inside_each_input():
    """concat is `c < 4 ? a[c] : b[c - 4]`: the unchosen branch's box reaches past its tensor;
    only the part inside is brought in, and the lanes outside are never chosen."""
    def build(b):
        a, c = b.input("a", (4, 16)), b.input("c", (8, 16))
        b.output(b.op("concat", b.op("mul", a, 2.0), b.op("add", c, 1.0), axis=0))

    k = check_npu(graph(build))
    k.target.backend().report(k.executable, races=True)


def test_divided_index_past_its_divisor_is_a_typed_error():
    from tvm import tirx

    from akg.backends.npu.affine import _LOOP_RANGES, _affine
    from akg.backends.npu.errors import NpuMappingError

    i = tirx.Var("i", "int32")
    token = _LOOP_RANGES.set({i: 256})
    try:
        assert _affine(tirx.FloorDiv(i * 16 + 3, 16), "t") == ({i: 1}, 0)
        assert _affine(tirx.FloorMod(i * 16 + 3, 16), "t") == ({}, 3)
        with pytest.raises(NpuMappingError, match="not affine"):
            _affine(tirx.FloorDiv(i, 16), "t")
    finally:
        _LOOP_RANGES.reset(token)


def reduce_graph(shape, op, axes, keepdims=False, dtype="float32"):
    return graph(lambda b: b.output(b.op(op, b.input("x", shape, dtype), axes=axes, keepdims=keepdims)))


@pytest.mark.parametrize("make", [
    lambda: reduce_graph((3, 17, 5), "mean", [0, 2]),
    lambda: reduce_graph((3, 17, 5), "mean", [0, 2], keepdims=True),
    lambda: reduce_graph((4, 17, 6, 6), "sum", [0, 2, 3]),
    lambda: reduce_graph((3, 17, 5), "sum", [0, 2], dtype="float16"),
    lambda: reduce_graph((2, 40, 9), "max", [0, 2]),
    lambda: reduce_graph((3, 17, 5, 4), "mean", [0, 2]),
], ids=["mean_axes_0_2", "mean_keepdims", "batch_norm_stats", "sum_fp16", "max", "mean_4d"])
def test_results_kept_between_summed_axes_are_written_as_a_vector(make):
    """A reduction over axes around the kept one (`acc[c] += x[n, c, w]`, /tmp/fuzz/legal/
    sumall.mir's mean over axes (0, 2)) wrote its results one element at a time, each the
    destination of a vector instruction at an address that is no 32-byte boundary. The kept
    axis's loop now goes inside the outer summed one: the results are one contiguous vector."""
    k = check_npu(make())
    k.target.backend().report(k.executable, races=True)


def test_sum_all_max_keepdims_and_mean_of_one_graph():
    """/tmp/fuzz/legal/sumall.mir as a builder graph, compiled as a model (one kernel each)."""
    def build(b):
        x = b.input("x", (3, 17, 5))
        b.output(b.op("sum", x), b.op("max", x, keepdims=True), b.op("mean", x, axes=[0, 2]))

    g = graph(build)
    model = akg.compile(g, target="npu")
    inputs = {"x": np.random.default_rng(0).standard_normal((3, 17, 5)).astype(np.float32)}
    got = model(**inputs)
    x = inputs["x"].astype(np.float64)
    for out, want in zip(got, (x.sum(), x.max(keepdims=True), x.mean(axis=(0, 2)))):
        np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)


def test_results_one_element_apart_at_unaligned_addresses_are_a_typed_error(monkeypatch):
    """Where the kept axis cannot go inside (here: forced), the per-element results would start
    at no 32-byte boundary: a mapping error naming the statement, not an unaligned program."""
    from akg.backends.npu.errors import NpuMappingError
    from akg.backends.npu.vector import _Compute

    monkeypatch.setattr(_Compute, "_results_inside", lambda self, rest, *args: rest)
    with pytest.raises(NpuMappingError, match=r"statement `t0_sum\[...\] = ...`: a reduction whose results are "
                                              r"written one at a time along loop c0"):
        akg.build(reduce_graph((3, 17, 5), "mean", [0, 2]), target="npu")
