"""Compiled models: the examples compile and match the reference, kernels are shared by
workload with their own weights, the memory plan reuses buffers safely, and .akgpack
artifacts run without recompiling."""

import numpy as np
import pytest

from akg.errors import ImportFormatError, InputDataError, TooLargeError
from akg.graph import GraphBuilder, random_inputs
from akg.graph.io import load_mir
from akg.api import compile_model
from akg.runtime import CompiledModel, KernelCall, TensorSpec, plan_memory
from akg.verify import Reference, compare


@pytest.fixture(scope="module")
def transformer(examples_dir):
    graph = load_mir(examples_dir / "transformer_block.mir")
    return graph, compile_model(graph)


def _winograd_here(graph) -> bool:
    from akg.graph.winograd import tile_columns
    from akg.target import get_target

    return any(n.op == "conv2d" and tile_columns(get_target("cpu"), n) for n in graph.nodes)


@pytest.mark.parametrize("name, kernels", [("mlp", 4), ("resnet_block", 2)])
def test_examples_compile_and_match(examples_dir, name, kernels):
    graph = load_mir(examples_dir / f"{name}.mir")
    model = compile_model(graph)
    if _winograd_here(graph):  # each conv as Winograd's three kernels (akg.graph.winograd)
        kernels += 4
    assert len(model.calls) == kernels
    inputs = random_inputs(graph, 3)
    assert not compare(graph, model(**inputs), Reference.of(graph, inputs))


def test_transformer_shares_kernels_but_not_weights(transformer):
    graph, model = transformer
    # q/v and the two norms share code (k writes K^T for the scores, graph/layout)
    assert (len(model.calls), len(model.kernels)) == (11, 9)
    q, v = model.calls[0], model.calls[2]
    assert q.kernel == v.kernel and not np.array_equal(q.params[0], v.params[0])
    inputs = random_inputs(graph)
    assert not compare(graph, model(**inputs), Reference.of(graph, inputs))


def test_memory_plan_reuses_dead_buffers(transformer):
    _, model = transformer
    plan = model.plan
    assert plan.peak_bytes < plan.naive_bytes
    # no two values sharing a slot are alive at the same time
    first_write = {n: i for i, c in enumerate(model.calls) for n in c.outputs}
    last_read = {}
    for i, c in enumerate(model.calls):
        for n in c.inputs:
            last_read[n] = i
    by_slot = {}
    for name, slot in plan.slot_of.items():
        by_slot.setdefault(slot, []).append((first_write[name], last_read.get(name, first_write[name])))
    for spans in by_slot.values():
        spans.sort()
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))


def test_plan_memory_greedy_best_fit():
    specs = {n: TensorSpec(n, (s,), "float32") for n, s in [("a", 100), ("b", 50), ("c", 100), ("d", 10)]}
    calls = [KernelCall("k", "k0", ("x",), ("a",)), KernelCall("k", "k1", ("a",), ("b",)),
             KernelCall("k", "k2", ("b",), ("c",)), KernelCall("k", "k3", ("c",), ("d",))]
    plan = plan_memory(calls, specs, keep={"d"})
    assert plan.slot_of["a"] == plan.slot_of["c"] and plan.slot_of["b"] != plan.slot_of["a"]
    assert plan.naive_bytes == 4 * 250 and plan.peak_bytes == 4 * 150


def test_akgpack_round_trip(tmp_path, transformer):
    graph, model = transformer
    path = model.save(tmp_path / "tb.akgpack")
    loaded = CompiledModel.load(path)
    inputs = random_inputs(graph, 1)
    for a, b in zip(model(**inputs), loaded(**inputs)):
        np.testing.assert_array_equal(a, b)
    assert loaded.plan.peak_bytes == model.plan.peak_bytes
    # a loaded pack saves again (its libraries as they came: a loaded one cannot be exported)
    again = CompiledModel.load(loaded.save(tmp_path / "again.akgpack"))
    for a, b in zip(model(**inputs), again(**inputs)):
        np.testing.assert_array_equal(a, b)


def test_akgpack_errors(tmp_path):
    (tmp_path / "bad.akgpack").write_text("not a zip")
    with pytest.raises(ImportFormatError, match="not an akgpack"):
        CompiledModel.load(tmp_path / "bad.akgpack")


