"""The op registry itself: completeness of every OpDef, name lookup, attribute checking, arity,
and (for every registered op) agreement between shape inference and the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

from akg.errors import AttrError, InvalidGraphError, ShapeError, ShardingError, UnknownOpError
from akg.graph import GraphBuilder, evaluate
from akg.graph.interpreter import random_array
from akg.graph.ops import KINDS, OPS, Attr, OpDef, get_op
from akg.graph.ops.registry import ATTR_KINDS, REQUIRED, Attrs
from akg.graph.types import TensorType

FAMILIES = {
    "akg.graph.ops.elementwise", "akg.graph.ops.layout", "akg.graph.ops.reduce",
    "akg.graph.ops.linalg", "akg.graph.ops.conv", "akg.graph.ops.nn", "akg.graph.ops.index",
    "akg.graph.ops.complex", "akg.graph.ops.collective", "akg.graph.ops.winograd",
}


def T(shape, dtype="float32") -> TensorType:
    return TensorType(shape, dtype)


# --- the registry walk ----------------------------------------------------------------------


def test_registry_is_populated():
    assert len(OPS) >= 70
    for name in ("add", "conv2d", "matmul", "sum", "reshape", "softmax", "gather"):
        assert name in OPS


def test_every_op_is_complete():
    problems = []
    for name, opdef in OPS.items():
        if not isinstance(opdef, OpDef):
            problems.append(f"{name}: not an OpDef")
            continue
        if opdef.name != name:
            problems.append(f"{name}: registered under another name than {opdef.name!r}")
        if opdef.kind not in KINDS:
            problems.append(f"{name}: kind {opdef.kind!r}")
        if not callable(opdef.infer):
            problems.append(f"{name}: no shape inference")
        if not callable(opdef.reference):
            problems.append(f"{name}: no NumPy reference")
        if not callable(opdef.flops):
            problems.append(f"{name}: no flops rule")
        if opdef.infer.__module__ not in FAMILIES:
            problems.append(f"{name}: inference defined outside the op families ({opdef.infer.__module__})")
        arity = opdef.arity
        if isinstance(arity, int):
            if arity < 0:
                problems.append(f"{name}: arity {arity}")
        else:
            lo, hi = arity
            if lo < 0 or (hi is not None and hi < lo):
                problems.append(f"{name}: arity {arity}")
        seen = set()
        for a in opdef.attrs:
            if a.kind not in ATTR_KINDS or a.name in seen:
                problems.append(f"{name}: attribute {a}")
            seen.add(a.name)
            if a.default is not REQUIRED and a.default is not None:
                a.coerce(name, a.default)  # defaults must pass their own checks
    assert not problems, "\n".join(problems)


def test_iteration_is_sorted_and_items_agree():
    names = list(OPS)
    assert names == sorted(names)
    assert [n for n, _ in OPS.items()] == names
    assert all(get_op(n) is d for n, d in OPS.items())


def test_register_twice_is_refused():
    with pytest.raises(ValueError, match="'add' is registered twice"):
        OPS.register("add", get_op("add"))


def test_opdef_rejects_unknown_kind():
    with pytest.raises(ValueError, match="kind 'bogus'"):
        OpDef("x", "bogus", 1, (), lambda x: x, lambda x: x)


def test_attr_rejects_unknown_attribute_kind():
    with pytest.raises(ValueError, match="attribute kind 'tensor'"):
        Attr("a", "tensor")


# --- unknown ops ----------------------------------------------------------------------------


def test_unknown_op_names_the_op_and_suggests_close_names():
    with pytest.raises(UnknownOpError) as info:
        get_op("reul")
    msg = str(info.value)
    assert "unknown op 'reul'" in msg
    assert "'relu'" in msg
    assert info.value.op == "reul"


def test_unknown_op_close_names_for_typo():
    with pytest.raises(UnknownOpError, match="did you mean 'conv2d'"):
        get_op("conv2")
    with pytest.raises(UnknownOpError, match="'softmax'"):
        get_op("sofmax")


def test_unknown_op_without_close_names_has_no_hint():
    with pytest.raises(UnknownOpError) as info:
        get_op("zzzzzzzzzzzz")
    assert str(info.value) == "unknown op 'zzzzzzzzzzzz'"


def test_builder_unknown_op():
    b = GraphBuilder()
    x = b.input("x", [2])
    with pytest.raises(UnknownOpError, match="unknown op 'exq'.*'exp'"):
        b.op("exq", x)
    with pytest.raises(AttributeError):
        b.exq(x)


# --- attributes ----------------------------------------------------------------------------


def test_unknown_attribute():
    with pytest.raises(AttrError) as info:
        get_op("relu").check_attrs({"alpha": 0.1})
    msg = str(info.value)
    assert "op 'relu'" in msg and "'alpha'" in msg and "none" in msg
    with pytest.raises(AttrError, match=r"op 'softmax' has no attribute 'axes' \(its attributes: axis\)"):
        get_op("softmax").check_attrs({"axes": [1]})


def test_missing_required_attribute():
    with pytest.raises(AttrError, match=r"op 'reshape' needs attribute 'shape' \(ints\)"):
        get_op("reshape").check_attrs({})
    with pytest.raises(AttrError, match="op 'one_hot' needs attribute 'depth'"):
        get_op("one_hot").check_attrs({})
    with pytest.raises(AttrError, match="op 'cast' needs attribute 'to'"):
        get_op("cast").check_attrs({})


@pytest.mark.parametrize(
    "op, attrs, what",
    [
        ("softmax", {"axis": 1.5}, "an integer"),
        ("softmax", {"axis": True}, "an integer"),
        ("softmax", {"axis": "1"}, "an integer"),
        ("layer_norm", {"epsilon": "small"}, "a number"),
        ("layer_norm", {"epsilon": False}, "a number"),
        ("sum", {"keepdims": 1}, "true or false"),
        ("gelu", {"approximate": 1}, "a string"),
        ("cast", {"to": 3}, "a dtype name"),
        ("reshape", {"shape": [2, 1.0]}, "a list of integers"),
        ("reshape", {"shape": [2, True]}, "a list of integers"),
        ("reshape", {"shape": "2,3"}, "a list of integers"),
        ("sum", {"keepdims": None}, "a value of kind bool"),
    ],
)
def test_wrong_attribute_type(op, attrs, what):
    (attr,) = attrs
    with pytest.raises(AttrError) as info:
        get_op(op).check_attrs(attrs)
    msg = str(info.value)
    assert f"op '{op}'" in msg and f"attribute '{attr}'" in msg and what in msg


def test_unknown_dtype_attribute():
    with pytest.raises(AttrError, match="op 'cast': attribute 'to': unknown dtype 'float8'"):
        get_op("cast").check_attrs({"to": "float8"})


@pytest.mark.parametrize(
    "op, attrs, fragment",
    [
        ("gelu", {"approximate": "erf"}, "must be one of 'none', 'tanh', got 'erf'"),
        ("cross_entropy", {"reduction": "avg"}, "must be one of 'mean', 'sum', 'none'"),
        ("conv2d", {"strides": [0, 1]}, "must be positive"),
        ("conv2d", {"padding": [-1]}, "must not be negative"),
        ("conv2d", {"groups": 0}, "must be positive"),
        ("max_pool2d", {"kernel": [0]}, "must be positive"),
        ("dropout", {"rate": 1.0}, "must be in [0, 1)"),
        ("one_hot", {"depth": 0}, "must be positive"),
        ("pad", {"before": [-1], "after": [0]}, "must not be negative"),
        ("broadcast_to", {"shape": [-2]}, "must not be negative"),
    ],
)
def test_out_of_range_attribute(op, attrs, fragment):
    with pytest.raises(AttrError) as info:
        get_op(op).check_attrs(attrs)
    msg = str(info.value)
    assert f"op '{op}'" in msg and fragment in msg
    assert any(f"attribute '{a}'" in msg for a in attrs)


def test_attribute_canonicalisation():
    attrs = get_op("conv2d").check_attrs({"strides": 2, "padding": np.array([1, 1]).tolist()})
    assert attrs["strides"] == (2,)
    assert attrs["padding"] == (1, 1, 1, 1)  # one spelling: [top, left, bottom, right]
    assert get_op("conv2d").check_attrs({"padding": 2})["padding"] == (2, 2, 2, 2)
    assert get_op("conv2d").check_attrs({"padding": [1, 2, 3, 4]})["padding"] == (1, 2, 3, 4)
    assert attrs["dilation"] == (1, 1) and attrs["groups"] == 1
    assert list(attrs) == ["strides", "padding", "dilation", "groups"]
    assert get_op("cast").check_attrs({"to": "f16"})["to"] == "float16"
    assert get_op("layer_norm").check_attrs({"epsilon": 1})["epsilon"] == 1.0
    assert isinstance(get_op("layer_norm").check_attrs({"epsilon": 1})["epsilon"], float)
    assert get_op("softmax").check_attrs({"axis": np.int64(0)})["axis"] == 0
    assert get_op("sum").check_attrs({})["axes"] is None
    assert get_op("sum").check_attrs({"axes": None})["axes"] is None


def test_attrs_are_hashable_and_compare_by_value():
    a = get_op("sum").check_attrs({"axes": [0, 1]})
    b = get_op("sum").check_attrs({"axes": (0, 1), "keepdims": False})
    c = get_op("sum").check_attrs({"axes": [0]})
    assert a == b and hash(a) == hash(b)
    assert a != c
    assert a != {"axes": (0, 1), "keepdims": False}  # only Attrs equal Attrs
    assert len(a) == 2 and dict(a) == {"axes": (0, 1), "keepdims": False}
    assert repr(a) == "{axes=(0, 1), keepdims=False}"
    assert Attrs() == Attrs({})


def test_builder_reports_attribute_errors_with_op_name():
    b = GraphBuilder()
    x = b.input("x", [2, 3])
    with pytest.raises(AttrError, match="op 'sum' has no attribute 'axis'"):
        b.sum(x, axis=0)
    with pytest.raises(AttrError, match="op 'transpose': attribute 'perm' expects a list of integers"):
        b.transpose(x, perm="10")


# --- arity ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, n, want",
    [
        ("add", 1, "takes 2 inputs, got 1"),
        ("add", 3, "takes 2 inputs, got 3"),
        ("relu", 0, "takes 1 inputs, got 0"),
        ("where", 2, "takes 3 inputs, got 2"),
        ("concat", 0, r"takes 1\.\. inputs, got 0"),
        ("dense", 1, r"takes 2\.\.3 inputs, got 1"),
        ("dense", 4, r"takes 2\.\.3 inputs, got 4"),
        ("batch_norm", 4, "takes 5 inputs, got 4"),
    ],
)
def test_arity_errors_name_the_op(op, n, want):
    opdef = get_op(op)
    with pytest.raises(InvalidGraphError, match=f"op '{op}' {want}"):
        opdef.infer_types([T((2, 2))] * n, opdef.check_attrs({}))


def test_arity_through_builder():
    b = GraphBuilder()
    x = b.input("x", [2])
    with pytest.raises(InvalidGraphError, match="op 'mul' takes 2 inputs, got 1"):
        b.mul(x)


def test_declared_arities():
    assert get_op("add").arity == 2
    assert get_op("relu").arity == 1
    assert get_op("where").arity == 3
    assert get_op("concat").arity == (1, None)
    assert get_op("dense").arity == (2, 3)
    assert get_op("layer_norm").arity == 3
    assert get_op("batch_norm").arity == 5
    assert get_op("conv2d").arity == 2


def test_shape_errors_are_prefixed_with_the_op_name():
    opdef = get_op("add")
    with pytest.raises(ShapeError) as info:
        opdef.infer_types([T((2,)), T((3,))], opdef.check_attrs({}))
    assert str(info.value).startswith("op 'add': ")
    assert str(info.value).count("op 'add'") == 1


# --- every op: inference agrees with the reference -----------------------------------------

# (input types, attributes) for one representative call of every registered op.
SAMPLES: dict[str, tuple[list[TensorType], dict]] = {
    # collectives on a one-device group: the identity (or its shape change), evaluable alone
    **{op: ([T((2, 3))], {"mesh": "dp=1", "axes": "dp"}) for op in ("all_reduce", "mark_partial")},
    **{op: ([T((2, 3))], {"mesh": "dp=1", "axes": "dp", "dim": 1})
       for op in ("all_gather", "reduce_scatter", "shard_slice")},
    "all_to_all": ([T((2, 3))], {"mesh": "dp=1", "axes": "dp", "split_dim": 0, "concat_dim": 1}),
    "send": ([T((2, 3))], {"mesh": "pp=1", "axes": "pp", "shift": 0, "tag": "x"}),
    "recv": ([], {"mesh": "pp=2", "axes": "pp", "shift": -1, "tag": "x", "shape": [2, 3], "dtype": "float32"}),
    "complex": ([T((2, 3)), T((3,))], {}),
    "real": ([T((2, 3), "complex64")], {}),
    "imag": ([T((2, 3), "complex64")], {}),
    **{op: ([T((2, 3))], {}) for op in (
        "neg", "abs", "exp", "sqrt", "rsqrt", "reciprocal", "log", "tanh", "sigmoid", "relu",
        "relu6", "erf", "sin", "cos", "floor", "ceil", "round", "sign", "isnan", "isinf", "gelu",
        "dropout", "softmax", "log_softmax")},
    **{op: ([T((2, 3)), T((3,))], {}) for op in (
        "add", "sub", "mul", "div", "pow", "maximum", "minimum", "mod", "equal", "not_equal",
        "less", "less_equal", "greater", "greater_equal")},
    "logical_not": ([T((2, 3), "bool")], {}),
    "logical_and": ([T((2, 1), "bool"), T((3,), "bool")], {}),
    "logical_or": ([T((2, 3), "bool"), T((), "bool")], {}),
    "where": ([T((2, 1), "bool"), T((3,)), T((2, 3))], {}),
    "cast": ([T((2, 3))], {"to": "int32"}),
    "broadcast_to": ([T((3, 1))], {"shape": [2, 3, 4]}),
    "reshape": ([T((2, 3, 4))], {"shape": [4, -1]}),
    "transpose": ([T((2, 3, 4))], {"perm": [2, 0, 1]}),
    "squeeze": ([T((1, 3, 1))], {}),
    "expand_dims": ([T((2, 3))], {"axis": 1}),
    "slice": ([T((4, 5))], {"begin": [1, -3], "end": [3, 100]}),
    "strided_slice": ([T((4, 5))], {"begin": [3, 0], "end": [-5, 5], "strides": [-1, 2]}),
    "concat": ([T((2, 3)), T((2, 1)), T((2, 2))], {"axis": 1}),
    "split": ([T((6, 2))], {"sizes": [1, 2, 3]}),
    "pad": ([T((2, 3))], {"before": [1, 0], "after": [0, 2], "value": 7.0}),
    "dilate": ([T((2, 3))], {"strides": [2, 3]}),
    **{op: ([T((2, 3, 4))], {"axes": [0, 2], "keepdims": True}) for op in (
        "sum", "mean", "max", "min", "prod")},
    "argmax": ([T((2, 3, 4))], {"axis": 1}),
    "argmin": ([T((2, 3, 4))], {"axis": -1, "keepdims": True}),
    "matmul": ([T((3, 2)), T((4, 3))], {"transpose_a": True, "transpose_b": True}),
    "batch_matmul": ([T((2, 1, 3, 4)), T((5, 4, 2))], {}),
    "dense": ([T((2, 5, 3)), T((4, 3)), T((4,))], {}),
    "conv2d": ([T((2, 4, 7, 6)), T((6, 2, 3, 2))],
               {"strides": [2, 1], "padding": [1, 0, 2, 1], "dilation": [1, 2], "groups": 2}),
    "winograd_input": ([T((2, 3, 5, 6))], {"padding": [1, 0], "out_hw": [5, 4], "cols": 3}),
    "winograd_product": ([T((4, 4, 5, 3)), T((4, 4, 3, 6, 3))], {}),
    "winograd_output": ([T((4, 4, 5, 6, 3))], {"batch": 2, "out_hw": [5, 4], "cols": 3}),
    "max_pool2d": ([T((1, 2, 5, 5))], {"kernel": [3], "strides": [2], "padding": [1], "ceil_mode": True}),
    "avg_pool2d": ([T((1, 2, 5, 5))], {"kernel": [3, 2], "padding": [1, 1], "count_include_pad": False}),
    "global_avg_pool2d": ([T((2, 3, 4, 5))], {"keepdims": False}),
    "layer_norm": ([T((2, 3, 4)), T((3, 4)), T((3, 4))], {"begin_norm_axis": 1}),
    "batch_norm": ([T((2, 3, 4)), T((3,)), T((3,)), T((3,)), T((3,))], {}),
    "variance": ([T((2, 3, 4))], {"axes": [0, 2]}),
    "nll_loss": ([T((4, 3)), T((4,), "int32")], {}),
    "cross_entropy": ([T((4, 3)), T((4,), "int64")], {"reduction": "none"}),
    "gather": ([T((5, 3)), T((2, 2), "int32")], {"axis": 0}),
    "scatter_add": ([T((3, 5)), T((2, 2), "int32"), T((3, 2, 2))], {"axis": 1}),
    "one_hot": ([T((2, 3), "int32")], {"depth": 4, "axis": 1}),
}


NEEDS_PEERS = {"recv"}  # pipeline stages: evaluable only with the sending stage (graph/parallel/stages.py)


def test_samples_cover_every_op():
    assert sorted(set(OPS) - set(SAMPLES)) == [], "add a sample for every new op"
    assert sorted(set(SAMPLES) - set(OPS)) == []


def _sample_arrays(opdef, types, attrs, rng):
    bounds = opdef.index_bounds(*types, **attrs) if opdef.index_bounds else {}
    arrays = []
    for i, t in enumerate(types):
        a = random_array(t, rng, bounds.get(i))
        if opdef.name in ("sqrt", "rsqrt", "log") and a.dtype.kind == "f":
            a = np.abs(a) + 0.5
        if opdef.name == "batch_norm" and i == 4:
            a = np.abs(a)  # variance
        arrays.append(a)
    return arrays


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_reference_matches_inferred_types(op):
    opdef = get_op(op)
    types, given = SAMPLES[op]
    attrs = opdef.check_attrs(given)
    out_types = opdef.infer_types(types, attrs)
    rng = np.random.default_rng(0)
    arrays = _sample_arrays(opdef, types, attrs, rng)
    if op in NEEDS_PEERS:  # a value from another rank: no reference alone, a clear error
        with pytest.raises(ShardingError, match="another stage"):
            opdef.evaluate(arrays, attrs)
        return
    with np.errstate(all="ignore"):
        outs = opdef.evaluate(arrays, attrs)
    assert len(outs) == len(out_types)
    for o, t in zip(outs, out_types):
        o = np.asarray(o)
        assert o.shape == t.shape, (op, o.shape, t)
        assert o.dtype == np.dtype(t.dtype), (op, o.dtype, t)


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_every_op_runs_through_builder_and_interpreter(op):
    opdef = get_op(op)
    types, given = SAMPLES[op]
    b = GraphBuilder()
    xs = [b.input(f"in{i}", t.shape, t.dtype) for i, t in enumerate(types)]
    out = b.op(op, *xs, **given)
    outs = out if isinstance(out, tuple) else (out,)
    b.output(*outs)
    graph = b.build()
    arrays = _sample_arrays(opdef, types, opdef.check_attrs(given), np.random.default_rng(1))
    if op in NEEDS_PEERS:
        with pytest.raises(ShardingError, match="another stage"):
            evaluate(graph, arrays)
        return
    got = evaluate(graph, arrays)
    with np.errstate(all="ignore"):
        want = opdef.evaluate(arrays, opdef.check_attrs(given))
    assert len(got) == len(want) == len(outs)
    for g, w, v in zip(got, want, outs):
        assert g.shape == v.shape and g.dtype == np.dtype(v.dtype)
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_flops_are_nonnegative_ints(op):
    opdef = get_op(op)
    types, given = SAMPLES[op]
    attrs = opdef.check_attrs(given)
    outs = opdef.infer_types(types, attrs)
    flops = opdef.count_flops(types, outs, attrs)
    assert isinstance(flops, int) and flops >= 0


def test_flops_of_known_ops():
    def flops(op, types, **given):
        d = get_op(op)
        attrs = d.check_attrs(given)
        return d.count_flops(types, d.infer_types(types, attrs), attrs)

    assert flops("add", [T((2, 3)), T((3,))]) == 6
    assert flops("matmul", [T((4, 5)), T((5, 6))]) == 2 * 4 * 6 * 5
    assert flops("matmul", [T((5, 4)), T((5, 6))], transpose_a=True) == 2 * 4 * 6 * 5
    assert flops("conv2d", [T((1, 4, 5, 5)), T((8, 2, 3, 3))], groups=2) == 2 * (8 * 3 * 3) * 2 * 9
    assert flops("reshape", [T((2, 3))], shape=[6]) == 0
    assert flops("sum", [T((2, 3))]) == 6
    assert flops("dense", [T((2, 3)), T((4, 3)), T((4,))]) == 2 * 8 * 3 + 8
