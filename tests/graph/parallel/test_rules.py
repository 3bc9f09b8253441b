"""Every sharding rule on simulated ranks: for each op case and every strategy its rule lists
on small meshes, random inputs are sharded as the strategy says (partial sums as random
pieces that add up), each rank runs `emit_local` in one per-rank graph under `simulate`,
and the outputs, unsharded by the strategy's output shardings, equal the op's reference;
ranks meant to hold the same piece hold the same data. The registry walk: every op has a
rule and a case here, and the ops of the example training graphs (mlp, transformer block, a
GPT-style layer, forward and backward) have rules."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
import pytest

from akg.errors import MissingRuleError
from akg.graph import GraphBuilder
from akg.graph.interpreter import random_array
from akg.graph.ops import OPS, get_op
from akg.graph.ops.registry import COLLECTIVE, SHARDING_RULES
from akg.graph.parallel.mesh import Mesh
from akg.graph.parallel.sharding import Sharding
from akg.graph.parallel.simulate import simulate
from akg.graph.parallel.strategy import OpCall, Strategy, emit_local, strategies
from akg.graph.types import TensorType, is_float

DP2 = Mesh.parse("dp=2")
MESH2x2 = Mesh.parse("dp=2,tp=2")
MESH1x4 = Mesh.parse("dp=1,tp=4")
MESH2x2x2 = Mesh.parse("pp=2,dp=2,tp=2")


def T(shape, dtype="float32") -> TensorType:
    return TensorType(shape, dtype)


@dataclass
class Case:
    """One call of an op; `positive` draws float inputs > 0.5 (log, sqrt, division);
    `wide`: also checked on a 2x2x2 mesh."""

    op: str
    ins: list
    attrs: dict = field(default_factory=dict)
    positive: bool = False
    wide: bool = False

    @property
    def call(self) -> OpCall:
        opdef = get_op(self.op)
        attrs = opdef.check_attrs(self.attrs)
        return OpCall(self.op, tuple(self.ins), opdef.infer_types(list(self.ins), attrs), attrs)

    @property
    def id(self) -> str:
        shapes = "-".join("x".join(map(str, t.shape)) or "s" for t in self.ins)
        attrs = ",".join(f"{k}={v}" for k, v in self.attrs.items())
        return f"{self.op}-{shapes}" + (f"-{attrs}" if attrs else "")


# --- cases ------------------------------------------------------------------------------------

_UNARY_FLOAT = ["exp", "tanh", "sigmoid", "relu", "relu6", "erf", "sin", "cos", "floor", "ceil",
                "round", "sign", "abs", "isnan", "isinf"]
_UNARY_POSITIVE = ["log", "sqrt", "rsqrt", "reciprocal"]
_BINARY = ["add", "sub", "mul", "maximum", "minimum", "equal", "not_equal", "less", "less_equal",
           "greater", "greater_equal"]

ELEMENTWISE = [
    Case("neg", [T((4, 8))], wide=True),
    *(Case(op, [T((4, 8))]) for op in _UNARY_FLOAT),
    *(Case(op, [T((4, 8))], positive=True) for op in _UNARY_POSITIVE),
    Case("gelu", [T((4, 8))], {"approximate": "tanh"}),
    Case("gelu", [T((2, 4, 8))]),
    Case("add", [T((4, 8)), T((4, 8))], wide=True),
    Case("add", [T((2, 4, 8)), T((8,))]),
    Case("sub", [T((4, 1)), T((4, 8))]),
    Case("mul", [T((4, 8)), T((8,))], wide=True),
    Case("mul", [T((4, 8)), T(())]),
    Case("div", [T((4, 8)), T((4, 1))], positive=True),
    Case("pow", [T((4, 8)), T((4, 8))], positive=True),
    Case("mod", [T((4, 8)), T((4, 8))], positive=True),
    *(Case(op, [T((4, 8)), T((4, 8))]) for op in _BINARY[3:]),
    Case("div", [T((4, 8), "int32"), T((4, 8), "int32")], positive=True),
    Case("logical_and", [T((4, 8), "bool"), T((4, 8), "bool")]),
    Case("logical_or", [T((4, 8), "bool"), T((8,), "bool")]),
    Case("logical_not", [T((4, 8), "bool")]),
    Case("where", [T((4, 8), "bool"), T((4, 8)), T(())], wide=True),
    Case("where", [T((4, 1), "bool"), T((4, 8)), T((4, 8))]),
    Case("cast", [T((4, 8))], {"to": "float64"}),
    Case("cast", [T((4, 8))], {"to": "int32"}),
    Case("complex", [T((4, 8)), T((8,))]),
    Case("real", [T((4, 8), "complex64")]),
    Case("imag", [T((4, 8), "complex64")]),
]

REDUCE = [
    Case("sum", [T((4, 8))], {"axes": [1]}, wide=True),
    Case("sum", [T((2, 4, 8))], {"axes": [0, 2], "keepdims": True}),
    Case("sum", [T((4, 8))]),
    Case("sum", [T((4, 8), "int32")], {"axes": [0]}),
    Case("mean", [T((4, 8))], {"axes": [1]}, wide=True),
    Case("mean", [T((2, 4, 8))], {"axes": [1, 2], "keepdims": True}),
    Case("mean", [T((4, 8))]),
    *(Case(op, [T((4, 8))], {"axes": [1]}) for op in ("max", "min", "prod")),
    Case("max", [T((2, 4, 8))], {"axes": [0, 2], "keepdims": True}),
    Case("argmax", [T((4, 8))], {"axis": 1}),
    Case("argmin", [T((2, 4, 8))], {"axis": 0, "keepdims": True}),
]

NN = [
    Case("softmax", [T((4, 8))], wide=True),
    Case("softmax", [T((2, 4, 8))], {"axis": 1}),
    Case("log_softmax", [T((4, 8))], {"axis": 0}),
    Case("layer_norm", [T((4, 8)), T((8,)), T((8,))], wide=True),
    Case("layer_norm", [T((2, 4, 8)), T((4, 8)), T((4, 8))], {"begin_norm_axis": 1}),
    Case("batch_norm", [T((2, 4, 2, 2)), T((4,)), T((4,)), T((4,)), T((4,))], positive=True),
    Case("variance", [T((4, 8))], {"axes": [1]}),
    Case("variance", [T((2, 4, 8))], {"axes": [0, 2], "keepdims": True}),
    Case("dropout", [T((4, 8))], {"rate": 0.1}),
    Case("cross_entropy", [T((8, 4)), T((8,), "int32")], wide=True),
    Case("cross_entropy", [T((8, 4)), T((8,), "int32")], {"reduction": "sum"}),
    Case("cross_entropy", [T((8, 4)), T((8,), "int32")], {"reduction": "none"}),
    Case("nll_loss", [T((8, 4)), T((8,), "int32")], wide=True),
    Case("nll_loss", [T((8, 4)), T((8,), "int32")], {"reduction": "sum"}),
    Case("nll_loss", [T((8, 4)), T((8,), "int32")], {"reduction": "none"}),
]

LINALG = [
    Case("matmul", [T((4, 8)), T((8, 4))], wide=True),
    Case("matmul", [T((8, 4)), T((4, 8))], {"transpose_a": True, "transpose_b": True}),
    Case("batch_matmul", [T((2, 4, 8)), T((2, 8, 4))], wide=True),
    Case("batch_matmul", [T((2, 4, 8)), T((2, 4, 8))], {"transpose_b": True}),
    Case("batch_matmul", [T((2, 8, 4)), T((8, 4))], {"transpose_a": True}),
    Case("batch_matmul", [T((2, 1, 4, 8)), T((4, 8, 4))]),
    Case("dense", [T((4, 8)), T((4, 8)), T((4,))], wide=True),
    Case("dense", [T((2, 4, 8)), T((4, 8))]),
    Case("dense", [T((8,)), T((4, 8)), T((4,))]),
]

LAYOUT = [
    Case("reshape", [T((8, 16))], {"shape": [8, 4, 4]}, wide=True),
    Case("reshape", [T((4, 2, 8))], {"shape": [8, 8]}),
    Case("reshape", [T((4, 8))], {"shape": [1, 4, 2, -1]}),
    Case("reshape", [T((4, 1, 8))], {"shape": [4, 8]}),
    Case("reshape", [T((2, 4, 4))], {"shape": [8, 4]}, wide=True),
    Case("reshape", [T((8, 4))], {"shape": [2, 4, 4]}, wide=True),
    Case("reshape", [T((2, 2, 8))], {"shape": [2, 16]}),
    Case("reshape", [T((4, 6))], {"shape": [2, 12]}),
    Case("transpose", [T((2, 4, 8))], {"perm": [1, 0, 2]}, wide=True),
    Case("transpose", [T((4, 8))]),
    Case("broadcast_to", [T((4, 1))], {"shape": [2, 4, 8]}),
    Case("broadcast_to", [T(())], {"shape": [4, 8]}),
    Case("squeeze", [T((4, 1, 8))]),
    Case("squeeze", [T((1, 4, 8))], {"axes": [0]}),
    Case("expand_dims", [T((4, 8))], {"axis": 1}),
    Case("slice", [T((4, 8))], {"begin": [0, 2], "end": [4, 6]}),
    Case("slice", [T((4, 8, 4))], {"begin": [0, 0, -3], "end": [100, 8, 4]}),
    Case("strided_slice", [T((4, 8))], {"begin": [0, 7], "end": [4, -9], "strides": [1, -2]}),
    Case("concat", [T((4, 8)), T((2, 8)), T((2, 8))], {"axis": 0}),
    Case("concat", [T((4, 2)), T((4, 6))], {"axis": 1}),
    Case("split", [T((4, 12))], {"axis": 1, "sections": 3}),
    Case("split", [T((8, 4))], {"axis": 0, "sizes": [2, 6]}),
    Case("pad", [T((4, 8))], {"before": [0, 1], "after": [0, 2]}),
    Case("pad", [T((4, 8))], {"before": [1, 0], "after": [0, 0], "value": 1.5}),
    Case("dilate", [T((4, 4))], {"strides": [1, 2]}),
]

INDEX = [
    Case("gather", [T((8, 4)), T((4,), "int32")], wide=True),
    Case("gather", [T((8, 4)), T((2, 4), "int32")]),
    Case("gather", [T((4, 8, 2)), T((4,), "int64")], {"axis": 1}),
    Case("scatter_add", [T((8, 4)), T((4,), "int32"), T((4, 4))], wide=True),
    Case("scatter_add", [T((4, 8)), T((2, 4), "int32"), T((4, 2, 4))], {"axis": 1}),
    Case("scatter_add", [T((8, 4), "int32"), T((4,), "int32"), T((4, 4), "int32")]),
    Case("one_hot", [T((8,), "int32")], {"depth": 4}, wide=True),
    Case("one_hot", [T((2, 4), "int32")], {"depth": 8, "axis": 0, "on_value": 2.0, "off_value": -1.0}),
]

CONV = [
    Case("conv2d", [T((2, 4, 5, 5)), T((4, 4, 3, 3))], {"padding": [1, 1]}, wide=True),
    Case("conv2d", [T((2, 4, 6, 6)), T((8, 2, 3, 3))], {"strides": [2, 2], "groups": 2}),
    Case("conv2d", [T((4, 8, 4, 4)), T((8, 1, 3, 3))], {"groups": 8, "dilation": [2, 2], "padding": [2, 2]}),
    Case("winograd_input", [T((2, 4, 6, 6))], {"out_hw": [6, 6], "cols": 4}, wide=True),
    Case("winograd_product", [T((4, 4, 4, 4)), T((4, 4, 4, 6, 4))], wide=True),
    Case("winograd_output", [T((4, 4, 4, 6, 4))], {"batch": 2, "out_hw": [6, 5], "cols": 4}, wide=True),
    Case("max_pool2d", [T((2, 4, 4, 4))], {"kernel": [2, 2]}),
    Case("avg_pool2d", [T((2, 4, 5, 5))], {"kernel": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    Case("global_avg_pool2d", [T((2, 4, 3, 3))], {"keepdims": False}),
]

CASES: list[Case] = [*ELEMENTWISE, *REDUCE, *NN, *LINALG, *LAYOUT, *INDEX, *CONV]


# --- the check ----------------------------------------------------------------------------------


def _inputs(case: Case, call: OpCall, rng) -> list[np.ndarray]:
    opdef = get_op(call.op)
    bounds = opdef.index_bounds(*call.ins, **call.attrs) if opdef.index_bounds else {}
    out = []
    for i, t in enumerate(call.ins):
        a = random_array(t, rng, bounds.get(i))
        if case.positive and (is_float(t.dtype) or t.dtype.startswith("int")) and i not in bounds:
            a = (np.abs(a) + (0.5 if is_float(t.dtype) else 1)).astype(t.dtype)
        out.append(a)
    return out


def _piece(s: Sharding, whole: np.ndarray, mesh: Mesh, rank: int, seed: int) -> np.ndarray:
    """`rank`'s piece of `whole` under `s`; a partial sum as random pieces adding up to the
    piece (the same on ranks holding the same piece)."""
    piece = Sharding(s.dims).shard(whole, mesh, rank)
    if not s.partial:
        return piece
    coords = mesh.coords(rank)
    where = [coords[a] for d in s.dims for a in d]
    k, pos = mesh.group_size(s.partial), mesh.index_in(rank, s.partial)

    def noise(p: int) -> np.ndarray:
        return np.random.default_rng([seed, *where, p]).standard_normal(piece.shape)

    mean = sum(noise(p) for p in range(k)) / k
    return (piece / k + noise(pos) - mean).astype(whole.dtype)


def _key(s: Sharding, mesh: Mesh, rank: int) -> tuple:
    coords = mesh.coords(rank)
    return tuple(coords[a] for a in s.axes)


def check_strategy(call: OpCall, strategy: Strategy, mesh: Mesh, whole: list[np.ndarray],
                   expected: tuple[np.ndarray, ...], seed: int = 0) -> None:
    b = GraphBuilder("rank")
    values = [b.input(f"in{i}", s.local_shape(t.shape, mesh), t.dtype)
              for i, (s, t) in enumerate(zip(strategy.inputs, call.ins))]
    outs = emit_local(b, call, strategy, values, mesh)
    for v, s, t in zip(outs, strategy.outputs, call.outs):
        assert v.type == TensorType(s.local_shape(t.shape, mesh), t.dtype), \
            f"{strategy}: local output {v.type}, the sharding says {s.local_shape(t.shape, mesh)}"
    b.output(*outs)
    per_rank = [{f"in{i}": _piece(s, a, mesh, r, seed + i) for i, (s, a) in enumerate(zip(strategy.inputs, whole))}
                for r in range(mesh.size)]
    got = simulate(b.build(), mesh, per_rank)
    for j, (s, want) in enumerate(zip(strategy.outputs, expected)):
        pieces = [g[j] for g in got]
        first: dict[tuple, np.ndarray] = {}
        for r, p in enumerate(pieces):  # replicas of one piece agree
            k = _key(s, mesh, r)
            if k in first:
                np.testing.assert_allclose(p, first[k], rtol=1e-6, atol=1e-6,
                                           err_msg=f"{call.op} {strategy} on {mesh}: rank {r}'s replica")
            else:
                first[k] = p
        whole_out = s.unshard(pieces, mesh)
        if is_float(want.dtype) or want.dtype.kind == "c":
            scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))  # float32 summation order
            np.testing.assert_allclose(whole_out, want, rtol=1e-5, atol=1e-5 * scale,
                                       err_msg=f"{call.op} {strategy} on {mesh}")
        else:
            np.testing.assert_array_equal(whole_out, want, err_msg=f"{call.op} {strategy} on {mesh}")


def check_case(case: Case, mesh: Mesh, seed: int = 0) -> list[Strategy]:
    call = case.call
    rng = np.random.default_rng(seed)
    whole = _inputs(case, call, rng)
    opdef = get_op(call.op)
    expected = tuple(np.asarray(a).astype(t.dtype) for a, t in zip(opdef.evaluate(whole, call.attrs), call.outs))
    found = strategies(call, mesh)
    for s in found:
        check_strategy(call, s, mesh, whole, expected, seed)
    return found


def _seed(case: Case) -> int:
    return zlib.crc32(case.id.encode())


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule_on_simulated_ranks(case):
    found = check_case(case, MESH2x2, _seed(case))
    assert len(found) > 1, f"{case.id}: only the replicated strategy on {MESH2x2}"
    check_case(case, DP2, _seed(case))
    check_case(case, MESH1x4, _seed(case))
    if case.wide:
        check_case(case, MESH2x2x2, _seed(case))


# --- the registry walk --------------------------------------------------------------------------


def test_every_op_has_a_rule_and_a_case():
    ops = {n for n in OPS if get_op(n).kind != COLLECTIVE}
    assert sorted(ops - set(SHARDING_RULES)) == [], "add a rule next to the op family (defsharding)"
    assert sorted(ops - {c.op for c in CASES}) == [], "add a case to CASES"
    assert sorted(n for n in SHARDING_RULES if get_op(n).kind == COLLECTIVE) == []


def test_a_missing_rule_names_the_op(monkeypatch):
    monkeypatch.delitem(SHARDING_RULES._items, "relu")
    with pytest.raises(MissingRuleError, match="no sharding rule for op 'relu'"):
        strategies(Case("relu", [T((4, 8))]).call, MESH2x2)


# --- known answers ------------------------------------------------------------------------------


def _by_name(case: Case, mesh: Mesh) -> dict[str, Strategy]:
    return {s.name: s for s in strategies(case.call, mesh)}


def test_megatron_splits_of_a_matmul_pair():
    tp4 = Mesh.parse("tp=4")
    col = _by_name(Case("matmul", [T((32, 64)), T((64, 128))]), tp4)["n(tp)"]
    row = _by_name(Case("matmul", [T((32, 128)), T((128, 64))]), tp4)["k(tp)"]
    assert [str(s) for s in col.inputs + col.outputs] == ["[R, R]", "[R, S(tp)]", "[R, S(tp)]"]
    assert [str(s) for s in row.inputs + row.outputs] == ["[R, S(tp)]", "[S(tp), R]", "[R, R] P(tp)"]
    # the column split's output feeds the row split's input as it is: gelu keeps it
    gelu = _by_name(Case("gelu", [T((32, 128))]), tp4)["d1(tp)"]
    assert gelu.inputs[0] == col.outputs[0] and gelu.outputs[0] == row.inputs[0]


def test_attention_heads_split_through_reshape_and_transpose():
    tp4 = Mesh.parse("tp=4")
    heads = _by_name(Case("reshape", [T((128, 768))], {"shape": [128, 12, 64]}), tp4)["d1(tp)"]
    assert str(heads.outputs[0]) == "[R, S(tp), R]" and heads.attrs == {"shape": [128, 3, 64]}
    t = _by_name(Case("transpose", [T((128, 12, 64))], {"perm": [1, 0, 2]}), tp4)["d1(tp)"]
    assert str(t.outputs[0]) == "[S(tp), R, R]"
    bmm = _by_name(Case("batch_matmul", [T((12, 128, 64)), T((12, 128, 64))], {"transpose_b": True}), tp4)
    assert str(bmm["b0(tp)"].outputs[0]) == "[S(tp), R, R]"
    merge = _by_name(Case("reshape", [T((128, 12, 64))], {"shape": [128, 768]}), tp4)["d1(tp)"]
    assert str(merge.outputs[0]) == "[R, S(tp)]" and merge.attrs == {"shape": [128, 192]}
    # a split the reshape cannot carry: the inner 64 of [.., 12, 64] is not a block of 768
    assert "d2(tp)" not in _by_name(Case("reshape", [T((128, 12, 64))], {"shape": [128, 768]}), tp4)
    # batch and sequence split through a flatten, and back
    flat = _by_name(Case("reshape", [T((2, 4, 16))], {"shape": [8, 16]}), MESH2x2)["d0(dp) d1(tp)"]
    assert str(flat.outputs[0]) == "[S(dp,tp), R]" and flat.attrs == {"shape": [2, 16]}
    back = _by_name(Case("reshape", [T((8, 16))], {"shape": [2, 4, 16]}), MESH2x2)["d0(dp) d0(tp)"]
    assert str(back.outputs[0]) == "[S(dp), S(tp), R]"
    assert "d1(tp)" not in _by_name(Case("reshape", [T((2, 4, 16))], {"shape": [8, 16]}), MESH2x2)


def test_reductions_and_normalisations_keep_their_axes_whole():
    names = lambda case: set(_by_name(case, MESH2x2))  # noqa: E731
    assert "r1(tp)" in names(Case("sum", [T((4, 8))], {"axes": [1]}))
    assert str(_by_name(Case("sum", [T((4, 8))], {"axes": [1]}), MESH2x2)["r1(tp)"].outputs[0]) == "[R] P(tp)"
    assert not any("r1" in n for n in names(Case("max", [T((4, 8))], {"axes": [1]})))
    assert not any("d1" in n for n in names(Case("softmax", [T((4, 8))])))
    assert names(Case("layer_norm", [T((4, 8)), T((8,)), T((8,))])) == \
        {"replicated", "d0(dp)", "d0(tp)", "d0(dp) d0(tp)"}
    assert not any("partial" in n for n in names(Case("exp", [T((4, 8))])))


def test_an_embedding_table_split_by_rows_gives_partial_sums():
    rows = _by_name(Case("gather", [T((64, 16)), T((2, 8), "int32")]), MESH2x2)["rows(tp)"]
    assert [str(s) for s in rows.inputs + rows.outputs] == ["[S(tp), R]", "[R, R]", "[R, R, R] P(tp)"]


def _factorisations(n: int, most: int = 4) -> list[tuple[int, ...]]:
    """Every shape of at most `most` dims (factors 1, 2, 3, 4, 6, 8; 1 at most once) of `n` elements."""
    out = []

    def grow(left: int, shape: tuple[int, ...]) -> None:
        if left == 1:
            out.append(shape)
        if len(shape) < most:
            for f in (1, 2, 3, 4, 6, 8):
                if left % f == 0 and (f > 1 or 1 not in shape):
                    grow(left // f, shape + (f,))
    grow(n, ())
    return [s for s in out if s]


def test_reshape_between_random_shapes():
    """reshape's rule (the most intricate) between sampled pairs of shapes of 48 elements."""
    rng = np.random.default_rng(7)
    shapes = _factorisations(48)
    checked = 0
    for i in rng.choice(len(shapes), size=12, replace=False):
        for j in rng.choice(len(shapes), size=3, replace=False):
            case = Case("reshape", [T(shapes[i])], {"shape": list(shapes[j])})
            checked += len(check_case(case, MESH2x2)) + len(check_case(case, MESH1x4))
    assert checked > 200


