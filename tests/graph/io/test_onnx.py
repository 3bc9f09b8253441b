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


@pytest.mark.parametrize("low, high, ops", [(0.0, 6.0, ["relu6"]), (0.0, 5.0, ["maximum", "minimum"])])
def test_clip_to_0_6_imports_as_relu6(low, high, ops):
    # torch's ReLU6 exports as Clip(0, 6): as relu6, the kernels equal the other doors' ones
    x = np.linspace(-3, 9, 24, dtype=np.float32).reshape(4, 6)
    model = make_model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], [tensor("x", F32, [4, 6])],
                       [tensor("y", F32, [4, 6])], [const("lo", np.float32(low)), const("hi", np.float32(high))])
    graph = load_model(model)
    assert [n.op for n in graph.nodes] == ops
    np.testing.assert_array_equal(akg.run(model, {"x": x})[0], np.clip(x, low, high))


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


def _cross_entropy_model(**attrs):
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["s", "l"], ["loss"], reduction="mean", **attrs)
    return make_model([node], [tensor("s", F32, [3, 5]), tensor("l", I64, [3])], [tensor("loss", F32, [])])


def test_softmax_cross_entropy_is_one_akg_cross_entropy_in_its_common_form():
    scores = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    labels = np.array([1, 4, 0], np.int64)
    model = _cross_entropy_model()
    assert [n.op for n in load_model(model).nodes] == ["cross_entropy"]
    (loss,) = akg.run(model, [scores, labels])
    logp = scores - np.log(np.exp(scores).sum(1, keepdims=True))
    np.testing.assert_allclose(loss, -logp[np.arange(3), labels].mean(), rtol=1e-5)


def test_pytorch_s_ignore_index_is_kept_on_the_akg_cross_entropy():
    # PyTorch exports ignore_index=-100: a label equal to it drops out of the loss and the mean's count
    scores = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    labels = np.array([1, -100, 0], np.int64)
    model = _cross_entropy_model(ignore_index=-100)
    assert [n.op for n in load_model(model).nodes] == ["cross_entropy"]
    (loss,) = akg.run(model, [scores, labels])
    logp = scores - np.log(np.exp(scores).sum(1, keepdims=True))
    np.testing.assert_allclose(loss, -(logp[0, 1] + logp[2, 0]) / 2, rtol=1e-5)


def test_an_op_form_without_a_mapping_is_inlined_from_its_onnx_function_body():
    # with class weights SoftmaxCrossEntropyLoss is ONNX's function body: a weighted mean
    scores = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    labels = np.array([1, 4, 0], np.int64)
    weights = np.array([1, 2, 3, 4, 5], np.float32)
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["s", "l", "w"], ["loss"], reduction="mean")
    model = make_model([node], [tensor("s", F32, [3, 5]), tensor("l", I64, [3]), tensor("w", F32, [5])],
                       [tensor("loss", F32, [])])
    ops = [n.op for n in load_model(model).nodes]
    assert "cross_entropy" not in ops, ops
    (loss,) = akg.run(model, [scores, labels, weights])
    logp = scores - np.log(np.exp(scores).sum(1, keepdims=True))
    w = weights[labels]
    np.testing.assert_allclose(loss, -(w * logp[np.arange(3), labels]).sum() / w.sum(), rtol=1e-5)


# --- typed errors ---------------------------------------------------------------------------------


def test_an_unsupported_op_is_named_with_its_node():
    model = make_model([helper.make_node("DeformConv", ["x", "w", "offset"], ["y"], name="dconv")],
                       [tensor("x", F32, [1, 1, 4, 4]), tensor("w", F32, [1, 1, 2, 2]), tensor("offset", F32, [1, 8, 3, 3])],
                       [tensor("y", F32, [1, 1, 3, 3])])
    with pytest.raises(UnsupportedOpError, match=r"'DeformConv'.*node 0 'dconv'"):
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
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", TensorProto.INT4, [2])],
                       [tensor("y", TensorProto.INT4, [2])])
    with pytest.raises(UnsupportedError, match="input 'x': tensors of type INT4 are not supported"):
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


def external_model(location: str):
    """y = x + w, with w's data in the file `location` (relative to the model's folder)."""
    w = const("w", np.arange(4, dtype=np.float32))
    w.ClearField("raw_data")
    del w.float_data[:]
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value=location)
    return make_model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor("x", F32, [4])],
                      [tensor("y", F32, [4])], [w])


