"""Sibling reductions that read the same data, fused into one loop (polyhedral/siblings.py) and
lowered as one vector reduction with an accumulator per update, or as blocked serial sums
(polyhedral/reduction_loops.py)."""

import re

import islpy as isl
import numpy as np
import pytest
import tvm
from tvm import tirx

import akg
from akg.backends.cpu.lowering import llvm_fence, stack_alloc
from akg.compiler import pipeline_for
from akg.graph import GraphBuilder
from akg.graph.compute.lower import lower_graph
from akg.graph.interpreter import random_inputs
from akg.polyhedral.astgen import LoweringHooks, lower_to_tir
from akg.polyhedral.front import schedule_program
from akg.polyhedral.tirstmt import buffers, loops
from akg.target import get_target
from akg.verify import Reference, compare
from tests.polyhedral.test_row_partials import _layer_norm_backward  # dx, dgamma and dbeta


def _two_stats(rows=64, cols=256, shared=True, reducers=("sum", "sum")):
    """Two reductions of each row, of one input when `shared`, else of two, and an elementwise
    output that uses both."""
    b = GraphBuilder("two_stats")
    x = b.input("x", (rows, cols))
    y = x if shared else b.input("y", (rows, cols))
    first = getattr(b, reducers[0])(b.mul(x, x), axes=[1], keepdims=True)
    second = getattr(b, reducers[1])(y, axes=[1], keepdims=True)
    b.output(b.add(b.mul(x, first), second))
    return b.build()


def _fused_loops(schedule: isl.Schedule, model) -> list[set[str]]:
    """The update statements of each band that runs more than one reduction's update."""
    out = []

    def visit(node):
        if node.get_type() == isl.schedule_node_type.band:
            names = []
            node.get_domain().foreach_set(lambda s: names.append(s.get_tuple_name()))
            ops = {model.statement(n).op.output.name for n in names if model.statement(n).role == "update"}
            if len(ops) > 1 and node.band_n_member() == 1 and all(
                    model.statement(n).role == "update" for n in names):
                out.append(set(names))
        for k in range(node.n_children()):
            visit(node.child(k))

    visit(schedule.get_root())
    return out


def _front(graph, fusion="smart", siblings=True):
    return schedule_program(lower_graph(graph), fusion, siblings=siblings)


def test_the_two_row_statistics_of_a_layer_norm_backward_share_one_loop():
    front = _front(_layer_norm_backward())
    assert len(_fused_loops(front.schedule, front.model)) == 1
    # the target decides (only the CPU's lowering reduces several statements at once), and
    # fusion "none" fuses nothing
    assert _fused_loops(_front(_layer_norm_backward(), siblings=False).schedule, front.model) == []
    none = _front(_layer_norm_backward(), fusion="none")
    assert _fused_loops(none.schedule, none.model) == []
    assert pipeline_for(_layer_norm_backward(), "cpu").recipe.fuses_sibling_reductions
    assert not pipeline_for(_layer_norm_backward(), "npu").recipe.fuses_sibling_reductions


def test_reductions_of_different_data_or_of_each_other_stay_apart():
    apart = _front(_two_stats(shared=False))
    assert _fused_loops(apart.schedule, apart.model) == []
    # a softmax's sum reads its max: one after the other, as isl ordered them
    b = GraphBuilder("softmax")
    b.output(b.softmax(b.input("x", (64, 256))))
    dependent, alone = _front(b.build()), _front(b.build(), siblings=False)
    assert dependent.schedule.get_root().to_str() == alone.schedule.get_root().to_str()


def _vector_loops_updating(func) -> list[set[str]]:
    """The names of the buffers stored by each vectorised loop of the lowered function."""
    return [{b.name for b in buffers(loop.body)} for loop in loops(func.body) if loop.kind == tirx.ForKind.VECTORIZED]


def _check(graph, seed=0):
    kernel = akg.build(graph, target="cpu")
    inputs = random_inputs(graph, seed)
    assert compare(graph, kernel(**inputs), Reference.of(graph, inputs)) == []


@pytest.mark.parametrize("rows, cols", [(64, 256), (37, 1000), (5, 24)])
def test_a_fused_loop_is_one_vector_reduction_with_an_accumulator_per_statistic(rows, cols):
    graph = _layer_norm_backward(rows, cols)
    func, _ = pipeline_for(graph, "cpu").lower(None)
    both = [s for s in _vector_loops_updating(func) if sum(n.endswith("_acc") for n in s) == 2]
    assert both, func  # one lane loop adds into both accumulators
    _check(graph)


