"""Fusion partitioning: the examples' expected kernels, each rule and limit with its cut reason,
random graphs (no cycles, every node in one kernel, kernels in order reproduce the graph), a
few compiled partitions, and `akg show --fusion`."""

import logging
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from akg.graph import GraphBuilder, evaluate, random_inputs
from akg.graph.fuse import (ANCHOR_KINDS, INDEX_CHANGES, STAGE_KINDS, FusionLimits, Partition, constant_only_nodes,
                            emit_partition, partition)
from akg.graph.io import load_mir

GOLDEN = Path(__file__).parent / "golden" / "fusion"
UPDATE = os.environ.get("AKG_UPDATE_GOLDEN") == "1"


def groups(p: Partition) -> list[list[str]]:
    """Each kernel's nodes, named by their first output; the relayout of a constant weight
    into panels (`akg.graph.layout`, two nodes reading only constants) is left out."""
    out = []
    for k in p.kernels:
        fixed = {id(n) for n in constant_only_nodes(k.nodes, k.subgraph.graph.constants)}
        out.append([n.outputs[0].name for n in k.nodes if id(n) not in fixed])
    return out


def reasons(p: Partition) -> dict[tuple[str, int, int], str]:
    return {(c.value, c.producer, c.consumer): c.reason for c in p.cuts}


def check_partition(graph, p: Partition, limits: FusionLimits = FusionLimits(), seed: int = 0) -> None:
    """The invariants every partition keeps."""
    # every node of the partitioned graph is in a kernel; only index changes are in several
    # (rule 7: copied into the kernels that read them), and only one kernel writes a value
    placed = Counter(id(n) for k in p.kernels for n in k.nodes)
    assert set(placed) == {id(n) for n in p.graph.nodes}
    assert all(placed[id(n)] == 1 or n.op in INDEX_CHANGES for n in p.graph.nodes)
    written = Counter(name for k in p.kernels for name in k.outputs)
    assert set(written.values()) <= {1}
    # the kernels run in the order given: each input is a graph input or an earlier output,
    # so the kernel graph is a DAG; constants live inside the kernels
    available = {v.name for v in p.graph.inputs}
    writer: dict[str, int] = {}
    for i, k in enumerate(p.kernels):
        sub = k.subgraph.graph
        assert k.inputs == tuple(v.name for v in sub.inputs)
        assert k.outputs == tuple(v.name for v in sub.outputs) and k.outputs
        assert set(k.inputs) <= available, (k.name, set(k.inputs) - available)
        for v, a in sub.constants.items():
            assert np.array_equal(p.graph.constants[v], a) and v not in sub.inputs
        assert k.subgraph.occurrences == 1 and k.name.startswith(f"{p.graph.name}.k{i}_")
        # the limits and the anchor rules
        kinds = [n.opdef.kind for n in k.nodes]
        anchors = sum(kind in ANCHOR_KINDS for kind in kinds)
        stages = sum(kind in STAGE_KINDS or n.op == "scatter_add" for kind, n in zip(kinds, k.nodes))
        assert anchors <= 1 and not (anchors and stages), k.ops
        assert len(k.nodes) <= limits.max_ops
        assert _reduce_depth(k) <= limits.max_reduce_depth
        for name in k.outputs:
            writer[name] = i
        available.update(k.outputs)
    # every value crossing kernels is a cut with a reason
    crossing = {(name, writer[name], i) for i, k in enumerate(p.kernels) for name in k.inputs if name in writer}
    assert crossing == set(reasons(p)) and all(c.reason for c in p.cuts)
    # running the kernels in order, passing values by name, gives the graph's outputs
    inputs = random_inputs(graph, seed)
    for v, want, got in zip(graph.outputs, evaluate(graph, inputs), p.evaluate(inputs)):
        # a scale folded into a weight (simplify.fold_scales) rounds once more: float32 noise
        # of a sum of hundreds of products, ~1e-6 of its magnitude
        floating = np.issubdtype(want.dtype, np.floating)
        scale = float(np.max(np.abs(want), initial=1.0, where=np.isfinite(want))) if floating else 1.0
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * scale, equal_nan=True, err_msg=v.name)


