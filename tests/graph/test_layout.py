"""Constant matmul weights stored as panels: same values, the panel layout, kernels that
read the panels without a pack copy."""

import numpy as np
import pytest

import akg
from akg.graph import GraphBuilder, evaluate, random_inputs
from akg.graph.fuse import partition
from akg.graph.layout import PANEL, pack_weights


def _dense(n=48, k=24, transpose_b=False, const=True, seed=0):
    rng = np.random.default_rng(seed)
    b = GraphBuilder("dense")
    x = b.input("x", (8, k))
    shape = (n, k) if transpose_b else (k, n)
    w = b.const(rng.standard_normal(shape).astype(np.float32), name="w") if const else b.input("w", shape)
    b.output(b.relu(b.matmul(x, w, transpose_b=transpose_b)))
    return b.build()


@pytest.mark.parametrize("transpose_b", [False, True])
def test_packed_graph_computes_the_same_values(transpose_b):
    graph = _dense(transpose_b=transpose_b)
    packed = pack_weights(graph)
    panels = [(v, a) for v, a in packed.constants.items() if v.name.endswith(".panels")]
    assert len(panels) == 1 and panels[0][1].shape == (48 // PANEL, 24, PANEL)
    assert not any(n.op == "matmul" and n.attrs["transpose_b"] for n in packed.nodes)
    inputs = random_inputs(graph, 1)
    np.testing.assert_array_equal(evaluate(packed, inputs)[0], evaluate(graph, inputs)[0])


def test_panel_j_holds_columns_j_times_panel_onwards():
    graph = _dense()
    (w,) = graph.constants.values()
    (panels,) = [a for v, a in pack_weights(graph).constants.items() if v.name.endswith(".panels")]
    np.testing.assert_array_equal(panels[1], w[:, PANEL:2 * PANEL])


@pytest.mark.parametrize("graph", [_dense(n=40), _dense(n=PANEL), _dense(const=False)],
                         ids=["columns-not-a-multiple", "one-panel", "weight-is-an-input"])
def test_left_alone(graph):
    assert pack_weights(graph) is graph


def test_a_weight_shared_by_two_matmuls_is_packed_once():
    b = GraphBuilder("shared")
    w = b.const(np.ones((24, 32), np.float32), name="w")
    b.output(b.add(b.matmul(b.input("x", (4, 24)), w), b.matmul(b.input("y", (4, 24)), w)))
    packed = pack_weights(b.build())
    assert [v.name for v in packed.constants] == ["w.panels"]


def test_kernel_reads_the_panels_without_a_pack_copy():
    graph = _dense(n=256, k=512)
    (kernel,) = partition(graph).kernels
    assert kernel.name.endswith("_matmul_relu")  # the weight's relayout is not in the name
    built = akg.build(kernel.subgraph)
    assert "w_panels_local" not in built.tir()  # each panel is read in place
    inputs = random_inputs(graph, 0)
    np.testing.assert_allclose(built(inputs["x"])[0], evaluate(graph, inputs)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bits, n, k, stored", [(512, 10, 128, True), (256, 10, 128, False), (512, 4, 8, False),
                                                (512, 1, 128, False)],
                         ids=["narrower-than-a-vector", "a-vector-wide-on-avx2", "reduction-shorter-than-a-vector",
                              "one-column"])
def test_narrow_weight_is_stored_by_output_column(bits, n, k, stored):
    # A weight narrower than one vector (a classifier's 10 columns) is read with transpose_b from
    # [N, K]: each output is a dot product over a contiguous row. ONNX exports of PyTorch's
    # Linear give [K, N], MindSpore's MatMul gives [N, K] with transpose_b: both doors now
    # compile the same kernel (issue 17: the ONNX door ran MindIR's mlp 0.71x of the graph).
    graph = _dense(n=n, k=k)
    packed = pack_weights(graph, target=_Cpu(bits))
    if not stored:
        assert packed is graph
        return
    (w,) = graph.constants.values()
    assert [(v.name, a.shape) for v, a in packed.constants.items()] == [("w.nk", (n, k))]
    np.testing.assert_array_equal(packed.constants[next(iter(packed.constants))], w.T)
    (mm,) = [node for node in packed.nodes if node.op == "matmul"]
    assert mm.attrs["transpose_b"]
    inputs = random_inputs(graph, 1)  # NumPy sums the transposed product in another order
    np.testing.assert_allclose(evaluate(packed, inputs)[0], evaluate(graph, inputs)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bits, n, stored", [(512, 120, True), (512, 84, True), (512, 10, False), (512, 64, False)],
                         ids=["120-columns", "84-columns", "narrower-than-a-vector", "panels"])
