"""One-read statistics (graph/moments.py): a mean and a centred second moment of one tensor
rewritten as sums shifted by the mean of a few of its values, matched wherever the pattern
comes from (layer norm, batch norm, `variance`, a decomposed layer norm), exact enough for
`--check` on data that defeats the textbook one-pass formula, NaN and infinities kept."""

import numpy as np
import pytest

import akg
from akg.graph import GraphBuilder
from akg.graph.expand import expand
from akg.graph.interpreter import evaluate, random_inputs
from akg.graph.moments import find_moments, one_read_moments, shift_window
from akg.verify import Reference, compare


def _layer_norm(rows=16, cols=256, dtype="float32"):
    b = GraphBuilder("ln")
    b.output(b.layer_norm(b.input("x", (rows, cols), dtype), b.input("g", (cols,), dtype),
                          b.input("bt", (cols,), dtype), epsilon=1e-5))
    return b.build()


def _decomposed(keepdims=False, outputs_stats=False):
    """A layer norm as ONNX files spell it (ReduceMean, Sub, Mul, ReduceMean), its mean and
    variance also outputs when `outputs_stats`."""
    b = GraphBuilder("decomposed")
    x = b.input("x", (8, 4, 96))
    m = b.mean(x, axes=[2], keepdims=True)
    c = b.sub(x, m)
    v = b.mean(b.mul(c, c), axes=[2], keepdims=keepdims)
    vk = v if keepdims else b.reshape(v, shape=[8, 4, 1])
    y = b.mul(c, b.rsqrt(b.add(vk, b.const(np.float32(1e-6), name="eps"))))
    b.output(y, *([m, v] if outputs_stats else []))
    return b.build()


def _ops(graph):
    return [n.op for n in graph.nodes]


def test_a_layer_norm_reads_its_row_once_for_both_statistics():
    graph = expand(_layer_norm())
    assert len(find_moments(graph)) == 1
    new = one_read_moments(graph)
    assert find_moments(new) == []
    assert "slice" in _ops(new)
    # the two means of the shifted values (and the shift's own), no mean of the centred values
    means = [n for n in new.nodes if n.op == "mean"]
    assert len(means) == 3 and all(n.inputs[0] is not graph.nodes[0].outputs[0] for n in means)
    inputs = random_inputs(graph, 0)
    for got, want in zip(evaluate(new, inputs), evaluate(graph, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("keepdims", [True, False])
def test_a_decomposed_layer_norm_and_its_statistics_as_outputs_keep_their_names(keepdims):
    graph = _decomposed(keepdims=keepdims, outputs_stats=True)
    new = one_read_moments(graph)
    assert len(find_moments(graph)) == 1 and find_moments(new) == []
    assert [v.name for v in new.outputs] == [v.name for v in graph.outputs]
    assert [v.type for v in new.outputs] == [v.type for v in graph.outputs]
    inputs = random_inputs(graph, 1)
    for got, want in zip(evaluate(new, inputs), evaluate(graph, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    kernel = akg.build(graph)
    assert compare(graph, kernel(**inputs), Reference.of(graph, inputs)) == []


def test_batch_norm_statistics_over_several_axes_and_variance_are_rewritten():
    b = GraphBuilder("bn_stats")
    x = b.input("x", (4, 8, 6, 40))
    m = b.mean(x, axes=[0, 2, 3], keepdims=True)
    c = b.sub(x, m)
    v = b.mean(b.mul(c, c), axes=[0, 2, 3], keepdims=True)
    b.output(b.div(c, b.sqrt(b.add(v, b.const(np.float32(1e-5), name="eps")))))
    graph = b.build()
    new = one_read_moments(graph)
    shift = next(n for n in new.nodes if n.op == "slice")
    # the first few values of the innermost reduced axis (16 of 960 values), the first of the others
    assert shift_window(4 * 6 * 40, 40) == 16 and shift.outputs[0].shape == (1, 8, 1, 16)
    inputs = random_inputs(graph, 2)
    kernel = akg.build(graph)
    assert compare(graph, kernel(**inputs), Reference.of(graph, inputs)) == []
    bv = GraphBuilder("var")
    bv.output(bv.variance(bv.input("x", (12, 40)), axes=[1], keepdims=False))
    assert len(find_moments(expand(bv.build()))) == 1


def test_what_is_not_such_a_pair_is_left_alone():
    # float16 statistics (a layer norm computes them in float32 after a cast: that cast is
    # matched), a single value, different axes, a mean that is not the centre
    b = GraphBuilder("others")
    x = b.input("x", (8, 64))
    one = b.input("one", (8, 1))
    m = b.mean(x, axes=[1], keepdims=True)
    c = b.sub(x, m)
    other_axes = b.mean(b.mul(c, c), axes=[0], keepdims=True)
    m1 = b.mean(one, axes=[1], keepdims=True)
    c1 = b.sub(one, m1)
    single = b.mean(b.mul(c1, c1), axes=[1], keepdims=True)
    h = b.input("h", (8, 64), "float16")
    mh = b.mean(h, axes=[1], keepdims=True)
    ch = b.sub(h, mh)
    half = b.mean(b.mul(ch, ch), axes=[1], keepdims=True)
    b.output(other_axes, single, half)
    graph = b.build()
    assert find_moments(graph) == []
    assert one_read_moments(graph) is graph
    assert len(find_moments(expand(_layer_norm(dtype="float16")))) == 1  # on the float32 cast


def _cases(rows, cols, seed=0):
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal((rows, cols))
    first_outlier = normal.copy()
    first_outlier[:, 0] = 1e4
    return {
        "offset 1000": 1000.0 + normal,
        "first value an outlier of 1e4 sigma": first_outlier,
        "constant rows": np.full((rows, cols), 3.7),
        "tiny spread": 1.0 + 1e-3 * normal,
        "cauchy": rng.standard_cauchy((rows, cols)),
    }


@pytest.mark.parametrize("cols", [64, 200, 1024, 4096])
@pytest.mark.parametrize("case", list(_cases(1, 1)))
def test_the_compiled_layer_norm_passes_check_on_data_that_defeats_the_textbook_formula(case, cols):
    # E[x^2] - E[x]^2 loses every digit of the variance of 1000 + N(0, 1) in float32; a shift
    # by the first value alone errs by up to n ulps when that value is an outlier
    rows = 32
    graph = _layer_norm(rows, cols)
    kernel = akg.build(graph)
    x = _cases(rows, cols)[case].astype(np.float32)
    rng = np.random.default_rng(5)
    inputs = {"x": x, "g": rng.standard_normal(cols).astype(np.float32),
              "bt": rng.standard_normal(cols).astype(np.float32)}
    assert compare(graph, kernel(**inputs), Reference.of(graph, inputs)) == []


def test_the_shift_averages_the_fewest_values_that_bound_its_error():
    assert [shift_window(n, n) for n in (2, 64, 65, 128, 256, 768, 1024, 4096)] == [1, 1, 2, 2, 4, 16, 16, 64]
    assert shift_window(960, 10) == 10  # no more than the axis has


def test_nan_and_infinity_reach_the_rows_they_are_in():
    rows, cols = 4, 128
    graph = _layer_norm(rows, cols)
    kernel = akg.build(graph)
    inputs = random_inputs(graph, 3)
    x = inputs["x"].copy()
    x[1, 5], x[2, 0], x[3, 7] = np.nan, np.inf, -np.inf
    inputs["x"] = x
    got = kernel(**inputs)[0]
    assert np.all(np.isfinite(got[0])) and np.all(np.isnan(got[1:]))
    assert compare(graph, [got], Reference.of(graph, inputs)) == []
