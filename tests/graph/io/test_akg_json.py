"""AKG composite JSON importer: every op mapping on hand-written kernels with hand-computed
results, FRACTAL_NZ and InplaceAssign modelling, typed errors, and the whole corpus."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from akg.errors import ImportFormatError, UnsupportedOpError
from akg.graph import evaluate
from akg.graph.io import LOADERS, emit_mir, load_model, parse_mir
from akg.graph.io.akg_json import load_akg_json, parse_akg_json
from akg.graph.io.akg_json_ops import AKG_OPS

# --- building kernels by hand ----------------------------------------------------------------


def t(name, shape, dtype="float32", fmt="DefaultFormat", value=None):
    """A tensor description; `value` makes it a constant."""
    d = {"tensor_name": name, "shape": list(shape), "data_type": dtype, "format": fmt}
    if value is not None:
        d["value"] = value
    return d


def op(name, inputs, output, **attrs):
    """An op: each input is a tensor description or a list of them (AddN, Concat)."""
    return {
        "name": name,
        "attr": [{"name": k, "value": v, "data_type": "x"} for k, v in attrs.items()] or None,
        "input_desc": [i if isinstance(i, list) else [i] for i in inputs],
        "output_desc": [output],
    }


def kernel(inputs, ops, outputs, process="cuda"):
    return {"composite": True, "op": "Fused_Test", "process": process,
            "input_desc": [[i] for i in inputs] or None, "op_desc": ops, "output_desc": outputs}


def run(desc, **arrays):
    """Import and evaluate; results by output value name."""
    g = parse_akg_json(desc, "test.info")
    return dict(zip((v.name for v in g.outputs), evaluate(g, arrays)))


def unary_kernel(akg_op, shape, dtype="float32", out_dtype=None, **attrs):
    y = t("y", shape, out_dtype or dtype)
    return kernel([t("x", shape, dtype)], [op(akg_op, [t("x", shape, dtype)], y, **attrs)], [y])


X23 = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, 0.5]], np.float32)

# --- elementwise, constants, casts -------------------------------------------------------------


def test_binary_ops_with_constants_and_output_names():
    c = t("input_1", [1], value=2.0)
    desc = kernel(
        [t("input_0", [2, 3]), t("input_2", [3])],
        [op("Mul", [t("input_0", [2, 3]), c], t("output_0_0", [2, 3])),
         op("TensorAdd", [t("output_0_0", [2, 3]), t("input_2", [3])], t("output_0_1", [2, 3])),
         op("RealDiv", [t("output_0_1", [2, 3]), t("input_3", [1], value=4.0)], t("output_0_2", [2, 3])),
         op("Sub", [t("output_0_2", [2, 3]), c], t("output_0_3", [2, 3]))],
        [t("output_0_3", [2, 3]), t("output_0_0", [2, 3])],
    )
    b = np.array([1.0, 2.0, 3.0], np.float32)
    out = run(desc, input_0=X23, input_2=b)
    assert list(out) == ["output_0_3", "output_0_0"]
    np.testing.assert_array_equal(out["output_0_0"], [[2, -4, 6], [-8, 10, 1]])
    # ((2x + b) / 4) - 2: [[3/4-2, -2/4-2, 9/4-2], [-7/4-2, 12/4-2, 4/4-2]]
    np.testing.assert_allclose(out["output_0_3"], [[-1.25, -2.5, 0.25], [-3.75, 1.0, -1.0]])


def test_constant_values_take_declared_dtype_and_shape():
    desc = kernel(
        [t("x", [2, 2], "float16")],
        [op("Add", [t("x", [2, 2], "float16"), t("c", [2, 2], "float16", value=[[1, 2], [3, 4]])],
            t("y", [2, 2], "float16")),
         op("Maximum", [t("y", [2, 2], "float16"), t("z", [2], "float16", value=2.5)],
            t("w", [2, 2], "float16")),
         op("Cast", [t("k", [1], "float32", value=65504.0)], t("k16", [1], "float16"), dst_type="float16"),
         op("Mul", [t("w", [2, 2], "float16"), t("k16", [1], "float16")], t("v", [2, 2], "float16"))],
        [t("w", [2, 2], "float16"), t("v", [2, 2], "float16")],
    )
    g = parse_akg_json(desc, "c.info")
    assert {str(v.type) for v in g.constants} == {"f16[2,2]", "f16[2]", "f32[1]"}
    out = evaluate(g, {"x": np.zeros((2, 2), np.float16)})
    assert out[0].dtype == np.float16
    np.testing.assert_array_equal(out[0], [[2.5, 2.5], [3, 4]])
    assert np.isinf(out[1]).all()  # 2.5 * 65504 overflows fp16


def test_unary_ops():
    cases = {
        "Abs": (np.abs(X23), {}), "Neg": (-X23, {}), "Exp": (np.exp(X23), {}),
        "Reciprocal": (1 / X23, {}), "Tanh": (np.tanh(X23), {}),
    }
    for name, (want, attrs) in cases.items():
        np.testing.assert_allclose(run(unary_kernel(name, [2, 3], **attrs), x=X23)["y"], want, rtol=1e-6)
    pos = np.array([[4.0, 0.25]], np.float32)
    np.testing.assert_allclose(run(unary_kernel("Sqrt", [1, 2]), x=pos)["y"], [[2.0, 0.5]])
    np.testing.assert_allclose(run(unary_kernel("Rsqrt", [1, 2]), x=pos)["y"], [[0.5, 2.0]])
    np.testing.assert_allclose(run(unary_kernel("Log", [1, 2]), x=pos)["y"], np.log(pos), rtol=1e-6)
    special = np.array([np.inf, np.nan, 1.0], np.float32)
    assert run(unary_kernel("IsInf", [3], out_dtype="bool"), x=special)["y"].tolist() == [True, False, False]
    assert run(unary_kernel("IsNan", [3], out_dtype="bool"), x=special)["y"].tolist() == [False, True, False]


def test_ops_mapped_beyond_the_corpus():
    from scipy import special

    for name, want in {"Sin": np.sin(X23), "Cos": np.cos(X23), "Floor": np.floor(X23),
                       "Sign": np.sign(X23), "Erf": special.erf(X23)}.items():
        np.testing.assert_allclose(run(unary_kernel(name, [2, 3]), x=X23)["y"], want, rtol=1e-6)
    xs = [t("x", [3]), t("y", [3])]
    desc = kernel(xs, [op("Equal", xs, t("eq", [3], "bool")), op("Less", xs, t("lt", [3], "bool")),
                       op("Div", xs, t("d", [3]))], [t("eq", [3], "bool"), t("lt", [3], "bool"), t("d", [3])])
    out = run(desc, x=np.array([1, 2, 3], np.float32), y=np.array([1, 4, 2], np.float32))
    assert out["eq"].tolist() == [True, False, False] and out["lt"].tolist() == [False, True, False]
    assert out["d"].tolist() == [1.0, 0.5, 1.5]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    desc = kernel(
        [t("x", [2, 3])],
        [op("ExpandDims", [t("x", [2, 3])], t("e", [2, 1, 3]), axis=[1]),
         op("Squeeze", [t("e", [2, 1, 3])], t("s", [2, 3]), axis=[1]),
         op("ReduceMin", [t("x", [2, 3])], t("mn", [2, 1]), axis=[1], keep_dims=True),
         op("ReduceProd", [t("x", [2, 3])], t("pr", [3]), axis=[0], keep_dims=False)],
        [t("e", [2, 1, 3]), t("s", [2, 3]), t("mn", [2, 1]), t("pr", [3])],
    )
    out = run(desc, x=x)
    assert out["e"].shape == (2, 1, 3) and out["s"].tolist() == x.tolist()
    assert out["mn"].tolist() == [[0], [3]] and out["pr"].tolist() == [0, 4, 10]


def test_comparisons_logical_ops_and_select():
    xs, ys = [t("x", [4]), t("y", [4])], [4]
    desc = kernel(
        xs,
        [op("Greater", xs, t("gt", ys, "bool")), op("LessEqual", xs, t("le", ys, "bool")),
         op("GreaterEqual", xs, t("ge", ys, "bool")), op("NotEqual", xs, t("ne", ys, "bool")),
         op("LogicalAnd", [t("gt", ys, "bool"), t("ne", ys, "bool")], t("and", ys, "bool")),
         op("LogicalOr", [t("le", ys, "bool"), t("gt", ys, "bool")], t("or", ys, "bool")),
         op("LogicalNot", [t("ge", ys, "bool")], t("not", ys, "bool")),
         op("Select", [t("gt", ys, "bool"), t("x", ys), t("y", ys)], t("sel", ys))],
        [t(n, ys, "bool") for n in ("gt", "le", "ge", "ne", "and", "or", "not")] + [t("sel", ys)],
    )
    x = np.array([1, 2, 3, 4], np.float32)
    y = np.array([2, 2, 1, 5], np.float32)
    out = run(desc, x=x, y=y)
    assert out["gt"].tolist() == [False, False, True, False]
    assert out["le"].tolist() == [True, True, False, True]
    assert out["ge"].tolist() == [False, True, True, False]
    assert out["ne"].tolist() == [True, False, True, True]
    assert out["and"].tolist() == [False, False, True, False]
    assert out["or"].tolist() == [True, True, True, True]
    assert out["not"].tolist() == [True, False, False, True]
    assert out["sel"].tolist() == [2, 2, 3, 5]  # Select(cond, x, y): x where cond


def test_select_with_numeric_condition_and_comparison_declared_float():
    # Ascend files declare comparison outputs as float32 and feed them to Select
    desc = kernel(
        [t("x", [3])],
        [op("Greater", [t("x", [3]), t("zero", [1], value=0.0)], t("c", [3], "float32")),
         op("Select", [t("c", [3]), t("x", [3]), t("one", [1], value=1.0)], t("y", [3]))],
        [t("c", [3]), t("y", [3])],
    )
    out = run(desc, x=np.array([-1.0, 2.0, 0.0], np.float32))
    assert out["c"].dtype == np.float32 and out["c"].tolist() == [0.0, 1.0, 0.0]
    assert out["y"].tolist() == [1.0, 2.0, 1.0]


def test_cast_uses_dst_type():
    x = np.array([0.0, -1.5, 2.7], np.float32)
    cast = lambda to: run(unary_kernel("Cast", [3], out_dtype=to, dst_type=to), x=x)["y"]  # noqa: E731
    assert cast("float16").dtype == np.float16
    assert cast("bool").tolist() == [False, True, True]  # x != 0
    assert cast("int32").tolist() == [0, -1, 2]  # toward zero
    b = np.array([True, False])
    y = run(unary_kernel("Cast", [2], "bool", out_dtype="float32", dst_type="float32"), x=b)["y"]
    assert y.dtype == np.float32 and y.tolist() == [1.0, 0.0]


def test_scalar_shapes_written_as_empty_or_one_agree():
    # files mix [] and [1] for scalars (LambUpdateWithLR): results follow the declared shape
    desc = kernel(
        [t("a", []), t("b", [])],
        [op("RealDiv", [t("a", [1]), t("b", [1])], t("q", [])),
         op("Greater", [t("q", [1]), t("z", [1], value=0.0)], t("g", [], "bool")),
         op("Mul", [t("q", [1]), t("b", [1])], t("m", [1]))],
        [t("g", [], "bool"), t("m", [1])],
    )
    g = parse_akg_json(desc, "s.info")
    assert [v.shape for v in g.outputs] == [(), (1,)]
    out = evaluate(g, {"a": np.array(3.0, np.float32), "b": np.array(2.0, np.float32)})
    assert out[0] == True and out[1].tolist() == [3.0]  # noqa: E712


# --- layout ------------------------------------------------------------------------------------


def test_reshape_broadcast_to_transpose():
    desc = kernel(
        [t("x", [2, 3]), t("s", [1])],
        [op("Reshape", [t("x", [2, 3])], t("r", [3, 2]), shape=[-1, 2]),
         op("Transpose", [t("x", [2, 3])], t("tr", [3, 2]), perm=[1, 0]),
         op("BroadcastTo", [t("s", [1])], t("b", [2, 3]), shape=[2, 3]),
         op("BroadcastTo", [t("c", [1], value=7.0)], t("k", [4]), shape=[4]),
         op("Reshape", [t("s", [1])], t("sc", []), shape=[])],
        [t("r", [3, 2]), t("tr", [3, 2]), t("b", [2, 3]), t("k", [4]), t("sc", [])],
    )
    out = run(desc, x=X23, s=np.array([5.0], np.float32))
    np.testing.assert_array_equal(out["r"], X23.reshape(3, 2))
    np.testing.assert_array_equal(out["tr"], X23.T)
    np.testing.assert_array_equal(out["b"], np.full((2, 3), 5.0))
    np.testing.assert_array_equal(out["k"], [7.0] * 4)
    assert out["sc"].shape == () and out["sc"] == 5.0


def test_reductions_axis_and_keep_dims():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    desc = kernel(
        [t("x", [2, 3, 4])],
        [op("ReduceSum", [t("x", [2, 3, 4])], t("s_keep", [2, 1, 4]), axis=[1], keep_dims=True),
         op("ReduceSum", [t("x", [2, 3, 4])], t("s_int", [2, 3]), axis=-1, keep_dims=False),
         op("ReduceMax", [t("x", [2, 3, 4])], t("m", [3]), axis=[0, 2], keep_dims=False),
         op("ReduceSum", [t("x", [2, 3, 4])], t("all", [1, 1, 1]), axis=[], keep_dims=True),
         op("ReduceMin", [t("x", [2, 3, 4])], t("mn", [])),  # no attrs: all axes, no keep_dims
         op("ReduceSum", [t("x", [2, 3, 4])], t("n", [1]), axis=None, keep_dims=True)],
        [t("s_keep", [2, 1, 4]), t("s_int", [2, 3]), t("m", [3]), t("all", [1, 1, 1]), t("mn", []),
         t("n", [1])],
    )
    out = run(desc, x=x)
    np.testing.assert_array_equal(out["s_keep"], x.sum(1, keepdims=True))
    np.testing.assert_array_equal(out["s_int"], x.sum(-1))
    np.testing.assert_array_equal(out["m"], [15, 19, 23])
    assert out["all"].tolist() == [[[276.0]]]  # [] means every axis: 0 + 1 + ... + 23
    assert out["mn"] == 0.0 and out["n"].tolist() == [276.0]


def test_pad_and_unpad():
    x = np.array([[1, 2], [3, 4]], np.float16)
    desc = kernel(
        [t("x", [2, 2], "float16")],
        [op("PadAkg", [t("x", [2, 2], "float16")], t("p", [3, 5], "float16"),
            head=[0, 1], tail=[1, 2], pad_val=0),
         op("UnPadAkg", [t("p", [3, 5], "float16")], t("u", [2, 2], "float16"), tail=[1, 3])],
        [t("p", [3, 5], "float16"), t("u", [2, 2], "float16")],
    )
    out = run(desc, x=x)
    np.testing.assert_array_equal(out["p"], [[0, 1, 2, 0, 0], [0, 3, 4, 0, 0], [0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(out["u"], [[0, 1], [0, 3]])  # keeps the leading [:3-1, :5-3]
    tail_only = kernel([t("x", [3, 4])], [op("UnPadAkg", [t("x", [3, 4])], t("u", [1, 4]), tail=[2, 0])],
                       [t("u", [1, 4])])
    y = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(run(tail_only, x=y)["u"], y[:1])


def test_concat_of_computed_inputs():
    desc = kernel(
        [t("input_0", [2, 2]), t("input_2", [1, 2])],
        [op("Mul", [t("input_0", [2, 2]), t("input_1", [1], value=2.0)], t("output_0_0", [2, 2])),
         op("Concat", [[t("output_0_0", [2, 2]), t("input_2", [1, 2])]], t("output_0_1", [3, 2]), axis=0)],
        [t("output_0_1", [3, 2])],
    )
    out = run(desc, input_0=np.ones((2, 2), np.float32), input_2=np.array([[7, 8]], np.float32))
    np.testing.assert_array_equal(out["output_0_1"], [[2, 2], [2, 2], [7, 8]])


def nd_to_nz(x: np.ndarray) -> np.ndarray:
    """[..., M, N] -> FRACTAL_NZ [..., N/16, M/16, 16, 16]."""
    *b, m, n = x.shape
    r = len(b)
    return x.reshape(*b, m // 16, 16, n // 16, 16).transpose(*range(r), r + 2, r, r + 1, r + 3).copy()


def nz_to_nd(x: np.ndarray) -> np.ndarray:
    *b, n1, m1, m0, n0 = x.shape
    r = len(b)
    return x.transpose(*range(r), r + 1, r + 2, r, r + 3).reshape(*b, m1 * m0, n1 * n0)


def test_fractal_nz_with_default_format_operands():
    nz = [2, 2, 3, 16, 16]  # batch 2, logical [48, 32]
    desc = kernel(
        [t("x", nz, fmt="FRACTAL_NZ"), t("row", [2, 48, 1]), t("col", [2, 1, 32]), t("full", [48, 32])],
        [op("Sub", [t("x", nz, fmt="FRACTAL_NZ"), t("row", [2, 48, 1])], t("a", nz, fmt="FRACTAL_NZ")),
         op("Add", [t("col", [2, 1, 32]), t("a", nz, fmt="FRACTAL_NZ")], t("b", nz, fmt="FRACTAL_NZ")),
         op("Mul", [t("b", nz, fmt="FRACTAL_NZ"), t("full", [48, 32])], t("c", nz, fmt="FRACTAL_NZ")),
         op("Mul", [t("c", nz, fmt="FRACTAL_NZ"), t("k", [1], value=0.5)], t("d", nz, fmt="FRACTAL_NZ"))],
        [t("d", nz, fmt="FRACTAL_NZ")],
    )
    rng = np.random.default_rng(0)
    xl = rng.standard_normal((2, 48, 32)).astype(np.float32)
    row, col, full = (rng.standard_normal(s).astype(np.float32) for s in ((2, 48, 1), (2, 1, 32), (48, 32)))
    out = run(desc, x=nd_to_nz(xl), row=row, col=col, full=full)["d"]
    np.testing.assert_allclose(nz_to_nd(out), ((xl - row) + col) * full * 0.5, rtol=1e-6)
    g = parse_akg_json(desc, "nz.info")
    assert [n.op for n in g.nodes].count("transpose") == 1  # only [m, n] needs a real re-layout


def test_fractal_nz_operand_needing_padding_is_unsupported():
    desc = kernel(
        [t("x", [1, 1, 16, 16], fmt="FRACTAL_NZ"), t("y", [10, 16])],
        [op("Add", [t("x", [1, 1, 16, 16], fmt="FRACTAL_NZ"), t("y", [10, 16])],
            t("z", [1, 1, 16, 16], fmt="FRACTAL_NZ"))],
        [t("z", [1, 1, 16, 16], fmt="FRACTAL_NZ")],
    )
    with pytest.raises(UnsupportedOpError, match=r"nzpad\.info.*'Add'.*FRACTAL_NZ"):
        parse_akg_json(desc, "nzpad.info")


# --- matmul, conv, one-hot, AddN, ElemAny ------------------------------------------------------


def matmul_kernel(a_shape, b_shape, out_shape, dtype, dst, name="MatMul", **attrs):
    return kernel([t("a", a_shape, dtype), t("b", b_shape, dtype)],
                  [op(name, [t("a", a_shape, dtype), t("b", b_shape, dtype)], t("y", out_shape, dst),
                      dst_type=dst, **attrs)],
                  [t("y", out_shape, dst)])


def test_matmul_transpose_flags():
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)  # [2, 3]
    b = np.array([[1, 0], [0, 1], [1, 1]], np.float32)  # [3, 2]
    ab = [[4, 5], [10, 11]]
    cases = [((a, b), False, False), ((a.T.copy(), b), True, False), ((a, b.T.copy()), False, True),
             ((a.T.copy(), b.T.copy()), True, True)]
    for (x, y), ta, tb in cases:
        desc = matmul_kernel(x.shape, y.shape, [2, 2], "float32", "float32", transpose_a=ta, transpose_b=tb)
        np.testing.assert_array_equal(run(desc, a=x, b=y)["y"], ab)
    # transpose_x1 / transpose_x2 spellings
    desc = matmul_kernel([2, 3], [2, 3], [2, 2], "float32", "float32", transpose_x1=False, transpose_x2=True)
    np.testing.assert_array_equal(run(desc, a=a, b=a)["y"], a @ a.T)


def test_matmul_fp16_accumulates_in_fp32_and_casts_to_dst_type():
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float16)
    b = np.array([[1, 0, 2], [0, 1, 3], [1, 1, 1], [2, 0, 0]], np.float16)  # [4, 3], used transposed
    want = a.astype(np.float32) @ b.astype(np.float32).T  # [[7, 11, 6, 2], [16, 23, 15, 8]]
    desc = matmul_kernel([2, 3], [4, 3], [2, 4], "float16", "float32", transpose_a=False, transpose_b=True)
    g = parse_akg_json(desc, "mm.info")
    mm = next(n for n in g.nodes if n.op == "matmul")
    assert [v.dtype for v in mm.inputs] == ["float32", "float32"] and mm.attrs["transpose_b"]
    y = evaluate(g, {"a": a, "b": b})[0]
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, want)
    y16 = run(matmul_kernel([2, 3], [4, 3], [2, 4], "float16", "float16", transpose_b=True), a=a, b=b)["y"]
    assert y16.dtype == np.float16
    np.testing.assert_array_equal(y16, want.astype(np.float16))


def test_matmul_with_bias_adds_before_the_final_cast():
    a, b = np.array([[1, 2]], np.float16), np.array([[3], [4]], np.float16)
    bias = np.array([0.5], np.float16)
    ins = [t("a", [1, 2], "float16"), t("b", [2, 1], "float16"), t("bias", [1], "float16")]
    desc = kernel(ins, [op("MatMul", ins, t("y", [1, 1], "float16"), transpose_a=False, transpose_b=False,
                           dst_type="float16")], [t("y", [1, 1], "float16")])
    g = parse_akg_json(desc, "bias.info")
    assert [n.op for n in g.nodes] == ["cast", "cast", "matmul", "cast", "add", "cast"]
    assert evaluate(g, {"a": a, "b": b, "bias": bias})[0].tolist() == [[11.5]]


def test_batch_matmul():
    a = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    b = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    desc = matmul_kernel([2, 2, 3], [2, 3, 2], [2, 2, 2], "float32", "float32", name="BatchMatMul",
                         transpose_a=False, transpose_b=False)
    np.testing.assert_array_equal(run(desc, a=a, b=b)["y"], a @ b)


def test_conv2d_nhwc_valid_stride():
    x = np.arange(50, dtype=np.float32).reshape(1, 5, 5, 2) / 10
    w = np.arange(54, dtype=np.float32).reshape(3, 3, 3, 2) / 10  # O, KH, KW, I
    desc = kernel(
        [t("x", [1, 5, 5, 2], fmt="NHWC"), t("w", [3, 3, 3, 2], fmt="NHWC")],
        [op("Conv2D", [t("x", [1, 5, 5, 2], fmt="NHWC"), t("w", [3, 3, 3, 2], fmt="NHWC")],
            t("y", [1, 2, 2, 3], fmt="NHWC"), stride=[1, 1, 2, 2], dilation=[1, 1, 1, 1],
            pad_list=[0, 0, 0, 0], groups=1, format="NCHW", dst_type="float32")],
        [t("y", [1, 2, 2, 3], fmt="NHWC")],
    )
    want = np.zeros((1, 2, 2, 3), np.float32)
    for h in range(2):
        for ww in range(2):
            for o in range(3):
                want[0, h, ww, o] = (x[0, 2 * h:2 * h + 3, 2 * ww:2 * ww + 3, :] * w[o]).sum()
    np.testing.assert_allclose(run(desc, x=x, w=w)["y"], want, rtol=1e-5)


def test_one_hot_depth_axis_and_on_off_inputs():
    idx = np.array([[0, 2], [1, 5]], np.int32)  # 5 is out of range: all off
    desc = kernel(
        [t("i", [2, 2], "int32")],
        [op("OneHot", [t("i", [2, 2], "int32"), t("on", [1], value=3.0), t("off", [1], value=-1.0)],
            t("h", [2, 2, 3]), depth=3, axis=-1),
         op("OneHot", [t("i", [2, 2], "int32"), t("on", [1], value=3.0), t("off", [1], value=-1.0)],
            t("h0", [3, 2, 2]), depth=3, axis=0)],
        [t("h", [2, 2, 3]), t("h0", [3, 2, 2])],
    )
    out = run(desc, i=idx)
    want = [[[3, -1, -1], [-1, -1, 3]], [[-1, 3, -1], [-1, -1, -1]]]
    np.testing.assert_array_equal(out["h"], want)
    np.testing.assert_array_equal(out["h0"], np.moveaxis(np.array(want, np.float32), -1, 0))


def test_add_n_sums_every_input():
    xs = [t(f"x{i}", [2]) for i in range(3)]
    desc = kernel(xs, [op("AddN", [xs], t("s", [2]), n=3)], [t("s", [2])])
    out = run(desc, x0=np.array([1, 2], np.float32), x1=np.array([10, 20], np.float32),
              x2=np.array([100, 200], np.float32))
    assert out["s"].tolist() == [111.0, 222.0]


def test_elem_any_flags_any_positive_element():
    any_kernel = lambda dtype: kernel(  # noqa: E731
        [t("x", [2, 3], dtype)],
        [op("ElemAny", [t("x", [2, 3], dtype)], t("f", [1]), dst_type="float32")], [t("f", [1])])
    some = np.zeros((2, 3), bool)
    some[1, 2] = True
    assert run(any_kernel("bool"), x=some)["f"].tolist() == [1.0]
    assert run(any_kernel("bool"), x=np.zeros((2, 3), bool))["f"].tolist() == [0.0]
    # numeric input: AKG stores 1 where an element is > 0, so negatives alone give 0
    assert run(any_kernel("float32"), x=-np.ones((2, 3), np.float32))["f"].tolist() == [0.0]
    assert run(any_kernel("float32"), x=X23)["f"].tolist() == [1.0]


# --- InplaceAssign -----------------------------------------------------------------------------


def test_inplace_assign_outputs_and_write_back():
    desc = kernel(
        [t("input_0", [2]), t("input_1", [2])],
        [op("Add", [t("input_1", [2]), t("c1", [1], value=1.0)], t("output_0_0", [2])),
         op("Mul", [t("input_0", [2]), t("c2", [1], value=10.0)], t("output_0_1", [2])),  # old input_0
         op("InplaceAssign", [t("input_0", [2]), t("output_0_0", [2]), t("output_0_0", [2])],
            t("output_0_2", [2]), fake_output=True),
         op("Mul", [t("input_0", [2]), t("c3", [1], value=2.0)], t("output_0_3", [2]))],  # sees b
        [t("output_0_2", [2]), t("output_0_1", [2]), t("output_0_3", [2])],
    )
    g = parse_akg_json(desc, "ia.info")
    assert [v.name for v in g.outputs] == ["output_0_2", "output_0_1", "output_0_3", "input_0.inplace"]
    out = dict(zip([v.name for v in g.outputs], evaluate(
        g, {"input_0": np.array([5, 6], np.float32), "input_1": np.array([1, 2], np.float32)})))
    assert out["output_0_2"].tolist() == [2, 3]  # the fake output c (= b here)
    assert out["input_0.inplace"].tolist() == [2, 3]  # the value written into input_0
    assert out["output_0_1"].tolist() == [50, 60]  # read before the assignment: the old input_0
    assert out["output_0_3"].tolist() == [4, 6]  # read after it: the buffer holds b


def test_inplace_assign_with_distinct_fake_output_and_chains():
    # LambNextMV shape: two assignments chained through their (non-fake) outputs
    desc = kernel(
        [t("m", [2]), t("v", [2]), t("g", [2])],
        [op("Mul", [t("g", [2]), t("h", [1], value=0.5)], t("m_new", [2])),
         op("Mul", [t("g", [2]), t("g", [2])], t("v_new", [2])),
         op("Add", [t("m_new", [2]), t("v_new", [2])], t("upd", [2])),
         op("InplaceAssign", [t("m", [2]), t("m_new", [2]), t("upd", [2])], t("o1", [2]), fake_output=False),
         op("InplaceAssign", [t("v", [2]), t("v_new", [2]), t("o1", [2])], t("o2", [2]), fake_output=False)],
        [t("o2", [2])],
    )
    out = run(desc, m=np.zeros(2, np.float32), v=np.zeros(2, np.float32), g=np.array([2, 4], np.float32))
    assert list(out) == ["o2", "m.inplace", "v.inplace"]
    assert out["o2"].tolist() == [5, 18] and out["m.inplace"].tolist() == [1, 2]
    assert out["v.inplace"].tolist() == [4, 16]


def test_op_table_covers_the_corpus_ops():
    corpus_ops = ("Mul Cast Add TensorAdd Reshape InplaceAssign RealDiv ReduceSum Sub Select BroadcastTo "
                  "Transpose Sqrt Greater Maximum MatMul Exp Neg ReduceMax LessEqual Rsqrt Minimum Log "
                  "IsInf IsNan LogicalOr ElemAny PadAkg Tanh AddN Conv2D UnPadAkg OneHot Reciprocal "
                  "NotEqual Abs LogicalNot LogicalAnd GreaterEqual Pow Concat").split()
    assert [o for o in corpus_ops if o not in AKG_OPS] == []


def test_suffixes_registered_and_load_model(tmp_path):
    assert LOADERS[".info"] is load_akg_json and LOADERS[".json"] is load_akg_json
    desc = unary_kernel("Neg", [2])
    for suffix in (".info", ".json"):
        path = tmp_path / f"k{suffix}"
        path.write_text(json.dumps(desc))
        g = load_model(path)
        assert g.name == "Fused_Test" and [v.name for v in g.inputs] == ["x"]
        assert evaluate(g, [np.array([1, -2], np.float32)])[0].tolist() == [-1, 2]


# --- errors ------------------------------------------------------------------------------------


def test_invalid_json_names_the_file(tmp_path):
    path = tmp_path / "broken.info"
    path.write_text('{"op_desc": [')
    with pytest.raises(ImportFormatError, match=r"broken\.info:1:\d+: invalid JSON"):
        load_akg_json(path)
    with pytest.raises(ImportFormatError, match=r"missing\.json: cannot read"):
        load_akg_json(tmp_path / "missing.json")


def test_missing_keys_name_the_file_and_op():
    with pytest.raises(ImportFormatError, match=r"a\.info: not an AKG composite kernel: missing key 'op_desc"):
        parse_akg_json({"input_desc": [], "output_desc": []}, "a.info")
    with pytest.raises(ImportFormatError, match=r"b\.info: .*JSON list"):
        parse_akg_json([{"op_desc": []}], "b.info")
    desc = unary_kernel("Neg", [2])
    del desc["op_desc"][0]["output_desc"]
    with pytest.raises(ImportFormatError, match=r"c\.info: op_desc\[0\] \(Neg\): missing key 'output_desc'"):
        parse_akg_json(desc, "c.info")
    desc = unary_kernel("Neg", [2])
    del desc["op_desc"][0]["input_desc"][0][0]["shape"]
    with pytest.raises(ImportFormatError, match=r"d\.info: .*missing key 'shape'"):
        parse_akg_json(desc, "d.info")
    with pytest.raises(ImportFormatError, match=r"e\.info: output_desc is empty"):
        parse_akg_json(kernel([t("x", [1])], [], []), "e.info")


def test_unknown_op_is_unsupported_with_op_and_file():
    desc = unary_kernel("FancyNewOp", [2])
    with pytest.raises(UnsupportedOpError, match=r"kern\.info: op 'FancyNewOp' is not supported") as e:
        parse_akg_json(desc, "kern.info")
    assert e.value.op == "FancyNewOp"
    nz_matmul = matmul_kernel([1, 1, 16, 16], [1, 1, 16, 16], [1, 1, 16, 16], "float16", "float16",
                              left_format="FRACTAL_NZ", right_format="FRACTAL_NZ")
    with pytest.raises(UnsupportedOpError, match=r"nz\.info: op 'MatMul'.*FRACTAL_NZ"):
        parse_akg_json(nz_matmul, "nz.info")


def test_inconsistent_files_are_located_errors():
    undefined = kernel([t("x", [2])], [op("Neg", [t("nope", [2])], t("y", [2]))], [t("y", [2])])
    with pytest.raises(ImportFormatError, match=r"u\.info: op_desc\[0\] \(Neg\) -> y: tensor 'nope' is used"):
        parse_akg_json(undefined, "u.info")
    wrong_shape = kernel([t("x", [2])], [op("Neg", [t("x", [2])], t("y", [3]))], [t("y", [3])])
    with pytest.raises(ImportFormatError, match=r"w\.info: .*-> y: the op gives f32\[2\] but the file declares"):
        parse_akg_json(wrong_shape, "w.info")
    wrong_dtype = kernel([t("x", [2])], [op("Neg", [t("x", [2], "float16")], t("y", [2]))], [t("y", [2])])
    with pytest.raises(ImportFormatError, match=r"tensor 'x' is f32\[2\] but is used as float16"):
        parse_akg_json(wrong_dtype, "t.info")
    unknown_dtype = kernel([t("x", [2], "complex128")], [], [t("x", [2])])
    with pytest.raises(ImportFormatError, match=r"unsupported data_type 'complex128'"):
        parse_akg_json(unknown_dtype, "c.info")
    bad_value = kernel([t("x", [2])], [op("Add", [t("x", [2]), t("k", [2], value=[1, 2, 3])], t("y", [2]))],
                       [t("y", [2])])
    with pytest.raises(ImportFormatError, match=r"constant with 3 values does not fill shape \[2\]"):
        parse_akg_json(bad_value, "v.info")


# --- a real FRACTAL_NZ softmax from the corpus, against a NumPy softmax on the logical shape ----

CORPUS = next((p for p in (Path(os.environ.get("AKG_CORPUS", "/nonexistent")) / "akg-composite",
                            Path(__file__).resolve().parents[3].parent / "shared" / "corpus" / "akg-composite",
                            Path("/work/shared/corpus/akg-composite")) if p.is_dir()),
              Path("/work/shared/corpus/akg-composite"))
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"AKG composite corpus not at {CORPUS}")


@needs_corpus
def test_corpus_nz_softmax_matches_numpy_softmax():
    path = CORPUS / ("networks/ascend/transformer/level0/Fused_Mul_Add_Cast_Cast_ReduceMax_Reshape_"
                     "Cast_Sub_Exp_ReduceSum_Reshape_RealDiv_more_split_10733286479458326662.info")
    g = load_akg_json(path)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((96, 16, 16, 16)).astype(np.float16)  # logical [96, 16, 16, 16]
    mask = rng.standard_normal((96, 1, 16, 16)).astype(np.float16)
    y32, y16 = evaluate(g, {"input_0": nd_to_nz(x), "input_2": nd_to_nz(mask)})
    z = (x * np.float16(0.125) + mask).astype(np.float32)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    want = e / e.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(nz_to_nd(y32), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nz_to_nd(y16).astype(np.float32), want, rtol=1e-3, atol=1e-3)


# --- the whole corpus ------------------------------------------------------------------------

NOT_KERNELS = {  # files of the corpus that are not composite kernels
    "composite/ascend_ci/base.json",  # an index: file name -> size
    "composite/ascend_composite_false/Im2Col_9367432618403027625.json",  # a single-op description
}


def corpus_files() -> list[str]:
    return sorted(str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.suffix in (".info", ".json"))


def import_corpus() -> tuple[dict[str, object], dict[str, Exception]]:
    graphs, errors = {}, {}
    for rel in corpus_files():
        try:
            graphs[rel] = load_akg_json(CORPUS / rel)
        except (ImportFormatError, UnsupportedOpError) as e:
            errors[rel] = e
    return graphs, errors


def run_corpus_kernel(rel: str) -> tuple[str, str | None, float]:
    """Import one corpus kernel and run it on random inputs; (file, failure or None, seconds)."""
    import time

    from akg.errors import AkgError
    from akg.graph import random_inputs

    start = time.perf_counter()
    try:
        g = load_akg_json(CORPUS / rel)
        outs = evaluate(g, random_inputs(g))
        for v, a in zip(g.outputs, outs):
            if a.shape != v.shape or a.dtype != np.dtype(v.dtype):
                return rel, f"output {v.name} is {a.dtype}{list(a.shape)}, expected {v.type}", 0.0
    except AkgError as e:
        return rel, f"{type(e).__name__}: {e}", 0.0
    return rel, None, time.perf_counter() - start


@needs_corpus
def test_corpus_imports_with_tensor_names_and_round_trips_through_mir(capsys):
    graphs, errors = import_corpus()
    files = corpus_files()
    kernels = [f for f in files if f not in NOT_KERNELS]
    with capsys.disabled():  # the summary shows in every run, not only on failure
        print(f"\nAKG corpus: {len(files)} files, {len(kernels)} kernels, {len(graphs)} imported")
        for rel, e in sorted(errors.items()):
            print(f"  not imported: {rel}: {type(e).__name__}: {e}")
    for rel in NOT_KERNELS:
        assert isinstance(errors.get(rel), ImportFormatError), rel
        assert rel.split("/")[-1] in str(errors[rel])
    assert len(graphs) >= 0.95 * len(kernels)
    for rel, g in graphs.items():  # names as in the file, so .npz keyed by tensor name work
        desc = json.loads((CORPUS / rel).read_text())
        declared_in = [d["tensor_name"] for group in desc["input_desc"] or [] for d in group]
        declared_out = [d["tensor_name"] for d in desc["output_desc"]]
        assert [v.name for v in g.inputs] == declared_in, rel
        names = [v.name for v in g.outputs]
        assert names[:len(declared_out)] == declared_out, rel
        assert all(n.endswith(".inplace") for n in names[len(declared_out):]), rel
        text, weights = emit_mir(g)  # what the importer builds is a graph the .mir format keeps
        assert parse_mir(text, rel, weights=weights) == g, rel


# Kernels whose tensors add up to more than this run in the slow test (pytest -m slow): the
# 88 kernels above 100 MB hold 47 of the corpus's 54 GB of data (the GPT/BERT/transformer
# kernels of 1-3 GB half of it); the 484 below it run in the default run.
LARGE_KERNEL_BYTES = 10**8


def kernel_bytes(g) -> int:
    return sum(v.type.nbytes for v in g.inputs) + sum(v.type.nbytes for n in g.nodes for v in n.outputs)


def run_corpus(kernels: list[str], workers: int) -> dict[str, str]:
    """Run kernels (largest first, so the workers finish together); failures by file."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(workers, maxtasksperchild=20) as pool:
        results = pool.map(run_corpus_kernel, kernels, chunksize=1)
    slowest = sorted(results, key=lambda r: -r[2])[:3]
    print("  slowest: " + ", ".join(f"{r.split('/')[-1][:48]} {s:.1f}s" for r, _, s in slowest))
    return {rel: why for rel, why, _ in results if why is not None}