def _reduce_depth(k) -> int:
    depth: dict = {}
    for n in k.nodes:
        before = [depth[v] for v in n.inputs if v in depth]
        d = max(before, default=0) + (n.opdef.kind in STAGE_KINDS or n.op == "scatter_add")
        depth.update((v, d) for v in n.outputs)
    return max(depth.values(), default=0)


# --- the examples -------------------------------------------------------------------------------

EXPECTED = {
    "mlp": [
        ["0", "fc1", "relu1"],
        ["1", "fc2", "relu2"],
        ["2", "fc3"],
        ["loss.max", "loss.shifted", "loss.exp", "loss.sum", "loss.logsum", "loss.logp", "loss.onehot",
         "loss.masked", "loss.picked", "loss.total", "loss"],  # cross-entropy: 4 chained reductions
    ],
    "resnet_block": [  # batch norm folds into a per-channel shift, its scale into the conv weight
        ["bn1.xa", "bn1", "relu1"],
        ["bn2.xa", "bn2", "residual", "out"],
    ],
    "transformer_block": [
        ["0", "query", "query.heads", "query.t"],
        ["1", "key", "key.heads", "key.t", "key.t.k_n"],  # K written [K, N] for Q K^T (graph/layout)
        ["2", "value", "value.heads", "value.t"],
        ["scores", "scaled"],
        ["probs.max", "probs.shifted", "probs.exp", "probs.sum", "probs"],  # softmax
        ["context", "context.t", "context.merged"],
        ["3", "attn_out", "attn_norm.residual"],
        ["attn_norm.mean", "attn_norm.centred", "attn_norm.sq", "attn_norm.var", "attn_norm.var_eps",
         "attn_norm.rstd", "attn_norm.normed", "attn_norm.scaled", "attn_norm"],  # layer norm
        ["4", "ffn_in", "ffn_act"],
        ["5", "ffn_out", "out_norm.residual"],
        ["out_norm.mean", "out_norm.centred", "out_norm.sq", "out_norm.var", "out_norm.var_eps",
         "out_norm.rstd", "out_norm.normed", "out_norm.scaled", "out_norm"],
    ],
}


@pytest.fixture(scope="module")
def example_partitions(examples_dir):
    out = {}
    for name in EXPECTED:
        graph = load_mir(examples_dir / f"{name}.mir")
        out[name] = (graph, partition(graph))
    return out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_partition(example_partitions, name):
    graph, p = example_partitions[name]
    assert groups(p) == EXPECTED[name]
    check_partition(graph, p)


def test_mlp_kernels_inputs_outputs_and_cuts(example_partitions):
    _, p = example_partitions["mlp"]
    assert [(k.inputs, k.outputs) for k in p.kernels] == [
        (("x",), ("relu1",)), (("relu1",), ("relu2",)), (("relu2",), ("fc3",)), (("fc3", "labels"), ("loss",)),
    ]
    assert [k.name for k in p.kernels] == ["mlp.k0_matmul_add_relu", "mlp.k1_matmul_add_relu",
                                           "mlp.k2_matmul_add", "mlp.k3_max_sub_exp"]
    assert {v.name for v in p.kernels[0].subgraph.graph.constants} == {"fc1.weight.panels", "fc1.bias"}  # stored as panels
    assert reasons(p) == {
        ("relu1", 0, 1): "two matmul/conv ops never share a kernel (matmul %0, matmul %1)",
        ("relu2", 1, 2): "two matmul/conv ops never share a kernel (matmul %1, matmul %2)",
        ("fc3", 2, 3): "a kernel with matmul %2 takes no reduction (max %loss.max)",
    }
    assert p.kernel_of("fc3") == 2 and p.kernel_of("x") is None


def test_transformer_repeated_kernels_share_workload_keys(example_partitions):
    _, p = example_partitions["transformer_block"]
    keys = [k.subgraph.workload_key for k in p.kernels]
    assert keys[0] == keys[2] != keys[1]  # the query / value projections (the key's writes K^T)
    assert keys[7] == keys[10]  # the two layer norms
    assert len(set(keys)) == 9


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_listing_golden(example_partitions, name):
    text = emit_partition(example_partitions[name][1])
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        path.write_text(text)
    assert text == path.read_text()


# --- the rules, one at a time -------------------------------------------------------------------


def _weights(b, name, shape, seed=0):
    return b.const(np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.3, name=name)