def test_external_data_is_read_from_the_model_s_folder_only(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    (tmp_path / "secret.bin").write_bytes(np.ones(4, np.float32).tobytes())
    cases = {"ok": "w.bin", "missing": "nope.bin", "up": "../secret.bin", "absolute": str(tmp_path / "secret.bin")}
    for name, location in cases.items():
        onnx.save(external_model(location), str(folder / f"{name}.onnx"))
    (y,) = akg.run(folder / "ok.onnx", {"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(y, np.arange(4) + 1)
    with pytest.raises(ImportFormatError, match=r"missing.onnx: initializer 'w': its external data file "
                                                r"'nope.bin' is missing \(no file .*nope.bin\)"):
        load_model(folder / "missing.onnx")
    for name in ("up", "absolute"):
        with pytest.raises(ImportFormatError, match=f"{name}.onnx: initializer 'w': its external data file "
                                                    f"'.*secret.bin' lies outside the model's folder"):
            load_model(folder / f"{name}.onnx")
    (folder / "link.bin").symlink_to(tmp_path / "secret.bin")
    onnx.save(external_model("link.bin"), str(folder / "link.onnx"))
    with pytest.raises(ImportFormatError, match="'link.bin' lies outside the model's folder"):
        load_model(folder / "link.onnx")
    with pytest.raises(ImportFormatError, match="there is no model folder"):
        load_model(external_model("w.bin"))  # an in-memory model


def test_cli_names_a_missing_external_data_file_with_exit_code_3(tmp_path, capsys):
    from akg.cli import main

    onnx.save(external_model("nope.bin"), str(tmp_path / "m.onnx"))
    assert main(["convert", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.mir")]) == 3
    err = capsys.readouterr().err
    assert "initializer 'w': its external data file 'nope.bin' is missing" in err and "internal error" not in err


def test_a_value_written_twice_is_refused_naming_the_value_and_both_writers():
    x, y = tensor("x", F32, [3]), tensor("y", F32, [3])
    twice = make_model([helper.make_node("Relu", ["x"], ["y"], name="r"), helper.make_node("Neg", ["x"], ["y"])],
                       [x], [y])
    with pytest.raises(ImportFormatError, match=r"value 'y' is written by two nodes, node 0 'r' \(Relu\) and "
                                                r"node 1 'y' \(Neg\)"):
        load_model(twice)
    over_input = make_model([helper.make_node("Neg", ["x"], ["x"]), helper.make_node("Relu", ["x"], ["y"])],
                            [x], [y])
    with pytest.raises(ImportFormatError, match=r"node 0 'x' \(Neg\) writes 'x', which is already a graph input"):
        load_model(over_input)
    over_weight = make_model([helper.make_node("Neg", ["x"], ["w"]), helper.make_node("Add", ["x", "w"], ["y"])],
                             [x], [y], [const("w", np.ones(3, np.float32))])
    with pytest.raises(ImportFormatError, match=r"node 0 'w' \(Neg\) writes 'w', which is already an initializer"):
        load_model(over_weight)
    two_inputs = make_model([helper.make_node("Relu", ["x"], ["y"])], [x, x], [y])
    with pytest.raises(ImportFormatError, match="graph input 'x' is declared twice"):
        load_model(two_inputs)
    # an initializer listed among the inputs (IR version < 4) is one value, not two
    old_style = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [x, tensor("w", F32, [3])], [y],
                           [const("w", np.full(3, 2, np.float32))])
    (out,) = akg.run(old_style, {"x": np.ones(3, np.float32)})
    np.testing.assert_array_equal(out, [3, 3, 3])


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


# --- converters checked against ONNX's reference evaluator ----------------------------------------


def reference(model, feeds):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, feeds)


def one_node(op, inputs, outputs, inits=(), opset=22, **attrs):
    """A model of one `op` node: inputs/outputs as (name, elem type, shape); `inits` constants."""
    node = helper.make_node(op, [n for n, _, _ in inputs] + [n for n, _ in inits], [n for n, _, _ in outputs],
                            **attrs)
    return make_model([node], [tensor(*i) for i in inputs], [tensor(*o) for o in outputs],
                      [const(n, a) for n, a in inits], opset=opset)


def check(model, feeds, rtol=1e-5, atol=1e-6):
    got = akg.run(model, feeds)
    want = reference(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


I8, I32, U8 = TensorProto.INT8, TensorProto.INT32, TensorProto.UINT8


@pytest.mark.parametrize("op,attrs,elem,dtype", [
    ("BitwiseAnd", {}, I32, np.int32), ("BitwiseOr", {}, U8, np.uint8), ("BitwiseXor", {}, I8, np.int8),
    ("BitShift", {"direction": "LEFT"}, I8, np.int8), ("BitShift", {"direction": "RIGHT"}, I32, np.int32),
    ("BitShift", {"direction": "RIGHT"}, U8, np.uint8)])
def test_bitwise_ops_and_shifts_match_numpy_on_signed_and_unsigned_integers(op, attrs, elem, dtype):
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (3, 4), endpoint=True).astype(dtype)
    b = rng.integers(info.min, info.max, (3, 4), endpoint=True).astype(dtype)
    if op == "BitShift":  # shifts of -2 .. width + 1 (out of range ones give 0 / the sign)
        b = rng.integers(-2, info.bits + 2, (3, 4)).astype(dtype) if info.min < 0 else \
            rng.integers(0, info.bits + 2, (3, 4)).astype(dtype)
    model = one_node(op, [("a", elem, [3, 4]), ("b", elem, [3, 4])], [("y", elem, [3, 4])], **attrs)
    check(model, {"a": a, "b": b})


def test_bitwise_not_and_integer_pow():
    x = np.array([[-128, -1, 0, 1, 127]], np.int8)
    model = one_node("BitwiseNot", [("x", I8, [1, 5])], [("y", I8, [1, 5])])
    (y,) = akg.run(model, {"x": x})
    np.testing.assert_array_equal(y, ~x)
    base = np.array([1, 2, 3, -4], np.int64)
    model = one_node("Pow", [("x", I64, [4]), ("e", I64, [4])], [("y", I64, [4])])
    (y,) = akg.run(model, {"x": base, "e": np.array([5, 10, 3, 3], np.int64)})
    np.testing.assert_array_equal(y, [1, 1024, 27, -64])


def test_qlinear_matmul_and_matmul_integer_match_the_reference():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 255, (2, 3, 4)).astype(np.uint8)
    b = rng.integers(0, 255, (4, 5)).astype(np.uint8)
    model = one_node("QLinearMatMul", [("a", U8, [2, 3, 4])], [("y", U8, [2, 3, 5])],
                     inits=[("a_scale", np.float32(0.02)), ("a_zp", np.uint8(113)), ("b", b),
                            ("b_scale", np.float32(0.003)), ("b_zp", np.uint8(98)), ("y_scale", np.float32(0.01)),
                            ("y_zp", np.uint8(120))])
    # the order of QLinearMatMul's inputs: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp
    model.graph.node[0].input[:] = ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"]
    check(model, {"a": a}, atol=0)
    model = one_node("MatMulInteger", [("a", U8, [2, 3, 4]), ("b", U8, [4, 5])], [("y", I32, [2, 3, 5])],
                     inits=[("a_zp", np.uint8(12)), ("b_zp", np.uint8(200))])
    check(model, {"a": a, "b": b}, atol=0)


@pytest.mark.parametrize("largest", [1, 0])
def test_top_k_picks_by_rank_ties_to_the_lower_index(largest):
    x = np.array([[3, 1, 3, 2, 1, 5], [0, 0, 0, 0, 0, 0], [4, -1, 7, 7, 2, 4]], np.float32)
    model = one_node("TopK", [("x", F32, [3, 6])], [("v", F32, [3, 4]), ("i", I64, [3, 4])],
                     inits=[("k", np.array([4], np.int64))], axis=1, largest=largest)
    check(model, {"x": x}, atol=0)
    order = np.argsort(-x if largest else x, axis=1, kind="stable")[:, :4]
    (_, index) = akg.run(model, {"x": x})
    np.testing.assert_array_equal(index, order)


@pytest.mark.parametrize("equation,shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij,kj", [(2, 3), (4, 3)]), ("...ii->...i", [(2, 3, 3)]),
    ("i,j->ij", [(3,), (4,)]), ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("iij->j", [(3, 3, 2)]), ("ij->", [(3, 4)])])