def test_input_errors_and_index_bounds(examples_dir):
    graph = load_mir(examples_dir / "mlp.mir")
    model = compile_model(graph)
    inputs = model.random_inputs(0)
    assert inputs["labels"].max() < 10
    with pytest.raises(InputDataError, match=r"input x must be float32\[32, 784\]"):
        model(x=np.zeros((2, 2), np.float32), labels=inputs["labels"])
    with pytest.raises(InputDataError, match=r"labels holds indices outside \[0, 10\)"):
        model(x=inputs["x"], labels=np.full(32, 10, np.int32))
    with pytest.raises(InputDataError, match=r"labels holds indices outside \[0, 10\)"):  # by position too
        model(inputs["x"], np.full(32, 10, np.int32))


def test_positional_calls_check_shapes_and_dtypes():
    b = GraphBuilder("p")
    b.output(b.relu(b.input("x", (2, 3))))
    model = compile_model(b.build())
    x = np.array([[-1, 0, 1], [2, -3, 4]], np.float32)
    np.testing.assert_array_equal(model(x)[0], np.maximum(x, 0))
    for bad in (x.astype(np.float64), x.T, x[:1]):
        with pytest.raises(InputDataError, match=r"input x must be float32\[2, 3\]"):
            model(bad)
    with pytest.raises(InputDataError, match="takes 1 inputs, got 2"):
        model(x, x)
    # the checked arrays went straight to the linked driver; the others took the general path
    assert callable(model._direct)
    np.testing.assert_array_equal(model(x=x)[0], np.maximum(x, 0))  # by name too
    with pytest.raises(InputDataError, match=r"missing input\(s\): x"):
        model(y=x)
    model.use_driver = False  # and a model told to run kernel by kernel does so
    np.testing.assert_array_equal(model(x)[0], np.maximum(x, 0))


def test_graph_outputs_that_are_inputs_or_constants():
    b = GraphBuilder("g")
    x = b.input("x", (3,))
    c = b.const(np.arange(4, dtype=np.float32), name="c")
    b.output(x, c, b.relu(x))
    graph = b.build()
    out = compile_model(graph)(x=np.array([-1, 0, 2], np.float32))
    np.testing.assert_array_equal(out[0], [-1, 0, 2])
    np.testing.assert_array_equal(out[1], np.arange(4))
    np.testing.assert_array_equal(out[2], [0, 0, 2])


@pytest.mark.parametrize("name", ["add", "relu", "mlp", "lenet5", "resnet_block", "transformer_layer"])
def test_mindir_fixtures_compile_and_match_mindspore(name, corpus):
    from akg.graph.io import load_model

    graph = load_model(corpus / "mindir" / f"{name}.mindir")
    with np.load(corpus / "mindir" / f"{name}.io.npz") as npz:
        data = {k: npz[k] for k in npz.files}
    inputs = {v.name: data[f"input_{i}"] for i, v in enumerate(graph.inputs)}
    model = compile_model(graph)
    for i, got in enumerate(model(**inputs)):
        want = data[f"output_{i}"]
        scale = float(np.abs(want).max())
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(scale, 1.0))


def test_a_pack_too_big_for_this_machine_stops_before_allocating(tmp_path, transformer, monkeypatch):
    path = transformer[1].save(tmp_path / "t.akgpack")
    loaded = CompiledModel.load(path)
    inputs = loaded.random_inputs(0)
    monkeypatch.setenv("AKG_MEMORY_LIMIT", "1K")
    with pytest.raises(TooLargeError, match=r"model '.*' needs .* to run"):
        loaded(**inputs)
    monkeypatch.delenv("AKG_MEMORY_LIMIT")
    assert all(np.isfinite(o).all() for o in loaded(**inputs))


def test_zero_dimensional_weights_stay_zero_dimensional():
    b = GraphBuilder("scalar_weight")
    x = b.input("x", (4, 3))
    w = b.const(np.array(np.nan, np.float32), name="w")
    b.output(b.add(x, w), b.mul(x, b.const(np.array(2.5, np.float32), name="s")))
    g = b.build()
    got = compile_model(g)(x=np.ones((4, 3), np.float32))
    assert np.isnan(got[0]).all() and np.allclose(got[1], 2.5)
