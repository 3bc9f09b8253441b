"""AST -> TIR: vector reductions (independent accumulator chains) for reductions over
contiguous data, and the loops they must leave alone."""


import numpy as np
import pytest
from tvm import tirx

import akg
from akg.graph import GraphBuilder, evaluate, random_inputs
from akg.graph.compute.lower import lower_graph
from akg.backends.cpu.lowering import llvm_fence, stack_alloc
from akg.polyhedral.astgen import LoweringHooks, lower_to_tir
from akg.polyhedral.deps import compute_dependences
from akg.polyhedral.model import build_model
from akg.polyhedral.schedule import schedule
from akg.target import get_target
from akg.compiler import Pipeline
from akg.backends.cpu.target import CpuTarget
from akg.polyhedral.tirstmt import loops


def _reduce(op, shape, axes, dtype="float32", **attrs):
    b = GraphBuilder(op)
    b.output(getattr(b, op)(b.input("x", shape, dtype), axes=axes, **attrs))
    return b.build()


def _check(graph, rtol=1e-5, atol=1e-5, target="cpu"):
    kernel = akg.build(graph, target)
    inputs = random_inputs(graph, 3)
    got = kernel(*inputs.values())[0]
    want = evaluate(graph, inputs)[0]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    return kernel.tir()


@pytest.mark.parametrize("op, shape, dtype", [
    ("sum", (64, 1024), "float32"),   # a whole number of chains
    ("sum", (64, 1000), "float32"),   # and a scalar tail
    ("max", (64, 333), "float32"),  # (max/min over a multiple of the lanes are split before scheduling)
    ("min", (64, 250), "float32"),
    ("sum", (64, 515), "int32"),
], ids=["sum", "sum-tail", "max-tail", "min", "int-sum"])
def test_contiguous_reductions_become_vector_reductions(op, shape, dtype):
    tir = _check(_reduce(op, shape, [1], dtype), rtol=1e-4, atol=1e-3)
    assert "_acc" in tir and "T.vectorized" in tir


def test_float16_sums_accumulate_in_float32_lanes():
    tir = _check(_reduce("sum", (8, 2048), [1], "float16"), rtol=2e-3, atol=2e-2)
    assert "_acc" in tir


def test_a_dot_product_reduction_gets_four_chains():
    b = GraphBuilder("rowdot")
    x, y = b.input("x", (64, 512)), b.input("y", (64, 512))
    b.output(b.sum(b.mul(x, y), axes=[1]))
    tir = _check(b.build(), rtol=1e-4, atol=1e-4)
    lanes = get_target("cpu").vector_lanes("float32")
    assert f"T.alloc_buffer(({4 * lanes},)" in tir


@pytest.mark.parametrize("rows, cols", [(32, 333), (16, 512)])
def test_a_few_short_rows_still_reduce_along_the_rows(rows, cols):
    # the row loop writes contiguously but reads strided: it must not become the vector loop
    # below the reduction (one gather per vector); the reduction along the row is vectorised
    assert "_acc" in _check(_reduce("sum", (rows, cols), [1]), rtol=1e-4, atol=1e-4)


LANES = get_target("cpu").vector_lanes("float32")


@pytest.mark.parametrize("graph", [
    _reduce("sum", (1024, 64), [0]),  # reduction along a strided axis: the vector loop is the output's
    _reduce("sum", (64, LANES - 4), [1]),    # shorter than one vector
], ids=["strided", "short"])
def test_other_reductions_are_left_alone(graph):
    assert "_acc" not in _check(graph, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["max", "sum"])
def test_a_row_of_one_vector_is_a_vector_reduction(op):
    # rows of one vector (an attention's softmax over 16 keys): a load and a tree of halves
    tir = _check(_reduce(op, (2, 4, 16, LANES), [3]), rtol=1e-5, atol=1e-5)
    assert "_acc" in tir and "_h2" in tir


def test_a_softmax_over_rows_of_one_vector_matches_the_reference():
    b = GraphBuilder("sm16")
    b.output(b.softmax(b.input("x", (2, 4, 16, LANES)), axis=-1))
    assert "_acc" in _check(b.build(), rtol=1e-5, atol=1e-6)


def test_no_vector_reductions_without_vectorisation():
    graph = _reduce("sum", (64, 1024), [1])
    pipeline = Pipeline(lower_graph(graph), get_target("cpu"), "smart")
    config = pipeline.default_config().without("vectorize")
    func, _ = pipeline.lower(config)
    assert "_acc" not in func.script()