def test_elementwise_and_broadcast_chain_is_one_kernel():
    b = GraphBuilder("ew")
    x, y = b.input("x", (4, 8)), b.input("y", (8,))
    t = b.tanh(b.add(b.mul(x, y, name="m"), 1.0, name="a"), name="t")
    b.output(b.maximum(t, b.exp(y, name="e"), name="out"))
    g = b.build()
    p = partition(g)
    assert groups(p) == [["m", "a", "t", "e", "out"]] and not p.cuts
    check_partition(g, p)


def test_matmul_takes_cheap_prologues_and_epilogues():
    b = GraphBuilder("mm")
    xt = b.input("xt", (16, 8), "float64")
    x = b.cast(b.transpose(xt, name="x_t"), to="float32", name="x")
    y = b.matmul(x, _weights(b, "w", (16, 4)), name="y")
    res = b.input("res", (8, 4))
    b.output(b.relu(b.add(b.add(y, _weights(b, "bias", (4,)), name="biased"), res, name="sum"), name="out"))
    g = b.build()
    p = partition(g)
    assert groups(p) == [["x_t", "x", "y", "biased", "sum", "out"]]
    check_partition(g, p)


def test_a_flatten_after_a_pool_is_the_classifier_s_prologue():
    """A rank-changing reshape between a pool and a matmul (LeNet's flatten) joins the matmul
    as a prologue: as the pool's epilogue the pool's loops would run over the flat output."""
    b = GraphBuilder("flat")
    x = b.input("x", (4, 16, 10, 10))
    pooled = b.max_pool2d(x, kernel=[2, 2], strides=[2, 2], padding=[0, 0, 0, 0], ceil_mode=False, name="pool")
    flat = b.reshape(pooled, shape=[4, 400], name="flat")
    b.output(b.matmul(flat, _weights(b, "w", (400, 8)), name="y"))
    g = b.build()
    p = partition(g)
    assert groups(p) == [["pool"], ["flat", "y"]]
    check_partition(g, p)


def test_an_index_change_read_by_several_kernels_is_copied_into_each():
    """Rule 7: a reshape of a graph input feeding two matmuls (a transformer's query and key
    projections) is each one's prologue; no kernel writes the reshaped input for the other."""
    b = GraphBuilder("qk")
    x = b.input("x", (2, 8, 16))
    flat = b.reshape(x, shape=[16, 16], name="flat")
    q = b.matmul(flat, _weights(b, "wq", (16, 16)), name="q")
    k = b.matmul(flat, _weights(b, "wk", (16, 16), 1), name="k")
    b.output(b.relu(q, name="rq"), b.relu(k, name="rk"))
    g = b.build()
    p = partition(g)
    assert groups(p) == [["flat", "q", "rq"], ["flat", "k", "rk"]]
    assert [kk.inputs for kk in p.kernels] == [("x",), ("x",)]
    assert [kk.outputs for kk in p.kernels] == [("rq",), ("rk",)]
    assert not p.cuts
    check_partition(g, p)
    assert "1 index change(s) copied into the kernels that read them" in emit_partition(p)


def test_an_index_change_of_a_kernel_s_own_value_is_written_once():
    """An index change of a value its kernel computes stays there and is written out (the
    other kernels could not read its input)."""
    b = GraphBuilder("own")
    x = b.input("x", (16, 16))
    e = b.exp(x, name="e")
    t = b.transpose(e, perm=[1, 0], name="t")
    b.output(b.add(t, x, name="a"), b.matmul(t, _weights(b, "w", (16, 16)), name="m"))
    g = b.build()
    p = partition(g)
    assert sum(any(n.outputs[0].name == "t" for n in kk.nodes) for kk in p.kernels) == 1
    check_partition(g, p)


def test_matmul_refuses_an_expensive_prologue():
    b = GraphBuilder("pro")
    x = b.input("x", (8, 16))
    act = b.exp(x, name="act")
    b.output(b.matmul(act, _weights(b, "w", (16, 4)), name="y"))
    p = partition(b.build())
    assert groups(p) == [["act"], ["y"]]
    assert reasons(p) == {("act", 0, 1): "matmul %y takes only index-change or cast prologues, not exp %act"}


