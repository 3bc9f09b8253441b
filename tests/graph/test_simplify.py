"""Simplification passes: golden `.mir` in / `.mir` out per pass, interpreter equivalence on
random inputs, output names kept, folding limits, fixed points, random graphs."""

import itertools
import logging
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from akg.graph import GraphBuilder, evaluate, random_inputs
from akg.graph.expand import expand
from akg.graph.io import emit_mir, load_mir, parse_mir
from akg.graph.simplify import FOLD_LIMIT, PASSES, PIPELINE, live_taps, simplify

GOLDEN = Path(__file__).parent / "golden" / "simplify"
UPDATE = os.environ.get("AKG_UPDATE_GOLDEN") == "1"  # rewrite the expected files


def _passes_of(path: Path) -> list[str]:
    """The first line of a golden input names what to run: `# passes: cse dce` (or simplify)."""
    first = path.read_text().splitlines()[0]
    assert first.startswith("# passes:"), f"{path.name} must start with '# passes: ...'"
    return first.split(":", 1)[1].split()


def _run(graph, names):
    for name in names:
        graph = simplify(graph) if name == "simplify" else PASSES.get(name)(graph)
    return graph


def _assert_same_outputs(before, after, seed=0):
    inputs = random_inputs(before, seed)
    for v, a, b in zip(before.outputs, evaluate(before, inputs), evaluate(after, inputs)):
        assert a.dtype == b.dtype and a.shape == b.shape, v.name
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=0, equal_nan=True, err_msg=v.name)


# --- golden files -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(p.name[: -len(".in.mir")] for p in GOLDEN.glob("*.in.mir")))
def test_golden(case):
    source = GOLDEN / f"{case}.in.mir"
    expected_path = GOLDEN / f"{case}.out.mir"
    graph = load_mir(source)
    got = _run(graph, _passes_of(source))
    text = emit_mir(got, inline_limit=None)[0]
    if UPDATE:
        expected_path.write_text(f"# expected output of {source.name}\n{text}")
    expected = load_mir(expected_path)
    assert parse_mir(text) == expected, f"{case}: got\n{text}"  # compared after parsing
    assert [v.name for v in got.outputs] == [v.name for v in graph.outputs]
    assert got.inputs == graph.inputs
    _assert_same_outputs(graph, got)
    assert _run(got, _passes_of(source)) == got  # a second run changes nothing


def test_golden_cases_cover_every_pass():
    covered = {n for p in GOLDEN.glob("*.in.mir") for n in _passes_of(p)}
    assert set(PIPELINE) <= covered and "simplify" in covered


# --- the registry -------------------------------------------------------------------------------


def test_pipeline_passes_are_registered_under_their_names():
    assert list(PIPELINE) == ["matmul_operands", "conv_taps", "fold_constants", "fold_scales", "identities",
                              "canonical_attrs", "cse", "dce"]
    for name, p in PASSES.items():
        assert p.name == name and p.doc
    with pytest.raises(Exception, match="no simplification pass for 'nope'.*known: canonical_attrs, conv_taps, cse"):
        PASSES.get("nope")


# --- single rules -------------------------------------------------------------------------------


def test_folding_keeps_large_results_as_constants_but_not_exploding_broadcasts():
    b = GraphBuilder("g")
    x = b.input("x", (256, 64))
    w = b.const(np.arange(64 * 256, dtype=np.float32).reshape(64, 256) / 1000, name="w")
    wt = b.transpose(w, name="wt")  # 16384 elements, as many as its input: folded
    scalar = b.const(np.float32(2.0), name="s")
    big = b.broadcast_to(scalar, shape=[256, 64], name="big")  # 1 -> 16384: kept
    b.output(b.add(b.mul(x, wt), big, name="y"))
    g = b.build()
    assert wt.type.size > FOLD_LIMIT
    s = simplify(g)
    assert "wt" in {v.name for v in s.constants}
    np.testing.assert_array_equal(s.constants[s.value("wt")], g.constants[w].T)
    assert [n.op for n in s.nodes] == ["broadcast_to", "mul", "add"]
    _assert_same_outputs(g, s)


