"""graph/types.py: dtype names, and what each dtype means through the reference ops and `.mir`."""

import numpy as np
import pytest

from akg.graph.io.mir import emit_mir, parse_mir
from akg.graph.ops import get_op
from akg.graph.types import DTYPES, TensorType, canonical_dtype, is_int, is_unsigned, short_dtype


@pytest.mark.parametrize("dtype, short", [("uint16", "u16"), ("uint32", "u32"), ("uint64", "u64")])
def test_unsigned_names(dtype, short):
    assert dtype in DTYPES and is_int(dtype) and is_unsigned(dtype)
    assert short_dtype(dtype) == short and canonical_dtype(short) == dtype
    assert canonical_dtype(np.dtype(dtype)) == dtype
    assert str(TensorType((2,), dtype)) == f"{short}[2]"
    assert not is_unsigned("int64")


def test_mir_round_trips_the_full_uint64_range():
    text = ("graph @g(%x: u64[3]) {\n"
            "  %c: u64[3] = const [0, 9223372036854775808, 18446744073709551615]\n"
            "  %y = add(%x, %c) : u64[3]\n  return %y\n}\n")
    g = parse_mir(text)
    assert g.constants[g.value("c")].tolist() == [0, 2**63, 2**64 - 1]
    assert parse_mir(emit_mir(g)[0]) == g
    for bad in ("[0, 1, 18446744073709551616]", "[0, 1, -1]"):
        with pytest.raises(Exception, match="out of range for u64"):
            parse_mir(text.replace("[0, 9223372036854775808, 18446744073709551615]", bad))


def cast(x, to):
    return get_op("cast").reference(x, to=to)


@pytest.mark.parametrize("to", ["uint32", "uint64"])
def test_float_to_unsigned_truncates_then_wraps(to):
    x = np.array([-300.7, -1.5, -0.5, 0.0, 1.7, 65535.5, 4.0e9], np.float32)
    bits = np.iinfo(to).bits
    want = [(int(np.trunc(v)) % 2**bits) for v in x.tolist()]
    got = cast(x, to)
    assert got.dtype == np.dtype(to) and got.tolist() == want
    assert cast(x[:5].astype(np.float16), to).tolist() == want[:5]


def test_float_to_uint64_above_int64():
    x = np.array([2.0**63, 1e19, 2.0**64 - 2048], np.float64)
    assert cast(x, "uint64").tolist() == [2**63, 10**19, 2**64 - 2048]


def test_unsigned_integer_casts_follow_numpy():
    x = np.array([0, 1, 255, 65535, 2**32 - 1, 2**63, 2**64 - 1], np.uint64)
    for to in ("uint8", "uint16", "uint32", "int8", "int32", "int64", "float32", "float64", "bool"):
        np.testing.assert_array_equal(cast(x, to), x.astype(to))
    for to in ("uint16", "uint32", "uint64"):
        y = np.array([-70000, -1, 0, 1, 65536], np.int32)
        np.testing.assert_array_equal(cast(y, to), y.astype(to))