def test_two_matmuls_never_share_a_kernel_and_reductions_stay_out():
    b = GraphBuilder("two")
    x = b.input("x", (8, 16))
    h = b.matmul(x, _weights(b, "w1", (16, 16)), name="h")
    h2 = b.matmul(h, _weights(b, "w2", (16, 16), 1), name="h2")
    b.output(b.softmax(h2, axis=-1, name="p"))
    g = b.build()
    p = partition(g)
    assert groups(p) == [["h"], ["h2"], ["p.max", "p.shifted", "p.exp", "p.sum", "p"]]
    r = reasons(p)
    assert r[("h", 0, 1)].startswith("two matmul/conv ops never share a kernel")
    assert r[("h2", 1, 2)] == "a kernel with matmul %h2 takes no reduction (max %p.max)"
    check_partition(g, p)


def test_no_fusion_creates_a_cycle():
    b = GraphBuilder("cyc")  # m -> max -> sub <- m: sub joining m would need max inside too
    m = b.matmul(b.input("x", (4, 8)), _weights(b, "w", (8, 8)), name="m")
    top = b.max(m, axes=[1], keepdims=True, name="top")
    b.output(b.sub(m, top, name="out"))
    g = b.build()
    p = partition(g)
    assert groups(p) == [["m"], ["top", "out"]]
    check_partition(g, p)


def test_cycle_reason_is_logged_and_kept(caplog):
    b = GraphBuilder("cyc2")  # two elementwise kernels apart only because of a cycle
    x = b.input("x", (8, 8))
    a = b.exp(x, name="a")
    m = b.matmul(b.transpose(a, name="at"), _weights(b, "w", (8, 8)), name="m")
    b.output(b.add(a, b.relu(m, name="r"), name="out"))
    with caplog.at_level(logging.DEBUG, logger="akg.graph.fuse"):
        p = partition(b.build(), simplify=False)  # simplify would fold %at into the matmul's transpose flag
    assert groups(p) == [["a"], ["at", "m", "r", "out"]]
    assert reasons(p)[("a", 0, 1)] == "matmul %m takes only index-change or cast prologues, not exp %a"
    assert "not fusing exp %a into add %out: a cycle: %a also feeds transpose %at in another kernel" in caplog.text


def test_gather_does_not_take_the_producer_of_its_table():
    b = GraphBuilder("emb")
    table = b.relu(b.input("t", (10, 4)), name="table")
    idx = b.input("idx", (6,), "int32")
    b.output(b.mul(b.gather(table, idx, name="rows"), 2.0, name="out"))
    g = b.build()
    p = partition(g)
    assert groups(p) == [["table"], ["rows", "out"]]
    assert "data-dependent" in p.cuts[0].reason
    check_partition(g, p)


def test_size_limit_splits_long_chains():
    b = GraphBuilder("long")
    v = b.input("x", (4,))
    for i in range(30):
        v = b.op("tanh" if i % 2 else "neg", v, name=f"v{i}")
    b.output(v)
    g = b.build()
    p = partition(g)
    assert [len(k.nodes) for k in p.kernels] == [24, 6]
    assert p.cuts[0].reason == "the kernel would hold 25 ops (limit 24)"
    small = partition(g, limits=FusionLimits(max_ops=10))
    assert [len(k.nodes) for k in small.kernels] == [10, 10, 10]
    check_partition(g, small, FusionLimits(max_ops=10))


def test_reduction_depth_limit():
    b = GraphBuilder("deep")
    v = b.input("x", (2, 3, 4, 5, 6, 7))
    for i in range(6):
        v = b.sum(b.exp(v, name=f"e{i}"), axes=[-1], name=f"s{i}")
    b.output(v)
    g = b.build()
    p = partition(g)
    assert groups(p) == [["e0", "s0", "e1", "s1", "e2", "s2", "e3", "s3", "e4"], ["s4", "e5", "s5"]]
    assert p.cuts[0].reason == "the kernel would chain 5 reduction stages (limit 4)"
    check_partition(g, p)