def test_einsum_matches_numpy(equation, shapes):
    rng = np.random.default_rng(3)
    xs = {f"x{k}": rng.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)}
    want = np.einsum(equation, *xs.values())
    model = one_node("Einsum", [(n, F32, list(v.shape)) for n, v in xs.items()], [("y", F32, list(want.shape))],
                     equation=equation)
    (y,) = akg.run(model, xs)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_det_of_a_batch_and_a_too_large_matrix_is_a_typed_error():
    x = np.random.default_rng(4).standard_normal((3, 4, 4)).astype(np.float32)
    model = one_node("Det", [("x", F32, [3, 4, 4])], [("y", F32, [3])])
    (y,) = akg.run(model, {"x": x})
    np.testing.assert_allclose(y, np.linalg.det(x), rtol=1e-4, atol=1e-5)
    model = one_node("Det", [("x", F32, [6, 6])], [("y", F32, [])], name="det6")
    with pytest.raises(UnsupportedOpError, match=r"6x6.*node 0 'det6'"):
        load_model(model)


@pytest.mark.parametrize("op,gates,attrs", [
    ("RNN", 1, {"direction": "bidirectional"}), ("GRU", 3, {"linear_before_reset": 1}),
    ("GRU", 3, {"direction": "reverse", "layout": 1}), ("LSTM", 4, {"direction": "bidirectional"}),
    ("LSTM", 4, {"layout": 1})])