def test_folding_a_graph_output_keeps_its_name():
    b = GraphBuilder("g")
    x = b.input("x", (3,))
    c = b.const(np.array([1.0, 4.0, 9.0], np.float32), name="c")
    b.output(b.sqrt(c, name="root"), b.relu(x, name="r"))
    s = simplify(b.build())
    assert [v.name for v in s.outputs] == ["root", "r"]
    np.testing.assert_array_equal(s.constants[s.outputs[0]], [1, 2, 3])
    assert [n.op for n in s.nodes] == ["relu"]


def test_out_of_range_gather_on_constants_is_not_folded():
    b = GraphBuilder("g")
    table = b.const(np.ones((4, 2), np.float32), name="table")
    idx = b.const(np.array([7], np.int32), name="idx")
    x = b.input("x", (1, 2))
    b.output(b.add(b.gather(table, idx, name="rows"), x, name="y"))
    s = simplify(b.build())
    assert [n.op for n in s.nodes] == ["gather", "add"]


def test_neutral_constant_that_broadcasts_is_not_removed():
    b = GraphBuilder("g")
    x = b.input("x", (4,))
    ones = b.const(np.ones((3, 4), np.float32), name="ones")
    b.output(b.mul(x, ones, name="y"))  # y is [3, 4]: x*1 here is a broadcast, not x
    s = simplify(b.build())
    assert [n.op for n in s.nodes] == ["mul"]


def test_cse_keeps_duplicate_outputs_apart_and_named():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3))
    first = b.exp(x, name="first")
    second = b.exp(x, name="second")
    b.output(second, first, second)
    g = b.build()
    s = simplify(g)
    assert [v.name for v in s.outputs] == ["second", "first", "second"]
    _assert_same_outputs(g, s)


def test_cse_renames_the_kept_node_after_a_merged_output():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3))
    hidden = b.tanh(x, name="hidden")
    shown = b.tanh(x, name="shown")
    b.output(b.add(hidden, shown, name="sum"), shown)
    s = simplify(b.build())
    assert [(n.op, n.outputs[0].name) for n in s.nodes] == [("tanh", "shown"), ("add", "sum")]
    assert [v.name for v in s.nodes[1].inputs] == ["shown", "shown"]


def test_dce_keeps_every_output_of_a_live_multi_output_node():
    b = GraphBuilder("g")
    x = b.input("x", (4, 2))
    top, _ = b.split(x, sections=2, name=["top", "bottom"])
    b.output(top)
    s = simplify(b.build())
    assert [v.name for v in s.nodes[0].outputs] == ["top", "bottom"]