def test_width_and_chains_follow_the_arguments():
    model = build_model(lower_graph(_reduce("sum", (8, 256), [1])))
    tree = schedule(model, compute_dependences(model), "smart").schedule
    scalar, _ = lower_to_tir(model, tree, hooks=LoweringHooks(reduce_bits=0))
    assert "_acc" not in scalar.script()
    avx2, _ = lower_to_tir(model, tree, hooks=LoweringHooks(llvm_fence, stack_alloc, reduce_bits=256, reduce_chains=2))
    assert "T.alloc_buffer((16,)" in avx2.script()  # 2 chains of 8 lanes
    assert "llvm.arithmetic.fence" in avx2.script()  # the chains are not merged back by LLVM


# --- blocked summation (issue 15: long float32 reductions) ---------------------------------------


def _mixed_magnitudes(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(np.float32)


def test_long_vector_sums_are_blocked_and_exact_to_1e_6():
    model = build_model(lower_graph(_reduce("sum", (4, 16384), [1])))
    tree = schedule(model, compute_dependences(model), "smart").schedule
    plain, _ = lower_to_tir(model, tree, hooks=LoweringHooks(llvm_fence, stack_alloc, reduce_bits=512))
    blocked, _ = lower_to_tir(model, tree, hooks=LoweringHooks(llvm_fence, stack_alloc, reduce_bits=512,
                                                                reduce_block=16))
    assert "_part" not in plain.script() and "_part" in blocked.script()
    kernel = akg.build(_reduce("sum", (4, 16384), [1]))  # the CPU blocks sums this long
    assert "_part" in kernel.tir()
    x = _mixed_magnitudes((4, 16384))
    got = kernel(x)[0].astype(np.float64)
    want = x.astype(np.float64).sum(1)
    assert np.all(np.abs(got - want) <= 1e-6 * np.abs(x.astype(np.float64)).sum(1))


@pytest.mark.parametrize("vectorize", [True, False], ids=["vector", "scalar"])
def test_a_sum_of_a_million_mixed_magnitudes_is_within_1e_4_of_float64(vectorize):
    graph = _reduce("sum", (1_000_000,), [0])
    pipeline = Pipeline(lower_graph(graph), get_target("cpu"), "smart")
    config = pipeline.default_config()
    kernel = akg.build(graph, config=config if vectorize else config.without("vectorize"))
    rng = np.random.default_rng(1)
    x = (rng.random(1_000_000) * 10.0 ** rng.uniform(-3, 3, 1_000_000)).astype(np.float32)
    want = x.astype(np.float64).sum()
    assert abs(float(kernel(x)[0]) - want) <= 1e-4 * abs(want)


def test_serial_float32_sums_are_blocked_where_asked():
    graph = _reduce("sum", (8, 4096), [1])
    model = build_model(lower_graph(graph))
    tree = schedule(model, compute_dependences(model), "smart").schedule
    plain, _ = lower_to_tir(model, tree, hooks=LoweringHooks(llvm_fence, stack_alloc))
    func, _ = lower_to_tir(model, tree, hooks=LoweringHooks(llvm_fence, stack_alloc, serial_block=64))
    assert "_part" not in plain.script() and "_part" in func.script()
    pipeline = Pipeline(lower_graph(graph), get_target("cpu"), "smart")
    run = get_target("cpu").backend().entry(pipeline.compile(func))
    x = _mixed_magnitudes((8, 4096), seed=2)
    out = np.zeros(8, np.float32)
    import tvm

    got = tvm.runtime.tensor(out)
    run(tvm.runtime.tensor(x), got)
    want = x.astype(np.float64).sum(1)
    assert np.all(np.abs(got.numpy() - want) <= 1e-6 * np.abs(x.astype(np.float64)).sum(1))


@pytest.mark.parametrize("rows", [1536, 4096])
def test_a_fused_layer_norm_backward_over_1024_columns_matches_float64(rows):
    from akg.verify import Reference, compare

    b = GraphBuilder("ln_backward")
    dy, x = b.input("dy", (rows, 1024)), b.input("x", (rows, 1024))
    mean, rstd, g = b.input("mean", (rows, 1)), b.input("rstd", (rows, 1)), b.input("g", (1024,))
    xhat = b.mul(b.sub(x, mean), rstd)
    dyg = b.mul(dy, g)
    m1 = b.mean(dyg, axes=[1], keepdims=True)
    m2 = b.mean(b.mul(dyg, xhat), axes=[1], keepdims=True)
    b.output(b.mul(rstd, b.sub(b.sub(dyg, m1), b.mul(xhat, m2))), b.sum(b.mul(dy, xhat), axes=[0]),
             b.sum(dy, axes=[0]))
    graph = b.build()
    inputs = random_inputs(graph, 0)
    inputs = {k: (v - 0.5 if v.ndim == 2 and v.shape[1] == 1024 else v) for k, v in inputs.items()}  # mixed signs
    assert compare(graph, akg.build(graph)(**inputs), Reference.of(graph, inputs)) == []


def test_statement_indices_are_simplified_before_vectorisation():
    """Attention's context kernel at 4 heads of 8 (a BERT exported from PyTorch): the scheduler
    reverses a loop, and the statement's head index came out as `(c - 7 + (8 h + 7 - c)) // 8`;
    TVM's vectoriser then failed with "Divide by zero". Simplified, it is `h`."""
    b = GraphBuilder("context")
    p, v = b.input("p", (2, 4, 8, 8)), b.input("v", (2, 4, 8, 8))
    b.output(b.reshape(b.transpose(b.batch_matmul(p, v), perm=[0, 2, 1, 3]), shape=[2, 8, 32]))
    _check(b.build())


def test_sin_over_cos_is_not_folded_into_a_wrong_tan():
    """ONNX's Tan is sin(x) / cos(x); with reassociation allowed LLVM folded the pair into a
    vector tan that returned x itself (the kernel was silently wrong by up to 15%)."""
    b = GraphBuilder("tan")
    x = b.input("x", (3, 4, 16))
    b.output(b.div(b.sin(x), b.cos(x)))
    graph = b.build()
    xs = np.random.default_rng(0).uniform(-1.4, 1.4, (3, 4, 16)).astype(np.float32)
    np.testing.assert_allclose(akg.build(graph)(xs)[0], np.tan(xs.astype(np.float64)), rtol=2e-6, atol=1e-6)


def test_a_partial_tile_of_known_width_is_a_vector_loop_too():
    """LeNet-5's first conv: output rows 28 wide under a 16-wide vector strip. The last tile
    (12 wide) is a vector loop of its own, not a scalar remainder of variable width."""
    lanes = get_target("cpu").vector_lanes("float32")
    rng = np.random.default_rng(0)
    b = GraphBuilder("conv28")
    x = b.input("x", (2, 1, 32, 32))
    w = b.const(rng.standard_normal((6, 1, 5, 5)).astype(np.float32), name="w")
    b.output(b.relu(b.conv2d(x, w, strides=[1, 1], padding=[0, 0, 0, 0])))
    tir = _check(b.build())
    if lanes == 16:
        assert "T.vectorized(16)" in tir and "T.vectorized(12)" in tir
    assert "in range(T.min(" not in tir  # no loop of variable width is left


def test_a_recompute_box_is_computed_in_the_order_of_the_input_it_reads():
    # a padded input in phases of its columns [n, c, row, phase, col] reads the input at column
    # 2 * col + phase: the phase moves it by one, the column by two, so the phase goes
    # innermost and the column next; a plain padded copy reads along its own last dim
    from akg.polyhedral.promoted_copies import read_order

    for stride, want in ((2, [0, 1, 2, 4, 3]), (1, [0, 1, 2, 3])):
        b = GraphBuilder("pool")
        b.output(b.max_pool2d(b.input("x", (1, 4, 12, 12)), kernel=[3, 3], strides=[stride, stride],
                              padding=[1, 1]))
        model = Pipeline(lower_graph(b.build()), get_target("cpu")).model
        (pad,) = [s for s in model.statements if s.write.tensor.name.endswith(".pad")]
        assert read_order(pad, len(pad.write.tensor.shape)) == want


def _phases(c=8, t=14):
    """A padded image split into the phases of its rows and columns (`[2, 2, C, T+1, T+1]`): a
    vector loop along the columns whose loads are guarded by the padding."""
    b = GraphBuilder("phases")
    x = b.input("x", (1, c, 2 * t, 2 * t))
    padded = b.pad(x, before=[0, 0, 1, 1], after=[0, 0, 1, 1])
    b.output(b.transpose(b.reshape(padded, shape=[c, t + 1, 2, t + 1, 2]), perm=[2, 4, 0, 1, 3]))
    return b.build()


def test_a_guarded_vector_loop_runs_unguarded_where_its_lanes_are_inside():
    # TVM runs a vector loop with a per-lane if_then_else element by element; where the guard is
    # linear in the lane its two ends decide it, so the loop is built without the guard for the
    # vectors inside the image and with it at the edges (a 56 px phase split: 342 -> 169 us)
    graph = _phases()
    tir = _check(graph, rtol=0, atol=0)
    vector_loops = [line for line in tir.splitlines() if "T.vectorized" in line]
    assert len(vector_loops) >= 2 and len(vector_loops) % 2 == 0  # each built twice
    unguarded = [line for line in tir.splitlines() if "= x[" in line and "if_then_else" not in line]
    assert unguarded, tir
    kernel = akg.build(graph)
    inputs = {"x": np.arange(8 * 28 * 28, dtype=np.float32).reshape(1, 8, 28, 28)}
    np.testing.assert_array_equal(kernel(**inputs)[0], evaluate(graph, inputs)[0])  # the edges still zero


def test_a_guard_that_is_not_linear_in_the_lane_stays_in_the_loop():
    # the lanes of a pad read through a flattening reshape step across rows (a floormod of the
    # lane): its ends do not decide the lanes between them, so every lane keeps its guard
    b = GraphBuilder("flat")
    x = b.input("x", (4, 6, 6))
    b.output(b.reshape(b.pad(x, before=[0, 1, 1], after=[0, 1, 1]), shape=[4, 64]))
    graph = b.build()
    tir = _check(graph, rtol=0, atol=0)
    assert "if_then_else" in tir
    assert not [line for line in tir.splitlines() if "= x[" in line and "if_then_else" not in line], tir


def test_a_guard_that_reads_data_stays_in_the_loop():
    # a select on loaded values (a mask) is decided per element, whatever its ends say
    b = GraphBuilder("masked")
    x, m = b.input("x", (8, 64)), b.input("m", (8, 64))
    b.output(b.where(b.greater(m, 0.0), b.exp(x), 0.0))
    graph = b.build()
    kernel = akg.build(graph)
    inputs = {"x": np.ones((8, 64), np.float32), "m": np.tile([1.0, -1.0], (8, 32)).astype(np.float32)}
    np.testing.assert_allclose(kernel(**inputs)[0], evaluate(graph, inputs)[0], rtol=1e-6)
    assert kernel.tir().count("T.vectorized") == 1  # built once: nothing to unswitch


@pytest.mark.parametrize("m, transpose_a", [(2, False), (3, True)])
def test_a_vector_loop_that_allocates_per_lane_runs_serial(m, transpose_a):
    """relu(a[m, 1] @ w[1, 16] + bias) on 8-lane vectors: the reduction has one point, so the
    default config promotes each output's accumulator below the vector loop; TVM's
    vectoriser had shared that one-element buffer among the lanes (17 of 32 outputs wrong)."""
    b = GraphBuilder("k")
    a = b.input("a", (1, m) if transpose_a else (m, 1))
    y = b.matmul(a, b.input("w", (1, 16)), transpose_a=transpose_a)
    b.output(b.relu(b.add(y, b.input("bias", (16,)))))
    tir = _check(b.build(), rtol=1e-6, atol=0, target=CpuTarget(vector_bits=256, vector_registers=16, cores=2))
    assert "alloc_buffer" in tir and "T.vectorized" not in tir


def test_a_vector_loop_inside_another_runs_serial():
    """gelu(a^T @ w + bias) for a[16, 5], w[16, 3] on 4-lane vectors: the register tile of 3 x 5
    marks both short loops as vectors, and TVM, which ignores the inner one, then failed the
    build ("VectorizeLoop before LiftStorageAlloc"). The inner one runs serial."""
    b = GraphBuilder("k")
    y = b.matmul(b.input("a", (16, 5)), b.input("w", (16, 3)), transpose_a=True)
    b.output(b.gelu(b.add(y, b.input("bias", (3,)))))
    graph, target = b.build(), CpuTarget(vector_bits=128, vector_registers=16, cores=2)
    _check(graph, rtol=1e-5, atol=1e-6, target=target)
    pipeline = Pipeline(lower_graph(graph), target, "smart")
    func, _ = pipeline.lower(pipeline.default_config())
    vector = [f for f in loops(func.body) if f.kind == tirx.ForKind.VECTORIZED]
    assert vector and not any(f.kind == tirx.ForKind.VECTORIZED for outer in vector for f in loops(outer.body))
