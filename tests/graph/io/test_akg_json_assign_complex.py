"""Composite JSON: Assign (MindSpore's in-place write) and complex64 kernels (Complex, CReal,
CImag, arithmetic on complex) imported, evaluated by the reference and compiled for cpu."""

from __future__ import annotations

import json

import numpy as np
import pytest

from akg.graph import evaluate, random_inputs
from akg.graph.io.akg_json import parse_akg_json

ELEMANY = ("akg-composite/composite/elemany/level0/"
           "Fused_Cast_Mul_IsInf_IsNan_LogicalOr_ElemAny_Assign_split_13807630631961538942.info")


def t(name, shape, dtype="float32"):
    return {"tensor_name": name, "shape": list(shape), "data_type": dtype, "format": "DefaultFormat"}


def op(name, inputs, output):
    # `"attr": {}` as MindSpore writes it for ops without attributes
    return {"name": name, "attr": {}, "input_desc": [inputs], "output_desc": [output]}


def _kernel(inputs, ops, outputs):
    return {"composite": True, "op": "Fused_Test", "process": "cpu", "input_desc": [[i] for i in inputs],
            "op_desc": ops, "output_desc": outputs}


def _assign_version(corpus):
    """The corpus's ElemAny kernel as MindSpore AKG's own test file has it: the overflow flag
    written by Assign(input_7, flag) instead of InplaceAssign(input_7, flag, flag)."""
    desc = json.loads((corpus / ELEMANY).read_text())
    last = desc["op_desc"][-1]
    assert last["name"] == "InplaceAssign"
    last["name"], last["attr"] = "Assign", None
    last["input_desc"] = last["input_desc"][:2]
    return desc


def test_assign_from_corpus_file(corpus, check_kernel):
    g = parse_akg_json(_assign_version(corpus), "elemany_assign.info")
    assert [v.name for v in g.outputs] == ["output_0_1", "output_0_6", "input_7.inplace"]
    x = random_inputs(g)
    x["input_0"][3] = np.inf  # an overflow: the flag written is 1
    _, flag, ref = evaluate(g, x)
    assert flag.tolist() == [1.0] and ref.tolist() == [1.0]
    check_kernel(g, inputs=x)
    # same graph as the InplaceAssign form of the file
    inplace = parse_akg_json(json.loads((corpus / ELEMANY).read_text()), "elemany.info")
    assert [v.name for v in inplace.outputs] == [v.name for v in g.outputs]


def test_assign_then_read_sees_the_value(check_kernel):
    S = [3, 4]
    g = parse_akg_json(_kernel(
        [t("param", S), t("grad", S)],
        [op("Sub", [t("param", S), t("grad", S)], t("new", S)),
         op("Assign", [t("param", S), t("new", S)], t("assigned", S)),
         op("Mul", [t("param", S), t("grad", S)], t("after", S))],  # reads the assigned param
        [t("assigned", S), t("after", S)]), "assign.info")
    x = random_inputs(g)
    assigned, after, updated = evaluate(g, x)
    np.testing.assert_allclose(assigned, x["param"] - x["grad"])
    np.testing.assert_allclose(after, (x["param"] - x["grad"]) * x["grad"], rtol=1e-6)
    np.testing.assert_array_equal(updated, assigned)
    assert g.outputs[2].name == "param.inplace"
    check_kernel(g)


def _complex_add():
    """MindSpore AKG's complex_add test kernel (shape cut down): CReal/CImag of two complex
    inputs, the parts added, Complex of the sums."""
    S, C = [16, 12], "complex64"
    return _kernel(
        [t("input_0", S, C), t("input_1", S, C)],
        [op("CReal", [t("input_0", S, C)], t("real_0", S)), op("CImag", [t("input_0", S, C)], t("imag_0", S)),
         op("CReal", [t("input_1", S, C)], t("real_1", S)), op("CImag", [t("input_1", S, C)], t("imag_1", S)),
         op("Add", [t("real_0", S), t("real_1", S)], t("real_0_1", S)),
         op("Add", [t("imag_0", S), t("imag_1", S)], t("imag_0_1", S)),
         op("Complex", [t("real_0_1", S), t("imag_0_1", S)], t("output_0_0", S, C))],
        [t("output_0_0", S, C)])


def test_complex_add_kernel(check_kernel):
    g = parse_akg_json(_complex_add(), "complex_add.info")
    x = random_inputs(g)
    (out,) = evaluate(g, x)
    assert out.dtype == np.complex64
    np.testing.assert_allclose(out, x["input_0"] + x["input_1"], rtol=1e-6)
    (got,) = check_kernel(g, inputs=x)(**x)
    assert got.dtype == np.complex64 and got.shape == (16, 12)


@pytest.mark.parametrize("which", ["creal", "complex_fusion", "arith"])
def test_complex_kernels(which, check_kernel):
    S, C = [8, 6], "complex64"
    if which == "creal":
        desc = _kernel([t("input_0", S, C)], [op("CReal", [t("input_0", S, C)], t("output_0_0", S))],
                       [t("output_0_0", S)])
    elif which == "complex_fusion":
        desc = _kernel([t("input_0", S), t("input_1", S)],
                       [op("Add", [t("input_0", S), t("input_1", S)], t("output_pp", S)),
                        op("Complex", [t("output_pp", S), t("input_1", S)], t("output_0_0", S, C))],
                       [t("output_0_0", S, C)])
    else:  # arithmetic on complex values: Mul, RealDiv, Sub, Neg, Abs
        desc = _kernel([t("a", S, C), t("b", S, C)],
                       [op("Mul", [t("a", S, C), t("b", S, C)], t("m", S, C)),
                        op("RealDiv", [t("m", S, C), t("b", S, C)], t("q", S, C)),
                        op("Neg", [t("q", S, C)], t("n", S, C)),
                        op("Sub", [t("n", S, C), t("a", S, C)], t("s", S, C)),
                        op("Abs", [t("s", S, C)], t("mag", S))],
                       [t("s", S, C), t("mag", S)])
    g = parse_akg_json(desc, f"{which}.info")
    check_kernel(g)