def test_live_taps_are_the_taps_reading_the_input_somewhere():
    for size, k, stride, dilation, pad in itertools.product(range(1, 7), range(1, 6), range(1, 4), range(1, 3),
                                                           range(4)):
        if size + 2 * pad < dilation * (k - 1) + 1:
            continue
        out = (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1
        live = [t for t in range(k) if any(0 <= y * stride + t * dilation - pad < size for y in range(out))]
        assert live_taps(size, out, k, stride, dilation, pad) == ((live[0], live[-1]) if live else (0, k - 1))


@pytest.mark.parametrize("hw,k,stride,dilation,padding,groups", [
    ((1, 1), (3, 3), 1, 1, [1, 1], 1), ((2, 2), (3, 3), 2, 1, [1, 1], 1), ((1, 3), (3, 3), 1, 1, [1, 1], 2),
    ((1, 1), (5, 3), 1, 2, [4, 2, 4, 2], 1), ((3, 3), (3, 3), 2, 2, [2, 2], 2), ((1, 1), (7, 7), 2, 1, [3, 3], 1),
    ((4, 4), (3, 3), 1, 1, [1, 1], 1)])
def test_conv_taps_keeps_the_output(hw, k, stride, dilation, padding, groups):
    rng = np.random.default_rng(0)
    b = GraphBuilder("g")
    x = b.input("x", (2, 2, *hw))
    w = b.const(rng.standard_normal((4, 2 // groups, *k)).astype(np.float32), name="w")
    b.output(b.conv2d(x, w, strides=[stride, stride], padding=padding, dilation=[dilation, dilation],
                      groups=groups))
    g = b.build()
    s = PASSES.get("conv_taps")(g)
    _assert_same_outputs(g, s)
    (conv,) = s.nodes
    out = conv.outputs[0].shape[2:]
    for axis in range(2):  # every tap left reads the input at some output position
        size, kk, pad = hw[axis], conv.inputs[1].shape[2 + axis], list(conv.attrs["padding"])[axis]
        assert live_taps(size, out[axis], kk, stride, dilation, pad) == (0, kk - 1)
    if hw == (4, 4):
        assert s is g or s == g  # every tap is live: nothing changes
    assert PASSES.get("conv_taps")(s) == s


def _scaled_product(op, scale_shape, *, transpose_b=False, shared_weight=False, output_product=False,
                    dtype=np.float32):
    rng = np.random.default_rng(1)
    b = GraphBuilder("g")
    if op == "conv2d":
        x = b.input("x", (2, 3, 5, 5), dtype)
        w = b.const(rng.standard_normal((4, 3, 3, 3)).astype(dtype), name="w")
        y = b.conv2d(x, w, strides=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1)
    else:
        x = b.input("x", (6, 8), dtype)
        w = b.const(rng.standard_normal((5, 8) if transpose_b else (8, 5)).astype(dtype), name="w")
        y = b.matmul(x, w, transpose_b=transpose_b)
    s = b.const((rng.standard_normal(scale_shape) + 2).astype(dtype), name="s")
    outs = [b.add(b.mul(y, s), b.const(np.ones(scale_shape, dtype), name="shift"))]
    if shared_weight:
        outs.append(b.relu(w))
    if output_product:
        outs.append(y)
    for o in outs:
        b.output(o)
    return b.build()


@pytest.mark.parametrize("op,scale_shape,transpose_b", [
    ("conv2d", (1, 4, 1, 1), False), ("conv2d", (4, 1, 1), False), ("conv2d", (), False), ("conv2d", (1,), False),
    ("matmul", (5,), False), ("matmul", (1, 5), True), ("matmul", (), True)],
    ids=["conv-nchw-scale", "conv-chw-scale", "conv-scalar", "conv-one", "matmul", "matmul-transposed-b",
         "matmul-scalar"])
def test_fold_scales_moves_a_channel_scale_into_the_weight(op, scale_shape, transpose_b):
    # an inference batch norm after a conv is a per-channel mul and add: the mul goes into the
    # weight, as PyTorch's ONNX export does, so both doors compile the same kernels
    g = _scaled_product(op, scale_shape, transpose_b=transpose_b)
    s = PASSES.get("dce")(PASSES.get("fold_scales")(g))
    assert [n.op for n in s.nodes] == [op, "add"]
    assert [v.name for v in s.constants if v.name.startswith("w")] == ["w.scaled"]
    _assert_same_outputs_close(g, s)
    assert PASSES.get("fold_scales")(s) == s


@pytest.mark.parametrize("case", ["scale-along-rows", "shared-weight", "product-is-an-output", "integer"])
def test_fold_scales_leaves_what_it_cannot_fold(case):
    g = {"scale-along-rows": lambda: _scaled_product("matmul", (6, 1)),
         "shared-weight": lambda: _scaled_product("conv2d", (1, 4, 1, 1), shared_weight=True),
         "product-is-an-output": lambda: _scaled_product("conv2d", (1, 4, 1, 1), output_product=True),
         "integer": lambda: _scaled_product("matmul", (5,), dtype=np.int32)}[case]()
    assert PASSES.get("fold_scales")(g) == g


def _assert_same_outputs_close(before, after):
    inputs = random_inputs(before, 0)  # the scaled weight rounds once more than the product
    for a, b in zip(evaluate(before, inputs), evaluate(after, inputs)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_simplify_the_examples_is_equivalent(examples_dir):
    for name in ("mlp", "resnet_block", "transformer_block"):
        g = expand(load_mir(examples_dir / f"{name}.mir"))
        s = simplify(g)
        assert [v.name for v in s.outputs] == [v.name for v in g.outputs]
        _assert_same_outputs_close(g, s)  # resnet_block's batch-norm scales go into its conv weights
    # batch norm's per-channel statistics fold away and its scale goes into the conv weights:
    # only convs and their shifts stay
    r = simplify(expand(load_mir(examples_dir / "resnet_block.mir")))
    assert [n.op for n in r.nodes] == ["conv2d", "add", "relu", "conv2d", "add", "add", "relu"]


def test_passes_log_their_rewrites_at_debug(caplog):
    g = load_mir(GOLDEN / "simplify.in.mir")
    with caplog.at_level(logging.DEBUG, logger="akg.graph.simplify"):
        simplify(g)
    assert "fold_constants on simplify" in caplog.text and "fixed point" in caplog.text


# --- random graphs ------------------------------------------------------------------------------

_SHAPE = (3, 4)


@st.composite
def foldable_graphs(draw):
    """Random graphs rich in what the passes rewrite: constants (neutral ones included),
    duplicate ops, layout round trips, casts, dead values."""
    b = GraphBuilder("r")
    pool = [b.input("x", _SHAPE), b.input("y", _SHAPE)]
    for i in range(draw(st.integers(1, 3))):
        fill = draw(st.sampled_from([0.0, 1.0, 0.5, -2.0, None]))
        data = np.full(_SHAPE, fill, np.float32) if fill is not None else \
            np.random.default_rng(i).standard_normal(_SHAPE).astype(np.float32)
        pool.append(b.const(data if draw(st.booleans()) else data[:1, :1].reshape(()), name=f"c{i}"))
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "divide", "same", "reshape",
                                     "transpose", "cast", "reduce"]))
        x = draw(st.sampled_from(pool))
        full = [v for v in pool if v.shape == _SHAPE]
        if kind == "unary":
            pool.append(b.op(draw(st.sampled_from(["neg", "tanh", "relu", "abs"])), x))
        elif kind == "binary":
            y = draw(st.sampled_from(pool))
            pool.append(b.op(draw(st.sampled_from(["add", "sub", "mul", "maximum"])), x, y))
        elif kind == "divide":  # by a constant only: x+0 -> x may turn +0 into -0, which a
            # division by that value would turn into -inf
            y = draw(st.sampled_from([v for v in pool if v in b._constants]))
            pool.append(b.div(x, y))
        elif kind == "same":  # an exact duplicate of an earlier node
            nodes = [n for n in b._nodes if n.outputs[0] in pool]
            if nodes:
                node = draw(st.sampled_from(nodes))
                pool.append(b.op(node.op, *node.inputs, **node.attrs))
        elif kind == "reshape" and x.shape == _SHAPE:
            mid = draw(st.sampled_from([[12], [4, 3], [1, 3, 4]]))
            pool.append(b.reshape(b.reshape(x, shape=mid), shape=list(_SHAPE)))
        elif kind == "transpose" and x.shape == _SHAPE:
            pool.append(b.transpose(b.transpose(x, perm=[1, 0]), perm=[1, 0]))
        elif kind == "cast":
            pool.append(b.cast(b.cast(x, to="float64"), to="float32") if draw(st.booleans())
                        else b.cast(x, to="float32"))
        elif kind == "reduce" and full:
            pool.append(b.op(draw(st.sampled_from(["sum", "max"])), draw(st.sampled_from(full)),
                             axes=[draw(st.integers(0, 1))], keepdims=True))
    outs = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
    b.output(*outs, pool[-1])
    return b.build()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(foldable_graphs(), st.integers(0, 3))
def test_simplify_random_graphs_is_equivalent_and_idempotent(graph, seed):
    s = simplify(graph)
    assert [v.name for v in s.outputs] == [v.name for v in graph.outputs]
    assert [v.type for v in s.outputs] == [v.type for v in graph.outputs]
    assert s.inputs == graph.inputs
    assert len(s.nodes) <= len(graph.nodes)
    _assert_same_outputs(graph, s, seed)
    assert simplify(s) == s
    for name in PIPELINE:  # every pass alone is equivalent too
        _assert_same_outputs(graph, PASSES.get(name)(graph), seed)
