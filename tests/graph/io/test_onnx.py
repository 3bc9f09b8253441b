"""The ONNX importer (graph/io/onnx.py): models built with onnx.helper, imported, compiled for
cpu and checked against NumPy; folding of PyTorch's shape subgraphs, attribute defaults,
multi-output ops, integer and bool tensors, old opsets, function expansion, typed errors, and
the CLI doors (`akg run / compile / convert model.onnx`)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import akg  # noqa: E402
from akg.errors import ImportFormatError, UnsupportedError, UnsupportedOpError  # noqa: E402
from akg.graph.io import load_model  # noqa: E402
from akg.graph.io.onnx_ops import DynamicShapeError  # noqa: E402

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def make_model(nodes, inputs, outputs, initializers=(), opset=17, name="net"):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def tensor(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def flatten_mlp(rng):
    """What torch.onnx.export writes for `relu(x.reshape(x.shape[0], -1) @ w + b)`: the new
    shape is computed from Shape/Gather/Unsqueeze/Concat at run time."""
    w = rng.standard_normal((12, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus_one"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["x", "new_shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["pre"]),
        helper.make_node("Relu", ["pre"], ["y"]),
    ]
    inits = [const("zero", np.int64(0)), const("axes0", np.array([0], np.int64)),
             const("minus_one", np.array([-1], np.int64)), const("w", w), const("b", b)]
    model = make_model(nodes, [tensor("x", F32, [2, 3, 4])], [tensor("y", F32, [2, 5])], inits)
    return model, lambda x: np.maximum(x.reshape(2, -1) @ w + b, 0)


def test_a_pytorch_style_shape_subgraph_folds_away_and_the_model_matches_numpy():
    rng = np.random.default_rng(0)
    model, reference = flatten_mlp(rng)
    graph = load_model(model)
    assert {n.op for n in graph.nodes} <= {"reshape", "matmul", "add", "relu"}
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    (y,) = akg.compile(model, target="cpu")(x=x)
    np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-6)
    assert [v.name for v in graph.outputs] == ["y"] and [v.name for v in graph.inputs] == ["x"]


def test_attributes_left_out_take_the_spec_defaults():
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    nodes = [helper.make_node("LeakyRelu", ["x"], ["a"]),  # alpha 0.01
             helper.make_node("HardSigmoid", ["x"], ["h"]),  # alpha 0.2, beta 0.5
             helper.make_node("Gemm", ["x", "w"], ["g"]),  # alpha = beta = 1, no transposes
             helper.make_node("ReduceMean", ["x"], ["m"])]  # all axes, keepdims 1
    w = np.arange(18, dtype=np.float32).reshape(6, 3) / 10
    model = make_model(nodes, [tensor("x", F32, [4, 6])],
                       [tensor("a", F32, [4, 6]), tensor("h", F32, [4, 6]), tensor("g", F32, [4, 3]),
                        tensor("m", F32, [1, 1])], [const("w", w)])
    a, h, g, m = akg.run(model, {"x": x})
    np.testing.assert_allclose(a, np.where(x < 0, 0.01 * x, x), rtol=1e-6)
    np.testing.assert_allclose(h, np.clip(0.2 * x + 0.5, 0, 1), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g, x @ w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m, x.mean(keepdims=True), atol=1e-6)


def test_multi_output_ops_integer_and_bool_tensors():
    table = np.arange(20, dtype=np.float32).reshape(10, 2)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),  # int64 ids, negative too
             helper.make_node("Split", ["emb", "sizes"], ["left", "right"], axis=2),
             helper.make_node("Greater", ["ids", "three"], ["big"]),
             helper.make_node("Where", ["big", "ids", "three"], ["capped"]),
             helper.make_node("LayerNormalization", ["emb", "gamma"], ["ln", "mean", "inv_std"], axis=-1)]
    model = make_model(nodes, [tensor("ids", I64, [2, 3])],
                       [tensor("left", F32, [2, 3, 1]), tensor("right", F32, [2, 3, 1]), tensor("big", BOOL, [2, 3]),
                        tensor("capped", I64, [2, 3]), tensor("ln", F32, [2, 3, 2]), tensor("mean", F32, [2, 3, 1]),
                        tensor("inv_std", F32, [2, 3, 1])],
                       [const("table", table), const("sizes", np.array([1, 1], np.int64)),
                        const("three", np.int64(3)), const("gamma", np.array([1.0, 2.0], np.float32))])
    ids = np.array([[0, 5, -1], [9, 2, 3]], np.int64)
    left, right, big, capped, ln, mean, inv_std = akg.run(model, [ids])
    emb = table[np.where(ids < 0, ids + 10, ids)]
    np.testing.assert_array_equal(left[..., 0], emb[..., 0])
    np.testing.assert_array_equal(right[..., 0], emb[..., 1])
    assert big.dtype == np.bool_ and capped.dtype == np.int64
    np.testing.assert_array_equal(big, ids > 3)
    np.testing.assert_array_equal(capped, np.where(ids > 3, ids, 3))
    mu = emb.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(((emb - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(mean, mu, rtol=1e-6)
    np.testing.assert_allclose(inv_std, inv, rtol=1e-4)
    np.testing.assert_allclose(ln, (emb - mu) * inv * [1.0, 2.0], rtol=1e-4, atol=1e-5)


def test_an_old_opset_is_upgraded_by_onnx_s_version_converter():
    # opset 11: Unsqueeze and ReduceSum take their axes as attributes
    nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0]),
             helper.make_node("ReduceSum", ["u"], ["y"], axes=[2], keepdims=0)]
    model = make_model(nodes, [tensor("x", F32, [3, 4])], [tensor("y", F32, [1, 3])], opset=11)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (y,) = akg.run(model, [x])
    np.testing.assert_allclose(y, x.sum(1)[None], rtol=1e-6)


def test_an_op_without_a_mapping_is_inlined_from_its_onnx_function_body():
    # SoftmaxCrossEntropyLoss has no converter: ONNX defines it as a function of other ops
    assert "SoftmaxCrossEntropyLoss" not in __import__("akg.graph.io.onnx_ops", fromlist=["x"]).ONNX_OPS
    scores = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    labels = np.array([1, 4, 0], np.int64)
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["s", "l"], ["loss"], reduction="mean")
    model = make_model([node], [tensor("s", F32, [3, 5]), tensor("l", I64, [3])], [tensor("loss", F32, [])])
    (loss,) = akg.run(model, [scores, labels])
    logp = scores - np.log(np.exp(scores).sum(1, keepdims=True))
    np.testing.assert_allclose(loss, -logp[np.arange(3), labels].mean(), rtol=1e-5)


# --- typed errors ---------------------------------------------------------------------------------


def test_an_unsupported_op_is_named_with_its_node():
    model = make_model([helper.make_node("Unique", ["x"], ["y"], name="dedup")], [tensor("x", F32, [4])],
                       [tensor("y", F32, [4])])
    with pytest.raises(UnsupportedOpError, match=r"'Unique'.*node 0 'dedup'"):
        load_model(model)


def test_a_dynamic_input_dimension_is_refused_naming_the_input():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", F32, ["batch", 4])],
                       [tensor("y", F32, ["batch", 4])])
    with pytest.raises(UnsupportedError, match=r"input 'x': dimension 0 is 'batch' \(a dynamic shape\)"):
        load_model(model)


def test_a_shape_computed_from_a_model_input_is_refused_naming_the_tensor():
    model = make_model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                       [tensor("x", F32, [2, 6]), tensor("shape", I64, [2])], [tensor("y", F32, [3, 4])])
    with pytest.raises(DynamicShapeError, match=r"input 1 'shape' \(shape\) is computed at run time") as e:
        load_model(model)
    assert e.value.tensor == "shape" and e.value.model_input


def test_an_opset_newer_than_onnx_knows_and_an_unsupported_dtype_are_typed_errors():
    newest = onnx.defs.onnx_opset_version()
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", F32, [2])], [tensor("y", F32, [2])],
                       opset=newest + 5)
    with pytest.raises(UnsupportedError, match=f"opset {newest + 5} is newer"):
        load_model(model)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", TensorProto.BFLOAT16, [2])],
                       [tensor("y", TensorProto.BFLOAT16, [2])])
    with pytest.raises(UnsupportedError, match="input 'x': tensors of type BFLOAT16 are not supported"):
        load_model(model)


def test_a_declared_type_the_mapping_disagrees_with_is_an_error_not_a_wrong_graph():
    model = make_model([helper.make_node("Transpose", ["x"], ["y"])], [tensor("x", F32, [2, 3])],
                       [tensor("y", F32, [2, 3])])  # Transpose gives [3, 2]
    with pytest.raises(ImportFormatError, match=r"node 0 'y' \(Transpose\): the mapping gives f32\[3,2\]"):
        load_model(model)


def test_bytes_that_are_not_onnx_are_a_format_error(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x01\x12\xff\xff garbage")
    with pytest.raises(ImportFormatError, match="broken.onnx"):
        load_model(path)


# --- the CLI ----------------------------------------------------------------------------------


def test_akg_run_compile_and_convert_take_an_onnx_file(tmp_path):
    from akg.cli import main

    model, reference = flatten_mlp(np.random.default_rng(2))
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["run", str(path), "--target", "cpu", "--inputs", str(tmp_path / "in.npz"),
                 "-o", str(tmp_path / "out.npz"), "--check"]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], reference(x), rtol=1e-5, atol=1e-6)
    assert main(["compile", str(path), "-o", str(tmp_path / "mlp.akgpack")]) == 0
    assert (tmp_path / "mlp.akgpack").exists()
    assert main(["convert", str(path), "-o", str(tmp_path / "mlp.mir")]) == 0
    (y,) = akg.run(tmp_path / "mlp.mir", {"x": x})
    np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-6)