def test_recurrent_ops_unrolled_match_the_reference(op, gates, attrs):
    rng = np.random.default_rng(5)
    seq, batch, width, hidden = 4, 2, 3, 5
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    x_shape = [batch, seq, width] if layout else [seq, batch, width]
    w = rng.standard_normal((dirs, gates * hidden, width)).astype(np.float32) * 0.5
    r = rng.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.5
    b = rng.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) * 0.1
    y_shape = [batch, seq, dirs, hidden] if layout else [seq, dirs, batch, hidden]
    h_shape = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    outputs = [("y", F32, y_shape), ("y_h", F32, h_shape)] + ([("y_c", F32, h_shape)] if op == "LSTM" else [])
    model = one_node(op, [("x", F32, x_shape)], outputs, inits=[("w", w), ("r", r), ("b", b)], hidden_size=hidden,
                     **attrs)
    check(model, {"x": rng.standard_normal(x_shape).astype(np.float32)}, rtol=1e-4, atol=1e-5)


def test_recurrent_sequence_lens_stop_each_sequence():
    rng = np.random.default_rng(6)
    w = rng.standard_normal((1, 5, 3)).astype(np.float32)
    r = rng.standard_normal((1, 5, 5)).astype(np.float32) * 0.3
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    model = one_node("RNN", [("x", F32, [4, 2, 3])], [("y", F32, [4, 1, 2, 5]), ("y_h", F32, [1, 2, 5])],
                     inits=[("w", w), ("r", r)], hidden_size=5)
    model.graph.node[0].input[:] = ["x", "w", "r", "", "lens"]
    model.graph.initializer.append(const("lens", np.array([4, 2], np.int32)))
    y, y_h = akg.run(model, {"x": x})
    h = np.zeros((2, 5), np.float32)
    for t in range(4):
        new = np.tanh(x[t] @ w[0].T + h @ r[0].T)
        live = np.array([t < 4, t < 2])[:, None]
        np.testing.assert_allclose(y[t, 0], np.where(live, new, 0), rtol=1e-5, atol=1e-6)
        h = np.where(live, new, h)
    np.testing.assert_allclose(y_h[0], h, rtol=1e-5, atol=1e-6)


def test_dft_and_stft_match_numpy_s_fft():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 8, 3, 2)).astype(np.float32)
    model = one_node("DFT", [("x", F32, [2, 8, 3, 2])], [("y", F32, [2, 8, 3, 2])], opset=19, axis=1)
    (y,) = akg.run(model, {"x": x})
    want = np.fft.fft(x[..., 0] + 1j * x[..., 1], axis=1)
    np.testing.assert_allclose(y[..., 0] + 1j * y[..., 1], want, rtol=1e-5, atol=1e-5)
    model = one_node("DFT", [("x", F32, [2, 8, 3, 2])], [("y", F32, [2, 8, 3, 2])], opset=19, axis=1, inverse=1)
    (y,) = akg.run(model, {"x": x})
    np.testing.assert_allclose(y[..., 0] + 1j * y[..., 1], np.fft.ifft(x[..., 0] + 1j * x[..., 1], axis=1),
                               rtol=1e-5, atol=1e-6)
    signal = rng.standard_normal((1, 32, 1)).astype(np.float32)
    model = one_node("STFT", [("s", F32, [1, 32, 1])], [("y", F32, [1, 5, 5, 2])],
                     inits=[("step", np.array(6, np.int64)), ("window", np.hanning(8).astype(np.float32))], opset=17)
    check(model, {"s": signal}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,padding", [("nearest", "reflection"), ("linear", "zeros"), ("linear", "border"),
                                          ("cubic", "reflection")])
def test_grid_sample_matches_the_reference(mode, padding):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (1, 3, 6, 2)).astype(np.float32)
    model = one_node("GridSample", [("x", F32, [1, 2, 4, 5]), ("g", F32, [1, 3, 6, 2])], [("y", F32, [1, 2, 3, 6])],
                     mode=mode, padding_mode=padding, align_corners=int(mode == "cubic"))
    check(model, {"x": x, "g": grid}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", {"kernel_shape": [2, 2, 2], "dilations": [1, 2, 1], "pads": [1, 0, 1, 0, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 2, 2], "strides": [2, 1, 2], "ceil_mode": 1, "pads": [1, 1, 0, 1, 0, 1]}),
    ("AveragePool", {"kernel_shape": [2, 3], "dilations": [2, 2], "count_include_pad": 1, "pads": [1, 1, 1, 1]}),
    ("LpPool", {"kernel_shape": [2, 2, 2], "p": 3})])
