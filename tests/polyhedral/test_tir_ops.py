"""Scalar operations as TIR (akg.polyhedral.tir_ops)."""

import numpy as np
from tvm import tirx

import tvm
from tvm.sym.iter_affine_map import iter_map_simplify

from akg.polyhedral.tir_ops import extremum, floor_div, floor_mod


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


def test_indices_that_fall_with_a_loop_keep_their_value_through_tvms_simplification():
    # TVM's iterator simplification (FlattenBuffer's) made (5 - c) // 2 into c // -2 + 2
    c = tirx.Var("c", "int32")
    dom = {c: tvm.ir.Range.from_min_extent(0, 12)}
    assert str(iter_map_simplify([tirx.floordiv(5 - c, 2)], dom)[0]) == "c // -2 + 2"  # the TVM bug
    for k, base, step in ((2, 5, 1), (4, 11, 1), (3, 7, 1), (2, 9, 2), (3, 30, 2)):
        a = base - step * c
        div, mod = (iter_map_simplify([f(a, tirx.const(k, "int32"))], dom)[0] for f in (floor_div, floor_mod))
        for v in range(12):  # TVM prints floor division and modulo as Python spells them
            got = [eval(str(e), {"c": v}) for e in (div, mod)]
            assert got == [(base - step * v) // k, (base - step * v) % k], (k, base, step, v, str(div), str(mod))
    i = tirx.Var("i", "int32")
    assert str(floor_div(i + 3, tirx.const(2, "int32"))) == str(tirx.floordiv(i + 3, 2))  # rising: left alone
