"""Scalar operations as TIR (akg.polyhedral.tir_ops)."""

import numpy as np
from tvm import tirx

from akg.polyhedral.tir_ops import extremum


def test_a_number_operand_needs_no_nan_test():
    # relu and clip: `0 > x ? 0 : x` returns a NaN x and is one max instruction
    x = tirx.Var("x", "float32")
    for op in ("max", "min"):
        for a, b in ((x, tirx.const(0.0, "float32")), (tirx.const(0.0, "float32"), x)):
            e = extremum(op, a, b, "float32")
            assert isinstance(e, tirx.Select) and "isnan" not in str(e)
            assert isinstance(e.true_value, tirx.FloatImm)


def test_two_values_are_tested_for_nan_and_integers_and_opted_out_targets_keep_max():
    x, y = tirx.Var("x", "float32"), tirx.Var("y", "float32")
    e = extremum("max", x, y, "float32")
    assert isinstance(e, tirx.Select) and "isnan(y)" in str(e)
    assert np.isnan(e.true_value.value)
    assert isinstance(extremum("max", x, y, "float32", nan=False), tirx.Max)
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    assert isinstance(extremum("min", i, j, "int32"), tirx.Min)
