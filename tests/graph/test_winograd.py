"""The "winograd" pass (graph/winograd.py): which convs it rewrites, for which targets, and that
the rewritten graph and its compiled kernels compute the conv."""

import numpy as np
import pytest

import akg
from akg.backends.cpu import CpuTarget
from akg.graph import GraphBuilder, evaluate
from akg.graph.ops.conv import conv2d
from akg.graph.pipeline import plan_model
from akg.graph.winograd import tile_columns, winograd_convs
from akg.target import get_target

AVX512 = CpuTarget(vector_bits=512)


def _conv_block(channels=64, image=28, out_channels=None, const=True, dtype="float32", **attrs):
    """conv2d (+ bias, relu) of `channels` x `image` x `image`: the shape of a ResNet block's conv."""
    rng = np.random.default_rng(0)
    out_channels = out_channels or channels
    attrs = {"padding": [1, 1], **attrs}
    kh = 3 if "kernel" not in attrs else attrs.pop("kernel")
    cg = channels // attrs.get("groups", 1)
    b = GraphBuilder("block")
    x = b.input("x", (1, channels, image, image), dtype)
    w_value = (rng.standard_normal((out_channels, cg, kh, kh)) / np.sqrt(9 * channels)).astype(dtype)
    w = b.const(w_value, "w") if const else b.input("w", w_value.shape, dtype)
    y = b.conv2d(x, w, **attrs)
    bias = b.const(rng.standard_normal((1, out_channels, 1, 1)).astype(dtype), "bias")
    b.output(b.relu(b.add(y, bias)))
    return b.build()


def _ops(graph):
    return [n.op for n in graph.nodes]


def test_an_eligible_conv_becomes_the_three_ops_and_computes_the_same():
    graph = _conv_block(64, 28)
    rewritten = winograd_convs(graph, AVX512)
    assert _ops(rewritten)[:3] == ["winograd_input", "winograd_product", "winograd_output"]
    assert "conv2d" not in _ops(rewritten)
    x = np.random.default_rng(1).standard_normal((1, 64, 28, 28)).astype(np.float32)
    (want,), (got,) = evaluate(graph, {"x": x}), evaluate(rewritten, {"x": x})
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("case, kwargs", [
    ("strided", {"strides": [2, 2]}),
    ("1x1", {"kernel": 1, "padding": [0, 0]}),
    ("dilated", {"dilation": [2, 2], "padding": [2, 2]}),
    ("grouped", {"groups": 2}),
    ("padded by 2", {"padding": [2, 2]}),
    ("32 channels", {"channels": 32}),
    ("rows of 7 tiles (14 px)", {"channels": 256, "image": 14}),
    ("rows of 32 tiles (64 px)", {"image": 64}),
    ("computed weight", {"const": False}),
    ("float64", {"dtype": "float64"}),
])
def test_convs_that_would_not_gain_stay_convs(case, kwargs):
    shape = {k: kwargs.pop(k) for k in ("channels", "image") if k in kwargs}
    graph = _conv_block(**shape, **kwargs)
    assert winograd_convs(graph, AVX512) is graph, case


@pytest.mark.parametrize("target", [None, "cuda-emu", "npu"])
def test_only_targets_that_ask_for_it_rewrite(target):
    graph = _conv_block(64, 28)
    assert winograd_convs(graph, None if target is None else get_target(target)) is graph


@pytest.mark.parametrize("bits, image, cols", [(512, 28, 16), (512, 56, 28), (256, 28, 14), (256, 56, None),
                                               (512, 14, None), (256, 14, 8)])
def test_a_row_of_tiles_is_padded_to_a_vector_and_no_wider_than_two(bits, image, cols):
    node = next(n for n in _conv_block(64, image).nodes if n.op == "conv2d")
    assert tile_columns(CpuTarget(vector_bits=bits), node) == cols


def test_a_weight_shared_by_two_convs_is_transformed_once():
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    x = b.input("x", (1, 64, 28, 28))
    w = b.const(rng.standard_normal((64, 64, 3, 3)).astype(np.float32), "w")
    b.output(b.conv2d(b.conv2d(x, w, padding=[1, 1]), w, padding=[1, 1]))
    rewritten = winograd_convs(b.build(), AVX512)
    assert _ops(rewritten).count("winograd_product") == 2
    assert len(rewritten.constants) == 1


def test_the_compiled_block_runs_as_three_kernels_and_matches_the_conv():
    graph = _conv_block(64, 28)
    host = get_target("cpu")
    if tile_columns(host, next(n for n in graph.nodes if n.op == "conv2d")) is None:
        pytest.skip(f"this host's vectors ({host.vector_bits} bits) take no Winograd at 28 px")
    names = [k.name.split(".")[-1] for k in plan_model(graph, host).kernels]
    assert names == ["k0_winograd_input", "k1_winograd_product", "k2_winograd_output_add_relu"]
    model = akg.compile(graph)
    x = np.random.default_rng(4).standard_normal((1, 64, 28, 28)).astype(np.float32)
    (got,) = model(x)
    w = graph.constants[next(v for v in graph.constants if v.name == "w")]
    bias = graph.constants[next(v for v in graph.constants if v.name == "bias")]
    want = np.maximum(conv2d(x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1, 1, 1), (1, 1), 1) + bias, 0)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