def test_layer_norm_then_softmax_fuse_with_their_producers_up_to_four_reductions():
    b = GraphBuilder("norms")
    x = b.input("x", (4, 16))
    h = b.add(x, b.input("r", (4, 16)), name="h")
    n = b.layer_norm(h, b.const(np.ones(16, np.float32), name="g"), b.const(np.zeros(16, np.float32), name="b"),
                     name="n")
    b.output(b.softmax(b.mul(n, 3.0, name="s"), axis=-1, name="p"))
    g = b.build()
    p = partition(g)
    assert len(p.kernels) == 1 and len(p.kernels[0].nodes) == 14  # gamma = 1 and beta = 0 simplify away
    assert _reduce_depth(p.kernels[0]) == 4
    check_partition(g, p)
    split = partition(g, limits=FusionLimits(max_reduce_depth=2))
    assert [k.ops[:2] for k in split.kernels] == [("add", "mean"), ("max", "sub")]


def test_conv_batch_norm_relu_is_one_kernel_even_unsimplified():
    b = GraphBuilder("cbr")
    x = b.input("x", (1, 3, 8, 8))
    c = b.conv2d(x, _weights(b, "w", (4, 3, 3, 3)), padding=[1, 1], name="c")
    stats = [_weights(b, n, (4,), i) for i, n in enumerate(("gamma", "beta", "mean"))]
    var = b.const(np.full(4, 0.5, np.float32), name="var")
    bn = b.batch_norm(c, *stats, var, name="bn")
    b.output(b.max_pool2d(b.relu(bn, name="r"), kernel=[2, 2], name="pool"))
    g = b.build()
    for simplify in (True, False):
        p = partition(g, simplify=simplify)
        assert len(p.kernels) == 2 and p.kernels[0].ops[0] == "conv2d" and p.kernels[1].ops == ("max_pool2d",)
        conv = "bn.xa" if simplify else "c"  # simplified, the conv computes the scaled %bn.xa
        assert p.cuts[0].reason == f"a kernel with conv2d %{conv} takes no reduction (max_pool2d %pool)"
        check_partition(g, p)
    assert len(partition(g, simplify=False).kernels[0].nodes) > len(partition(g).kernels[0].nodes)


def test_outputs_that_are_inputs_or_constants_need_no_kernel():
    b = GraphBuilder("pass")
    x = b.input("x", (3,))
    c = b.const(np.arange(3, dtype=np.float32), name="c")
    b.output(x, b.exp(c, name="folded"), b.add(x, c, name="y"))
    g = b.build()
    p = partition(g)
    assert groups(p) == [["y"]]
    assert "graph outputs written by no kernel: %x, %folded" in emit_partition(p)
    check_partition(g, p)


# --- random graphs ------------------------------------------------------------------------------


@st.composite
def fusable_graphs(draw):
    """Random DAGs over every fusion category (elementwise, broadcast, layout, reductions,
    matmul, conv, pooling, gather, softmax, layer norm), every dimension 1 or 4 so any two values
    broadcast together."""
    b = GraphBuilder("rand")
    pool = [b.input("x", (4, 4)), b.input("y", (4, 4)), b.input("v", (4,))]
    rng = np.random.default_rng(draw(st.integers(0, 9)))
    pool.append(b.const(rng.standard_normal((4, 4)).astype(np.float32), name="w"))
    pool.append(b.const(np.float32(draw(st.sampled_from([0.0, 1.0, 0.5]))), name="s"))
    square = lambda: [v for v in pool if v.shape == (4, 4)]  # noqa: E731
    for _ in range(draw(st.integers(1, 28))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "matmul", "layout",
                                     "cast", "softmax", "layer_norm", "gather", "conv", "pool"]))
        x = draw(st.sampled_from(pool))
        if kind == "unary":
            pool.append(b.op(draw(st.sampled_from(["relu", "tanh", "neg", "sigmoid", "exp"])), x))
        elif kind == "binary":
            y = draw(st.sampled_from(pool))
            pool.append(b.op(draw(st.sampled_from(["add", "sub", "mul", "maximum"])), x, y))
        elif kind == "reduce" and x.type.rank:
            op = draw(st.sampled_from(["sum", "max", "mean"]))
            pool.append(b.op(op, x, axes=[draw(st.integers(0, x.type.rank - 1))], keepdims=draw(st.booleans())))
        elif kind == "matmul":
            a, c = draw(st.sampled_from(square())), draw(st.sampled_from(square()))
            pool.append(b.matmul(a, c, transpose_a=draw(st.booleans()), transpose_b=draw(st.booleans())))
        elif kind == "layout" and x.type.rank:
            dims = [d for d in x.shape if d != 1]
            dims.insert(draw(st.integers(0, len(dims))), 1)
            if draw(st.booleans()):
                pool.append(b.reshape(x, shape=dims))
            else:
                perm = draw(st.permutations(range(x.type.rank)))
                pool.append(b.transpose(x, perm=list(perm)))
        elif kind == "cast":
            pool.append(b.cast(b.cast(x, to="float64"), to="float32"))
        elif kind == "softmax" and x.type.rank:
            pool.append(b.softmax(x, axis=-1))
        elif kind == "layer_norm" and x.shape[-1:] == (4,):
            gamma = b.const(np.linspace(0.5, 1.5, 4, dtype=np.float32))
            pool.append(b.layer_norm(x, gamma, b.const(np.zeros(4, np.float32))))
        elif kind == "gather":
            idx = b.const(np.array(draw(st.lists(st.integers(0, 3), min_size=4, max_size=4)), np.int32))
            pool.append(b.gather(draw(st.sampled_from(square())), idx))
        elif kind == "conv" and x.shape == (4, 4):
            img = b.reshape(x, shape=[1, 1, 4, 4])
            pool.append(b.conv2d(img, b.const(rng.standard_normal((1, 1, 3, 3)).astype(np.float32)),
                                 padding=[1, 1]))
        elif kind == "pool" and x.type.rank == 4:
            pool.append(b.max_pool2d(x, kernel=[3, 3], strides=[1, 1], padding=[1, 1]))
    outs = draw(st.lists(st.sampled_from(pool), min_size=0, max_size=3))
    b.output(*outs, pool[-1])
    return b.build()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fusable_graphs(), st.booleans(), st.integers(2, 24), st.integers(1, 4), st.integers(0, 2))