@pytest.mark.parametrize("reducers", [("sum", "max"), ("max", "min"), ("sum", "sum")])
def test_sibling_reductions_of_any_reducer_match_the_reference(reducers):
    graph = _two_stats(61, 300, reducers=reducers)
    front = _front(graph)
    assert len(_fused_loops(front.schedule, front.model)) == 1
    _check(graph)


def _mixed_magnitudes(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(np.float32)


@pytest.mark.parametrize("second", ["sum", "max"])
@pytest.mark.parametrize("hooks", [dict(reduce_bits=512, reduce_block=16), dict(serial_block=64)],
                         ids=["vector", "serial"])
def test_fused_long_sums_are_blocked_per_statistic_and_exact_to_1e_6(hooks, second):
    """A sum of squares and a sum (or a max) of each 16384-float row, fused, as blocked vector
    sums or blocked serial sums (a partial per sum, a max updated directly), each sum within
    1e-6 of float64 (relative to the sum of |terms|), the max exact."""
    b = GraphBuilder("long_stats")
    x = b.input("x", (4, 16384))
    squares, other = b.sum(b.mul(x, x), axes=[1], keepdims=True), getattr(b, second)(x, axes=[1], keepdims=True)
    b.output(b.add(b.mul(x, squares), other), squares, other)
    graph = b.build()
    front = _front(graph)
    assert len(_fused_loops(front.schedule, front.model)) == 1
    func, _ = lower_to_tir(front.model, front.schedule, hooks=LoweringHooks(llvm_fence, stack_alloc, **hooks))
    partials = set(re.findall(r"\b(\w+)_part\b", func.script()))
    assert len(partials) == (1 if second == "max" else 2)
    pipeline = pipeline_for(graph, "cpu")
    run = get_target("cpu").backend().entry(pipeline.compile(func))
    data = _mixed_magnitudes((4, 16384), seed=3)
    args = [tvm.runtime.tensor(data), *(tvm.runtime.tensor(np.zeros(shape, np.float32))
                                        for shape in [(4, 16384), (4, 1), (4, 1)])]
    run(*args)
    x64 = data.astype(np.float64)
    got, want = args[2].numpy(), (x64 * x64).sum(1, keepdims=True)
    assert np.all(np.abs(got - want) <= 1e-6 * (x64 * x64).sum(1, keepdims=True))
    if second == "max":
        np.testing.assert_array_equal(args[3].numpy(), data.max(1, keepdims=True))
    else:
        assert np.all(np.abs(args[3].numpy() - x64.sum(1, keepdims=True)) <= 1e-6 * np.abs(x64).sum(1, keepdims=True))


def _dependent_stats(rows=64, cols=256):
    """Two sums of each row of one input (its values and their squares) that a third statement
    uses together before the output (a layer norm's one-read statistics: isl orders the sums
    one after the other, not as siblings of a set)."""
    b = GraphBuilder("dependent_stats")
    x = b.input("x", (rows, cols))
    s = b.mean(x, axes=[1], keepdims=True)
    q = b.mean(b.mul(x, x), axes=[1], keepdims=True)
    scale = b.sub(q, b.mul(s, s))
    b.output(b.mul(b.sub(x, s), scale))
    return b.build()


@pytest.mark.parametrize("make", [_dependent_stats, None], ids=["sums", "layer_norm"])
def test_reductions_in_sequence_that_a_later_statement_joins_share_one_loop(make):
    if make is None:
        b = GraphBuilder("ln")
        b.output(b.layer_norm(b.input("x", (64, 256)), b.input("g", (256,)), b.input("bt", (256,)), epsilon=1e-5))
        graph = b.build()
    else:
        graph = make()
    front = _front(graph)
    assert len(_fused_loops(front.schedule, front.model)) == 1
    assert _fused_loops(_front(graph, siblings=False).schedule, front.model) == []
    func, _ = pipeline_for(graph, "cpu").lower(None)
    assert any(sum(n.endswith("_acc") for n in s) == 2 for s in _vector_loops_updating(func)), func
    _check(graph)


def test_a_statement_between_sequenced_reductions_that_reads_the_first_runs_after_the_fused_loop():
    # mean, then a scalar of it (2 * mean), then the sum of squares: the scalar moves after the
    # fused loop; the output reads all three
    b = GraphBuilder("between")
    x = b.input("x", (32, 128))
    s = b.mean(x, axes=[1], keepdims=True)
    twice = b.mul(s, b.const(np.float32(2.0), name="two"))
    q = b.mean(b.mul(x, x), axes=[1], keepdims=True)
    b.output(b.add(b.mul(x, twice), b.sub(q, b.mul(s, s))))
    graph = b.build()
    front = _front(graph)
    assert len(_fused_loops(front.schedule, front.model)) == 1
    _check(graph)