def test_pools_of_any_rank_and_dilation_match_the_reference(op, attrs):
    rng = np.random.default_rng(9)
    shape = [1, 2, 5, 6] if len(attrs["kernel_shape"]) == 2 else [1, 2, 4, 5, 6]
    x = rng.standard_normal(shape).astype(np.float32)
    from onnx import shape_inference

    model = one_node(op, [("x", F32, shape)], [("y", F32, None)], **attrs)
    model = shape_inference.infer_shapes(model)
    model.graph.output[0].CopyFrom(model.graph.output[0])
    check(model, {"x": x}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
def test_pad_modes_match_numpy(mode):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    model = one_node("Pad", [("x", F32, [3, 4])], [("y", F32, [6, 7])],
                     inits=[("pads", np.array([1, 2, 2, 1], np.int64))], mode=mode)
    (y,) = akg.run(model, {"x": x})
    np.testing.assert_array_equal(y, np.pad(x, ((1, 2), (2, 1)), mode=mode))


@pytest.mark.parametrize("reduction", ["mul", "max", "min"])
def test_scatter_reductions_combine_repeated_indices(reduction):
    x = np.arange(1, 9, dtype=np.float32).reshape(2, 4)
    index = np.array([[1, 1, 3], [0, 2, 0]], np.int64)
    updates = np.array([[2.0, -3.0, 0.5], [4.0, 9.0, 0.25]], np.float32)
    model = one_node("ScatterElements", [("x", F32, [2, 4]), ("u", F32, [2, 3])], [("y", F32, [2, 4])],
                     inits=[("i", index)], axis=1, reduction=reduction)
    model.graph.node[0].input[:] = ["x", "i", "u"]
    check(model, {"x": x, "u": updates}, atol=0)


def test_col2im_max_unpool_affine_grid_and_reverse_sequence_match_the_reference():
    rng = np.random.default_rng(10)
    cols = rng.standard_normal((1, 2 * 4, 4)).astype(np.float32)
    model = one_node("Col2Im", [("x", F32, [1, 8, 4])], [("y", F32, [1, 2, 4, 5])],
                     inits=[("image", np.array([4, 5], np.int64)), ("block", np.array([2, 2], np.int64))],
                     strides=[2, 2], pads=[0, 0, 1, 0])
    check(model, {"x": cols})
    theta = rng.standard_normal((2, 2, 3)).astype(np.float32)
    model = one_node("AffineGrid", [("t", F32, [2, 2, 3])], [("g", F32, [2, 3, 4, 2])],
                     inits=[("size", np.array([2, 1, 3, 4], np.int64))], opset=20)
    check(model, {"t": theta})
    x = rng.standard_normal((4, 3, 2)).astype(np.float32)
    model = one_node("ReverseSequence", [("x", F32, [4, 3, 2]), ("lens", I64, [3])], [("y", F32, [4, 3, 2])])
    check(model, {"x": x, "lens": np.array([4, 1, 3], np.int64)}, atol=0)


def test_ops_whose_output_shape_is_the_data_s_need_it_constant():
    model = one_node("Compress", [("x", F32, [3, 2]), ("keep", BOOL, [3])], [("y", F32, [2, 2])], axis=0)
    with pytest.raises(DynamicShapeError, match=r"input 1 'keep' \(condition\)") as e:
        load_model(model)
    assert e.value.model_input
    model = one_node("Compress", [("x", F32, [3, 2])], [("y", F32, [2, 2])],
                     inits=[("keep", np.array([True, False, True]))], axis=0)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    (y,) = akg.run(model, {"x": x})
    np.testing.assert_array_equal(y, x[[0, 2]])


def test_an_unknown_rnn_activation_is_a_typed_error_naming_the_node():
    w, r = np.zeros((1, 2, 3), np.float32), np.zeros((1, 2, 2), np.float32)
    model = one_node("RNN", [("x", F32, [2, 1, 3])], [("y", F32, [2, 1, 1, 2])], inits=[("w", w), ("r", r)],
                     hidden_size=2, activations=["Gelu"], name="cell")
    with pytest.raises(UnsupportedOpError, match=r"activation 'Gelu'.*node 0 'cell'"):
        load_model(model)
