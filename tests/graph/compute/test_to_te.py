"""Program -> TVM TE: the unscheduled TE build computes what the reference does."""

import numpy as np
import pytest
import tvm
from tvm import te

from akg.errors import UnsupportedOpError
from akg.graph import GraphBuilder, evaluate, random_inputs
from akg.graph.compute.lower import lower_graph
from akg.graph.compute.to_te import to_te


def _run_te(graph):
    program = lower_graph(graph)
    tensors = to_te(program)
    exe = tvm.compile(tvm.IRModule({"main": te.create_prim_func(tensors)}), target="llvm")
    inputs = random_inputs(graph)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(inputs[t.name], dev) for t in program.inputs]
    args += [tvm.runtime.tensor(np.asarray(a), dev) for a in program.params.values()]
    outs = [tvm.runtime.tensor(np.zeros(t.shape, t.dtype), dev) for t in program.outputs]
    exe["main"](*args, *outs)
    return [o.numpy() for o in outs], evaluate(graph, inputs)


def test_composite_graph_round_trips_through_te():
    b = GraphBuilder("g")
    x = b.input("x", (6, 10))
    w = b.const(np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32), name="w")
    y = b.layer_norm(b.gelu(b.matmul(x, w)), b.input("g", (4,)), b.input("bt", (4,)))
    b.output(b.softmax(y), b.pad(b.transpose(x), before=[1, 0], after=[0, 2]), b.prod(x, axes=[1]))
    got, want = _run_te(b.build())
    for a, e in zip(got, want):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


def test_arg_reductions_have_no_te_form():
    b = GraphBuilder("g")
    b.output(b.argmax(b.input("x", (3, 4))))
    with pytest.raises(UnsupportedOpError, match="argmax"):
        to_te(lower_graph(b.build()))
