"""graph/types.py: dtype names, and what each dtype means through the reference ops and `.mir`."""

import numpy as np
import pytest

from akg.graph.io.mir import emit_mir, parse_mir
from akg.graph.ops import get_op
from akg.graph.types import DTYPES, TensorType, canonical_dtype, is_int, is_storage, is_unsigned, short_dtype


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


def cast(x, to, **attrs):
    return get_op("cast").reference(x, to=to, **attrs)


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


STORAGE = [("bfloat16", "bf16"), ("float8_e4m3fn", "f8e4m3fn"), ("float8_e4m3fnuz", "f8e4m3fnuz"),
           ("float8_e5m2", "f8e5m2"), ("float8_e5m2fnuz", "f8e5m2fnuz")]
SPECIAL = np.array([0.0, -0.0, 1.5, -2.7, 1 / 3, 1e-5, 1e-9, 240, 250, 448, 464, 500, 57344, 61440,
                    65536, 1e6, np.inf, -np.inf, np.nan], np.float32)


@pytest.mark.parametrize("dtype, short", STORAGE)
def test_storage_names_and_mir(dtype, short):
    assert dtype in DTYPES and is_storage(dtype) and short_dtype(dtype) == short
    assert canonical_dtype(np.dtype(dtype)) == dtype
    g = parse_mir(f"graph @g(%x: {short}[2]) {{\n  %c: {short}[2] = const [1.5, -0.25]\n"
                  f"  %y = add(%x, %c) : {short}[2]\n  return %y\n}}\n")
    assert g.constants[g.value("c")].dtype == np.dtype(dtype)
    assert parse_mir(emit_mir(g)[0]) == g


@pytest.mark.parametrize("dtype", [d for d, _ in STORAGE])
def test_storage_casts_round_to_nearest_even_as_ml_dtypes(dtype):
    rng = np.random.default_rng(0)
    x = np.concatenate([SPECIAL, rng.standard_normal(200).astype(np.float32) * 10.0 ** rng.integers(-8, 6, 200)])
    with np.errstate(over="ignore"):  # float16 overflows
        _check_storage_casts(x, dtype)


def _check_storage_casts(x, dtype):
    got = cast(x, dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.astype(np.float32), x.astype(dtype).astype(np.float32))
    # from float16 and float64 through float32; back to float16 exactly
    np.testing.assert_array_equal(cast(x.astype(np.float16), dtype).astype(np.float32),
                                  x.astype(np.float16).astype(np.float32).astype(dtype).astype(np.float32))
    np.testing.assert_array_equal(cast(got, "float16"), got.astype(np.float32).astype(np.float16))


@pytest.mark.parametrize("dtype, top", [("float8_e4m3fn", 448), ("float8_e4m3fnuz", 240), ("float8_e5m2", 57344),
                                        ("float8_e5m2fnuz", 57344)])
def test_float8_saturate_clamps_to_the_largest_finite_value(dtype, top):
    x = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 1.5], np.float32)
    got = cast(x, dtype, saturate=True).astype(np.float32)
    np.testing.assert_array_equal(got, [top, -top, top, -top, np.nan, 1.5])
    wrapped = cast(x, dtype).astype(np.float32)  # without: NaN, or infinity for e5m2
    assert np.isnan(wrapped[4]) and (np.isinf(wrapped[0]) if dtype == "float8_e5m2" else np.isnan(wrapped[0]))


def test_ops_on_storage_types_compute_in_float32_and_round():
    from akg.graph import GraphBuilder, evaluate
    from akg.graph.storage import widen_storage

    b = GraphBuilder("g")
    x, y = b.input("x", (4,), "bfloat16"), b.input("y", (4,), "bfloat16")
    b.output(b.exp(b.add(x, y)), b.less(x, y))
    g = b.build()
    w = widen_storage(g)
    for node in w.nodes:  # kernels see storage values only in casts
        if node.op != "cast":
            assert not any(is_storage(v.dtype) for v in (*node.inputs, *node.outputs)), node
    assert [v.name for v in w.inputs] == ["x", "y"] and [v.type for v in w.outputs] == [v.type for v in g.outputs]
    xs = np.array([1.0, 2.5, -3.0, 0.0078125], "bfloat16")
    ys = np.array([0.00390625, 1.0, 3.0, 1.0], "bfloat16")
    want = np.exp((xs.astype(np.float32) + ys.astype(np.float32)).astype("bfloat16").astype(np.float32)).astype("bfloat16")
    for graph in (g, w):
        e, lt = evaluate(graph, {"x": xs, "y": ys})
        assert e.dtype == np.dtype("bfloat16") and e.tobytes() == want.tobytes()
        assert lt.tolist() == [False, False, True, True]