def test_random_partitions_are_acyclic_complete_and_equivalent(graph, simplify, max_ops, depth, seed):
    limits = FusionLimits(max_ops=max_ops, max_reduce_depth=depth)
    p = partition(graph, simplify=simplify, limits=limits)
    check_partition(graph, p, limits, seed)
    emit_partition(p)


# --- compiled kernels ---------------------------------------------------------------------------


def test_partition_kernels_compile_and_chain(check_kernel):
    """Each kernel of a small attention-like graph compiles and matches its subgraph; chained
    by name they reproduce the whole graph."""
    import akg

    b = GraphBuilder("small")
    xt = b.input("xt", (16, 8))
    x = b.transpose(xt, name="x")
    h = b.relu(b.add(b.matmul(x, _weights(b, "w1", (16, 32))), _weights(b, "b1", (32,), 1)), name="h")
    probs = b.softmax(h, axis=-1, name="probs")
    m = b.matmul(probs, _weights(b, "w2", (32, 16), 2), name="m")
    gamma, beta = _weights(b, "gamma", (16,), 3), _weights(b, "beta", (16,), 4)
    y = b.layer_norm(b.add(m, x, name="res"), gamma, beta, name="y")
    b.output(y, probs)
    g = b.build()
    p = partition(g)
    # the first matmul reads xt with its transpose flag; %x's transpose stays for the residual
    assert [k.ops[0] for k in p.kernels] == ["transpose", "max", "transpose", "mean"]
    inputs = random_inputs(g, 0)
    env = dict(inputs)
    for k in p.kernels:
        kernel = check_kernel(k.subgraph.graph, akg.build(k.subgraph), inputs={n: env[n] for n in k.inputs})
        env.update(zip(k.outputs, kernel(**{n: env[n] for n in k.inputs})))
    for v, want in zip(g.outputs, evaluate(g, inputs)):
        np.testing.assert_allclose(env[v.name], want, rtol=1e-4, atol=1e-5)


# --- the command line ---------------------------------------------------------------------------


def test_show_fusion(capsys, examples_dir):
    from akg.cli import main

    assert main(["show", "--fusion", str(examples_dir / "transformer_block.mir")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fusion of @transformer_block: 11 kernel(s) from 62 basic op(s)")  # 12: weight relayouts, 1: K^T
    assert "k4 transformer_block.k4_max_sub_exp  (5 ops)" in out
    assert "cut:    %scaled: k3 -> k4: a kernel with batch_matmul %scores takes no reduction" in out