def test_wide_transposed_weight_is_stored_k_major(bits, n, stored):
    # [N, K] read with transpose_b, N a vector wide or more but no multiple of the strip (no
    # panels): stored [K, N]; narrow weights stay [N, K], panel-sized ones go into panels
    graph = _dense(n=n, k=40, transpose_b=True)
    packed = pack_weights(graph, target=_Cpu(bits))
    names = [v.name for v in packed.constants]
    assert (names == ["w.t.k_n"]) == stored
    if stored:
        (mm,) = [node for node in packed.nodes if node.op == "matmul"]
        assert not mm.attrs["transpose_b"] and packed.constants[next(iter(packed.constants))].shape == (40, n)
        inputs = random_inputs(graph, 1)
        np.testing.assert_allclose(evaluate(packed, inputs)[0], evaluate(graph, inputs)[0], rtol=1e-5, atol=1e-5)


def test_one_weight_read_both_ways_is_stored_once_per_way():
    # x @ w (10 columns: stored [N, K]) and y @ w^T (120 columns, no panels: stored [K, N])
    w = np.random.default_rng(0).standard_normal((120, 10)).astype(np.float32)
    b = GraphBuilder("both")
    wc = b.const(w, name="w")
    b.output(b.matmul(b.input("x", (4, 120)), wc), b.matmul(b.input("y", (4, 10)), wc, transpose_b=True))
    graph = b.build()
    packed = pack_weights(graph, target=_Cpu(512))
    assert sorted(v.name for v in packed.constants) == ["w.nk", "w.t.k_n"]
    inputs = random_inputs(graph, 1)
    for got, want in zip(evaluate(packed, inputs), evaluate(graph, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_narrow_weight_kernel_matches_the_one_written_transposed():
    # the same model written either way compiles to one kernel reading the same [N, K] constant
    # (for 16 lanes: 10 columns are under a vector; with AVX2's 8 the weight is kept [K, N])
    kernels = [partition(_dense(n=10, k=128, transpose_b=tb), target=_Cpu(512)).kernels for tb in (False, True)]
    assert [[v.shape for v in k.subgraph.graph.constants] for (k,) in kernels] == [[(10, 128)]] * 2


def _Cpu(bits):
    """A CPU target whose vector width is `bits` (the panel width follows its vector strip)."""
    from akg.backends.cpu import CpuTarget

    return CpuTarget(vector_bits=bits)


@pytest.mark.parametrize("bits, n, width", [(256, 64, 16), (512, 64, 32), (512, 48, 16), (512, 96, 32)],
                         ids=["avx2", "avx512", "avx512-one-vector", "avx512-odd-strips"])
def test_panel_is_the_register_tiles_vector_strip(bits, n, width):
    # A panel narrower than the strip that a register tile loads turns its vector loads into
    # gathers: the width follows the target's vectors (two when they divide the columns).
    graph = _dense(n=n)
    packed = pack_weights(graph, target=_Cpu(bits))
    (panels,) = [a for v, a in packed.constants.items() if v.name.endswith(".panels")]
    assert panels.shape == (n // width, 24, width)
    inputs = random_inputs(graph, 2)
    np.testing.assert_array_equal(evaluate(packed, inputs)[0], evaluate(graph, inputs)[0])


def test_partition_for_a_target_packs_for_its_vectors():
    from akg.backends.cpu import host_cpu

    target = host_cpu()
    graph = _dense(n=256, k=64)
    (kernel,) = partition(graph, target=target).kernels
    (panels,) = [a for v, a in kernel.subgraph.graph.constants.items() if v.name.endswith(".panels")]
    assert panels.shape[-1] == 2 * target.vector_lanes("float32")


# --- conv weights stored with the output channel last --------------------------------------------


def _conv(out_channels=32, channels=16, image=8, k=3, stride=2, groups=1, const=True, seed=0):
    rng = np.random.default_rng(seed)
    b = GraphBuilder("conv")
    x = b.input("x", (2, channels, image, image))
    shape = (out_channels, channels // groups, k, k)
    w = b.const(rng.standard_normal(shape).astype(np.float32), name="w") if const else b.input("w", shape)
    b.output(b.relu(b.conv2d(x, w, strides=[stride, stride], padding=[k // 2, k // 2], groups=groups)))
    return b.build()


def test_narrow_conv_weight_is_stored_channels_last_with_the_same_values():
    # output 4x4, narrower than a vector of PANEL lanes: the mapping vectorises over the 32
    # output channels and reads the weight along them
    graph = _conv()
    packed = pack_weights(graph)
    ((stored, array),) = packed.constants.items()
    (w,) = graph.constants.values()
    # in blocks of PANEL channels, each block's whole reduction contiguous
    assert stored.name == "w.Oihwo" and array.shape == (2, 16, 3, 3, PANEL)
    np.testing.assert_array_equal(array[1, 5, 1, 2], w[PANEL:, 5, 1, 2])  # one contiguous run of channels
    inputs = random_inputs(graph, 1)
    np.testing.assert_array_equal(evaluate(packed, inputs)[0], evaluate(graph, inputs)[0])


@pytest.mark.parametrize("graph", [_conv(image=32, stride=1), _conv(out_channels=8), _conv(channels=32, groups=32),
                                   _conv(const=False), _conv(out_channels=24, image=64)],
                         ids=["output-rows-a-vector-wide", "fewer-channels-than-lanes", "depthwise",
                              "weight-is-an-input", "strided-channels-not-whole-vectors"])
def test_conv_weight_left_alone(graph):
    assert pack_weights(graph) is graph


def test_strided_conv_weight_is_stored_channels_last_even_with_wide_rows():
    # output rows 32 wide, stride 2: a vector along the row would gather the input, so the
    # mapping vectorises over the 32 output channels (two vectors of PANEL)
    packed = pack_weights(_conv(image=64))
    ((stored, array),) = packed.constants.items()
    assert stored.name == "w.Oihwo" and array.shape == (2, 16, 3, 3, PANEL)


def test_strided_conv_over_image_channels_keeps_its_weight():
    # a stem (3 input channels, stride 2) with output rows 32 wide runs along its rows
    # (`akg.graph.ops.conv.image_rows`): its weight stays OIHW; with rows of 8, narrower than a
    # vector, it is mapped over its output channels after all
    stem = _conv(channels=3, image=64, k=7)
    assert pack_weights(stem) is stem
    narrow = pack_weights(_conv(channels=3, image=16, k=7))
    assert [v.name for v in narrow.constants] == ["w.Oihwo"]


def test_wide_conv_with_many_channels_is_stored_in_blocks():
    # rows 32 wide at stride 1, but 4 vectors of output channels over a 3x3 x 16 reduction: the
    # mapping vectorises over the channels (`akg.schedules.cpu_defaults.channel_rich`)
    packed = pack_weights(_conv(out_channels=4 * PANEL, image=32, stride=1))
    ((stored, array),) = packed.constants.items()
    assert stored.name == "w.Oihwo" and array.shape == (4, 16, 3, 3, PANEL)
    # a 1x1 window does not slide along the rows: the weight is left alone
    one = _conv(out_channels=4 * PANEL, image=32, stride=1, k=1)
    assert pack_weights(one) is one


def test_conv_weight_blocks_only_past_half_of_l2():
    """On a target, a weight goes in blocks of channels only where the mapping takes cache tiles
    of channels (over half of L2); a smaller one stays channels-last, read whole."""
    from dataclasses import replace

    from akg.backends.cpu import host_cpu

    graph = _conv(out_channels=64, channels=32, image=4, stride=1)  # a 72 KiB weight
    names = lambda t: [v.name for v in pack_weights(graph, target=t).constants]  # noqa: E731
    assert names(replace(host_cpu(), l2_bytes=1 << 20)) == ["w.ihwo"]
    lanes = host_cpu().vector_lanes("float32")
    if 64 % (2 * lanes) == 0 and 64 > 2 * lanes:  # a strip of two vectors divides 64 into blocks
        assert names(replace(host_cpu(), l2_bytes=64 << 10)) == ["w.Oihwo"]


@pytest.mark.parametrize("image, k", [(14, 1), (14, 3), (8, 1), (4, 3)])
def test_small_strided_conv_weight_goes_in_blocks_where_its_register_strip_is_one(image, k):
    # a strided conv mapped over its output channels: under half of L2, its weight goes in
    # blocks only where the register tile's strip of channels is one block (7 or 4 px rows of
    # 64 channels on AVX-512: 32-channel strips and blocks), else channels-last as it was
    from akg.backends.cpu import host_cpu

    target = host_cpu()
    graph = _conv(out_channels=64, channels=32, image=image, k=k)
    (name,) = [v.name for v in pack_weights(graph, target=target).constants]
    width = image // 2
    one_block = target.channel_strip("float32", width) == target.weight_panel("float32", 64) < 64
    assert name == ("w.Oihwo" if one_block else "w.ihwo")
    inputs = random_inputs(graph, 1)
    np.testing.assert_allclose(evaluate(pack_weights(graph, target=target), inputs)[0], evaluate(graph, inputs)[0],
                               rtol=1e-6, atol=1e-5)


def test_conv_weight_of_one_block_is_stored_channels_last():
    # 24 output channels: blocks of 16 do not divide them, so one block of all 24 (channels last)
    packed = pack_weights(_conv(out_channels=24, image=4))
    ((stored, array),) = packed.constants.items()
    assert stored.name == "w.ihwo" and array.shape == (16, 3, 3, 24)


def test_target_without_weight_panels_keeps_conv_weights():
    class Keeps:
        def weight_panel(self, dtype, columns):
            return None

    graph = _conv()
    assert pack_weights(graph, target=Keeps()) is graph


def test_conv_kernel_reads_the_channels_last_weight_in_place():
    from akg.backends.cpu import host_cpu

    graph = _conv(out_channels=64, channels=32, image=4, stride=1)
    (kernel,) = partition(graph, target=host_cpu()).kernels
    assert kernel.name.endswith("_conv2d_relu")  # the relayout is folded into the conv kernel
    # channels last: blocks of the vector strip only for weights over half of L2 (this one: 72 KiB)
    assert [v.name for v in kernel.subgraph.graph.constants] == ["w.ihwo"]
    built = akg.build(kernel.subgraph)
    inputs = random_inputs(graph, 0)
    np.testing.assert_allclose(built(inputs["x"])[0], evaluate(graph, inputs)[0], rtol=1e-4, atol=1e-4)


def _attention_scores(heads=4, seq=48, dim=16):
    """softmax(Q K^T) of computed Q and K ([heads, seq, dim]: K read with transpose_b)."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("scores")
    x = b.input("x", (seq, heads * dim))
    q, k = (b.transpose(b.reshape(b.matmul(x, b.const(rng.standard_normal((heads * dim, heads * dim))
                                                          .astype(np.float32), name=n)), shape=[seq, heads, dim]), perm=[1, 0, 2])
            for n in ("wq", "wk"))
    b.output(b.softmax(b.batch_matmul(q, k, transpose_b=True), axis=-1))
    return b.build()


@pytest.mark.parametrize("bits, seq, flipped", [(512, 48, True), (512, 8, False), (256, 8, True)],
                         ids=["seq-fills-a-vector", "seq-under-a-vector", "avx2-seq-fills-a-vector"])
def test_computed_k_transposed_is_written_k_major_by_its_producer(bits, seq, flipped):
    # Q K^T read K [heads, N, K] along N (a gather per vector); its producer writes it
    # [heads, K, N] instead, where N fills a vector (as for a constant weight, `wide_columns`)
    graph = _attention_scores(seq=seq)
    packed = pack_weights(graph, target=_Cpu(bits))
    (bmm,) = [node for node in packed.nodes if node.op == "batch_matmul"]
    assert bmm.attrs["transpose_b"] != flipped
    if flipped:
        assert bmm.inputs[1].name.endswith(".k_n") and bmm.inputs[1].shape == (4, 16, seq)
    inputs = random_inputs(graph, 1)
    np.testing.assert_allclose(evaluate(packed, inputs)[0], evaluate(graph, inputs)[0], rtol=1e-5, atol=1e-5)


def test_computed_k_transposed_folds_into_its_producers_kernel():
    from akg.backends.cpu import host_cpu
    from akg.verify import Reference, compare

    graph = _attention_scores()
    kernels = partition(graph, target=host_cpu()).kernels
    (scores,) = [k for k in kernels if any(n.op == "batch_matmul" for n in k.subgraph.graph.nodes)]
    (bmm,) = [n for n in scores.subgraph.graph.nodes if n.op == "batch_matmul"]
    assert not bmm.attrs["transpose_b"] and not any(n.op == "transpose" for n in scores.subgraph.graph.nodes)
    model = akg.compile_model(graph)
    inputs = random_inputs(graph, 0)
    assert compare(graph, model(**inputs), Reference.of(graph, inputs)) == []


def test_k_transposed_given_as_an_input_is_read_as_given():
    # a graph input (or a constant) has no kernel to write it transposed: a copy of its own
    # would cost a kernel call, so the batch matmul keeps transpose_b
    b = GraphBuilder("scores")
    q, k = b.input("q", (4, 48, 16)), b.input("k", (4, 48, 16))
    b.output(b.batch_matmul(q, b.transpose(b.transpose(k, perm=[0, 2, 1]), perm=[0, 2, 1]), transpose_b=True))
    packed = pack_weights(b.build(), target=_Cpu(512))
    (bmm,) = [node for node in packed.nodes if node.op == "batch_matmul"]
    assert bmm.attrs["transpose_b"]