@needs_corpus
def test_corpus_kernels_run_in_the_reference_interpreter(capsys):
    """Every imported corpus kernel below LARGE_KERNEL_BYTES runs on random inputs; failures and
    the kernels left to the slow test are listed by file."""
    import os

    graphs, errors = import_corpus()
    kernels = [f for f in corpus_files() if f not in NOT_KERNELS]
    size = {rel: kernel_bytes(g) for rel, g in graphs.items()}
    large = sorted((r for r in graphs if size[r] > LARGE_KERNEL_BYTES), key=lambda r: -size[r])
    small = sorted((r for r in graphs if size[r] <= LARGE_KERNEL_BYTES), key=lambda r: -size[r])
    with capsys.disabled():
        print(f"\nAKG corpus: running {len(small)} of {len(kernels)} kernels")
        failed = run_corpus(small, max(1, min(4, os.cpu_count() or 1)))
        ran = sum(rel not in failed for rel in small)
        failed.update({rel: f"{type(e).__name__}: {e}" for rel, e in errors.items() if rel not in NOT_KERNELS})
        print(f"AKG corpus: {ran}/{len(kernels) - len(large)} kernels below {LARGE_KERNEL_BYTES / 1e6:.0f} MB "
              f"import and run ({ran / (len(kernels) - len(large)):.1%})")
        for rel, why in sorted(failed.items()):
            print(f"  FAILED {rel}: {why}")
        if large:
            print(f"  {len(large)} kernels above {LARGE_KERNEL_BYTES / 1e6:.0f} MB ({sum(size[r] for r in large) / 1e9:.0f} GB "
                  f"of tensors) run in the slow test only; the largest: {large[0]}")
    assert ran >= 0.95 * (len(kernels) - len(large)), failed


@pytest.mark.slow
@needs_corpus
def test_corpus_large_kernels_run_in_the_reference_interpreter(capsys):
    graphs, _ = import_corpus()
    large = sorted((r for r, g in graphs.items() if kernel_bytes(g) > LARGE_KERNEL_BYTES),
                   key=lambda r: -kernel_bytes(graphs[r]))
    with capsys.disabled():
        print(f"\nAKG corpus: running the {len(large)} largest kernels")
        failed = run_corpus(large, 2)  # up to a few GB each: two at a time
        for rel, why in sorted(failed.items()):
            print(f"  FAILED {rel}: {why}")
    assert large and not failed, failed
