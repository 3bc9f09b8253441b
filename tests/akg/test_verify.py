"""akg/verify.py: how outputs are judged against the reference. Storage floats (bfloat16,
float8) are floats: judged within their tolerance, not bit for bit (`--check` compared a
bfloat16 output exactly, against the 2e-2 / 1e-2 the README states)."""

import ml_dtypes
import numpy as np

from akg.verify import Reference, check_outputs, compare


def _reference(*arrays):
    return Reference(list(arrays), [a.astype(np.float64) if a.dtype.kind != "b" else a for a in arrays])


def test_bfloat16_outputs_are_judged_within_their_tolerance():
    ref = np.array([1.0, 2.0, -3.0, 100.0], np.float32).astype(ml_dtypes.bfloat16)
    one_ulp = (ref.view(np.uint16) + 1).view(ml_dtypes.bfloat16)
    far = (ref.astype(np.float32) * 1.5).astype(ml_dtypes.bfloat16)
    (close,) = check_outputs(["y"], [one_ulp], _reference(ref))
    assert close.ok and (close.rtol, close.atol) == (2e-2, 1e-2)
    assert not check_outputs(["y"], [far], _reference(ref))[0].ok
    assert not compare(["y"], [one_ulp], _reference(ref)) and compare(["y"], [far], _reference(ref))


def test_integer_and_bool_outputs_stay_exact():
    ref = np.array([1, 2, 3], np.int32)
    assert not check_outputs(["i"], [ref + np.array([0, 0, 1], np.int32)], _reference(ref))[0].ok
    flags = np.array([True, False])
    assert check_outputs(["b"], [flags.copy()], _reference(flags))[0].ok


def test_an_output_through_a_float16_cast_is_held_to_float16s_tolerance():
    # the float64 reference rounds through the cast too: a kernel whose float32 value lands on
    # the other side of a float16 rounding midpoint is one float16 ulp away (2^-9 near 1.5)
    from akg.graph import GraphBuilder
    from akg.verify import compare

    b = GraphBuilder("f16")
    x = b.input("x", (4,))
    y = b.add(x, 1.0)
    b.output(b.cast(b.cast(y, to="float16"), to="float32"), y)
    g = b.build()
    ref = Reference.of(g, {"x": np.array([0.5, 0.25, 0.125, 0.0625], np.float32)})
    assert ref.narrowest == ["float16", "float32"]
    off = [ref.declared[0] + np.float32(2 ** -9), ref.declared[1] + np.float32(2 ** -9)]
    assert [m.output for m in compare(g, off, ref)] == [g.outputs[1].name]
    # graph inputs are exact data: a float16 input does not loosen what is computed from it
    b = GraphBuilder("f16in")
    h = b.input("h", (4,), "float16")
    b.output(b.add(b.cast(h, to="float32"), 1.0))
    assert Reference.of(b.build(), {"h": np.ones(4, np.float16)}).narrowest == ["float32"]