# --- the training graphs ------------------------------------------------------------------------


def gpt_layer(vocab: int = 32, seq: int = 8, hidden: int = 16, heads: int = 4):
    """A GPT-style layer: embedding lookup, layer norm, attention (fused qkv, split, heads by
    reshape/transpose, batch_matmul, softmax), gelu MLP, tied output head, cross-entropy."""
    rng = np.random.default_rng(0)
    w = lambda name, *shape: b.const(rng.normal(size=shape).astype("float32") * 0.3, name=name)  # noqa: E731
    b = GraphBuilder("gpt_layer")
    ids, labels = b.input("ids", (seq,), "int32"), b.input("labels", (seq,), "int32")
    wte = w("wte", vocab, hidden)
    x = b.gather(wte, ids)
    h = b.layer_norm(x, w("ln.gamma", hidden), w("ln.beta", hidden))
    q, k, v = b.split(b.add(b.matmul(h, w("qkv.weight", hidden, 3 * hidden)), w("qkv.bias", 3 * hidden)),
                      axis=1, sections=3)

    def split_heads(z):
        return b.transpose(b.reshape(z, shape=[seq, heads, hidden // heads]), perm=[1, 0, 2])

    p = b.softmax(b.mul(b.batch_matmul(split_heads(q), split_heads(k), transpose_b=True), 0.5))
    ctx = b.reshape(b.transpose(b.batch_matmul(p, split_heads(v)), perm=[1, 0, 2]), shape=[seq, hidden])
    x = b.add(x, b.matmul(ctx, w("proj.weight", hidden, hidden)))
    x = b.add(x, b.matmul(b.gelu(b.matmul(x, w("fc.weight", hidden, 4 * hidden))), w("out.weight", 4 * hidden, hidden)))
    b.output(b.cross_entropy(b.matmul(x, wte, transpose_b=True), labels, name="loss"))
    return b.build()


def training_graphs():
    from akg.graph.io import load_model
    from akg.graph.train import train_step, with_mean_square_loss

    block = load_model("examples/transformer_block.mir")
    return {
        "mlp": train_step(load_model("examples/mlp.mir"), "loss"),
        "transformer_block": block,
        "transformer_block.train": train_step(with_mean_square_loss(block), "loss"),
        "gpt_layer.train": train_step(gpt_layer(), "loss", optimizer="adam"),
    }


def test_every_op_of_the_training_graphs_has_strategies():
    for name, graph in training_graphs().items():
        for node in graph.nodes:
            found = strategies(OpCall.of(node), MESH2x2)
            assert found[0].name == "replicated", f"{name}: {node.op}"
    ops = {n.op for g in training_graphs().values() for n in g.nodes}
    for op in ("gather", "scatter_add", "layer_norm", "batch_matmul", "softmax", "gelu", "reshape", "transpose",
               "cross_entropy", "one_hot", "split", "concat", "broadcast_to"):
        assert op in ops  # the graphs exercise what a GPT layer's forward and backward hold


def _check_every_node(graph, mesh: Mesh) -> int:
    checked = 0
    for i, node in enumerate(graph.nodes):
        call = OpCall.of(node)
        case = Case(node.op, list(call.ins), dict(node.attrs),
                    positive=node.op in ("rsqrt", "sqrt", "div", "log", "pow"))
        checked += len(check_case(case, mesh, seed=i))
    return checked


def test_every_strategy_of_a_gpt_training_step():
    """Every node of a GPT-style layer's training step (Adam), every strategy on a 2x2 mesh:
    the op calls autodiff and the optimizer really emit (some 3600 strategies)."""
    from akg.graph.train import train_step

    assert _check_every_node(train_step(gpt_layer(), "loss", optimizer="adam"), MESH2x2) > 3000


@pytest.mark.slow
def test_every_strategy_of_the_mlp_training_step():
    from akg.graph.io import load_model
    from akg.graph.train import train_step

    step = train_step(load_model("examples/mlp.mir"), "loss")
    _check_every_node(step, MESH2x2)
    _check_every_node(step, MESH1x4)
